//! A three-node Apache Kafka cluster (`scripts/services up --brokers 3`: replication factor 3,
//! `min.insync.replicas = 2`) losing the leader of a partition under load:
//!
//! - `leader`: the leader of partition 0 of the pipeline's topic is killed (`kill -9`) while
//!   the bridge publishes 200 writes/s with `acks=all`; it stays down at least 10 s (until
//!   another node leads the partition and the bridge delivered again) and comes back.
//!   0 events lost, per-document order kept, the process keeps running (the pipeline continues
//!   or restarts on its own). The time from the kill until the partition's records are
//!   delivered again is printed (a figure: the new leader's election is the cluster's).
//!
//! Apache Kafka only: the stand-ins are single brokers.

use std::time::{Duration, Instant};

use bson::Document;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer as _};

use crate::common::bridge::BridgeProc;
use crate::common::config::{COLL, Cfg};
use crate::common::load::{Truth, prepare_update_keys, start_load};
use crate::common::observe::{fetch, metric_sum};
use crate::common::records::Consumer;
use crate::say;
use crate::suite::{Ctx, Row};

const RATE: u32 = 200;
/// How long the killed broker stays down at least.
const DOWN: Duration = Duration::from_secs(10);

/// Creates `topic` with `partitions` partitions, each on `replicas` brokers.
pub async fn create_replicated(bootstrap: &str, topic: &str, partitions: i32, replicas: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client");
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(replicas));
    let results = admin
        .create_topics(
            [&new],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .expect("create_topics request");
    for r in results {
        r.unwrap_or_else(|(name, code)| panic!("creating {name}: {code}"));
    }
}

/// The node id of the leader of `partition` of `topic` (waits until it has one).
pub fn leader_of(bootstrap: &str, topic: &str, partition: i32) -> i32 {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("metadata client");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let leader = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(5))
            .ok()
            .and_then(|md| {
                let t = md.topics().iter().find(|t| t.name() == topic)?;
                let p = t.partitions().iter().find(|p| p.id() == partition)?;
                (p.leader() >= 0).then_some(p.leader())
            });
        if let Some(l) = leader {
            return l;
        }
        assert!(
            Instant::now() < deadline,
            "{topic}[{partition}] has no leader"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits (120 s from `killed`) until another node than `leader` leads partition 0 of `topic`,
/// the bridge delivers again (`delivering`) and the broker has been down [`DOWN`] at least.
/// The controller fences the dead broker after `broker.session.timeout.ms`, 9 s by default,
/// and elects new leaders then. When it delivered again (s after the kill), and the leader.
async fn failed_over(
    bootstrap: &str,
    topic: &str,
    leader: i32,
    killed: Instant,
    delivering: impl Fn() -> bool,
) -> (Option<f64>, i32) {
    let mut again = None;
    let mut new_leader = leader;
    let deadline = killed + Duration::from_secs(120);
    while (again.is_none() || new_leader == leader || killed.elapsed() < DOWN)
        && Instant::now() < deadline
    {
        if again.is_none() && delivering() {
            again = Some(killed.elapsed().as_secs_f64());
        }
        if new_leader == leader {
            new_leader = tokio::task::block_in_place(|| leader_of(bootstrap, topic, 0));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (again, new_leader)
}

pub async fn leader_killed(ctx: &Ctx) -> Vec<Row> {
    let started = Instant::now();
    let mut row = Row::new("Kafka: partition leader killed (3 brokers, acks=all)");
    let inst = ctx.up("leader", &["--brokers", "3"]);
    if inst.nodes != 3 {
        row.check(false, || format!("{} Kafka node(s), not 3", inst.nodes));
        return vec![row];
    }
    // GIVEN a pipeline publishing 200 writes/s to a topic of 3 partitions, each on 3 brokers
    let cfg = Cfg::new(&inst.mongo_uri, &inst.kafka, "leader");
    let topic = cfg.topic();
    create_replicated(&inst.kafka, &topic, 3, 3).await;
    let client = inst.client().await;
    let coll = client.database(&cfg.db).collection::<Document>(COLL);
    prepare_update_keys(&coll, 20).await;
    let consumer = Consumer::start(&inst.kafka, &topic, 3);
    let path = cfg.write(&ctx.dir, "leader.toml");
    let mut proc = BridgeProc::spawn(&path, ctx.dir.join("leader.log"));
    let addr = proc.metrics_addr(Duration::from_secs(30));
    cfg.wait_started(&client, Duration::from_secs(60)).await;
    let load = start_load(coll.clone(), RATE, 20, 0);
    tokio::time::sleep(Duration::from_secs(3)).await;
    // WHEN the leader of partition 0 is killed, and comes back after 10 s
    let leader = tokio::task::block_in_place(|| leader_of(&inst.kafka, &topic, 0));
    let delivered = |addr: &str| {
        fetch(addr, "/metrics").map_or(0.0, |(_, m)| {
            metric_sum(&m, "mongo_kafka_bridge_kafka_messages_delivered_total", &[])
        })
    };
    let before = delivered(&addr);
    let killed = Instant::now();
    inst.services(&["kill", &format!("kafka{leader}")]);
    say!("leader: killed node {leader}, the leader of {topic}[0], under {RATE} writes/s");
    let (again, new_leader) = failed_over(&inst.kafka, &topic, leader, killed, || {
        delivered(&addr) > before + f64::from(RATE)
    })
    .await;
    inst.services(&["restart", &format!("kafka{leader}")]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (acked, errors) = load.stop().await;
    // THEN every event is delivered in order, and the process is still running
    let truth = Truth::read(&coll).await;
    let (v, _) = consumer
        .wait_complete(&truth, Duration::from_secs(120))
        .await;
    let restarts = proc.restarts();
    say!(
        "leader: partition 0 led by node {new_leader} after the kill; the bridge delivered again \
         {again:?} s after the kill; {restarts} pipeline restart(s); {acked} writes ({errors} \
         retried): {} events, {} delivered, {} missing, {} duplicates",
        v.writes,
        v.unique,
        v.missing,
        v.duplicates
    );
    row.check_sound(&v);
    row.check(new_leader != leader, || {
        format!("node {leader} still leads partition 0 after its kill")
    });
    row.check(proc.running(), || {
        format!("the bridge exited: {:?}\n{}", proc.exit, proc.log_tail(10))
    });
    let status = proc.stop(Duration::from_secs(30));
    row.check(status.success(), || format!("graceful stop: {status}"));
    let mut row = row.with_verdict(&v);
    row.finish(
        format!("node {leader} killed for {} s", DOWN.as_secs()),
        again,
        started,
    );
    vec![row]
}
