//! One namespace's copy: the collection read in `_id` order, one `find` per batch, bracket by
//! bracket of BSON types, whatever mix of `_id` types it holds.
//!
//! Invariants:
//! - Each [`CopyCursor::next`] issues its `find`s (sorted and hinted on `_id`, read concern
//!   `majority`, at most `snapshot_batch_size` documents) after the call began, and no cursor
//!   outlives a call: every document of a batch was read by the server after the call began,
//!   on any server (the premise of `sequence.rs`). A cursor kept open across batches would not
//!   give that: a server may read a cursor's documents before the `getMore` that returns them
//!   (seen on SecantusDB: a copied record older than an event returned before its `getMore`).
//! - `{_id: {$gt: x}}` matches only `x`'s type bracket, so the copy pages within one bracket at
//!   a time, in MongoDB's comparison order (`BRACKETS`), starting each bracket at its lowest
//!   value; single-value brackets (MinKey, null, NaN, MaxKey) are one query each. No `_id` of a
//!   type MongoDB accepts is skipped (arrays, regexes and undefined are not accepted; JavaScript
//!   code `_id`s are not copied, which the README states).
//!   <https://www.mongodb.com/docs/manual/reference/bson-type-comparison-order/>
//! - A batch shorter than asked for ends its bracket.
//! - Every `_id` read is strictly greater, by MongoDB's comparison rules (`order.rs`), than the
//!   one read before it, in its batch or in the batch before (whatever the bracket, and after
//!   a resume, than the committed `lastId`); otherwise the read answers [`Read::OutOfOrder`]
//!   and none of that batch is copied: `$gt` paging over such an index skips documents.
//! - The read after the last bracket counts the collection (`count.rs`) before it answers
//!   [`Read::Exhausted`].

use bson::{Bson, RawBson, RawBsonRef, RawDocumentBuf, Timestamp, doc};
use futures::StreamExt;
use mongodb::options::{Hint, ReadConcern};
use mongodb::{Client, Collection};

use super::count::{Counted, count};
use super::order::{Strings, follows};

/// A bracket of the `_id` order: its first query's condition on `_id`, and whether it holds
/// one value only.
struct Bracket {
    first: fn() -> Bson,
    single: bool,
}

/// MongoDB's comparison order of the types an `_id` can have. A bracket's first query names
/// its type (`$type`) rather than a lowest value, except numbers (`-Infinity`, so NaN stays in
/// its own bracket): no sentinel value that a server could order or parse otherwise.
const BRACKETS: [Bracket; 12] = [
    Bracket {
        first: || Bson::MinKey,
        single: true,
    },
    Bracket {
        first: || Bson::Null,
        single: true,
    },
    Bracket {
        first: || Bson::Double(f64::NAN),
        single: true,
    },
    Bracket {
        first: || bson::bson!({ "$gte": f64::NEG_INFINITY }),
        single: false,
    },
    Bracket {
        first: || bson::bson!({ "$type": ["string", "symbol"] }),
        single: false,
    },
    Bracket {
        first: || bson::bson!({ "$type": "object" }),
        single: false,
    },
    Bracket {
        first: || bson::bson!({ "$type": "binData" }),
        single: false,
    },
    Bracket {
        first: || bson::bson!({ "$type": "objectId" }),
        single: false,
    },
    Bracket {
        first: || bson::bson!({ "$type": "bool" }),
        single: false,
    },
    Bracket {
        first: || bson::bson!({ "$type": "date" }),
        single: false,
    },
    Bracket {
        first: || bson::bson!({ "$type": "timestamp" }),
        single: false,
    },
    Bracket {
        first: || Bson::MaxKey,
        single: true,
    },
];

/// The bracket of `id` in [`BRACKETS`]; `None` for a type an `_id` cannot have here.
fn bracket_of(id: &Bson) -> Option<usize> {
    Some(match id {
        Bson::MinKey => 0,
        Bson::Null | Bson::Undefined => 1,
        Bson::Double(x) if x.is_nan() => 2,
        // NaN decimals sort with NaN doubles, and `{_id: NaN}` matches both.
        Bson::Decimal128(d) if is_nan(d) => 2,
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => 3,
        Bson::String(_) | Bson::Symbol(_) => 4,
        Bson::Document(_) => 5,
        Bson::Binary(_) => 6,
        Bson::ObjectId(_) => 7,
        Bson::Boolean(_) => 8,
        Bson::DateTime(_) => 9,
        Bson::Timestamp(_) => 10,
        Bson::MaxKey => 11,
        _ => return None,
    })
}

/// Whether `d` is a NaN (IEEE 754-2008 decimal128: combination field 11111, in the most
/// significant byte, which is the last one of the little-endian bytes).
fn is_nan(d: &bson::Decimal128) -> bool {
    d.bytes()[15] & 0x7C == 0x7C
}

