//! `nicpolicy controller`: continuous audit in the cluster. Watch-fed caches (kube-runtime
//! reflectors) of VCDMachines, VCDMachineTemplates, Clusters, VCDClusters, ClusterClasses and
//! VCDClusterTemplates, holding only the fields an audit reads
//! ([`live::keep_audited_fields`]); any change to one of them queues its namespace, so a Cluster or
//! VCDCluster change re-evaluates every machine of its cluster. A queued namespace is evaluated
//! with the same chains as `nicpolicy serve` (and an optional candidate chain) through
//! [`crate::audit`], one namespace at a time (so memory follows the largest namespace, not the
//! queue), and reported as:
//!
//! - a report per namespace ([`report`]: an OpenReports `Report`, or a `PolicyReport`), written
//!   only when its results change;
//! - a Warning Event on each object that newly fails ([`events`]), deduplicated, rate-limited;
//! - Prometheus metrics ([`metrics`]) on `/metrics`, beside `/healthz` and `/readyz`.
//!
//! Policy files are reloaded as `serve` reloads them, every namespace is evaluated again after
//! a reload and on a resync period, only the holder of a Lease writes ([`lease`]), and the
//! objects audited are never written.

pub mod events;
pub mod lease;
pub mod metrics;
pub mod report;
pub mod retry;
mod worker;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::ApiResource;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use nicpolicy_plugin::ObjectKind;
use tokio::sync::{watch, Notify};

use crate::audit::{live, Chains};
use crate::served::config::{ClusterSourceConfig, ServeConfig};
use crate::served::ServeLoadError;
use crate::served::{Served, ServedPolicies};
use crate::{Host, PolicyChain};

use self::lease::{Leadership, LeaseConfig};
use self::metrics::Metrics;
use self::report::{Bounds, Format};
use self::worker::Worker;

/// Field manager of the reports written.
const MANAGER: &str = "nicpolicy-controller";

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// The chains in force: the `nicpolicy serve` configuration.
    pub config: ServeConfig,
    /// The candidate chains (shadow mode): another configuration of the same format, whose
    /// `policies` are evaluated beside the ones in force.
    pub candidate: Option<ServeConfig>,
    /// Only these namespaces; every namespace when empty.
    pub namespaces: Vec<String>,
    /// Every namespace is evaluated again this often.
    pub resync: Duration,
    /// Changes are gathered this long before a namespace is evaluated.
    pub debounce: Duration,
    /// Size bound of each report.
    pub bounds: Bounds,
    /// The kind of report written; the other kind's reports (of a run before a switch) are
    /// removed.
    pub format: Format,
    /// Events per minute on average (0: no Events).
    pub events_per_minute: u32,
    /// Events at once.
    pub events_burst: u32,
    /// Leader election; `None` for a single replica.
    pub lease: Option<LeaseConfig>,
    /// Address of `/metrics`, `/healthz` and `/readyz`.
    pub listen: SocketAddr,
}

/// Why the controller could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// The configuration's policies could not be loaded.
    #[error("{which}: {error}")]
    Load {
        /// `configuration` or `candidate configuration`.
        which: &'static str,
        /// Why.
        error: Box<ServeLoadError>,
    },
    /// The probe and metrics address could not be bound.
    #[error("cannot listen on {address}: {error}")]
    Listen {
        /// The address.
        address: SocketAddr,
        /// Why.
        error: std::io::Error,
    },
    /// The API server refused a start-up request.
    #[error("{0}")]
    Kube(#[from] kube::Error),
    /// The versions to watch could not be found.
    #[error("{0}")]
    Versions(#[from] crate::clusters::versions::VersionError),
}

/// The served chains of a snapshot, by kind.
struct ServedChains<'a>(&'a Served);

impl Chains for ServedChains<'_> {
    fn chain(&self, kind: ObjectKind) -> Option<&PolicyChain> {
        self.0.chains.get(&kind)
    }
}

/// State shared by the watches, the worker and the HTTP handlers.
struct Shared {
    queue: Mutex<BTreeSet<String>>,
    wake: Notify,
    synced: AtomicUsize,
    watches: AtomicUsize,
    /// Watches whose last [`WATCH_FAILURES_UNREADY`] attempts all failed.
    failing: AtomicUsize,
    /// The API server did not answer the last [`PROBE_FAILURES_UNREADY`] probes: the watches
    /// may be hanging without an error ([`probe_api_server`]).
    unreachable: AtomicBool,
    leading: Arc<Leadership>,
    metrics: Metrics,
    namespaces: Vec<String>,
}

impl Shared {
    fn enqueue(&self, namespace: &str) {
        if !self.namespaces.is_empty() && !self.namespaces.iter().any(|n| n == namespace) {
            return;
        }
        let depth = {
            let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            queue.insert(namespace.to_string());
            queue.len()
        };
        self.metrics
            .queue_depth
            .set(i64::try_from(depth).unwrap_or(i64::MAX));
        self.wake.notify_one();
    }

