//! The deserializer's messages made actionable: a configuration key or value that is not one
//! of the accepted ones is named with the closest accepted one, when one is close (a typo, not
//! another word), and a value of the wrong type is described in the file's terms (a whole
//! number, without quotes) instead of the program's (`u64`, `usize`).
//!
//! Reads the deserializer's message (`unknown field `x`, expected one of `a`, `b``,
//! `unknown variant …`, `invalid type: string "1s", expected u64`), so it covers every table and
//! every enumerated value without a list of its own.

/// `reason`, the deserializer's message about the field at `path`, with ` — did you mean
/// `y`?` appended when it names an unknown field or variant `x` and an accepted name is within
/// an edit distance of a third of `x` (at least 1, at most 3); a wrong type in the file's terms
/// ([`in_file_terms`]); `reason` unchanged otherwise.
pub(super) fn with_suggestion(reason: String, path: &str) -> String {
    let reason = in_file_terms(reason, path.ends_with("_ms"));
    let Some(rest) = reason
        .strip_prefix("unknown field `")
        .or_else(|| reason.strip_prefix("unknown variant `"))
    else {
        return reason;
    };
    let Some((given, accepted)) = rest.split_once('`') else {
        return reason;
    };
    let limit = (given.chars().count() / 3).clamp(1, 3);
    let closest = accepted
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|name| (distance(given, name), name))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d);
    match closest {
        Some((_, name)) => format!("{reason} — did you mean `{name}`?"),
        None => reason,
    }
}

/// `reason` with a Rust integer type (`expected u64`) named as the number the file must hold,
/// and the fix added when the value was written as a string (`"1s"`, `"3"`), for a
/// `duration` (a `*_ms` field) with its unit.
fn in_file_terms(reason: String, duration: bool) -> String {
    const TYPES: [(&str, &str); 8] = [
        ("u8", "a whole number from 0 to 255"),
        ("u16", "a whole number from 0 to 65535"),
        ("u32", "a whole number of 0 or more"),
        ("u64", "a whole number of 0 or more"),
        ("usize", "a whole number of 0 or more"),
        ("i32", "a whole number"),
        ("i64", "a whole number"),
        ("f64", "a number"),
    ];
    let Some((head, rust)) = reason.rsplit_once(", expected ") else {
        return reason;
    };
    let Some((_, plain)) = TYPES.iter().find(|(name, _)| *name == rust) else {
        return reason;
    };
    let quoted = head.starts_with("invalid type: string");
    let fix = if quoted {
        " (a number, not text: in the file, without quotes)"
    } else {
        ""
    };
    let unit = if quoted && duration {
        " — durations are whole milliseconds, e.g. 1000 for 1 s"
    } else {
        ""
    };
    format!("{head}, expected {plain}{fix}{unit}")
}

/// Levenshtein distance (insertions, deletions, substitutions) between `a` and `b`.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == *cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::{distance, with_suggestion};

    #[test]
    fn a_typo_gets_the_closest_accepted_name_and_another_word_gets_none() {
        let typo = "unknown field `comit_interval_ms`, expected one of `commit_interval_ms`, \
                    `lease_ms`";
        assert!(
            with_suggestion(typo.to_owned(), "bridge")
                .ends_with(" — did you mean `commit_interval_ms`?")
        );
        let variant = "unknown variant `exatly_once`, expected `at_least_once` or `exactly_once`";
        assert!(
            with_suggestion(variant.to_owned(), "delivery")
                .ends_with("did you mean `exactly_once`?")
        );
        let other = "unknown field `colour`, expected one of `collection`, `database`";
        assert_eq!(with_suggestion(other.to_owned(), "x"), other);
        assert_eq!(
            with_suggestion("invalid type".to_owned(), "x"),
            "invalid type"
        );
        assert_eq!(distance("kitten", "sitting"), 3);
    }

    #[test]
    fn a_value_of_the_wrong_type_is_named_in_the_files_terms() {
        let quoted = with_suggestion(
            "invalid type: string \"1s\", expected u64".to_owned(),
            "encode_threads",
        );
        assert!(
            quoted.ends_with(
                "expected a whole number of 0 or more (a number, not text: in the file, without \
                 quotes)"
            ),
            "{quoted}"
        );
        let negative = with_suggestion(
            "invalid value: integer `-1`, expected usize".to_owned(),
            "x",
        );
        assert_eq!(
            negative,
            "invalid value: integer `-1`, expected a whole number of 0 or more"
        );
        let other = "invalid type: integer `3`, expected a string";
        assert_eq!(with_suggestion(other.to_owned(), "x"), other);
    }

    #[test]
    fn a_file_key_typo_is_named_with_the_key_it_meant() {
        let text = "[mongodb]\nuri = \"mongodb://h:1\"\n[kafka]\nbootstrap_servers = \"h:1\"\n\
                    [bridge]\ncomit_interval_ms = 5\n[[pipelines]]\nname = \"p\"\n\
                    database = \"d\"\n";
        match crate::config::Config::from_toml(text, std::iter::empty()) {
            Err(crate::error::BridgeError::Config { field, reason }) => {
                assert_eq!(field, "bridge.comit_interval_ms");
                assert!(
                    reason.contains("did you mean `commit_interval_ms`?"),
                    "{reason}"
                );
            }
            other => panic!("expected a config error, got {other:?}"),
        }
    }
}
