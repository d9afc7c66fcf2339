//! `nicpolicy serve` and `nicpolicy review`: the admission webhook, and one review answered
//! from a file.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::ValueEnum;
use nicpolicy::webhook::config::{ClusterSourceConfig, ServeConfig};
use nicpolicy::webhook::{
    server, tls, App, ClusterSource, Endpoint, KindKey, KubeClusters, Server, StaticClusters,
};
use nicpolicy::{Host, HostConfig};

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
    #[command(flatten)]
    logging: LogArgs,
}

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
enum LogFormat {
    Text,
    Json,
}

#[derive(clap::Args)]
pub struct ReviewArgs {
    /// The AdmissionReview (JSON or YAML) kube-apiserver would send.
    #[arg(long, value_name = "FILE")]
    request: PathBuf,
    /// Configuration file, as for `serve`; the built-in CAPVCD policy when omitted.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Files with the Cluster and VCDCluster objects (required unless the configuration reads
    /// clusters from files).
    #[arg(long, value_name = "FILE", num_args = 1..)]
    clusters: Vec<PathBuf>,
    /// The org VDC network inventory, overriding the configuration's.
    #[arg(long, value_name = "FILE")]
    inventory: Option<PathBuf>,
    /// Which endpoint answers: validate (allow or deny) or mutate (JSON patch).
    #[arg(long, value_enum, default_value_t = EndpointArg::Validate)]
    endpoint: EndpointArg,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum EndpointArg {
    Validate,
    Mutate,
}

fn init_logging(args: &LogArgs) -> Result<()> {
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| args.log_level.clone());
    let filter = tracing_subscriber::EnvFilter::try_new(&filter)
        .with_context(|| format!("--log-level {filter:?}"))?;
    // Colour codes only on a terminal: in a pod's log they are noise, and a log line must not
    // carry escape sequences.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let result = match args.log_format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
    result.map_err(|err| anyhow!("cannot set up logging: {err}"))
}

fn read_config(path: Option<&PathBuf>) -> Result<ServeConfig> {
    match path {
        Some(path) => Ok(ServeConfig::read(path)?),
        None => Ok(ServeConfig::builtin_default()),
    }
}

/// One engine sized for the configuration: enough pool slots for every evaluation slot plus
/// reloads, and the largest memory cap any policy has.
fn host_for(config: &ServeConfig) -> Result<Host> {
    let largest = config
        .policies
        .values()
        .flatten()
        .map(|p| p.limits.memory_bytes)
        .max()
        .unwrap_or(0);
    let mut host = HostConfig::default();
    host.max_memory_bytes = host.max_memory_bytes.max(largest);
    host.max_instances = u32::try_from(config.workers * 2 + 8).unwrap_or(u32::MAX);
    Ok(Host::new(host)?)
}

