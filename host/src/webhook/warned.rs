//! What the webhook says about a chain's warn-mode policies ([`crate::mode`]): their violations
//! and failures as admission warnings on the validating endpoint, the changes they would have
//! made on the mutating one, with a metric and a log line for each would-be denial.

use nicpolicy_plugin::ObjectKind;

use super::metrics::{Metrics, WarnedLabels};
use crate::chain::ChainEvaluation;
use crate::mode::{
    Mode, IF_ENFORCED_PREFIX, NOT_APPLIED_PREFIX, NOT_CHECKED_PREFIX, WOULD_DENY_PREFIX,
};

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

/// The validating endpoint's warnings about the warn-mode policies: their own warnings (after
/// [`IF_ENFORCED_PREFIX`]), one
/// for each violation (counted in `nicpolicy_warned_violations_total` and logged at info) and
/// one for each failure.
pub(super) fn validation_warnings(
    kind: ObjectKind,
    machine: &str,
    evaluation: &ChainEvaluation,
    metrics: &Metrics,
) -> Vec<String> {
    let mut warnings = Vec::new();
    for warned in &evaluation.warned {
        let decision = match &warned.evaluation {
            Ok(evaluation) => &evaluation.decision,
            Err(error) => {
                warnings.push(format!(
                    "{NOT_CHECKED_PREFIX}: policy {} failed: {error}",
                    warned.policy
                ));
                continue;
            }
        };
        warnings.extend(
            decision
                .warnings
                .iter()
                .map(|w| format!("{IF_ENFORCED_PREFIX}: {w}")),
        );
        if decision.violations.is_empty() {
            continue;
        }
        for v in &decision.violations {
            metrics
                .warned_violations
                .get_or_create(&WarnedLabels {
                    kind: kind.as_str().to_string(),
                    policy: warned.policy.clone(),
                    reason: v.reason.as_str().to_string(),
                })
                .inc();
            warnings.push(format!("{WOULD_DENY_PREFIX}: {}", v.field_error()));
        }
        let fields: Vec<&str> = decision
            .violations
            .iter()
            .map(|v| v.field.as_str())
            .collect();
        tracing::info!(machine, policy = %warned.policy, ?fields, "would have been denied (mode: warn); admitted with warnings");
    }
    warnings
}

/// The mutating endpoint's warnings: the `extraOvdcNetworks` and NIC plan each allowing
/// warn-mode policy would have written, where they differ from what is applied.
pub(super) fn mutation_warnings(kind: ObjectKind, evaluation: &ChainEvaluation) -> Vec<String> {
    let mut warnings = Vec::new();
    for warned in &evaluation.warned {
        let Ok(theirs) = &warned.evaluation else {
            continue;
        };
        // A policy that denies would not default the object either.
        if !theirs.decision.allowed {
            continue;
        }
        if let Some(list) = &warned.would_write {
            warnings.push(format!(
                "{NOT_APPLIED_PREFIX}: [{}] would set {}.extraOvdcNetworks to [{}]",
                warned.policy,
                kind.spec_path(),
                list.join(", ")
            ));
        }
        let nics = &theirs.decision.nics;
        if !nics.is_empty() && *nics != evaluation.decision.nics {
            let networks: Vec<&str> = nics.iter().map(|n| n.network.as_str()).collect();
            warnings.push(format!(
                "{NOT_APPLIED_PREFIX}: [{}] would plan NICs on {}",
                warned.policy,
                networks.join(", ")
            ));
        }
    }
    warnings
}
