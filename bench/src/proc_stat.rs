//! The process's own CPU time and peak RSS, from `/proc/self` (Linux; zero elsewhere), and the
//! figures line the limit programs print with them.

/// User + system CPU seconds of this process (all threads) so far.
pub fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // `rest` starts at field 3 (state): utime is field 14 → index 11. USER_HZ is 100 on Linux.
    (ticks(11) + ticks(12)) / 100.0
}

/// Peak resident set size (`VmHWM`) in KiB.
pub fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// The JSON line of a limit program: `events` moved in `secs` (`bytes` of events read),
/// `failed` deliveries, `cpu` seconds, with the rates derived and the peak RSS.
pub fn figures(events: u64, secs: f64, bytes: u64, failed: u64, cpu: f64) -> serde_json::Value {
    serde_json::json!({
        "events": events,
        "secs": secs,
        "rate": events as f64 / secs.max(1e-9),
        "mb_per_s": bytes as f64 / 1e6 / secs.max(1e-9),
        "failed": failed,
        "cpu_s": cpu,
        "cpu_us_per_event": cpu * 1e6 / (events.max(1) as f64),
        "peak_rss_kib": peak_rss_kib(),
    })
}
