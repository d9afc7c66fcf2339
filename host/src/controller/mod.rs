//! `nicpolicy controller`: continuous audit in the cluster. Watch-fed caches (kube-runtime
//! reflectors) of VCDMachines, VCDMachineTemplates, Clusters, VCDClusters, ClusterClasses and
//! VCDClusterTemplates, holding only the fields an audit reads
//! ([`crate::clusters::live::keep_read_fields`]); any change to one of them queues its namespace, so a Cluster or
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
//! With `cloudDirector` in the configuration, the leader also refreshes the org VDCs'
//! inventories from Cloud Director into a ConfigMap (`refresh`, feature `clouddirector`).
//!
//! Policy files are reloaded as `serve` reloads them, every namespace is evaluated again after
//! a reload and on a resync period, only the holder of a Lease writes ([`lease`]), and the
//! objects audited are never written.

pub mod events;
pub mod lease;
pub mod metrics;
#[cfg(feature = "clouddirector")]
pub mod refresh;
pub mod report;
pub mod retry;
mod state;
mod worker;

pub use state::Options;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::reflector;
use kube::runtime::{watcher, WatchStreamExt};
use tokio::sync::{watch, Notify};

use crate::audit::live;
use crate::served::config::{ClusterSourceConfig, ServeConfig};
use crate::served::ServeLoadError;
use crate::served::{Served, ServedPolicies};
use crate::Host;

use self::lease::Leadership;
use self::metrics::Metrics;
use self::state::{Shared, Watched};
use self::worker::Worker;

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
    // With a candidate, both snapshots use one host's cache and store: neither prunes them.
    let sharing = options.candidate.is_some();
    let served = load(&host, options.config.clone(), "configuration", sharing)?;
    let candidate = options
        .candidate
        .clone()
        .map(|config| load(&host, config, "candidate configuration", sharing))
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

    // The inventories refreshed from Cloud Director, by the leader, while configured.
    #[cfg(feature = "clouddirector")]
    tokio::spawn(refresh::run(
        client.clone(),
        shared.clone(),
        served.clone(),
        stop_rx.clone(),
    ));
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
    sharing_the_cache: bool,
) -> Result<Arc<ServedPolicies>, ControllerError> {
    Served::load_at_start(host, config)
        .map(if sharing_the_cache {
            ServedPolicies::sharing_the_cache
        } else {
            ServedPolicies::new
        })
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
        let stream = watcher(api, crate::clusters::live::watch_config(&resource.kind))
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
