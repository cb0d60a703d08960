use std::sync::Arc;

use bson::Timestamp;

use super::*;

#[test]
fn every_exported_name_is_registered_and_follows_the_naming_rules() {
    // GIVEN a registry with one pipeline's handles touched
    let metrics = Metrics::new();
    let p = metrics.pipeline("orders");
    let topic: Arc<str> = Arc::from("shop.orders");
    let t = p.topic(&topic);
    t.enqueued.inc();
    t.delivered("insert", 1);
    t.delivery_error("MessageTimedOut");
    t.delivery_duration.observe(0.01);
    p.event_read("insert");
    p.end_to_end(Some(chrono::Utc::now().timestamp_millis() - 1500), None);
    p.committed(
        Some(Timestamp {
            time: 100,
            increment: 1,
        }),
        Timestamp {
            time: 100,
            increment: 1,
        },
    );
    p.error("source", "transient");
    p.restart("source");
    p.commit("ok");
    p.commit_duration.observe(0.002);
    p.rdkafka_gauges();
    p.ambiguous("bson");
    p.owned.set(1);
    p.refused.set(0);
    p.cluster_unchecked.set(0);
    let copy = p.snapshot("shop.orders");
    copy.documents.inc_by(3);
    copy.remaining.set(7);
    copy.running.set(1);
    let tx = p.transactions();
    tx.committed.inc();
    tx.duration.observe(0.2);
    tx.commit.observe(0.01);
    tx.records.observe(12.0);
    let beats = p.heartbeats();
    beats.delivered(1_000_000);
    beats.interval.set(10.0);
    p.routing_fallbacks().0.inc();
    metrics.set_history(Some((40.0, 200.0)));
    // WHEN rendered
    let text = metrics.render();
    // THEN every name in ALL appears, with the prefix, and counters end in _total
    for name in ALL {
        assert!(name.starts_with("mongo_kafka_bridge_"), "{name}");
        assert!(
            text.contains(&format!("# TYPE {name} ")),
            "{name} missing:\n{text}"
        );
        let counter = text.contains(&format!("# TYPE {name} counter"));
        assert_eq!(counter, name.ends_with("_total"), "{name}");
    }
    assert!(text.contains("mongo_kafka_bridge_history_headroom_seconds{pipeline=\"orders\"} 60"));
    assert!(text.contains("mongo_kafka_bridge_history_window_seconds 160"));
    let e2e = read::sum(
        &metrics.gather(),
        END_TO_END_LATENCY,
        &[("pipeline", "orders")],
    );
    assert_eq!(e2e, Some(1.0));
}

#[test]
fn an_unknown_history_is_an_absent_series() {
    let metrics = Metrics::new();
    let p = metrics.pipeline("a");
    p.committed(
        None,
        Timestamp {
            time: 500,
            increment: 0,
        },
    );
    metrics.set_history(Some((100.0, 600.0)));
    assert!(metrics.render().contains(HISTORY_HEADROOM));
    metrics.set_history(None);
    let text = metrics.render();
    assert!(!text.contains(&format!("{HISTORY_HEADROOM}{{")), "{text}");
    assert!(!text.contains(&format!("{HISTORY_WINDOW} ")), "{text}");
}

#[test]
fn checkpoint_lag_is_computed_at_scrape_time() {
    let metrics = Metrics::new();
    let p = metrics.pipeline("a");
    let now = chrono::Utc::now().timestamp() as u32;
    p.committed(
        None,
        Timestamp {
            time: now - 30,
            increment: 0,
        },
    );
    metrics.render();
    let lag = read::sum(&metrics.gather(), CHECKPOINT_LAG, &[("pipeline", "a")]).unwrap();
    assert!((29.0..=40.0).contains(&lag), "{lag}");
}

#[test]
fn rdkafka_statistics_set_the_gauges_and_retries_only_increase() {
    use ::rdkafka::statistics::{Broker, Statistics};
    let metrics = Metrics::new();
    let context = crate::kafka::context::KafkaContext::new(metrics.pipeline("a").rdkafka_gauges());
    let mut stats = Statistics {
        msg_cnt: 7,
        msg_size: 700,
        ..Default::default()
    };
    let broker = Broker {
        outbuf_msg_cnt: 3,
        waitresp_msg_cnt: 2,
        txretries: 5,
        ..Default::default()
    };
    stats.brokers.insert("b1".into(), broker);
    context.apply(&stats);
    stats.brokers.get_mut("b1").unwrap().txretries = 8;
    context.apply(&stats);
    // A new producer (restart) starts its totals at 0 again.
    let fresh = crate::kafka::context::KafkaContext::new(metrics.pipeline("a").rdkafka_gauges());
    stats.brokers.get_mut("b1").unwrap().txretries = 1;
    fresh.apply(&stats);
    let families = metrics.gather();
    let get = |name| read::sum(&families, name, &[("pipeline", "a")]);
    assert_eq!(get(RDKAFKA_QUEUE_MESSAGES), Some(7.0));
    assert_eq!(get(RDKAFKA_QUEUE_BYTES), Some(700.0));
    assert_eq!(get(RDKAFKA_OUTBUF_MESSAGES), Some(3.0));
    assert_eq!(get(RDKAFKA_WAITRESP_MESSAGES), Some(2.0));
    assert_eq!(get(RDKAFKA_RETRIES), Some(9.0));
}
