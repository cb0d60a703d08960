//! `mongo-kafka-bridge check` against the live servers and against closed ports.

use std::time::{Duration, Instant};

use crate::common::bridge::bridge_cli;
use crate::common::config::{config_file, config_toml};
use crate::common::kafka::create_topic_at;
use crate::common::servers::kafka_bootstrap;
use crate::common::unique;

#[test]
fn check_passes_against_the_live_servers() {
    // GIVEN a config for a collection on the live servers, whose topic exists
    let db = unique("chk");
    let topic = format!("{db}.orders");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(create_topic_at(
        &kafka_bootstrap(),
        &topic,
        3,
        &[("cleanup.policy", "compact")],
    ));
    let file = config_file(&config_toml("orders", &db, Some("orders"), ""));
    // WHEN check runs
    let (code, stdout, stderr) = bridge_cli(&["check"], file.path());
    // THEN every line is a ✔ and it exits 0
    assert_eq!(code, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.lines().all(|l| l.starts_with('✔')), "{stdout}");
    assert!(stdout.contains("MongoDB is a replica set"), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "pipeline orders: change stream opens on {db}.orders"
        )),
        "{stdout}"
    );
    assert!(stdout.contains("Kafka reachable"), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "pipeline orders: topic {topic:?} exists (3 partitions, cleanup.policy=compact)"
        )),
        "{stdout}"
    );
}

#[test]
fn check_warns_before_relying_on_the_brokers_auto_creation() {
    // GIVEN a config whose topic does not exist
    let db = unique("chkw");
    let file = config_file(&config_toml("orders", &db, Some("orders"), ""));
    // WHEN check runs
    let (code, stdout, _stderr) = bridge_cli(&["check"], file.path());
    // THEN it passes with a warning naming the topic and both remedies
    assert_eq!(code, Some(0), "{stdout}");
    let warning = stdout
        .lines()
        .find(|l| l.starts_with('⚠'))
        .unwrap_or_else(|| panic!("no warning in:\n{stdout}"));
    assert!(
        warning.contains(&format!("topic \"{db}.orders\" does not exist yet"))
            && warning.contains("[kafka.topic_creation] enabled = true")
            && warning.contains("cleanup.policy=compact"),
        "{warning}"
    );
}

#[test]
fn check_fails_fast_with_a_clear_message_when_servers_are_down() {
    // GIVEN ports where nothing listens
    let text = "[mongodb]\nuri = \"mongodb://127.0.0.1:1/?directConnection=true\"\n[kafka]\n\
                bootstrap_servers = \"127.0.0.1:1\"\n[[pipelines]]\nname = \"p\"\ndatabase = \"d\"\n";
    let file = config_file(text);
    // WHEN check runs
    let started = Instant::now();
    let (code, stdout, _stderr) = bridge_cli(&["check"], file.path());
    // THEN it exits 1 within seconds, naming both servers
    assert_eq!(code, Some(1), "{stdout}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
    assert!(
        stdout.contains("✘ MongoDB at mongodb://127.0.0.1:1/ unreachable"),
        "{stdout}"
    );
    assert!(
        stdout.contains("✘ Kafka at 127.0.0.1:1 unreachable"),
        "{stdout}"
    );
}

#[test]
fn a_config_error_exits_2_naming_the_field() {
    let file = config_file(
        "[mongodb]\nuri = \"mongodb://127.0.0.1:1\"\nbogus = 1\n[kafka]\nbootstrap_servers = \"x:1\"\n",
    );
    let (code, _stdout, stderr) = bridge_cli(&["check"], file.path());
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("mongodb.bogus") || stderr.contains("unknown field `bogus`"),
        "{stderr}"
    );
}

#[test]
fn a_password_in_the_uri_never_reaches_the_output() {
    let text = "[mongodb]\nuri = \"mongodb://app:hunter2secret@127.0.0.1:1/?directConnection=true\"\n\
                [kafka]\nbootstrap_servers = \"127.0.0.1:1\"\n[kafka.properties]\n\
                \"sasl.password\" = \"kafkasecret9\"\n[[pipelines]]\nname = \"p\"\ndatabase = \"d\"\n";
    let file = config_file(text);
    let (code, stdout, stderr) = bridge_cli(&["check"], file.path());
    let all = format!("{stdout}{stderr}");
    assert_eq!(code, Some(1), "{all}");
    assert!(
        !all.contains("hunter2secret") && !all.contains("kafkasecret9"),
        "{all}"
    );
}

#[test]
fn check_tells_a_snapshot_pipeline_what_its_mirror_needs() {
    // GIVEN a snapshot pipeline on a delete-policy topic, with when_available images that the
    // collection does not record
    let db = unique("chks");
    let topic = format!("{db}.orders");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        create_topic_at(
            &kafka_bootstrap(),
            &topic,
            1,
            &[("cleanup.policy", "delete")],
        )
        .await;
        let client = crate::common::mongo::mongo().await;
        client
            .database(&db)
            .create_collection("orders")
            .await
            .unwrap();
    });
    let lines = "snapshot = \"initial\"\nfull_document = \"when_available\"\n";
    let file = config_file(&config_toml("orders", &db, Some("orders"), lines));
    // WHEN check runs
    let (code, stdout, _stderr) = bridge_cli(&["check"], file.path());
    // THEN it fails on the images and warns about the topic's policy
    assert_ne!(code, Some(0), "{stdout}");
    let failed = stdout
        .lines()
        .find(|l| l.starts_with('✘'))
        .unwrap_or_default();
    assert!(
        failed.contains("full_document = \"when_available\" but post-images are not enabled"),
        "{stdout}"
    );
    let warned = stdout
        .lines()
        .find(|l| l.starts_with('⚠'))
        .unwrap_or_default();
    assert!(
        warned.contains(
            "cleanup.policy=delete: a snapshot mirrors the collection only in a \
                         compacted topic"
        ),
        "{stdout}"
    );
}
