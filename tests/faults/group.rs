//! Many replicas in one group (`[bridge] group_id`), each a real `mongo-kafka-bridge run`
//! process, on an Apache Kafka broker and a MongoDB of the scenario's own. They need Apache
//! Kafka: noida-db 0.2.3 never evicts a member killed with `kill -9` (`../shared/INFRA.md`,
//! "Stand-in quirks"), so with `MKB_BROKER=noida` the suite skips them and says so.
//!
//! - `group` ([`spread`]): spread, kill -9 and join;
//! - `groupstop` ([`paused`]): a member paused past its session;
//! - `groupcfg` ([`configs`]): members whose configurations disagree;
//! - `groupsnap` ([`snapshot`]): a revocation in the middle of a snapshot;
//! - `groupfull` ([`slots`]): a pipeline added by SIGHUP whose slot has no partition yet;
//! - `groupreuse` ([`reuse`]): a slot reused after `offsets reset --delete` while members run;
//! - `kubelet` ([`kubelet`], long form only): a simulated kubelet's probes and chaos kills.
//!
//! This file holds their set-up ([`World`]) and what they read from the members;
//! [`replays`] what their pipelines delivered.

pub mod configs;
pub mod epochs;
pub mod kubelet;
pub mod paused;
pub mod replays;
pub mod reuse;
pub mod slots;
pub mod snapshot;
pub mod spread;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bson::Document;
use mongodb::{Client, Collection};

use crate::common::bridge::BridgeProc;
use crate::common::config::GroupCfg;
use crate::common::kafka::create_topic_at;
use crate::common::load::{Load, prepare_update_keys, start_load};
use crate::common::observe::{fetch, metric_sum};
use crate::common::records::Consumer;
use crate::common::servers::Instance;
use crate::say;
use crate::suite::Ctx;

/// Writes per second to each pipeline's collection.
pub(crate) const RATE: u32 = 30;

/// A group scenario's servers (Kafka and SecantusDB of its own), its configuration and, per
/// pipeline of a loaded world, its collection (with 5 update documents) and a consumer of its
/// topic.
pub(crate) struct World {
    pub(crate) inst: Instance,
    pub(crate) cfg: GroupCfg,
    pub(crate) client: Client,
    pub(crate) colls: Vec<Collection<Document>>,
    pub(crate) consumers: Vec<Consumer>,
    /// The run's directory (configurations and logs).
    dir: PathBuf,
}

impl World {
    /// Starts instance `name` with `pipelines` pipelines in database `db` and the topics of the
    /// first `topics` of them (`p<i>`: one partition each); no collection is prepared.
    pub(crate) async fn servers(
        ctx: &Ctx,
        name: &str,
        db: &str,
        pipelines: usize,
        topics: usize,
    ) -> Self {
        let inst = ctx.up(name, &[]);
        let cfg = GroupCfg {
            uri: inst.mongo_uri.clone(),
            kafka: inst.kafka.clone(),
            db: db.to_owned(),
            pipelines,
        };
        for i in 0..topics {
            create_topic_at(&inst.kafka, &cfg.topic(i), 1, &[]).await;
        }
        let client = inst.client().await;
        Self {
            inst,
            cfg,
            client,
            colls: Vec::new(),
            consumers: Vec::new(),
            dir: ctx.dir.clone(),
        }
    }

    /// Starts instance `name` and prepares `pipelines` pipelines in database `db`: their
    /// topics, collections with the load's update documents, and consumers.
    pub(crate) async fn up(ctx: &Ctx, name: &str, db: &str, pipelines: usize) -> Self {
        let mut world = Self::servers(ctx, name, db, pipelines, pipelines).await;
        for i in 0..pipelines {
            let coll = world
                .client
                .database(&world.cfg.db)
                .collection::<Document>(&format!("t{i}"));
            prepare_update_keys(&coll, 5).await;
            world.colls.push(coll);
            let consumer = Consumer::start(&world.inst.kafka, &world.cfg.topic(i), 1);
            world.consumers.push(consumer);
        }
        world
    }

    /// The group's control topic, once a member stored the deployment's identity (in
    /// `<offsets_collection>.slots`, `_id: "deployment"`; README "Running several replicas").
    pub(crate) async fn control_topic(&self) -> String {
        let slots = self
            .client
            .database(&self.cfg.offsets_db())
            .collection::<Document>("offsets.slots");
        let identity = slots
            .find_one(bson::doc! { "_id": "deployment" })
            .await
            .expect("read the deployment's identity")
            .expect("a member stored the deployment's identity");
        let uid = identity.get_str("uid").expect("uid");
        format!(
            "__mongo_kafka_bridge.{}.group.faults.{uid}",
            self.cfg.offsets_db()
        )
    }

