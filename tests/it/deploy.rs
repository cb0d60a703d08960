//! The deploy kit, checked with real parsers and tools: docker-compose.yml, the Kubernetes
//! manifests, the Dockerfile, the Grafana dashboard and the Prometheus rules reference each
//! other consistently (ports, config paths, metric names that exist in `src/metrics.rs`), and
//! `promtool` accepts the config, the rules and their unit tests.

use std::collections::BTreeSet;
use std::process::Command;

use mongo_kafka_bridge::Config;
use mongo_kafka_bridge::metrics::ALL;
use serde_norway::Value;

use crate::opsutil::{prometheus_tools, root};

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn yaml(path: &str) -> Value {
    serde_norway::from_str(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn yaml_docs(path: &str) -> Vec<Value> {
    use serde::Deserialize;
    serde_norway::Deserializer::from_str(&read(path))
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{path}: {e}")))
        .collect()
}

/// Every `mongo_kafka_bridge_…` name in `text`, histogram suffixes removed.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("mongo_kafka_bridge_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        let base = ["_bucket", "_count", "_sum"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|b| ALL.contains(b)))
            .unwrap_or(name);
        out.insert(base.to_owned());
        rest = &tail[end..];
    }
    out
}

fn assert_known(names: &BTreeSet<String>, whence: &str) {
    assert!(!names.is_empty(), "{whence} uses no bridge metric");
    for name in names {
        assert!(
            ALL.contains(&name.as_str()),
            "{whence} uses {name}, not in src/metrics.rs"
        );
    }
}

fn port_of(listen: &str) -> u16 {
    listen.rsplit(':').next().unwrap().parse().unwrap()
}

#[test]
fn alerts_and_dashboard_use_only_metrics_the_bridge_exports() {
    let alerts = yaml("deploy/prometheus/alerts.yml");
    let rules = alerts["groups"][0]["rules"].as_sequence().unwrap();
    let names: BTreeSet<&str> = rules.iter().map(|r| r["alert"].as_str().unwrap()).collect();
    for wanted in [
        "HistoryHeadroomLow",
        "LagHigh",
        "DeliveryErrors",
        "RestartsLooping",
        "NotReady",
        "NoCommit",
    ] {
        assert!(
            names.contains(format!("MongoKafkaBridge{wanted}").as_str()),
            "{names:?}"
        );
    }
    let exprs: String = rules
        .iter()
        .map(|r| r["expr"].as_str().unwrap())
        .collect::<Vec<_>>()
        .join("\n");
    assert_known(&metric_names(&exprs), "alerts.yml");

    let dashboard: serde_json::Value =
        serde_json::from_str(&read("deploy/grafana/dashboard.json")).unwrap();
    let panels = dashboard["panels"].as_array().unwrap();
    let exprs: Vec<String> = panels
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().iter())
        .map(|t| t["expr"].as_str().unwrap().to_owned())
        .collect();
    let used = metric_names(&exprs.join("\n"));
    assert_known(&used, "dashboard.json");
    for topic in [
        "source_events_total",
        "checkpoint_lag_seconds",
        "history_headroom_seconds",
        "in_flight_events",
        "kafka_delivery_errors_total",
        "checkpoint_commits_total",
    ] {
        assert!(
            used.contains(&format!("mongo_kafka_bridge_{topic}")),
            "dashboard lacks {topic}"
        );
    }
}

