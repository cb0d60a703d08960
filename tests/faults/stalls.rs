//! `stall` and `stallcoord`: Kafka stalls, for both deliveries, each landing where the
//! scenario wants it and each measured (`docs/RELIABILITY.md`, "Kafka stalls"):
//!
//! - the broker frozen (SIGSTOP) for 12 s (the long form: 12, 30 and 90 s, longer than
//!   `message.timeout.ms`, `transaction.timeout.ms` and the broker's session with its
//!   controller). Exactly once, the freeze lands deterministically through the bridge's fail
//!   points (`src/failpoint.rs`): while a transaction is open (right after one of its records
//!   was enqueued) and while one is committing (its records and progress record delivered,
//!   `commit_transaction` next). At least once, it lands under the load;
//! - the broker killed (`kill -9`) and restarted on the same data directory (long form);
//! - `stallcoord` (exactly once; long form, or named in `MKB_FAULTS_ONLY`): in a three-node
//!   cluster, the node that coordinates the pipeline's transactions killed, and restarted
//!   after 15 s.
//!
//! Each fault gets a bridge process of its own (a fail point fires once per process) on the
//! same servers and load; the recovery is the time from the broker answering again (the thaw,
//! or the restart's readiness) to the pipeline's next commit, with no process restart. The
//! verdict covers every write of the scenario: 0 missing, and exactly once 0 duplicates to a
//! fresh `read_committed` read and the same records to a long-lived `read_committed` consumer.
//! A recovery over [`STUCK`] fails the scenario: a wedged pipeline, whatever the figures.

mod coordinator;

pub use coordinator::coordinator_killed;

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::bridge::BridgeProc;
use crate::common::kafka::Isolation;
use crate::common::load::{Truth, start_load};
use crate::common::records::read;
use crate::common::verdict::verify;
use crate::exactly_once::checks::{check_exactly_once, check_follower, wait_committed};
use crate::say;
use crate::stage::Stage;
use crate::suite::{Ctx, Row};

const RATE: u32 = 150;
/// No commit this long after the broker answers again: the pipeline is stuck.
const STUCK: Duration = Duration::from_secs(90);

/// Where a freeze lands.
#[derive(Debug, Clone, Copy)]
enum Landing {
    /// Under the load, wherever it is (at least once).
    Load,
    /// Exactly once: a transaction open, its record just enqueued.
    Open,
    /// Exactly once: a transaction delivered, `commit_transaction` next.
    Committing,
}

/// One fault of a scenario.
#[derive(Debug, Clone, Copy)]
enum Fault {
    Freeze(Landing, Duration),
    KillRestart,
}

impl Fault {
    fn label(self) -> String {
        match self {
            Fault::Freeze(landing, d) => format!("frozen {} s ({landing:?})", d.as_secs()),
            Fault::KillRestart => "kill -9 and restart".to_owned(),
        }
    }
}

/// The faults of one delivery, short form (CI: the freezes) or long form (also the kill).
fn faults(exactly_once: bool, long: bool) -> Vec<Fault> {
    let secs: &[u64] = if long { &[12, 30, 90] } else { &[12] };
    let landings: &[Landing] = if exactly_once {
        &[Landing::Open, Landing::Committing]
    } else {
        &[Landing::Load]
    };
    let mut out: Vec<Fault> = secs
        .iter()
        .flat_map(|s| {
            landings
                .iter()
                .map(move |l| Fault::Freeze(*l, Duration::from_secs(*s)))
        })
        .collect();
    if long {
        out.push(Fault::KillRestart);
    }
    out
}

/// `stall`: every fault of [`faults`], at least once and exactly once.
pub async fn stalls(ctx: &Ctx) -> Vec<Row> {
    let mut rows = Vec::new();
    for exactly_once in [false, true] {
        rows.extend(one_delivery(ctx, exactly_once).await);
    }
    rows
}

