//! The status page in a real browser (`src/observe/status_page.rs` lists the feature's pieces):
//! headless Chromium from Debian (`/usr/bin/chromium`), driven by Playwright for Python
//! (`status_page.py`, from the services' virtualenv), loads `/status` of a running bridge on
//! servers of its own, sees each pipeline streaming, sees the pipeline not ready while the
//! broker is frozen and streaming again once it thaws, and keeps a screenshot of each state in
//! `target/status-page/`. An ordinary test of this binary (see `main.rs`); it skips when the
//! servers are external, and when Chromium is absent, except under `CI=true`, where that fails.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bson::doc;

use crate::common::config::config;
use crate::common::servers::Instance;
use crate::common::{root, unique};
use crate::suite::turn;

const CHROMIUM: &str = "/usr/bin/chromium";
/// How long the page may take to show what is expected (it refreshes every 2 s).
const PAGE_WAIT_S: &str = "90";

fn toml(instance: &Instance, db: &str) -> String {
    format!(
        r#"
[mongodb]
uri = "{uri}"
offsets_database = "{db}_offsets"
[kafka]
bootstrap_servers = "{kafka}"
[kafka.properties]
"linger.ms" = 5
[bridge]
commit_interval_ms = 200
ready_max_delivery_age_ms = 1000
[metrics]
listen = "127.0.0.1:0"
[[pipelines]]
name = "orders"
database = "{db}"
collection = "orders"
[[pipelines]]
name = "customers"
database = "{db}"
collection = "customers"
"#,
        uri = instance.mongo_uri,
        kafka = instance.kafka,
    )
}

/// Runs the browser until the page at `url` shows every one of `texts`; the screenshot goes to
/// `shot`. Panics with the page's text when it does not.
fn page_shows(python: &Path, url: &str, shot: &Path, texts: &[&str]) {
    let script = root().join("tests/faults/status_page.py");
    let out = std::process::Command::new(python)
        .arg(&script)
        .arg(url)
        .arg(shot)
        .arg(PAGE_WAIT_S)
        .args(texts)
        .output()
        .expect("the browser script runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "the page did not show {texts:?}: {said}"
    );
    eprintln!("{}", said.trim_end());
}

/// The services' Python with Playwright, or why the test cannot run.
fn browser() -> Result<PathBuf, String> {
    if !Path::new(CHROMIUM).exists() {
        return Err(format!(
            "{CHROMIUM} is absent (Debian: apt-get install chromium)"
        ));
    }
    let python = root().join(".cache/venv/bin/python");
    let has = std::process::Command::new(&python)
        .args(["-c", "import playwright.sync_api"])
        .status()
        .is_ok_and(|s| s.success());
    if !has {
        return Err(format!(
            "{} has no playwright (scripts/services up installs it)",
            python.display()
        ));
    }
    Ok(python)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_page_shows_each_pipeline_in_chromium_and_follows_a_frozen_broker() {
    let Some(_turn) = turn("status_page").await else {
        return;
    };
    let Some(instance) = Instance::managed("status-page", &[]) else {
        return;
    };
    let python = match browser() {
        Ok(python) => python,
        Err(reason) if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("CI=true: the browser test must run: {reason}")
        }
        Err(reason) => {
            eprintln!("skipped: {reason}");
            return;
        }
    };
    let shots = root().join("target/status-page");
    std::fs::create_dir_all(&shots).unwrap();
    // GIVEN a bridge with two pipelines, streaming
    let db = unique("status");
    let bridge = mongo_kafka_bridge::Bridge::start(config(&toml(&instance, &db)))
        .await
        .unwrap();
    let url = format!("http://{}/status", bridge.metrics_addr());
    let client = mongodb::Client::with_uri_str(&instance.mongo_uri)
        .await
        .unwrap();
    let orders = client.database(&db).collection::<bson::Document>("orders");
    orders.insert_one(doc! { "_id": 0 }).await.unwrap();
    let run = |texts: &'static [&'static str], shot: &'static str| {
        let (python, url, shot) = (python.clone(), url.clone(), shots.join(shot));
        tokio::task::spawn_blocking(move || page_shows(&python, &url, &shot, texts))
    };
    // THEN the page names both, streaming, and the process ready
    run(
        &["orders streaming", "customers streaming", "ready"],
        "streaming.png",
    )
    .await
    .unwrap();
    // WHEN the broker freezes while events arrive: the page says the pipeline is not ready,
    // and why
    instance.services(&["freeze", "kafka"]);
    orders.insert_one(doc! { "_id": 1 }).await.unwrap();
    let frozen = run(
        &["orders not ready", "oldest undelivered record"],
        "frozen.png",
    )
    .await;
    instance.services(&["thaw", "kafka"]);
    frozen.unwrap();
    // THEN once it thaws, streaming again
    run(
        &["orders streaming", "customers streaming"],
        "recovered.png",
    )
    .await
    .unwrap();
    bridge.shutdown();
    let _ = tokio::time::timeout(Duration::from_secs(20), bridge.wait()).await;
}
