//! `nicpolicy controller`: continuous audit in the cluster. Watch-fed caches (kube-runtime
//! reflectors) of VCDMachines, VCDMachineTemplates, Clusters, VCDClusters, ClusterClasses and
//! VCDClusterTemplates, holding only the fields an audit reads
//! ([`live::keep_audited_fields`]); any change to one of them queues its namespace, so a Cluster or
//! VCDCluster change re-evaluates every machine of its cluster. A queued namespace is evaluated
//! with the same chains as `nicpolicy serve` (and an optional candidate chain) through
//! [`crate::audit`], one namespace at a time (so memory follows the largest namespace, not the
//! queue), and reported as:
//!
//! - a PolicyReport per namespace ([`report`]), written only when its results change;
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

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::ApiResource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use nicpolicy_plugin::ObjectKind;
use tokio::sync::{watch, Notify};

use crate::audit::{self, live, Chains, Finding, Inputs, Summary};
use crate::served::config::{ClusterSourceConfig, ServeConfig};
use crate::served::ServeLoadError;
use crate::served::{Served, ServedPolicies};
use crate::{Host, PolicyChain};

use self::events::EventGate;
use self::lease::{Leadership, LeaseConfig};
use self::metrics::Metrics;
use self::report::Bounds;
use self::retry::Retries;

