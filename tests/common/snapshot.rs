//! Documents for a snapshot to copy: one `_id` of every type MongoDB accepts (those the server
//! under test pages correctly, probed once per process), seeded in bulk, and a writer that
//! updates, replaces, deletes and inserts while the copy runs.

use std::collections::HashMap;
use std::time::Duration;

use bson::{Bson, Document, doc};
use mongodb::Collection;
use rand::Rng;

use crate::common::mongo::mongo;
use crate::common::unique;

/// One `_id` of every type MongoDB accepts (but array, regex, undefined), `i` making it unique
/// where the type allows.
pub fn id_of(i: usize) -> Bson {
    let n = i as i64;
    match i % 12 {
        0 => Bson::Int64(5_000_000_000 + n),
        1 => Bson::Double(n as f64 + 0.25),
        2 => Bson::String(format!("k{i:06}")),
        3 => Bson::ObjectId(bson::oid::ObjectId::from_bytes({
            let mut b = [0u8; 12];
            b[4..].copy_from_slice(&(n as u64).to_be_bytes());
            b
        })),
        4 => Bson::DateTime(bson::DateTime::from_millis(1_600_000_000_000 + n)),
        5 => Bson::Timestamp(bson::Timestamp {
            time: 1_700_000_000,
            increment: i as u32,
        }),
        6 => Bson::Binary(bson::Binary {
            subtype: bson::spec::BinarySubtype::Generic,
            bytes: (n as u64).to_be_bytes().to_vec(),
        }),
        7 => Bson::Binary(bson::Binary {
            subtype: bson::spec::BinarySubtype::Uuid,
            bytes: {
                let mut b = [0u8; 16];
                b[8..].copy_from_slice(&(n as u64).to_be_bytes());
                b.to_vec()
            },
        }),
        8 => Bson::Document(doc! { "part": n, "tag": "e" }),
        9 => Bson::Decimal128(format!("{n}.5").parse().expect("decimal")),
        10 => Bson::Boolean(i % 24 == 10),
        _ => Bson::Int64(-5_000_000_000 - n),
    }
}

/// The special `_id`s that exist once: null, MinKey, MaxKey (and the two booleans of `id_of`).
fn singletons() -> Vec<Bson> {
    vec![Bson::Null, Bson::MinKey, Bson::MaxKey]
}

/// The `id_of` types (`i % 12`) that a server pages correctly with `$gt` in `sort` order, at
/// the test's scale. MongoDB does for every type (BSON comparison order); a server that does
/// not cannot be copied bracket by bracket, and those types are left out with a line saying
/// so (SecantusDB 0.5: binaries and embedded documents sort in another order than `$gt`
/// compares them, so paging them skips documents).
async fn ordered_types(client: &mongodb::Client, count: usize) -> Vec<usize> {
    let db = client.database(&unique("order_probe"));
    let mut kept = vec![10]; // booleans: two values, nothing to page
    for group in [
        vec![0, 1, 9, 11],
        vec![2],
        vec![3],
        vec![4],
        vec![5],
        vec![6, 7],
        vec![8],
    ] {
        let coll = db.collection::<Document>(&format!("g{}", group[0]));
        let ids: Vec<Bson> = (0..count)
            .filter(|i| group.contains(&(i % 12)))
            .map(id_of)
            .collect();
        let docs: Vec<Document> = ids.iter().map(|id| doc! { "_id": id.clone() }).collect();
        coll.insert_many(docs).await.expect("probe insert");
        let (mut paged, mut last): (usize, Option<Bson>) = (0, None);
        loop {
            let filter = last.map_or_else(
                || doc! { "_id": { "$gte": f64::NEG_INFINITY } },
                |l| doc! { "_id": { "$gt": l } },
            );
            let filter = if group.contains(&0) {
                filter
            } else {
                last_or_type(&filter, group[0])
            };
            // The copy's own query shape (src/snapshot/copy.rs).
            let options = mongodb::options::FindOptions::builder()
                .sort(doc! { "_id": 1 })
                .hint(mongodb::options::Hint::Keys(doc! { "_id": 1 }))
                .limit(500)
                .batch_size(500)
                .read_concern(mongodb::options::ReadConcern::majority())
                .build();
            use futures::TryStreamExt;
            let batch: Vec<Document> = coll
                .find(filter)
                .with_options(options)
                .await
                .unwrap()
                .try_collect()
                .await
                .unwrap();
            paged += batch.len();
            if batch.len() < 500 {
                break;
            }
            last = batch.last().and_then(|d| d.get("_id").cloned());
        }
        if paged == ids.len() {
            kept.extend(group);
        } else {
            eprintln!(
                "_id types {group:?} of id_of left out: this server pages {paged} of {} \
                       with $gt in sort order",
                ids.len()
            );
        }
    }
    db.drop().await.ok();
    kept
}

/// The copy's first query of a bracket names its type; later ones page with `$gt`.
fn last_or_type(filter: &Document, kind: usize) -> Document {
    if filter
        .get_document("_id")
        .is_ok_and(|c| c.contains_key("$gt"))
    {
        return filter.clone();
    }
    let name = match kind {
        2 => vec!["string", "symbol"],
        3 => vec!["objectId"],
        4 => vec!["date"],
        5 => vec!["timestamp"],
        6 => vec!["binData"],
        _ => vec!["object"],
    };
    doc! { "_id": { "$type": name } }
}

