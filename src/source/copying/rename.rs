//! A collection renamed into a database or deployment scope while its snapshot runs: its
//! documents exist under a name the plan never listed, so it joins the running snapshot.
//!
//! Invariant: its `snapshot_start` comes after the `rename` event that made it appear, its
//! copy after that.

use std::sync::Arc;

use tracing::info;

use super::{Copy, Out};
use crate::event::SourceItem;
use crate::snapshot::{CopyTarget, NamespaceCopy, plan};

impl Copy<'_> {
    /// The target of a `rename` event into the pipeline's database or deployment scope, when
    /// the plan does not hold it: its documents exist under a name the plan never listed, and
    /// the stream will carry only their later changes.
    pub(in crate::source) fn renamed_into_scope(
        &self,
        item: &SourceItem,
    ) -> Option<(String, String)> {
        let SourceItem::Event { raw, .. } = item else {
            return None;
        };
        if raw.get_str("operationType").ok()? != "rename" {
            return None;
        }
        let to = raw.get_document("to").ok()?;
        let (db, coll) = (to.get_str("db").ok()?, to.get_str("coll").ok()?);
        let p = &self.copier.pipeline;
        let inside = match (&p.database, &p.collection) {
            (Some(scope), None) => scope == db,
            (None, None) => !plan::INTERNAL_DATABASES.contains(&db),
            _ => false,
        };
        let own = (db, coll)
            == (
                self.copier.offsets.database.as_str(),
                self.copier.offsets.collection.as_str(),
            );
        let planned = self
            .state
            .namespaces
            .iter()
            .any(|n| n.db == db && n.coll == coll && !n.done);
        (inside && !own && !planned && !coll.starts_with("system."))
            .then(|| (db.to_owned(), coll.to_owned()))
    }

    /// Adds `(db, coll)` to the running snapshot: its start marker comes after the event that
    /// made it appear, its copy after that.
    pub(in crate::source) fn add(&mut self, (db, coll): (String, String)) {
        let n = NamespaceCopy::new(&db, &coll);
        info!(pipeline = %self.copier.pipeline.name, namespace = %n.namespace(),
              "a collection was renamed into the scope during the snapshot: copying it too");
        self.targets.push(Arc::new(CopyTarget {
            db,
            coll,
            snapshot_id: self.state.id.clone(),
            reason: self.state.reason,
            shard_key: None,
        }));
        self.metrics
            .push(self.copier.metrics.snapshot(&n.namespace()));
        self.started.push(None);
        self.held.add();
        self.state.namespaces.push(n);
        let index = self.state.namespaces.len() - 1;
        self.seq.push(Out::Start(index));
        self.pending.push_back(index);
    }
}
