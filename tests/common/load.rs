//! The fault suite's write load and its truth. The load: inserts of `{_id: <i64>}` (one event
//! each) interleaved with `$inc: {n: 1}` on a small set of pre-existing documents
//! `{_id: "u<k>", n: 0}` (the k-th update of a document carries `updatedFields.n = k`, so
//! per-document order is checkable). The truth is read back from MongoDB at the end: every
//! `_id` present, every update document's final `n`. A write whose outcome the writer could not
//! know (a server restart mid-write) is therefore counted exactly as MongoDB applied it.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bson::{Bson, Document, doc};
use futures::TryStreamExt;
use mongodb::Collection;

use crate::common::records::EventId;

/// Documents the load updates: `{_id: "u<k>", n: 0}`, written before the bridge starts.
pub async fn prepare_update_keys(coll: &Collection<Document>, keys: u32) {
    let docs: Vec<Document> = (0..keys)
        .map(|k| doc! { "_id": format!("u{k}"), "n": 0_i32 })
        .collect();
    coll.insert_many(docs).await.expect("insert update keys");
}

/// A running write load.
pub struct Load {
    stop: Arc<AtomicBool>,
    /// Writes acknowledged so far.
    pub acked: Arc<AtomicU64>,
    /// Write attempts that failed (retried).
    pub errors: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

/// Starts a write load of `rate` writes/s: three inserts, then one `$inc` on the next of
/// `keys` update documents, repeated. Inserts use `_id` from `first_id` on.
pub fn start_load(coll: Collection<Document>, rate: u32, keys: u32, first_id: i64) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let (s, a, e) = (Arc::clone(&stop), Arc::clone(&acked), Arc::clone(&errors));
    let task = tokio::spawn(async move {
        let period = Duration::from_secs_f64(1.0 / f64::from(rate.max(1)));
        let mut next = Instant::now();
        let mut id = first_id;
        let mut op: u64 = 0;
        while !s.load(Ordering::Relaxed) {
            let now = Instant::now();
            if next > now {
                tokio::time::sleep(next - now).await;
            } else if now - next > Duration::from_secs(1) {
                next = now; // fell behind (a slow or stopped server): no burst afterwards
            }
            next += period;
            let update = op % 4 == 3 && keys > 0;
            let key = format!("u{}", (op / 4) % u64::from(keys.max(1)));
            loop {
                let result = if update {
                    coll.update_one(doc! { "_id": &key }, doc! { "$inc": { "n": 1 } })
                        .await
                        .map(|_| ())
                } else {
                    // `at`: when it was written, for delivery delays (`Rec::written_ms`).
                    match coll
                        .insert_one(doc! { "_id": id, "at": bson::DateTime::now() })
                        .await
                    {
                        Err(err) if is_duplicate_key(&err) => Ok(()), // an earlier attempt landed
                        other => other.map(|_| ()),
                    }
                };
                match result {
                    Ok(()) => {
                        a.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    Err(_) => {
                        e.fetch_add(1, Ordering::Relaxed);
                        if s.load(Ordering::Relaxed) {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
            if !update {
                id += 1;
            }
            op += 1;
        }
    });
    Load {
        stop,
        acked,
        errors,
        task,
    }
}

fn is_duplicate_key(err: &mongodb::error::Error) -> bool {
    matches!(
        &*err.kind,
        mongodb::error::ErrorKind::Write(mongodb::error::WriteFailure::WriteError(w)) if w.code == 11000
    )
}

impl Load {
    /// Stops the load and waits for the writer.
    pub async fn stop(self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        (
            self.acked.load(Ordering::Relaxed),
            self.errors.load(Ordering::Relaxed),
        )
    }
}

/// What MongoDB holds after the load: the events the bridge must deliver.
#[derive(Debug, Default)]
pub struct Truth {
    pub inserts: BTreeSet<i64>,
    /// Update document → final `n` (updates 1..=n happened).
    pub updates: BTreeMap<String, i64>,
}

impl Truth {
    pub async fn read(coll: &Collection<Document>) -> Self {
        let mut truth = Self::default();
        let mut cursor = coll.find(doc! {}).await.expect("find");
        while let Some(d) = cursor.try_next().await.expect("read documents") {
            match d.get("_id") {
                Some(Bson::Int64(i)) => {
                    truth.inserts.insert(*i);
                }
                Some(Bson::String(k)) => {
                    let n = match d.get("n") {
                        Some(Bson::Int32(n)) => i64::from(*n),
                        Some(Bson::Int64(n)) => *n,
                        other => panic!("unexpected n {other:?}"),
                    };
                    truth.updates.insert(k.clone(), n);
                }
                other => panic!("unexpected _id {other:?}"),
            }
        }
        truth
    }

    /// Every event the writes produced.
    pub fn expected(&self) -> HashSet<EventId> {
        let mut set: HashSet<EventId> = self.inserts.iter().map(|i| EventId::Insert(*i)).collect();
        for (k, n) in &self.updates {
            for i in 1..=*n {
                set.insert(EventId::Update(k.clone(), i));
            }
        }
        set
    }
}
