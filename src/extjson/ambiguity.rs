//! Which documents Extended JSON cannot carry: the rule the transcoder applies to every
//! document it writes (in strict mode), derived from the Extended JSON v2 specification's
//! "Parsers" section (<https://github.com/mongodb/specifications/blob/master/source/extended-json/extended-json.md#parsers>).
//!
//! A document is **ambiguous** when a spec-compliant parser would not read its JSON back as
//! the same document:
//! 1. It has a key of a type wrapper of the conversion table, or `$uuid` (the spec's special
//!    rule): a parser must then either read a value of another type (the keys and value shapes
//!    match the wrapper) or report an error (any key missing or extra, a value of the wrong
//!    shape). Either way not this document. The keys: `$oid`, `$symbol`, `$numberInt`,
//!    `$numberLong`, `$numberDouble`, `$numberDecimal`, `$binary`, `$code`, `$scope`,
//!    `$timestamp`, `$regularExpression`, `$dbPointer`, `$date`, `$minKey`, `$maxKey`,
//!    `$undefined`, `$uuid`.
//! 2. Legacy forms that parsers accept when configured for Legacy Extended JSON (and Python's
//!    `bson.json_util` does by default): `$regex` with a *string* value is a legacy regular
//!    expression (with a document value it is the `$regex` query operator and is left as-is,
//!    per the spec's special case); `$type` only means legacy binary next to `$binary`, which
//!    rule 1 already catches (a lone `$type` is the query operator, left as-is).
//! 3. DBRef, the spec's one exception to rule 1: an object with `$ref` (a string) and `$id` is
//!    read as a DBRef, which parsers and drivers rebuild as `{$ref, $id[, $db], …other fields}`.
//!    Such a document is ambiguous unless it already has that layout (`$ref` first, `$id`
//!    second, then `$db` if present, a string); an object that only resembles a DBRef (no `$id`,
//!    a `$ref` that is not a string) is left as-is by parsers and is not ambiguous.
//!
//! Every other `$`-prefixed key (`$price`, `$options` alone, `$type` alone) and every dotted key
//! is a plain key: parsers leave it as-is, and it is written verbatim.

/// The keys of the conversion table's type wrappers, and `$uuid`.
const WRAPPER_KEYS: [&[u8]; 17] = [
    b"$oid",
    b"$symbol",
    b"$numberInt",
    b"$numberLong",
    b"$numberDouble",
    b"$numberDecimal",
    b"$binary",
    b"$code",
    b"$scope",
    b"$timestamp",
    b"$regularExpression",
    b"$dbPointer",
    b"$date",
    b"$minKey",
    b"$maxKey",
    b"$undefined",
    b"$uuid",
];

/// BSON element type of a string.
const STRING: u8 = 0x02;

/// What the keys of one document seen so far say about rule 3 (DBRef layout).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct DocumentShape {
    /// Position of a string-valued `$ref`.
    reference: Option<usize>,
    /// Position of `$id`.
    id: Option<usize>,
    /// Position of `$db`, and whether its value is a string.
    db: Option<(usize, bool)>,
}

impl DocumentShape {
    /// Looks at key number `index` (starting with `$`), whose value has BSON type `tag`.
    ///
    /// Errors: the reason, when the key alone makes the document ambiguous (rules 1 and 2).
    pub(super) fn key(&mut self, key: &[u8], tag: u8, index: usize) -> Result<(), &'static str> {
        if WRAPPER_KEYS.contains(&key) {
            return Err("the key is an Extended JSON type-wrapper keyword");
        }
        match key {
            b"$regex" if tag == STRING => {
                Err("a string-valued $regex is a legacy Extended JSON regular expression")
            }
            b"$ref" if tag == STRING => {
                self.reference = Some(index);
                Ok(())
            }
            b"$id" => {
                self.id = Some(index);
                Ok(())
            }
            b"$db" => {
                self.db = Some((index, tag == STRING));
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// After the last key. Errors: the reason, when the document is DBRef-shaped but not laid
    /// out as parsers rebuild a DBRef (rule 3).
    pub(super) fn end(&self) -> Result<(), &'static str> {
        let (Some(reference), Some(id)) = (self.reference, self.id) else {
            return Ok(());
        };
        let db_ok = match self.db {
            None => true,
            Some((at, is_string)) => at == 2 && is_string,
        };
        if reference == 0 && id == 1 && db_ok {
            Ok(())
        } else {
            Err("a DBRef-shaped document ($ref and $id) not laid out as {$ref, $id, $db, …}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(keys: &[(&str, u8)]) -> Result<(), &'static str> {
        let mut shape = DocumentShape::default();
        for (index, (key, tag)) in keys.iter().enumerate() {
            if key.starts_with('$') {
                shape.key(key.as_bytes(), *tag, index)?;
            }
        }
        shape.end()
    }

    #[test]
    fn wrapper_keywords_and_legacy_forms_are_ambiguous() {
        for key in [
            "$oid",
            "$date",
            "$numberLong",
            "$binary",
            "$scope",
            "$uuid",
            "$minKey",
        ] {
            assert!(shape(&[(key, STRING)]).is_err(), "{key}");
        }
        assert!(shape(&[("$regex", STRING), ("$options", STRING)]).is_err());
        assert!(shape(&[("$type", STRING), ("$binary", STRING)]).is_err());
    }

    #[test]
    fn query_operators_and_other_dollar_keys_are_plain() {
        assert_eq!(shape(&[("$regex", 0x03), ("$options", STRING)]), Ok(()));
        assert_eq!(shape(&[("$type", STRING)]), Ok(()));
        assert_eq!(shape(&[("$price", 0x10), ("a.b", STRING)]), Ok(()));
        assert_eq!(shape(&[("$options", STRING)]), Ok(()));
    }

    #[test]
    fn dbrefs_are_plain_only_in_their_own_layout() {
        assert_eq!(shape(&[("$ref", STRING), ("$id", 0x07)]), Ok(()));
        assert_eq!(
            shape(&[
                ("$ref", STRING),
                ("$id", 0x10),
                ("$db", STRING),
                ("x", 0x10)
            ]),
            Ok(())
        );
        assert!(shape(&[("$id", 0x10), ("$ref", STRING)]).is_err());
        assert!(shape(&[("a", 0x10), ("$ref", STRING), ("$id", 0x10)]).is_err());
        assert!(
            shape(&[
                ("$ref", STRING),
                ("$id", 0x10),
                ("x", 0x10),
                ("$db", STRING)
            ])
            .is_err()
        );
        assert!(shape(&[("$ref", STRING), ("$id", 0x10), ("$db", 0x10)]).is_err());
        // Only resembling a DBRef: left as-is by parsers.
        assert_eq!(shape(&[("$ref", STRING)]), Ok(()));
        assert_eq!(shape(&[("$ref", 0x10), ("$id", 0x10)]), Ok(()));
    }
}
