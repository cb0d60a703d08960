//! A real Prometheus scrapes an in-process bridge; the key series are asserted through
//! Prometheus's HTTP API. Skips with a reason when `prometheus` cannot be installed.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bson::doc;

use crate::common::bridge::start_bridge;
use crate::common::config::{config_toml, with_history};
use crate::common::mongo::{mongo, wait_offsets};
use crate::common::observe::{get, prometheus_tools, try_get};
use crate::common::{eventually, root, unique};

/// A Prometheus child scraping one target every second with the alert rules loaded, in a
/// directory of its own; stopped (by its pid) when dropped, also on a panic.
struct Server {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Server {
    /// Starts `prometheus` scraping `target` on a free port.
    fn start(prometheus: &Path, target: SocketAddr) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(
            root().join("deploy/prometheus/alerts.yml"),
            dir.path().join("alerts.yml"),
        )
        .unwrap();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [alerts.yml]\n\
             scrape_configs:\n  - job_name: mongo-kafka-bridge\n    static_configs:\n      - targets: [\"{target}\"]\n",
        );
        std::fs::write(dir.path().join("prometheus.yml"), config).unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new(prometheus)
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let addr = format!("127.0.0.1:{port}").parse().unwrap();
        Self {
            child,
            addr,
            _dir: dir,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The value of the single sample `query` returns, once it returns one.
async fn query(prom: SocketAddr, query: &str) -> Option<f64> {
    let q: String = query
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let (code, body) = try_get(prom, &format!("/api/v1/query?query={q}")).await?;
    if code != 200 {
        return None;
    }
    let json: serde_json::Value = serde_json::from_str(&body).ok()?;
    let result = json["data"]["result"].as_array()?;
    result.first()?["value"][1].as_str()?.parse().ok()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_real_prometheus_scrapes_the_key_series_with_sensible_values() {
    let Some((prometheus, _)) = prometheus_tools() else {
        return;
    };
    // GIVEN a bridge that delivered 20 inserts
    let db = unique("prom");
    let text = with_history(&config_toml("orders", &db, Some("orders"), ""));
    let client = mongo().await;
    let bridge = start_bridge(&text).await;
    wait_offsets(&client, &db, "orders", Duration::from_secs(20), |d| {
        d.contains_key("resumeToken")
    })
    .await;
    let coll = client.database(&db).collection::<bson::Document>("orders");
    for i in 0..20 {
        coll.insert_one(doc! { "_id": i }).await.unwrap();
    }
    wait_offsets(&client, &db, "orders", Duration::from_secs(30), |d| {
        d.get_i64("eventsCommitted") == Ok(20)
    })
    .await;

    // WHEN Prometheus scrapes it every second, with the alert rules loaded
    let server = Server::start(&prometheus, bridge.metrics_addr());
    let prom = server.addr;

    // THEN the key series are there with sensible values
    let p = "{pipeline=\"orders\"}";
    let wait = |q: String, ok: fn(f64) -> bool| async move {
        eventually(Duration::from_secs(30), &q.clone(), || {
            let q = q.clone();
            async move { query(prom, &q).await.filter(|v| ok(*v)) }
        })
        .await
    };
    wait("up{job=\"mongo-kafka-bridge\"}".into(), |v| v == 1.0).await;
    wait(
        format!("sum(mongo_kafka_bridge_source_events_total{p})"),
        |v| v == 20.0,
    )
    .await;
    wait(
        format!("sum(mongo_kafka_bridge_kafka_messages_delivered_total{p})"),
        |v| v == 20.0,
    )
    .await;
    wait(format!("mongo_kafka_bridge_stream_open{p}"), |v| v == 1.0).await;
    wait(
        format!("mongo_kafka_bridge_checkpoint_lag_seconds{p}"),
        |v| (0.0..120.0).contains(&v),
    )
    .await;
    wait(
        format!("mongo_kafka_bridge_history_headroom_seconds{p}"),
        |v| v >= 0.0,
    )
    .await;
    wait(
        format!("mongo_kafka_bridge_end_to_end_latency_seconds_count{p}"),
        |v| v == 20.0,
    )
    .await;
    wait(format!("histogram_quantile(0.99, sum by (le) (mongo_kafka_bridge_end_to_end_latency_seconds_bucket{p}))"), |v| v < 60.0).await;
    wait(format!("mongo_kafka_bridge_in_flight_events{p}"), |v| {
        v == 0.0
    })
    .await;
    wait(
        "sum(mongo_kafka_bridge_checkpoint_commits_total{pipeline=\"orders\",outcome=\"ok\"})"
            .to_owned(),
        |v| v >= 1.0,
    )
    .await;
    wait(
        format!("mongo_kafka_bridge_rdkafka_queue_messages{p}"),
        |v| v >= 0.0,
    )
    .await;
    wait("mongo_kafka_bridge_build_info".into(), |v| v == 1.0).await;
    let (code, rules) = get(prom, "/api/v1/rules").await;
    assert_eq!(code, 200);
    // Every rule of the file loaded (counted from the file, not a number kept beside it).
    let file = std::fs::read_to_string(root().join("deploy/prometheus/alerts.yml")).unwrap();
    assert_eq!(
        rules.matches("\"type\":\"alerting\"").count(),
        file.matches("- alert: ").count(),
        "{rules}"
    );
    bridge.shutdown();
    bridge.wait().await.unwrap();
}
