//! How `offsets` prints documents: `field: value` lines; a `Timestamp` as
//! `Timestamp(<seconds>.<increment>) = <RFC 3339> (<age> ago)`, the one form the CLI and the
//! demo use.

use std::io::Write;

use bson::{Bson, Document};

use crate::event::format_timestamp;

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
