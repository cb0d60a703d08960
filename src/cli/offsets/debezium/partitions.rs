//! Which of Debezium's stored partitions `offsets import debezium` takes (README "Moving from
//! Debezium"), and what it says about the others.
//!
//! The partitions of one `server_id` (the connector's `topic.prefix`), as Debezium's MongoDB
//! connector writes them (`MongoDbPartition`):
//! - the current form, one per connector: `{"server_id": X}` (3.x);
//! - older forms, from versions that ran one change stream per replica set or per shard:
//!   `{"server_id": X, "rs": <replica set or shard name>}` (`"rs": "cluster"` for a whole
//!   sharded cluster);
//! - task generations of the multi-task mode: `"task_id"`, `"multi_task_gen"` and
//!   `"task_count"` (strings) beside `server_id` (and `rs`).
//!
//! The rule (Debezium's own: it resumes from its current partition and ignores older ones; from
//! per-shard ones only with `mongodb.allow.offset.invalidation`, and then from the oldest):
//! - exactly one partition of the current form: it is taken, and every other partition is
//!   printed as ignored, with its position;
//! - otherwise (only older forms, or the current form more than once, as when one partition was
//!   written under two keys): refused, naming each candidate and its position, unless
//!   `--use-oldest`, which takes the oldest — never the newest, whose position would skip the
//!   events the others had not reached — and says that the events between it and the newer
//!   positions are published again (duplicates).
//!
//! Invariants: "oldest" orders by the offsets' cluster time (`sec`, then `ord`); `--use-oldest`
//! refuses, naming them, a candidate without one (`-1` before Debezium's first streamed event:
//! it cannot be placed), a candidate written during a snapshot of Debezium's, and two oldest at
//! the same cluster time with different tokens (a stream resumed after one could skip events of
//! the other at that time). A position is printed as `sec S, ord O`; without them, as the cluster
//! time read from its resume token when the token is in MongoDB's documented hex form (`_data`
//! opening with the timestamp type, 0x82; MongoDB manual, "Change Streams", resume tokens): read
//! for display only, never to order, as the encoding is the server's and SecantusDB's differs.

use bson::{Document, Timestamp};
use serde_json::Value;

use super::offset::{Entry, cluster_time, imported, refuse_incomplete, token};
use crate::event::format_timestamp;
use crate::offsets::debezium::Imported;

/// The position chosen, and the lines to print about the choice (the partitions ignored, the
/// oldest taken and the duplicates it means).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Choice {
    pub(super) imported: Imported,
    pub(super) notes: Vec<String>,
}

/// The position of `server_id` among `entries`, chosen by the rule above (`use_oldest`: the
/// oldest candidate when there is no single current partition), or why none can be imported.
pub(super) fn choose(
    entries: &[Entry],
    server_id: &str,
    use_oldest: bool,
) -> Result<Choice, String> {
    let ours: Vec<&Entry> = entries.iter().filter(|e| is_of(e, server_id)).collect();
    if ours.is_empty() {
        return Err(none_for(entries, server_id));
    }
    let (current, older): (Vec<&Entry>, Vec<&Entry>) = ours.into_iter().partition(is_current);
    let others: Vec<&Entry> = entries.iter().filter(|e| !is_of(e, server_id)).collect();
    if let [only] = current.as_slice() {
        let mut notes = ignored(&[older, others].concat());
        if use_oldest {
            notes.push(
                "--use-oldest: not needed, the partition of the current form is taken".into(),
            );
        }
        let imported = imported(only, server_id)?;
        return Ok(Choice { imported, notes });
    }
    let (candidates, rest) = if current.is_empty() {
        (older, others)
    } else {
        (current, [older, others].concat())
    };
    if !use_oldest {
        return Err(ambiguous(&candidates, server_id));
    }
    let oldest = oldest(&candidates)?;
    let imported = imported(oldest, server_id)?;
    let mut notes = took_oldest(oldest, &candidates);
    notes.extend(ignored(&rest));
    Ok(Choice { imported, notes })
}

fn is_of(e: &Entry, server_id: &str) -> bool {
    e.partition.get("server_id").and_then(Value::as_str) == Some(server_id)
}

/// The current form: `{"server_id": X}` and nothing else.
fn is_current(e: &&Entry) -> bool {
    e.partition.len() == 1
}

