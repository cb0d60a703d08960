//! What a group scenario's pipelines delivered, once its loads stopped: each pipeline's records
//! against its collection (0 lost, per-document order kept, duplicates only where a kill or a
//! hand-over replayed them), and the delivery delays (write → produce) in a window.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::load::Truth;
use crate::common::records::Rec;
use crate::common::verdict::{Verdict, verify};
use crate::group::{RATE, World, epochs, median};
use crate::say;
use crate::suite::Row;

/// A scenario's figures over every pipeline.
#[derive(Default)]
pub(crate) struct Totals {
    pub(crate) writes: usize,
    pub(crate) unique: usize,
    pub(crate) duplicates: usize,
    /// The longest delivery delay around the join of a pipeline that stayed (s).
    pub(crate) join_delay_max: f64,
}

/// The longest delivery delay (produced − written) of the inserts written from `from_ms` to
/// `to_ms` (s; 0 without one).
fn longest_delay(recs: &[Rec], from_ms: i64, to_ms: i64) -> f64 {
    let delay = recs
        .iter()
        .filter_map(|r| Some((r.written_ms?, r.timestamp_ms?)))
        .filter(|(w, _)| *w >= from_ms && *w <= to_ms)
        .map(|(w, t)| t - w)
        .max()
        .unwrap_or(0);
    delay as f64 / 1000.0
}

/// Once the loads stopped: every pipeline's records against its collection (0 lost, order
/// kept, duplicates only where a kill or hand-over replayed), and the delivery delays of the
/// pipelines that stayed (not in `moved`) around a join at `join_ms` against those of a quiet
/// window (`quiet_ms`). `committed_at_kill`: per kill, the positions the victim's pipelines had
/// committed.
pub(crate) async fn check_pipelines(
    world: &World,
    committed_at_kill: &[BTreeMap<String, (u32, u32)>],
    (moved, join_ms): (&[String], i64),
    quiet_ms: (i64, i64),
    row: &mut Row,
) -> Totals {
    let (cfg, client, colls, consumers) = world.parts();
    let final_epochs = epochs(cfg, client, 1).await;
    let (mut gaps, mut baseline, mut totals) = (Vec::new(), Vec::new(), Totals::default());
    for (i, coll) in colls.iter().enumerate() {
        let truth = Truth::read(coll).await;
        consumers[i]
            .wait_complete(&truth, Duration::from_secs(120))
            .await;
        // Late duplicates still on their way.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let recs = consumers[i].snapshot();
        let v2 = verify(&truth, &recs);
        let name = format!("p{i}");
        row.check(
            v2.missing == 0 && v2.unexpected == 0 && v2.order_violations.is_empty(),
            || {
                format!(
                    "{name}: {} missing (first {:?}), {} unexpected, order {:?}",
                    v2.missing, v2.first_missing, v2.unexpected, v2.order_violations
                )
            },
        );
        let taken = final_epochs.get(&name).copied().unwrap_or(1);
        check_copies(row, &name, &v2, &recs, committed_at_kill, taken);
        if !moved.contains(&name) {
            // The delivery delay of its inserts around the join.
            gaps.push(longest_delay(&recs, join_ms - 2_000, join_ms + 20_000));
        }
        let quiet = longest_delay(&recs, quiet_ms.0, quiet_ms.1);
        // (the killed member's pipelines delivered that window only after the failover)
        if !committed_at_kill.iter().any(|c| c.contains_key(&name)) {
            baseline.push(quiet);
        }
        totals.writes += v2.writes;
        totals.unique += v2.unique;
        totals.duplicates += v2.duplicates;
    }
    let (glo, gmid, ghi) = median(gaps);
    let (blo, bmid, bhi) = median(baseline);
    say!(
        "group: longest delivery delay (write → produce) of the pipelines that stayed during the join: min {glo:.2} s, median {gmid:.2} s, max {ghi:.2} s ({RATE} writes/s each); before the kill, with nothing moving: min {blo:.2} s, median {bmid:.2} s, max {bhi:.2} s"
    );
    totals.join_delay_max = ghi;
    totals
}

/// Duplicates only of events after the position committed before some kill, or read again by
/// the next owner after a graceful hand-over (at most what was in flight at the revocation, one
/// replay per move: the contract's bound; the race that made it happen in practice, a position
/// the checkpointer marked seen without committing, is fixed). `taken`: the pipeline's last
/// epoch.
fn check_copies(
    row: &mut Row,
    name: &str,
    v2: &Verdict,
    recs: &[Rec],
    committed_at_kill: &[BTreeMap<String, (u32, u32)>],
    taken: i64,
) {
    let killed = committed_at_kill
        .iter()
        .filter(|c| c.contains_key(name))
        .count();
    let handovers = usize::try_from(taken - 1)
        .unwrap_or(0)
        .saturating_sub(killed);
    for (event, copies) in &v2.copies {
        if *copies <= 1 {
            continue;
        }
        let t = v2.times.get(event).copied().unwrap_or((0, 0));
        let replays = committed_at_kill
            .iter()
            .filter(|c| c.get(name).is_some_and(|c| *c < t))
            .count()
            + handovers;
        row.check(copies - 1 <= replays, || {
            let at: Vec<(i64, Option<i64>)> = recs
                .iter()
                .filter(|r| r.event.as_ref() == Some(event))
                .map(|r| (r.offset, r.timestamp_ms))
                .collect();
            format!(
                "{name}: {event:?} (clusterTime {}.{}) has {copies} copies (offset, \
                 produced ms: {at:?}); more than the kills and hand-overs that replayed it",
                t.0, t.1
            )
        });
    }
}
