//! The evidence of an exactly-once run beyond the records: the progress topic's records (their
//! `commitSequence` must rise), the layout of a partition around a repeat, the copies noida-db
//! lets through after an abort marker, and what the bridge's log and `/metrics` say.

use rdkafka::message::Message;

use crate::common::bridge::log_lines;
use crate::common::kafka::{Isolation, scan};
use crate::common::observe::{fetch, metric_sum};
use crate::common::records::{EventId, Rec};

/// One record of the progress topic: its offset, `epoch` and `commitSequence`.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub offset: i64,
    pub epoch: i64,
    pub commit: i64,
}

/// The progress records of the pipeline of `offsets_db` (a fresh read of its progress topic,
/// `__mongo_kafka_bridge.<offsets_db>.progress.<streamUid>`, from offset 0 with `isolation`;
/// the scenarios run one exactly-once pipeline per offsets database).
pub async fn progress_records(
    bootstrap: &str,
    offsets_db: &str,
    isolation: Isolation,
) -> Vec<Progress> {
    let bootstrap = bootstrap.to_owned();
    let prefix = format!("__mongo_kafka_bridge.{offsets_db}.progress.");
    tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        let Some(topic) = topics_of(&bootstrap)
            .into_iter()
            .find(|t| t.starts_with(&prefix))
        else {
            return out;
        };
        scan(&bootstrap, &topic, isolation, |m| {
            let value: Option<serde_json::Value> =
                m.payload().and_then(|p| serde_json::from_slice(p).ok());
            let number = |v: &serde_json::Value, field: &str| {
                let f = &v[field];
                f.as_i64()
                    .or_else(|| f["$numberLong"].as_str()?.parse().ok())
                    .unwrap_or(-1)
            };
            if let Some(v) = value {
                out.push(Progress {
                    offset: m.offset(),
                    epoch: number(&v, "epoch"),
                    commit: number(&v, "commitSequence"),
                });
            }
        });
        out
    })
    .await
    .expect("reader thread")
}

/// The topics on `bootstrap`.
fn topics_of(bootstrap: &str) -> Vec<String> {
    use rdkafka::consumer::{BaseConsumer, Consumer as _};
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("metadata client");
    consumer
        .fetch_metadata(None, std::time::Duration::from_secs(10))
        .map(|md| md.topics().iter().map(|t| t.name().to_owned()).collect())
        .unwrap_or_default()
}

