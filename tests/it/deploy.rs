//! The deploy kit, checked with real parsers and tools: docker-compose.yml, the Kubernetes
//! manifests, the Dockerfile, the Grafana dashboard and the Prometheus rules reference each
//! other consistently (ports, config paths, metric names that exist in `src/metrics.rs`), both
//! run several replicas in one consumer group (`[bridge] group_id`), and `promtool` accepts the
//! config, the rules and their unit tests.

use std::collections::BTreeSet;
use std::process::Command;

use mongo_kafka_bridge::Config;
use mongo_kafka_bridge::config::names as topics;
use mongo_kafka_bridge::observe::metrics::ALL;
use serde_norway::Value;

use crate::common::observe::prometheus_tools;
use crate::common::root;

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

/// The group name the deploy kit gives both the Kubernetes and the compose replicas.
const GROUP_ID: &str = "mongo-kafka-bridge";

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
    compose_and_dockerfile_agree();
    kubernetes_agrees();
}

/// compose: the bridge's port, config mount and the Prometheus/Grafana mounts, and the
/// Dockerfile's CMD, EXPOSE, HEALTHCHECK and USER.
fn compose_and_dockerfile_agree() {
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
    let expose: Vec<&str> = services["bridge"]["expose"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(expose, [port.to_string()]);
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
    // The dependency layer builds from stubs: every target the manifest names has one, or
    // cargo refuses the manifest.
    let manifest = read("Cargo.toml");
    for path in manifest
        .lines()
        .filter_map(|l| l.strip_prefix("path = \""))
        .filter_map(|l| l.strip_suffix('"'))
    {
        assert!(
            dockerfile.contains(&format!("> {path}")),
            "the Dockerfile stubs no {path}"
        );
    }
    assert!(
        dockerfile.contains("--target $TARGET --features static"),
        "the image's binary is the static build"
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
    let sd = &prom["scrape_configs"][0]["dns_sd_configs"][0];
    assert_eq!(sd["port"].as_u64(), Some(u64::from(port)));
}

/// kubernetes: the config in the ConfigMap is valid, probes and ports line up, the grace
/// period exceeds the drain timeout.
fn kubernetes_agrees() {
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
    container_agrees(&pod["containers"][0], &cfg);
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

/// The bridge's container: its port named `metrics` is the config's, the probes ask it, the
/// config is mounted where the args say, and secrets come from secretKeyRef only.
fn container_agrees(c: &Value, cfg: &Config) {
    assert_eq!(
        c["ports"][0]["containerPort"].as_u64(),
        Some(u64::from(port_of(&cfg.metrics.listen)))
    );
    assert_eq!(c["ports"][0]["name"].as_str(), Some("metrics"));
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        assert_eq!(c[probe]["httpGet"]["path"].as_str(), Some(path), "{probe}");
        assert_eq!(
            c[probe]["httpGet"]["port"].as_str(),
            Some("metrics"),
            "{probe}"
        );
    }
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
}

#[test]
fn kubernetes_runs_two_replicas_in_one_group_with_a_rolling_update_and_a_disruption_budget() {
    let configmap = yaml("deploy/kubernetes/configmap.yaml");
    let toml = configmap["data"]["config.toml"].as_str().unwrap();
    let cfg = Config::from_toml(toml, std::iter::empty()).expect("the ConfigMap's config.toml");
    assert_eq!(cfg.bridge.group_id.as_deref(), Some(GROUP_ID));
    // The comment names the control topic the bridge creates for this group.
    let control = topics::control(&cfg.mongodb.offsets_database, GROUP_ID, "<deployment id>");
    assert!(
        toml.contains(&control),
        "configmap.yaml should name {control}"
    );

    let deploy = &yaml_docs("deploy/kubernetes/deployment.yaml")[0];
    assert_eq!(deploy["kind"].as_str(), Some("Deployment"));
    assert_eq!(deploy["spec"]["replicas"].as_u64(), Some(2));
    let strategy = &deploy["spec"]["strategy"];
    assert_eq!(strategy["type"].as_str(), Some("RollingUpdate"));
    assert_eq!(strategy["rollingUpdate"]["maxSurge"].as_u64(), Some(1));
    assert_eq!(
        strategy["rollingUpdate"]["maxUnavailable"].as_u64(),
        Some(0)
    );
    let pod_labels = &deploy["spec"]["template"]["metadata"]["labels"];
    assert_eq!(&deploy["spec"]["selector"]["matchLabels"], pod_labels);

    let pdb = yaml("deploy/kubernetes/poddisruptionbudget.yaml");
    assert_eq!(pdb["apiVersion"].as_str(), Some("policy/v1"));
    assert_eq!(pdb["kind"].as_str(), Some("PodDisruptionBudget"));
    assert_eq!(pdb["spec"]["maxUnavailable"].as_u64(), Some(1));
    assert!(
        pdb["spec"].get("minAvailable").is_none(),
        "maxUnavailable or minAvailable, not both"
    );
    assert_eq!(&pdb["spec"]["selector"]["matchLabels"], pod_labels);

    let kustomize = yaml("deploy/kubernetes/kustomization.yaml");
    let resources: Vec<&str> = kustomize["resources"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert_eq!(
        resources,
        [
            "configmap.yaml",
            "deployment.yaml",
            "poddisruptionbudget.yaml",
            "service.yaml",
            "podmonitor.yaml",
        ]
    );
}

#[test]
fn compose_scales_the_bridge_and_prometheus_finds_every_replica() {
    let compose = yaml("docker-compose.yml");
    let bridge = &compose["services"]["bridge"];
    assert!(
        bridge.get("ports").is_none(),
        "a host port binding stops --scale"
    );
    assert!(
        bridge.get("container_name").is_none(),
        "container_name stops --scale"
    );
    let cfg = Config::from_toml(&read("deploy/compose.toml"), std::iter::empty())
        .expect("deploy/compose.toml is a valid config");
    assert_eq!(cfg.bridge.group_id.as_deref(), Some(GROUP_ID));
    // Compose's default is 10 s: a stopped or scaled-down replica must drain before SIGKILL.
    assert_eq!(bridge["stop_grace_period"].as_str(), Some("40s"));
    assert!(
        40_000 > cfg.bridge.shutdown_timeout_ms,
        "grace 40 s vs drain"
    );

    let prom = yaml("deploy/prometheus/prometheus.yml");
    let scrape = prom["scrape_configs"].as_sequence().unwrap();
    assert_eq!(scrape.len(), 1);
    let job = &scrape[0];
    assert_eq!(job["job_name"].as_str(), Some("mongo-kafka-bridge"));
    assert!(
        job.get("static_configs").is_none(),
        "replicas are found by DNS, not listed"
    );
    let sd = job["dns_sd_configs"].as_sequence().unwrap();
    assert_eq!(sd.len(), 1);
    let names: Vec<&str> = sd[0]["names"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(names, ["bridge"]);
    assert_eq!(sd[0]["type"].as_str(), Some("A"));
    assert_eq!(
        sd[0]["port"].as_u64(),
        Some(u64::from(port_of(&cfg.metrics.listen)))
    );
    // The alert on down targets selects this job.
    assert!(read("deploy/prometheus/alerts.yml").contains(r#"up{job="mongo-kafka-bridge"}"#));
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
