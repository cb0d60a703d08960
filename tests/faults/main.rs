//! The bridge under faults: crashes, broker and server outages, server errors and fail points,
//! history lost, a second instance, bad input and secrets.
//!
//! The fault suite, one test (`fault_suite`), puts each failure on its own named server
//! instances (`scripts/services --name`) and compares end to end: MongoDB's writes against what
//! a real consumer read.
//!
//! ```sh
//! MKB_SERVICES_MANAGED=1 MKB_SERVICES_SCRIPT=$PWD/scripts/services \
//!     cargo test --test faults -- --nocapture
//! ```
//!
//! - Scenarios that stop, freeze or restart servers run only with `MKB_SERVICES_MANAGED=1`
//!   (`scripts/test` sets it when it started the servers itself); otherwise they skip with a
//!   printed reason. Bad configs and the encoder fuzz always run.
//! - Short form by default (CI); `MKB_FAULTS_LONG=1` for the long form (500 kills in 10 blocks
//!   of 50, each on fresh servers; 45 s outages; ≥ 1M fuzz inputs; the kubelet simulation).
//! - `kubelet` (long form only): a simulated kubelet probes 3 group members' `/healthz` every
//!   10 s and restarts one after 3 failures, while a chaos loop kill -9s a random member every
//!   30–60 s and starts it again; 0 events lost, no probe restart, every pipeline's epoch only
//!   goes up. 10 minutes, `MKB_FAULTS_KUBELET_S=<seconds>` for another duration.
//! - `snapfreeze` (long form only): MongoDB frozen (SIGSTOP) for 30 s in the middle of a
//!   40 000-document copy under a writer; the copy finishes, the topic mirrors the collection,
//!   `/readyz` names the pipeline during the freeze.
//! - `MKB_FAULTS_ONLY=<names,…>` runs a subset of kill9, kafka, mock, mongo, fence, secrets,
//!   leader, security, group, groupstop, groupcfg, groupsnap, groupfull, groupreuse, kubelet,
//!   snapfreeze, eos, eostxn, eosfreeze, eosfence, eosreset, eosahead, eostimeout, stall,
//!   stallcoord (long form, or named), config, fuzz;
//!   `MKB_FAULTS_REPEAT=N` runs the server scenarios N times in a row and prints each one's
//!   pass count and recovery times; `MKB_FAULTS_SEED=N` fixes the
//!   random seed (printed at start).
//! - The server scenarios run in this one test, in two lanes side by side (each lane's
//!   scenarios one after another, every scenario on servers of its own); a failing one does
//!   not stop the others, and the table of results is printed at the end either way.
//!
//! The binary's ordinary tests (`deployments`, `history`, `isolation`, `killed`, `mock_kafka`, `ops`,
//! `resumable`, `snapshot`, `status_page`, `exactly_once::gap`) each check one fault with plain assertions, on the shared
//! servers or an instance of their own. They run beside each other but never beside the suite
//! ([`suite::turn`]); `MKB_FAULTS_ONLY` selects them by module name too (`history`, `killed`,
//! `mock_kafka`, `ops`, `resumable`, `snapshot`, `status_page`, `eosgap`, `isolation`,
//! `deployments`).

#![allow(clippy::unwrap_used)]
// A binary exports nothing: the library's lints on public items (Cargo.toml) do not apply.
#![allow(unreachable_pub, missing_docs)]

// Shared with `tests/it`; each binary uses a part of it.
#[allow(dead_code)]
#[path = "../common/mod.rs"]
mod common;

mod suite;

// The suite's scenarios, and their set-ups.
mod bad_configs;
mod cluster;
mod crash;
mod exactly_once;
mod fencing;
mod fuzz;
mod group;
mod outages;
mod run;
mod samples;
mod secrets;
mod security;
mod snapfreeze;
mod stage;
mod stalls;

// Ordinary tests.
mod deployments;
mod history;
mod isolation;
mod killed;
mod mock_kafka;
mod ops;
mod resumable;
mod snapshot;
mod status_page;

use std::path::PathBuf;
use std::pin::Pin;
use std::time::Instant;

