//! `[pipelines.fields]` applied: a change event's documents, or a copied document, rewritten
//! by the pipeline's field rules before anything is encoded (`config/fields.rs` lists the
//! feature's pieces and the rules' invariants).
//!
//! What is rewritten: `fullDocument`, `fullDocumentBeforeChange`, and `updateDescription`
//! (`updatedFields` by their dotted keys, `removedFields`, `truncatedArrays`, and
//! `disambiguatedPaths`, whose entries for a path a rule touched are dropped). `documentKey`,
//! `_id` and every other field of the event pass untouched: the key, the headers and the
//! resume token never change.
//!
//! Invariants:
//! - a path matches through arrays: `items.price` is the `price` of every document in `items`;
//!   in an `updatedFields` key, a numeric component no rule names is an array index;
//! - an excluded path, or one `include` leaves out, appears nowhere in the output: not as a
//!   field, not as an `updatedFields` key, not in `removedFields` or `truncatedArrays`;
//! - a masked or hashed value appears nowhere either: `mask` writes the fixed string, `hash`
//!   the lowercase hex HMAC-SHA-256 under the pipeline's key of the string's UTF-8 bytes, or,
//!   for any other type, of the BSON bytes of the document `{"": value}` (so equal values hash
//!   alike across restarts and pipelines sharing the key);
//! - `truncate` cuts every string at or under its path to at most N bytes, on a UTF-8
//!   character boundary; other types pass.

use bson::raw::{RawArray, RawArrayBuf, RawBson, RawBsonRef, RawDocument, RawDocumentBuf};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::config::fields::{Action, Node};
use crate::config::{EmptyUpdates, FieldRules, PipelineConfig};

mod update;

type Result<T> = std::result::Result<T, RewriteError>;

/// Why an event or document could not be rewritten.
#[derive(Debug)]
pub(crate) enum RewriteError {
    /// Malformed BSON.
    Malformed(bson::raw::Error),
    /// A rename would write a field twice: the document has a field of the new name that stays.
    Twice(String),
}

impl From<bson::raw::Error> for RewriteError {
    fn from(e: bson::raw::Error) -> Self {
        Self::Malformed(e)
    }
}

impl std::fmt::Display for RewriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Malformed(e) => write!(f, "{e}"),
            Self::Twice(name) => write!(
                f,
                "[pipelines.fields] rename would write {name:?} twice: the document has a field \
                 of that name besides the renamed one; rename to a name the documents do not use"
            ),
        }
    }
}

/// Refuses `out` (a document level just written under `node`) when a rename made a name
/// appear twice. Called only when some rule renames (`FieldRewriter::renames`).
fn refuse_twice(out: &RawDocumentBuf, node: &Node) -> Result<()> {
    let renames = || {
        node.children.values().filter_map(|c| match &c.action {
            Some(Action::Rename(to)) => Some(to.as_str()),
            _ => None,
        })
    };
    if renames().next().is_none() {
        return Ok(());
    }
    for to in renames() {
        if out.iter().flatten().filter(|(k, _)| k == &to).count() > 1 {
            return Err(RewriteError::Twice(to.to_owned()));
        }
    }
    Ok(())
}

/// An event after the rules.
#[derive(Debug)]
pub(crate) struct Rewritten {
    /// The event, its documents rewritten.
    pub event: RawDocumentBuf,
    /// An update whose every change the rules removed (its `updateDescription` had some and
    /// has none left).
    pub emptied: bool,
}

/// A pipeline's field rules, ready to apply.
#[derive(Clone)]
pub(crate) struct FieldRewriter {
    rules: FieldRules,
    /// The HMAC keyed once (its inner and outer pads hashed): each hash clones it.
    keyed: Option<Hmac<Sha256>>,
    /// Whether any rule renames (an update's fields are then checked for a name written twice).
    renames: bool,
}

impl std::fmt::Debug for FieldRewriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key (in `rules` and in the keyed state) is a secret: never printed.
        f.debug_struct("FieldRewriter")
            .field("include", &self.rules.include)
            .field("empty_updates", &self.rules.empty_updates)
            .finish_non_exhaustive()
    }
}

/// An empty document with room for `bytes` (fewer reallocations as it fills).
fn with_capacity(bytes: usize) -> RawDocumentBuf {
    let mut buf = Vec::with_capacity(bytes.max(5));
    buf.extend_from_slice(&[5, 0, 0, 0, 0]);
    RawDocumentBuf::from_bytes(buf).expect("five bytes are the empty document")
}