async fn one_delivery(ctx: &Ctx, exactly_once: bool) -> Vec<Row> {
    let (scenario, delivery) = if exactly_once {
        ("stalleos", "exactly once")
    } else {
        ("stallalo", "at least once")
    };
    let stage = Stage::up(ctx, scenario, scenario, 20, |cfg| {
        if exactly_once {
            cfg.pipeline_extra = "delivery = \"exactly_once\"\n".to_owned();
        }
    })
    .await;
    let follower = if exactly_once { stage.follower() } else { None };
    // The pipeline's first position before the first write: every write is then captured.
    let (mut first, _) = stage.start(&format!("{scenario}-first.log")).await;
    first.stop(Duration::from_secs(30));
    let load = start_load(stage.coll.clone(), RATE, 20, 0);
    let mut row = Row::new(&format!("Kafka stalls, {delivery}: every write"));
    let mut rows = Vec::new();
    for (i, fault) in faults(exactly_once, ctx.long).into_iter().enumerate() {
        let started = Instant::now();
        let mut fault_row = Row::new(&format!("Kafka stall, {delivery}: {}", fault.label()));
        let recovered = one_fault(ctx, &stage, fault, i, &mut fault_row).await;
        say!(
            "stall ({delivery}): {}: committing again {recovered:.1} s after the broker answered",
            fault.label()
        );
        fault_row.finish("1", Some(recovered), started);
        rows.push(fault_row);
    }
    let (acked, errors) = load.stop().await;
    let truth = Truth::read(&stage.coll).await;
    let (inst, cfg, _, _) = stage.parts();
    let mut last = stage.spawn(&format!("{scenario}-final.log"));
    if exactly_once {
        wait_committed(&inst.kafka, &cfg.topic(), &truth, Duration::from_secs(180)).await;
    } else {
        wait_delivered(&inst.kafka, &cfg.topic(), &truth).await;
    }
    let status = last.stop(Duration::from_secs(30));
    row.check(status.success(), || format!("graceful stop: {status}"));
    let committed = read(&inst.kafka, &cfg.topic(), Isolation::Committed).await;
    let v = if exactly_once {
        check_exactly_once(&mut row, &truth, &committed)
    } else {
        let v = verify(&truth, &committed);
        row.check_sound(&v);
        v
    };
    if let Some(f) = &follower {
        check_follower(&mut row, f, &committed).await;
    }
    say!(
        "stall ({delivery}): {acked} writes ({errors} retried); {} delivered, {} missing, {} \
         duplicates",
        v.unique,
        v.missing,
        v.duplicates
    );
    let mut row = row.with_verdict(&v);
    row.finish(format!("{} faults", rows.len()), None, stage.started);
    rows.push(row);
    rows
}

/// Waits (180 s) until every event of `truth` is on `topic`.
async fn wait_delivered(bootstrap: &str, topic: &str, truth: &Truth) {
    let deadline = Instant::now() + Duration::from_secs(180);
    while verify(truth, &read(bootstrap, topic, Isolation::Committed).await).missing > 0
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Runs `fault` (the `index`th of the scenario) on a bridge process of its own: the seconds
/// from the broker answering again to the pipeline's next commit.
async fn one_fault(ctx: &Ctx, stage: &Stage, fault: Fault, index: usize, row: &mut Row) -> f64 {
    let (inst, cfg, client, _) = stage.parts();
    let marker = ctx.dir.join(format!("{}-{index}.frozen", cfg.db));
    let _ = std::fs::remove_file(&marker);
    let env = match fault {
        Fault::Freeze(Landing::Open, _) => failpoint("transaction_open@40", inst, &marker),
        Fault::Freeze(Landing::Committing, _) => {
            failpoint("transaction_committing@8", inst, &marker)
        }
        _ => None,
    };
    let log = format!("{}-{index}.log", cfg.db);
    let env: Vec<(&str, &str)> = env
        .iter()
        .map(|v| (mongo_kafka_bridge::failpoint::VARIABLE, v.as_str()))
        .collect();
    let mut proc = stage.spawn_with(&log, &env);
    cfg.wait_started(client, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    match fault {
        Fault::Freeze(Landing::Load, d) => {
            inst.freeze_kafka();
            tokio::time::sleep(d).await;
        }
        Fault::Freeze(_, d) => {
            wait_for(&marker, Duration::from_secs(60)).await;
            tokio::time::sleep(d).await;
        }
        Fault::KillRestart => {
            inst.services(&["kill", "kafka"]);
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    }
    let before = cfg.commit_sequence(client).await;
    match fault {
        Fault::Freeze(..) => inst.thaw_kafka(),
        Fault::KillRestart => {
            inst.services(&["restart", "kafka", "--timeout", "90"]);
        }
    }
    let recovered = commit_after(stage, &mut proc, before, Instant::now()).await;
    row.check(proc.running(), || {
        format!(
            "the bridge exited after {}: {}",
            fault.label(),
            proc.log_tail(10)
        )
    });
    row.check(recovered < STUCK.as_secs_f64(), || {
        format!("no commit within {STUCK:?} after {}", fault.label())
    });
    let status = proc.stop(Duration::from_secs(30));
    row.check(status.success(), || {
        format!("graceful stop after {}: {status}", fault.label())
    });
    recovered
}

/// The fail point's `MKB_FAILPOINT` value: at `point`, freeze the broker of `inst`, then
/// create `marker`.
fn failpoint(
    point: &str,
    inst: &crate::common::servers::Instance,
    marker: &Path,
) -> Option<String> {
    Some(format!(
        "{point}={} freeze kafka --name {} >/dev/null 2>&1; touch {}",
        inst.script.display(),
        inst.name,
        marker.display()
    ))
}

/// Waits until `path` exists (the fail point fired), up to `timeout`.
async fn wait_for(path: &Path, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "the fail point did not fire within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The seconds from `since` until the pipeline commits past `commitSequence` `before` (up to
/// [`STUCK`] and a little more).
async fn commit_after(stage: &Stage, proc: &mut BridgeProc, before: i64, since: Instant) -> f64 {
    let (_, cfg, client, _) = stage.parts();
    let deadline = since + STUCK + Duration::from_secs(5);
    while cfg.commit_sequence(client).await <= before && Instant::now() < deadline && proc.running()
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    since.elapsed().as_secs_f64()
}
