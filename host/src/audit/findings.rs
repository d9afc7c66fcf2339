//! Subjects evaluated into [`Finding`]s: one per machine, with the decision of the chain and,
//! in shadow mode, what a candidate chain would decide instead.

use std::time::Duration;

use nicpolicy_plugin::provisioner::{Provisioner, Unapplied};
use nicpolicy_plugin::{Decision, Nic, ObjectKind, Request, Violation};
use serde::Serialize;

use super::inputs::{ObjectId, Problem, Subject};
use super::shadow::{compare, Shadow};
use crate::clusters::ClusterGroup;
use crate::vcd::{Drift, Pending};
use nicpolicy_engine::chain::{ChainEvaluation, PolicyChain};
use nicpolicy_engine::lifecycle::judge;

/// What a machine came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Every policy allows it.
    Allowed,
    /// A policy denies it.
    Denied,
    /// Nothing to check (an API version without the network fields).
    Skipped,
    /// It could not be evaluated: the object or its cluster cannot be read or found.
    Error,
    /// A policy failed at run time (trap, time limit, memory cap, bad output).
    Failed,
}

impl Verdict {
    /// `allowed`, `denied`, `skipped`, `error` or `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allowed => "allowed",
            Verdict::Denied => "denied",
            Verdict::Skipped => "skipped",
            Verdict::Error => "error",
            Verdict::Failed => "failed",
        }
    }
}

/// One machine's result.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// The object.
    #[serde(flatten)]
    pub object: ObjectId,
    /// Its cluster, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterGroup>,
    /// What it came to.
    pub result: Verdict,
    /// Why it was skipped or not evaluated; for an object evaluated without its cluster, why
    /// the cluster is not known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The chain's decision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    /// The fields of the decision's NIC plan the provisioner will not apply (also in the
    /// decision, as warnings or violations).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unapplied: Vec<Unapplied>,
    /// How the machine's VM, as a saved `NetworkConnectionSection` shows it, differs from what
    /// the provisioner builds for the plan (`nicpolicy audit --vm-nics`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<Drift>,
    /// The VM's NICs that are not what they will be yet, without differing (a `DHCP` address
    /// not leased yet).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<Pending>,
    /// What the candidate chain would decide differently (shadow mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shadow: Option<Shadow>,
    /// The request the policies saw.
    #[serde(skip)]
    pub request: Option<Request>,
    /// Time spent in the chain (and the candidate).
    #[serde(skip)]
    pub elapsed: Duration,
}

/// A violation as one line, `field (Reason, rule): message` (the rule left out when the policy
/// names none): what the audit's table and JUnit report and the controller's Events carry.
pub fn violation_line(v: &Violation) -> String {
    match v.source.as_ref().and_then(|s| s.rule.as_deref()) {
        Some(rule) => format!("{} ({:?}, {rule}): {}", v.field, v.reason, v.message),
        None => format!("{} ({:?}): {}", v.field, v.reason, v.message),
    }
}

/// The rule that found `v`, from its source; `(not reported)` for a policy that names none.
pub fn rule_of(v: &Violation) -> &str {
    v.source
        .as_ref()
        .and_then(|s| s.rule.as_deref())
        .unwrap_or(NO_RULE)
}

/// What [`rule_of`] says of a violation whose policy names no rule.
pub const NO_RULE: &str = "(not reported)";

#[cfg(test)]
impl Finding {
    /// The finding of VCDMachine `name` in prod-eu1 with `decision` (allowed or denied as the
    /// decision says), nothing else known.
    pub(crate) fn decided_for_tests(name: &str, decision: Decision) -> Finding {
        Finding {
            object: ObjectId {
                uid: Some(format!("uid-{name}")),
                ..ObjectId::worker_for_tests(name)
            },
            cluster: None,
            result: if decision.allowed {
                Verdict::Allowed
            } else {
                Verdict::Denied
            },
            message: None,
            decision: Some(decision),
            unapplied: Vec::new(),
            drift: Vec::new(),
            pending: Vec::new(),
            shadow: None,
            request: None,
            elapsed: Duration::ZERO,
        }
    }
}

impl Finding {
    /// The NICs `provisioner` builds for its decision's plan ([`crate::vcd::built_nics`]):
    /// none without a decision.
    pub fn built_nics(&self, provisioner: &Provisioner) -> Vec<Nic> {
        let Some(decision) = &self.decision else {
            return Vec::new();
        };
        let extras = match &self.request {
            Some(request) => decision.extras_of(&request.machine),
            None => decision.extra_ovdc_networks.as_deref().unwrap_or_default(),
        };
        crate::vcd::built_nics(provisioner, &decision.nics, extras)
    }

    /// Each violation of its decision as one line, `field (Reason): message`: what the JUnit
    /// report of `audit` and the controller's Events carry.
    pub fn violation_lines(&self) -> Vec<String> {
        self.decision
            .iter()
            .flat_map(|d| &d.violations)
            .map(violation_line)
            .collect()
    }

    /// The rules behind the violations (see [`rule_of`]), for totals by rule.
    pub fn rules(&self) -> impl Iterator<Item = &str> + '_ {
        self.decision
            .iter()
            .flat_map(|d| &d.violations)
            .map(rule_of)
    }

    /// The violations' reasons, for totals by rule.
    pub fn reasons(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.decision
            .iter()
            .flat_map(|d| &d.violations)
            .map(|v| v.reason.as_str())
    }
}