/// Bytes of documents one batch holds at most (one server reply's bound): a batch ends
/// earlier when its documents are large, so a copy's memory does not grow with
/// `snapshot_batch_size` × document size.
pub(crate) const MAX_BATCH_BYTES: usize = 16 * 1024 * 1024;

/// One batch's documents.
#[derive(Debug)]
pub struct Batch {
    /// The documents, in `_id` order.
    pub docs: Vec<RawDocumentBuf>,
    /// The reply's `operationTime` (the server's read time), when it sent one.
    pub read_time: Option<Timestamp>,
}

/// What one read returned.
#[derive(Debug)]
pub enum Read {
    /// Documents (at least one).
    Batch(Batch),
    /// The collection has been read to its end; what `countDocuments` found then.
    Exhausted(Counted),
    /// `next` was read right after `previous` although MongoDB orders it before (or equal to)
    /// it: the copy must stop.
    OutOfOrder {
        /// The `_id` read first.
        previous: Bson,
        /// The `_id` read right after it.
        next: Bson,
    },
}

/// One `find`'s outcome.
struct Page {
    docs: Vec<RawDocumentBuf>,
    read_time: Option<Timestamp>,
    /// A whole batch: more may follow in the bracket.
    full: bool,
    /// Two `_id`s out of order (the batch is not to be copied).
    disorder: Option<(RawBson, RawBson)>,
}

/// A namespace's copy; owned by the future that reads it (see [`CopyCursor::next`]).
pub struct CopyCursor {
    client: Client,
    /// `(db, coll)`.
    namespace: (String, String),
    collection: Collection<bson::Document>,
    filter: bson::Document,
    batch_size: u32,
    /// The bracket being read; `BRACKETS.len()` once the collection is read.
    bracket: usize,
    /// The last `_id` read in that bracket (or committed, before the first read).
    after: Option<Bson>,
    /// The last `_id` read in any bracket (or committed): the next must be greater.
    previous: Option<RawBson>,
    /// How strings compare (the collection's collation), known after the first read.
    strings: Option<Strings>,
}

impl CopyCursor {
    /// A copy of `db.coll` with the find `filter`, continuing after `last_id` (the committed
    /// progress) when given.
    pub fn new(
        client: &Client,
        (db, coll): (&str, &str),
        filter: bson::Document,
        batch_size: u32,
        last_id: Option<&Bson>,
    ) -> Self {
        let bracket = last_id.and_then(bracket_of).unwrap_or(0);
        let single = BRACKETS.get(bracket).is_some_and(|b| b.single);
        let previous = last_id.and_then(|id| {
            let doc = RawDocumentBuf::from_document(&doc! { "_id": id.clone() }).ok()?;
            Some(doc.get("_id").ok()??.to_raw_bson())
        });
        Self {
            client: client.clone(),
            namespace: (db.to_owned(), coll.to_owned()),
            collection: client.database(db).collection(coll),
            filter,
            batch_size,
            // A single-value bracket whose value was copied is over.
            bracket: bracket + usize::from(last_id.is_some() && single),
            after: last_id.cloned().filter(|_| !single),
            previous,
            strings: None,
        }
    }

    /// Reads the next batch. Returns the copy back with the outcome, so the one task that owns
    /// it can keep it in a future.
    ///
    /// Errors: the driver's (the stage treats them like the stream's).
    pub async fn next(mut self) -> (Self, Result<Read, mongodb::error::Error>) {
        let outcome = self.read().await;
        (self, outcome)
    }

    async fn read(&mut self) -> Result<Read, mongodb::error::Error> {
        let strings = match self.strings {
            Some(strings) => strings,
            None => {
                let (db, coll) = &self.namespace;
                *self
                    .strings
                    .insert(super::plan::strings(&self.client, db, coll).await?)
            }
        };
        while let Some(bracket) = BRACKETS.get(self.bracket) {
            let condition = match &self.after {
                Some(after) => bson::bson!({ "$gt": after.clone() }),
                None => (bracket.first)(),
            };
            let page = self.query(condition, strings).await?;
            if let Some((previous, next)) = page.disorder {
                let owned = |id: RawBson| Bson::try_from(id).unwrap_or(Bson::Undefined);
                let (previous, next) = (owned(previous), owned(next));
                return Ok(Read::OutOfOrder { previous, next });
            }
            if !page.full || bracket.single {
                self.bracket += 1;
                self.after = None;
            }
            if !page.docs.is_empty() {
                let (docs, read_time) = (page.docs, page.read_time);
                return Ok(Read::Batch(Batch { docs, read_time }));
            }
        }
        let counted = count(&self.client, &self.collection, self.filter.clone()).await?;
        Ok(Read::Exhausted(counted))
    }

