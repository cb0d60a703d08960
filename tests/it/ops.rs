//! Operations against the live servers: the `offsets` CLI (list, show, reset with lease
//! refusal and fencing, delete), the `check` preflight, the history headroom series.

use std::path::Path;
use std::time::Duration;

use bson::doc;
use mongodb::Client;

use crate::common::bridge::{bridge_cli, start_bridge};
use crate::common::config::{config_file, config_toml, with_history};
use crate::common::mongo::{mongo, offsets_doc, wait_offsets};
use crate::common::observe::get;
use crate::common::{eventually, unique};

/// `bridge_cli`'s exit code with stdout and stderr as one text.
fn cli(args: &[&str], config: &std::path::Path) -> (Option<i32>, String) {
    let (code, stdout, stderr) = bridge_cli(args, config);
    (code, format!("{stdout}{stderr}"))
}

/// Waits until the pipeline `orders` committed its initial position (its stream is open).
async fn opened(client: &mongodb::Client, db: &str) {
    wait_offsets(client, db, "orders", Duration::from_secs(20), |d| {
        d.contains_key("resumeToken")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn offsets_reset_refuses_a_live_owner_fences_it_with_force_and_the_bridge_restarts_there() {
    // GIVEN a running bridge that committed a position
    let db = unique("offs");
    let text = config_toml("orders", &db, Some("orders"), "");
    let file = config_file(&text);
    let client = mongo().await;
    let coll = client.database(&db).collection::<bson::Document>("orders");
    let bridge = start_bridge(&text).await;
    opened(&client, &db).await;
    coll.insert_one(doc! { "_id": 1 }).await.unwrap();
    let before = wait_offsets(&client, &db, "orders", Duration::from_secs(20), |d| {
        d.get_i64("eventsCommitted") == Ok(1)
    })
    .await;
    let epoch = before.get_i64("epoch").unwrap();

    list_and_show(file.path());
    refuse_then_force(&client, &db, file.path(), epoch).await;

    // THEN the running instance is fenced instead of overwriting the reset, stands by until
    // the stored lease lapses (the reset ended it), then takes the pipeline again at the
    // stored time
    let fenced =
        r#"mongo_kafka_bridge_errors_total{class="fatal",pipeline="orders",stage="fenced"} 1"#;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !bridge.metrics().render().contains(fenced) {
        assert!(
            std::time::Instant::now() < deadline,
            "the bridge was not fenced"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_offsets(&client, &db, "orders", Duration::from_secs(30), |d| {
        d.get_i64("epoch") == Ok(epoch + 2)
    })
    .await;
    coll.insert_one(doc! { "_id": 2 }).await.unwrap();
    let resumed = wait_offsets(&client, &db, "orders", Duration::from_secs(20), |d| {
        d.contains_key("resumeToken") && d.get_i64("eventsCommitted") == Ok(2)
    })
    .await;
    assert!(!resumed.contains_key("startAtOperationTime"), "{resumed}");
    bridge.shutdown();
    bridge.wait().await.unwrap();

    move_then_delete(&client, &db, file.path()).await;
}

/// `offsets list` and `offsets show` name the pipeline, its lease and its position; an
/// unknown pipeline is an error.
fn list_and_show(config: &Path) {
    // WHEN listing and showing
    let (code, out) = cli(&["offsets", "list"], config);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("orders") && out.contains("live until") && out.contains("streaming"),
        "{out}"
    );
    let (code, out) = cli(&["offsets", "show", "orders"], config);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("resumeToken: {_data:") && out.contains("eventsCommitted: 1"),
        "{out}"
    );
    let (code, out) = cli(&["offsets", "show", "nope"], config);
    assert_eq!(code, Some(1), "{out}");
}

/// A reset is refused while the lease is live and changes nothing; forced, the position
/// becomes a start time without a token and the epoch (`epoch` before) moves on.
async fn refuse_then_force(client: &Client, db: &str, config: &Path, epoch: i64) {
    // THEN a reset is refused while the lease is live, and changes nothing
    let (code, out) = cli(&["offsets", "reset", "orders", "--to-now"], config);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("refused: instance") && out.contains("--force"),
        "{out}"
    );
    let unchanged = offsets_doc(client, db, "orders").await.unwrap();
    assert_eq!(unchanged.get_i64("epoch"), Ok(epoch));

    // WHEN forced: the position becomes a start time without a token, the epoch moves on
    let (code, out) = cli(
        &["offsets", "reset", "orders", "--to-now", "--force"],
        config,
    );
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("before:") && out.contains("after:"), "{out}");
    let reset = offsets_doc(client, db, "orders").await.unwrap();
    assert!(!reset.contains_key("resumeToken"), "{reset}");
    reset.get_timestamp("startAtOperationTime").unwrap();
    // The reset ends the lease: the fenced bridge, standing by, may already have taken the
    // pipeline again (one more epoch, its owner, the reset's start time kept) by this read.
    let owner = reset.get_str("owner").unwrap_or_default();
    let retaken = reset.get_i64("epoch") == Ok(epoch + 2) && !owner.starts_with("offsets reset");
    assert!(
        reset.get_i64("epoch") == Ok(epoch + 1) || retaken,
        "the forced reset moves the epoch on by one (two once the bridge took it again): {reset}"
    );
}