/// The progress partition up to `upto` as `offset:C|A:epoch:commitSequence` (C: committed,
/// A: aborted), from a `read_uncommitted` and a `read_committed` read: the evidence of a
/// repeat.
pub fn progress_layout(uncommitted: &[Progress], committed: &[Progress], upto: i64) -> String {
    let committed: std::collections::HashSet<i64> = committed.iter().map(|p| p.offset).collect();
    uncommitted
        .iter()
        .filter(|p| p.offset <= upto)
        .map(|p| {
            let state = if committed.contains(&p.offset) {
                "C"
            } else {
                "A"
            };
            format!("{}:{state}:{}:{}", p.offset, p.epoch, p.commit)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The committed records that landed after their own transaction's abort marker: the first
/// copy of a duplicated event, preceded (past other such copies) by a control record and then
/// an aborted record of the same partition.
///
/// noida-db 0.2.3 quirk (found 2026-12-02, `eosfreeze`): a produce request of a transaction
/// that sat in the frozen broker's socket buffer while the client timed it out is processed
/// after the thaw, after the abort marker the coordinator wrote for that transaction (the
/// client's epoch bump), and noida accepts it with the older producer epoch; the next commit
/// marker of the same producer id (the new producer's first transaction) then commits it.
/// Kafka rejects such a request (a producer epoch older than the partition's, which the abort
/// marker raised: KIP-98, KIP-360), so these copies never exist there. Only a test on noida
/// may set them aside, and only these: any other repeat still fails it.
pub fn landed_after_abort(
    uncommitted: &[Rec],
    committed: &[Rec],
) -> std::collections::HashSet<(i32, i64)> {
    use std::collections::{HashMap, HashSet};
    let visible: HashSet<(i32, i64)> = committed.iter().map(|r| (r.partition, r.offset)).collect();
    let mut copies: HashMap<&EventId, Vec<(i32, i64)>> = HashMap::new();
    for r in committed {
        if let Some(e) = &r.event {
            copies.entry(e).or_default().push((r.partition, r.offset));
        }
    }
    let firsts: HashSet<(i32, i64)> = copies
        .values()
        .filter(|c| c.len() > 1)
        .filter_map(|c| c.iter().min().copied())
        .collect();
    let mut by_partition: HashMap<i32, Vec<i64>> = HashMap::new();
    for r in uncommitted {
        by_partition.entry(r.partition).or_default().push(r.offset);
    }
    firsts
        .iter()
        .copied()
        .filter(|&(partition, offset)| {
            let mut offsets = by_partition.get(&partition).cloned().unwrap_or_default();
            offsets.sort_unstable();
            let mut after = offset;
            for &o in offsets.iter().rev().filter(|&&o| o < offset) {
                if firsts.contains(&(partition, o)) {
                    after = o;
                    continue;
                }
                return !visible.contains(&(partition, o)) && o < after - 1;
            }
            false
        })
        .collect()
}

/// Each partition's records around its first repeated event (`around` offsets either side of
/// both copies) as `offset:C|A:event`: the evidence of a duplicate.
pub fn data_layout(uncommitted: &[Rec], committed: &[Rec], around: i64) -> String {
    let seen: std::collections::HashSet<(i32, i64)> =
        committed.iter().map(|r| (r.partition, r.offset)).collect();
    let mut first: std::collections::HashMap<&Option<EventId>, &Rec> = Default::default();
    let mut windows: Vec<(i32, i64, i64)> = Vec::new();
    for r in committed {
        if let Some(f) = first.get(&r.event) {
            if r.event.is_some() && !windows.iter().any(|w| w.0 == r.partition) {
                windows.push((r.partition, f.offset - around, r.offset + around));
            }
        } else {
            first.insert(&r.event, r);
        }
    }
    windows
        .iter()
        .map(|&(partition, from, to)| {
            let cells: Vec<String> = uncommitted
                .iter()
                .filter(|r| r.partition == partition && (from..=to).contains(&r.offset))
                .map(|r| {
                    let state = if seen.contains(&(r.partition, r.offset)) {
                        "C"
                    } else {
                        "A"
                    };
                    format!("{}:{state}:{:?}@{:?}", r.offset, r.event, r.timestamp_ms)
                })
                .collect();
            format!("partition {partition}: {}", cells.join(" "))
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Committed progress records whose `commitSequence` does not rise (one pipeline, no reset):
/// a transaction committed again from an older position, i.e. its records replayed. The first
/// 5 as text.
pub fn sequence_repeats(records: &[Progress]) -> Vec<String> {
    records
        .windows(2)
        .filter(|w| w[1].commit <= w[0].commit)
        .take(5)
        .map(|w| {
            format!(
                "offset {} (epoch {}) commitSequence {} after offset {} (epoch {}) commitSequence {}",
                w[1].offset, w[1].epoch, w[1].commit, w[0].offset, w[0].epoch, w[0].commit
            )
        })
        .collect()
}

/// The epochs of the "took the pipeline" lines of a log, in order (a first take and a
/// standby's take-over).
pub fn epochs_taken(text: &str) -> Vec<i64> {
    log_lines(text)
        .iter()
        .filter(|v| {
            v["message"]
                .as_str()
                .is_some_and(|m| m.ends_with("took the pipeline"))
        })
        .filter_map(|v| v["epoch"].as_i64())
        .collect()
}

/// The distinct WARN and ERROR lines of a log (message and error, shortened), with counts, for
/// the report.
pub fn warnings(text: &str) -> Vec<String> {
    let mut seen: Vec<(String, usize)> = Vec::new();
    for v in log_lines(text) {
        if !matches!(v["level"].as_str(), Some("WARN" | "ERROR")) {
            continue;
        }
        let line = format!(
            "{}: {}{}",
            v["level"].as_str().unwrap_or_default(),
            v["message"].as_str().unwrap_or_default(),
            v["error"]
                .as_str()
                .map(|e| format!(" ({})", e.chars().take(240).collect::<String>()))
                .unwrap_or_default()
        );
        match seen.iter_mut().find(|(l, _)| *l == line) {
            Some((_, n)) => *n += 1,
            None => seen.push((line, 1)),
        }
    }
    seen.into_iter().map(|(l, n)| format!("{n}× {l}")).collect()
}

/// `mongo_kafka_bridge_transactions_total` by outcome (committed, aborted) from `/metrics`.
pub fn transactions(addr: &str) -> Option<(u64, u64)> {
    let (_, body) = fetch(addr, "/metrics")?;
    let sum = |outcome: &str| {
        let label = format!("outcome=\"{outcome}\"");
        metric_sum(&body, "mongo_kafka_bridge_transactions_total", &[&label]) as u64
    };
    Some((sum("committed"), sum("aborted")))
}
