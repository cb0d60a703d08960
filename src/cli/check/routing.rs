//! The routing lines of `check` (`[pipelines.routing]`; `config/routing.rs` lists the feature's
//! pieces): a pipeline's routes in the order they apply and its key, then each topic routing
//! names before any event (a template without placeholders, `default_topic`) with its state.
//! The key field's order warning is one of [`Config::warnings`](crate::config::Config::warnings).

use super::topics::{AutoCreate, state_line};
use super::{CheckLine, line};
use crate::config::{Config, PipelineConfig};
use crate::encode::routing::Router;
use crate::encode::topics;
use crate::kafka::admin::{ClusterInfo, KafkaAdmin};

/// The routes of `p` and the states of the topics they name, none without routing.
pub(super) async fn lines(
    config: &Config,
    p: &PipelineConfig,
    cluster: &ClusterInfo,
    admin: &KafkaAdmin,
    auto: AutoCreate,
) -> Vec<CheckLine> {
    let (Some(r), Some(router)) = (&p.routing, Router::of(p)) else {
        return Vec::new();
    };
    let prefix = &config.kafka.topic_prefix;
    let mut routes: Vec<String> = r
        .namespaces
        .iter()
        .map(|n| match (&n.glob, &n.regex) {
            (Some(glob), _) => format!("glob '{glob}' → {:?}", n.topic),
            (_, regex) => format!("regex '{}' → {:?}", regex.as_deref().unwrap_or(""), n.topic),
        })
        .collect();
    let usual = p.topic.as_ref().map_or_else(
        || format!("{}<db>.<coll>", topics::prefix(p, prefix)),
        |t| format!("{t:?}"),
    );
    routes.push(match &r.topic {
        Some(template) => format!("every other namespace → {template:?}"),
        None => format!("every other namespace → {usual}"),
    });
    if let Some(default) = &r.default_topic {
        routes.push(format!(
            "a document without the field (a delete, a missing or unusable value) → {default:?}"
        ));
    }
    let key = r.key_field.as_deref().map_or_else(
        || "documentKey".to_owned(),
        |k| format!("{k} (documentKey when an event lacks it)"),
    );
    let mut out = vec![line(
        true,
        format!(
            "pipeline {}: routes: {}; key: {key}",
            p.name,
            routes.join("; ")
        ),
    )];
    for topic in router.known_topics() {
        let what = format!("routed topic {topic:?}");
        out.push(state_line(config, p, (Some(topic), what), cluster, admin, auto).await);
    }
    out
}