/// With the bridge stopped: moved to a given time, then deleted (forced: the lease outlives a
/// clean stop); only the epoch is left, one higher.
async fn move_then_delete(client: &Client, db: &str, config: &Path) {
    // WHEN moved to a time before the oldest oplog entry, THEN that is refused: nothing moves
    let before = offsets_doc(client, db, "orders").await.unwrap();
    let reset_to = |at: String| {
        let args = [
            "offsets",
            "reset",
            "orders",
            "--to-timestamp",
            &at,
            "--force",
        ];
        cli(&args, config)
    };
    let (code, out) = reset_to("1764403200.3".to_owned());
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("before the oldest oplog entry"), "{out}");
    let unchanged = offsets_doc(client, db, "orders").await.unwrap();
    assert_eq!(unchanged.get("epoch"), before.get("epoch"));
    // WHEN moved to a given time within the oplog, then deleted (forced: the lease outlives a
    // clean stop)
    let now = u32::try_from(bson::DateTime::now().timestamp_millis() / 1000).unwrap();
    let (code, out) = reset_to(format!("{now}.3"));
    assert_eq!(code, Some(0), "{out}");
    let moved = offsets_doc(client, db, "orders").await.unwrap();
    let ts = moved.get_timestamp("startAtOperationTime").unwrap();
    assert_eq!((ts.time, ts.increment), (now, 3));
    let (code, out) = cli(
        &["offsets", "reset", "orders", "--delete", "--force"],
        config,
    );
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("(no position: the next start follows `start_at`)"),
        "{out}"
    );
    // THEN only the epoch is left, one higher (epochs are never reused after a delete)
    let forgotten = offsets_doc(client, db, "orders").await.unwrap();
    assert_eq!(
        forgotten.get_i64("epoch").unwrap(),
        moved.get_i64("epoch").unwrap() + 1
    );
    for field in [
        "resumeToken",
        "startAtOperationTime",
        "clusterTime",
        "fingerprint",
    ] {
        assert!(!forgotten.contains_key(field), "{field}: {forgotten}");
    }
    let (code, out) = cli(&["offsets", "reset", "orders"], config);
    assert_eq!(code, Some(2), "a reset needs a target: {out}");
    // A mistyped name is refused, and no stray document appears for it
    let (code, out) = cli(&["offsets", "reset", "ordres", "--to-now"], config);
    assert_ne!(code, Some(0), "{out}");
    assert!(out.contains("is not in the configuration"), "{out}");
    assert!(offsets_doc(client, db, "ordres").await.is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_preflight_checks_privileges_oplog_offsets_images_and_sizes() {
    // GIVEN a collection with a 20 kB document, required pre-images that are not enabled, and
    // a pipeline whose offsets document is invalid
    let db = unique("pre");
    let client = mongo().await;
    let coll = client.database(&db).collection::<bson::Document>("orders");
    coll.insert_one(doc! { "_id": 1, "blob": "x".repeat(20_000) })
        .await
        .unwrap();
    let extra = "full_document_before_change = \"required\"\n";
    let mut text = config_toml("orders", &db, Some("orders"), extra);
    text.push_str(&format!(
        "\n[[pipelines]]\nname = \"broken\"\ndatabase = \"{db}\"\ncollection = \"other\"\n"
    ));
    client
        .database(&format!("{db}_offsets"))
        .collection::<bson::Document>("offsets")
        .insert_one(doc! { "_id": "broken", "epoch": "not a number" })
        .await
        .unwrap();
    let file = config_file(&text);
    // WHEN check runs with a one-week minimum oplog window
    let (code, out) = cli(&["check", "--min-oplog-window-hours", "168"], file.path());
    // THEN it exits 1 with a ✘ and a remedy for each problem, and ✔ for the rest
    assert_eq!(code, Some(1), "{out}");
    let has = |prefix: &str, needle: &str| {
        out.lines()
            .any(|l| l.starts_with(prefix) && l.contains(needle))
    };
    assert!(has("✔", "writable with write concern majority"), "{out}");
    assert!(has("✘", "is below the minimum 168h00m. Remedy"), "{out}");
    assert!(
        has(
            "✘",
            "images are `required` (full_document_before_change) but not enabled"
        ),
        "{out}"
    );
    assert!(
        has("✘", "pipeline broken: offsets document is invalid"),
        "{out}"
    );
    assert!(has("✔", "pipeline orders: no offsets yet"), "{out}");
    assert!(has("✔", "largest document in"), "{out}");
    assert!(
        has("✔", "privileges") || has("✔", "user may changeStream"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn history_headroom_and_checkpoint_lag_are_exported_for_a_running_pipeline() {
    // GIVEN a running bridge that committed its first position
    let db = unique("head");
    let text = with_history(&config_toml("orders", &db, Some("orders"), ""));
    let client = mongo().await;
    let bridge = start_bridge(&text).await;
    let coll = client.database(&db).collection::<bson::Document>("orders");
    opened(&client, &db).await;
    coll.insert_one(doc! { "_id": 1 }).await.unwrap();
    let addr = bridge.metrics_addr();
    // THEN /metrics carries a positive headroom, a small lag, the e2e histogram, build info
    let last = std::sync::Mutex::new(String::new());
    let body = tokio::time::timeout(
        Duration::from_secs(20),
        eventually(Duration::from_secs(30), "headroom series", || async {
            let (_, body) = get(addr, "/metrics").await;
            *last.lock().unwrap() = body.clone();
            let e2e = "mongo_kafka_bridge_end_to_end_latency_seconds_count{pipeline=\"orders\"} 1";
            let headroom = "mongo_kafka_bridge_history_headroom_seconds{pipeline=\"orders\"}";
            (body.contains(headroom) && body.contains(e2e)).then_some(body)
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("no headroom series in:\n{}", last.lock().unwrap()));
    let value = |name: &str| -> f64 {
        body.lines()
            .find(|l| l.starts_with(&format!("{name}{{pipeline=\"orders\"}}")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing:\n{body}"))
    };
    assert!(
        value("mongo_kafka_bridge_history_headroom_seconds") >= 0.0,
        "{body}"
    );
    assert!(
        value("mongo_kafka_bridge_checkpoint_lag_seconds") < 60.0,
        "{body}"
    );
    assert!(
        body.contains("mongo_kafka_bridge_history_window_seconds "),
        "{body}"
    );
    assert!(body.contains("mongo_kafka_bridge_build_info{"), "{body}");
    assert!(body.contains("topic=\""), "per-topic series: {body}");
    bridge.shutdown();
    bridge.wait().await.unwrap();
}
