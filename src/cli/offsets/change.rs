//! The `offsets` commands that change a document: `reset` and `accept-config`, each guarded
//! against a live owner (unless `--force`) and printing the document before and after.
//!
//! Invariant: every change filters on the epoch read before it and increments it
//! ([`OffsetsAdmin`](crate::offsets::operator::OffsetsAdmin)), so a running owner is fenced
//! instead of overwriting it.

use std::io::Write;

use bson::{DateTime, Document, Timestamp};

use super::print::{print_doc, rfc3339};
use super::{Command, ResetTo, failed};
use crate::error::BridgeError;
use crate::offsets::{OffsetsDoc, StreamIdentity};

impl Command<'_> {
    /// Prints the document before a change and checks that the change may proceed: the
    /// document is readable (a `--delete` may remove an unreadable one) and no live instance
    /// holds the pipeline, unless `force`. The document and its parsed form, or `None` when
    /// refused (the reason printed).
    pub(super) async fn before_change(
        &self,
        name: &str,
        force: bool,
        deleting: bool,
        out: &mut impl Write,
    ) -> Result<Option<(Option<Document>, Option<OffsetsDoc>)>, BridgeError> {
        let before = self.find(name).await?;
        let _ = writeln!(out, "before:");
        match &before {
            Some(d) => print_doc(out, d),
            None => {
                let _ = writeln!(out, "  (no document)");
            }
        }
        let parsed = match before.as_ref().map(OffsetsDoc::parse).transpose() {
            Ok(parsed) => parsed,
            Err(_) if deleting => None,
            Err(reason) => {
                let _ = writeln!(
                    out,
                    "refused: this version cannot read the document ({reason}); --delete removes it"
                );
                return Ok(None);
            }
        };
        if let Some((owner, until)) = parsed.as_ref().and_then(|p| p.live_owner(DateTime::now())) {
            if !force {
                let _ = writeln!(
                    out,
                    "refused: instance {owner} holds pipeline {name:?} (lease until {}). Stop it \
                     first, wait for the lease to expire, or pass --force (it is then fenced, and the \
                     pipeline restarts from the new position).",
                    rfc3339(until.timestamp_millis() / 1000)
                );
                return Ok(None);
            }
            let _ = writeln!(
                out,
                "--force: instance {owner} holds the pipeline and will be fenced"
            );
        }
        Ok(Some((before, parsed)))
    }

    /// Prints the document after a change that `done` (else that it changed meanwhile).
    pub(super) async fn after_change(
        &self,
        name: &str,
        done: bool,
        out: &mut impl Write,
    ) -> Result<bool, BridgeError> {
        if !done {
            let _ = writeln!(
                out,
                "failed: the document changed meanwhile (another instance took the pipeline); \
                 run the command again"
            );
            return Ok(false);
        }
        let _ = writeln!(out, "after:");
        match self.find(name).await?.as_ref() {
            Some(d) => {
                print_doc(out, d);
                if OffsetsDoc::parse(d).is_ok_and(|p| p.position().is_none()) {
                    let _ = writeln!(out, "  (no position: the next start follows `start_at`)");
                }
            }
            None => {
                let _ = writeln!(out, "  (no document: the next start follows `start_at`)");
            }
        }
        Ok(true)
    }

    /// The owner string an operator's write records.
    pub(super) fn operator(what: &str) -> String {
        format!(
            "{what} ({}:{})",
            crate::offsets::hostname(),
            std::process::id()
        )
    }

    pub(super) async fn reset(
        &self,
        name: &str,
        to: ResetTo,
        force: bool,
        out: &mut impl Write,
    ) -> Result<bool, BridgeError> {
        let deleting = to == ResetTo::Delete;
        let Some((before, parsed)) = self.before_change(name, force, deleting, out).await? else {
            return Ok(false);
        };
        let epoch = parsed.as_ref().and_then(|p| p.epoch);
        let done = match (to, &before) {
            (ResetTo::Delete, None) => {
                let _ = writeln!(out, "{}", self.missing(name));
                return Ok(false);
            }
            (ResetTo::Delete, Some(d)) => {
                // An invalid document's epoch is taken as stored, so it can still be reset.
                let epoch = epoch.or_else(|| d.get_i64("epoch").ok());
                let forgot = self
                    .offsets
                    .forget(name, epoch, d, &Self::operator("offsets reset --delete"))
                    .await
                    .map_err(|e| failed(name, e))?;
                if forgot {
                    // Its group slot may be reused now (crate::offsets::group).
                    let offsets = self.config.mongodb.offsets();
                    let freed = crate::offsets::group::forget(&self.client, &offsets, name).await;
                    if freed.map_err(|e| failed(name, e))? > 0 {
                        let _ = writeln!(out, "its group slot was freed");
                    }
                }
                forgot
            }
            // A mistyped name must not create a stray document that looks like a reset.
            (_, None) if !self.config.pipelines.iter().any(|p| p.name == name) => {
                let _ = writeln!(out, "{}", self.missing(name));
                return Ok(false);
            }
            (target, _) => {
                let at = match target {
                    ResetTo::Timestamp(ts) => ts,
                    _ => self.cluster_time(name).await?,
                };
                if let ResetTo::Timestamp(ts) = target
                    && let Some(refusal) = self.before_history(ts).await
                {
                    let _ = writeln!(out, "{refusal}");
                    return Ok(false);
                }
                self.offsets
                    .move_to(name, epoch, at, &Self::operator("offsets reset"))
                    .await
                    .map_err(|e| failed(name, e))?
            }
        };
        self.after_change(name, done, out).await
    }

    /// Records the configured stream identity of `name`, keeping its position.
    pub(super) async fn accept_config(
        &self,
        name: &str,
        force: bool,
        out: &mut impl Write,
    ) -> Result<bool, BridgeError> {
        let Some(p) = self.config.pipelines.iter().find(|p| p.name == name) else {
            let _ = writeln!(out, "pipeline {name:?} is not in the configuration");
            return Ok(false);
        };
        let Some((_, parsed)) = self.before_change(name, force, false, out).await? else {
            return Ok(false);
        };
        let Some(parsed) = parsed else {
            let _ = writeln!(out, "{}", self.missing(name));
            return Ok(false);
        };
        let identity = StreamIdentity::of(p);
        if parsed.fingerprint.as_deref() == Some(identity.fingerprint.as_str()) {
            let _ = writeln!(
                out,
                "nothing to accept: the document records this configuration"
            );
            return Ok(true);
        }
        let done = self
            .offsets
            .accept_config(
                name,
                parsed.epoch,
                &identity,
                &Self::operator("offsets accept-config"),
            )
            .await
            .map_err(|e| failed(name, e))?;
        self.after_change(name, done, out).await
    }

    /// Why `ts` cannot be a position: it is before the oplog's oldest entry, so a change
    /// stream cannot start there (MongoDB answers `ChangeStreamHistoryLost`). `None` when it
    /// can, or when the oplog's bounds cannot be read (a warning line says so on stderr).
    async fn before_history(&self, ts: Timestamp) -> Option<String> {
        match crate::observe::history::oplog_bounds(&self.client).await {
            Ok(bounds) if ts < bounds.oldest => Some(format!(
                "refused: {} is before the oldest oplog entry ({}): a change stream cannot \
                 start there, the events in between are gone. Remedy: pick a time after it, \
                 or use `snapshot NAME` to copy the collection(s) again",
                rfc3339(i64::from(ts.time)),
                rfc3339(i64::from(bounds.oldest.time))
            )),
            Ok(_) => None,
            Err(unknown) => {
                eprintln!(
                    "warning: the oplog's oldest entry is unknown ({unknown}); the time is not \
                     checked against it"
                );
                None
            }
        }
    }

    /// The deployment's cluster time. Errors when the server reports none (a standalone
    /// server).
    async fn cluster_time(&self, name: &str) -> Result<Timestamp, BridgeError> {
        crate::mongo::cluster_time(&self.client)
            .await
            .map_err(|e| failed(name, e))?
            .ok_or_else(|| BridgeError::OffsetsDocument {
                pipeline: name.to_owned(),
                reason: "the server reports no cluster time (operationTime of hello): is it a \
                         replica set? Use --to-timestamp instead"
                    .to_owned(),
            })
    }
}
