//! The live terminal status of `run`: one line per pipeline with events/s, lag, in-flight and
//! committed time, redrawn every second with `indicatif`, shown only when stdout is a terminal
//! (plain logs otherwise).
//!
//! Invariants: the status only reads the metric registry; log lines are written through
//! [`LogWriter`], which hides the status while a line is printed so the two never interleave.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio_util::sync::CancellationToken;

use crate::observe::health::Health;
use crate::observe::metrics::Metrics;
use crate::observe::metrics::read::PipelineSnapshot;

/// How often the status is redrawn.
const REFRESH: Duration = Duration::from_secs(1);

/// Whether a live status should be shown (stdout is a terminal).
pub fn wanted() -> bool {
    std::io::stdout().is_terminal()
}

/// The status lines, drawn on stdout.
#[derive(Clone)]
pub struct Status {
    multi: MultiProgress,
}

impl Default for Status {
    fn default() -> Self {
        Self::new()
    }
}

impl Status {
    /// A status drawing on stdout (nothing is drawn until [`Status::start`]).
    pub fn new() -> Self {
        Self {
            multi: MultiProgress::with_draw_target(ProgressDrawTarget::stdout()),
        }
    }

    /// A log writer that suspends the status while it writes to stderr.
    pub fn log_writer(&self) -> LogWriter {
        LogWriter {
            multi: self.multi.clone(),
        }
    }

    /// Redraws one line per pipeline from `metrics` every second until `cancel` fires; the
    /// lines follow the pipelines `health` lists (a reload adds and removes them).
    pub fn start(&self, metrics: Metrics, health: Arc<Health>, cancel: CancellationToken) {
        let style = ProgressStyle::with_template("{spinner:.green} {prefix:<16.bold} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
        let multi = self.multi.clone();
        tokio::spawn(async move {
            // Per pipeline: its line and the counts at the last redraw.
            let mut bars: Vec<(String, ProgressBar, (f64, f64))> = Vec::new();
            let mut at = Instant::now();
            loop {
                let names = health.names();
                bars.retain(|(name, bar, _)| {
                    let keep = names.contains(name);
                    if !keep {
                        bar.finish_and_clear();
                    }
                    keep
                });
                for name in names {
                    if !bars.iter().any(|(n, _, _)| *n == name) {
                        let bar = multi.add(ProgressBar::new_spinner());
                        bar.set_style(style.clone());
                        bar.set_prefix(name.clone());
                        bars.push((name, bar, (0.0, 0.0)));
                    }
                }
                tokio::select! {
                    () = cancel.cancelled() => break,
                    () = tokio::time::sleep(REFRESH) => {}
                }
                let families = metrics.gather();
                let elapsed = at.elapsed().as_secs_f64().max(0.001);
                at = Instant::now();
                for (name, bar, before) in &mut bars {
                    let s = PipelineSnapshot::read(&families, name);
                    let rate = (s.events - before.0).max(0.0) / elapsed;
                    let copy_rate = (s.copied - before.1).max(0.0) / elapsed;
                    *before = (s.events, s.copied);
                    let mut line = render(&s, rate);
                    if let Some(left) = s.copy_remaining {
                        line.push_str(&render_copy(s.copied, left, copy_rate));
                    }
                    bar.set_message(line);
                    bar.tick();
                }
            }
            for (_, bar, _) in &bars {
                bar.finish();
            }
        });
    }
}

/// One pipeline's status line.
pub(crate) fn render(s: &PipelineSnapshot, rate: f64) -> String {
    let secs = |v: Option<f64>| v.map_or_else(|| "–".to_owned(), |v| format!("{v:.0}s"));
    let committed = s
        .committed_at
        .and_then(|t| chrono::DateTime::from_timestamp(t as i64, 0))
        .map_or_else(|| "–".to_owned(), |t| t.format("%H:%M:%S").to_string());
    format!(
        "{} {:>8.0} ev/s  {:>10} events  lag {:>5}  commit lag {:>5}  in flight {:>6}  committed {}",
        if s.stream_open { "open  " } else { "closed" },
        rate,
        s.events,
        secs(s.source_lag_s),
        secs(s.checkpoint_lag_s),
        s.in_flight,
        committed
    )
}

/// The progress of a running snapshot: a bar, the counts, the rate and the time left.
pub(crate) fn render_copy(copied: f64, left: f64, rate: f64) -> String {
    const WIDTH: usize = 20;
    let total = (copied + left).max(1.0);
    let filled = ((copied / total) * WIDTH as f64).round() as usize;
    let eta = if rate > 0.0 {
        format!("{:.0}s", left / rate)
    } else {
        "–".to_owned()
    };
    format!(
        "  snapshot [{}{}] {:>3.0}% {copied:.0} copied, ~{left:.0} left, {rate:.0} docs/s, ETA {eta}",
        "#".repeat(filled.min(WIDTH)),
        "-".repeat(WIDTH - filled.min(WIDTH)),
        copied / total * 100.0,
    )
}

/// A `tracing` writer for stderr that hides the live status while a line is written.
#[derive(Clone)]
pub struct LogWriter {
    multi: MultiProgress,
}

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.multi.suspend(|| std::io::stderr().write(buf))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogWriter;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_snapshot_shows_its_bar_counts_rate_and_eta() {
        assert_eq!(
            render_copy(250.0, 750.0, 50.0),
            "  snapshot [#####---------------]  25% 250 copied, ~750 left, 50 docs/s, ETA 15s"
        );
        assert!(render_copy(0.0, 10.0, 0.0).ends_with("ETA –"));
    }

    #[test]
    fn a_line_shows_rate_lag_and_commit() {
        let s = PipelineSnapshot {
            events: 1200.0,
            source_lag_s: Some(1.4),
            checkpoint_lag_s: Some(2.0),
            committed_at: Some(0.0),
            stream_open: true,
            ..Default::default()
        };
        let text = render(&s, 350.2);
        assert!(text.starts_with("open"), "{text}");
        assert!(
            text.contains("350 ev/s") && text.contains("1200 events"),
            "{text}"
        );
        assert!(
            text.contains("lag    1s") && text.contains("committed 00:00:00"),
            "{text}"
        );
    }
}
