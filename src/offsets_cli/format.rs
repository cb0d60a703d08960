//! How `offsets` prints documents: `field: value` lines, times with RFC 3339 and age.

use std::io::Write;

use bson::{Bson, Document, Timestamp};

use crate::event::format_timestamp;

pub(super) fn id_text(d: &Document) -> String {
    match d.get("_id") {
        Some(Bson::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

pub(super) fn int(d: &Document, key: &str) -> i64 {
    match d.get(key) {
        Some(Bson::Int64(v)) => *v,
        Some(Bson::Int32(v)) => i64::from(*v),
        _ => 0,
    }
}

/// The position a document stands for: its token's `positionTime`/`clusterTime`, or its
/// `startAtOperationTime`.
pub(super) fn position_of(d: &Document) -> Option<(&'static str, Timestamp)> {
    let ts = |k| d.get_timestamp(k).ok();
    if d.contains_key("resumeToken") {
        ts("positionTime")
            .or(ts("clusterTime"))
            .map(|t| ("token", t))
    } else {
        ts("startAtOperationTime").map(|t| ("startAt", t))
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

#[cfg(test)]
mod tests {
    use bson::doc;

    use super::*;

    #[test]
    fn the_position_prefers_the_token_and_falls_back_to_start_at() {
        let ts = Timestamp {
            time: 5,
            increment: 1,
        };
        let with_token = doc! { "resumeToken": { "_data": "82" }, "positionTime": ts };
        assert_eq!(position_of(&with_token), Some(("token", ts)));
        let reset = doc! { "startAtOperationTime": ts };
        assert_eq!(position_of(&reset), Some(("startAt", ts)));
        assert_eq!(position_of(&doc! {}), None);
    }
}
