//! Prometheus metrics of the webhook, served on `/metrics` in the text format.
//!
//! | metric | labels | what it counts |
//! |---|---|---|
//! | `nicpolicy_reviews_total` | `kind`, `endpoint`, `result` | answered reviews; `result` is `allowed`, `patched`, `denied` or `error` |
//! | `nicpolicy_evaluation_duration_seconds` | `kind`, `policy` | histogram of one policy's evaluation (instantiation included) |
//! | `nicpolicy_policy_failures_total` | `policy`, `error`, `mode` | run-time failures by kind: `timeout`, `trap`, `memory`, `bad_output`, ...; `mode` `warn` for a warn-mode policy (it denied nothing) |
//! | `nicpolicy_warned_violations_total` | `kind`, `policy`, `reason` | violations of warn-mode policies: admitted with a warning, enforcing would deny |
//! | `nicpolicy_requests_rejected_total` | `reason` | requests answered without evaluation: `malformed`, `too_large`, `wrong_kind`, `busy`, `not_served`, `unavailable` (the kind's `oci:` module could not be had at start), `read_timeout` (the body did not arrive within `connections.readTimeout`), `buffers_full` (no room in `connections.maxBufferedBytes` within it); and `unknown_cluster` (with `CheckWithoutCluster`, evaluated without the cluster) |
//! | `nicpolicy_policy_reloads_total` | `result` | configuration reloads: `success` or `failure` |
//! | `nicpolicy_policy_load_failures_total` | | policy (re)loads refused: the old policies kept serving |
//! | `nicpolicy_tls_reloads_total` | `result` | certificate reloads |
//! | `nicpolicy_evaluations_in_flight` | | evaluations running now |
//! | `nicpolicy_connections_open` | | client connections open now (at most `connections.max`) |
//! | `nicpolicy_connections_refused_total` | | connections closed at accept because `connections.max` were open |
//! | `nicpolicy_request_bytes_buffered` | | bytes of request bodies held now (at most `connections.maxBufferedBytes`) |

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Labels of `nicpolicy_reviews_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReviewLabels {
    /// VCDMachine or VCDMachineTemplate.
    pub kind: String,
    /// `mutate` or `validate`.
    pub endpoint: String,
    /// `allowed`, `patched`, `denied` or `error`.
    pub result: String,
}

/// Labels of the evaluation histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    /// VCDMachine or VCDMachineTemplate.
    pub kind: String,
    /// The policy's name.
    pub policy: String,
}

/// Labels of `nicpolicy_policy_failures_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    /// The policy's name.
    pub policy: String,
    /// [`crate::EvalError::kind`].
    pub error: String,
    /// `enforce` or `warn`.
    pub mode: String,
}

/// Labels of `nicpolicy_warned_violations_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WarnedLabels {
    /// VCDMachine or VCDMachineTemplate.
    pub kind: String,
    /// The warn-mode policy's name.
    pub policy: String,
    /// The violation's reason, like `Duplicate`.
    pub reason: String,
}

/// A single `reason` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// Why.
    pub reason: String,
}

/// A single `result` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// `success` or `failure`.
    pub result: String,
}

