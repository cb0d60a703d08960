//! The unwrapped form's value (`value = "unwrapped"`; `config/unwrap.rs` lists the feature's
//! pieces): the document after the change as a flat record (README "The unwrapped form").
//!
//! What each event writes:
//! - insert, replace, and an update that carries `fullDocument`: that document, its fields in the
//!   server's order, then the added fields (`__op`, `__ns`, `__ts_ms`) when configured;
//! - an update without a full document (`full_document = "default"`, or a lookup that found
//!   nothing): the `documentKey`'s fields, then each `updatedFields` entry under its dotted name
//!   as MongoDB reports it (`"a.b"`), then `__removed` (the `removedFields` paths) and
//!   `__truncated` (`truncatedArrays`) when not empty, and `__partial: true`, so a consumer never
//!   mistakes the changed fields for the whole document;
//! - a delete: per `deletes`, a tombstone only, or `{…, "__deleted": true}` (the pre-image's
//!   fields when the event carries `fullDocumentBeforeChange`, else the `documentKey`'s), with or
//!   without a tombstone after it;
//! - any other event (drop, rename, dropDatabase, invalidate): the whole event, as
//!   `value = "document"` does, so the topic says the namespace changed;
//! - a copied document: the document, with `__op: "r"`.
//!
//! Invariant: no record has a field twice. A source field with a name the form writes (an
//! added field, `__deleted`, …) is [`Unwrapped::Collides`], which the encoder hands to the
//! `on_ambiguous` policy with the server's document; it is never overwritten.

use bson::{RawBsonRef, RawDocument, RawDocumentBuf};

use crate::config::{AddedField, PipelineConfig, UnwrapDeletes, UnwrapSettings, ValueMode};
use crate::error::encode::Unrepresentable;
use crate::event::ChangeEventView;

/// The names the form writes besides the added fields.
const DELETED: &str = "__deleted";
const REMOVED: &str = "__removed";
const TRUNCATED: &str = "__truncated";
const PARTIAL: &str = "__partial";

/// A pipeline's unwrapped form.
#[derive(Debug, Clone)]
pub(crate) struct Unwrapper {
    deletes: UnwrapDeletes,
    added: Vec<AddedField>,
}

/// An event's value in the form.
pub(super) enum Unwrapped<'a> {
    /// The whole event (an event without a document).
    Event,
    /// `fullDocument` as the server sent it (nothing added).
    Document(&'a RawDocument),
    /// A document the form built.
    Built(RawDocumentBuf),
    /// A delete written as its tombstone only.
    Tombstone,
    /// A source field has a name the form writes: the path and the name.
    Collides(Unrepresentable),
}

impl Unwrapper {
    /// The form of pipeline `p`; `None` unless `value = "unwrapped"`.
    pub(crate) fn of(p: &PipelineConfig) -> Option<Self> {
        (p.value == ValueMode::Unwrapped).then(|| {
            let settings = UnwrapSettings::of(p);
            Self {
                deletes: settings.deletes,
                added: settings.added(),
            }
        })
    }

    /// Whether a delete's record is followed by a tombstone.
    pub(super) fn tombstone_after_delete(&self) -> bool {
        self.deletes == UnwrapDeletes::RewriteWithTombstone
    }

