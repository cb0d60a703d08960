//! The status page, `/status` on the metrics listener (and `/`, which redirects there):
//! every pipeline with its state, events/s and lag over the last minutes as a small chart, the
//! oplog headroom, in-flight events and bytes, the last commit, and the group's state (README
//! "Status page").
//!
//! The feature's pieces, one file name in every layer: `observe/status_page.rs` (this file: the
//! sampler and the page), `observe/http.rs` (the routes), `tests/faults/status_page.rs` and
//! `tests/faults/status_page.py` (the page in headless Chromium, driven by Playwright).
//!
//! Invariants:
//! - The page is built from the health state (`/readyz`'s reasons, the same words) and the
//!   metric registry only: it changes nothing. Every text from them is HTML-escaped.
//! - Nothing is fetched from elsewhere: no script, style sheet or font from another host; the
//!   page refreshes itself (`<meta http-equiv="refresh">`) every [`REFRESH_S`] seconds.
//! - Memory is bounded: [`SAMPLES`] samples per pipeline, taken every [`SAMPLE_EVERY`].

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::observe::health::{Health, PipelineHealth, now_ms};
use crate::observe::metrics::Metrics;
use crate::observe::metrics::read::{PipelineSnapshot, sum};
use crate::observe::metrics::{HISTORY_HEADROOM, IN_FLIGHT_BYTES};

/// How often a sample is taken.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// Samples kept per pipeline: 10 minutes.
pub(crate) const SAMPLES: usize = 120;
/// The page's refresh interval, in seconds.
const REFRESH_S: u32 = 2;

/// One sample of a pipeline: when, events read and documents copied so far, and the source lag.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    events: f64,
    copied: f64,
    lag_s: Option<f64>,
}

/// The samples of every pipeline, oldest first.
#[derive(Default, Clone)]
pub(crate) struct History {
    samples: Arc<Mutex<BTreeMap<String, VecDeque<Sample>>>>,
}

impl History {
    /// Samples every pipeline every [`SAMPLE_EVERY`] until `cancel` fires.
    pub(crate) fn spawn_sampler(
        &self,
        metrics: Metrics,
        health: Arc<Health>,
        cancel: CancellationToken,
    ) {
        let history = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SAMPLE_EVERY);
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tick.tick() => history.sample(&metrics, &health),
                }
            }
        });
    }

    fn sample(&self, metrics: &Metrics, health: &Health) {
        let families = metrics.gather();
        let names = health.names();
        let mut all = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|name, _| names.contains(name));
        for name in names {
            let s = PipelineSnapshot::read(&families, &name);
            let kept = all.entry(name).or_default();
            if kept.len() == SAMPLES {
                kept.pop_front();
            }
            kept.push_back(Sample {
                at: Instant::now(),
                events: s.events,
                copied: s.copied,
                lag_s: s.source_lag_s,
            });
        }
    }

    /// Documents copied per second over the kept samples of `name` (`None` before two).
    fn copy_rate(&self, name: &str) -> Option<f64> {
        let all = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let kept = all.get(name)?;
        let (first, last) = (kept.front()?, kept.back()?);
        let dt = last.at.duration_since(first.at).as_secs_f64();
        (dt > 0.0).then(|| (last.copied - first.copied) / dt)
    }

    /// Events/s between consecutive samples of `name`, and the lag of each, oldest first.
    fn series(&self, name: &str) -> (Vec<f64>, Vec<f64>) {
        let all = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let Some(kept) = all.get(name) else {
            return (Vec::new(), Vec::new());
        };
        let rates = kept
            .iter()
            .zip(kept.iter().skip(1))
            .map(|(a, b)| {
                let dt = b.at.duration_since(a.at).as_secs_f64().max(0.001);
                ((b.events - a.events) / dt).max(0.0)
            })
            .collect();
        let lags = kept.iter().map(|s| s.lag_s.unwrap_or(0.0)).collect();
        (rates, lags)
    }
}

