//! The bytes of a record's key and value in each format (`format`, `key_format`).
//!
//! Invariants:
//! - BSON is the server's bytes, untouched: no transcoding, whatever the document holds.
//! - JSON is written in strict mode ([`extjson::write_document_strict`]): a document that an
//!   Extended JSON parser would read as something else, or invalid UTF-8 (unless
//!   `replace_invalid_utf8`), is an [`Unrepresentable`] error for the `on_ambiguous` policy,
//!   never written.

use std::borrow::Cow;

use bson::{RawDocument, RawDocumentBuf};

use crate::config::Format;
use crate::error::encode::Unrepresentable;
use crate::event::ChangeEventView;
use crate::extjson::{self, ExtJsonError, JsonMode, Utf8};

/// A key or value that could not be written: it cannot be carried exactly (policy), or it is
/// not valid BSON (fatal).
pub(super) enum Failed {
    /// For the `on_ambiguous` policy.
    Unrepresentable(Unrepresentable),
    /// Malformed BSON or nesting too deep.
    Malformed(ExtJsonError),
}

impl Failed {
    /// `error` of the document at `prefix` (`documentKey.`, `fullDocument.`, or the event).
    fn at(prefix: &str, error: ExtJsonError) -> Self {
        let path = |p: &str| format!("{prefix}{p}").trim_end_matches('.').to_owned();
        match error {
            ExtJsonError::Ambiguous { path: p, reason } => Self::Unrepresentable(Unrepresentable {
                path: path(&p),
                reason: format!("a parser would not read it back as written: {reason}"),
            }),
            ExtJsonError::InvalidUtf8 { path: p } => Self::Unrepresentable(Unrepresentable {
                path: path(&p),
                reason: "not valid UTF-8, which JSON cannot carry exactly".to_owned(),
            }),
            other => Self::Malformed(other),
        }
    }
}

/// The document a record's key is made of: the `documentKey`, else `{db, coll}` of the
/// event's `ns`, else `{pipeline: <name>}`.
pub(super) fn key_document<'a>(view: &ChangeEventView<'a>, pipeline: &str) -> Cow<'a, RawDocument> {
    if let Some(dk) = view.document_key {
        return Cow::Borrowed(dk);
    }
    let mut doc = RawDocumentBuf::new();
    match view.db {
        Some(db) => {
            doc.append("db", db);
            if let Some(coll) = view.coll {
                doc.append("coll", coll);
            }
        }
        None => doc.append("pipeline", pipeline),
    }
    Cow::Owned(doc)
}

/// The key bytes of `doc`: its BSON, or its canonical Extended JSON.
pub(super) fn key_bytes(doc: &RawDocument, format: Format, utf8: Utf8) -> Result<Vec<u8>, Failed> {
    match format {
        Format::Bson => Ok(doc.as_bytes().to_vec()),
        Format::Json => {
            let mut key = Vec::with_capacity(64);
            extjson::write_document_strict(&mut key, doc, JsonMode::Canonical, utf8)
                .map_err(|e| Failed::at("documentKey.", e))?;
            Ok(key)
        }
    }
}

/// The value bytes of `doc` (the event, or at `prefix` inside it): its BSON, or its Extended
/// JSON in `mode`.
pub(super) fn value_bytes(
    doc: &RawDocument,
    prefix: &str,
    format: Format,
    mode: JsonMode,
    utf8: Utf8,
) -> Result<Vec<u8>, Failed> {
    match format {
        Format::Bson => Ok(doc.as_bytes().to_vec()),
        Format::Json => {
            let len = doc.as_bytes().len();
            // Room for the usual expansion (quotes, `$numberLong`-style wrappers, escapes): a
            // value that outgrows it is reallocated, and copied, once more.
            let mut out = Vec::with_capacity(len + len / 2 + 64);
            extjson::write_document_strict(&mut out, doc, mode, utf8)
                .map_err(|e| Failed::at(prefix, e))?;
            Ok(out)
        }
    }
}

/// Canonical Extended JSON of `doc` as best it can be written (invalid UTF-8 replaced, no
/// ambiguity check), for error messages and dead-letter stubs; the reason when not even that.
pub(crate) fn lossy_json(doc: &RawDocument) -> String {
    extjson::to_string(doc, JsonMode::Canonical).unwrap_or_else(|e| format!("({e})"))
}