    /// The value of change event `raw` (`view`, its parsed fields).
    ///
    /// Errors: malformed BSON in `updateDescription` or a pre-image.
    pub(super) fn event<'a>(
        &self,
        raw: &'a RawDocument,
        view: &ChangeEventView<'a>,
    ) -> Result<Unwrapped<'a>, bson::raw::Error> {
        let (op, full) = match view.operation_type {
            "insert" | "replace" | "update" => (
                if view.operation_type == "insert" {
                    "c"
                } else {
                    "u"
                },
                view.full_document.flatten(),
            ),
            "delete" => return self.delete(raw, view),
            _ => return Ok(Unwrapped::Event),
        };
        let facts = Facts::of(view, op);
        if let Some(doc) = full {
            if self.added.is_empty() {
                return Ok(Unwrapped::Document(doc));
            }
            return Ok(self.extended(doc, &facts, "fullDocument."));
        }
        // Every update has a documentKey: the encoder refuses one without before this.
        let Some(key) = view.document_key else {
            return Ok(Unwrapped::Event);
        };
        let update = raw.get_document("updateDescription").ok();
        self.partial(key, update, &facts)
    }

    /// A copied document of namespace `ns`, read at `ts_ms`.
    pub(super) fn copy<'a>(
        &self,
        doc: &'a RawDocument,
        ns: (&str, &str),
        ts_ms: Option<i64>,
    ) -> Unwrapped<'a> {
        if self.added.is_empty() {
            return Unwrapped::Document(doc);
        }
        let facts = Facts {
            op: "r",
            db: Some(ns.0),
            coll: Some(ns.1),
            ts_ms,
        };
        self.extended(doc, &facts, "fullDocument.")
    }

    /// `doc` and the added fields.
    fn extended<'a>(&self, doc: &RawDocument, facts: &Facts<'_>, at: &str) -> Unwrapped<'a> {
        if let Some(clash) = self.clash(doc, &[], at) {
            return clash;
        }
        let mut out = doc.to_raw_document_buf();
        self.add(&mut out, facts);
        Unwrapped::Built(out)
    }

    /// An update without its document: the key's fields and the changes.
    fn partial<'a>(
        &self,
        key: &RawDocument,
        update: Option<&RawDocument>,
        facts: &Facts<'_>,
    ) -> Result<Unwrapped<'a>, bson::raw::Error> {
        let mut out = key.to_raw_document_buf();
        let mut removed = None;
        let mut truncated = None;
        for element in update.into_iter().flatten() {
            match element? {
                ("updatedFields", RawBsonRef::Document(fields)) => {
                    for field in fields {
                        let (name, value) = field?;
                        match key.get(name)? {
                            Some(same) if same == value => continue,
                            Some(_) => {
                                return Ok(collides(
                                    format!("updateDescription.updatedFields.{name}"),
                                    name,
                                ));
                            }
                            None => {}
                        }
                        if self.reserved(name) {
                            return Ok(collides(
                                format!("updateDescription.updatedFields.{name}"),
                                name,
                            ));
                        }
                        out.append_ref(name, value);
                    }
                }
                ("removedFields", RawBsonRef::Array(a)) if !a.is_empty() => removed = Some(a),
                ("truncatedArrays", RawBsonRef::Array(a)) if !a.is_empty() => truncated = Some(a),
                _ => {}
            }
        }
        if let Some(a) = removed {
            out.append(REMOVED, a.to_raw_array_buf());
        }
        if let Some(a) = truncated {
            out.append(TRUNCATED, a.to_raw_array_buf());
        }
        out.append(PARTIAL, true);
        self.add(&mut out, facts);
        Ok(Unwrapped::Built(out))
    }

    /// A delete, per `deletes`.
    fn delete<'a>(
        &self,
        raw: &'a RawDocument,
        view: &ChangeEventView<'a>,
    ) -> Result<Unwrapped<'a>, bson::raw::Error> {
        if self.deletes == UnwrapDeletes::Tombstone {
            return Ok(Unwrapped::Tombstone);
        }
        let (base, at) = match (
            raw.get_document("fullDocumentBeforeChange"),
            view.document_key,
        ) {
            (Ok(before), _) => (before, "fullDocumentBeforeChange."),
            (Err(_), Some(key)) => (key, "documentKey."),
            // Every delete has a documentKey: the encoder refuses one without before this.
            (Err(_), None) => return Ok(Unwrapped::Tombstone),
        };
        if let Some(clash) = self.clash(base, &[DELETED], at) {
            return Ok(clash);
        }
        let mut out = base.to_raw_document_buf();
        out.append(DELETED, true);
        self.add(&mut out, &Facts::of(view, "d"));
        Ok(Unwrapped::Built(out))
    }

    /// The collision of a top-level field of `doc` (at `at`) with an added field or `also`.
    fn clash<'a>(&self, doc: &RawDocument, also: &[&str], at: &str) -> Option<Unwrapped<'a>> {
        let names = self
            .added
            .iter()
            .map(|f| f.name())
            .chain(also.iter().copied());
        for name in names {
            if matches!(doc.get(name), Ok(Some(_))) {
                return Some(collides(format!("{at}{name}"), name));
            }
        }
        None
    }

    /// Whether an update's field has a name the form writes.
    fn reserved(&self, name: &str) -> bool {
        [REMOVED, TRUNCATED, PARTIAL].contains(&name) || self.added.iter().any(|f| f.name() == name)
    }

    /// Appends the configured added fields.
    fn add(&self, out: &mut RawDocumentBuf, facts: &Facts<'_>) {
        for field in &self.added {
            match field {
                AddedField::Op => out.append(field.name(), facts.op),
                AddedField::Ns => match (facts.db, facts.coll) {
                    (Some(db), Some(coll)) => out.append(field.name(), format!("{db}.{coll}")),
                    (Some(db), None) => out.append(field.name(), db),
                    _ => out.append_ref(field.name(), RawBsonRef::Null),
                },
                AddedField::TsMs => match facts.ts_ms {
                    Some(ms) => out.append(field.name(), ms),
                    None => out.append_ref(field.name(), RawBsonRef::Null),
                },
            }
        }
    }
}

