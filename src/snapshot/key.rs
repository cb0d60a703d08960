//! The `documentKey` of a copied document, built the way the server builds it for change
//! events, so that a copied document's record has the same key bytes (and partition) as every
//! event of that document.
//!
//! Invariants: unsharded: `{_id}`. Sharded: the shard key's fields in the key pattern's order
//! (a dotted field keeps its dotted name, an absent one is an explicit null), then `_id` unless
//! the pattern has it (case C21,
//! <https://www.mongodb.com/docs/manual/reference/change-events/#documentkey>).

use bson::{RawBsonRef, RawDocument, RawDocumentBuf};

/// The `documentKey` of `doc`; `shard_key`: the key pattern's field names, in order, of a
/// sharded collection (`config.collections`), `None` for an unsharded one.
///
/// Errors: a sentence when `doc` has no `_id` or is malformed BSON.
pub(crate) fn document_key(
    doc: &RawDocument,
    shard_key: Option<&[String]>,
) -> Result<RawDocumentBuf, String> {
    let id = doc
        .get("_id")
        .map_err(|e| format!("malformed document: {e}"))?
        .ok_or_else(|| "document has no _id".to_owned())?;
    let mut key = RawDocumentBuf::new();
    let Some(fields) = shard_key else {
        key.append("_id", id.to_raw_bson());
        return Ok(key);
    };
    for field in fields {
        match lookup(doc, field) {
            Some(value) => key.append(field, value.to_raw_bson()),
            None => key.append(field, bson::RawBson::Null),
        }
    }
    if !fields.iter().any(|f| f == "_id") {
        key.append("_id", id.to_raw_bson());
    }
    Ok(key)
}

/// The value at dotted `path` in `doc` (through embedded documents only).
fn lookup<'a>(doc: &'a RawDocument, path: &str) -> Option<RawBsonRef<'a>> {
    let mut current = doc;
    let mut parts = path.split('.').peekable();
    while let Some(part) = parts.next() {
        let value = current.get(part).ok()??;
        if parts.peek().is_none() {
            return Some(value);
        }
        current = match value {
            RawBsonRef::Document(d) => d,
            _ => return None,
        };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::rawdoc;

    fn names(fields: &[&str]) -> Vec<String> {
        fields.iter().map(|f| (*f).to_owned()).collect()
    }

    #[test]
    fn an_unsharded_key_is_the_id_alone_with_its_bytes() {
        let doc = rawdoc! { "x": 1, "_id": 2.5_f64, "y": "z" };
        let key = document_key(&doc, None).expect("has _id");
        assert_eq!(key.as_bytes(), rawdoc! { "_id": 2.5_f64 }.as_bytes());
        assert_eq!(
            document_key(&rawdoc! { "x": 1 }, None),
            Err("document has no _id".to_owned())
        );
    }

    #[test]
    fn a_sharded_key_follows_the_pattern_order_with_explicit_nulls_and_the_id_last() {
        let doc = rawdoc! { "_id": 7_i64, "region": "eu", "cust": { "id": 42 }, "other": 1 };
        let pattern = names(&["cust.id", "region", "zone"]);
        let key = document_key(&doc, Some(&pattern)).expect("has _id");
        let expected = rawdoc! {
            "cust.id": 42, "region": "eu", "zone": bson::RawBson::Null, "_id": 7_i64,
        };
        assert_eq!(key.as_bytes(), expected.as_bytes());
        // A pattern that holds _id keeps it at its place, once.
        let with_id = names(&["_id", "region"]);
        let key = document_key(&doc, Some(&with_id)).expect("has _id");
        assert_eq!(
            key.as_bytes(),
            rawdoc! { "_id": 7_i64, "region": "eu" }.as_bytes()
        );
    }
}
