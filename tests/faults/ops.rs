//! Readiness and metrics under server faults, each test on its own `scripts/services` instance
//! (they stop or freeze servers, or set server-wide fail points), and a start that waits on a
//! server which answers nothing, said in the log and `/readyz`. They skip when the servers
//! are external (`MKB_SERVICES_MANAGED` unset). Ordinary tests of this binary (see `main.rs`).

use std::time::Duration;

use bson::doc;

use crate::common::bridge::{BridgeProc, log_lines, spawn_binary};
use crate::common::config::{config, config_file};
use crate::common::mongo::fail_point;
use crate::common::observe::{get, try_get};
use crate::common::servers::Instance;
use crate::common::{eventually, unique};
use crate::suite::turn;

fn toml(mongo_uri: &str, kafka: &str, db: &str, listen: &str) -> String {
    format!(
        r#"
[mongodb]
uri = "{mongo_uri}"
[kafka]
bootstrap_servers = "{kafka}"
[kafka.properties]
"linger.ms" = 5
"message.timeout.ms" = 60000
[bridge]
commit_interval_ms = 200
shutdown_timeout_ms = 5000
max_await_time_ms = 200
max_restart_backoff_ms = 1000
ready_max_delivery_age_ms = 1000
[metrics]
listen = "{listen}"
[[pipelines]]
name = "orders"
database = "{db}"
collection = "orders"
"#
    )
}

async fn ready(addr: std::net::SocketAddr, want: u16, reason: &'static str) -> String {
    let started = std::time::Instant::now();
    let body = eventually(Duration::from_secs(30), reason, || async move {
        let (code, body) = get(addr, "/readyz").await;
        (code == want && body.contains(reason)).then_some(body)
    })
    .await;
    eprintln!("readyz {want} {reason:?} after {:?}", started.elapsed());
    body
}

