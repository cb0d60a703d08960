//! What a `read_committed` consumer must see of an exactly-once run, recorded in a scenario's
//! row: every event once, nothing else, per-document order, as many records as events; a
//! long-lived consumer the same as a fresh read; the records of aborted transactions; and
//! the wait for the bridge to commit again after a pause or an outage.

use std::time::{Duration, Instant};

use mongodb::Client;

use crate::common::bridge::BridgeProc;
use crate::common::config::Cfg;
use crate::common::kafka::Isolation;
use crate::common::load::Truth;
use crate::common::records::{Consumer, EventId, Rec, read};
use crate::common::verdict::{Verdict, verify};
use crate::exactly_once::evidence::{progress_records, sequence_repeats};
use crate::say;
use crate::suite::Row;

/// Checks that the long-lived consumer read the same records as a fresh read (`fresh`, which
/// [`check_exactly_once`] checked): each event as often, in the same order per partition.
///
/// A follower that read nothing in that minute while behind is a client librdkafka left
/// without brokers (`Consumer::rebuild_at_position`): it is built again at its position, said
/// in the row, and the comparison covers what the new client reads after the old one.
pub async fn check_follower(row: &mut Row, follower: &Consumer, fresh: &[Rec]) {
    let before = follower.snapshot().len();
    let mut followed = follower
        .read_up_to(fresh.len(), Duration::from_secs(60))
        .await;
    if followed.len() < fresh.len() && followed.len() == before {
        say!(
            "the long-lived read_committed consumer read nothing in 60 s, {} records behind a \
             fresh read (errors: {:?}): built again at its position (librdkafka#5301)",
            fresh.len() - followed.len(),
            follower.errors()
        );
        let note = format!("follower rebuilt at {} of {}", followed.len(), fresh.len());
        row.runs = [row.runs.as_str(), note.as_str()].join("; ");
        follower.rebuild_at_position();
        followed = follower
            .read_up_to(fresh.len(), Duration::from_secs(60))
            .await;
    }
    let events = |recs: &[Rec]| -> Vec<(i32, Option<EventId>)> {
        let mut v: Vec<(i32, Option<EventId>)> = recs
            .iter()
            .map(|r| (r.partition, r.event.clone()))
            .collect();
        v.sort_by_key(|(p, _)| *p); // stable: keeps each partition's order
        v
    };
    let (a, b) = (events(&followed), events(fresh));
    let first_difference = a.iter().zip(&b).position(|(x, y)| x != y);
    say!(
        "a long-lived read_committed consumer read {} records, a fresh read {}",
        a.len(),
        b.len()
    );
    let per_partition = |v: &[(i32, Option<EventId>)]| {
        let mut counts = std::collections::BTreeMap::<i32, usize>::new();
        for (p, _) in v {
            *counts.entry(*p).or_default() += 1;
        }
        counts
    };
    row.check(a == b, || {
        format!(
            "a long-lived read_committed consumer read {} records where a fresh read has {} \
             (first difference at {first_difference:?}; per partition {:?} against {:?}; \
             the consumer's errors: {:?})",
            a.len(),
            b.len(),
            per_partition(&a),
            per_partition(&b),
            follower.errors(),
        )
    });
}

/// Reads `read_committed` (a fresh read each time) until every event of `truth` is there or
/// `timeout` passed; the last read.
pub async fn wait_committed(
    bootstrap: &str,
    topic: &str,
    truth: &Truth,
    timeout: Duration,
) -> Vec<Rec> {
    let deadline = Instant::now() + timeout;
    loop {
        let recs = read(bootstrap, topic, Isolation::Committed).await;
        if verify(truth, &recs).missing == 0 || Instant::now() > deadline {
            return recs;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The exactly-once checks of a `read_committed` read, recorded in `row`: every event of
/// `truth` once, nothing else, per-document order intact, as many records as events.
pub fn check_exactly_once(row: &mut Row, truth: &Truth, recs: &[Rec]) -> Verdict {
    let v = verify(truth, recs);
    row.check(v.missing == 0, || {
        format!(
            "read_committed: {} of {} events missing, first {:?}",
            v.missing, v.writes, v.first_missing
        )
    });
    row.check(v.duplicates == 0, || {
        format!(
            "read_committed: {} duplicates, e.g. {}",
            v.duplicates,
            duplicated(recs).join("; ")
        )
    });
    row.check(v.unexpected == 0, || {
        format!(
            "read_committed: {} records of events MongoDB does not have",
            v.unexpected
        )
    });
    row.check(v.order_violations.is_empty(), || {
        format!(
            "read_committed: per-document order broken: {:?}",
            v.order_violations
        )
    });
    row.check(recs.len() == v.writes, || {
        format!(
            "read_committed: {} records for {} events",
            recs.len(),
            v.writes
        )
    });
    v
}

/// Where a copy of a record is: partition, offset, CreateTime (ms).
type Place = (i32, i64, Option<i64>);

/// The first 5 duplicated events with their copies.
fn duplicated(recs: &[Rec]) -> Vec<String> {
    let mut copies: std::collections::BTreeMap<&EventId, Vec<Place>> =
        std::collections::BTreeMap::new();
    for r in recs {
        if let Some(e) = &r.event {
            copies
                .entry(e)
                .or_default()
                .push((r.partition, r.offset, r.timestamp_ms));
        }
    }
    copies
        .into_iter()
        .filter(|(_, c)| c.len() > 1)
        .take(5)
        .map(|(e, c)| format!("{e:?} at {c:?}"))
        .collect()
}

/// The records of `uncommitted` (a `read_uncommitted` read) that `committed` (a later
/// `read_committed` read of the same topic) does not have: records of aborted transactions.
pub fn aborted<'a>(uncommitted: &'a [Rec], committed: &[Rec]) -> Vec<&'a Rec> {
    let seen: std::collections::HashSet<(i32, i64)> =
        committed.iter().map(|r| (r.partition, r.offset)).collect();
    uncommitted
        .iter()
        .filter(|r| !seen.contains(&(r.partition, r.offset)))
        .collect()
}

/// The committed progress records of `offsets_db` on `bootstrap` raise `commitSequence` each
/// time ([`sequence_repeats`]): no committed transaction was published again.
pub async fn check_sequence(row: &mut Row, bootstrap: &str, offsets_db: &str) {
    let repeats =
        sequence_repeats(&progress_records(bootstrap, offsets_db, Isolation::Committed).await);
    row.check(repeats.is_empty(), || {
        format!(
            "committed progress records repeat a commitSequence: {}",
            repeats.join("; ")
        )
    });
}

/// Waits (up to 120 s, while `proc` runs) until the offsets document's `commitSequence` is
/// past `frozen_at`: the bridge commits again after a pause or an outage.
pub async fn wait_commit_after(cfg: &Cfg, client: &Client, proc: &mut BridgeProc, frozen_at: i64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while cfg.commit_sequence(client).await <= frozen_at
        && Instant::now() < deadline
        && proc.running()
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
