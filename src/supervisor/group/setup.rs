//! Before a member joins: the deployment's identity is known (it names the consumer group and
//! the control topic), every pipeline of its configuration has a slot, and the control topic
//! has a partition for every slot. Both are retried while MongoDB or Kafka is
//! unreachable (loudly, with the reason), because a member that cannot join runs nothing and
//! a replica that exits would only be restarted into the same outage.
//!
//! Invariant: the control topic is extended *before* this member subscribes, so the rebalance
//! its join starts already sees the new partitions (the group leader reads the topic's
//! metadata before it assigns).

use std::collections::BTreeMap;

use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::config::names::{OffsetsLocation, consumer_group, control};
use crate::error::{BridgeError, report};
use crate::kafka::admin::KafkaAdmin;
use crate::observe::health::Health;
use crate::offsets::group::Slots;
use crate::pipeline::PipelineContext;
use crate::pipeline::policy::backoff;

/// What the member needs to join.
pub(super) struct Setup {
    slots: Slots,
    client: mongodb::Client,
    offsets: OffsetsLocation,
    group: String,
    admin: KafkaAdmin,
    replication_factor: i32,
    owner: String,
    max_backoff_ms: u64,
    secrets: Vec<String>,
}

impl Setup {
    /// The setup of group `group` with `ctx`'s clients and configuration.
    pub(super) fn new(ctx: &PipelineContext, group: &str) -> Self {
        let m = &ctx.config.mongodb;
        Self {
            slots: Slots::new(&ctx.client, &m.offsets(), group),
            client: ctx.client.clone(),
            offsets: m.offsets(),
            group: group.to_owned(),
            admin: ctx.admin.clone(),
            replication_factor: ctx.config.kafka.topic_creation.replication_factor,
            owner: ctx.owner.clone(),
            max_backoff_ms: ctx.config.bridge.max_restart_backoff_ms,
            secrets: ctx.config.secrets(),
        }
    }

    /// Allocates the slots of `names` and makes the control topic cover them; the group's
    /// slots and the topic's partition count, or `None` when `cancel` fired first. While
    /// MongoDB or Kafka cannot answer it retries, with the last error in `/readyz`.
    pub(super) async fn prepare(
        &self,
        names: &[String],
        health: &Health,
        cancel: &CancellationToken,
    ) -> Option<Prepared> {
        for attempt in 0_u32.. {
            match self.try_prepare(names).await {
                Ok(prepared) => {
                    health.group_error(None);
                    return Some(prepared);
                }
                Err(e) => {
                    let delay = backoff(attempt, self.max_backoff_ms);
                    let secrets: Vec<&str> = self.secrets.iter().map(String::as_str).collect();
                    let text = report(&e, &secrets);
                    warn!(error = %text, delay_ms = delay.as_millis() as u64,
                          "group: cannot prepare the membership yet; retrying");
                    health.group_error(Some(text));
                    tokio::select! {
                        () = cancel.cancelled() => return None,
                        () = tokio::time::sleep(delay) => {}
                    }
                }
            }
        }
        None
    }

    /// The group's slots as MongoDB holds them now; the error as text (secrets redacted).
    pub(super) async fn read_slots(&self) -> Result<BTreeMap<i32, String>, String> {
        self.slots.read().await.map_err(|e| {
            let secrets: Vec<&str> = self.secrets.iter().map(String::as_str).collect();
            report(&e, &secrets)
        })
    }

    /// One attempt. A control topic that exists but cannot be extended (a broker without
    /// CreatePartitions, a missing Alter ACL) is not an error: the member joins with the
    /// partitions there are, and the pipelines whose slots have none are reported
    /// ([`Prepared::uncovered`]).
    ///
    /// Errors: [`BridgeError::Group`] when MongoDB or Kafka is unreachable or refuses.
    pub(super) async fn try_prepare(&self, names: &[String]) -> Result<Prepared, BridgeError> {
        let deployment = crate::offsets::deployment::identity(&self.client, &self.offsets)
            .await
            .map_err(|e| BridgeError::Group {
                group: self.group.clone(),
                reason: format!("reading or creating the deployment's identity failed: {e}"),
            })?;
        let topic = control(&self.offsets.database, &self.group, &deployment);
        let slots = self.slots.allocate(names, &self.owner).await?;
        let needed = slots.keys().next_back().map_or(1, |max| max + 1);
        let found = self
            .admin
            .ensure_partitions(&topic, needed, self.replication_factor)
            .await
            .map_err(|e| BridgeError::Group {
                group: self.group.clone(),
                reason: format!(
                    "the control topic {topic} could not be created with {needed} partitions: \
                     {e} (the README's \"Running several replicas\" lists the ACLs)"
                ),
            })?;
        if let Some(e) = &found.refused {
            error!(topic = %topic, partitions = found.count, needed, error = %e,
                   "the control topic cannot be extended: the pipelines whose slots have no \
                    partition run nowhere. Remedy: create the control topic again with spare \
                    partitions (a broker without CreatePartitions), or grant Alter on it");
        } else {
            info!(topic = %topic, partitions = found.count, "control topic ready");
        }
        Ok(Prepared {
            consumer_group: consumer_group(&self.group, &deployment),
            topic,
            slots,
            partitions: found.count,
            refused: found.refused.map(|e| e.to_string()),
        })
    }
}

/// The group's slots and its control topic's partitions.
pub(super) struct Prepared {
    /// The Kafka consumer group the member joins (`<group_id>.<deployment>`).
    pub(super) consumer_group: String,
    /// The group's control topic (its name carries the deployment's identity too).
    pub(super) topic: String,
    /// Slot → pipeline.
    pub(super) slots: BTreeMap<i32, String>,
    /// Partitions of the control topic.
    pub(super) partitions: usize,
    /// Why the topic could not be extended to cover every slot.
    pub(super) refused: Option<String>,
}

impl Prepared {
    /// Marks each of the `configured` pipelines whose slot has no partition as a problem in
    /// `health` (and clears the others); how many there are.
    pub(super) fn report_uncovered(&self, configured: &[&String], health: &Health) -> usize {
        for name in configured {
            health.group_problem(&format!("pipeline {name}"), None);
        }
        let why = self.refused.as_deref().unwrap_or("not extended");
        let uncovered: Vec<(i32, String)> = self
            .uncovered()
            .into_iter()
            .filter(|(_, name)| configured.contains(&name))
            .collect();
        for (slot, name) in &uncovered {
            let text = format!(
                "has slot {slot}, but the control topic has {} partitions ({why}): no member \
                 can run it. Remedy: create the control topic again with spare partitions (a \
                 broker without CreatePartitions), or grant Alter on it",
                self.partitions
            );
            health.group_problem(&format!("pipeline {name}"), Some(text));
        }
        uncovered.len()
    }

    /// The slots (and pipelines) that have no partition: no member can be assigned them.
    pub(super) fn uncovered(&self) -> Vec<(i32, String)> {
        self.slots
            .iter()
            .filter(|(slot, _)| usize::try_from(**slot).is_ok_and(|s| s >= self.partitions))
            .map(|(slot, name)| (*slot, name.clone()))
            .collect()
    }
}