/// Where a dotted path lands under the rules.
enum Resolved<'r> {
    /// Left out (excluded, or not included).
    Drop,
    /// Written under `path` (renamed components replaced): `whole` is the action deciding the
    /// value at or above its end, else `node` holds the rules under its end.
    Keep {
        path: String,
        whole: Option<&'r Action>,
        node: Option<&'r Node>,
    },
}

impl FieldRewriter {
    /// The rewriter of `pipeline`, `None` without `[pipelines.fields]` rules.
    pub(crate) fn of(pipeline: &PipelineConfig) -> Option<Self> {
        let rules = pipeline.fields.as_ref()?.parsed()?;
        let keyed = rules.hash_key.as_deref().map(|key| {
            Hmac::<Sha256>::new_from_slice(key).expect("HMAC-SHA-256 takes a key of any length")
        });
        let renames = pipeline
            .fields
            .as_ref()
            .is_some_and(|f| !f.rename.is_empty());
        Some(Self {
            rules,
            keyed,
            renames,
        })
    }

    /// Whether an emptied update gets no record (`empty_updates = "skip"`).
    pub(crate) fn skips_empty_updates(&self) -> bool {
        self.rules.empty_updates == EmptyUpdates::Skip
    }

    /// `event` with its documents and `updateDescription` rewritten.
    ///
    /// Errors: malformed BSON.
    pub(crate) fn event(&self, event: &RawDocument) -> Result<Rewritten> {
        let mut out = with_capacity(event.as_bytes().len());
        let mut emptied = false;
        for element in event {
            let (key, value) = element?;
            match (key, value) {
                ("fullDocument" | "fullDocumentBeforeChange", RawBsonRef::Document(doc)) => {
                    out.append_ref(key, &self.document(doc)?);
                }
                ("updateDescription", RawBsonRef::Document(update)) => {
                    let (rewritten, empty) = self.update(update)?;
                    emptied = empty;
                    out.append_ref(key, &rewritten);
                }
                _ => out.append_ref(key, value),
            }
        }
        Ok(Rewritten {
            event: out,
            emptied,
        })
    }

    /// A whole document (a `fullDocument`, a copied document) rewritten; its `_id` kept.
    ///
    /// Errors: malformed BSON.
    pub(crate) fn document(&self, doc: &RawDocument) -> Result<RawDocumentBuf> {
        self.document_at(doc, &self.rules.root, true)
    }

    fn document_at(&self, doc: &RawDocument, node: &Node, top: bool) -> Result<RawDocumentBuf> {
        let mut out = with_capacity(doc.as_bytes().len());
        for element in doc {
            let (key, value) = element?;
            match node.children.get(key) {
                _ if top && key == "_id" => out.append_ref(key, value),
                Some(child) => self.field(&mut out, key, value, child)?,
                None if self.keeps_unruled(node) => out.append_ref(key, value),
                None => {}
            }
        }
        if self.renames {
            refuse_twice(&out, node)?;
        }
        Ok(out)
    }

    /// Whether a field no rule names is kept under `node`.
    fn keeps_unruled(&self, node: &Node) -> bool {
        !self.rules.include || node.included
    }

    /// Writes field `key` (whose rules are `node`) into `out`.
    fn field(
        &self,
        out: &mut RawDocumentBuf,
        key: &str,
        value: RawBsonRef<'_>,
        node: &Node,
    ) -> Result<()> {
        match &node.action {
            Some(Action::Rename(to)) => self.value(out, to, value, node),
            Some(whole @ (Action::Exclude | Action::Mask | Action::Hash | Action::Truncate(_))) => {
                if let Some(v) = self.apply(whole, value)? {
                    out.append(key, v);
                }
                Ok(())
            }
            Some(Action::Keep) | None => self.value(out, key, value, node),
        }
    }

    /// Writes `value` under `name`, the rules under it being `node`.
    fn value(
        &self,
        out: &mut RawDocumentBuf,
        name: &str,
        value: RawBsonRef<'_>,
        node: &Node,
    ) -> Result<()> {
        let descend = !node.children.is_empty() || !self.keeps_unruled(node);
        match value {
            RawBsonRef::Document(doc) if descend => {
                out.append_ref(name, &self.document_at(doc, node, false)?);
            }
            RawBsonRef::Array(items) if descend => {
                out.append(name, self.array_at(items, node)?);
            }
            _ if self.keeps_unruled(node) => out.append_ref(name, value),
            _ => {} // a scalar on the way to an included path: left out, as `$project` does
        }
        Ok(())
    }

