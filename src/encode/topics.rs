//! Which topic a record goes to, and the naming rule of the bridge's own topics.
//!
//! Data topics (README "Record format"):
//! - a pipeline with `topic` writes everything there;
//! - in the Debezium form the prefix is the connector's, `<[pipelines.debezium] topic_prefix>.`
//!   ([`prefix`]): Debezium's `<topic.prefix>.<db>.<coll>`;
//! - otherwise a change event goes to `<topic_prefix><db>.<coll>` of its `ns`, or
//!   `<topic_prefix><db>` for a database event (`dropDatabase`);
//! - an event without `ns` goes to the pipeline's configured namespace: `<topic_prefix><db>.<coll>`
//!   for a collection, `<topic_prefix><db>` for a database, `<topic_prefix><pipeline name>` for a
//!   deployment ([`fallback`]);
//! - `[pipelines.routing]` comes before all of these (`routing.rs`), and a pipeline's heartbeats
//!   go to a topic of their own (`heartbeat.rs`), never a data topic.
//!
//! Internal topics: names starting with `__` belong to Kafka (`__consumer_offsets`,
//! `__transaction_state`) and to the bridge, whose own topics are named
//! `__mongo_kafka_bridge.<offsets_database>.<kind>` ([`internal`](crate::config::names::internal)). No pipeline writes one
//! (configuration refuses a `topic`, `dead_letter_topic` or `topic_prefix` starting with `__`),
//! gap markers skip them ([`written_by`]), and the offsets database in the name keeps two
//! deployments on one cluster apart.

use std::borrow::Cow;

use crate::config::PipelineConfig;
use crate::config::names::is_internal;

/// The prefix of `p`'s data topics: `<topic_prefix>.` of `[pipelines.debezium]` in the
/// Debezium form, else `global` (`[kafka] topic_prefix`).
pub(crate) fn prefix<'a>(p: &PipelineConfig, global: &'a str) -> Cow<'a, str> {
    match &p.debezium {
        Some(d) => Cow::Owned(format!("{}.", d.topic_prefix)),
        None => Cow::Borrowed(global),
    }
}

/// The topic of namespace `db`.`coll` (or database `db`) under `prefix`.
pub(crate) fn for_namespace(prefix: &str, db: &str, coll: Option<&str>) -> String {
    match coll {
        Some(coll) => format!("{prefix}{db}.{coll}"),
        None => format!("{prefix}{db}"),
    }
}

/// The topic of events without `ns` when the pipeline has no `topic`: its configured namespace.
pub(crate) fn fallback(p: &PipelineConfig, global: &str) -> String {
    let prefix = &prefix(p, global);
    match &p.database {
        Some(db) => for_namespace(prefix, db, p.collection.as_deref()),
        None => format!("{prefix}{}", p.name),
    }
}

/// The topic a pipeline writes, when it is known before any event (a fixed `topic` or a
/// collection scope, without routing: a routed pipeline's known topics are
/// [`Router::known_topics`](super::routing::Router::known_topics)).
pub(crate) fn known(p: &PipelineConfig, global: &str) -> Option<String> {
    if p.routing.is_some() {
        return None;
    }
    let prefix = &prefix(p, global);
    match (&p.topic, &p.database, &p.collection) {
        (Some(topic), _, _) => Some(topic.clone()),
        (None, Some(db), Some(coll)) => Some(for_namespace(prefix, db, Some(coll))),
        _ => None,
    }
}

/// The heartbeat topic of `p` under `[kafka] topic_prefix` `global`, `None` when `p` writes no
/// heartbeats.
pub(crate) fn heartbeat(p: &PipelineConfig, global: &str) -> Option<String> {
    (p.heartbeat_interval_ms > 0).then(|| {
        p.heartbeat_topic
            .clone()
            .unwrap_or_else(|| format!("{}heartbeats", prefix(p, global)))
    })
}

