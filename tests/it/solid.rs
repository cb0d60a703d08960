//! Start-up and housekeeping against the live servers: configuration errors found before the
//! first take take nothing, the offsets collection never streams itself, a newer offsets
//! document is refused, topics are created when asked, a replica-set name mismatch is named, a
//! restart logs where it resumes, and the HTTP endpoint answers "draining" until the drain ends.

use std::time::{Duration, Instant};

use bson::{Document, doc};
use mongo_kafka_bridge::BridgeError;

use crate::common::bridge::{Killed, bridge_cli, signal, spawn_binary, start_bridge};
use crate::common::collect::{collect, collect_from};
use crate::common::config::{config_file, config_toml};
use crate::common::kafka::create_topic;
use crate::common::mongo::{mongo, offsets_doc, wait_offsets};
use crate::common::observe::get;
use crate::common::servers::{kafka_bootstrap, mongo_uri};
use crate::common::{eventually, unique};

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread")]
async fn a_librdkafka_property_typo_is_a_config_error_in_check_and_run_and_takes_nothing() {
    // GIVEN a misspelled property (refused when set), and one that contradicts idempotence
    // (refused only when the producer is built)
    for (property, named) in [
        ("\"compresion.type\" = \"lz4\"", "compresion.type"),
        ("\"retries\" = 0", "producer configuration"),
    ] {
        let db = unique("typo");
        let text = config_toml("typo", &db, Some("t"), "").replace(
            "[kafka.properties]\n",
            &format!("[kafka.properties]\n{property}\n"),
        );
        let file = config_file(&text);
        for command in ["check", "run"] {
            // WHEN check or run starts with it
            let (code, _stdout, stderr) = bridge_cli(&[command], file.path());
            // THEN it exits 2 naming the problem
            assert_eq!(code, Some(2), "{command} {property}: {stderr}");
            assert!(
                stderr.contains("kafka.properties") && stderr.contains(named),
                "{command} {property}: {stderr}"
            );
        }
        // AND nothing was taken
        assert_eq!(
            offsets_doc(&mongo().await, &db, "typo").await,
            None,
            "{property}"
        );
    }
}