use common::servers::services_managed;
use suite::{Ctx, Suite};

/// The consumer-group scenarios (Apache Kafka only).
async fn group_scenarios(suite: &mut Suite, ctx: &Ctx) {
    suite
        .run(
            "group",
            "group: spread, kill -9, join",
            group::spread::spread_kill_join(ctx),
        )
        .await;
    suite
        .run(
            "groupstop",
            "group: paused member",
            group::paused::paused_member(ctx),
        )
        .await;
    suite
        .run(
            "groupcfg",
            "group: configurations disagree",
            group::configs::disagreeing_configs(ctx),
        )
        .await;
    suite
        .run(
            "groupsnap",
            "group: revoked mid-snapshot",
            group::snapshot::revoked_mid_snapshot(ctx),
        )
        .await;
    suite
        .run(
            "groupfull",
            "group: a new slot gets its partition",
            group::slots::no_partition_for_a_new_slot(ctx),
        )
        .await;
    suite
        .run(
            "groupreuse",
            "group: slot reuse after offsets reset --delete",
            group::reuse::slot_reuse(ctx),
        )
        .await;
    if ctx.long {
        suite
            .run(
                "kubelet",
                "kubelet simulation",
                group::kubelet::kubelet(ctx),
            )
            .await;
    }
}

/// The scenarios that stop, freeze or restart servers, each on instances of its own, in two
/// lanes side by side ([`lanes`]): the at-least-once and group scenarios, and the
/// exactly-once, stall and secrets scenarios. Every scenario has servers of its own, so the
/// lanes share nothing but the machine; each scenario waits for conditions with deadlines, never
/// for a time measured on an idle machine.
fn server_scenarios(suite: &mut Suite, ctx: &Ctx) {
    let (first, second) =
        tokio::task::block_in_place(|| lanes(ctx, at_least_once_lane, exactly_once_lane));
    suite.absorb(first);
    suite.absorb(second);
}

/// A lane of scenarios, run one after another.
type Lane = for<'c> fn(&'c mut Suite, &'c Ctx) -> Pin<Box<dyn Future<Output = ()> + 'c>>;

/// Runs `a` and `b` each on a thread and runtime of its own (some scenarios block their
/// thread, so one runtime would run them one after the other), and returns their results.
fn lanes(ctx: &Ctx, a: Lane, b: Lane) -> (Suite, Suite) {
    let lane = |f: Lane| {
        let ctx = ctx.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(4)
                .enable_all()
                .build()
                .expect("a lane's runtime");
            let mut suite = Suite::default();
            runtime.block_on(f(&mut suite, &ctx));
            suite
        })
    };
    let (a, b) = (lane(a), lane(b));
    (
        a.join().expect("the first lane's thread"),
        b.join().expect("the second lane's thread"),
    )
}

/// Crashes, outages, fencing, the cluster, security and the group.
fn at_least_once_lane<'c>(
    suite: &'c mut Suite,
    ctx: &'c Ctx,
) -> Pin<Box<dyn Future<Output = ()> + 'c>> {
    Box::pin(async move {
        suite.run("kill9", "kill -9", crash::kill9(ctx)).await;
        suite
            .run("kafka", "Kafka frozen", outages::kafka_frozen(ctx))
            .await;
        suite
            .run(
                "mock",
                "Kafka mock broker down",
                outages::mock_broker_down(ctx),
            )
            .await;
        suite
            .run("mongo", "MongoDB restarted", outages::mongo_restart(ctx))
            .await;
        if ctx.long {
            suite
                .run(
                    "snapfreeze",
                    "MongoDB frozen mid-copy",
                    snapfreeze::mongo_frozen_mid_copy(ctx),
                )
                .await;
        }
        suite
            .run("fence", "two instances", fencing::two_instances(ctx))
            .await;
        if suite::default_broker() == "kafka" {
            suite
                .run(
                    "leader",
                    "Kafka: partition leader killed",
                    cluster::leader_killed(ctx),
                )
                .await;
            suite
                .run(
                    "security",
                    "Kafka security: SASL_SSL, TLS, ACLs",
                    security::security(ctx),
                )
                .await;
            group_scenarios(suite, ctx).await;
        } else {
            say!(
                "skipped the group scenarios: they run on Apache Kafka (noida-db 0.2.3 never \
                 evicts a member killed with kill -9, ../shared/INFRA.md)"
            );
        }
    })
}

