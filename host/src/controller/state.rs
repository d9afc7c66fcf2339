//! The controller's state, shared by the watches, the worker and the HTTP handlers: how it runs
//! ([`Options`]), its queue of namespaces and readiness ([`Shared`]), the caches it watches
//! ([`Watched`]) and the one way to write while leading ([`while_leading`]).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::DynamicObject;
use kube::core::ApiResource;
use kube::runtime::reflector::Store;
use nicpolicy_plugin::ObjectKind;
use tokio::sync::Notify;

use super::lease::{Leadership, LeaseConfig};
use super::metrics::Metrics;
use super::report::{Bounds, Format};
use crate::audit::Chains;
use crate::served::config::ServeConfig;
use crate::served::Served;
use nicpolicy_engine::chain::PolicyChain;

/// Field manager of the reports written.
pub(super) const MANAGER: &str = "nicpolicy-controller";

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

/// The served chains of a snapshot, by kind.
pub(super) struct ServedChains<'a>(pub(super) &'a Served);

impl Chains for ServedChains<'_> {
    fn chain(&self, kind: ObjectKind) -> Option<&PolicyChain> {
        self.0.chains.get(&kind)
    }
}

/// State shared by the watches, the worker and the HTTP handlers.
pub(super) struct Shared {
    pub(super) queue: Mutex<BTreeSet<String>>,
    pub(super) wake: Notify,
    pub(super) synced: AtomicUsize,
    pub(super) watches: AtomicUsize,
    /// Watches whose last [`WATCH_FAILURES_UNREADY`](super::WATCH_FAILURES_UNREADY) attempts all failed.
    pub(super) failing: AtomicUsize,
    /// The API server did not answer the last [`PROBE_FAILURES_UNREADY`](super::PROBE_FAILURES_UNREADY) probes: the watches
    /// may be hanging without an error ([`probe_api_server`](super::probe_api_server)).
    pub(super) unreachable: AtomicBool,
    pub(super) leading: Arc<Leadership>,
    pub(super) metrics: Metrics,
    pub(super) namespaces: Vec<String>,
}

impl Shared {
    pub(super) fn enqueue(&self, namespace: &str) {
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

    pub(super) fn take(&self) -> BTreeSet<String> {
        let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        self.metrics.queue_depth.set(0);
        std::mem::take(&mut queue)
    }

    /// Every cache synced, and no watch failing again and again: with a watch that cannot
    /// reach the API server, new clusters would be unknown, so `/readyz` says so.
    pub(super) fn ready(&self) -> bool {
        self.synced.load(Ordering::Acquire) >= self.watches.load(Ordering::Acquire)
            && self.failing.load(Ordering::Acquire) == 0
            && !self.unreachable.load(Ordering::Acquire)
    }
}

/// Runs one write while this replica leads: cut when its Lease would lapse, so a write does
/// not wait on a stalled API server past the point where another replica may lead (a request
/// already sent may still be applied; the next leader's write replaces it).
pub(super) async fn while_leading<T, E: std::fmt::Display>(
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

/// One watched resource and its cache.
pub(super) struct Watched {
    pub(super) resource: ApiResource,
    pub(super) store: Store<DynamicObject>,
}
