//! The `read_committed` poller of `eostxn` ([`Poller`]) and what each poll must see
//! ([`Polls`]): per partition, none or all of a round's share, each once, never shrinking.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::common::kafka::Isolation;
use crate::common::records::{EventId, Rec, read_all};

use super::{SIZE, round_of};

/// What the polling `read_committed` reader saw.
///
/// A fresh read is not a snapshot of the topic: it reaches the end of each partition at its
/// own moment, and the coordinator writes a transaction's commit markers partition by
/// partition (Kafka's transactions design, "writing the commit markers"). So a poll may see a
/// committed Kafka transaction on some partitions and not yet on others. What Kafka does
/// promise, per partition, is that the last stable offset moves past a whole transaction at
/// once. The check is therefore per partition: of each round, a poll must see on every
/// partition none of the records that partition ends up with or all of them, each once. A
/// MongoDB transaction split over two Kafka transactions shows on some partition as a part of
/// its share between the two commits.
#[derive(Debug, Default)]
pub struct Polls {
    pub polls: usize,
    /// Each poll's (round, partition) → distinct ids seen.
    seen: Vec<BTreeMap<(i64, i32), usize>>,
    /// Rounds seen complete.
    complete: HashSet<i64>,
    pub violations: Vec<String>,
}

impl Polls {
    /// Records one poll: duplicates and a share that shrank are violations at once.
    fn record(&mut self, recs: &[Rec]) {
        self.polls += 1;
        let poll = self.polls;
        let mut ids: BTreeMap<(i64, i32), HashSet<i64>> = BTreeMap::new();
        let mut records: BTreeMap<(i64, i32), usize> = BTreeMap::new();
        for r in recs {
            if let (Some(round), Some(EventId::Insert(id))) = (round_of(r), &r.event) {
                ids.entry((round, r.partition)).or_default().insert(*id);
                *records.entry((round, r.partition)).or_default() += 1;
            }
        }
        let distinct: BTreeMap<(i64, i32), usize> =
            ids.iter().map(|(k, v)| (*k, v.len())).collect();
        for ((round, partition), n) in &records {
            if *n != distinct[&(*round, *partition)] {
                self.violations.push(format!(
                    "poll {poll}: round {round}, partition {partition}: a duplicate ({} distinct \
                     in {n} records)",
                    distinct[&(*round, *partition)]
                ));
            }
        }
        if let Some(before) = self.seen.last() {
            for (key, n) in before {
                if distinct.get(key).copied().unwrap_or(0) < *n {
                    self.violations.push(format!(
                        "poll {poll}: round {}, partition {}: {n} records shrank to {}",
                        key.0,
                        key.1,
                        distinct.get(key).copied().unwrap_or(0)
                    ));
                }
            }
        }
        let mut totals: BTreeMap<i64, usize> = BTreeMap::new();
        for ((round, _), n) in &distinct {
            *totals.entry(*round).or_default() += n;
        }
        self.complete
            .extend(totals.iter().filter(|(_, n)| **n == SIZE).map(|(r, _)| *r));
        self.seen.push(distinct);
    }

    /// Holds every poll to each round's final shares (`last`, a read once all is committed):
    /// on every partition none or all of the share.
    fn check_shares(&mut self, last: &[Rec]) {
        let mut shares: BTreeMap<(i64, i32), HashSet<i64>> = BTreeMap::new();
        for r in last {
            if let (Some(round), Some(EventId::Insert(id))) = (round_of(r), &r.event) {
                shares.entry((round, r.partition)).or_default().insert(*id);
            }
        }
        for (i, poll) in self.seen.iter().enumerate() {
            for ((round, partition), n) in poll {
                let share = shares.get(&(*round, *partition)).map_or(0, HashSet::len);
                if *n != share {
                    self.violations.push(format!(
                        "poll {}: round {round}, partition {partition}: {n} of the {share} \
                         records it ends up with",
                        i + 1
                    ));
                }
            }
        }
    }
}

/// Reads `read_committed` afresh in a loop (see [`Polls`] for what each poll must see).
pub struct Poller {
    stop: Arc<AtomicBool>,
    state: Arc<Mutex<Polls>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Poller {
    pub fn start(bootstrap: &str, topic: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let state = Arc::new(Mutex::new(Polls::default()));
        let (s, st) = (Arc::clone(&stop), Arc::clone(&state));
        let (bootstrap, topic) = (bootstrap.to_owned(), topic.to_owned());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let recs = read_all(&bootstrap, &topic, Isolation::Committed);
                st.lock().expect("poll state").record(&recs);
            }
        });
        Self {
            stop,
            state,
            thread: Some(thread),
        }
    }

    pub fn complete(&self, round: i64) -> bool {
        self.state
            .lock()
            .expect("poll state")
            .complete
            .contains(&round)
    }

    /// Stops polling and checks every poll against `last`, the final read.
    pub fn finish(mut self, last: &[Rec]) -> Polls {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().expect("poller thread");
        }
        let mut polls = std::mem::take(&mut *self.state.lock().expect("poll state"));
        polls.check_shares(last);
        polls
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
