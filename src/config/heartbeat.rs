//! `heartbeat_interval_ms` and `heartbeat_topic`: a pipeline's heartbeat records (README
//! "Heartbeats"), and their rules checked at load.
//!
//! The feature's pieces, one file name in every layer: `config/heartbeat.rs` (this file),
//! `encode/heartbeat.rs` (the record; its topic is named in `encode/topics.rs`),
//! `relay/heartbeat.rs` (when one is written, and how it commits the position),
//! `observe/metrics/heartbeat.rs` (the series) and `cli/check/heartbeat.rs` (the topic in
//! `check`).
//!
//! Invariant, once [`rules`] passed: the interval is 0 (off) or within
//! [`MIN_INTERVAL_MS`]..=[`MAX_INTERVAL_MS`] (the relay looks every 500 ms), and a configured
//! topic is a valid, non-internal name that comes with an interval.

use super::PipelineConfig;
use super::names::is_data_topic;
use crate::error::BridgeError;

/// The shortest interval: the relay's tick is 500 ms.
pub(crate) const MIN_INTERVAL_MS: u64 = 1000;
/// The longest interval: a day.
pub(crate) const MAX_INTERVAL_MS: u64 = 86_400_000;

/// The rules of `p`'s heartbeat at TOML path `at` (`pipelines[i]`).
///
/// Errors: [`BridgeError::Config`] naming the field and the fix.
pub(super) fn rules(p: &PipelineConfig, at: &str) -> Result<(), BridgeError> {
    let interval = p.heartbeat_interval_ms;
    if interval != 0 && !(MIN_INTERVAL_MS..=MAX_INTERVAL_MS).contains(&interval) {
        return Err(BridgeError::config(
            format!("{at}.heartbeat_interval_ms"),
            format!(
                "{interval} is out of range: use 0 (off, the default) or {MIN_INTERVAL_MS} to \
                 {MAX_INTERVAL_MS} (a day)"
            ),
        ));
    }
    let Some(topic) = &p.heartbeat_topic else {
        return Ok(());
    };
    let field = format!("{at}.heartbeat_topic");
    if interval == 0 {
        return Err(BridgeError::config(
            field,
            "only used with heartbeat_interval_ms: set the interval (e.g. 10000), or remove it",
        ));
    }
    if !is_data_topic(topic) {
        return Err(BridgeError::config(
            field,
            "Kafka topic names use 1–249 of [A-Za-z0-9._-] and must not start with __",
        ));
    }
    if p.topic.as_ref() == Some(topic) || p.dead_letter_topic.as_ref() == Some(topic) {
        return Err(BridgeError::config(
            field,
            "is the pipeline's data or dead-letter topic: heartbeats need a topic of their own",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn refused(body: &str) -> (String, String) {
        let text = format!(
            "[mongodb]\nuri = \"mongodb://h:1\"\n[kafka]\nbootstrap_servers = \"h:1\"\n\
             [[pipelines]]\nname = \"p\"\ndatabase = \"shop\"\n{body}"
        );
        match Config::from_toml(&text, std::iter::empty()) {
            Err(crate::error::BridgeError::Config { field, reason }) => (field, reason),
            other => panic!("expected a config error for {body:?}, got {other:?}"),
        }
    }

    #[test]
    fn intervals_and_topics_are_checked_naming_the_field() {
        let (field, reason) = refused("heartbeat_interval_ms = 200\n");
        assert_eq!(field, "pipelines[0].heartbeat_interval_ms");
        assert!(reason.contains("1000"), "{reason}");
        let (field, reason) = refused("heartbeat_topic = \"beats\"\n");
        assert_eq!(field, "pipelines[0].heartbeat_topic");
        assert!(reason.contains("heartbeat_interval_ms"), "{reason}");
        let (field, _) = refused("heartbeat_interval_ms = 5000\nheartbeat_topic = \"__beats\"\n");
        assert_eq!(field, "pipelines[0].heartbeat_topic");
        let (field, reason) =
            refused("heartbeat_interval_ms = 5000\ntopic = \"t\"\nheartbeat_topic = \"t\"\n");
        assert_eq!(field, "pipelines[0].heartbeat_topic");
        assert!(reason.contains("of their own"), "{reason}");
    }

    #[test]
    fn heartbeats_are_off_by_default_and_accepted_in_range() {
        let p = crate::config::PipelineConfig::for_test("");
        assert_eq!((p.heartbeat_interval_ms, p.heartbeat_topic), (0, None));
        let p = crate::config::PipelineConfig::for_test(
            "heartbeat_interval_ms = 1000\nheartbeat_topic = \"beats\"\n",
        );
        assert_eq!(p.heartbeat_interval_ms, 1000);
    }
}