/// The page: one section per pipeline.
pub(crate) fn render(
    metrics: &Metrics,
    health: &Health,
    history: &History,
    max_age_ms: i64,
) -> String {
    let readiness = health.readiness(max_age_ms);
    let families = metrics.gather();
    let mut out = String::with_capacity(8192);
    let _ = write!(
        out,
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_S}\">\
         <title>mongo-kafka-bridge status</title><style>{STYLE}</style></head><body>\
         <h1>mongo-kafka-bridge</h1><p id=\"overall\" class=\"{}\">{}</p>",
        if readiness.ready { "ok" } else { "bad" },
        if readiness.ready {
            "ready"
        } else {
            "not ready"
        }
    );
    let group: Vec<&String> = readiness
        .lines
        .iter()
        .filter(|l| l.starts_with("group "))
        .collect();
    if !group.is_empty() {
        out.push_str("<section id=\"group\"><h2>Group</h2><ul>");
        for line in group {
            let _ = write!(out, "<li>{}</li>", escape(line));
        }
        out.push_str("</ul></section>");
    }
    for name in health.names() {
        let prefix = format!("pipeline {name}: ");
        let lines: Vec<&str> = readiness
            .lines
            .iter()
            .filter_map(|l| l.strip_prefix(&prefix))
            .collect();
        pipeline(
            &mut out,
            &name,
            &lines,
            &health.pipeline(&name),
            &families,
            history,
        );
    }
    let _ = write!(
        out,
        "<footer>Refreshed every {REFRESH_S} s; charts: the last {} minutes, a sample every {} s. \
         Also: <a href=\"/metrics\">/metrics</a>, <a href=\"/readyz\">/readyz</a>.</footer>\
         </body></html>",
        SAMPLES as u64 * SAMPLE_EVERY.as_secs() / 60,
        SAMPLE_EVERY.as_secs()
    );
    out
}

/// One pipeline's section.
fn pipeline(
    out: &mut String,
    name: &str,
    lines: &[&str],
    health: &PipelineHealth,
    families: &[prometheus::proto::MetricFamily],
    history: &History,
) {
    let s = PipelineSnapshot::read(families, name);
    let labels = [("pipeline", name)];
    let (state, class) = state(health, !lines.is_empty(), &s);
    let _ = write!(
        out,
        "<section class=\"pipeline\" data-pipeline=\"{n}\"><h2>{n} <span class=\"state {class}\">{}</span></h2>",
        escape(&state),
        n = escape(name),
    );
    if let Some(remaining) = s.copy_remaining {
        let total = s.copied + remaining;
        let done = if total > 0.0 { s.copied / total } else { 0.0 };
        let eta = match history.copy_rate(name) {
            Some(rate) if rate > 0.0 => format!("about {:.0} s left", remaining / rate),
            _ => "time left not known yet".to_owned(),
        };
        let _ = write!(
            out,
            "<p>snapshot: {:.0} of about {:.0} documents <progress max=\"1\" \
             value=\"{done:.3}\"></progress> {eta}</p>",
            s.copied, total
        );
    }
    if !lines.is_empty() {
        out.push_str("<ul class=\"reasons\">");
        for line in lines {
            let _ = write!(out, "<li>{}</li>", escape(line));
        }
        out.push_str("</ul>");
    }
    let (rates, lags) = history.series(name);
    let figure =
        |v: Option<f64>, unit: &str| v.map_or("–".to_owned(), |x| format!("{x:.1} {unit}"));
    let committed = s.committed_at.map_or("–".to_owned(), |t| {
        format!("{:.0} s ago", (now_ms() as f64 / 1000.0 - t).max(0.0))
    });
    let _ = write!(
        out,
        "<table><tr><th>events/s</th><th>source lag</th><th>in flight</th><th>last commit</th>\
         <th>oplog headroom</th></tr><tr><td class=\"rate\">{}</td><td>{}</td><td>{:.0} events, {:.0} B</td>\
         <td>{committed}</td><td>{}</td></tr></table>",
        figure(rates.last().copied(), ""),
        figure(s.source_lag_s, "s"),
        s.in_flight,
        sum(families, IN_FLIGHT_BYTES, &labels).unwrap_or(0.0),
        figure(sum(families, HISTORY_HEADROOM, &labels), "s"),
    );
    out.push_str("<div class=\"charts\">");
    chart(out, "events/s", &rates);
    chart(out, "source lag (s)", &lags);
    out.push_str("</div></section>");
}