/// Field manager of the PolicyReports written.
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
    /// Size bound of each PolicyReport.
    pub bounds: Bounds,
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
async fn while_leading<T>(
    leading: &Leadership,
    write: impl std::future::Future<Output = Result<T, kube::Error>>,
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
        ClusterSourceConfig::Static { .. } => "v1beta1".to_string(),
    };
    let watched = start_watches(&client, &cluster_api_version, &shared).await?;
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

    let mut worker = Worker {
        client: client.clone(),
        shared: shared.clone(),
        watched,
        served,
        candidate,
        options,
        written: HashMap::new(),
        summaries: BTreeMap::new(),
        gate: None,
        recorder: Recorder::new(
            client,
            Reporter {
                controller: MANAGER.to_string(),
                instance: std::env::var("POD_NAME").ok(),
            },
        ),
        generations: (0, 0),
        was_leading: false,
        retries: Retries::default(),
    };
    worker.gate = (worker.options.events_per_minute > 0).then(|| {
        EventGate::new(
            worker.options.events_per_minute,
            worker.options.events_burst.max(1),
        )
    });
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
    Served::load(host, config, 1)
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
    cluster_api_version: &str,
    shared: &Arc<Shared>,
) -> Result<Vec<Watched>, ControllerError> {
    let mut watched = Vec::new();
    for resource in live::resources(cluster_api_version) {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        // A CRD that is not installed (no ClusterClass, no VCDClusterTemplate) is left out: a
        // watch on it would never sync.
        match api.list_metadata(&ListParams::default().limit(1)).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {
                tracing::info!(kind = %resource.kind, version = %resource.api_version, "not served by this cluster; not watched");
                continue;
            }
            Err(err) => return Err(err.into()),
        }
        let writer = reflector::store::Writer::new(resource.clone());
        let store = writer.as_reader();
        // Only the fields an audit reads are kept: at 10,000 machines the caches are most of
        // the controller's memory (docs/benchmarks.md).
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(live::keep_audited_fields)
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

/// The evaluation loop and what it remembers between passes.
struct Worker {
    client: kube::Client,
    shared: Arc<Shared>,
    watched: Vec<Watched>,
    served: Arc<ServedPolicies>,
    candidate: Option<Arc<ServedPolicies>>,
    options: Options,
    /// Fingerprint of the report last written (or found) in each namespace.
    written: HashMap<String, String>,
    /// Totals of each namespace, for the gauges.
    summaries: BTreeMap<String, Summary>,
    gate: Option<EventGate>,
    recorder: Recorder,
    generations: (u64, u64),
    was_leading: bool,
    /// Namespaces whose report or Events failed, waiting with backoff.
    retries: Retries,
}

impl Worker {
    async fn run(&mut self, mut stop: watch::Receiver<bool>) {
        let mut next_resync = tokio::time::Instant::now() + self.options.resync;
        loop {
            tokio::select! {
                _ = self.shared.wake.notified() => {}
                _ = tokio::time::sleep_until(next_resync) => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = stop.changed() => {}
            }
            if *stop.borrow() {
                tracing::info!("shutting down");
                return;
            }
            let leading = self.shared.leading.is_leading();
            self.shared.metrics.leader.set(i64::from(leading));
            let generations = (
                self.served.get().generation,
                self.candidate.as_ref().map_or(0, |c| c.get().generation),
            );
            self.shared
                .metrics
                .policy_generation
                .set(i64::try_from(generations.0).unwrap_or(i64::MAX));
            let mut everything = false;
            if tokio::time::Instant::now() >= next_resync {
                next_resync = tokio::time::Instant::now() + self.options.resync;
                everything = true;
            }
            if generations != self.generations {
                if self.generations != (0, 0) {
                    tracing::info!(
                        generation = generations.0,
                        "policies changed; evaluating every namespace"
                    );
                }
                self.generations = generations;
                everything = true;
            }
            if leading && !self.was_leading {
                // Another replica may have written since: read the reports again.
                self.written.clear();
                if let Err(err) = self.read_reports().await {
                    // Each namespace's report is then read when it is first evaluated; only
                    // reports of namespaces emptied meanwhile are left until a later start.
                    tracing::warn!(error = %err, "cannot list the PolicyReports written before");
                }
                everything = true;
            }
            self.was_leading = leading;
            if everything {
                for namespace in self.known_namespaces() {
                    self.shared.enqueue(&namespace);
                }
            }
            for namespace in self.retries.due(tokio::time::Instant::now()) {
                self.shared.enqueue(&namespace);
            }
            if !self.shared.ready() || !leading {
                continue;
            }
            // Gather the burst of changes one edit causes (a Cluster and its machines).
            tokio::time::sleep(self.options.debounce).await;
            let batch = self.shared.take();
            if !batch.is_empty() {
                self.pass(batch, &stop).await;
            }
        }
    }

    /// Namespaces holding audited objects, and those that still have a report.
    fn known_namespaces(&self) -> BTreeSet<String> {
        let mut namespaces: BTreeSet<String> = self.written.keys().cloned().collect();
        for watched in &self.watched {
            for object in watched.store.state() {
                namespaces.insert(
                    object
                        .metadata
                        .namespace
                        .clone()
                        .unwrap_or_else(|| "default".into()),
                );
            }
        }
        namespaces
    }

    /// Evaluates and reports the namespaces of `batch`, one at a time: only one namespace's
    /// objects are copied out of the caches and evaluated at once, however many are queued.
    async fn pass(&mut self, batch: BTreeSet<String>, stop: &watch::Receiver<bool>) {
        let started = Instant::now();
        // The caches' own objects (shared, not copied), by namespace and watched resource.
        let mut objects: BTreeMap<String, Vec<(usize, Arc<DynamicObject>)>> =
            batch.iter().map(|ns| (ns.clone(), Vec::new())).collect();
        for (index, watched) in self.watched.iter().enumerate() {
            for object in watched.store.state() {
                let namespace = object.metadata.namespace.as_deref().unwrap_or("default");
                if let Some(list) = objects.get_mut(namespace) {
                    list.push((index, object));
                }
            }
        }
        let mut evaluated = 0;
        // A namespace waiting out a failed write is left to its retry, however often its
        // objects change meanwhile.
        let now = tokio::time::Instant::now();
        objects.retain(|namespace, _| !self.retries.holding(namespace, now));
        let mut pending = objects.into_iter();
        while let Some((namespace, list)) = pending.next() {
            // A first pass over a large cluster takes a while: stop between namespaces when
            // shutting down or when another replica took over, and leave the rest queued.
            if *stop.borrow() || !self.shared.leading.is_leading() {
                self.shared.enqueue(&namespace);
                for (namespace, _) in pending.by_ref() {
                    self.shared.enqueue(&namespace);
                }
                break;
            }
            let values: Vec<serde_json::Value> = list
                .iter()
                .map(|(index, object)| live::object_value(object, &self.watched[*index].resource))
                .collect();
            drop(list);
            let Some(findings) = self.evaluate(values).await else {
                self.shared.enqueue(&namespace);
                continue;
            };
            evaluated += findings.len();
            for finding in &findings {
                self.shared
                    .metrics
                    .evaluation_seconds
                    .observe(finding.elapsed.as_secs_f64());
            }
            self.summaries
                .insert(namespace.clone(), Summary::of(&findings));
            // Before the report is written: whoever reads a report then finds the metrics
            // counting it.
            self.gauges();
            // Evaluating took a while: the Lease may have lapsed meanwhile.
            if !self.shared.leading.is_leading() {
                self.shared.enqueue(&namespace);
                continue;
            }
            let leading = self.shared.leading.clone();
            let written = match while_leading(&leading, self.report(&namespace, &findings)).await {
                Ok(()) => true,
                Err(err) => {
                    Metrics::count(&self.shared.metrics.report_writes, "failed");
                    let wait = self.retries.failed(&namespace, tokio::time::Instant::now());
                    tracing::warn!(%namespace, error = %err, retry_in_ms = wait.as_millis(), "cannot write the PolicyReport");
                    false
                }
            };
            let announced = self.events(&namespace, &findings).await;
            if written && announced {
                self.retries.succeeded(&namespace);
            } else if written {
                let wait = self.retries.failed(&namespace, tokio::time::Instant::now());
                tracing::info!(%namespace, retry_in_ms = wait.as_millis(), "Events not published; trying them again");
            }
            self.shared
                .metrics
                .retries_waiting
                .set(i64::try_from(self.retries.len()).unwrap_or(i64::MAX));
        }
        tracing::debug!(
            objects = evaluated,
            elapsed_ms = started.elapsed().as_millis(),
            "pass done"
        );
    }

    /// The findings of one namespace's objects; `None` when the evaluation task failed.
    async fn evaluate(&self, values: Vec<serde_json::Value>) -> Option<Vec<Finding>> {
        let served = self.served.get();
        let candidate = self.candidate.as_ref().map(|c| c.get());
        // Evaluation is CPU work: off the async threads.
        let evaluated = tokio::task::spawn_blocking(move || {
            let inputs = Inputs::from_files(live::files_by_namespace(values));
            let subjects = inputs.subjects(served.inventory.as_ref());
            let candidate_chains = candidate.as_deref().map(ServedChains);
            audit::evaluate_all(
                subjects,
                &ServedChains(&served),
                candidate_chains.as_ref().map(|c| c as &dyn Chains),
            )
        })
        .await;
        match evaluated {
            Ok(findings) => Some(findings),
            Err(err) => {
                tracing::error!(error = %err, "evaluation task failed; retrying the namespace");
                None
            }
        }
    }

    fn reports_api(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), namespace, &report::resource())
    }

    /// Reads the reports written before (by an earlier process or another replica), a few at
    /// a time: their digests, so unchanged ones are not written again; their failures, so
    /// they are not announced again; their namespaces, so the report of a namespace emptied
    /// meanwhile is deleted rather than left behind.
    async fn read_reports(&mut self) -> Result<(), kube::Error> {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &report::resource());
        // Reports are up to a few hundred KiB each: small pages keep the listing small.
        let mut params = ListParams::default().labels(report::SELECTOR).limit(10);
        loop {
            let page = api.list(&params).await?;
            for existing in &page.items {
                let namespace = existing.metadata.namespace.as_deref().unwrap_or("default");
                let watched = self.options.namespaces.is_empty()
                    || self.options.namespaces.iter().any(|n| n == namespace);
                if existing.metadata.name.as_deref() == Some(report::REPORT_NAME) && watched {
                    self.remember(namespace, existing);
                }
            }
            match page.metadata.continue_.filter(|token| !token.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(()),
            }
        }
    }

    /// Takes in a report found in the cluster: its digest as the one written, its failures as
    /// announced.
    fn remember(&mut self, namespace: &str, existing: &DynamicObject) {
        if let Some(gate) = self.gate.as_mut() {
            seed_from_report(gate, namespace, &existing.data);
        }
        let found = existing
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(report::FINGERPRINT_ANNOTATION))
            .cloned()
            .unwrap_or_default();
        self.written.insert(namespace.to_string(), found);
    }

    /// Writes the namespace's PolicyReport when its results changed; deletes it when the
    /// namespace has no audited object left.
    async fn report(&mut self, namespace: &str, findings: &[Finding]) -> Result<(), kube::Error> {
        let api = self.reports_api(namespace);
        if findings.is_empty() {
            self.summaries.remove(namespace);
            if self.written.remove(namespace).is_some() {
                match api
                    .delete(report::REPORT_NAME, &DeleteParams::default())
                    .await
                {
                    Ok(_) => Metrics::count(&self.shared.metrics.report_writes, "deleted"),
                    Err(kube::Error::Api(status)) if status.code == 404 => {}
                    Err(err) => return Err(err),
                }
            }
            return Ok(());
        }
        let served = self.served.get();
        let policy = |kind: &str| {
            ObjectKind::from_kind(kind)
                .and_then(|kind| served.chains.get(&kind))
                .map_or_else(|| "nicpolicy".to_string(), PolicyChain::name)
        };
        let built = report::build(namespace, &policy, findings, self.options.bounds);
        if !self.written.contains_key(namespace) {
            // First look since start (or since taking the lead): the report may be current.
            if let Some(existing) = api.get_opt(report::REPORT_NAME).await? {
                self.remember(namespace, &existing);
            }
        }
        if self.written.get(namespace) == Some(&built.fingerprint) {
            Metrics::count(&self.shared.metrics.report_writes, "unchanged");
            return Ok(());
        }
        let params = PatchParams::apply(MANAGER).force();
        api.patch(report::REPORT_NAME, &params, &Patch::Apply(&built.object))
            .await?;
        Metrics::count(&self.shared.metrics.report_writes, "written");
        if built.left_out > 0 {
            tracing::info!(%namespace, left_out = built.left_out, "PolicyReport bounded: results left out");
        }
        self.written
            .insert(namespace.to_string(), built.fingerprint);
        Ok(())
    }

    /// A Warning Event on each object that newly fails; `false` when one could not be
    /// published (it is announced again on the namespace's retry).
    async fn events(&mut self, namespace: &str, findings: &[Finding]) -> bool {
        let Some(gate) = self.gate.as_mut() else {
            return true;
        };
        let prefix = format!("{namespace}/");
        let keys: Vec<String> = findings
            .iter()
            .map(|f| events::key(namespace, &f.object.kind, &f.object.name))
            .collect();
        let current: BTreeSet<&str> = keys.iter().map(String::as_str).collect();
        gate.retain(|key| !key.starts_with(&prefix) || current.contains(key));
        let now = Instant::now();
        let mut to_send = Vec::new();
        for (finding, key) in findings.iter().zip(&keys) {
            let dropped = gate.dropped;
            if gate.admit(key, finding, now) {
                to_send.push(finding);
            } else if gate.dropped > dropped {
                Metrics::count(&self.shared.metrics.events, "dropped");
            }
        }
        let mut published = true;
        for finding in to_send {
            let mut note = finding.violation_lines().join("; ");
            if note.len() > 1000 {
                let mut end = 1000;
                while !note.is_char_boundary(end) {
                    end -= 1;
                }
                note.truncate(end);
                note.push_str("...");
            }
            let reference = ObjectReference {
                api_version: Some(format!("{}/v1beta3", crate::manifest::CAPVCD_GROUP)),
                kind: Some(finding.object.kind.clone()),
                name: Some(finding.object.name.clone()),
                namespace: Some(namespace.to_string()),
                uid: finding.object.uid.clone(),
                ..ObjectReference::default()
            };
            let event = Event {
                type_: EventType::Warning,
                reason: "NetworkPolicyViolation".to_string(),
                note: Some(note),
                action: "Audit".to_string(),
                secondary: None,
            };
            let publish = self.recorder.publish(&event, &reference);
            match while_leading(&self.shared.leading, publish).await {
                Ok(()) => Metrics::count(&self.shared.metrics.events, "sent"),
                Err(err) => {
                    Metrics::count(&self.shared.metrics.events, "failed");
                    tracing::warn!(object = %finding.object, error = %err, "cannot publish the Event");
                    // Not announced: the retry of the namespace announces it.
                    if let Some(gate) = self.gate.as_mut() {
                        gate.forget(&events::key(
                            namespace,
                            &finding.object.kind,
                            &finding.object.name,
                        ));
                    }
                    published = false;
                }
            }
        }
        published
    }

    /// Sets the gauges from every namespace's totals.
    fn gauges(&self) {
        let mut results: BTreeMap<&'static str, usize> = BTreeMap::new();
        let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
        let mut changes: BTreeMap<&'static str, usize> = BTreeMap::new();
        for summary in self.summaries.values() {
            for (verdict, n) in &summary.results {
                *results.entry(verdict.as_str()).or_default() += n;
            }
            for (reason, n) in &summary.reasons {
                *reasons.entry(reason).or_default() += n;
            }
            for (change, n) in summary.candidate.iter().flatten() {
                *changes.entry(change.label()).or_default() += n;
            }
        }
        let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        let metrics = &self.shared.metrics;
        metrics.objects.clear();
        for (result, n) in results {
            metrics
                .objects
                .get_or_create(&metrics::ResultLabel {
                    result: result.to_string(),
                })
                .set(gauge(n));
        }
        metrics.violations.clear();
        for (reason, n) in reasons {
            metrics
                .violations
                .get_or_create(&metrics::ReasonLabel {
                    reason: reason.to_string(),
                })
                .set(gauge(n));
        }
        metrics.candidate.clear();
        for (change, n) in changes {
            metrics
                .candidate
                .get_or_create(&metrics::ChangeLabel {
                    change: change.to_string(),
                })
                .set(gauge(n));
        }
    }
}