    /// One `find` of `_id` matching `condition`: its documents, read time, and whether it
    /// returned a whole batch (more may follow in the bracket), or the first two `_id`s out of
    /// order. Sets `after` and `previous` to the last `_id`.
    async fn query(
        &mut self,
        condition: Bson,
        strings: Strings,
    ) -> Result<Page, mongodb::error::Error> {
        let invalid = |e: &dyn std::fmt::Display| {
            mongodb::error::Error::custom(format!("malformed copy reply: {e}"))
        };
        let id = doc! { "_id": condition };
        let filter = if self.filter.is_empty() {
            id
        } else {
            doc! { "$and": [self.filter.clone(), id] }
        };
        let mut cursor = self
            .collection
            .find(filter)
            .sort(doc! { "_id": 1 })
            .hint(Hint::Keys(doc! { "_id": 1 }))
            .limit(i64::from(self.batch_size))
            .batch_size(self.batch_size)
            .read_concern(ReadConcern::majority())
            .batch()
            .await?;
        let mut docs: Vec<RawDocumentBuf> = Vec::with_capacity(self.batch_size as usize);
        let mut read_time = None;
        let mut full = false;
        let mut last: Option<RawBson> = None;
        let mut bytes = 0;
        'replies: while let Some(reply) = cursor.next().await {
            let reply = reply?;
            let operation_time = reply.as_raw_document().get_timestamp("operationTime");
            read_time = read_time.or(operation_time.ok());
            for item in reply.doc_slices()? {
                let RawBsonRef::Document(doc) = item.map_err(|e| invalid(&e))? else {
                    return Err(invalid(&"a batch item is not a document"));
                };
                let id = doc.get("_id").map_err(|e| invalid(&e))?;
                let before = match docs.last() {
                    Some(d) => d.get("_id").ok().flatten(),
                    None => self.previous.as_ref().map(RawBson::as_raw_bson_ref),
                };
                if let (Some(before), Some(id)) = (before, id)
                    && !follows(before, id, strings)
                {
                    let disorder = Some((before.to_raw_bson(), id.to_raw_bson()));
                    let (docs, full) = (Vec::new(), false);
                    return Ok(Page {
                        docs,
                        read_time,
                        full,
                        disorder,
                    });
                }
                last = id.map(|id| id.to_raw_bson());
                bytes += doc.as_bytes().len();
                docs.push(doc.to_raw_document_buf());
                if bytes >= MAX_BATCH_BYTES {
                    // The rest of the bracket comes with the next batch (after `last`); the
                    // cursor is dropped (killed) here.
                    full = true;
                    break 'replies;
                }
            }
        }
        if let Some(id) = last {
            self.after = Some(Bson::try_from(id.clone()).map_err(|e| invalid(&e))?);
            self.previous = Some(id);
        }
        let full = full || docs.len() >= self.batch_size as usize;
        let disorder = None;
        Ok(Page {
            docs,
            read_time,
            full,
            disorder,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_id_type_has_its_bracket_in_comparison_order() {
        let ordered = [
            Bson::MinKey,
            Bson::Null,
            Bson::Double(f64::NAN),
            Bson::Int64(1 << 40),
            Bson::String("a".into()),
            Bson::Document(doc! { "a": 1 }),
            Bson::Binary(bson::Binary {
                subtype: bson::spec::BinarySubtype::Uuid,
                bytes: vec![1; 16],
            }),
            Bson::ObjectId(bson::oid::ObjectId::from_bytes([1; 12])),
            Bson::Boolean(true),
            Bson::DateTime(bson::DateTime::from_millis(5)),
            Bson::Timestamp(Timestamp {
                time: 1,
                increment: 1,
            }),
            Bson::MaxKey,
        ];
        let brackets: Vec<Option<usize>> = ordered.iter().map(bracket_of).collect();
        assert_eq!(brackets, (0..12).map(Some).collect::<Vec<_>>());
        assert_eq!(bracket_of(&Bson::Double(2.5)), Some(3));
        let nan: bson::Decimal128 = "NaN".parse().expect("decimal NaN");
        let one: bson::Decimal128 = "1.5".parse().expect("decimal");
        assert_eq!(bracket_of(&Bson::Decimal128(nan)), Some(2));
        assert_eq!(bracket_of(&Bson::Decimal128(one)), Some(3));
        assert_eq!(bracket_of(&Bson::Array(vec![])), None);
    }

    #[tokio::test]
    async fn a_resume_continues_in_the_bracket_of_the_committed_id() {
        let client = Client::with_uri_str("mongodb://127.0.0.1:9")
            .await
            .expect("a client builds without I/O");
        let string = Bson::String("k1".into());
        let copy = CopyCursor::new(&client, ("d", "c"), doc! {}, 10, Some(&string));
        assert_eq!((copy.bracket, copy.after), (4, Some(string)));
        let copy = CopyCursor::new(&client, ("d", "c"), doc! {}, 10, Some(&Bson::Null));
        assert_eq!((copy.bracket, copy.after), (2, None));
        let copy = CopyCursor::new(&client, ("d", "c"), doc! {}, 10, None);
        assert_eq!((copy.bracket, copy.after), (0, None));
    }
}
