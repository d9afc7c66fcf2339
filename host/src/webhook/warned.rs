//! What the webhook says about a chain's warn-mode policies ([`nicpolicy_engine::mode`]): their violations
//! and failures as admission warnings on the validating endpoint, the changes they would have
//! made on the mutating one, with a metric and a log line for each would-be denial.

use nicpolicy_plugin::ObjectKind;

use super::metrics::{Metrics, WarnedLabels};
use nicpolicy_engine::chain::ChainEvaluation;
use nicpolicy_engine::mode::Mode;

/// Counts and logs the warn-mode policies that failed on `machine`: they denied nothing, and
/// the policies after them ran.
pub(super) fn count_failures(evaluation: &ChainEvaluation, metrics: &Metrics, machine: &str) {
    for warned in &evaluation.warned {
        if let Err(error) = &warned.evaluation {
            metrics.policy_failed(&warned.policy, error, Mode::Warn);
            tracing::warn!(machine, policy = %warned.policy, %error, "warn-mode policy failed; admitted without its check");
        }
    }
}

/// The validating endpoint's warnings about the warn-mode policies
/// ([`ChainEvaluation::warn_mode_warnings`]), each would-be denial counted in
/// `nicpolicy_warned_violations_total` and logged at info.
pub(super) fn validation_warnings(
    kind: ObjectKind,
    machine: &str,
    evaluation: &ChainEvaluation,
    metrics: &Metrics,
) -> Vec<String> {
    for warned in &evaluation.warned {
        let Ok(theirs) = &warned.evaluation else {
            continue;
        };
        let violations = &theirs.decision.violations;
        if violations.is_empty() {
            continue;
        }
        for v in violations {
            metrics
                .warned_violations
                .get_or_create(&WarnedLabels {
                    kind: kind.as_str().to_string(),
                    policy: warned.policy.clone(),
                    reason: v.reason.as_str().to_string(),
                })
                .inc();
        }
        let fields: Vec<&str> = violations.iter().map(|v| v.field.as_str()).collect();
        tracing::info!(machine, policy = %warned.policy, ?fields, "would have been denied (mode: warn); admitted with warnings");
    }
    evaluation.warn_mode_warnings()
}

/// The mutating endpoint's warnings ([`ChainEvaluation::warn_mode_changes`]).
pub(super) fn mutation_warnings(kind: ObjectKind, evaluation: &ChainEvaluation) -> Vec<String> {
    evaluation.warn_mode_changes(kind)
}