#[test]
fn a_key_typo_names_the_file_and_the_key_it_meant() {
    // GIVEN a file whose [bridge] misspells commit_interval_ms
    let text = config_toml("typo", &unique("typo"), Some("t"), "")
        .replace("commit_interval_ms = ", "comit_interval_ms = ");
    let file = config_file(&text);
    // WHEN check starts with it
    let (code, _stdout, stderr) = bridge_cli(&["check"], file.path());
    // THEN it exits 2 naming the key, the file and the key it meant
    assert_eq!(code, Some(2), "{stderr}");
    let path = file.path().display().to_string();
    assert!(
        stderr.contains("bridge.comit_interval_ms")
            && stderr.contains(&path)
            && stderr.contains("did you mean `commit_interval_ms`?"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_on_the_offsets_database_never_publishes_the_bridges_own_writes() {
    // GIVEN a database-scope pipeline on the database that also holds the offsets
    let db = unique("own");
    let text = config_toml("own", &db, None, "")
        .replace(
            &format!("offsets_database = \"{db}_offsets\""),
            &format!("offsets_database = \"{db}\""),
        )
        .replace("[kafka]\n", "[kafka]\ntopic_prefix = \"dep.\"\n");
    let data = format!("dep.{db}.orders");
    create_topic(&data, 1).await;
    let client = mongo().await;
    let offsets = client.database(&db).collection::<Document>("offsets");
    let bridge = start_bridge(&text).await;
    crate::common::eventually(WAIT, "the first commit", || async {
        let d = offsets.find_one(doc! { "_id": "own" }).await.unwrap();
        d.filter(|d| d.contains_key("resumeToken"))
    })
    .await;
    // WHEN three documents are written and many commits and lease renewals follow
    let orders = client.database(&db).collection::<Document>("orders");
    for id in 0..3 {
        orders.insert_one(doc! { "_id": id }).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    // THEN the data topic has exactly the three inserts, and no offsets write was published
    let records = collect_from(&kafka_bootstrap(), &data, 3, Duration::from_secs(1), WAIT).await;
    let ops: Vec<_> = records
        .iter()
        .map(|r| r.header("mongo.operation_type"))
        .collect();
    assert_eq!(ops, vec![Some("insert"); 3]);
    let own = collect(&format!("dep.{db}.offsets"), 1, Duration::from_secs(3)).await;
    assert_eq!(own, Vec::new());
    bridge.shutdown();
    bridge.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_offsets_document_of_a_newer_version_is_refused_before_anything_is_written() {
    // GIVEN an offsets document written by a newer bridge (schemaVersion 99)
    let db = unique("newer");
    let client = mongo().await;
    let stored = doc! { "_id": "newer", "epoch": 5_i64, "schemaVersion": 99_i64 };
    client
        .database(&format!("{db}_offsets"))
        .collection::<Document>("offsets")
        .insert_one(stored.clone())
        .await
        .unwrap();
    // WHEN this version starts the pipeline
    let bridge = start_bridge(&config_toml("newer", &db, Some("t"), "")).await;
    let result = tokio::time::timeout(WAIT, bridge.wait()).await.unwrap();
    // THEN it stops with an error naming the version, and the document is untouched
    match &result {
        Err(BridgeError::OffsetsDocument { reason, .. }) => {
            assert!(reason.contains("schemaVersion 99"), "{reason}");
        }
        other => panic!("expected OffsetsDocument, got {other:?}"),
    }
    assert_eq!(offsets_doc(&client, &db, "newer").await, Some(stored));
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_topics_are_created_with_the_configured_partitions_and_cleanup_policy() {
    // GIVEN a database-scope pipeline with [kafka.topic_creation] and no topic yet
    let db = unique("mk");
    let text = config_toml("mk", &db, None, "").replace(
        "[bridge]\n",
        "[kafka.topic_creation]\nenabled = true\npartitions = 3\ncleanup_policy = \"compact\"\n\
         [bridge]\n",
    );
    let client = mongo().await;
    let bridge = start_bridge(&text).await;
    wait_offsets(&client, &db, "mk", WAIT, |d| d.contains_key("resumeToken")).await;
    // WHEN two collections get their first document
    for coll in ["a", "b"] {
        let c = client.database(&db).collection::<Document>(coll);
        c.insert_one(doc! { "_id": 1 }).await.unwrap();
    }
    // THEN each collection's topic exists with 3 partitions, compacted, and holds its record
    let admin: rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext> =
        rdkafka::ClientConfig::new()
            .set("bootstrap.servers", kafka_bootstrap())
            .create()
            .unwrap();
    for coll in ["a", "b"] {
        let topic = format!("{db}.{coll}");
        let records = collect(&topic, 1, WAIT).await;
        assert_eq!(records.len(), 1, "{topic}");
        let metadata = admin
            .inner()
            .fetch_metadata(Some(&topic), Duration::from_secs(5))
            .unwrap();
        assert_eq!(metadata.topics()[0].partitions().len(), 3, "{topic}");
        let resource = rdkafka::admin::ResourceSpecifier::Topic(&topic);
        let options = rdkafka::admin::AdminOptions::new();
        let described = admin.describe_configs([&resource], &options).await.unwrap();
        let config = described.into_iter().next().unwrap().unwrap();
        let policy = config.get("cleanup.policy").and_then(|e| e.value.clone());
        assert_eq!(policy.as_deref(), Some("compact"), "{topic}");
    }
    bridge.shutdown();
    bridge.wait().await.unwrap();
}

/// `MONGODB_URI`'s hosts with `replicaSet=not-the-set` instead of its options.
fn mismatched_uri() -> String {
    let uri = mongo_uri();
    let hosts = uri
        .trim_start_matches("mongodb://")
        .split(['/', '?'])
        .next()
        .unwrap()
        .to_owned();
    format!("mongodb://{hosts}/?replicaSet=not-the-set&serverSelectionTimeoutMS=2000")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_set_name_that_does_not_match_is_named_by_check_and_stops_run() {
    // GIVEN a URI whose replicaSet is not the servers' set name
    let db = unique("rsn");
    let text = config_toml("rsn", &db, Some("t"), "")
        .replace(&mongo_uri(), &mismatched_uri())
        .replace(
            "[bridge]\n",
            "[bridge]\npersistent_error_attempts = 2\nmax_restart_backoff_ms = 500\n",
        );
    let file = config_file(&text);
    let set = mongo()
        .await
        .database("admin")
        .run_command(doc! { "hello": 1 })
        .await
        .unwrap()
        .get_str("setName")
        .unwrap()
        .to_owned();
    let named = "names replica set \"not-the-set\", but the server at".to_owned();
    let remedy = format!("belongs to replica set \"{set}\"");
    // WHEN check runs THEN it fails naming both names and the option to change
    let (code, stdout, _stderr) = bridge_cli(&["check"], file.path());
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        stdout.contains(&named) && stdout.contains(&remedy),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("set replicaSet={set}")),
        "{stdout}"
    );
    // WHEN run starts THEN it stops after the configured attempts with the same message
    let started = Instant::now();
    let (code, _stdout, stderr) = bridge_cli(&["run", "--no-status"], file.path());
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&named) && stderr.contains(&remedy),
        "{stderr}"
    );
    assert!(started.elapsed() < WAIT, "{:?}", started.elapsed());
    // WHEN run starts with the driver's default server selection (30 s) THEN a probe of the
    // hosts names the mismatch while the driver still selects (a line only the probe writes)
    let default_selection = text.replace("&serverSelectionTimeoutMS=2000", "");
    assert_ne!(default_selection, text);
    let file = config_file(&default_selection);
    let mut run = Killed(spawn_binary(file.path()));
    let log = file.path().with_extension("log");
    eventually(WAIT, "the probe names the mismatch", || async {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        // (JSON lines: the quotes of `named` are escaped there)
        (text.contains("does not answer as the configured replica set")
            && text.contains("not-the-set")
            && text.contains(&format!("set replicaSet={set}")))
        .then_some(())
    })
    .await;
    run.kill();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_logs_where_it_resumes() {
    // GIVEN a pipeline that committed a position and stopped
    let db = unique("resume");
    let file = config_file(&config_toml("resume", &db, Some("t"), ""));
    let client = mongo().await;
    for run in 0..2 {
        let mut child = spawn_binary(file.path());
        wait_offsets(&client, &db, "resume", WAIT, |d| {
            d.get_i64("epoch") == Ok(run + 1) && d.contains_key("resumeToken")
        })
        .await;
        // The second run's epoch and token are there as soon as it took the pipeline: wait for
        // its start to be logged before stopping it.
        let log_path = file.path().with_extension("log");
        let deadline = Instant::now() + WAIT;
        while run == 1
            && !std::fs::read_to_string(&log_path)
                .unwrap_or_default()
                .contains("resuming after the committed resume token")
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        signal(child.id(), "TERM");
        assert_eq!(child.wait().unwrap().code(), Some(0));
    }
    // THEN the second start said it resumes after the committed token
    let log = std::fs::read_to_string(file.path().with_extension("log")).unwrap();
    let first = log.find("starting at the current time").expect(&log);
    let resumed = log
        .find("resuming after the committed resume token")
        .expect(&log);
    assert!(first < resumed, "{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_http_endpoint_answers_draining_until_the_drain_ends() {
    // GIVEN a bridge whose records cannot be delivered (no broker), with events in flight
    let db = unique("drain");
    let text = config_toml("drain", &db, Some("t"), "")
        .replace(&kafka_bootstrap(), "127.0.0.1:1")
        .replace("shutdown_timeout_ms = 10000", "shutdown_timeout_ms = 4000");
    let client = mongo().await;
    let bridge = start_bridge(&text).await;
    wait_offsets(&client, &db, "drain", WAIT, |d| {
        d.contains_key("resumeToken")
    })
    .await;
    let coll = client.database(&db).collection::<Document>("t");
    coll.insert_one(doc! { "_id": 1 }).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    // WHEN shutdown begins
    let addr = bridge.metrics_addr();
    bridge.shutdown();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // THEN during the drain /readyz says so and /healthz still answers
    let (code, body) = get(addr, "/readyz").await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("draining: shutdown in progress"), "{body}");
    assert_eq!(get(addr, "/healthz").await.0, 200);
    bridge.wait().await.unwrap();
}
