//! The librdkafka client context of the bridge's Kafka clients: statistics become metrics, and
//! librdkafka's own log lines and global errors become a few actionable `tracing` lines.
//!
//! librdkafka reports one broker problem several times (a log line and an error callback, per
//! client, per retry), which floods the log while a broker is down without saying what to do.
//!
//! Invariants:
//! - The callbacks only store numbers or log (they run on librdkafka's threads); nothing here can
//!   block librdkafka's thread for long (one short mutex).
//! - Each distinct problem is logged at most once per [`REPEAT_AFTER`]; global errors are worded
//!   from their cause and carry the remedy.
//! - The retries counter only ever increases, also when a restart builds a new producer whose own
//!   totals start again at 0 (each context counts the increase of its producer's totals).
//! - An authentication failure (SASL or TLS) is remembered ([`KafkaContext::authentication`]):
//!   Kafka's clients treat it as not retriable (the Java client's `AuthenticationException`), and
//!   so does the bridge, which stops the pipeline with it instead of waiting for a record to
//!   time out (an idle pipeline would otherwise wait forever, looking healthy).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::statistics::Statistics;

use crate::observe::metrics::RdkafkaGauges;

/// The same problem is logged again only after this long.
pub(crate) const REPEAT_AFTER: Duration = Duration::from_secs(30);

/// A librdkafka client context that publishes the producer's statistics and turns librdkafka's
/// logs into actionable lines; without gauges (see [`KafkaContext::default`]) it ignores the
/// statistics.
#[derive(Default)]
pub(crate) struct KafkaContext {
    gauges: Option<RdkafkaGauges>,
    last_retries: AtomicU64,
    logs: LogLimiter,
    /// librdkafka's reason for the first authentication failure of this client.
    authentication: AuthenticationFailure,
}

/// Where a client's context records its first authentication failure; clones share it, so the
/// owner of a client reads what the context (owned by librdkafka) saw.
#[derive(Debug, Clone, Default)]
pub(crate) struct AuthenticationFailure(std::sync::Arc<Mutex<Option<String>>>);

impl AuthenticationFailure {
    /// librdkafka's reason, if the client failed to authenticate.
    pub(crate) fn get(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn record(&self, reason: &str) {
        let mut first = self.0.lock().unwrap_or_else(|e| e.into_inner());
        first.get_or_insert_with(|| reason.to_owned());
    }
}

impl KafkaContext {
    /// A context publishing into `gauges`.
    pub(crate) fn new(gauges: RdkafkaGauges) -> Self {
        Self {
            gauges: Some(gauges),
            ..Self::default()
        }
    }

    /// Where this client's first authentication failure (wrong SASL credentials or mechanism,
    /// a TLS handshake refused) is recorded, for the client's owner (a context handed to
    /// librdkafka is no longer reachable as itself).
    pub(crate) fn authentication(&self) -> AuthenticationFailure {
        self.authentication.clone()
    }

    /// Applies one statistics snapshot.
    pub(crate) fn apply(&self, stats: &Statistics) {
        let Some(g) = &self.gauges else { return };
        let retries = g.apply(stats);
        let before = self.last_retries.swap(retries, Ordering::Relaxed);
        g.add_retries(retries.saturating_sub(before));
    }
}

impl rdkafka::ClientContext for KafkaContext {
    fn stats(&self, statistics: Statistics) {
        self.apply(&statistics);
    }

    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        self.logs.log(level, fac, log_message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if matches!(
            error.rdkafka_error_code(),
            Some(RDKafkaErrorCode::Authentication | RDKafkaErrorCode::SaslAuthenticationFailed)
        ) {
            self.authentication.record(reason);
        }
        self.logs.error(&error, reason);
    }
}

/// Remembers when each problem was last logged.
#[derive(Debug, Default)]
struct LogLimiter {
    last: Mutex<HashMap<String, Instant>>,
}

impl LogLimiter {
    /// Whether `key` may be logged now (and records that it was).
    fn allow(&self, key: &str) -> bool {
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
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
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
    fn error(&self, error: &KafkaError, reason: &str) {
        let code = error.rdkafka_error_code();
        if !self.allow(&format!("error:{code:?}")) {
            return;
        }
        match code {
            // librdkafka's reason for this one counts brokers ("1/1 brokers are down") in a way
            // that reads as a contradiction while connections are being retried: not shown.
            Some(RDKafkaErrorCode::AllBrokersDown) => tracing::error!(
                "kafka unreachable: no broker of kafka.bootstrap_servers answers. Check that the \
                 brokers run, the addresses, and the security properties in [kafka.properties]; \
                 records wait and are retried until message.timeout.ms, nothing is committed \
                 past them"
            ),
            Some(RDKafkaErrorCode::BrokerTransportFailure) => tracing::error!(
                reason,
                "kafka connection to a broker failed (retried by librdkafka). If it persists, \
                 check that the broker runs and the security properties in [kafka.properties]"
            ),
            Some(RDKafkaErrorCode::Resolve) => tracing::error!(
                reason,
                "kafka broker address cannot be resolved: check kafka.bootstrap_servers and the \
                 brokers' advertised listeners"
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
    fn the_first_authentication_failure_is_kept_for_the_clients_owner() {
        use rdkafka::ClientContext as _;
        let ctx = KafkaContext::default();
        let owner = ctx.authentication();
        let global = |code| KafkaError::Global(code);
        ctx.error(global(RDKafkaErrorCode::BrokerTransportFailure), "down");
        assert_eq!(owner.get(), None, "an outage is no authentication failure");
        ctx.error(global(RDKafkaErrorCode::SaslAuthenticationFailed), "first");
        ctx.error(global(RDKafkaErrorCode::Authentication), "second");
        assert_eq!(owner.get().as_deref(), Some("first"));
        assert_eq!(ctx.authentication().get().as_deref(), Some("first"));
    }

    #[test]
    fn a_problem_is_logged_once_per_interval() {
        let limiter = LogLimiter::default();
        assert!(limiter.allow("a"));
        assert!(!limiter.allow("a"));
        assert!(limiter.allow("b"));
    }
}
