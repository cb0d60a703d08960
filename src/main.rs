//! The `mongo-kafka-bridge` binary: parses arguments, loads the configuration, runs a command.
//!
//! Exit codes: 0 clean shutdown or all checks passed; 1 a fatal error or a failed check;
//! 2 a configuration error. A second SIGINT/SIGTERM exits at once with 130, which is safe:
//! nothing undelivered was ever committed.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mongo_kafka_bridge::error::{BridgeError, report};
use mongo_kafka_bridge::telemetry::{self, LogFormat};
use mongo_kafka_bridge::{Config, app, check};

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
    /// Run every [[pipelines]] entry until SIGTERM/SIGINT.
    Run {
        /// Path of the TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Validate the configuration and check MongoDB and Kafka; one ✔/✘ line per check.
    Check {
        /// Path of the TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    telemetry::init(cli.log_format);
    let path = match &cli.command {
        Command::Run { config } | Command::Check { config } => config.clone(),
    };
    let config = match Config::load(&path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let secrets = config.secrets();
    let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
    let result = match cli.command {
        Command::Run { .. } => runtime.block_on(run(config)),
        Command::Check { .. } => return runtime.block_on(run_check(config, &secrets)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ BridgeError::Config { .. }) => {
            eprintln!("error: {}", report(&e, &secrets));
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("error: {}", report(&e, &secrets));
            ExitCode::from(1)
        }
    }
}

async fn run(config: Config) -> Result<(), BridgeError> {
    tracing::info!(config = ?config, "starting");
    app::run(config, shutdown_signal()).await
}

async fn run_check(config: Config, secrets: &[&str]) -> ExitCode {
    match check::run(&config).await {
        Ok(lines) => {
            for line in &lines {
                println!("{line}");
            }
            if lines.iter().all(|l| l.ok) {
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
