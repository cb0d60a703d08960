//! The kubelet scenario's epoch watch: every pipeline's epoch read from the offsets documents
//! once a second while the chaos runs, each change recorded, a decrease reported.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bson::{Bson, Document, doc};
use futures::TryStreamExt;
use mongodb::{Client, Collection};

use crate::say;
use crate::suite::since_start;

/// What the epoch watch saw.
#[derive(Debug, Default)]
pub struct Epochs {
    /// Pipeline → its epochs in the order they appeared.
    pub seen: BTreeMap<String, Vec<i64>>,
    /// Every sample in which an epoch was lower than before.
    pub decreases: Vec<String>,
    pub samples: usize,
    pub failed_reads: usize,
}

/// Reads every pipeline's epoch from the offsets documents once a second, in a task.
/// Stops when dropped (a scenario that panics or returns early).
pub struct EpochWatch {
    stop: Arc<AtomicBool>,
    task: Option<tokio::task::JoinHandle<Epochs>>,
}

impl EpochWatch {
    pub fn start(client: &Client, offsets_db: &str) -> Self {
        let coll = client
            .database(offsets_db)
            .collection::<Document>("offsets");
        let stop = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&stop);
        let task = tokio::spawn(async move {
            let mut out = Epochs::default();
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !s.load(Ordering::Relaxed) {
                tick.tick().await;
                match tokio::time::timeout(Duration::from_secs(5), read_epochs(&coll)).await {
                    Ok(Some(now)) => out.record(now),
                    _ => out.failed_reads += 1,
                }
            }
            out
        });
        Self {
            stop,
            task: Some(task),
        }
    }

    pub async fn stop(mut self) -> Epochs {
        self.stop.store(true, Ordering::Relaxed);
        let task = self.task.take().expect("epoch watch task");
        task.await.expect("epoch watch")
    }
}

impl Drop for EpochWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Epochs {
    fn record(&mut self, now: BTreeMap<String, i64>) {
        self.samples += 1;
        for (name, epoch) in now {
            let seen = self.seen.entry(name.clone()).or_default();
            match seen.last() {
                Some(last) if epoch < *last => {
                    let text = format!(
                        "{name}: epoch {epoch} after {last} at {:.1} s",
                        since_start()
                    );
                    say!("kubelet: EPOCH WENT DOWN: {text}");
                    self.decreases.push(text);
                    seen.push(epoch);
                }
                Some(last) if epoch == *last => {}
                _ => seen.push(epoch),
            }
        }
    }
}

/// Pipeline → epoch of every offsets document (`None` when the read failed).
async fn read_epochs(coll: &Collection<Document>) -> Option<BTreeMap<String, i64>> {
    let mut cursor = coll.find(doc! {}).await.ok()?;
    let mut out = BTreeMap::new();
    while let Some(d) = cursor.try_next().await.ok()? {
        if let (Some(Bson::String(name)), Ok(epoch)) = (d.get("_id"), d.get_i64("epoch")) {
            out.insert(name.clone(), epoch);
        }
    }
    Some(out)
}