    fn take(&self) -> BTreeSet<String> {
        let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        self.metrics.queue_depth.set(0);
        std::mem::take(&mut queue)
    }

    /// Every cache synced, and no watch failing again and again: with a watch that cannot
    /// reach the API server, new clusters would be unknown, so `/readyz` says so.
    fn ready(&self) -> bool {
        self.synced.load(Ordering::Acquire) >= self.watches.load(Ordering::Acquire)
            && self.failing.load(Ordering::Acquire) == 0
            && !self.unreachable.load(Ordering::Acquire)
    }
}

/// Runs one write while this replica leads: cut when its Lease would lapse, so a write does
/// not wait on a stalled API server past the point where another replica may lead (a request
/// already sent may still be applied; the next leader's write replaces it).
async fn while_leading<T, E: std::fmt::Display>(
    leading: &Leadership,
    write: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, String> {
    let Some(left) = leading.remaining() else {
        return write.await.map_err(|err| err.to_string());
    };
    match tokio::time::timeout(left, write).await {
        Ok(result) => result.map_err(|err| err.to_string()),
        Err(_) => Err(format!(
            "not finished within the {} ms this replica still led",
            left.as_millis()
        )),
    }
}

/// Probes the API server every [`PROBE_INTERVAL`] with the smallest list of a watched kind,
/// under a deadline of the same length. A watch whose API server stops answering (frozen,
/// partitioned) hangs without an error until its own timeout (minutes), so the watches alone
/// cannot tell; after [`PROBE_FAILURES_UNREADY`] probes without an answer in a row `/readyz`
/// fails, until one is answered.
async fn probe_api_server(
    api: Api<DynamicObject>,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let mut failures = 0;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(PROBE_INTERVAL) => {}
            _ = stop.changed() => {}
        }
        if *stop.borrow() {
            return;
        }
        let answered = tokio::time::timeout(
            PROBE_INTERVAL,
            api.list_metadata(&ListParams::default().limit(1)),
        )
        .await
        .is_ok_and(|result| result.is_ok());
        if answered {
            if failures >= PROBE_FAILURES_UNREADY {
                tracing::info!("the API server answers again");
            }
            failures = 0;
            shared.unreachable.store(false, Ordering::Release);
        } else {
            failures += 1;
            if failures == PROBE_FAILURES_UNREADY {
                tracing::warn!(
                    failures,
                    "the API server did not answer: not ready until it does (the caches may be stale)"
                );
                shared.unreachable.store(true, Ordering::Release);
            }
        }
    }
}

/// How often the API server is probed, and the deadline of each probe.
const PROBE_INTERVAL: Duration = Duration::from_secs(2);
/// Probes without an answer in a row after which the controller is not ready.
const PROBE_FAILURES_UNREADY: u32 = 2;

/// Failed attempts in a row after which a watch makes the controller not ready (the watcher
/// backs off 0.8 s doubling between them, so about 6 s of an API server that cannot be reached).
const WATCH_FAILURES_UNREADY: u32 = 3;

/// One watched resource and its cache.
struct Watched {
    resource: ApiResource,
    store: Store<DynamicObject>,
}

/// Loads the configurations, starts the watches and runs until `shutdown` resolves.
///
/// # Errors
/// Start-up failures: policies that cannot be loaded, an address that cannot be bound, an API
/// server that refuses the first requests. Once running, errors are logged and retried.
pub async fn run(
    client: kube::Client,
    host: Host,
    options: Options,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ControllerError> {
    let served = load(&host, options.config.clone(), "configuration")?;
    let candidate = options
        .candidate
        .clone()
        .map(|config| load(&host, config, "candidate configuration"))
        .transpose()?;
    let shared = Arc::new(Shared {
        queue: Mutex::new(BTreeSet::new()),
        wake: Notify::new(),
        synced: AtomicUsize::new(0),
        watches: AtomicUsize::new(usize::MAX),
        failing: AtomicUsize::new(0),
        unreachable: AtomicBool::new(false),
        leading: Arc::new(if options.lease.is_none() {
            Leadership::always()
        } else {
            Leadership::elected()
        }),
        metrics: Metrics::new(),
        namespaces: options.namespaces.clone(),
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });

    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|error| ControllerError::Listen {
            address: options.listen,
            error,
        })?;
    let http = tokio::spawn(serve_http(listener, shared.clone(), stop_rx.clone()));

    let cluster_api_version = match &options.config.clusters {
        ClusterSourceConfig::Kubernetes {
            cluster_api_version,
        } => cluster_api_version.clone(),
        ClusterSourceConfig::Static { .. } => None,
    };
    let watched = start_watches(&client, cluster_api_version.as_deref(), &shared).await?;
    crate::guard::watch(
        client.clone(),
        shared.metrics.unguarded_kinds.clone(),
        "nicpolicy-controller",
    );
    if let Some(first) = watched.first() {
        tokio::spawn(probe_api_server(
            Api::all_with(client.clone(), &first.resource),
            shared.clone(),
            stop_rx.clone(),
        ));
    }

    let lease = options.lease.clone().map(|config| {
        tokio::spawn(lease::run(
            client.clone(),
            config,
            shared.leading.clone(),
            stop_rx.clone(),
        ))
    });
    for (policies, interval) in [
        Some((&served, options.config.reload_interval)),
        candidate
            .as_ref()
            .zip(options.candidate.as_ref())
            .map(|(c, config)| (c, config.reload_interval)),
    ]
    .into_iter()
    .flatten()
    {
        if let Some(interval) = interval {
            // The controller tells reloads by `nicpolicy_controller_policy_generation` and the
            // log, so it observes nothing more.
            let _ = policies.watch(host.clone(), Arc::new(()), interval);
        }
    }

    let mut worker = Worker::new(client, shared.clone(), watched, served, candidate, options);
    worker.run(stop_rx).await;
    if let Some(lease) = lease {
        let _ = lease.await;
    }
    let _ = http.await;
    Ok(())
}

