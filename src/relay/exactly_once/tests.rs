//! Unit tests of the transactions' boundaries and bounds.

use bson::rawdoc;

use super::*;

fn transactions(max_events: usize, interval: Duration, timeout: Duration) -> Transactions {
    let settings = TransactionSettings {
        progress_topic: "__mongo_kafka_bridge.o.progress".into(),
        owner: ProgressKey {
            pipeline: "p".into(),
            topic_prefix: String::new(),
            stream_uid: "u".into(),
        },
        epoch: 1,
        sequences: Sequences {
            reset: 0,
            commit: 7,
        },
        progress_offset: Some(3),
        events_before: 0,
        max_events,
        interval,
        transaction_timeout: timeout,
    };
    Transactions::new(
        settings,
        crate::observe::metrics::Metrics::new().transactions("p"),
    )
}

fn mongo(txn_number: i64) -> TxnId {
    TxnId {
        lsid: rawdoc! { "id": 1 },
        txn_number,
    }
}

fn open(t: &mut Transactions, events: usize, since: Instant, mongo: Option<TxnId>) {
    t.open = Some(Open {
        since,
        events,
        records: events,
        txn: mongo,
    });
}

#[test]
fn a_transaction_never_ends_inside_a_mongodb_transaction() {
    let mut t = transactions(2, Duration::from_secs(60), Duration::from_secs(60));
    assert!(!t.due(), "nothing is open");
    // GIVEN a due transaction whose last event belongs to MongoDB transaction 5
    open(&mut t, 2, Instant::now(), Some(mongo(5)));
    assert!(t.due());
    // THEN it may not end before another event of 5, but before one of 6 or of none
    assert!(!t.may_end_before(Some(&mongo(5))));
    assert!(t.may_end_before(Some(&mongo(6))));
    assert!(t.may_end_before(None));
    // AND after an event outside any MongoDB transaction it may end before anything
    open(&mut t, 2, Instant::now(), None);
    assert!(t.may_end_before(Some(&mongo(5))));
}

#[test]
fn a_transaction_is_due_by_events_or_by_time() {
    let mut t = transactions(10, Duration::from_millis(200), Duration::from_secs(60));
    open(&mut t, 9, Instant::now(), None);
    assert!(!t.due(), "9 of 10 events, just opened");
    open(&mut t, 10, Instant::now(), None);
    assert!(t.due(), "10 events");
    let past = Instant::now() - Duration::from_millis(250);
    open(&mut t, 1, past, None);
    assert!(t.due(), "older than the commit interval");
}

#[test]
fn a_mongodb_transaction_open_near_the_timeout_names_itself() {
    let mut t = transactions(10, Duration::from_millis(200), Duration::from_secs(20));
    let old = Instant::now() - Duration::from_secs(16);
    // GIVEN a Kafka transaction 16 s old, 5 s margin under a 20 s timeout
    open(&mut t, 3, old, None);
    assert!(
        t.too_long("p").is_none(),
        "no MongoDB transaction holds it open"
    );
    open(&mut t, 3, old, Some(mongo(42)));
    let error = t.too_long("p").expect("too long");
    let text = error.to_string();
    assert!(text.contains("txnNumber 42"), "{text}");
    assert!(text.contains(r#"lsid {"id":1}"#), "{text}");
    assert!(text.contains("transaction.timeout.ms"), "{text}");
    assert!(matches!(
        error,
        BridgeError::TransactionTooLong {
            events: 3,
            limit_ms: 15_000,
            ..
        }
    ));
}