/// The topic of namespace `db`.`coll`'s records as far as it is known before any event:
/// routing's (a template naming a field gives its `default_topic`), else the fixed `topic`,
/// else `<prefix><db>.<coll>`.
pub(crate) fn of_namespace(p: &PipelineConfig, global: &str, db: &str, coll: &str) -> String {
    let view = crate::event::ChangeEventView {
        db: Some(db),
        coll: Some(coll),
        ..Default::default()
    };
    let routed = super::routing::Router::of(p).and_then(|mut r| r.topic(&view, None));
    match (routed, &p.topic) {
        (Some(topic), _) => topic.to_string(),
        (None, Some(fixed)) => fixed.clone(),
        (None, None) => for_namespace(&prefix(p, global), db, Some(coll)),
    }
}

/// Whether `topic` (from the cluster's topic list) is one `p` writes data to.
pub(crate) fn written_by(p: &PipelineConfig, global: &str, topic: &str) -> bool {
    let prefix = &prefix(p, global);
    if is_internal(topic) || heartbeat(p, global).as_deref() == Some(topic) {
        return false;
    }
    if super::routing::Router::of(p).is_some_and(|r| r.could_write(topic)) {
        return true;
    }
    if let Some(fixed) = &p.topic {
        return topic == fixed;
    }
    let Some(rest) = topic.strip_prefix(prefix.as_ref()) else {
        return false;
    };
    match (&p.database, &p.collection) {
        (Some(db), Some(coll)) => rest == format!("{db}.{coll}"),
        (Some(db), None) => rest
            .strip_prefix(db.as_str())
            .is_some_and(|r| r.is_empty() || r.starts_with('.')),
        _ => rest.contains('.'),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::names::{consumer_group, control, internal};

    fn pipeline(body: &str) -> PipelineConfig {
        PipelineConfig::for_test(body)
    }

    #[test]
    fn topics_of_each_scope() {
        let coll = pipeline("database = \"shop\"\ncollection = \"orders\"\n");
        assert!(written_by(&coll, "cdc.", "cdc.shop.orders"));
        assert!(!written_by(&coll, "cdc.", "cdc.shop.orders2"));
        assert_eq!(known(&coll, "cdc.").as_deref(), Some("cdc.shop.orders"));
        assert_eq!(fallback(&coll, "cdc."), "cdc.shop.orders");
        let db = pipeline("database = \"shop\"\n");
        assert!(written_by(&db, "", "shop.orders"));
        assert!(written_by(&db, "", "shop"));
        assert!(!written_by(&db, "", "shopping.orders"));
        assert_eq!(known(&db, ""), None);
        assert_eq!(fallback(&db, "x."), "x.shop");
        let all = pipeline("");
        assert!(written_by(&all, "", "any.thing"));
        assert!(!written_by(&all, "", "__consumer_offsets"));
        assert_eq!(fallback(&all, "x."), "x.p");
        let fixed = pipeline("database = \"shop\"\ntopic = \"orders-cdc\"\n");
        assert!(written_by(&fixed, "", "orders-cdc"));
        assert!(!written_by(&fixed, "", "shop.orders"));
        let dbz = pipeline(
            "database = \"shop\"\ncollection = \"orders\"\nvalue = \"debezium\"\n\
             [pipelines.debezium]\ntopic_prefix = \"dbserver1\"\n",
        );
        assert_eq!(
            known(&dbz, "cdc.").as_deref(),
            Some("dbserver1.shop.orders")
        );
        assert!(written_by(&dbz, "cdc.", "dbserver1.shop.orders"));
        assert!(!written_by(&dbz, "cdc.", "cdc.shop.orders"));
    }

    #[test]
    fn the_bridges_own_topics_are_internal_and_never_data_topics() {
        let name = internal("mongo_kafka_bridge", "control");
        assert_eq!(name, "__mongo_kafka_bridge.mongo_kafka_bridge.control");
        assert!(is_internal(&name));
        let all = pipeline("");
        assert!(!written_by(&all, "", &name));
        assert!(!is_internal("shop.orders"));
        assert_eq!(
            control("mkb", "east", "0123456789ab"),
            "__mongo_kafka_bridge.mkb.group.east.0123456789ab"
        );
        assert_eq!(consumer_group("east", "0123456789ab"), "east.0123456789ab");
    }
}
