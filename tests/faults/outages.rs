//! Outages under load: the Kafka broker frozen (SIGSTOP/SIGCONT), librdkafka's mock cluster
//! with its broker down and up again, and the MongoDB server restarted.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bson::Document;
use mongo_kafka_bridge::{Bridge, Config};
use rdkafka::mocking::MockCluster;

use crate::common::bridge::BridgeProc;
use crate::common::config::{COLL, Cfg};
use crate::common::load::{Truth, prepare_update_keys, start_load};
use crate::common::observe::fetch;
use crate::common::records::Consumer;
use crate::samples::{Sample, Sampler, first_ready_after, mib, not_ready_between};
use crate::say;
use crate::stage::Stage;
use crate::suite::{Ctx, Row};

/// Small enough that the outage's writes (the local MongoDB stand-in takes ~150–250 writes/s)
/// exceed it, so the bound is exercised.
const IN_FLIGHT_EVENTS: usize = 1000;
const IN_FLIGHT_BYTES: usize = 4 * 1024 * 1024;
/// Allowed RSS growth over the pre-outage peak: the 4 MiB in-flight window, librdkafka's copy
/// of it, one getMore batch and allocator slack.
const RSS_GROWTH_MIB: f64 = 64.0;

fn outage_bridge_section() -> String {
    format!(
        "max_in_flight_events = {IN_FLIGHT_EVENTS}\nmax_in_flight_bytes = {IN_FLIGHT_BYTES}\nready_max_delivery_age_ms = 2000"
    )
}

/// An outage scenario's start: its stage (`edit` adds its lines), a consumer of its topic, the
/// bridge started, and a [`Sampler`] of it.
async fn watched(
    ctx: &Ctx,
    scenario: &str,
    db: &str,
    edit: impl FnOnce(&mut Cfg),
) -> (Stage, Consumer, BridgeProc, String, Sampler) {
    let stage = Stage::up(ctx, scenario, db, 20, edit).await;
    let consumer = stage.consumer();
    let (proc, addr) = stage.start(&format!("{scenario}.log")).await;
    let sampler = Sampler::start(Some(proc.pid()), addr.clone());
    (stage, consumer, proc, addr, sampler)
}

/// What the samples of a Kafka outage show.
struct Figures {
    /// The RSS peak before the outage, and over the whole run (KiB).
    baseline: u64,
    peak: u64,
    /// Samples not ready, of all taken, from 3 s into the outage until the thaw.
    not_ready: usize,
    during: usize,
    /// The most records and bytes in flight at any sample.
    max_events: u64,
    max_bytes: u64,
}

impl Figures {
    fn of(samples: &[Sample], frozen_at: Instant, thawed_at: Instant) -> Self {
        let settled = frozen_at + Duration::from_secs(3);
        let in_flight = |pick: fn((u64, u64)) -> u64| {
            samples
                .iter()
                .filter_map(|s| s.in_flight)
                .map(pick)
                .max()
                .unwrap_or(0)
        };
        Self {
            baseline: samples
                .iter()
                .filter(|s| s.at < frozen_at)
                .filter_map(|s| s.rss_kib)
                .max()
                .unwrap_or(0),
            peak: samples.iter().filter_map(|s| s.rss_kib).max().unwrap_or(0),
            not_ready: not_ready_between(samples, settled, thawed_at),
            during: samples
                .iter()
                .filter(|s| s.at >= settled && s.at <= thawed_at)
                .count(),
            max_events: in_flight(|f| f.0),
            max_bytes: in_flight(|f| f.1),
        }
    }

    /// Not ready during the outage; the in-flight bounds held (intake stopped at them when
    /// the outage's `written_during` writes exceeded them); RSS grew by the bound at most.
    fn check_bounds(&self, row: &mut Row, written_during: u64) {
        let (not_ready, during) = (self.not_ready, self.during);
        let (max_events, max_bytes) = (self.max_events, self.max_bytes);
        let (baseline, peak) = (self.baseline, self.peak);
        row.check(not_ready > 0 && not_ready * 2 >= during, || {
            format!("/readyz stayed 200 while the broker was frozen ({not_ready}/{during} samples not ready)")
        });
        row.check(
            max_events as usize <= IN_FLIGHT_EVENTS + 1
                && max_bytes as usize <= IN_FLIGHT_BYTES + 64 * 1024,
            || {
                format!(
                    "in flight {max_events} records / {max_bytes} bytes exceed the configured bounds"
                )
            },
        );
        row.check(mib(peak) <= mib(baseline) + RSS_GROWTH_MIB, || {
            format!(
                "RSS grew from {:.1} MiB to {:.1} MiB during the outage (bound +{RSS_GROWTH_MIB} MiB)",
                mib(baseline),
                mib(peak)
            )
        });
        // The outage's writes exceed the window: intake must have stopped at the bound.
        row.check(
            (written_during as usize) < IN_FLIGHT_EVENTS * 3 / 2 || max_events as usize >= IN_FLIGHT_EVENTS * 9 / 10,
            || format!("{written_during} writes during the outage but at most {max_events} records in flight"),
        );
    }
}

