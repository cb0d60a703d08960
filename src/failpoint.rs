//! Fail points: named places where the fault suite makes a fault land deterministically, in
//! the spirit of MongoDB's `configureFailPoint` (a test hook, not a setting).
//!
//! `MKB_FAILPOINT="<point>[@<n>]=<command>"` runs `<command>` with `sh -c` the `n`th time (1 by
//! default) the process reaches `<point>`, and waits for it to finish before going on: e.g.
//! `transaction_committing=scripts/services freeze kafka --name x` freezes the broker between
//! the last delivery of a transaction and its `commit_transaction`. The points:
//! - `transaction_open` (exactly-once): a record of an open Kafka transaction was just handed
//!   to librdkafka (enqueued), so the transaction is open and undecided;
//! - `transaction_committing` (exactly-once): every record of the transaction and its progress
//!   record are delivered; `commit_transaction` comes next.
//!
//! Invariants:
//! - Read once per process; unset (production), reaching a point costs one atomic load.
//! - A point fires at most once per process; the command's outcome is logged, never an error
//!   of the pipeline (it only makes a fault land where the test wants it).
//! - The command runs on the calling thread (it blocks it while it runs): keep it short.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The configured point: its name, the occurrence that fires, the command.
struct Armed {
    point: String,
    nth: u64,
    command: String,
    reached: AtomicU64,
}

static ARMED: OnceLock<Option<Armed>> = OnceLock::new();

/// The environment variable that arms a point.
pub const VARIABLE: &str = "MKB_FAILPOINT";

fn armed() -> Option<&'static Armed> {
    ARMED
        .get_or_init(|| std::env::var(VARIABLE).ok().and_then(|v| parse(&v)))
        .as_ref()
}

/// `<point>[@<n>]=<command>`; `None` when malformed (logged).
fn parse(value: &str) -> Option<Armed> {
    let Some((left, command)) = value.split_once('=') else {
        tracing::warn!(
            value,
            "{VARIABLE} ignored: expected <point>[@<n>]=<command>"
        );
        return None;
    };
    let (point, nth) = match left.split_once('@') {
        Some((point, n)) => (point, n.parse().ok()?),
        None => (left, 1),
    };
    Some(Armed {
        point: point.trim().to_owned(),
        nth,
        command: command.to_owned(),
        reached: AtomicU64::new(0),
    })
}

/// The process reached `point`: runs its command if it is armed for this occurrence.
#[inline]
pub(crate) fn reach(point: &str) {
    let Some(armed) = armed() else { return };
    if armed.point != point || armed.reached.fetch_add(1, Ordering::Relaxed) + 1 != armed.nth {
        return;
    }
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(&armed.command)
        .status();
    tracing::warn!(point, status = ?status, "fail point fired ({VARIABLE})");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_names_its_occurrence_and_command() {
        let a = parse("transaction_open@3=echo x=y").expect("parsed");
        assert_eq!(
            (a.point.as_str(), a.nth, a.command.as_str()),
            ("transaction_open", 3, "echo x=y")
        );
        let b = parse("transaction_committing=true").expect("parsed");
        assert_eq!((b.nth, b.command.as_str()), (1, "true"));
        assert!(parse("no command").is_none());
        assert!(parse("p@x=true").is_none());
    }
}
