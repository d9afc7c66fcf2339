//! `nicpolicy serve`: the admission webhook.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use nicpolicy::clusters::live::KubeClusters;
use nicpolicy::clusters::{ClusterSource, StaticClusters};
use nicpolicy::served::config::{
    ClientAuth, ClusterSourceConfig, Overrides, ServeConfig, TlsFiles,
};
use nicpolicy::webhook::{tls, App, Server};

use super::common::{host_for, init_logging, read_config, shutdown_signal, LogArgs};
use super::{runtime, usage, Failure};

/// How long in-flight reviews may take to finish after SIGTERM.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(25);

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Configuration file (see docs/deploy.md); without it, the built-in CAPVCD policy serves
    /// both kinds and clusters come from the Kubernetes API.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address to listen on, overriding the configuration's `listen` (default 0.0.0.0:9443).
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Read Clusters and VCDClusters from these manifest files instead of the Kubernetes API.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    clusters: Vec<PathBuf>,
    /// Generate a CA and a serving certificate at start (for local use and tests) instead of
    /// reading tls.certFile and tls.keyFile.
    #[arg(long)]
    tls_self_signed: bool,
    /// Extra DNS names or addresses for the self-signed certificate, such as
    /// nicpolicy-webhook.nicpolicy-system.svc.
    #[arg(long = "tls-san", value_name = "NAME", requires = "tls_self_signed")]
    tls_sans: Vec<String>,
    /// Where --tls-self-signed writes the CA bundle (PEM) that clients must trust.
    #[arg(
        long,
        value_name = "FILE",
        default_value = "nicpolicy-ca.crt",
        requires = "tls_self_signed"
    )]
    ca_bundle: PathBuf,
    /// Benchmarks only: decide with the CAPVCD rules compiled into the binary instead of the
    /// configured Wasm policies, to measure what Wasm adds under load.
    #[arg(long, hide = true)]
    bench_native_capvcd: bool,
    /// Benchmarks only: time the stages of every review and show them at /bench/stages.
    #[arg(long, hide = true)]
    bench_stages: bool,
    #[command(flatten)]
    logging: LogArgs,
}

/// `nicpolicy serve`, until SIGTERM or Ctrl-C. What stops it before it listens is bad usage or
/// input (exit code 2: flags, configuration, certificates, policies, cluster files); the
/// engine, the Kubernetes API or the server failing is a run-time failure (exit code 3).
pub fn run(args: ServeArgs) -> Result<u8, Failure> {
    super::allocator::return_large_frees();
    init_logging(&args.logging).map_err(usage)?;
    let mut config = read_config(args.config.as_ref()).map_err(usage)?;
    config.override_with(Overrides {
        listen: args.listen,
        clusters: (!args.clusters.is_empty()).then(|| ClusterSourceConfig::Static {
            files: args.clusters.clone(),
        }),
    });
    if config.tls.is_none() && !args.tls_self_signed {
        return Err(usage(anyhow!("no serving certificate: set tls.certFile and tls.keyFile in the configuration, or pass --tls-self-signed for local use")));
    }
    let runtime_threads = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("nicpolicy-http")
        .build()
        .context("cannot start the async runtime")
        .map_err(runtime)?;
    runtime_threads.block_on(serve(args, config)).map(|()| 0)
}

async fn serve(args: ServeArgs, config: ServeConfig) -> Result<(), Failure> {
    let host = host_for(&config)?;
    let clusters = cluster_source(&config.clusters).await?;
    let listen = config.listen;
    let tls_files = config.tls.clone();
    let client_ca = config.client_auth.clone();
    let config_label = args
        .config
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "built-in configuration".to_string());
    let mut app = App::new(host, config, clusters)
        .context("cannot load the policies")
        .map_err(usage)?;
    if args.bench_native_capvcd {
        tracing::warn!(
            "benchmark mode: deciding with native CAPVCD rules, not the configured policies"
        );
        app = app.with_native_evaluator(Arc::new(nicpolicy::plugin::capvcd::evaluate));
    }
    if args.bench_stages {
        tracing::warn!("benchmark mode: timing the stages of every review (/bench/stages)");
        app = app.with_stage_log();
    }
    let app = Arc::new(app);
    let tls = serving_certificate(&args, tls_files.as_ref(), client_ca.as_ref(), &app)
        .await
        .map_err(usage)?;
    let listener = std::net::TcpListener::bind(listen)
        .with_context(|| format!("cannot listen on {listen}"))
        .map_err(usage)?;
    let server = Server::start(app.clone(), listener, tls).map_err(usage)?;
    app.watch_for_changes()
        .context("cannot start the reload watcher")
        .map_err(runtime)?;
    // Whether kube-apiserver sends the reviews at all: the CAPVCD CRDs' served versions against
    // the registered ones (nicpolicy::guard). Needs the API; without it, said once.
    match kube::Client::try_default().await {
        Ok(client) => nicpolicy::guard::watch(
            client,
            app.reviewer().metrics().unguarded_kinds.clone(),
            "nicpolicy-webhook",
        ),
        Err(err) => tracing::info!(
            error = %err,
            "no Kubernetes API: whether the CRDs serve the registered versions is not checked"
        ),
    }
    let served = app.reviewer().policies().get();
    for (kind, chain) in &served.chains {
        tracing::info!(kind = kind.as_str(), policies = %chain.name(), "serving");
    }
    tracing::info!(address = %server.local_addr(), config = %config_label, "listening (HTTPS)");
    shutdown_signal().await;
    tracing::info!("shutting down: finishing reviews in flight");
    server.shutdown(SHUTDOWN_GRACE);
    server.wait().await.map_err(runtime)?;
    tracing::info!("stopped");
    Ok(())
}

/// Cluster files are input (exit code 2); an unreachable Kubernetes API is a run-time failure.
async fn cluster_source(config: &ClusterSourceConfig) -> Result<Arc<dyn ClusterSource>, Failure> {
    match config {
        ClusterSourceConfig::Static { files } => {
            let source = StaticClusters::read(files).map_err(usage)?;
            tracing::info!(vcd_clusters = source.len(), "clusters read from files");
            Ok(Arc::new(source))
        }
        ClusterSourceConfig::Kubernetes {
            cluster_api_version,
        } => {
            let client = kube::Client::try_default().await.context(
                "cannot reach the Kubernetes API (in-cluster config or KUBECONFIG); pass --clusters FILE to run without it",
            ).map_err(runtime)?;
            Ok(Arc::new(KubeClusters::start(
                client,
                cluster_api_version.as_deref(),
            )))
        }
    }
}

/// The certificate to serve: generated (`--tls-self-signed`), or read from the configured
/// files and watched for rotation.
async fn serving_certificate(
    args: &ServeArgs,
    files: Option<&TlsFiles>,
    client_ca: Option<&ClientAuth>,
    app: &App,
) -> Result<axum_server::tls_rustls::RustlsConfig> {
    match (files, args.tls_self_signed) {
        (None, false) => bail!("no serving certificate: set tls.certFile and tls.keyFile"),
        (_, true) => {
            let generated = tls::SelfSigned::generate(&args.tls_sans)?;
            generated.write_ca_bundle(&args.ca_bundle)?;
            tracing::info!(ca_bundle = %args.ca_bundle.display(), "self-signed certificate generated; clients must trust the CA bundle");
            Ok(generated.rustls(client_ca)?)
        }
        (Some(files), false) => {
            let config = tls::from_files(files, client_ca)?;
            tls::watch(
                config.clone(),
                files.clone(),
                client_ca.cloned(),
                app.reviewer().metrics().clone(),
            );
            Ok(config)
        }
    }
}
