//! Logging: `tracing` with human output in a terminal and JSON lines for machines.
//!
//! Invariant: log lines never carry secrets; callers log configuration through its redacting
//! `Debug` and errors through [`crate::error::report`].

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Log output format (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable, coloured when stderr is a terminal.
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global subscriber. Level from `RUST_LOG` (default `info`). Logs go to stderr.
pub fn init(format: LogFormat) {
    init_with_writer(format, std::io::stderr);
}

/// Like [`init`] for a command whose output is its report (`check`): only errors are logged,
/// and none of librdkafka's (its client reports what the report already names, e.g. a broker
/// that refuses connections), unless `RUST_LOG` asks for more.
pub fn init_quiet(format: LogFormat) {
    install(
        format,
        std::io::stderr,
        "error,mongo_kafka_bridge::kafka::context=off",
    );
}

/// Like [`init`], writing log lines through `writer` (e.g. one that keeps a live terminal
/// status intact).
pub fn init_with_writer<W>(format: LogFormat, writer: W)
where
    W: for<'a> tracing_subscriber::fmt::MakeWriter<'a> + Send + Sync + 'static,
{
    install(format, writer, "info");
}

fn install<W>(format: LogFormat, writer: W, default: &str)
where
    W: for<'a> tracing_subscriber::fmt::MakeWriter<'a> + Send + Sync + 'static,
{
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    let result = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
    };
    // An error means a subscriber is already installed (tests): keep it.
    let _ = result;
}
