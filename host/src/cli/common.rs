//! What the long-running commands share (`serve`, `controller`, `review`): logging, the serve
//! configuration, the engine sized for it, the shutdown signal. Commands share through this
//! module and the other named ones (`policy_args`, `render`, `out`), never through each other.

use std::path::PathBuf;

use anyhow::{anyhow, Context, Result};
use clap::ValueEnum;
use nicpolicy::compiler::CompilerProcess;
use nicpolicy::served::ServeConfig;
use nicpolicy::{Host, HostConfig};

use super::{runtime, Failure};

#[derive(clap::Args)]
pub struct LogArgs {
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Log filter, like info or nicpolicy=debug (RUST_LOG works too).
    #[arg(long, value_name = "FILTER", default_value = "info")]
    log_level: String,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

pub fn init_logging(args: &LogArgs) -> Result<()> {
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| args.log_level.clone());
    let filter = tracing_subscriber::EnvFilter::try_new(&filter)
        .with_context(|| format!("--log-level {filter:?}"))?;
    // Colour codes only on a terminal: in a pod's log they are noise, and a log line must not
    // carry escape sequences.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi);
    let result = match args.log_format {
        LogFormat::Json => builder
            .with_writer(std::io::stderr)
            .json()
            .flatten_event(true)
            .try_init(),
        // Request data in a text line is written escaped (super::log_writer).
        LogFormat::Text => builder
            .with_writer(super::log_writer::EscapingStderr { ansi })
            .try_init(),
    };
    result.map_err(|err| anyhow!("cannot set up logging: {err}"))
}

pub fn read_config(path: Option<&PathBuf>) -> Result<ServeConfig> {
    match path {
        Some(path) => Ok(ServeConfig::read(path)?),
        None => Ok(ServeConfig::builtin_default()),
    }
}

/// One engine sized for the configuration: enough pool slots for every evaluation slot plus
/// reloads, and the largest memory cap any policy has. Failing to start it is a run-time
/// failure (exit code 3), as in `eval`.
pub fn host_for(config: &ServeConfig) -> Result<Host, Failure> {
    let largest = config
        .policies
        .values()
        .flatten()
        .map(|p| p.spec.limits.memory_bytes)
        .max()
        .unwrap_or(0);
    let mut host = HostConfig::default();
    host.max_memory_bytes = host.max_memory_bytes.max(largest);
    host.max_instances = u32::try_from(config.workers * 2 + 8).unwrap_or(u32::MAX);
    // Every compile in a child process of this binary, killed at the time limit, its data
    // limited: no module can take the server's memory or keep a core after its answer.
    host.compile_timeout = config.compile.timeout;
    host.compile_bounds = config.compile.bounds;
    host.compiler = Some(
        CompilerProcess::this_program(&[crate::COMPILE_MODULE], config.compile.memory_bytes)
            .map_err(|err| runtime(anyhow!("cannot find this program to compile in: {err}")))?,
    );
    Host::new(host).map_err(runtime)
}

/// Resolves on SIGTERM (what the kubelet sends) or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
