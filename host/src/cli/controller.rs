//! `nicpolicy controller`: the continuous audit in the cluster (see `nicpolicy::controller`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use nicpolicy::controller::lease::LeaseConfig;
use nicpolicy::controller::report::{Bounds, Format};
use nicpolicy::controller::{self, Options};

use super::common::{host_for, init_logging, read_config, shutdown_signal, LogArgs};
use super::{runtime, usage, Failure};

#[derive(clap::Args)]
pub struct ControllerArgs {
    /// Configuration file, in the format of `nicpolicy serve` (policies per kind, inventory,
    /// reload); the built-in CAPVCD policy for both kinds when omitted.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// A second configuration file of the same format whose policies are the candidate chain
    /// (shadow mode): each object is also evaluated with it, and the differences appear in the
    /// reports and metrics.
    #[arg(long, value_name = "FILE")]
    candidate_config: Option<PathBuf>,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// Only this namespace (repeatable); every namespace when omitted.
    #[arg(short = 'n', long = "namespace", value_name = "NAMESPACE")]
    namespaces: Vec<String>,
    /// Evaluate every namespace again this often, like 10m.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = nicpolicy::limits::parse_duration)]
    resync: Duration,
    /// Gather changes this long before evaluating a namespace.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = nicpolicy::limits::parse_duration)]
    debounce: Duration,
    /// Results per report at most (failures kept first; the summary counts everything).
    #[arg(long, value_name = "N", default_value_t = Bounds::default().max_results)]
    max_report_results: usize,
    /// The reports written: openreports (openreports.io/v1alpha1 Reports) or wgpolicyk8s
    /// (wgpolicyk8s.io/v1alpha2 PolicyReports). Reports of the other kind this controller wrote
    /// before are removed.
    #[arg(long, value_name = "FORMAT", default_value = "openreports")]
    report_format: Format,
    /// Events per minute on objects that newly fail (0: none).
    #[arg(long, value_name = "N", default_value_t = 60)]
    events_per_minute: u32,
    /// Events at once before the rate applies.
    #[arg(long, value_name = "N", default_value_t = 30)]
    events_burst: u32,
    /// Hold a coordination.k8s.io Lease so only one replica writes.
    #[arg(long)]
    leader_elect: bool,
    /// Name of the Lease.
    #[arg(long, value_name = "NAME", default_value = "nicpolicy-controller")]
    lease_name: String,
    /// Namespace of the Lease (default: $POD_NAMESPACE, else nicpolicy-system).
    #[arg(long, value_name = "NAMESPACE")]
    lease_namespace: Option<String>,
    /// How long a Lease holds without renewal.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = nicpolicy::limits::parse_duration)]
    lease_duration: Duration,
    #[command(flatten)]
    logging: LogArgs,
}

/// Runs `nicpolicy controller` until SIGTERM. Bad configuration is a usage error (exit code
/// 2), anything after start a run-time failure (3).
pub fn run(args: ControllerArgs) -> Result<u8, Failure> {
    super::allocator::return_large_frees();
    init_logging(&args.logging).map_err(usage)?;
    let config = read_config(args.config.as_ref()).map_err(usage)?;
    let candidate = args
        .candidate_config
        .as_ref()
        .map(|path| read_config(Some(path)))
        .transpose()
        .map_err(usage)?;
    let host = host_for(&config)?;
    let identity = std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| format!("nicpolicy-controller-{}", std::process::id()));
    let lease = args.leader_elect.then(|| LeaseConfig {
        name: args.lease_name.clone(),
        namespace: args
            .lease_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .unwrap_or_else(|| "nicpolicy-system".to_string()),
        identity,
        duration: args.lease_duration,
    });
    let options = Options {
        config,
        candidate,
        namespaces: args.namespaces,
        resync: args.resync,
        debounce: args.debounce,
        bounds: Bounds {
            max_results: args.max_report_results.max(1),
            ..Bounds::default()
        },
        format: args.report_format,
        events_per_minute: args.events_per_minute,
        events_burst: args.events_burst,
        lease,
        listen: args.listen,
    };
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .map_err(runtime)?;
    tokio.block_on(async move {
        let client = kube::Client::try_default()
            .await
            .context("no Kubernetes API to watch (in-cluster configuration or kubeconfig)")
            .map_err(usage)?;
        tracing::info!(listen = %options.listen, "nicpolicy controller starting");
        controller::run(client, host, options, shutdown_signal())
            .await
            .map_err(|err| match err {
                controller::ControllerError::Load { .. } => usage(err),
                other => runtime(other),
            })?;
        Ok(0)
    })
}