/// What the added fields say of an event or copy.
struct Facts<'a> {
    op: &'static str,
    db: Option<&'a str>,
    coll: Option<&'a str>,
    ts_ms: Option<i64>,
}

impl<'a> Facts<'a> {
    /// The facts of change event `view` for `op`: `__ts_ms` is its `wallTime`, else its
    /// `clusterTime`'s seconds × 1000.
    fn of(view: &ChangeEventView<'a>, op: &'static str) -> Self {
        let ts_ms = view
            .wall_time_ms
            .or_else(|| view.cluster_time.map(|t| i64::from(t.time) * 1000));
        Self {
            op,
            db: view.db,
            coll: view.coll,
            ts_ms,
        }
    }
}

fn collides<'a>(path: String, name: &str) -> Unwrapped<'a> {
    Unwrapped::Collides(Unrepresentable {
        path,
        reason: format!(
            "the unwrapped form writes a field named {name:?} itself; the record would hold it \
             twice (rename the field with [pipelines.fields] rename, or drop it from add_fields)"
        ),
    })
}

/// A record's value document (borrowed from the event, or built), the prefix of its fields'
/// paths in error messages, and a collision the `on_ambiguous` policy takes.
pub(super) type ValueDoc<'a> = (
    Option<std::borrow::Cow<'a, RawDocument>>,
    &'static str,
    Option<Unrepresentable>,
);

impl super::RecordEncoder {
    /// The unwrapped value of change event `raw`. On a collision, the value handed to the
    /// policy is the server's document (`fullDocument`, else the event).
    ///
    /// Errors: malformed BSON.
    pub(super) fn unwrapped<'a>(
        &self,
        raw: &'a RawDocument,
        view: &ChangeEventView<'a>,
    ) -> Result<ValueDoc<'a>, bson::raw::Error> {
        use std::borrow::Cow::{Borrowed, Owned};
        let Some(form) = &self.unwrap else {
            return Ok((Some(Borrowed(raw)), "", None));
        };
        Ok(match form.event(raw, view)? {
            Unwrapped::Event => (Some(Borrowed(raw)), "", None),
            Unwrapped::Document(doc) => (Some(Borrowed(doc)), "fullDocument.", None),
            Unwrapped::Built(doc) => (Some(Owned(doc)), "", None),
            Unwrapped::Tombstone => (None, "", None),
            Unwrapped::Collides(problem) => {
                let server = view.full_document.flatten().unwrap_or(raw);
                (Some(Borrowed(server)), "", Some(problem))
            }
        })
    }

    /// The unwrapped value of a copied document of `ns` read at `read_time`; `None` unless
    /// the pipeline is in the form.
    pub(super) fn unwrapped_copy<'a>(
        &self,
        doc: &'a RawDocument,
        ns: (&str, &str),
        read_time: Option<bson::Timestamp>,
    ) -> Option<Unwrapped<'a>> {
        let ts_ms = read_time.map(|t| i64::from(t.time) * 1000);
        Some(self.unwrap.as_ref()?.copy(doc, ns, ts_ms))
    }
}
