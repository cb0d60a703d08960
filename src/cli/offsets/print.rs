//! How `offsets` prints documents: `field: value` lines; a `Timestamp` as
//! `Timestamp(<seconds>.<increment>) = <RFC 3339> (<age> ago)`, the one form the CLI and the
//! demo use; the MongoDB cluster as its description (`replica set "rs0" (replicaSetId …)`);
//! and the CLUSTER and STATE columns of `offsets list` ([`cluster`], [`state`]).

use std::io::Write;

use bson::{Bson, Document};

use crate::event::format_timestamp;
use crate::offsets::OffsetsDoc;

pub(super) fn id_text(d: &Document) -> String {
    match d.get("_id") {
        Some(Bson::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

pub(super) use crate::event::rfc3339_seconds as rfc3339;

pub(super) fn age(secs: u32) -> String {
    let now = chrono::Utc::now().timestamp();
    let d = (now - i64::from(secs)).max(0);
    match d {
        0..=119 => format!("{d}s"),
        120..=7199 => format!("{}m", d / 60),
        7200..=172_799 => format!("{}h", d / 3600),
        _ => format!("{}d", d / 86_400),
    }
}

/// Prints one document as `field: value` lines, times with their RFC 3339 form and age.
pub(super) fn print_doc(out: &mut impl Write, d: &Document) {
    for (key, value) in d {
        let text = match value {
            Bson::Timestamp(t) => format!(
                "Timestamp({}) = {} ({} ago)",
                format_timestamp(*t),
                rfc3339(i64::from(t.time)),
                age(t.time)
            ),
            Bson::DateTime(t) => rfc3339(t.timestamp_millis() / 1000),
            Bson::Document(_) if key == crate::offsets::fields::CLUSTER => {
                match OffsetsDoc::parse(d).map(|p| p.cluster) {
                    Ok(Some(cluster)) => cluster.to_string(),
                    _ => value.clone().into_relaxed_extjson().to_string(),
                }
            }
            Bson::Document(token) if key == "resumeToken" => match token.get_str("_data") {
                Ok(data) if data.len() > 24 => format!("{{_data: \"{}…\"}}", &data[..24]),
                _ => Bson::Document(token.clone())
                    .into_relaxed_extjson()
                    .to_string(),
            },
            other => other.clone().into_relaxed_extjson().to_string(),
        };
        let _ = writeln!(out, "  {key}: {text}");
    }
}

/// The CLUSTER column of `offsets list`: the set name (`sharded` for a mongos) and the id,
/// `none` before one is recorded.
pub(super) fn cluster(parsed: &OffsetsDoc) -> String {
    parsed.cluster.as_ref().map_or_else(
        || "none".to_owned(),
        |c| format!("{} {}", c.set_name.as_deref().unwrap_or("sharded"), c.id),
    )
}

/// The STATE column of `offsets list`: a failure the last owner stopped on, a snapshot copying
/// (documents delivered, namespaces done of all) or asked for, the last finished snapshot, or
/// `streaming`.
pub(super) fn state(parsed: &OffsetsDoc, d: &bson::Document) -> String {
    if let Some((at, _)) = &parsed.failure {
        return format!(
            "failed at {} (see `offsets show`)",
            rfc3339(at.timestamp_millis() / 1000)
        );
    }
    if let Some(s) = &parsed.snapshot {
        let copied: u64 = s.namespaces.iter().map(|n| n.copied).sum();
        let done = s.namespaces.iter().filter(|n| n.done).count();
        return format!(
            "snapshot copying: {copied} documents, {done}/{} namespaces",
            s.namespaces.len()
        );
    }
    if parsed.snapshot_request.is_some() {
        return "snapshot asked for".to_owned();
    }
    match d.get_document(crate::offsets::fields::LAST_SNAPSHOT) {
        Ok(last) => match last.get_datetime("finishedAt") {
            Ok(at) => format!(
                "streaming (snapshot done {})",
                rfc3339(at.timestamp_millis() / 1000)
            ),
            Err(_) => "streaming (snapshot done)".to_owned(),
        },
        Err(_) => "streaming".to_owned(),
    }
}

#[cfg(test)]
mod state_tests {
    use bson::{DateTime, doc};

    use super::state;
    use crate::offsets::OffsetsDoc;
    use crate::snapshot::{NamespaceCopy, Reason, Request, SnapshotState};

    #[test]
    fn the_state_column_shows_a_failure_a_snapshot_and_its_progress() {
        let plain = doc! {};
        let mut parsed = OffsetsDoc::default();
        assert_eq!(state(&parsed, &plain), "streaming");
        let done = doc! { "lastSnapshot": { "finishedAt": DateTime::from_millis(0) } };
        assert_eq!(
            state(&parsed, &done),
            "streaming (snapshot done 1970-01-01T00:00:00Z)"
        );
        let request = Request {
            reason: Reason::Requested,
            namespaces: None,
            requested_at: DateTime::now(),
        };
        parsed.snapshot_request = Some(request.clone());
        assert_eq!(state(&parsed, &plain), "snapshot asked for");
        let mut first = NamespaceCopy::new("d", "a");
        (first.copied, first.done) = (40, true);
        let mut second = NamespaceCopy::new("d", "b");
        second.copied = 2;
        parsed.snapshot = Some(SnapshotState::new(&request, vec![first, second], None));
        assert_eq!(
            state(&parsed, &plain),
            "snapshot copying: 42 documents, 1/2 namespaces"
        );
        parsed.failure = Some((DateTime::from_millis(0), "boom".into()));
        assert_eq!(
            state(&parsed, &plain),
            "failed at 1970-01-01T00:00:00Z (see `offsets show`)"
        );
    }
}
