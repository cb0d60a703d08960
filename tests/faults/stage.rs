//! The set-up of a single-pipeline scenario, at least once or exactly once: servers of its own,
//! the pipeline `p` on `<db>.t` with its topic (3 partitions, on every node of a cluster), the
//! load's update documents, the configuration file, consumers, and the bridge processes, their
//! logs in the run's directory.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bson::Document;
use mongodb::{Client, Collection};

use crate::common::bridge::BridgeProc;
use crate::common::config::{COLL, Cfg};
use crate::common::kafka::create_topic_at;
use crate::common::load::prepare_update_keys;
use crate::common::records::Consumer;
use crate::common::servers::Instance;
use crate::suite::Ctx;

/// A scenario's servers, pipeline, collection and configuration file.
pub struct Stage {
    pub inst: Instance,
    pub cfg: Cfg,
    pub client: Client,
    pub coll: Collection<Document>,
    /// The configuration, `<scenario>.toml` in the run's directory.
    pub config: PathBuf,
    /// When the scenario started (before its servers).
    pub started: Instant,
    /// The run's directory (configurations and logs).
    dir: PathBuf,
}

impl Stage {
    /// Starts the servers of `scenario`, configures pipeline `p` on `<db>.t` (`edit` adds the
    /// scenario's lines) and writes it to `<scenario>.toml`, creates its topic with 3
    /// partitions, and writes `keys` update documents for the load (none when 0).
    pub async fn up(
        ctx: &Ctx,
        scenario: &str,
        db: &str,
        keys: u32,
        edit: impl FnOnce(&mut Cfg),
    ) -> Self {
        Self::up_on(ctx, scenario, &[], db, keys, edit).await
    }

    /// [`Stage::up`] on servers started with `extra` (`scripts/services up` arguments, e.g.
    /// `--brokers 3`).
    pub async fn up_on(
        ctx: &Ctx,
        scenario: &str,
        extra: &[&str],
        db: &str,
        keys: u32,
        edit: impl FnOnce(&mut Cfg),
    ) -> Self {
        let started = Instant::now();
        let inst = ctx.up(scenario, extra);
        let mut cfg = Cfg::new(&inst.mongo_uri, &inst.kafka, db);
        edit(&mut cfg);
        if inst.nodes > 1 {
            // Replicated: a partition whose only replica is down has no leader, and Kafka skips
            // the transaction markers of a partition without one ("likely deleted already"),
            // so an abort while it is down would leave its records to the next commit.
            let replicas = i32::try_from(inst.nodes).expect("a few nodes");
            crate::cluster::create_replicated(&inst.kafka, &cfg.topic(), 3, replicas).await;
        } else {
            create_topic_at(&inst.kafka, &cfg.topic(), 3, &[]).await;
        }
        let client = inst.client().await;
        let coll = client.database(&cfg.db).collection::<Document>(COLL);
        if keys > 0 {
            prepare_update_keys(&coll, keys).await;
        }
        let config = cfg.write(&ctx.dir, &format!("{scenario}.toml"));
        Self {
            inst,
            cfg,
            client,
            coll,
            config,
            started,
            dir: ctx.dir.clone(),
        }
    }

    /// The servers, the pipeline's configuration, the client and the collection, as the
    /// scenarios name them.
    pub fn parts(&self) -> (&Instance, &Cfg, &Client, &Collection<Document>) {
        (&self.inst, &self.cfg, &self.client, &self.coll)
    }

    /// A consumer of the topic's 3 partitions from the beginning.
    pub fn consumer(&self) -> Consumer {
        Consumer::start(&self.inst.kafka, &self.cfg.topic(), 3)
    }

    /// On Apache Kafka, a long-lived `read_committed` consumer of the topic from its beginning
    /// ([`Consumer::read_committed`]); `None` on a stand-in.
    pub fn follower(&self) -> Option<Consumer> {
        self.inst
            .is_kafka()
            .then(|| Consumer::read_committed(&self.inst.kafka, &self.cfg.topic()))
    }

    /// Starts the bridge binary on the configuration, logging to `log` in the run's directory.
    pub fn spawn(&self, log: &str) -> BridgeProc {
        BridgeProc::spawn(&self.config, self.dir.join(log))
    }

    /// [`Stage::spawn`] with `env` set for the process (e.g. a fail point).
    pub fn spawn_with(&self, log: &str, env: &[(&str, &str)]) -> BridgeProc {
        BridgeProc::spawn_with(&self.config, self.dir.join(log), env)
    }

    /// [`Stage::spawn`], then its HTTP address (within 30 s) and its first commit (within
    /// 60 s).
    pub async fn start(&self, log: &str) -> (BridgeProc, String) {
        let mut proc = self.spawn(log);
        let addr = proc.metrics_addr(Duration::from_secs(30));
        self.cfg
            .wait_started(&self.client, Duration::from_secs(60))
            .await;
        (proc, addr)
    }
}