/// [`ordered_types`] of the servers under test at scale `count`, probed once per test process
/// (the answer is the server's, and every test seeds the same server): each probe writes
/// `count` documents, which the shared server's oplog and the suite's time would pay again.
async fn probed_types(count: usize) -> Vec<usize> {
    static PROBED: std::sync::LazyLock<tokio::sync::Mutex<HashMap<usize, Vec<usize>>>> =
        std::sync::LazyLock::new(Default::default);
    let mut probed = PROBED.lock().await;
    if let Some(kinds) = probed.get(&count) {
        return kinds.clone();
    }
    let kinds = ordered_types(&mongo().await, count).await;
    probed.insert(count, kinds.clone());
    kinds
}

/// Seeds `count` documents (booleans only twice) plus the singletons, with the `_id` types the
/// server orders consistently; returns their `_id`s.
pub async fn seed(coll: &Collection<Document>, count: usize) -> Vec<Bson> {
    let kinds = probed_types(count).await;
    seed_kinds(coll, count, &kinds).await
}

/// The `id_of` kinds that every server under test pages correctly (SecantusDB 0.5 included):
/// numbers, strings, ObjectIds, dates, timestamps and booleans; for a collection on a server of
/// its own, where [`seed`]'s probe (on the shared server) would not say.
pub const PAGED_EVERYWHERE: [usize; 9] = [0, 1, 2, 3, 4, 5, 9, 10, 11];

/// [`seed`] with the `id_of` kinds `kinds` (`i % 12`).
pub async fn seed_kinds(coll: &Collection<Document>, count: usize, kinds: &[usize]) -> Vec<Bson> {
    let mut ids: Vec<Bson> = (0..count)
        .filter(|i| kinds.contains(&(i % 12)))
        .filter(|i| i % 12 != 10 || *i < 24)
        .map(id_of)
        .collect();
    ids.extend(singletons());
    for chunk in ids.chunks(1000) {
        let docs: Vec<Document> = chunk
            .iter()
            .map(|id| doc! { "_id": id.clone(), "v": 0_i64, "pad": "x".repeat(100) })
            .collect();
        coll.insert_many(docs).await.expect("seed");
    }
    ids
}

/// Random writes on `ids` until `stop`: updates, replaces, deletes and inserts of new ids (of
/// the `_id` kinds among `ids`).
/// The null `_id` is copied but not written to: SecantusDB's `update_lookup` finds no document
/// for `{_id: null}` (its update events carry `fullDocument: null`), which MongoDB does find.
pub async fn write_while(
    coll: Collection<Document>,
    ids: Vec<Bson>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> usize {
    write_paced(coll, ids, stop, Some(Duration::from_millis(2))).await
}

/// [`write_while`], pausing `pace` after each write (`None`: as fast as the server takes them):
/// the servers are shared with the other tests running at the same time.
pub async fn write_paced(
    coll: Collection<Document>,
    ids: Vec<Bson>,
    stop: tokio::sync::watch::Receiver<bool>,
    pace: Option<Duration>,
) -> usize {
    let ids: Vec<Bson> = ids.into_iter().filter(|id| *id != Bson::Null).collect();
    // New ids only of the kinds `ids` has: those the server was seen to page correctly
    // (`seed`); SecantusDB skips binaries and embedded documents when paging by `_id`.
    let kind = |id: &Bson| match id {
        Bson::Binary(b) => (id.element_type(), Some(b.subtype)),
        _ => (id.element_type(), None),
    };
    let kinds: Vec<usize> = (0..12)
        .filter(|k| ids.iter().any(|id| kind(id) == kind(&id_of(*k))))
        .collect();
    assert!(!kinds.is_empty(), "no id_of kind among the ids to write");
    let mut writes = 0;
    let mut fresh = 1_000_000;
    while !*stop.borrow() {
        let (which, id) = {
            let mut rng = rand::rng();
            (
                rng.random_range(0..10),
                ids[rng.random_range(0..ids.len())].clone(),
            )
        };
        let filter = doc! { "_id": id.clone() };
        let result = match which {
            0..=4 => coll
                .update_one(filter, doc! { "$inc": { "v": 1_i64 } })
                .await
                .map(|_| ()),
            5 | 6 => coll
                .replace_one(filter, doc! { "v": -1_i64, "replaced": true })
                .await
                .map(|_| ()),
            7 => coll.delete_one(filter).await.map(|_| ()),
            _ => {
                fresh += 1;
                while !kinds.contains(&(fresh % 12)) {
                    fresh += 1;
                }
                coll.insert_one(doc! { "_id": id_of(fresh), "v": 7_i64 })
                    .await
                    .map(|_| ())
            }
        };
        if result.is_ok() {
            writes += 1;
        }
        if let Some(pace) = pace {
            tokio::time::sleep(pace).await;
        }
    }
    writes
}
