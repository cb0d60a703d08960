//! The suite's machinery: what every scenario gets ([`Ctx`]), the scenarios run one after
//! another with their results as table rows ([`Suite`], [`Row`]), progress lines ([`say!`]), and
//! the turns that keep the binary's ordinary tests from running beside the suite ([`turn`]).

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Instant;

use futures::FutureExt;
use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::common::servers::Instance;
use crate::common::verdict::Verdict;

/// `MKB_FAULTS_LONG=1`: the long form (more kills, longer outages, more fuzz inputs).
pub fn long_form() -> bool {
    std::env::var("MKB_FAULTS_LONG").ok().as_deref() == Some("1")
}

/// `MKB_FAULTS_REPEAT=N`: the server scenarios run N times in a row (default 1), and the
/// suite ends with each scenario's pass count ([`tally`]).
pub fn repeat() -> usize {
    std::env::var("MKB_FAULTS_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(1)
}

/// Each scenario's passes of its runs, and its recovery times (min/median/max, s), as a
/// Markdown table.
pub fn tally(rows: &[Row]) -> String {
    let mut by: std::collections::BTreeMap<&str, (usize, usize, Vec<f64>)> = Default::default();
    for r in rows {
        let e = by.entry(&r.scenario).or_default();
        e.1 += 1;
        if r.problems.is_empty() && !r.outcome.contains("FAIL") {
            e.0 += 1;
        }
        e.2.extend(r.recovery_s);
    }
    let mut out =
        String::from("| scenario | passed | recovery min / median / max (s) |\n|---|---|---|\n");
    for (scenario, (passed, runs, mut rec)) in by {
        rec.sort_by(f64::total_cmp);
        let figures = match (rec.first(), rec.get(rec.len() / 2), rec.last()) {
            (Some(a), Some(m), Some(b)) => format!("{a:.1} / {m:.1} / {b:.1}"),
            _ => "–".to_owned(),
        };
        out.push_str(&format!("| {scenario} | {passed}/{runs} | {figures} |\n"));
    }
    out
}

/// Prints a progress line (visible with `--nocapture`).
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        eprintln!("[faults {:>7.1}s] {}", $crate::suite::since_start(), format!($($arg)*))
    };
}

static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// Seconds since the suite started.
pub fn since_start() -> f64 {
    START.get_or_init(Instant::now).elapsed().as_secs_f64()
}

/// The broker `scripts/services up` starts when not told: `$MKB_BROKER`, else Apache Kafka.
pub fn default_broker() -> String {
    std::env::var("MKB_BROKER")
        .ok()
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| "kafka".to_owned())
}

/// Whether `MKB_FAULTS_ONLY` (a comma-separated list; unset or empty: everything) names `name`.
pub fn selected(name: &str) -> bool {
    let everything = std::env::var("MKB_FAULTS_ONLY").map_or(true, |l| l.trim().is_empty());
    everything || named(name)
}

/// Whether `MKB_FAULTS_ONLY` names `name` itself (not merely empty: everything).
pub fn named(name: &str) -> bool {
    std::env::var("MKB_FAULTS_ONLY").is_ok_and(|list| list.split(',').any(|s| s.trim() == name))
}

/// The suite holds it whole, each ordinary test of the binary a share: the ordinary tests run
/// beside each other (as many as the test harness's threads), never beside the suite, whose
/// figures (recovery times, memory, failover) assume it has the machine to itself.
static TURNS: LazyLock<RwLock<()>> = LazyLock::new(|| RwLock::new(()));

/// The turn of an ordinary test of module `module`: `None` (skipped, said why) when
/// `MKB_FAULTS_ONLY` lists other names, else held until the test ends.
pub async fn turn(module: &str) -> Option<RwLockReadGuard<'static, ()>> {
    if !selected(module) {
        eprintln!("skipped: MKB_FAULTS_ONLY does not name {module}");
        return None;
    }
    Some(TURNS.read().await)
}

/// The suite's turn: it waits for the ordinary tests that hold one, and holds the next back.
pub async fn suite_turn() -> RwLockWriteGuard<'static, ()> {
    TURNS.write().await
}

/// What every scenario gets.
#[derive(Clone)]
pub struct Ctx {
    /// `scripts/services`.
    pub script: PathBuf,
    pub long: bool,
    /// Configs and bridge logs of this run (kept when a scenario fails).
    pub dir: PathBuf,
    pub seed: u64,
}

impl Ctx {
    /// A services instance name unique to this run.
    pub fn instance(&self, scenario: &str) -> String {
        format!("faults-{scenario}-{}", std::process::id())
    }

    /// Starts the servers of `scenario` (`scripts/services up --timeout 90 EXTRA`).
    pub fn up(&self, scenario: &str, extra: &[&str]) -> Instance {
        let args = [&["--timeout", "90"], extra].concat();
        Instance::up(&self.script, &self.instance(scenario), &args)
    }
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "panic".to_owned())
}