pub async fn kafka_frozen(ctx: &Ctx) -> Vec<Row> {
    let freeze = Duration::from_secs(if ctx.long { 45 } else { 10 });
    let (stage, consumer, mut proc, addr, sampler) = watched(ctx, "kafka", "frozen", |cfg| {
        cfg.bridge = outage_bridge_section();
        cfg.properties = "\"message.timeout.ms\" = 120000".to_owned();
    })
    .await;
    let (inst, _, _, coll) = stage.parts();
    let rate = 400;
    let load = start_load(coll.clone(), rate, 20, 0);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let frozen_at = Instant::now();
    let acked_before = load.acked.load(Ordering::Relaxed);
    inst.freeze_kafka();
    say!("Kafka frozen: broker SIGSTOPped for {freeze:?} under {rate} writes/s");
    tokio::time::sleep(freeze).await;
    let written_during = load.acked.load(Ordering::Relaxed) - acked_before;
    inst.thaw_kafka();
    let thawed_at = Instant::now();
    let (acked, errors) = load.stop().await;
    let truth = Truth::read(coll).await;
    let (v, done) = consumer
        .wait_complete(&truth, Duration::from_secs(180))
        .await;
    let recovery = done.duration_since(thawed_at).as_secs_f64();
    // Ready again once everything is delivered.
    let deadline = Instant::now() + Duration::from_secs(30);
    while fetch(&addr, "/readyz").map(|(c, _)| c) != Some(200) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let samples = sampler.finish();
    let ready_after = fetch(&addr, "/readyz");
    let status = proc.stop(Duration::from_secs(30));
    let restarts = proc.restarts();
    v.assert_sound("Kafka frozen");

    let f = Figures::of(&samples, frozen_at, thawed_at);
    let (baseline, peak, max_events, max_bytes) = (f.baseline, f.peak, f.max_events, f.max_bytes);
    let (not_ready, during) = (f.not_ready, f.during);
    say!(
        "Kafka frozen: peak in flight {max_events} records / {max_bytes} bytes (bounds \
         {IN_FLIGHT_EVENTS} events / {IN_FLIGHT_BYTES} bytes)"
    );
    say!(
        "Kafka frozen: {acked} writes ({written_during} while frozen, {errors} retried), {} events, \
         {} delivered, {} missing, {} duplicates, {restarts} pipeline restarts; RSS {:.1} MiB \
         before the outage, peak {:.1} MiB; /readyz not 200 in {not_ready}/{during} samples \
         during the outage; everything delivered {recovery:.1} s after the thaw",
        v.writes,
        v.unique,
        v.missing,
        v.duplicates,
        mib(baseline),
        mib(peak)
    );
    assert!(status.success(), "graceful stop: {status}");
    let mut row =
        Row::new(&format!("Kafka frozen {} s (SIGSTOP)", freeze.as_secs())).with_verdict(&v);
    f.check_bounds(&mut row, written_during);
    row.check(ready_after.as_ref().map(|(c, _)| *c) == Some(200), || {
        format!("/readyz after recovery: {ready_after:?}")
    });
    row.runs = "1 outage".to_owned();
    row.peak_rss_mib = Some(mib(peak));
    row.recovery_s = Some(recovery);
    row.seconds = stage.started.elapsed().as_secs_f64();
    vec![row]
}

