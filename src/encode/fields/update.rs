//! `updateDescription` under the field rules (`encode/fields.rs`): `updatedFields` by their
//! dotted keys, `removedFields` and `truncatedArrays` by their paths, `disambiguatedPaths`
//! without the entries of a touched path; and whether a rule emptied it.

use bson::raw::{RawArrayBuf, RawBson, RawBsonRef, RawDocument, RawDocumentBuf};

use super::{FieldRewriter, Resolved, Result};

impl FieldRewriter {
    /// `updateDescription` rewritten, and whether its changes were all removed.
    pub(super) fn update(&self, update: &RawDocument) -> Result<(RawDocumentBuf, bool)> {
        let mut out = RawDocumentBuf::new();
        let (mut before, mut after) = (0, 0);
        for element in update {
            let (key, value) = element?;
            match (key, value) {
                ("updatedFields", RawBsonRef::Document(fields)) => {
                    let mut kept = RawDocumentBuf::new();
                    for field in fields {
                        let (path, v) = field?;
                        before += 1;
                        self.updated(&mut kept, path, v)?;
                    }
                    after += kept.iter().count();
                    if self.renames {
                        let mut names: Vec<&str> = kept.iter().flatten().map(|(k, _)| k).collect();
                        names.sort_unstable();
                        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
                            return Err(super::RewriteError::Twice(w[0].to_owned()));
                        }
                    }
                    out.append_ref(key, &kept);
                }
                ("removedFields" | "truncatedArrays", RawBsonRef::Array(items)) => {
                    let mut kept = RawArrayBuf::new();
                    for item in items {
                        before += 1;
                        if let Some(v) = self.removed(item?)? {
                            kept.push(v);
                            after += 1;
                        }
                    }
                    out.append(key, kept);
                }
                ("disambiguatedPaths", RawBsonRef::Document(paths)) => {
                    let mut kept = RawDocumentBuf::new();
                    for entry in paths {
                        let (path, v) = entry?;
                        if self.untouched(path) {
                            kept.append_ref(path, v);
                        }
                    }
                    out.append_ref(key, &kept);
                }
                _ => out.append_ref(key, value),
            }
        }
        Ok((out, before > 0 && after == 0))
    }

    /// Writes the `updatedFields` entry `path: value` into `out` under the rules.
    fn updated(&self, out: &mut RawDocumentBuf, path: &str, value: RawBsonRef<'_>) -> Result<()> {
        match self.resolve(path) {
            Resolved::Drop => {}
            Resolved::Keep {
                path,
                whole: Some(action),
                ..
            } => {
                if let Some(v) = self.apply(action, value)? {
                    out.append(path, v);
                }
            }
            Resolved::Keep {
                path,
                node: Some(node),
                ..
            } => self.value(out, &path, value, node)?,
            Resolved::Keep { path, .. } => out.append_ref(path, value),
        }
        Ok(())
    }

    /// A `removedFields` path or a `truncatedArrays` entry under the rules; `None` to drop it.
    fn removed(&self, item: RawBsonRef<'_>) -> Result<Option<RawBson>> {
        let renamed = |path: &str| match self.resolve(path) {
            Resolved::Drop => None,
            Resolved::Keep { path, .. } => Some(path),
        };
        Ok(match item {
            RawBsonRef::String(path) => renamed(path).map(RawBson::String),
            RawBsonRef::Document(entry) => {
                let Ok(field) = entry.get_str("field") else {
                    return Ok(Some(item.to_raw_bson()));
                };
                let Some(path) = renamed(field) else {
                    return Ok(None);
                };
                let mut out = RawDocumentBuf::new();
                for element in entry {
                    let (key, value) = element?;
                    match key {
                        "field" => out.append(key, path.as_str()),
                        _ => out.append_ref(key, value),
                    }
                }
                Some(RawBson::Document(out))
            }
            other => Some(other.to_raw_bson()),
        })
    }

    /// Whether no rule changes anything at `path` (its name or its value).
    fn untouched(&self, path: &str) -> bool {
        match self.resolve(path) {
            Resolved::Drop => false,
            Resolved::Keep {
                path: written,
                whole,
                node,
            } => {
                written == path
                    && whole.is_none()
                    && node.is_none_or(|n| n.children.is_empty() && self.keeps_unruled(n))
            }
        }
    }
}