/// A candidate's time for ordering (the offset's `sec`, `ord`).
fn time_of(e: &Entry) -> Option<(u32, u32)> {
    cluster_time(&e.offset).map(|t| (t.time, t.increment))
}

/// The partition, what its form says, and its position:
/// `{"rs":"rs0","server_id":"a"} (replica set or shard "rs0"): sec 17, ord 3`.
fn describe(e: &Entry) -> String {
    let text = |key: &str| {
        e.partition
            .get(key)
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
    };
    let form = match (
        text("rs"),
        text("multi_task_gen"),
        text("task_id"),
        text("task_count"),
    ) {
        (_, Some(generation), task, count) => format!(
            "task generation {generation}, task {} of {}",
            task.unwrap_or_else(|| "?".into()),
            count.unwrap_or_else(|| "?".into())
        ),
        (Some(rs), None, _, _) if e.partition.len() == 2 => format!("replica set or shard {rs:?}"),
        _ if e.partition.len() == 1 && e.partition.contains_key("server_id") => {
            "current form".into()
        }
        _ => "a form this version does not know".into(),
    };
    format!(
        "{} ({form}): {}",
        Value::Object(e.partition.clone()),
        position(e)
    )
}

/// The partition and its position, in one phrase: `{"rs":"rs0","server_id":"a"} at sec 17, ord 3`.
fn short(e: &Entry) -> String {
    format!("{} at {}", Value::Object(e.partition.clone()), position(e))
}

/// `sec S, ord O`, else what the offset has instead (and its token's cluster time if readable).
fn position(e: &Entry) -> String {
    if let Some(t) = cluster_time(&e.offset) {
        return format!("sec {}, ord {}", t.time, t.increment);
    }
    let fields = match (e.offset.get("sec"), e.offset.get("ord")) {
        (Some(sec), Some(ord)) => format!("sec {sec}, ord {ord}"),
        _ => "no sec/ord".to_owned(),
    };
    let token = match token(&e.offset) {
        Ok(token) => match token_time(&token) {
            Some(at) => format!("its resume token's clusterTime is {}", format_timestamp(at)),
            None => "its resume token's time cannot be read".to_owned(),
        },
        Err(_) => "no usable resume_token".to_owned(),
    };
    format!("{fields}; {token}")
}

/// The cluster time a resume token opens with, when `_data` is MongoDB's hex form with the
/// timestamp first (type byte 0x82, then seconds and increment, big-endian).
pub(super) fn token_time(token: &Document) -> Option<Timestamp> {
    let data = token.get_str("_data").ok()?;
    let byte = |i: usize| u8::from_str_radix(data.get(2 * i..2 * i + 2)?, 16).ok();
    if byte(0)? != 0x82 {
        return None;
    }
    let word = |from: usize| -> Option<u32> {
        (from..from + 4).try_fold(0_u32, |n, i| Some(n << 8 | u32::from(byte(i)?)))
    };
    Some(Timestamp {
        time: word(1)?,
        increment: word(5)?,
    })
}

fn lines(entries: &[&Entry]) -> String {
    entries
        .iter()
        .map(|e| format!("\n  {}", describe(e)))
        .collect()
}

/// The lines naming each partition that was not taken.
fn ignored(entries: &[&Entry]) -> Vec<String> {
    if entries.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "ignored {} other partition(s): the current form supersedes older ones, and other \
         server_ids are other connectors' (or an earlier topic.prefix's):{}",
        entries.len(),
        lines(entries)
    )]
}