    /// Every element of `items` under the rules of `node` (a path matches through arrays).
    fn array_at(&self, items: &RawArray, node: &Node) -> Result<RawArrayBuf> {
        let mut out = RawArrayBuf::new();
        for item in items {
            match item? {
                RawBsonRef::Document(doc) => out.push(self.document_at(doc, node, false)?),
                RawBsonRef::Array(inner) => out.push(self.array_at(inner, node)?),
                scalar if self.keeps_unruled(node) => out.push(scalar.to_raw_bson()),
                _ => {}
            }
        }
        Ok(out)
    }

    /// What a whole-value action writes for `value`; `None` to drop it.
    fn apply(&self, action: &Action, value: RawBsonRef<'_>) -> Result<Option<RawBson>> {
        Ok(match action {
            Action::Exclude => None,
            Action::Mask => Some(RawBson::String(self.rules.mask.clone())),
            Action::Hash => Some(RawBson::String(self.hash(value))),
            Action::Truncate(n) => Some(truncated(value, *n)?),
            Action::Keep | Action::Rename(_) => Some(value.to_raw_bson()),
        })
    }

    /// The lowercase hex HMAC-SHA-256 of `value` (see the module doc for the bytes).
    fn hash(&self, value: RawBsonRef<'_>) -> String {
        let mut mac = match &self.keyed {
            Some(keyed) => keyed.clone(),
            None => Hmac::<Sha256>::new_from_slice(&[]).expect("an empty HMAC key is valid"),
        };
        match value {
            RawBsonRef::String(s) => mac.update(s.as_bytes()),
            other => {
                let mut doc = RawDocumentBuf::new();
                doc.append_ref("", other);
                mac.update(doc.as_bytes());
            }
        }
        let digest = mac.finalize().into_bytes();
        let mut hex = String::with_capacity(64);
        for byte in digest {
            hex.push(char::from(b"0123456789abcdef"[usize::from(byte >> 4)]));
            hex.push(char::from(b"0123456789abcdef"[usize::from(byte & 15)]));
        }
        hex
    }

    /// Where dotted `path` lands (see [`Resolved`]).
    fn resolve(&self, path: &str) -> Resolved<'_> {
        let mut node = Some(&self.rules.root);
        let mut whole = None;
        let mut out: Vec<&str> = Vec::new();
        for part in path.split('.') {
            let Some(at) = node else {
                out.push(part);
                continue;
            };
            match at.children.get(part) {
                Some(child) => match &child.action {
                    Some(Action::Exclude) => return Resolved::Drop,
                    Some(Action::Rename(to)) => {
                        out.push(to);
                        node = Some(child);
                    }
                    Some(action @ (Action::Mask | Action::Hash | Action::Truncate(_))) => {
                        out.push(part);
                        whole = Some(action);
                        node = None;
                    }
                    Some(Action::Keep) | None => {
                        out.push(part);
                        node = Some(child);
                    }
                },
                // An array index: the rules at this level apply to its element.
                None if !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) => {
                    out.push(part);
                }
                None if self.keeps_unruled(at) => {
                    out.push(part);
                    node = None;
                }
                None => return Resolved::Drop,
            }
        }
        Resolved::Keep {
            path: out.join("."),
            whole,
            node,
        }
    }
}

/// `value` with every string at or under it cut to at most `limit` bytes.
fn truncated(value: RawBsonRef<'_>, limit: usize) -> Result<RawBson> {
    Ok(match value {
        RawBsonRef::String(s) => RawBson::String(cut(s, limit).to_owned()),
        RawBsonRef::Document(doc) => {
            let mut out = RawDocumentBuf::new();
            for element in doc {
                let (key, v) = element?;
                out.append(key, truncated(v, limit)?);
            }
            RawBson::Document(out)
        }
        RawBsonRef::Array(items) => {
            let mut out = RawArrayBuf::new();
            for item in items {
                out.push(truncated(item?, limit)?);
            }
            RawBson::Array(out)
        }
        other => other.to_raw_bson(),
    })
}

/// The longest prefix of `s` of at most `limit` bytes that ends on a character boundary.
pub(crate) fn cut(s: &str, limit: usize) -> &str {
    if s.len() <= limit {
        return s;
    }
    let mut end = limit;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
