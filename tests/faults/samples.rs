//! Samples of a bridge process under an outage, taken every 200 ms in a thread ([`Sampler`]):
//! its RSS, its `/readyz` answer and the records and bytes it has in flight; and what they
//! show around the outage.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::bridge::rss_kib;
use crate::common::observe::{fetch, metric_sum};

/// One observation of the bridge: RSS and `/readyz`.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub at: Instant,
    pub rss_kib: Option<u64>,
    pub ready: Option<u16>,
    /// `mongo_kafka_bridge_in_flight_events` and `…_in_flight_bytes` (summed over pipelines).
    pub in_flight: Option<(u64, u64)>,
}

/// Samples RSS of `pid` (when given) and `/readyz` every 200 ms in a thread.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<Sample>>>,
}

impl Sampler {
    pub fn start(pid: Option<u32>, addr: String) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let s = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut out = Vec::new();
            while !s.load(Ordering::Relaxed) {
                out.push(Sample {
                    at: Instant::now(),
                    rss_kib: pid.and_then(rss_kib),
                    ready: fetch(&addr, "/readyz").map(|(c, _)| c),
                    in_flight: fetch(&addr, "/metrics").map(|(_, m)| {
                        (
                            metric_sum(&m, "mongo_kafka_bridge_in_flight_events", &[]) as u64,
                            metric_sum(&m, "mongo_kafka_bridge_in_flight_bytes", &[]) as u64,
                        )
                    }),
                });
                std::thread::sleep(Duration::from_millis(200));
            }
            out
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }

    pub fn finish(mut self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .map(|t| t.join().expect("sampler thread"))
            .unwrap_or_default()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// How many samples from `from` to `to` found the bridge not ready.
pub fn not_ready_between(samples: &[Sample], from: Instant, to: Instant) -> usize {
    samples
        .iter()
        .filter(|s| s.at >= from && s.at <= to && s.ready.is_some_and(|c| c != 200))
        .count()
}

/// When the bridge was first ready at or after `from`.
pub fn first_ready_after(samples: &[Sample], from: Instant) -> Option<Instant> {
    samples
        .iter()
        .find(|s| s.at >= from && s.ready == Some(200))
        .map(|s| s.at)
}

/// KiB in MiB.
pub fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}
