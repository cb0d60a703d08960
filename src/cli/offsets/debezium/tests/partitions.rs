//! Which partition `offsets import debezium` takes (`partitions.rs`), on offsets in the shapes
//! Debezium's MongoDB connector writes: the current `{"server_id"}` beside an older version's
//! per replica set or shard ones and a multi-task generation's, several of the older ones alone
//! (refused unless `--use-oldest`, which takes the oldest), and what `--use-oldest` refuses.

use base64::Engine as _;
use bson::{Timestamp, doc};
use serde_json::{Value, json};

use super::super::offset::{Entry, entries_from_rest};
use super::super::partitions::{Choice, choose, token_time};

/// A resume token `{_data: data}` as Debezium stores it (base64 of the BSON).
fn token(data: &str) -> String {
    let mut bytes = Vec::new();
    doc! { "_data": data }.to_writer(&mut bytes).unwrap();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// An offset at `sec`, `ord` whose token's `_data` is `data`.
fn at(sec: i64, ord: i64, data: &str) -> Value {
    json!({ "sec": sec, "ord": ord, "resume_token": token(data) })
}

fn entries(items: &[(Value, Value)]) -> Vec<Entry> {
    let offsets: Vec<Value> = items
        .iter()
        .map(|(partition, offset)| json!({ "partition": partition, "offset": offset }))
        .collect();
    entries_from_rest(&json!({ "offsets": offsets }).to_string()).expect("parses")
}

fn shard(name: &str) -> Value {
    json!({ "server_id": "dbz", "rs": name })
}

fn chosen(items: &[(Value, Value)], use_oldest: bool) -> Choice {
    choose(&entries(items), "dbz", use_oldest).expect("a position is chosen")
}

fn refused(items: &[(Value, Value)], use_oldest: bool) -> String {
    choose(&entries(items), "dbz", use_oldest).expect_err("refused")
}

#[test]
fn the_current_partition_is_taken_and_every_other_one_is_printed_with_its_position() {
    let generation =
        json!({ "server_id": "dbz", "task_id": "0", "multi_task_gen": "1", "task_count": "2" });
    let items = [
        (shard("rs0"), at(10, 2, "8200")),
        (json!({ "server_id": "dbz" }), at(20, 1, "current")),
        (
            generation,
            json!({ "sec": -1, "ord": -1, "resume_token": token("82000000650000000C") }),
        ),
        (json!({ "server_id": "earlier" }), at(5, 1, "other")),
    ];
    for use_oldest in [false, true] {
        let Choice { imported, notes } = chosen(&items, use_oldest);
        assert_eq!(imported.token.get_str("_data"), Ok("current"));
        assert_eq!(
            imported.cluster_time,
            Some(Timestamp {
                time: 20,
                increment: 1
            })
        );
        let partition = imported.from.get_document("partition").expect("recorded");
        assert_eq!(partition, &doc! { "server_id": "dbz" });
        let text = notes.join("\n");
        assert!(text.starts_with("ignored 3 other partition(s)"), "{text}");
        assert!(text.contains("\"rs\":\"rs0\""), "{text}");
        assert!(
            text.contains("(replica set or shard \"rs0\"): sec 10, ord 2"),
            "{text}"
        );
        assert!(
            text.contains("(task generation 1, task 0 of 2): sec -1, ord -1; its resume token's clusterTime is 101.12"),
            "{text}"
        );
        assert!(text.contains("\"server_id\":\"earlier\""), "{text}");
        assert!(
            !text.contains("{\"server_id\":\"dbz\"} ("),
            "the taken one is not listed: {text}"
        );
        assert_eq!(
            use_oldest,
            text.contains("--use-oldest: not needed"),
            "{text}"
        );
    }
}

#[test]
fn several_partitions_without_a_single_current_one_are_refused_naming_each() {
    let reason = refused(
        &[
            (shard("shard1"), at(12, 1, "b")),
            (shard("shard0"), at(12, 0, "a")),
        ],
        false,
    );
    assert!(
        reason.starts_with("2 partitions for server_id \"dbz\", none of them in the current form"),
        "{reason}"
    );
    assert!(
        reason.contains("(replica set or shard \"shard1\"): sec 12, ord 1"),
        "{reason}"
    );
    assert!(
        reason.contains("(replica set or shard \"shard0\"): sec 12, ord 0"),
        "{reason}"
    );
    assert!(
        reason.contains("Pass --use-oldest to resume after the oldest, {\"server_id\":\"dbz\",\"rs\":\"shard0\"} at sec 12, ord 0")
            || reason.contains("Pass --use-oldest to resume after the oldest, {\"rs\":\"shard0\",\"server_id\":\"dbz\"} at sec 12, ord 0"),
        "{reason}"
    );
    assert!(reason.contains("published again (duplicates)"), "{reason}");
    // One partition written under two keys (a JSON object's keys in another order): two current
    // entries.
    let current = json!({ "server_id": "dbz" });
    let twice = refused(
        &[(current.clone(), at(12, 1, "b")), (current, at(9, 1, "a"))],
        false,
    );
    assert!(
        twice.contains("in the current form more than once"),
        "{twice}"
    );
    // Without a time, the oldest cannot be told: --use-oldest is not offered.
    let untimed = json!({ "sec": -1, "ord": -1, "resume_token": token("4500") });
    let reason = refused(&[(shard("a"), at(1, 1, "a")), (shard("b"), untimed)], false);
    assert!(
        reason.contains("sec -1, ord -1; its resume token's time cannot be read"),
        "{reason}"
    );
    assert!(
        reason.contains("--use-oldest cannot order them"),
        "{reason}"
    );
}

#[test]
fn use_oldest_takes_the_oldest_position_never_the_newest() {
    let items = [
        (shard("shard2"), at(30, 1, "newest")),
        (shard("shard0"), at(12, 5, "later")),
        (shard("shard1"), at(12, 4, "oldest")),
        (json!({ "server_id": "other" }), at(1, 1, "other")),
    ];
    let Choice { imported, notes } = chosen(&items, true);
    assert_eq!(imported.token.get_str("_data"), Ok("oldest"));
    assert_eq!(
        imported.cluster_time,
        Some(Timestamp {
            time: 12,
            increment: 4
        })
    );
    let partition = imported.from.get_document("partition").expect("recorded");
    assert_eq!(partition.get_str("rs"), Ok("shard1"));
    let text = notes.join("\n");
    assert!(
        text.starts_with("--use-oldest takes the oldest of 3 partitions, "),
        "{text}"
    );
    assert!(
        text.contains("(replica set or shard \"shard1\"): sec 12, ord 4\n"),
        "{text}"
    );
    assert!(
        text.contains("up to the newest position (sec 30, ord 1)"),
        "{text}"
    );
    assert!(
        text.contains("published again (duplicates); none is lost"),
        "{text}"
    );
    assert!(text.contains("ignored 1 other partition(s)"), "{text}");
    // The only one.
    let Choice { notes, .. } = chosen(&[(shard("rs0"), at(3, 1, "only"))], true);
    assert!(
        notes[0].starts_with("--use-oldest takes the only partition"),
        "{notes:?}"
    );
    // The same position twice (two task generations that wrote one offset): one position.
    let same = chosen(
        &[(shard("a"), at(7, 1, "t")), (shard("b"), at(7, 1, "t"))],
        true,
    );
    assert_eq!(same.imported.token.get_str("_data"), Ok("t"));
}

#[test]
fn use_oldest_refuses_what_it_cannot_order_or_would_leave_a_gap() {
    let untimed = json!({ "resume_token": token("8200000011000000020000") });
    let reason = refused(&[(shard("a"), at(20, 1, "a")), (shard("b"), untimed)], true);
    assert!(reason.contains("1 without a cluster time"), "{reason}");
    assert!(reason.contains("\"rs\":\"b\""), "{reason}");
    assert!(
        reason.contains("no sec/ord; its resume token's clusterTime is 17.2"),
        "{reason}"
    );
    assert!(
        !reason.contains("\"rs\":\"a\""),
        "only the one without a time: {reason}"
    );
    let tie = refused(
        &[(shard("a"), at(20, 1, "a")), (shard("b"), at(20, 1, "b"))],
        true,
    );
    assert!(
        tie.contains("several partitions with different resume tokens"),
        "{tie}"
    );
    assert!(tie.contains("--to-timestamp 20.1 (its events"), "{tie}");
    let copying = json!({ "sec": 30, "ord": 1, "initsync": true, "resume_token": token("c") });
    let reason = refused(&[(shard("a"), at(20, 1, "a")), (shard("b"), copying)], true);
    assert!(reason.contains("\"rs\":\"b\""), "{reason}");
    assert!(reason.contains("initial snapshot was running"), "{reason}");
    let no_token = json!({ "sec": 10, "ord": 1, "h": 0 });
    let reason = refused(
        &[(shard("a"), at(20, 1, "a")), (shard("b"), no_token)],
        true,
    );
    assert!(
        reason.contains("no resume_token"),
        "the oldest has none: {reason}"
    );
    assert!(reason.contains("--to-timestamp 10.1"), "{reason}");
}

#[test]
fn a_token_time_is_read_only_from_mongodbs_hex_form() {
    let token = |data: &str| doc! { "_data": data };
    let at = |time, increment| Some(Timestamp { time, increment });
    assert_eq!(
        token_time(&token("826A1B2C3D000000082B022C0100")),
        at(0x6A1B_2C3D, 8)
    );
    assert_eq!(token_time(&token("8200000011000000020000")), at(17, 2));
    // SecantusDB's tokens (the one Debezium 3.6.3 stored in `tests.rs`), short or not hex.
    assert_eq!(
        token_time(&token("4500000010730021000000117400080000")),
        None
    );
    assert_eq!(token_time(&token("82000000")), None);
    assert_eq!(token_time(&token("82zz000011000000020000")), None);
    assert_eq!(token_time(&doc! { "_data": 1 }), None);
}
