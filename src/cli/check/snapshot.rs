//! When a copy will run, for `check`: a pipeline with `snapshot = "initial"` copies its
//! namespaces at its first start (no position yet), resumes a copy under way, or copies
//! nothing more (it has a position; the `snapshot` command asks for another copy).

use super::{CheckLine, line};
use crate::config::{PipelineConfig, SnapshotMode};
use crate::offsets::OffsetsDoc;

/// The snapshot line of `p` given its offsets document (`None`: there is none); `None` when
/// the pipeline never copies and no copy is under way or asked for.
pub(super) fn snapshot_line(p: &PipelineConfig, stored: Option<&OffsetsDoc>) -> Option<CheckLine> {
    let name = &p.name;
    let initial = p.snapshot == SnapshotMode::Initial;
    let text = match stored {
        Some(OffsetsDoc {
            snapshot: Some(state),
            ..
        }) => {
            let copied: u64 = state.namespaces.iter().map(|n| n.copied).sum();
            format!(
                "pipeline {name}: a snapshot copy is under way ({copied} documents delivered); \
                 the next run resumes it after the last committed _id"
            )
        }
        Some(doc) if doc.snapshot_request.is_some() => format!(
            "pipeline {name}: a snapshot was asked for (`snapshot` command); the owner copies at \
             its next read, or the next run at its start"
        ),
        Some(doc) if doc.position().is_some() && initial => format!(
            "pipeline {name}: snapshot = \"initial\" copies nothing more: the pipeline has a \
             position. `mongo-kafka-bridge snapshot {name} --config FILE` asks for another copy \
             (after `offsets reset {name} --delete`, the next start copies again)"
        ),
        _ if initial => format!(
            "pipeline {name}: snapshot = \"initial\": the next start copies every document of \
             scope {} before it streams (it has no position)",
            p.scope()
        ),
        _ => return None,
    };
    Some(line(true, text))
}

#[cfg(test)]
mod tests {
    use bson::{Timestamp, doc};

    use super::snapshot_line;
    use crate::config::Config;
    use crate::offsets::OffsetsDoc;

    fn pipeline(extra: &str) -> crate::config::PipelineConfig {
        let text = format!(
            "[mongodb]\nuri = \"mongodb://h:1\"\n[kafka]\nbootstrap_servers = \"h:1\"\n\
             [[pipelines]]\nname = \"p\"\ndatabase = \"d\"\ncollection = \"c\"\n{extra}"
        );
        let config = Config::from_toml(&text, std::iter::empty()).expect("valid");
        config.pipelines[0].clone()
    }

    #[test]
    fn check_says_whether_and_when_a_copy_runs() {
        let initial = pipeline("snapshot = \"initial\"\nfull_document = \"update_lookup\"\n");
        let first = snapshot_line(&initial, None).expect("a line").text;
        assert!(
            first.contains("the next start copies every document of scope d.c"),
            "{first}"
        );
        let positioned = OffsetsDoc::parse(&doc! {
            "startAtOperationTime": Timestamp { time: 1, increment: 1 }
        })
        .expect("parses");
        let later = snapshot_line(&initial, Some(&positioned))
            .expect("a line")
            .text;
        assert!(later.contains("copies nothing more"), "{later}");
        let after_delete = OffsetsDoc::parse(&doc! { "epoch": 3_i64 }).expect("parses");
        let again = snapshot_line(&initial, Some(&after_delete))
            .expect("a line")
            .text;
        assert!(again.contains("the next start copies"), "{again}");
        assert!(snapshot_line(&pipeline(""), Some(&positioned)).is_none());
    }
}
