//! The `mongo-kafka-bridge` binary: parses arguments, loads the configuration, runs a command
//! (`run`, `check`, `snapshot`, `offsets …`).
//!
//! Exit codes: 0 clean shutdown, all checks passed or the offsets command done; 1 a fatal
//! error, a failed check, or an offsets command refused or failed; 2 a configuration error. A
//! second SIGINT/SIGTERM exits at once with 130, which is safe: nothing undelivered was ever
//! committed.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use mongo_kafka_bridge::Config;
use mongo_kafka_bridge::cli::check;
use mongo_kafka_bridge::cli::offsets::args::OffsetsArgs;
use mongo_kafka_bridge::cli::offsets::{self as offsets_cli, OffsetsCommand};
use mongo_kafka_bridge::error::{BridgeError, report};
use mongo_kafka_bridge::observe::status::{self, Status};
use mongo_kafka_bridge::observe::telemetry::{self, LogFormat};
use mongo_kafka_bridge::supervisor::app;

/// MongoDB change streams → Kafka, keyed by documentKey; resume tokens committed only after
/// Kafka acknowledged every event up to them.
#[derive(Debug, Parser)]
#[command(name = "mongo-kafka-bridge", version, about)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, value_enum, default_value = "text", global = true)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run every [[pipelines]] entry until SIGTERM/SIGINT (a live status when stdout is a
    /// terminal).
    Run {
        /// Path of the TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
        /// Never draw the live status, even on a terminal.
        #[arg(long)]
        no_status: bool,
    },
    /// Preflight: configuration, MongoDB, Kafka, privileges, oplog window, offsets, sizes; one
    /// ✔/✘ line per check.
    Check {
        /// Path of the TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
        /// Fail when the oplog window is shorter than this many hours (0: only report it).
        #[arg(long, default_value_t = 0.0)]
        min_oplog_window_hours: f64,
    },
    /// Ask a pipeline's owner to copy its namespace(s) again while it keeps streaming (a
    /// snapshot, with snapshot_start/snapshot_end markers); the request waits in the offsets
    /// document while no owner runs.
    Snapshot {
        /// Pipeline name.
        name: String,
        /// Only this namespace (`db.collection`, inside the pipeline's scope).
        #[arg(long)]
        namespace: Option<String>,
        /// Path of the TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Inspect or move the committed positions in the offsets collection.
    Offsets {
        /// Path of the TOML configuration file.
        #[arg(long, short, global = true)]
        config: Option<PathBuf>,
        #[command(subcommand)]
        command: OffsetsArgs,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let live_status = match &cli.command {
        Command::Run { no_status, .. } if !no_status && status::wanted() => Some(Status::new()),
        _ => None,
    };
    match (&live_status, &cli.command) {
        (Some(s), _) => telemetry::init_with_writer(cli.log_format, s.log_writer()),
        (None, Command::Check { .. }) => telemetry::init_quiet(cli.log_format),
        (None, _) => telemetry::init(cli.log_format),
    }
    let path = match &cli.command {
        Command::Run { config, .. }
        | Command::Check { config, .. }
        | Command::Snapshot { config, .. } => config.clone(),
        Command::Offsets {
            config: Some(c), ..
        } => c.clone(),
        Command::Offsets { config: None, .. } => {
            eprintln!("error: --config FILE is required");
            return ExitCode::from(2);
        }
    };
    let config = match Config::load(&path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let threads = config.bridge.runtime_threads(config.pipelines.len(), cpus);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let secrets = config.secrets();
    let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
    match cli.command {
        Command::Run { .. } => {
            let result = runtime.block_on(run(config, &path, live_status));
            // Every pipeline stopped within its bound; a blocking call still waiting on a
            // server that is gone (the driver's server selection) must not hold the exit.
            runtime.shutdown_timeout(Duration::from_millis(200));
            result.map_or_else(|e| failed_at(&path, &e, &secrets), |()| ExitCode::SUCCESS)
        }
        Command::Check {
            min_oplog_window_hours,
            ..
        } => {
            let options = check::CheckOptions {
                min_oplog_window: Duration::from_secs_f64(min_oplog_window_hours.max(0.0) * 3600.0),
            };
            runtime.block_on(run_check(&config, &options, &secrets))
        }
        Command::Snapshot {
            name, namespace, ..
        } => runtime.block_on(run_snapshot(config, name, namespace.as_deref(), &secrets)),
        Command::Offsets { command, .. } => {
            let Some(command) = command.command() else {
                return ExitCode::from(2);
            };
            runtime.block_on(run_offsets(config, command, &secrets))
        }
    }
}

/// The exit code of `e`: 2 for a configuration error, else 1.
fn exit_code(e: &BridgeError) -> ExitCode {
    match e {
        BridgeError::Config { .. } => ExitCode::from(2),
        _ => ExitCode::from(1),
    }
}

/// Prints `e` (secrets redacted, remedies naming the file in use) and gives its exit code.
fn failed(config: &Config, e: &BridgeError, secrets: &[&str]) -> ExitCode {
    eprintln!("error: {}", config.with_config_path(&report(e, secrets)));
    exit_code(e)
}

/// [`failed`] for a run whose configuration was moved: remedies name `path`.
fn failed_at(path: &std::path::Path, e: &BridgeError, secrets: &[&str]) -> ExitCode {
    let text = format!("--config {}", path.display());
    eprintln!(
        "error: {}",
        report(e, secrets).replace("--config FILE", &text)
    );
    exit_code(e)
}

async fn run(
    config: Config,
    path: &std::path::Path,
    live_status: Option<Status>,
) -> Result<(), BridgeError> {
    let stop_status = tokio_util::sync::CancellationToken::new();
    let result = app::run_observed(config, shutdown_signal(), |bridge| {
        if let Some(s) = &live_status {
            s.start(
                bridge.metrics().clone(),
                bridge.health(),
                stop_status.clone(),
            );
        }
        bridge
            .reloader()
            .on_sighup(path.to_owned(), stop_status.clone());
    })
    .await;
    stop_status.cancel();
    result
}

async fn run_check(config: &Config, options: &check::CheckOptions, secrets: &[&str]) -> ExitCode {
    match check::run_with(config, options).await {
        Ok(lines) => {
            for line in &lines {
                println!("{}", config.with_config_path(&line.to_string()));
            }
            if lines.iter().all(|l| l.ok()) {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("error: {}", report(&e, secrets));
            ExitCode::from(2)
        }
    }
}

async fn run_offsets(config: Config, command: OffsetsCommand, secrets: &[&str]) -> ExitCode {
    let mut out = std::io::stdout();
    match offsets_cli::run(&config, &command, &mut out).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => failed(&config, &e, secrets),
    }
}

async fn run_snapshot(
    config: Config,
    name: String,
    namespace: Option<&str>,
    secrets: &[&str],
) -> ExitCode {
    let mut out = std::io::stdout();
    match mongo_kafka_bridge::cli::snapshot::run(&config, &name, namespace, &mut out).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(2),
        Err(e) => failed(&config, &e, secrets),
    }
}

/// Resolves on the first SIGINT/SIGTERM; a second one exits the process at once.
async fn shutdown_signal() {
    wait_for_signal().await;
    tokio::spawn(async {
        wait_for_signal().await;
        eprintln!("second signal: exiting now (undelivered events will be read again)");
        std::process::exit(130);
    });
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
