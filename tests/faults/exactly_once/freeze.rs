//! `eosfreeze`: the broker frozen (SIGSTOP, then SIGCONT) under a steady write load, with
//! `transaction.timeout.ms = 8000`: once for less than that (4 s), once for more (12 s; the
//! long form 20 s). At 150 writes/s and a 200 ms commit interval a Kafka transaction is open
//! at almost every moment, so each freeze catches one in the middle. The bridge process must
//! keep running both times (its pipeline may restart inside it: a delivery timeout aborts the
//! transaction, a coordinator that timed it out fences the producer with our epoch still
//! current), and a fresh `read_committed` read has every event exactly once.
//!
//! On noida-db, a long freeze can leave a copy that Kafka would refuse: a produce request of
//! the aborted transaction, processed after its abort marker and committed by the next
//! producer's first commit ([`super::landed_after_abort`]). Those copies, and only those, are
//! set aside and counted; the partitions around them are printed as evidence.

use std::time::{Duration, Instant};

use crate::common::bridge::BridgeProc;
use crate::common::kafka::Isolation;
use crate::common::load::{Truth, start_load};
use crate::common::records::{Rec, read};
use crate::exactly_once::checks::{
    aborted, check_exactly_once, check_follower, check_sequence, wait_commit_after, wait_committed,
};
use crate::exactly_once::evidence::{
    data_layout, landed_after_abort, progress_layout, progress_records, transactions, warnings,
};
use crate::say;
use crate::stage::Stage;
use crate::suite::{Ctx, Row};

const TRANSACTION_TIMEOUT_MS: u64 = 8000;
const RATE: u32 = 150;

pub async fn broker_frozen(ctx: &Ctx) -> Vec<Row> {
    let freezes = [
        Duration::from_secs(4),
        Duration::from_secs(if ctx.long { 20 } else { 12 }),
    ];
    let timeout = format!("\"transaction.timeout.ms\" = {TRANSACTION_TIMEOUT_MS}");
    let stage = super::stage(ctx, "eosfreeze", "eosfreeze", 20, &timeout, "").await;
    let follower = stage.follower();
    let (mut proc, addr) = stage.start("eosfreeze.log").await;
    let load = start_load(stage.coll.clone(), RATE, 20, 0);
    let (inst, cfg, _, coll) = stage.parts();
    let topic = cfg.topic();
    let mut row = Row::new(&format!(
        "exactly once: broker frozen {} s and {} s (transaction.timeout.ms {TRANSACTION_TIMEOUT_MS})",
        freezes[0].as_secs(),
        freezes[1].as_secs()
    ));
    let mut notes = Vec::new();
    let mut recoveries = Vec::new();
    for freeze in freezes {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (restarts, recovered) = freeze_once(&stage, &mut proc, freeze, &mut row).await;
        notes.push(format!("{}s: {restarts} restart(s)", freeze.as_secs()));
        recoveries.push(recovered);
    }
    let (acked, errors) = load.stop().await;
    let truth = Truth::read(coll).await;
    let caught_up = Instant::now();
    wait_committed(&inst.kafka, &topic, &truth, Duration::from_secs(180)).await;
    let recovery = caught_up.elapsed().as_secs_f64();
    row.check(proc.running(), || {
        format!("the bridge exited: {:?}\n{}", proc.exit, proc.log_tail(10))
    });
    let transactions = transactions(&addr);
    let status = proc.stop(Duration::from_secs(30));
    row.check(status.success(), || format!("graceful stop: {status}"));
    let committed = read(&inst.kafka, &topic, Isolation::Committed).await;
    let uncommitted = read(&inst.kafka, &topic, Isolation::Uncommitted).await;
    // noida only: the old producer's copies that landed after their abort marker (see
    // `landed_after_abort`); Kafka refuses them.
    let stale = match inst.broker.as_str() {
        "noida" => landed_after_abort(&uncommitted, &committed),
        _ => Default::default(),
    };
    let strict: Vec<_> = committed
        .iter()
        .filter(|r| !stale.contains(&(r.partition, r.offset)))
        .cloned()
        .collect();
    let v = check_exactly_once(&mut row, &truth, &strict);
    if let Some(f) = &follower {
        check_follower(&mut row, f, &committed).await;
    }
    let aborted = aborted(&uncommitted, &committed).len();
    check_sequence(&mut row, &inst.kafka, &cfg.offsets_db()).await;
    if v.duplicates > 0 || !stale.is_empty() {
        print_evidence(&inst.kafka, &cfg.offsets_db(), &uncommitted, &committed).await;
    }
    let metrics = transactions_note(&proc.log_text());
    say!(
        "eosfreeze: {acked} writes ({errors} retried), {} events; read_committed: {} delivered, \
         {} missing, {} duplicates (and {} copies set aside that landed after their abort \
         marker, a noida-db quirk); read_uncommitted: {aborted} aborted records; {metrics}; \
         transactions (committed, aborted): {transactions:?}; caught up {recovery:.1} s after the load stopped",
        v.writes,
        v.unique,
        v.missing,
        v.duplicates,
        stale.len(),
    );
    let mut row = row.with_verdict(&v);
    if !stale.is_empty() {
        notes.push(format!("{} noida copies set aside", stale.len()));
    }
    row.finish(
        format!("2 freezes ({})", notes.join(", ")),
        recoveries.iter().copied().reduce(f64::max),
        stage.started,
    );
    vec![row]
}

