//! Prometheus metrics of the controller, served on `/metrics`.
//!
//! | metric | labels | what it tells |
//! |---|---|---|
//! | `nicpolicy_controller_objects` | `result` | audited objects by result: `allowed`, `denied`, `skipped`, `error`, `failed` |
//! | `nicpolicy_controller_violations` | `reason` | violations of denied objects by rule (reason) |
//! | `nicpolicy_controller_candidate_differences` | `change` | objects the candidate chain decides differently: `newlyDenied`, `newlyAllowed`, `nicPlan`, ... |
//! | `nicpolicy_controller_evaluation_duration_seconds` | | one object's evaluation (chain and candidate) |
//! | `nicpolicy_controller_queue_depth` | | namespaces waiting to be evaluated |
//! | `nicpolicy_controller_report_writes_total` | `result` | report writes: `written`, `unchanged`, `deleted` (a namespace emptied, or a report of the kind used before a switch), `failed` |
//! | `nicpolicy_controller_events_total` | `result` | Events: `sent`, `dropped` (rate limit), `failed` |
//! | `nicpolicy_controller_leader` | | 1 while this replica holds the Lease |
//! | `nicpolicy_controller_retries_waiting` | | namespaces whose report or Events failed, waiting to be tried again (1 s doubling to 5 min) |
//! | `nicpolicy_controller_policy_generation` | | generation of the loaded configuration (rises on reload) |
//! | `nicpolicy_controller_static_pool_free_addresses` | `ovdc`, `network` | addresses free in a network's static pool (`totalIpCount - usedIpCount`; `ovdc` empty for the default inventory) |
//! | `nicpolicy_controller_static_pool_rollout_addresses` | `ovdc`, `network` | the most addresses one rollout (MachineDeployment, KubeadmControlPlane) would take from it |
//! | `nicpolicy_controller_inventory_refreshes_total` | `result` | refreshes of the inventories from Cloud Director (`cloudDirector`): `written`, `unchanged`, `failed` |
//! | `nicpolicy_controller_inventory_refresh_success_timestamp_seconds` | | when the inventories were last read from Cloud Director in full |

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// One label, `name`, with a value.
macro_rules! label_set {
    ($name:ident, $field:ident) => {
        /// A single-label set.
        #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
        pub struct $name {
            /// The label's value.
            pub $field: String,
        }
    };
}

label_set!(ResultLabel, result);

/// A static pool: the org VDC whose inventory counts it (empty for the default) and the network.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    /// The org VDC.
    pub ovdc: String,
    /// The network.
    pub network: String,
}
label_set!(ReasonLabel, reason);
label_set!(ChangeLabel, change);

/// Every metric of the controller, registered once.
pub struct Metrics {
    registry: Registry,
    /// Objects by result.
    pub objects: Family<ResultLabel, Gauge>,
    /// Violations by reason.
    pub violations: Family<ReasonLabel, Gauge>,
    /// Candidate differences by change.
    pub candidate: Family<ChangeLabel, Gauge>,
    /// Evaluation time per object.
    pub evaluation_seconds: Histogram,
    /// Namespaces waiting.
    pub queue_depth: Gauge,
    /// Report writes by result.
    pub report_writes: Family<ResultLabel, Counter>,
    /// Events by result.
    pub events: Family<ResultLabel, Counter>,
    /// 1 while leading.
    pub leader: Gauge,
    /// Namespaces waiting for a retry.
    pub retries_waiting: Gauge,
    /// Loaded configuration generation.
    pub policy_generation: Gauge,
    /// CAPVCD kinds whose writes reach no nicpolicy webhook ([`crate::guard`]).
    pub unguarded_kinds: crate::guard::UnguardedGauge,
    /// Free addresses per static pool.
    pub pool_free: Family<PoolLabels, Gauge>,
    /// The largest rollout's need per static pool.
    pub pool_rollout: Family<PoolLabels, Gauge>,
    /// Inventory refreshes by result.
    pub inventory_refreshes: Family<ResultLabel, Counter>,
    /// Unix time of the last successful refresh.
    pub inventory_refreshed: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("nicpolicy_controller");
        let metrics = Metrics {
            registry: Registry::default(),
            objects: Family::default(),
            violations: Family::default(),
            candidate: Family::default(),
            evaluation_seconds: Histogram::new(exponential_buckets(1e-5, 2.5, 15)),
            queue_depth: Gauge::default(),
            report_writes: Family::default(),
            events: Family::default(),
            leader: Gauge::default(),
            retries_waiting: Gauge::default(),
            policy_generation: Gauge::default(),
            unguarded_kinds: crate::guard::UnguardedGauge::default(),
            pool_free: Family::default(),
            pool_rollout: Family::default(),
            inventory_refreshes: Family::default(),
            inventory_refreshed: Gauge::default(),
        };
        crate::guard::register(&mut registry, &metrics.unguarded_kinds);
        registry.register(
            "objects",
            "Audited objects by result",
            metrics.objects.clone(),
        );
        registry.register(
            "violations",
            "Violations of denied objects by rule (reason)",
            metrics.violations.clone(),
        );
        registry.register(
            "candidate_differences",
            "Objects the candidate chain decides differently, by change",
            metrics.candidate.clone(),
        );
        registry.register(
            "evaluation_duration_seconds",
            "Time to evaluate one object (chain and candidate)",
            metrics.evaluation_seconds.clone(),
        );
        registry.register(
            "queue_depth",
            "Namespaces waiting to be evaluated",
            metrics.queue_depth.clone(),
        );
        registry.register(
            "report_writes",
            "Report writes by result",
            metrics.report_writes.clone(),
        );
        registry.register("events", "Events by result", metrics.events.clone());
        registry.register(
            "leader",
            "1 while this replica holds the leader Lease",
            metrics.leader.clone(),
        );
        registry.register(
            "retries_waiting",
            "Namespaces whose report or Events failed, waiting to be tried again",
            metrics.retries_waiting.clone(),
        );
        registry.register(
            "policy_generation",
            "Generation of the loaded configuration",
            metrics.policy_generation.clone(),
        );
        registry.register(
            "static_pool_free_addresses",
            "Addresses free in a network's static pool (totalIpCount - usedIpCount)",
            metrics.pool_free.clone(),
        );
        registry.register(
            "static_pool_rollout_addresses",
            "The most addresses one rollout would take from a network's static pool",
            metrics.pool_rollout.clone(),
        );
        registry.register(
            "inventory_refreshes",
            "Refreshes of the inventories from Cloud Director, by result",
            metrics.inventory_refreshes.clone(),
        );
        registry.register(
            "inventory_refresh_success_timestamp_seconds",
            "Unix time the inventories were last read from Cloud Director in full",
            metrics.inventory_refreshed.clone(),
        );
        Metrics {
            registry,
            ..metrics
        }
    }

    /// Adds one to a counter family with a `result` label.
    pub fn count(family: &Family<ResultLabel, Counter>, result: &str) {
        family
            .get_or_create(&ResultLabel {
                result: result.to_string(),
            })
            .inc();
    }

    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}