/// Every metric of the webhook, registered once.
pub struct Metrics {
    registry: Registry,
    /// Answered reviews.
    pub reviews: Family<ReviewLabels, Counter>,
    /// Evaluation time per policy.
    pub evaluation_seconds: Family<PolicyLabels, Histogram>,
    /// Run-time failures per policy and error kind.
    pub policy_failures: Family<FailureLabels, Counter>,
    /// Violations of warn-mode policies, admitted with a warning.
    pub warned_violations: Family<WarnedLabels, Counter>,
    /// Requests answered without an evaluation.
    pub rejected: Family<ReasonLabels, Counter>,
    /// Configuration reloads.
    pub reloads: Family<ResultLabels, Counter>,
    /// Refused policy loads.
    pub load_failures: Counter,
    /// Certificate reloads.
    pub tls_reloads: Family<ResultLabels, Counter>,
    /// Evaluations running now.
    pub in_flight: Gauge,
    /// Evaluations cut on an async worker by `evaluation.inlineBudget` and run again on a
    /// blocking thread.
    pub inline_overruns: Counter,
    /// Client connections open now.
    pub connections_open: Gauge,
    /// Connections closed at accept, over `connections.max`.
    pub connections_refused: Counter,
    /// Bytes of request bodies held now.
    pub request_bytes_buffered: Gauge,
    /// CAPVCD kinds whose writes reach no nicpolicy webhook ([`crate::guard`]).
    pub unguarded_kinds: crate::guard::UnguardedGauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("nicpolicy");
        let reviews = Family::<ReviewLabels, Counter>::default();
        // 10 us .. ~5 s: Wasm evaluations sit in the tens of microseconds, limits at seconds.
        let evaluation_seconds = Family::<PolicyLabels, Histogram>::new_with_constructor(
            (|| Histogram::new(exponential_buckets(1e-5, 2.5, 15))) as fn() -> Histogram,
        );
        let policy_failures = Family::<FailureLabels, Counter>::default();
        let warned_violations = Family::<WarnedLabels, Counter>::default();
        let rejected = Family::<ReasonLabels, Counter>::default();
        let reloads = Family::<ResultLabels, Counter>::default();
        let load_failures = Counter::default();
        let tls_reloads = Family::<ResultLabels, Counter>::default();
        let in_flight = Gauge::default();
        let inline_overruns = Counter::default();
        let connections_open = Gauge::default();
        let connections_refused = Counter::default();
        let request_bytes_buffered = Gauge::default();
        let unguarded_kinds = crate::guard::UnguardedGauge::default();
        crate::guard::register(&mut registry, &unguarded_kinds);
        registry.register("reviews", "Admission reviews answered", reviews.clone());
        registry.register(
            "evaluation_duration_seconds",
            "Time of one policy evaluation, instantiation included",
            evaluation_seconds.clone(),
        );
        registry.register(
            "policy_failures",
            "Policy evaluations that failed at run time, by error kind",
            policy_failures.clone(),
        );
        registry.register(
            "warned_violations",
            "Violations of warn-mode policies: admitted with a warning, enforcing would deny",
            warned_violations.clone(),
        );
        registry.register(
            "requests_rejected",
            "Requests answered without evaluating a policy, by reason",
            rejected.clone(),
        );
        registry.register(
            "policy_reloads",
            "Reloads of the configuration and its policies",
            reloads.clone(),
        );
        registry.register(
            "policy_load_failures",
            "Policy loads refused; the previous policies kept serving",
            load_failures.clone(),
        );
        registry.register(
            "tls_reloads",
            "Reloads of the serving certificate",
            tls_reloads.clone(),
        );
        registry.register(
            "evaluations_in_flight",
            "Evaluations running now",
            in_flight.clone(),
        );
        registry.register(
            "inline_budget_overruns",
            "Evaluations cut on an async worker by evaluation.inlineBudget and run again on a blocking thread",
            inline_overruns.clone(),
        );
        registry.register(
            "connections_open",
            "Client connections open now",
            connections_open.clone(),
        );
        registry.register(
            "connections_refused",
            "Connections closed at accept because connections.max were open",
            connections_refused.clone(),
        );
        registry.register(
            "request_bytes_buffered",
            "Bytes of request bodies held now, read or under review",
            request_bytes_buffered.clone(),
        );
        Metrics {
            registry,
            reviews,
            evaluation_seconds,
            policy_failures,
            warned_violations,
            rejected,
            reloads,
            load_failures,
            tls_reloads,
            in_flight,
            inline_overruns,
            connections_open,
            connections_refused,
            request_bytes_buffered,
            unguarded_kinds,
        }
    }

    /// Counts a request answered without evaluation.
    pub fn reject(&self, reason: &str) {
        self.rejected
            .get_or_create(&ReasonLabels {
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Counts a run-time failure of `policy` in `mode`.
    pub fn policy_failed(&self, policy: &str, error: &crate::EvalError, mode: crate::Mode) {
        self.policy_failures
            .get_or_create(&FailureLabels {
                policy: policy.to_string(),
                error: error.kind().to_string(),
                mode: mode.as_str().to_string(),
            })
            .inc();
    }

    /// Counts a reload.
    pub fn reload(&self, success: bool) {
        let result = if success { "success" } else { "failure" };
        self.reloads
            .get_or_create(&ResultLabels {
                result: result.to_string(),
            })
            .inc();
        if !success {
            self.load_failures.inc();
        }
    }

    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

impl crate::served::ReloadObserver for Metrics {
    fn reloaded(&self, success: bool) {
        self.reload(success);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_counters_and_histograms() {
        let metrics = Metrics::new();
        metrics.reject("too_large");
        metrics
            .evaluation_seconds
            .get_or_create(&PolicyLabels {
                kind: "VCDMachine".into(),
                policy: "nicpolicy-capvcd".into(),
            })
            .observe(0.00005);
        let text = metrics.encode();
        assert!(
            text.contains("nicpolicy_requests_rejected_total{reason=\"too_large\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("nicpolicy_evaluation_duration_seconds_count{kind=\"VCDMachine\",policy=\"nicpolicy-capvcd\"} 1"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