/// The refusal of several candidates without `--use-oldest`.
fn ambiguous(candidates: &[&Entry], server_id: &str) -> String {
    let what = if candidates.iter().any(is_current) {
        "in the current form more than once (one partition written under two keys)".to_owned()
    } else {
        "none of them in the current form {\"server_id\": …}".to_owned()
    };
    let timed: Vec<&Entry> = candidates
        .iter()
        .copied()
        .filter(|e| time_of(e).is_some())
        .collect();
    let way = match (
        timed.len() == candidates.len(),
        timed.iter().min_by_key(|e| time_of(e)),
    ) {
        (true, Some(oldest)) => format!(
            "Pass --use-oldest to resume after the oldest, {}: nothing is lost, and the events \
             after it that the newer positions already covered are published again (duplicates)",
            short(oldest)
        ),
        _ => "--use-oldest cannot order them: a position without sec/ord cannot be placed in \
              time"
            .to_owned(),
    };
    format!(
        "{} partitions for server_id {server_id:?}, {what}:{}\nAn older Debezium wrote one \
         position per replica set or shard (or per task generation), and none of them alone \
         says up to where every event was published. {way}. Or let a current Debezium (3.x) \
         commit its own position and take its offsets again, or start at a time before all of \
         them with offsets reset NAME --to-timestamp SEC.ORD (that event is published again)",
        candidates.len(),
        lines(candidates)
    )
}

/// The oldest candidate, refused when one cannot be placed or the oldest is not one position.
fn oldest<'a>(candidates: &[&'a Entry]) -> Result<&'a Entry, String> {
    let untimed: Vec<&Entry> = candidates
        .iter()
        .copied()
        .filter(|e| time_of(e).is_none())
        .collect();
    if !untimed.is_empty() {
        return Err(format!(
            "--use-oldest cannot order the partitions: {} without a cluster time (sec and ord \
             from 0; -1 before Debezium's first streamed event), so it cannot be told whether \
             it is the oldest:{}\nLet the connector stream an event and commit, and take its \
             offsets again, or start at a time before all of them with offsets reset NAME \
             --to-timestamp SEC.ORD (that event is published again)",
            untimed.len(),
            lines(&untimed)
        ));
    }
    for e in candidates {
        refuse_incomplete(&e.offset).map_err(|reason| format!("{}: {reason}", describe(e)))?;
    }
    let oldest = candidates
        .iter()
        .copied()
        .min_by_key(|e| time_of(e))
        .expect("candidates are never empty: the server has at least one partition");
    let tied: Vec<&Entry> = candidates
        .iter()
        .copied()
        .filter(|e| {
            time_of(e) == time_of(oldest)
                && e.offset.get("resume_token") != oldest.offset.get("resume_token")
        })
        .collect();
    if let (false, Some(at)) = (tied.is_empty(), cluster_time(&oldest.offset)) {
        return Err(format!(
            "--use-oldest: the oldest position is held by several partitions with different \
             resume tokens, and a stream resumed after one of them could skip the others' \
             events at that time:{}{}\nStart at that time instead with offsets reset NAME \
             --to-timestamp {} (its events are published again)",
            lines(&[oldest]),
            lines(&tied),
            format_timestamp(at)
        ));
    }
    Ok(oldest)
}

/// The lines saying which candidate `--use-oldest` takes and what that means.
fn took_oldest(oldest: &Entry, candidates: &[&Entry]) -> Vec<String> {
    let newer: Vec<&Entry> = candidates
        .iter()
        .copied()
        .filter(|e| !std::ptr::eq(*e, oldest))
        .collect();
    let Some(newest) = newer.iter().max_by_key(|e| time_of(e)) else {
        return vec![format!(
            "--use-oldest takes the only partition, {}",
            describe(oldest)
        )];
    };
    vec![format!(
        "--use-oldest takes the oldest of {} partitions, {}\nresuming after it, the events up to \
         the newest position ({}) that the newer partitions already covered are published \
         again (duplicates); none is lost. The newer:{}",
        candidates.len(),
        describe(oldest),
        position(newest),
        lines(&newer)
    )]
}

/// The refusal when no partition is `server_id`'s.
fn none_for(entries: &[Entry], server_id: &str) -> String {
    if entries.is_empty() {
        return "the connector has no offset yet (it never committed a position: \
                snapshot.mode never/no_data and no event so far). Let it run until it has \
                streamed an event, or start the pipeline without importing (start_at, or \
                snapshot = \"initial\")"
            .to_owned();
    }
    let seen: Vec<String> = entries
        .iter()
        .map(|e| Value::Object(e.partition.clone()).to_string())
        .collect();
    format!(
        "no offset for server_id {server_id:?} (the offsets are for {}): import the offsets of \
         the connector whose topic.prefix is {server_id:?}, or pass --server-id if the \
         pipeline's topic_prefix differs on purpose",
        seen.join(", ")
    )
}