    /// The configuration, the client, the collections and the consumers, as the scenarios
    /// name them.
    pub(crate) fn parts(&self) -> (&GroupCfg, &Client, &[Collection<Document>], &[Consumer]) {
        (&self.cfg, &self.client, &self.colls, &self.consumers)
    }

    /// Writes the configuration to `file` in the run's directory.
    pub(crate) fn write(&self, file: &str) -> PathBuf {
        let path = self.dir.join(file);
        std::fs::write(&path, self.cfg.toml()).expect("write config");
        path
    }

    /// Starts a member on `config`, logging to `log` in the run's directory.
    pub(crate) fn member(&self, config: &Path, log: &str) -> Member {
        Member::start(config, self.dir.join(log))
    }

    /// A load of [`RATE`] writes/s on each collection, the inserts of pipeline `i` from
    /// `_id` `i`·1 000 000.
    pub(crate) fn start_loads(&self) -> Vec<Load> {
        self.colls
            .iter()
            .enumerate()
            .map(|(i, c)| start_load(c.clone(), RATE, 5, (i as i64) * 1_000_000))
            .collect()
    }
}

/// A member process and its HTTP address.
pub(crate) struct Member {
    pub(crate) proc: BridgeProc,
    pub(crate) addr: String,
}

impl Member {
    pub(crate) fn start(config: &Path, log: PathBuf) -> Self {
        let mut proc = BridgeProc::spawn(config, log);
        let addr = proc.metrics_addr(Duration::from_secs(60));
        Self { proc, addr }
    }

    pub(crate) fn metrics(&self) -> String {
        fetch(&self.addr, "/metrics").map_or_else(String::new, |(_, body)| body)
    }
}

/// The pipelines `member` runs, from its `…_pipeline_owned` gauge.
pub(crate) fn owned_by(member: &Member, pipelines: usize) -> Vec<usize> {
    let text = member.metrics();
    (0..pipelines)
        .filter(|i| {
            let label = format!("pipeline=\"p{i}\"");
            metric_sum(&text, "mongo_kafka_bridge_pipeline_owned", &[&label]) == 1.0
        })
        .collect()
}

/// Waits until every pipeline runs on exactly one member; the owners' indexes per pipeline.
pub(crate) async fn settled(
    members: &[&Member],
    pipelines: usize,
    timeout: Duration,
) -> Option<Vec<usize>> {
    let deadline = Instant::now() + timeout;
    loop {
        let owned: Vec<Vec<usize>> = members.iter().map(|m| owned_by(m, pipelines)).collect();
        let owner_of: Vec<Vec<usize>> = (0..pipelines)
            .map(|p| {
                (0..members.len())
                    .filter(|m| owned[*m].contains(&p))
                    .collect()
            })
            .collect();
        if owner_of.iter().all(|o| o.len() == 1) {
            return Some(owner_of.iter().map(|o| o[0]).collect());
        }
        if Instant::now() > deadline {
            say!("group: not settled: owners per pipeline {owner_of:?}");
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Delivered records of pipeline `p` on `member`.
pub(crate) fn delivered(member: &Member, p: usize) -> f64 {
    let label = format!("pipeline=\"p{p}\"");
    metric_sum(
        &member.metrics(),
        "mongo_kafka_bridge_kafka_messages_delivered_total",
        &[&label],
    )
}

/// Each pipeline's `epoch` in its offsets document (`missing` for a document without one).
pub(crate) async fn epochs(cfg: &GroupCfg, client: &Client, missing: i64) -> BTreeMap<String, i64> {
    cfg.offsets(client)
        .await
        .iter()
        .map(|(n, d)| (n.clone(), d.get_i64("epoch").unwrap_or(missing)))
        .collect()
}

/// The minimum, median and maximum of `v` (NaN when empty).
pub(crate) fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    (v[0], v[v.len() / 2], v[v.len() - 1])
}

/// The wall clock in Unix milliseconds.
pub(crate) fn chrono_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// What `member` runs once it runs `want` (or after 60 s).
pub(crate) async fn owned_eventually(
    member: &Member,
    pipelines: usize,
    want: &[usize],
) -> Vec<usize> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let owned = owned_by(member, pipelines);
        if owned == want || Instant::now() > deadline {
            return owned;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until `member`'s `/readyz` answers `code` with a body containing `text`.
pub(crate) async fn ready_says(member: &Member, code: u16, text: &str) -> Option<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = fetch(&member.addr, "/readyz");
        if let Some((c, body)) = &answer
            && *c == code
            && body.contains(text)
        {
            return Some(body.clone());
        }
        if Instant::now() > deadline {
            eprintln!(
                "/readyz of {} never answered {code} with {text:?}; last: {answer:?}",
                member.addr
            );
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