/// Exactly once, the Kafka stalls and the secrets.
fn exactly_once_lane<'c>(
    suite: &'c mut Suite,
    ctx: &'c Ctx,
) -> Pin<Box<dyn Future<Output = ()> + 'c>> {
    Box::pin(async move {
        exactly_once::run(suite, ctx).await;
        suite
            .run(
                "stall",
                "Kafka stalls, both deliveries",
                stalls::stalls(ctx),
            )
            .await;
        // Long form, or named: the short form's freezes and `leader` cover a broker lost.
        if suite::default_broker() == "kafka" && (ctx.long || suite::named("stallcoord")) {
            suite
                .run(
                    "stallcoord",
                    "exactly once: transaction coordinator killed",
                    stalls::coordinator_killed(ctx),
                )
                .await;
        }
        suite
            .run("secrets", "secrets", async { secrets::secrets(ctx) })
            .await;
    })
}

/// `MKB_FAULTS_SEED`, else the clock's nanoseconds.
fn seed() -> u64 {
    std::env::var("MKB_FAULTS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fault_suite() {
    let _alone = suite::suite_turn().await;
    suite::since_start();
    let long = suite::long_form();
    let seed = seed();
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("faults-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let managed = std::env::var("MKB_SERVICES_MANAGED").ok().as_deref() == Some("1");
    let script = services_managed()
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/services"));
    say!(
        "fault suite: {} form, seed {seed} (MKB_FAULTS_SEED), logs in {}",
        if long { "long" } else { "short" },
        dir.display()
    );
    let ctx = Ctx {
        script,
        long,
        dir: dir.clone(),
        seed,
    };
    let started = Instant::now();
    let mut suite = Suite::default();
    suite
        .run("config", "bad configs", async {
            vec![bad_configs::bad_configs()]
        })
        .await;
    let fuzz_n = if long { 1_000_000 } else { 10_000 };
    suite
        .run("fuzz", "extjson fuzz", async {
            vec![fuzz::fuzz_extjson(fuzz_n, seed)]
        })
        .await;
    if managed {
        let rounds = suite::repeat();
        for round in 1..=rounds {
            if rounds == 1 {
                server_scenarios(&mut suite, &ctx);
                continue;
            }
            // Each round's configurations and logs in a directory of its own.
            let dir = dir.join(format!("round-{round}"));
            std::fs::create_dir_all(&dir).unwrap();
            say!(
                "round {round} of {rounds} (MKB_FAULTS_REPEAT), logs in {}",
                dir.display()
            );
            let round_ctx = Ctx {
                script: ctx.script.clone(),
                long,
                dir,
                seed: seed.wrapping_add(round as u64),
            };
            server_scenarios(&mut suite, &round_ctx);
        }
        if rounds > 1 {
            eprintln!(
                "\npass counts over {rounds} rounds:\n\n{}",
                suite::tally(&suite.rows)
            );
        }
    } else {
        say!(
            "skipped the server scenarios (kill -9, outages, fencing, secrets): servers are \
             external (MKB_SERVICES_MANAGED unset); they need their own scripts/services instances"
        );
    }
    let table = suite::table(&suite.rows);
    eprintln!(
        "\nfault suite results ({} form, seed {seed}, {:.0} s):\n\n{table}",
        if long { "long" } else { "short" },
        started.elapsed().as_secs_f64()
    );
    if let Ok(path) = std::env::var("MKB_FAULTS_TABLE") {
        std::fs::write(&path, &table).unwrap();
    }
    assert!(
        suite.failures.is_empty(),
        "fault suite: {} scenario(s) failed (logs kept in {}):\n{}",
        suite.failures.len(),
        dir.display(),
        suite.failures.join("\n")
    );
    let _ = std::fs::remove_dir_all(&dir);
}