/// `nicpolicy serve`. Errors are start-up failures (exit code 2).
pub fn serve(args: ServeArgs) -> Result<()> {
    init_logging(&args.logging)?;
    let mut config = read_config(args.config.as_ref())?;
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    if !args.clusters.is_empty() {
        config.clusters = ClusterSourceConfig::Static {
            files: args.clusters.clone(),
        };
    }
    if config.tls.is_none() && !args.tls_self_signed {
        bail!("no serving certificate: set tls.certFile and tls.keyFile in the configuration, or pass --tls-self-signed for local use");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("nicpolicy-http")
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(run(args, config))
}

async fn run(args: ServeArgs, config: ServeConfig) -> Result<()> {
    let host = host_for(&config)?;
    let clusters: Arc<dyn ClusterSource> = match &config.clusters {
        ClusterSourceConfig::Static { files } => {
            let source = StaticClusters::read(files)?;
            tracing::info!(vcd_clusters = source.len(), "clusters read from files");
            Arc::new(source)
        }
        ClusterSourceConfig::Kubernetes {
            cluster_api_version,
        } => {
            let client = kube::Client::try_default().await.context(
                "cannot reach the Kubernetes API (in-cluster config or KUBECONFIG); pass --clusters FILE to run without it",
            )?;
            Arc::new(KubeClusters::start(client, cluster_api_version))
        }
    };
    let listen = config.listen;
    let tls_files = config.tls.clone();
    let config_label = args
        .config
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "built-in configuration".to_string());
    let mut app = App::new(host, config, clusters).context("cannot load the policies")?;
    if args.bench_native_capvcd {
        tracing::warn!(
            "benchmark mode: deciding with native CAPVCD rules, not the configured policies"
        );
        app = app.with_native_evaluator(Arc::new(nicpolicy::plugin::capvcd::evaluate));
    }
    let app = Arc::new(app);
    let tls = match (&tls_files, args.tls_self_signed) {
        (None, false) => bail!("no serving certificate: set tls.certFile and tls.keyFile"),
        (_, true) => {
            let generated = tls::SelfSigned::generate(&args.tls_sans)?;
            generated.write_ca_bundle(&args.ca_bundle)?;
            tracing::info!(ca_bundle = %args.ca_bundle.display(), "self-signed certificate generated; clients must trust the CA bundle");
            generated.rustls().await?
        }
        (Some(files), false) => {
            let config = tls::from_files(files).await?;
            tls::watch(
                config.clone(),
                files.clone(),
                app.reviewer().metrics().clone(),
            );
            config
        }
    };
    let listener = std::net::TcpListener::bind(listen)
        .with_context(|| format!("cannot listen on {listen}"))?;
    let server = Server::start(app.clone(), listener, tls)?;
    app.watch_for_changes()
        .context("cannot start the reload watcher")?;
    let served = app.reviewer().policies().get();
    for (kind, chain) in &served.chains {
        tracing::info!(kind = kind.as_str(), policies = %chain.name(), "serving");
    }
    tracing::info!(address = %server.local_addr(), config = %config_label, "listening (HTTPS)");
    server::shutdown_signal().await;
    tracing::info!("shutting down: finishing reviews in flight");
    server.shutdown(SHUTDOWN_GRACE);
    server.wait().await?;
    tracing::info!("stopped");
    Ok(())
}

/// `nicpolicy review`: prints the AdmissionReview response; returns whether it allowed.
pub fn review(args: ReviewArgs) -> Result<bool> {
    let mut config = read_config(args.config.as_ref())?;
    if args.inventory.is_some() {
        config.inventory = args.inventory.clone();
    }
    config.reload_interval = None;
    let files = match (&args.clusters, &config.clusters) {
        (given, _) if !given.is_empty() => given.clone(),
        (_, ClusterSourceConfig::Static { files }) => files.clone(),
        _ => bail!("review runs without a Kubernetes API: pass --clusters FILE with the machine's Cluster and VCDCluster"),
    };
    let clusters = StaticClusters::read(&files)?;
    let text = std::fs::read_to_string(&args.request)
        .with_context(|| format!("{}: cannot read", args.request.display()))?;
    // YAML is accepted for hand-written requests; the server itself only takes JSON.
    let value = nicpolicy::manifest::ManifestFile::parse(&args.request, &text)?
        .objects
        .into_iter()
        .next()
        .map(|o| o.value)
        .ok_or_else(|| anyhow!("{}: the file is empty", args.request.display()))?;
    let kind_name = value
        .pointer("/request/kind/kind")
        .and_then(|k| k.as_str())
        .unwrap_or_default()
        .to_string();
    let kind = KindKey::from_kind(&kind_name).ok_or_else(|| {
        anyhow!(
            "{}: request.kind.kind is {kind_name:?}; nicpolicy reviews VCDMachine and VCDMachineTemplate",
            args.request.display()
        )
    })?;
    let host = host_for(&config)?;
    let app = App::new(host, config, Arc::new(clusters)).context("cannot load the policies")?;
    let endpoint = match args.endpoint {
        EndpointArg::Validate => Endpoint::Validate,
        EndpointArg::Mutate => Endpoint::Mutate,
    };
    let body = serde_json::to_vec(&value)?;
    let answer = app.reviewer().review(endpoint, kind, &body);
    let response: serde_json::Value = serde_json::from_slice(&answer.body)?;
    println!("{}", serde_json::to_string_pretty(&response)?);
    if answer.http_status != 200 {
        bail!(
            "the review was not answered: {}",
            response
                .pointer("/response/status/message")
                .and_then(|m| m.as_str())
                .unwrap_or("malformed request")
        );
    }
    if let Some(patch) = response.pointer("/response/patch").and_then(|p| p.as_str()) {
        use base64::Engine as _;
        let decoded = base64::engine::general_purpose::STANDARD.decode(patch)?;
        eprintln!("patch: {}", String::from_utf8_lossy(&decoded));
    }
    Ok(answer.allowed)
}
