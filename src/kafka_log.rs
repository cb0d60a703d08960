//! librdkafka's own log lines and global errors, turned into a few actionable `tracing` lines.
//!
//! librdkafka reports one broker problem several times (a log line and an error callback, per
//! client, per retry), which floods the log while a broker is down without saying what to do.
//! Invariants: each distinct problem is logged at most once per [`REPEAT_AFTER`]; global errors
//! carry the remedy; nothing here can block librdkafka's thread for long (one short mutex).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

/// The same problem is logged again only after this long.
pub const REPEAT_AFTER: Duration = Duration::from_secs(30);

/// Remembers when each problem was last logged.
#[derive(Debug, Default)]
pub struct LogLimiter {
    last: Mutex<HashMap<String, Instant>>,
}

impl LogLimiter {
    /// Whether `key` may be logged now (and records that it was).
    pub fn allow(&self, key: &str) -> bool {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        match last.get(key) {
            Some(at) if now.duration_since(*at) < REPEAT_AFTER => false,
            _ => {
                last.insert(key.to_owned(), now);
                true
            }
        }
    }

    /// A librdkafka log line: errors and warnings at `warn` (rate-limited per facility),
    /// everything else at `debug`.
    pub fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error
            | RDKafkaLogLevel::Warning => {
                if self.allow(&format!("log:{facility}")) {
                    tracing::warn!(facility, "librdkafka: {message}");
                }
            }
            _ => tracing::debug!(facility, "librdkafka: {message}"),
        }
    }

    /// A librdkafka global error, with what to check.
    pub fn error(&self, error: &KafkaError, reason: &str) {
        let code = error.rdkafka_error_code();
        if !self.allow(&format!("error:{code:?}")) {
            return;
        }
        match code {
            Some(
                RDKafkaErrorCode::AllBrokersDown
                | RDKafkaErrorCode::BrokerTransportFailure
                | RDKafkaErrorCode::Resolve,
            ) => tracing::error!(
                reason,
                "kafka unreachable: check kafka.bootstrap_servers, that the brokers run, and the \
                 security properties in [kafka.properties]; records wait and are retried until \
                 message.timeout.ms, nothing is committed past them"
            ),
            Some(RDKafkaErrorCode::Authentication | RDKafkaErrorCode::SaslAuthenticationFailed) => {
                tracing::error!(
                    reason,
                    "kafka authentication failed: check sasl.* / ssl.* in [kafka.properties]"
                )
            }
            _ => tracing::error!(error = %error, reason, "kafka client error"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_is_logged_once_per_interval() {
        let limiter = LogLimiter::default();
        assert!(limiter.allow("a"));
        assert!(!limiter.allow("a"));
        assert!(limiter.allow("b"));
    }
}
