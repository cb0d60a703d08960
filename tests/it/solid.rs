//! Supervision and ownership against the live servers: a standby stays live and ready, exactly
//! one standby takes a dead owner's pipeline, configuration errors found before the first take
//! take nothing, a fatal exit releases its leases, the offsets collection never streams itself,
//! a newer offsets document is refused, topics are created when asked, and a replica-set name
//! mismatch is named.

use std::process::Command;
use std::time::{Duration, Instant};

use bson::{DateTime, Document, doc};
use mongo_kafka_bridge::BridgeError;
use mongo_kafka_bridge::offsets::{OffsetsDoc, OffsetsStore, StreamIdentity};

use crate::opsutil::get;
use crate::support::*;

const WAIT: Duration = Duration::from_secs(60);
/// After the expected records, how long no further record may arrive (duplicates show up).
const QUIET: Duration = Duration::from_secs(2);

fn pipeline_owned(
    metrics: &mongo_kafka_bridge::observe::metrics::Metrics,
    pipeline: &str,
) -> String {
    let line = format!("mongo_kafka_bridge_pipeline_owned{{pipeline=\"{pipeline}\"}} ");
    metrics
        .render()
        .lines()
        .find_map(|l| l.strip_prefix(&line).map(str::to_owned))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fenced_instance_stands_by_live_and_ready_and_never_takes_the_pipeline_back() {
    // GIVEN instance A owning pipeline "ha", with a liveness threshold of 3 s
    let db = unique("ha");
    let topic = format!("{db}.t");
    create_topic(&topic, 1).await;
    let text = config_toml("ha", &db, Some("t"), "")
        .replace("[bridge]\n", "[bridge]\nliveness_timeout_ms = 3000\n");
    let client = mongo().await;
    let coll = client.database(&db).collection::<Document>("t");
    let a = start_bridge(&text).await;
    wait_offsets(&client, &db, "ha", WAIT, |d| {
        d.get_i64("epoch") == Ok(1) && d.contains_key("resumeToken")
    })
    .await;
    // WHEN instance B starts on the same configuration and takes the pipeline
    let b = start_bridge(&text).await;
    let taken = wait_offsets(&client, &db, "ha", WAIT, |d| d.get_i64("epoch") == Ok(2)).await;
    let b_owner = taken.get_str("owner").unwrap().to_owned();
    let body = crate::opsutil::eventually(WAIT, "A stands by", || async {
        let (code, body) = get(a.metrics_addr(), "/readyz").await;
        (code == 200 && body.contains("pipeline ha: standby")).then_some(body)
    })
    .await;
    assert!(body.contains(&format!("owner {b_owner} until")), "{body}");
    // AND writes go on for over three liveness thresholds
    let started = Instant::now();
    let mut id = 0_i64;
    while started.elapsed() < Duration::from_secs(10) {
        coll.insert_one(doc! { "_id": id }).await.unwrap();
        id += 1;
        let offsets = offsets_doc(&client, &db, "ha").await.unwrap();
        // THEN the epoch keeps B's value all along
        assert_eq!(
            offsets.get_i64("epoch"),
            Ok(2),
            "after {:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // AND A is live and ready (a standby), B owns the pipeline, and no record came twice
    assert_eq!(
        get(a.metrics_addr(), "/healthz").await,
        (200, "ok\n".to_owned())
    );
    let (code, body) = get(a.metrics_addr(), "/readyz").await;
    assert_eq!(code, 200, "{body}");
    assert!(
        body.starts_with("ready\npipeline ha: standby, owner "),
        "{body}"
    );
    assert_eq!(pipeline_owned(a.metrics(), "ha"), "0");
    assert_eq!(pipeline_owned(b.metrics(), "ha"), "1");
    let records = collect_from(&kafka_bootstrap(), &topic, id as usize, QUIET, WAIT).await;
    let counts = per_id(&records);
    for i in 0..id {
        assert_eq!(counts.get(&i).copied(), Some(1), "document {i}");
    }
    b.shutdown();
    b.wait().await.unwrap();
    a.shutdown();
    a.wait().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn of_two_standbys_exactly_one_takes_a_lapsed_pipeline() {
    let client = mongo().await;
    let db = unique("cas");
    let offsets_db = format!("{db}_offsets");
    let store = |owner: &str| {
        let identity = StreamIdentity::of(&mongo_kafka_bridge::config::PipelineConfig {
            ..config(&config_toml("p", &db, Some("t"), ""))
                .pipelines
                .remove(0)
        });
        OffsetsStore::new(
            &client,
            (&offsets_db, "offsets"),
            "p",
            identity,
            owner,
            // Long: the last step checks that a live lease is never taken, however slowly a
            // loaded server answers (the lapsed leases above are written by the test).
            Duration::from_secs(120),
        )
    };
    let (one, two) = (store("one"), store("two"));
    let offsets = client
        .database(&offsets_db)
        .collection::<Document>("offsets");
    for round in 0..20_i64 {
        // GIVEN a pipeline whose owner's lease lapsed, read by two standbys
        let past = DateTime::from_millis(DateTime::now().timestamp_millis() - 1000);
        offsets
            .replace_one(
                doc! { "_id": "p" },
                doc! { "_id": "p", "epoch": round * 10, "leaseUntil": past, "owner": "dead" },
            )
            .upsert(true)
            .await
            .unwrap();
        let seen = OffsetsDoc::parse(&offsets.find_one(doc! {}).await.unwrap().unwrap()).unwrap();
        // WHEN both take it at once
        let (a, b) = tokio::join!(one.take_lapsed(Some(&seen)), two.take_lapsed(Some(&seen)));
        // THEN exactly one wins, and the epoch moved by one
        let won: Vec<_> = [a.unwrap(), b.unwrap()].into_iter().flatten().collect();
        assert_eq!(won.len(), 1, "round {round}");
        assert_eq!(won[0].epoch, Some(round * 10 + 1));
        let now = offsets.find_one(doc! {}).await.unwrap().unwrap();
        assert_eq!(now.get_i64("epoch"), Ok(round * 10 + 1));
    }
    // AND a live lease is never taken
    let seen = OffsetsDoc::parse(&offsets.find_one(doc! {}).await.unwrap().unwrap()).unwrap();
    assert_eq!(one.take_lapsed(Some(&seen)).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread")]
async fn when_the_owner_dies_exactly_one_of_two_standbys_takes_over() {
    // GIVEN three instances of one configuration: C owns the pipeline, A and B stand by
    let db = unique("die");
    let topic = format!("{db}.t");
    create_topic(&topic, 1).await;
    let text = config_toml("die", &db, Some("t"), "")
        .replace("[bridge]\n", "[bridge]\nlease_ms = 12000\n");
    let file = config_file(&text);
    let client = mongo().await;
    let coll = client.database(&db).collection::<Document>("t");
    let mut instances = Vec::new();
    for epoch in 1..=3 {
        instances.push(Killed(spawn_binary(file.path())));
        wait_offsets(&client, &db, "die", WAIT, |d| {
            d.get_i64("epoch") == Ok(epoch) && d.contains_key("resumeToken")
        })
        .await;
    }
    // (once both have noticed they were fenced: before that they still publish, the bounded
    // duplicates of a zombie owner, which is not what this test is about)
    let log = file.path().with_extension("log");
    crate::opsutil::eventually(WAIT, "two standbys", || async {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        (text.matches("fenced; standing by").count() == 2).then_some(())
    })
    .await;
    // WHEN the owner is killed with SIGKILL under a steady load
    let mut owner = instances.pop().unwrap();
    owner.kill();
    let killed = Instant::now();
    let mut id = 0_i64;
    let mut epochs = Vec::new();
    // (The lease is long enough that a loaded machine does not stall the new owner past it.)
    while killed.elapsed() < Duration::from_secs(30) {
        coll.insert_one(doc! { "_id": id }).await.unwrap();
        id += 1;
        let epoch = offsets_doc(&client, &db, "die")
            .await
            .unwrap()
            .get_i64("epoch");
        epochs.push(epoch.unwrap());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // THEN the epoch went from 3 to 4 once, and every write after the kill arrived exactly once
    assert_eq!(epochs.first(), Some(&3));
    assert_eq!(epochs.last(), Some(&4), "{epochs:?}");
    let records = collect_from(&kafka_bootstrap(), &topic, id as usize, QUIET, WAIT).await;
    let counts = per_id(&records);
    for i in 0..id {
        assert_eq!(
            counts.get(&i).copied(),
            Some(1),
            "document {i} written after the kill"
        );
    }
    drop(instances);
}

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

#[tokio::test(flavor = "multi_thread")]
async fn a_fatal_exit_releases_every_lease_it_holds() {
    // GIVEN two pipelines, one of which meets a record too large for Kafka (on_oversize = fail)
    let db = unique("rel");
    create_topic(&format!("{db}.good"), 1).await;
    create_topic(&format!("{db}.bad"), 1).await;
    let mut text = config_toml("good", &db, Some("good"), "").replace(
        "[kafka.properties]\n",
        "[kafka.properties]\n\"message.max.bytes\" = 10000\n",
    );
    text.push_str(&format!(
        "\n[[pipelines]]\nname = \"bad\"\ndatabase = \"{db}\"\ncollection = \"bad\"\n"
    ));
    let client = mongo().await;
    let bridge = start_bridge(&text).await;
    for name in ["good", "bad"] {
        wait_offsets(&client, &db, name, WAIT, |d| d.contains_key("resumeToken")).await;
    }
    // WHEN the large document is written
    client
        .database(&db)
        .collection::<Document>("bad")
        .insert_one(doc! { "_id": 1, "blob": "x".repeat(20_000) })
        .await
        .unwrap();
    // THEN the bridge stops with the oversize error, and neither pipeline keeps a live lease
    let result = tokio::time::timeout(WAIT, bridge.wait()).await.unwrap();
    assert!(
        matches!(result, Err(BridgeError::Oversize { .. })),
        "{result:?}"
    );
    let now = DateTime::now();
    for name in ["good", "bad"] {
        let d = offsets_doc(&client, &db, name).await.unwrap();
        let until = *d.get_datetime("leaseUntil").unwrap();
        assert!(until <= now, "{name}: lease until {until} after the exit");
    }
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
    crate::opsutil::eventually(WAIT, "the first commit", || async {
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
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
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

#[tokio::test(flavor = "multi_thread")]
async fn after_offsets_reset_delete_an_old_owner_is_still_fenced() {
    // GIVEN an owner holding the pipeline, and a reset --delete while it is paused
    let db = unique("forget");
    let client = mongo().await;
    let text = config_toml("forget", &db, Some("t"), "");
    let identity = StreamIdentity::of(&config(&text).pipelines[0]);
    let store = |owner: &str| {
        OffsetsStore::new(
            &client,
            (&format!("{db}_offsets"), "offsets"),
            "forget",
            identity.clone(),
            owner,
            Duration::from_secs(5),
        )
    };
    let (old, new) = (store("old"), store("new"));
    let held = old.take().await.unwrap().epoch.unwrap();
    let file = config_file(&text);
    let (code, _, stderr) = bridge_cli(
        &["offsets", "reset", "forget", "--delete", "--force"],
        file.path(),
    );
    assert_eq!(code, Some(0), "{stderr}");
    // WHEN another instance takes the pipeline anew
    let taken = new.take().await.unwrap().epoch.unwrap();
    // THEN the epoch never went back, and the old owner's next write is refused
    assert_eq!(taken, held + 2);
    let renewed = old.renew(held).await;
    assert!(
        matches!(renewed, Err(BridgeError::Fenced { .. })),
        "{renewed:?}"
    );
}