/// The state's word and its class, from the pipeline's health (`reasons`: `/readyz` gives it
/// some).
fn state(p: &PipelineHealth, reasons: bool, s: &PipelineSnapshot) -> (String, &'static str) {
    if p.elsewhere.load(std::sync::atomic::Ordering::Relaxed) {
        return ("elsewhere (another member runs it)".to_owned(), "idle");
    }
    if p.refused().is_some() {
        return ("refused".to_owned(), "bad");
    }
    if p.failed().is_some() {
        return ("failed".to_owned(), "bad");
    }
    if let Some((owner, until)) = p.standby() {
        let until = crate::event::rfc3339_seconds(until / 1000);
        return (format!("standby, owner {owner} until {until}"), "idle");
    }
    if reasons {
        return ("not ready".to_owned(), "bad");
    }
    if s.copy_remaining.is_some() {
        return ("snapshotting".to_owned(), "ok");
    }
    ("streaming".to_owned(), "ok")
}

/// An inline SVG line chart of `values` (nothing fetched).
fn chart(out: &mut String, title: &str, values: &[f64]) {
    const W: f64 = 240.0;
    const H: f64 = 48.0;
    let max = values.iter().copied().fold(0.0_f64, f64::max).max(1e-9);
    let step = W / (SAMPLES.saturating_sub(1)) as f64;
    let start = W - step * values.len().saturating_sub(1) as f64;
    let mut points = String::new();
    for (i, v) in values.iter().enumerate() {
        let _ = write!(
            points,
            "{:.1},{:.1} ",
            start + step * i as f64,
            H - v / max * (H - 2.0) - 1.0
        );
    }
    let _ = write!(
        out,
        "<figure><figcaption>{title}, max {max:.1}</figcaption><svg width=\"{W}\" height=\"{H}\" \
         viewBox=\"0 0 {W} {H}\" role=\"img\"><polyline fill=\"none\" stroke=\"#2b6cb0\" \
         stroke-width=\"1.5\" points=\"{points}\"/></svg></figure>"
    );
}

/// `text` with `&`, `<`, `>` and `"` escaped.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:1.5em;color:#1a202c}\
h1{font-size:1.3em}h2{font-size:1.1em;margin:.2em 0}\
section{border:1px solid #cbd5e0;border-radius:6px;padding:.6em 1em;margin:.8em 0}\
.state{font-size:.8em;padding:.1em .5em;border-radius:4px}\
.ok{background:#c6f6d5}.bad{background:#fed7d7}.idle{background:#e2e8f0}\
table{border-collapse:collapse}th,td{padding:.2em .8em;text-align:left}\
.charts{display:flex;gap:1.5em}figure{margin:.3em 0}figcaption{font-size:.8em;color:#4a5568}\
footer{font-size:.8em;color:#4a5568}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_escapes_every_text_and_names_each_pipeline_and_its_state() {
        let health = Health::new(["a<b".to_owned()], 120_000);
        let metrics = Metrics::new();
        let page = render(&metrics, &health, &History::default(), 1000);
        assert!(page.contains("data-pipeline=\"a&lt;b\""), "{page}");
        assert!(page.contains("not ready"), "{page}");
        assert!(page.contains("change stream not open"), "{page}");
        assert!(!page.contains("a<b"), "unescaped: {page}");
        health
            .pipeline("a<b")
            .stream_open
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let page = render(&metrics, &health, &History::default(), 1000);
        assert!(page.contains(">streaming<"), "{page}");
        assert!(
            !page.contains("http://") && !page.contains("https://"),
            "nothing fetched"
        );
    }

    #[test]
    fn the_history_keeps_at_most_its_samples_and_forgets_removed_pipelines() {
        let health = Health::new(["a".to_owned()], 120_000);
        let metrics = Metrics::new();
        let history = History::default();
        for _ in 0..SAMPLES + 5 {
            history.sample(&metrics, &health);
        }
        let (rates, lags) = history.series("a");
        assert_eq!((rates.len(), lags.len()), (SAMPLES - 1, SAMPLES));
        let other = Health::new(["b".to_owned()], 120_000);
        history.sample(&metrics, &other);
        assert!(history.series("a").1.is_empty());
    }
}
