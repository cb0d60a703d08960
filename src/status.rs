//! The live terminal status of `run`: one line per pipeline with events/s, lag, in-flight and
//! committed time, redrawn every second with `indicatif`, shown only when stdout is a terminal
//! (plain logs otherwise).
//!
//! Invariants: the status only reads the metric registry; log lines are written through
//! [`LogWriter`], which hides the status while a line is printed so the two never interleave.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::metrics::read::PipelineSnapshot;

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

    /// Redraws one line per pipeline from `metrics` every second until `cancel` fires.
    pub fn start(&self, metrics: Metrics, pipelines: Vec<String>, cancel: CancellationToken) {
        let style = ProgressStyle::with_template("{spinner:.green} {prefix:<16.bold} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
        let bars: Vec<(String, ProgressBar)> = pipelines
            .into_iter()
            .map(|name| {
                let bar = self.multi.add(ProgressBar::new_spinner());
                bar.set_style(style.clone());
                bar.set_prefix(name.clone());
                (name, bar)
            })
            .collect();
        tokio::spawn(async move {
            let mut previous: Vec<f64> = vec![0.0; bars.len()];
            let mut at = Instant::now();
            loop {
                tokio::select! {
                    () = cancel.cancelled() => break,
                    () = tokio::time::sleep(REFRESH) => {}
                }
                let families = metrics.gather();
                let elapsed = at.elapsed().as_secs_f64().max(0.001);
                at = Instant::now();
                for ((name, bar), before) in bars.iter().zip(previous.iter_mut()) {
                    let s = PipelineSnapshot::read(&families, name);
                    let rate = (s.events - *before).max(0.0) / elapsed;
                    *before = s.events;
                    bar.set_message(render(&s, rate));
                    bar.tick();
                }
            }
            for (_, bar) in &bars {
                bar.finish();
            }
        });
    }
}

/// One pipeline's status line.
pub fn render(s: &PipelineSnapshot, rate: f64) -> String {
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