fn load(
    host: &Host,
    config: ServeConfig,
    which: &'static str,
) -> Result<Arc<ServedPolicies>, ControllerError> {
    Served::load_at_start(host, config)
        .map(ServedPolicies::new)
        .map_err(|error| ControllerError::Load {
            which,
            error: Box::new(error),
        })
}

/// Starts one reflector per audited resource the API server serves; each change queues the
/// object's namespace.
async fn start_watches(
    client: &kube::Client,
    cluster_api_version: Option<&str>,
    shared: &Arc<Shared>,
) -> Result<Vec<Watched>, ControllerError> {
    let mut watched = Vec::new();
    // Each kind at the version the API server serves; a CRD that is not installed (no
    // ClusterClass, no VCDClusterTemplate) is left out: a watch on it would never sync.
    let found = live::resources(client, cluster_api_version).await?;
    for missing in &found.missing {
        tracing::info!("{missing}; not watched");
    }
    for resource in found.resources {
        tracing::info!(kind = %resource.kind, version = %resource.api_version, "watching");
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let writer = reflector::store::Writer::new(resource.clone());
        let store = writer.as_reader();
        // Only the fields an audit reads are kept: at 10,000 machines the caches are most of
        // the controller's memory (docs/benchmarks.md).
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(live::trimmer(&resource))
            .reflect(writer);
        let shared_for_task = shared.clone();
        let kind = resource.kind.clone();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            let mut synced = false;
            let mut failures = 0;
            while let Some(event) = stream.next().await {
                let failed = event.is_err();
                if !failed && failures >= WATCH_FAILURES_UNREADY {
                    shared_for_task.failing.fetch_sub(1, Ordering::AcqRel);
                    tracing::info!(kind = %kind, "watch recovered");
                }
                if failed {
                    failures += 1;
                    if failures == WATCH_FAILURES_UNREADY {
                        shared_for_task.failing.fetch_add(1, Ordering::AcqRel);
                        tracing::warn!(kind = %kind, failures, "watch keeps failing: not ready until it recovers");
                    }
                } else {
                    failures = 0;
                }
                match event {
                    Ok(
                        watcher::Event::Apply(o)
                        | watcher::Event::Delete(o)
                        | watcher::Event::InitApply(o),
                    ) => {
                        shared_for_task
                            .enqueue(o.metadata.namespace.as_deref().unwrap_or("default"));
                    }
                    Ok(watcher::Event::InitDone) => {
                        if !synced {
                            synced = true;
                            shared_for_task.synced.fetch_add(1, Ordering::AcqRel);
                            tracing::info!(kind = %kind, "cache synced");
                        }
                        // A relist may have dropped objects: look at every namespace again.
                        shared_for_task.wake.notify_one();
                    }
                    Ok(watcher::Event::Init) => {}
                    Err(err) => tracing::warn!(kind = %kind, error = %err, "watch error; retrying"),
                }
            }
        });
        watched.push(Watched { resource, store });
    }
    shared.watches.store(watched.len(), Ordering::Release);
    Ok(watched)
}

async fn serve_http(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let app = crate::probes::routes::<Shared>().with_state(shared);
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = stop.wait_for(|stopped| *stopped).await;
        })
        .await;
    if let Err(err) = result {
        tracing::error!(error = %err, "probe server failed");
    }
}

impl crate::probes::Probed for Shared {
    fn readiness(&self) -> Result<String, String> {
        if self.ready() {
            Ok("ok".into())
        } else {
            Err("caches syncing, or a watch failing again and again".into())
        }
    }

    fn metrics(&self) -> String {
        // Read now, not when the worker last looked: it may be waiting on the API server.
        self.metrics
            .leader
            .set(i64::from(self.leading.is_leading()));
        self.metrics.encode()
    }
}