#[derive(Default)]
pub struct Suite {
    pub rows: Vec<Row>,
    pub failures: Vec<String>,
}

impl Suite {
    /// Takes in the rows and failures of a lane (`main.rs`, `lanes`).
    pub fn absorb(&mut self, lane: Suite) {
        self.rows.extend(lane.rows);
        self.failures.extend(lane.failures);
    }

    /// Runs `scenario` when `MKB_FAULTS_ONLY` selects `name`; a panic fails its row.
    pub async fn run<Fut>(&mut self, name: &str, label: &str, scenario: Fut)
    where
        Fut: Future<Output = Vec<Row>>,
    {
        if !selected(name) {
            return;
        }
        say!("── {label}");
        let started = Instant::now();
        match AssertUnwindSafe(scenario).catch_unwind().await {
            Ok(rows) => {
                for mut row in rows {
                    if !row.problems.is_empty() {
                        row.outcome = format!("**FAIL**: {}", row.problems.join("; "));
                        self.failures.push(format!(
                            "{}: {}",
                            row.scenario,
                            row.problems.join("; ")
                        ));
                    }
                    self.rows.push(row);
                }
            }
            Err(p) => {
                let text = panic_text(&*p);
                say!("{label}: FAILED: {text}");
                let mut row = Row::new(label);
                row.seconds = started.elapsed().as_secs_f64();
                row.outcome = "**FAIL**".to_owned();
                self.rows.push(row);
                self.failures.push(format!("{label}: {text}"));
            }
        }
    }
}

/// One line of the results table.
#[derive(Debug, Clone, Default)]
pub struct Row {
    pub scenario: String,
    pub runs: String,
    pub writes: Option<usize>,
    pub delivered: Option<usize>,
    pub missing: Option<usize>,
    pub duplicates: Option<usize>,
    pub peak_rss_mib: Option<f64>,
    pub recovery_s: Option<f64>,
    pub seconds: f64,
    pub outcome: String,
    /// Failed checks that lose no data (observability): the scenario completes, its numbers
    /// are reported, and the suite fails.
    pub problems: Vec<String>,
}

impl Row {
    pub fn new(scenario: &str) -> Self {
        Self {
            scenario: scenario.to_owned(),
            outcome: "pass".to_owned(),
            ..Self::default()
        }
    }

    /// Records a failed check when `ok` is false.
    pub fn check(&mut self, ok: bool, problem: impl FnOnce() -> String) {
        if !ok {
            let text = problem();
            crate::say!("{}: FAILED CHECK: {text}", self.scenario);
            self.problems.push(text);
        }
    }

    /// Records the data checks of `v`: nothing missing, per-document order, nothing MongoDB
    /// does not have.
    pub fn check_sound(&mut self, v: &Verdict) {
        self.check(v.missing == 0, || {
            format!(
                "{} of {} events missing in Kafka, first {:?}",
                v.missing, v.writes, v.first_missing
            )
        });
        self.check(v.order_violations.is_empty(), || {
            format!("per-document order broken: {:?}", v.order_violations)
        });
        self.check(v.unexpected == 0, || {
            format!("{} records of events MongoDB does not have", v.unexpected)
        });
    }

    /// [`Row::check_sound`] as one check for one of several pipelines, named `name`.
    pub fn check_sound_of(&mut self, name: &str, v: &Verdict) {
        self.check(
            v.missing == 0 && v.unexpected == 0 && v.order_violations.is_empty(),
            || {
                format!(
                    "{name}: {} of {} missing (first {:?}), {} unexpected, order {:?}",
                    v.missing, v.writes, v.first_missing, v.unexpected, v.order_violations
                )
            },
        );
    }

    /// Sets what ran, the recovery time and the time taken since `started`.
    pub fn finish(&mut self, runs: impl Into<String>, recovery_s: Option<f64>, started: Instant) {
        self.runs = runs.into();
        self.recovery_s = recovery_s;
        self.seconds = started.elapsed().as_secs_f64();
    }

    pub fn with_verdict(mut self, v: &Verdict) -> Self {
        self.writes = Some(v.writes);
        self.delivered = Some(v.unique);
        self.missing = Some(v.missing);
        self.duplicates = Some(v.duplicates);
        self
    }
}

fn cell<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "–".to_owned(), |v| v.to_string())
}

/// The results as a Markdown table.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| scenario | runs | writes | delivered (unique) | missing | duplicates | peak RSS (MiB) | recovery (s) | took (s) | result |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {:.0} | {} |\n",
            r.scenario,
            r.runs,
            cell(r.writes),
            cell(r.delivered),
            cell(r.missing),
            cell(r.duplicates),
            cell(r.peak_rss_mib.map(|m| format!("{m:.1}"))),
            cell(r.recovery_s.map(|s| format!("{s:.1}"))),
            r.seconds,
            r.outcome,
        ));
    }
    out
}