/// The chain each kind is evaluated with: one chain for both (the CLI), or one per kind (a
/// served configuration).
pub trait Chains {
    /// The chain for `kind`; `None` when the kind is not served.
    fn chain(&self, kind: ObjectKind) -> Option<&PolicyChain>;
}

impl Chains for PolicyChain {
    fn chain(&self, _kind: ObjectKind) -> Option<&PolicyChain> {
        Some(self)
    }
}

/// Evaluates one subject with `chains` and, if given, the `candidate` chains.
pub fn evaluate(subject: Subject, chains: &dyn Chains, candidate: Option<&dyn Chains>) -> Finding {
    let mut finding = Finding {
        object: subject.object,
        cluster: subject.group,
        result: Verdict::Error,
        message: subject.cluster_unknown,
        decision: None,
        unapplied: Vec::new(),
        drift: Vec::new(),
        pending: Vec::new(),
        shadow: None,
        request: None,
        elapsed: Duration::ZERO,
    };
    let request = match subject.input {
        Ok(request) => request,
        Err(problem) => {
            finding.result = match problem {
                Problem::Unsupported(_) => Verdict::Skipped,
                Problem::Invalid(_) => Verdict::Error,
            };
            finding.message = Some(problem.to_string());
            return finding;
        }
    };
    let Some(chain) = chains.chain(request.kind) else {
        finding.result = Verdict::Skipped;
        finding.message = Some(format!(
            "not checked: no policy is configured for {}",
            request.kind.as_str()
        ));
        return finding;
    };
    // Judged as the webhook judges it: an object being deleted, or whose cluster is not known,
    // is not denied for what it cannot fix.
    let current = judge(&request, |r| chain.evaluate(r));
    finding.elapsed = current.as_ref().map(|e| e.elapsed).unwrap_or_default();
    if let Ok(evaluation) = &current {
        finding.unapplied = evaluation.unapplied.clone();
    }
    // Warn-mode policies' violations are reported too: the audit shows what is wrong, whatever
    // the webhook does about it.
    let current = current
        .and_then(ChainEvaluation::audited)
        .map_err(|e| e.to_string());
    if let Some(candidate) = candidate.and_then(|c| c.chain(request.kind)) {
        let proposed = judge(&request, |r| candidate.evaluate(r));
        finding.elapsed += proposed.as_ref().map(|e| e.elapsed).unwrap_or_default();
        let proposed = proposed
            .and_then(ChainEvaluation::audited)
            .map_err(|e| e.to_string());
        finding.shadow = Some(compare(&current, proposed));
    }
    match current {
        Ok(decision) => {
            finding.result = if decision.allowed {
                Verdict::Allowed
            } else {
                Verdict::Denied
            };
            finding.decision = Some(decision);
        }
        Err(message) => {
            finding.result = Verdict::Failed;
            finding.message = Some(message);
            finding.unapplied.clear();
        }
    }
    finding.request = Some(request);
    finding
}

/// Evaluates every subject, in order.
pub fn evaluate_all(
    subjects: Vec<Subject>,
    chains: &dyn Chains,
    candidate: Option<&dyn Chains>,
) -> Vec<Finding> {
    subjects
        .into_iter()
        .map(|subject| evaluate(subject, chains, candidate))
        .collect()
}

#[cfg(all(test, feature = "builtin"))]
mod tests {
    use std::path::Path;

    use nicpolicy_plugin::{testing, Reason};

    use super::*;
    use crate::served::{ServeConfig, Served};
    use crate::{Host, HostConfig};
    use nicpolicy_engine::mode::AUDIT_PREFIX;

    #[test]
    fn warn_mode_violations_are_reported_and_marked() {
        // A configuration as `nicpolicy controller` loads it: a stricter CAPVCD in warn mode in
        // front of the enforced one.
        let config = ServeConfig::parse(
            Path::new("/etc/nicpolicy/nicpolicy.yaml"),
            "policies:\n  VCDMachine:\n    - {builtin: capvcd, mode: warn, settings: {maxNics: 2}}\n    - {builtin: capvcd}\n",
        )
        .expect("valid");
        let host = Host::new(HostConfig {
            cache_dir: None,
            ..HostConfig::default()
        })
        .expect("engine starts");
        let served = Served::load(&host, config, 1).expect("loads");
        let chain = &served.chains[&ObjectKind::VcdMachine];
        let subject = Subject {
            object: ObjectId::worker_for_tests("prod-eu1-md-0-x7k2p"),
            group: None,
            input: Ok(testing::worker(&["storage-net", "workload-net"])),
            cluster_unknown: None,
        };
        let finding = evaluate(subject, chain, None);
        assert_eq!(finding.result, Verdict::Denied, "{finding:?}");
        let decision = finding.decision.expect("decided");
        assert_eq!(
            testing::violation_fields(&decision),
            [("spec.extraOvdcNetworks", Reason::TooMany)]
        );
        assert!(
            decision.violations[0]
                .message
                .starts_with(&format!("{AUDIT_PREFIX}: [nicpolicy-capvcd] ")),
            "{decision:?}"
        );
        // The plan is the enforced policy's.
        assert_eq!(decision.nics.len(), 3);
    }
}