/// Freezes the broker for `freeze` and thaws it; checks the bridge keeps running and commits
/// again (within 120 s). The pipeline restarts meanwhile, and the seconds from the thaw until
/// the committed position moved.
async fn freeze_once(
    stage: &Stage,
    proc: &mut BridgeProc,
    freeze: Duration,
    row: &mut Row,
) -> (usize, f64) {
    let (inst, cfg, client, _) = stage.parts();
    let before = cfg.commit_sequence(client).await;
    let lines_before = proc.log_text().lines().count();
    let restarts_before = proc.restarts();
    inst.freeze_kafka();
    say!(
        "eosfreeze: broker SIGSTOPped for {freeze:?} under {RATE} writes/s (commitSequence \
         {before})"
    );
    tokio::time::sleep(freeze).await;
    inst.thaw_kafka();
    let thawed = Instant::now();
    // Running again: the committed position moves (up to 120 s).
    let frozen_at = cfg.commit_sequence(client).await;
    wait_commit_after(cfg, client, proc, frozen_at).await;
    let recovered = thawed.elapsed().as_secs_f64();
    let moved = cfg.commit_sequence(client).await > frozen_at;
    row.check(proc.running(), || {
        format!(
            "the bridge exited after the {freeze:?} freeze: {:?}\n{}",
            proc.exit,
            proc.log_tail(10)
        )
    });
    row.check(moved, || {
        format!("no commit within 120 s after the {freeze:?} freeze")
    });
    let text = proc.log_text();
    let new: String = text
        .lines()
        .skip(lines_before)
        .collect::<Vec<_>>()
        .join("\n");
    let restarts = proc.restarts() - restarts_before;
    let what = warnings(&new);
    say!(
        "eosfreeze: {freeze:?} freeze: committing again {recovered:.1} s after the thaw, \
         {restarts} pipeline restart(s); the log's warnings and errors since the freeze:\n  {}",
        if what.is_empty() {
            "(none)".to_owned()
        } else {
            what.join("\n  ")
        }
    );
    (restarts, recovered)
}

/// The evidence of repeats: the progress partition's tail and the data partitions around the
/// repeats, as offset:C|A (committed or aborted for read_committed).
pub async fn print_evidence(
    bootstrap: &str,
    offsets_db: &str,
    uncommitted: &[Rec],
    committed: &[Rec],
) {
    let pu = progress_records(bootstrap, offsets_db, Isolation::Uncommitted).await;
    let pc = progress_records(bootstrap, offsets_db, Isolation::Committed).await;
    let last = pu.last().map_or(0, |p| p.offset);
    let tail: Vec<_> = pu
        .iter()
        .filter(|p| p.offset + 25 > last)
        .cloned()
        .collect();
    say!(
        "eosfreeze: progress tail {}",
        progress_layout(&tail, &pc, last)
    );
    say!(
        "eosfreeze: data {}",
        data_layout(uncommitted, committed, 12)
    );
}

/// How many "pipeline failed; restarting" lines name a fenced producer or a timeout.
fn transactions_note(log: &str) -> String {
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("restarting from the committed position"))
        .collect();
    let fenced = lines
        .iter()
        .filter(|l| l.to_ascii_lowercase().contains("fenced"))
        .count();
    let timed_out = lines
        .iter()
        .filter(|l| l.to_ascii_lowercase().contains("timed out"))
        .count();
    format!(
        "{} pipeline restarts ({fenced} naming a fenced producer, {timed_out} a timeout)",
        lines.len()
    )
}