/// librdkafka's in-process mock cluster: its only broker goes down (connections refused,
/// requests in flight lost) and comes back; the bridge runs in-process (library `Bridge`).
pub async fn mock_broker_down(ctx: &Ctx) -> Vec<Row> {
    let started = Instant::now();
    let down = Duration::from_secs(if ctx.long { 30 } else { 8 });
    let rate = 300;
    let inst = ctx.up("mock", &["--only", "mongo"]);
    let mock = MockCluster::new(1).expect("mock cluster");
    let bootstrap = mock.bootstrap_servers();
    let mut cfg = Cfg::new(&inst.mongo_uri, &bootstrap, "mock");
    cfg.bridge = outage_bridge_section();
    cfg.properties = "\"message.timeout.ms\" = 120000".to_owned();
    mock.create_topic(&cfg.topic(), 3, 1).expect("mock topic");
    let client = inst.client().await;
    let coll = client.database(&cfg.db).collection::<Document>(COLL);
    prepare_update_keys(&coll, 20).await;
    let consumer = Consumer::start(&bootstrap, &cfg.topic(), 3);
    let config = Config::from_toml(&cfg.toml(), std::iter::empty()).expect("valid config");
    let bridge = Bridge::start(config).await.expect("bridge starts");
    let addr = bridge.metrics_addr().to_string();
    cfg.wait_started(&client, Duration::from_secs(60)).await;
    let sampler = Sampler::start(Some(std::process::id()), addr.clone());
    let load = start_load(coll.clone(), rate, 20, 0);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let down_at = Instant::now();
    mock.broker_down(1).expect("broker_down");
    say!("mock broker down for {down:?} under {rate} writes/s");
    tokio::time::sleep(down).await;
    mock.broker_up(1).expect("broker_up");
    let up_at = Instant::now();
    let (acked, errors) = load.stop().await;
    let truth = Truth::read(&coll).await;
    let (v, done) = consumer
        .wait_complete(&truth, Duration::from_secs(180))
        .await;
    let recovery = done.duration_since(up_at).as_secs_f64();
    let samples = sampler.finish();
    bridge.shutdown();
    let result = tokio::time::timeout(Duration::from_secs(30), bridge.wait())
        .await
        .expect("the bridge stops within 30 s");
    v.assert_sound("mock broker down");
    let not_ready = not_ready_between(&samples, down_at + Duration::from_secs(3), up_at);
    say!(
        "mock broker down: {acked} writes ({errors} retried), {} events, {} delivered, {} missing, \
         {} duplicates; /readyz not 200 in {not_ready} samples while down; delivered {recovery:.1} s \
         after broker_up",
        v.writes,
        v.unique,
        v.missing,
        v.duplicates
    );
    result.expect("graceful stop");
    let mut row = Row::new(&format!(
        "Kafka mock broker down {} s (in-process)",
        down.as_secs()
    ))
    .with_verdict(&v);
    row.check(not_ready > 0, || {
        "/readyz stayed 200 while the mock broker was down".to_owned()
    });
    row.finish("1 outage".to_owned(), Some(recovery), started);
    vec![row]
}

pub async fn mongo_restart(ctx: &Ctx) -> Vec<Row> {
    let cycles = if ctx.long { 5 } else { 1 };
    let (stage, consumer, mut proc, _, sampler) = watched(ctx, "mongo", "restart", |cfg| {
        cfg.bridge = "ready_max_delivery_age_ms = 2000".to_owned();
    })
    .await;
    let rate = 250;
    let (inst, _, _, coll) = stage.parts();
    let load = start_load(coll.clone(), rate, 20, 0);
    let mut outages = Vec::new();
    for _ in 0..cycles {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let down_at = Instant::now();
        inst.restart_mongo(); // blocks this thread only; the load and the sampler go on
        let up_at = Instant::now();
        say!(
            "MongoDB restarted under load (down for {:.1} s)",
            (up_at - down_at).as_secs_f64()
        );
        outages.push((down_at, up_at));
    }
    // The load goes on until a write after the restart succeeded, then stops: the recovery
    // time is from the server being back to every write delivered.
    let before = load.acked.load(Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(60);
    while load.acked.load(Ordering::Relaxed) < before + 20 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (acked, errors) = load.stop().await;
    let truth = Truth::read(coll).await;
    let (v, done) = consumer
        .wait_complete(&truth, Duration::from_secs(180))
        .await;
    let last_up = outages.last().unwrap().1;
    let recovery = done.duration_since(last_up).as_secs_f64();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let samples = sampler.finish();
    let status = proc.stop(Duration::from_secs(30));
    let restarts = proc.restarts();
    v.assert_sound("MongoDB restarted");
    let peak = samples.iter().filter_map(|s| s.rss_kib).max().unwrap_or(0);
    let mut row = Row::new("MongoDB stopped + restarted");
    for (i, (down_at, up_at)) in outages.iter().enumerate() {
        let not_ready = not_ready_between(&samples, *down_at, *up_at + Duration::from_secs(2));
        let during = samples
            .iter()
            .filter(|s| s.at >= *down_at && s.at <= *up_at)
            .count();
        let again = first_ready_after(&samples, *up_at).map(|t| t.duration_since(*up_at));
        say!(
            "MongoDB restart {}: down {:.1} s; /readyz not 200 in {not_ready}/{during} samples; \
             ready {:.1} s after the server was back",
            i + 1,
            (*up_at - *down_at).as_secs_f64(),
            again.map_or(f64::NAN, |d| d.as_secs_f64())
        );
        row.check(not_ready > 0, || {
            format!(
                "/readyz stayed 200 while MongoDB was down ({:.1} s, restart {})",
                (*up_at - *down_at).as_secs_f64(),
                i + 1
            )
        });
    }
    say!(
        "MongoDB restarted: {acked} writes ({errors} retried), {} events, {} delivered, {} missing, \
         {} duplicates, {restarts} pipeline restarts; everything delivered {recovery:.1} s after \
         the last restart",
        v.writes,
        v.unique,
        v.missing,
        v.duplicates
    );
    assert!(status.success(), "graceful stop: {status}");
    let mut row = row.with_verdict(&v);
    row.runs = format!("{cycles} restart{}", if cycles > 1 { "s" } else { "" });
    row.peak_rss_mib = Some(mib(peak));
    row.recovery_s = Some(recovery);
    row.seconds = stage.started.elapsed().as_secs_f64();
    vec![row]
}
