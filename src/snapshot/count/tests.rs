//! The count check's decision and what it counts of the stream, with in-memory events.

use bson::{Timestamp, rawdoc};

use super::{Tally, Verdict, after, verdict};
use crate::config::CountCheck;

const NS: (&str, &str) = ("shop", "orders");

fn tally(changes: u64) -> Tally {
    Tally {
        changes,
        ..Tally::default()
    }
}

#[test]
fn a_difference_within_the_changes_seen_agrees() {
    assert_eq!(
        verdict(10, 10, &tally(0), false, CountCheck::Fail),
        Verdict::Agrees
    );
    assert_eq!(
        verdict(10, 13, &tally(3), false, CountCheck::Fail),
        Verdict::Agrees
    );
    assert_eq!(
        verdict(13, 10, &tally(3), true, CountCheck::Fail),
        Verdict::Agrees
    );
}

#[test]
fn beyond_them_it_waits_for_the_stream_then_fails_or_warns() {
    // GIVEN a copy that read 240 of 750 documents and no change during the copy
    let quiet = tally(0);
    // WHEN the stream has not passed the count yet THEN the verdict waits
    assert_eq!(
        verdict(240, 750, &quiet, false, CountCheck::Fail),
        Verdict::Wait
    );
    // WHEN it has THEN the copy fails, or warns if so configured
    let fail = Verdict::Mismatch {
        fail: true,
        difference: 510,
    };
    assert_eq!(verdict(240, 750, &quiet, true, CountCheck::Fail), fail);
    let warn = Verdict::Mismatch {
        fail: false,
        difference: 510,
    };
    assert_eq!(verdict(240, 750, &quiet, true, CountCheck::Warn), warn);
    // A resumed copy's earlier changes are unknown: it only warns.
    let resumed = Tally {
        resumed: true,
        ..tally(0)
    };
    assert_eq!(verdict(240, 750, &resumed, true, CountCheck::Fail), warn);
}

#[test]
fn a_dropped_or_renamed_collection_is_not_checked() {
    let void = Tally {
        void: true,
        ..tally(0)
    };
    assert_eq!(
        verdict(5, 0, &void, true, CountCheck::Fail),
        Verdict::Skipped
    );
}

#[test]
fn the_tally_counts_the_namespaces_document_changes_only() {
    let mut t = Tally::default();
    let ns = rawdoc! { "db": "shop", "coll": "orders" };
    for op in ["insert", "update", "replace", "delete"] {
        t.saw(&rawdoc! { "operationType": op, "ns": ns.clone() }, NS);
    }
    let other = rawdoc! { "db": "shop", "coll": "other" };
    t.saw(
        &rawdoc! { "operationType": "insert", "ns": other.clone() },
        NS,
    );
    t.saw(
        &rawdoc! { "operationType": "createIndexes", "ns": ns.clone() },
        NS,
    );
    assert_eq!(t, tally(4));
    t.saw(
        &rawdoc! { "operationType": "drop", "ns": other.clone() },
        NS,
    );
    assert!(!t.void);
    t.saw(
        &rawdoc! { "operationType": "rename", "ns": other, "to": ns.clone() },
        NS,
    );
    assert!(t.void, "renamed onto the namespace");
    let mut t = Tally::default();
    t.saw(
        &rawdoc! { "operationType": "dropDatabase", "ns": { "db": "shop" } },
        NS,
    );
    assert!(t.void);
}

#[test]
fn an_event_passes_the_count_only_after_its_time() {
    let at = Timestamp {
        time: 100,
        increment: 5,
    };
    let ts = |time, increment| Timestamp { time, increment };
    assert!(!after(ts(100, 5), at));
    assert!(!after(ts(99, 9), at));
    assert!(after(ts(100, 6), at));
    assert!(after(ts(101, 0), at));
}