#[test]
fn compose_dockerfile_and_kubernetes_agree_on_ports_paths_and_probes() {
    // compose: the bridge's port, config mount and the Prometheus/Grafana mounts
    let compose = yaml("docker-compose.yml");
    let services = &compose["services"];
    for s in [
        "mongo",
        "kafka",
        "bridge",
        "prometheus",
        "grafana",
        "consumer",
        "workload",
    ] {
        assert!(services.get(s).is_some(), "compose lacks service {s}");
    }
    let bridge_cfg = Config::from_toml(&read("deploy/compose.toml"), std::iter::empty())
        .expect("deploy/compose.toml is a valid config");
    let port = port_of(&bridge_cfg.metrics.listen);
    let ports = services["bridge"]["ports"][0].as_str().unwrap();
    assert_eq!(ports, format!("{port}:{port}"));
    let mount = services["bridge"]["volumes"][0].as_str().unwrap();
    let (host, target) = mount.trim_end_matches(":ro").split_once(':').unwrap();
    assert!(root().join(host).exists(), "{host}");
    let dockerfile = read("Dockerfile");
    assert!(
        dockerfile.contains(&format!("\"--config\", \"{target}\"")),
        "Dockerfile CMD vs {target}"
    );
    assert!(dockerfile.contains(&format!("EXPOSE {port}")));
    assert!(
        dockerfile.contains(&format!("127.0.0.1:{port}/healthz")),
        "HEALTHCHECK"
    );
    assert!(
        dockerfile
            .lines()
            .any(|l| l.starts_with("USER ") && !l.contains("root"))
    );
    for v in services["prometheus"]["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .chain(services["grafana"]["volumes"].as_sequence().unwrap())
    {
        let host = v.as_str().unwrap().split(':').next().unwrap();
        assert!(root().join(host).exists(), "compose mounts missing {host}");
    }
    let prom = yaml("deploy/prometheus/prometheus.yml");
    let target = prom["scrape_configs"][0]["static_configs"][0]["targets"][0]
        .as_str()
        .unwrap();
    assert_eq!(target, format!("bridge:{port}"));

    // kubernetes: the config in the ConfigMap is valid, probes and ports line up, the grace
    // period exceeds the drain timeout
    let configmap = yaml("deploy/kubernetes/configmap.yaml");
    let cfg = Config::from_toml(
        configmap["data"]["config.toml"].as_str().unwrap(),
        std::iter::empty(),
    )
    .expect("the ConfigMap's config.toml is valid");
    let deploy = &yaml_docs("deploy/kubernetes/deployment.yaml")[0];
    let pod = &deploy["spec"]["template"]["spec"];
    let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    assert!(
        grace * 1000 > cfg.bridge.shutdown_timeout_ms,
        "grace {grace}s vs drain"
    );
    let c = &pod["containers"][0];
    assert_eq!(
        c["ports"][0]["containerPort"].as_u64(),
        Some(u64::from(port_of(&cfg.metrics.listen)))
    );
    assert_eq!(
        c["livenessProbe"]["httpGet"]["path"].as_str(),
        Some("/healthz")
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"]["path"].as_str(),
        Some("/readyz")
    );
    let mount = c["volumeMounts"][0]["mountPath"].as_str().unwrap();
    let args: Vec<&str> = c["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        args.contains(&format!("{mount}/config.toml").as_str()),
        "{args:?}"
    );
    let envs = c["env"].as_sequence().unwrap();
    assert!(
        envs.iter().all(|e| e.get("value").is_none()),
        "secrets come from secretKeyRef only"
    );
    let service = yaml("deploy/kubernetes/service.yaml");
    assert_eq!(
        service["spec"]["ports"][0]["targetPort"].as_str(),
        Some("metrics")
    );
    let monitor = yaml("deploy/kubernetes/podmonitor.yaml");
    assert_eq!(monitor["kind"].as_str(), Some("PodMonitor"));
    assert_eq!(
        monitor["spec"]["podMetricsEndpoints"][0]["port"].as_str(),
        Some("metrics")
    );
    let kustomize = yaml("deploy/kubernetes/kustomization.yaml");
    for r in kustomize["resources"].as_sequence().unwrap() {
        assert!(
            root()
                .join("deploy/kubernetes")
                .join(r.as_str().unwrap())
                .exists()
        );
    }
}

#[test]
fn the_example_configs_are_valid() {
    for path in ["deploy/config.example.toml", "deploy/compose.toml"] {
        Config::from_toml(&read(path), std::iter::empty())
            .unwrap_or_else(|e| panic!("{path}: {e}"));
    }
}

#[test]
fn promtool_accepts_the_config_the_rules_and_their_unit_tests() {
    let Some((_, promtool)) = prometheus_tools() else {
        return;
    };
    let dir = root().join("deploy/prometheus");
    for args in [
        &["check", "config", "prometheus.yml"][..],
        &["check", "rules", "alerts.yml"],
        &["test", "rules", "alerts_test.yml"],
    ] {
        let out = Command::new(&promtool)
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