#[tokio::test(flavor = "multi_thread")]
async fn readyz_fails_under_a_frozen_broker_and_a_stopped_server_and_recovers() {
    let Some(_turn) = turn("ops").await else {
        return;
    };
    let Some(instance) = Instance::managed("ops-ready", &[]) else {
        return;
    };
    // GIVEN a ready bridge on its own servers
    let db = unique("ready");
    // The driver reports a stopped server after server selection gives up (30 s by default).
    let uri = format!("{}&serverSelectionTimeoutMS=2000", instance.mongo_uri);
    let text = toml(&uri, &instance.kafka, &db, "127.0.0.1:0");
    let bridge = mongo_kafka_bridge::Bridge::start(config(&text))
        .await
        .unwrap();
    let addr = bridge.metrics_addr();
    ready(addr, 200, "ready").await;
    let client = mongodb::Client::with_uri_str(&instance.mongo_uri)
        .await
        .unwrap();
    let coll = client.database(&db).collection::<bson::Document>("orders");

    // WHEN the broker freezes while events arrive: not ready (stale delivery), still live
    instance.services(&["freeze", "kafka"]);
    coll.insert_one(doc! { "_id": 1 }).await.unwrap();
    let body = ready(addr, 503, "oldest undelivered record").await;
    assert!(body.contains("pipeline orders"), "{body}");
    assert_eq!(get(addr, "/healthz").await.0, 200);
    // THEN thawing it makes the bridge ready again
    instance.services(&["thaw", "kafka"]);
    ready(addr, 200, "ready").await;

    // WHEN MongoDB stops: the stream closes and the bridge is not ready
    instance.services(&["down", "--only", "mongo"]);
    ready(addr, 503, "change stream not open").await;
    assert_eq!(get(addr, "/healthz").await.0, 200);
    // THEN once it is back the pipeline restarts and is ready, and the restart was counted
    instance.services(&["up", "--only", "mongo"]);
    ready(addr, 200, "ready").await;
    let (_, metrics) = get(addr, "/metrics").await;
    assert!(
        metrics.lines().any(|l| l
            .starts_with("mongo_kafka_bridge_pipeline_restarts_total{pipeline=\"orders\"")
            && !l.ends_with(" 0")),
        "{metrics}"
    );
    bridge.shutdown();
    let _ = tokio::time::timeout(Duration::from_secs(20), bridge.wait()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn history_headroom_is_absent_with_a_log_line_when_the_oplog_cannot_be_read() {
    let Some(_turn) = turn("ops").await else {
        return;
    };
    let Some(instance) = Instance::managed("ops-nohist", &[]) else {
        return;
    };
    // GIVEN a server that refuses `find` (code 13) to the bridge's connections only
    let admin = mongodb::Client::with_uri_str(&instance.mongo_uri)
        .await
        .unwrap();
    let refused = doc! { "failCommands": ["find"], "errorCode": 13, "appName": "mkb-nohistory" };
    fail_point(&admin, "alwaysOn", refused).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let uri = format!("{}&appName=mkb-nohistory", instance.mongo_uri);
    let db = unique("nohist");
    let file = config_file(&toml(
        &uri,
        &instance.kafka,
        &db,
        &format!("127.0.0.1:{port}"),
    ));
    // WHEN the bridge runs
    let mut child = spawn_binary(file.path());
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let metrics = eventually(
        Duration::from_secs(20),
        "a committed position",
        || async move {
            let (_, body) = try_get(addr, "/metrics").await?;
            body.contains("mongo_kafka_bridge_checkpoint_lag_seconds{pipeline=\"orders\"}")
                .then_some(body)
        },
    )
    .await;
    // THEN no headroom or window series is made up, and the log says which call failed
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        !metrics.contains("mongo_kafka_bridge_history_headroom_seconds{"),
        "{metrics}"
    );
    assert!(
        !metrics.contains("mongo_kafka_bridge_history_window_seconds "),
        "{metrics}"
    );
    let log = std::fs::read_to_string(file.path().with_extension("log")).unwrap();
    assert!(log.contains("history headroom unknown"), "{log}");
    assert!(
        log.contains("find on local.oplog.rs") && log.contains("Unauthorized"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_start_that_waits_on_a_frozen_server_says_what_it_waits_for() {
    let Some(_turn) = turn("ops").await else {
        return;
    };
    let Some(instance) = Instance::managed("ops-wait", &[]) else {
        return;
    };
    // GIVEN a server that answers nothing (as one still busy with a killed process's queries,
    // or unreachable) when a bridge starts
    let db = unique("wait");
    let text = toml(&instance.mongo_uri, &instance.kafka, &db, "127.0.0.1:0");
    let file = config_file(&text);
    instance.services(&["freeze", "mongo"]);
    let log = file.path().with_extension("log");
    let mut bridge = BridgeProc::spawn(file.path(), log);
    let addr = bridge.metrics_addr(Duration::from_secs(60));
    let addr: std::net::SocketAddr = addr.parse().expect("a socket address");
    // WHEN it has waited longer than the first note (10 s)
    let waiting = eventually(Duration::from_secs(120), "a waiting line", || async {
        let lines = log_lines(&bridge.log_text());
        lines.into_iter().find(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("still waiting for MongoDB to answer: "))
        })
    })
    .await;
    // THEN the log names the pipeline, the step and where to look, and /readyz says it too
    let message = waiting["message"].as_str().unwrap_or_default();
    assert!(message.contains("db.currentOp"), "{waiting}");
    assert_eq!(waiting["pipeline"], "orders", "{waiting}");
    let (code, body) = get(addr, "/readyz").await;
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("pipeline orders: no answer from MongoDB"),
        "{body}"
    );
    // AND once the server answers, the step's end is said and the pipeline becomes ready
    instance.services(&["thaw", "mongo"]);
    ready(addr, 200, "ready").await;
    let answered = log_lines(&bridge.log_text()).into_iter().any(|l| {
        l["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("no longer waiting for MongoDB: "))
    });
    assert!(answered, "{}", bridge.log_tail(20));
    bridge.stop(Duration::from_secs(30));
}