/// Tells `gate` which objects the report found at start (written by an earlier process or
/// another replica) lists as failing, and why, so their failures are not announced twice.
fn seed_from_report(gate: &mut EventGate, namespace: &str, report: &serde_json::Value) {
    let mut failing: BTreeMap<String, Vec<(&str, &str)>> = BTreeMap::new();
    for result in report["results"].as_array().into_iter().flatten() {
        if result["result"] != "fail" {
            continue;
        }
        let resource = &result["resources"][0];
        // The reason is a property of its own; reports written before rules were named held it
        // as the rule.
        let reason = result["properties"]["reason"]
            .as_str()
            .or_else(|| result["rule"].as_str());
        let (Some(kind), Some(name), Some(field), Some(rule)) = (
            resource["kind"].as_str(),
            resource["name"].as_str(),
            result["properties"]["field"].as_str(),
            reason,
        ) else {
            continue;
        };
        failing
            .entry(events::key(namespace, kind, name))
            .or_default()
            .push((field, rule));
    }
    for (key, violations) in failing {
        gate.seed(&key, violations);
    }
}

async fn serve_http(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let app = axum::Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(shared);
    let result = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            let _ = stop.wait_for(|stopped| *stopped).await;
        })
        .await;
    if let Err(err) = result {
        tracing::error!(error = %err, "probe server failed");
    }
}

async fn readyz(State(shared): State<Arc<Shared>>) -> Response {
    if shared.ready() {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "caches syncing, or a watch failing again and again\n",
        )
            .into_response()
    }
}

async fn metrics_text(State(shared): State<Arc<Shared>>) -> Response {
    // Read now, not when the worker last looked: it may be waiting on the API server.
    shared
        .metrics
        .leader
        .set(i64::from(shared.leading.is_leading()));
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        shared.metrics.encode(),
    )
        .into_response()
}
