//! Several policies evaluated in order as one: a site adds its own rules in front of (or after)
//! the CAPVCD policy without rebuilding either.
//!
//! How a [`PolicyChain`] combines its policies' decisions (the combining itself is
//! [`nicpolicy_plugin::combine::Combiner`], which the playground page runs too):
//!
//! - **Mutation flows forward.** When a policy writes back `extraOvdcNetworks` (a defaulting
//!   policy), the policies after it see that list as `request.machine.extraOvdcNetworks`, as the
//!   API server would after a mutating webhook.
//! - **`allowed`** only if every policy allows; **`strict`** if any policy's decision is.
//! - **`violations` and `warnings`**: every policy's; warnings in chain order, violations in
//!   field order ([`nicpolicy_plugin::Decision::sort_violations`]: by field path, indices as
//!   numbers; one field's in chain order). In a chain of two or more
//!   policies each message is prefixed with the name of the policy that made it, in brackets:
//!   `[nic-limit] 5 NICs requested ...`. The `field` and `reason` of a violation are never
//!   changed, so field paths stay machine-readable. A chain of one policy passes its decision
//!   through untouched.
//! - **`nics` and `vappNetworks`**: the last policy's. Put the policy that plans NICs (the
//!   CAPVCD one) last; a validation-only policy plans none.
//! - **`extraOvdcNetworks`**: the last list any policy wrote back (a policy that writes none
//!   leaves the list it was given), so a mutation made early in the chain is not lost.
//! - **Failures stop the chain**: the first [`EvalError`] of an enforced policy ends the
//!   evaluation with a [`ChainError`] naming the policy; later policies do not run.
//! - **Warn-mode entries** ([`Mode::Warn`], see [`crate::mode`]) are evaluated in their place
//!   but kept out of all of the above: their decisions (or failures) are in
//!   [`ChainEvaluation::warned`], their rewrites of `extraOvdcNetworks` are not passed on, and a
//!   failure of theirs does not stop the chain. Their messages always carry the `[name] `
//!   prefix, even in a chain of one.
//!
//! - **What the provisioner will not build** ([`PolicyChain::with_provisioner`]): each field of
//!   the final NIC plan that the provisioner does not apply is added last, as a warning or (with
//!   [`OnUnapplied::Deny`]) a violation, by [`nicpolicy_plugin::provisioner::report`]. A chain
//!   made by [`PolicyChain::new`] has no provisioner and reports nothing: the policies' own
//!   decisions, as case files state them.
//!
//! - **Sources** ([`nicpolicy_plugin::source`]): every violation's source names the policy
//!   that made it ([`Source::policy`](nicpolicy_plugin::Source::policy), set by the chain
//!   whatever the module wrote there), and so does every planned NIC: the policy that planned
//!   it, or, for an extra NIC whose network an earlier policy wrote into `extraOvdcNetworks`,
//!   that earlier policy with the source of its own plan for that network. A module that
//!   reports no sources (built before they existed) still gets the policy's name.
//!
//! Logs are kept per policy ([`ChainEvaluation::steps`]) and together in chain order
//! ([`ChainEvaluation::logs`], prefixed like the messages).

use std::borrow::Cow;
use std::fmt;
use std::time::{Duration, Instant};

use std::sync::Arc;

use nicpolicy_plugin::combine::{stamped, Combiner};
use nicpolicy_plugin::provisioner::{self, OnUnapplied, Provisioner, Unapplied};
use nicpolicy_plugin::{Decision, ObjectKind, Request, Violation};
use serde_json::Value;

use crate::error::{EvalError, LoadError};
use crate::limits::Budget;
use crate::mode::{
    Mode, AUDIT_PREFIX, IF_ENFORCED_PREFIX, NOT_APPLIED_PREFIX, NOT_CHECKED_PREFIX,
    WOULD_DENY_PREFIX,
};
use crate::policy::{Evaluation, LogLine, Policy};

/// Loaded policies evaluated in order for each machine, combined into one decision (see the
/// [module documentation](self)). `Send + Sync`, like [`Policy`]; cloning is cheap.
#[derive(Clone)]
pub struct PolicyChain {
    /// Never empty: the constructors take a first policy.
    policies: Vec<Policy>,
    /// The mode of each policy, same length.
    modes: Vec<Mode>,
    /// Who builds the planned NICs, and what to do with a field it will not apply.
    provisioner: Option<Arc<(Provisioner, OnUnapplied)>>,
    /// Whether each [`Step`] keeps its policy's decision ([`PolicyChain::without_step_decisions`]).
    step_decisions: bool,
}

/// Why a chain produced no decision: one policy failed, and the chain stopped there.
#[derive(Debug, thiserror::Error)]
pub struct ChainError {
    /// Name of the policy that failed (see [`Policy::name`]).
    pub policy: String,
    /// Its position in the chain, from 0.
    pub index: usize,
    /// How many policies the chain has.
    pub len: usize,
    /// What went wrong.
    pub error: EvalError,
}

impl fmt::Display for ChainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The error's text is part of this message (it is not also a `source`), so printing the
        // chain of causes does not repeat it.
        if self.len > 1 {
            write!(
                f,
                "policy {} ({} of {} in the chain) failed: {}",
                self.policy,
                self.index + 1,
                self.len,
                self.error
            )
        } else {
            write!(f, "policy {} failed: {}", self.policy, self.error)
        }
    }
}

/// What one policy of the chain decided, unmodified.
#[derive(Clone, Debug)]
pub struct Step {
    /// The policy's name.
    pub policy: String,
    /// Its own decision, logs and time. The decision is empty (`Decision::default()`) in a
    /// chain built [`without_step_decisions`](PolicyChain::without_step_decisions): it moved
    /// into the combined one.
    pub evaluation: Evaluation,
}

/// What a warn-mode entry of the chain did, kept out of the chain's decision.
#[derive(Debug)]
pub struct Warned {
    /// The policy's name.
    pub policy: String,
    /// Its position in the chain, from 0.
    pub index: usize,
    /// Its decision (messages prefixed `[name] `) or why it failed.
    pub evaluation: Result<Evaluation, EvalError>,
    /// The `extraOvdcNetworks` it would have written, when they differ from the list it was
    /// given.
    pub would_write: Option<Vec<String>>,
}

/// The result of evaluating a chain.
#[derive(Debug)]
pub struct ChainEvaluation {
    /// The combined decision of the enforced policies.
    pub decision: Decision,
    /// The warn-mode policies' results, in chain order.
    pub warned: Vec<Warned>,
    /// Every policy's log lines in chain order, prefixed with `[policy name] ` in a chain of two
    /// or more.
    pub logs: Vec<LogLine>,
    /// Each policy's own result, in chain order.
    pub steps: Vec<Step>,
    /// Wall-clock time of the whole chain.
    pub elapsed: Duration,
    /// The fields of the decision's NIC plan the chain's provisioner will not apply (reported in
    /// the decision too, as warnings or violations); empty without a provisioner.
    pub unapplied: Vec<Unapplied>,
}

impl ChainEvaluation {
    /// The combined result as a single policy's [`Evaluation`]; its memory is the largest any
    /// enforced policy's instance reached, its fuel the sum of theirs (when counted).
    pub fn into_evaluation(self) -> Evaluation {
        let memory_bytes = self
            .steps
            .iter()
            .map(|step| step.evaluation.memory_bytes)
            .max()
            .unwrap_or(0);
        let fuel = self
            .steps
            .iter()
            .map(|step| step.evaluation.fuel)
            .sum::<Option<u64>>();
        Evaluation {
            decision: self.decision,
            logs: self.logs,
            elapsed: self.elapsed,
            memory_bytes,
            fuel,
        }
    }

    /// What the warn-mode entries would have denied, as the validating webhook says it (and
    /// `nicpolicy eval`): their own warnings after [`IF_ENFORCED_PREFIX`], each violation after
    /// [`WOULD_DENY_PREFIX`], each failure after [`NOT_CHECKED_PREFIX`].
    pub fn warn_mode_warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        for warned in &self.warned {
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
            warnings.extend(
                decision
                    .violations
                    .iter()
                    .map(|v| format!("{WOULD_DENY_PREFIX}: {}", v.field_error())),
            );
        }
        warnings
    }

    /// What the warn-mode entries that allow would have changed, as the mutating webhook says
    /// it (and `nicpolicy eval`): the `extraOvdcNetworks` and NIC plan each would have written,
    /// where they differ from what is applied, after [`NOT_APPLIED_PREFIX`].
    pub fn warn_mode_changes(&self, kind: ObjectKind) -> Vec<String> {
        let mut warnings = Vec::new();
        for warned in &self.warned {
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
            if !nics.is_empty() && !nicpolicy_plugin::source::same_plan(nics, &self.decision.nics) {
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

    /// The decision an audit reports: the warn-mode policies' violations count as well (each
    /// message after [`AUDIT_PREFIX`]), and their NIC plan stands in when the enforced policies
    /// planned none.
    ///
    /// # Errors
    /// A [`ChainError`] for the first warn-mode policy that failed.
    pub fn audited(self) -> Result<Decision, ChainError> {
        // Every policy ran: the chain evaluated without an error.
        let len = self.steps.len() + self.warned.len();
        let mut decision = self.decision;
        for warned in self.warned {
            let evaluation = warned.evaluation.map_err(|error| ChainError {
                policy: warned.policy,
                index: warned.index,
                len,
                error,
            })?;
            let theirs = evaluation.decision;
            decision.allowed &= theirs.allowed;
            decision
                .violations
                .extend(theirs.violations.into_iter().map(|v| Violation {
                    message: format!("{AUDIT_PREFIX}: {}", v.message),
                    ..v
                }));
            decision.warnings.extend(theirs.warnings);
            if decision.nics.is_empty() && !theirs.nics.is_empty() {
                decision.nics = theirs.nics;
                decision.vapp_networks = theirs.vapp_networks;
            }
        }
        Ok(decision)
    }
}

impl From<Policy> for PolicyChain {
    fn from(policy: Policy) -> Self {
        PolicyChain::new(policy)
    }
}

impl PolicyChain {
    /// A chain of one policy, which behaves exactly like the policy.
    pub fn new(first: Policy) -> PolicyChain {
        PolicyChain {
            policies: vec![first],
            modes: vec![Mode::Enforce],
            provisioner: None,
            step_decisions: true,
        }
    }

    /// This chain reporting each field of its NIC plan that `provisioner` will not apply, as
    /// `on_unapplied` says (see the [module documentation](self)).
    pub fn with_provisioner(
        mut self,
        provisioner: Provisioner,
        on_unapplied: OnUnapplied,
    ) -> PolicyChain {
        self.provisioner = Some(Arc::new((provisioner, on_unapplied)));
        self
    }

    /// The provisioner this chain reports against, if any.
    pub fn provisioner(&self) -> Option<(&Provisioner, OnUnapplied)> {
        self.provisioner.as_deref().map(|(p, on)| (p, *on))
    }

    /// The provisioner that builds this chain's plans: the one it reports against, else stock
    /// CAPVCD (what a VM is compared with, what a guest config and a pool count go by).
    pub fn builder(&self) -> &Provisioner {
        static STOCK: std::sync::OnceLock<Provisioner> = std::sync::OnceLock::new();
        match &self.provisioner {
            Some(pair) => &pair.0,
            None => STOCK.get_or_init(Provisioner::capvcd),
        }
    }

    /// This chain with `next` evaluated after the policies already in it.
    pub fn then(mut self, next: Policy) -> PolicyChain {
        self.push(next);
        self
    }

    /// Appends `next` to the chain, enforced.
    pub fn push(&mut self, next: Policy) {
        self.policies.push(next);
        self.modes.push(Mode::Enforce);
    }

    /// This chain with every policy's decisions' NICs with sources or without (see
    /// [`Policy::with_nic_sources`]); the combined decision's NICs then have none either.
    pub fn with_nic_sources(mut self, wanted: bool) -> PolicyChain {
        for policy in &mut self.policies {
            *policy = policy.with_nic_sources(wanted);
        }
        self
    }

    /// This chain for a caller that reads only the combined decision and each step's time,
    /// memory and fuel (the webhook and the controller): each policy's decision is moved into
    /// the combined one rather than copied, and its [`Step`] keeps an empty decision.
    pub fn without_step_decisions(mut self) -> PolicyChain {
        self.step_decisions = false;
        self
    }

    /// Whether the chain's decisions carry NIC sources: unless every policy was asked for
    /// none.
    pub fn nic_sources(&self) -> bool {
        self.policies.iter().any(Policy::nic_sources)
    }

    /// This chain with the policy at `index` in `mode` (an index past the end changes nothing).
    pub fn with_mode(mut self, index: usize, mode: Mode) -> PolicyChain {
        if let Some(slot) = self.modes.get_mut(index) {
            *slot = mode;
        }
        self
    }

    /// The mode of each policy, in evaluation order.
    pub fn modes(&self) -> &[Mode] {
        &self.modes
    }

    /// The policies, in evaluation order (never empty).
    pub fn policies(&self) -> &[Policy] {
        &self.policies
    }

    /// The first policy, the one that takes a case's settings.
    pub fn first(&self) -> &Policy {
        // `policies` is never empty: every constructor takes a first policy.
        &self.policies[0]
    }

    /// The policies' names in order, joined by ` -> `.
    pub fn name(&self) -> String {
        self.names(|_| true)
    }

    /// The enforced policies' names in order, joined by ` -> `: the chain whose changes are
    /// applied (the NIC plan annotation names it).
    pub fn enforced_name(&self) -> String {
        self.names(|mode| mode == Mode::Enforce)
    }

    fn names(&self, keep: impl Fn(Mode) -> bool) -> String {
        self.policies
            .iter()
            .zip(&self.modes)
            .filter(|(_, &mode)| keep(mode))
            .map(|(policy, _)| policy.name())
            .collect::<Vec<_>>()
            .join(" -> ")
    }

    /// The same chain with another input cap for every policy.
    pub fn with_max_input_bytes(&self, bytes: usize) -> PolicyChain {
        PolicyChain {
            policies: self
                .policies
                .iter()
                .map(|p| p.with_max_input_bytes(bytes))
                .collect(),
            modes: self.modes.clone(),
            provisioner: self.provisioner.clone(),
            step_decisions: self.step_decisions,
        }
    }

    /// The same chain with other settings for its first policy, checked by that policy.
    ///
    /// # Errors
    /// As for [`Policy::with_settings`].
    pub fn with_first_settings(&self, settings: Value) -> Result<PolicyChain, LoadError> {
        let mut policies = self.policies.clone();
        policies[0] = self.first().with_settings(settings)?;
        Ok(PolicyChain {
            policies,
            modes: self.modes.clone(),
            provisioner: self.provisioner.clone(),
            step_decisions: self.step_decisions,
        })
    }

    /// Evaluates every policy in order and combines their decisions.
    ///
    /// # Errors
    /// A [`ChainError`] naming the first enforced policy whose evaluation failed (see
    /// [`Policy::evaluate`]); the policies after it do not run.
    pub fn evaluate(&self, request: &Request) -> Result<ChainEvaluation, ChainError> {
        self.evaluate_within(request, None)
    }

    /// [`PolicyChain::evaluate`] with every evaluation under `budget` (see
    /// [`Policy::evaluate_within`]); once it is spent the chain stops, and its result is to be
    /// discarded.
    ///
    /// # Errors
    /// As for [`PolicyChain::evaluate`].
    pub fn evaluate_within(
        &self,
        request: &Request,
        budget: Option<&Budget>,
    ) -> Result<ChainEvaluation, ChainError> {
        let started = Instant::now();
        // The enforced policies' decisions combined as they come: the same code the playground
        // page runs.
        let mut combiner = Combiner::new(request, self.policies.len());
        if !self.nic_sources() {
            combiner = combiner.without_nic_sources();
        }
        let label = |combiner: &Combiner, name: &str, text: &str, mode: Mode| {
            if mode == Mode::Warn {
                attributed(name, text)
            } else {
                combiner.label(name, text)
            }
        };
        // Borrowed until a policy rewrites the list: most chains never copy the request.
        let mut current: Cow<'_, Request> = Cow::Borrowed(request);
        let mut logs = Vec::new();
        let mut steps = Vec::with_capacity(self.policies.len());
        let mut warned = Vec::new();
        for (index, (policy, &mode)) in self.policies.iter().zip(&self.modes).enumerate() {
            let name = policy.name();
            let result = policy.evaluate_within(&current, budget);
            if budget.is_some_and(Budget::overran) {
                // Cut, not failed: stop here whatever the mode; the caller runs it again.
                return Err(ChainError {
                    policy: name,
                    index,
                    len: self.policies.len(),
                    error: result.err().unwrap_or(EvalError::Timeout(Duration::ZERO)),
                });
            }
            if let Ok(evaluation) = &result {
                logs.extend(evaluation.logs.iter().map(|line| LogLine {
                    level: line.level,
                    message: label(&combiner, &name, &line.message, mode),
                }));
            }
            if mode == Mode::Warn {
                let result = result.map(|mut evaluation| {
                    let decision = &mut evaluation.decision;
                    for v in &mut decision.violations {
                        v.message = attributed(&name, &v.message);
                        v.source = Some(stamped(v.source.take(), &name));
                    }
                    for w in &mut decision.warnings {
                        *w = attributed(&name, w);
                    }
                    evaluation
                });
                let would_write = result
                    .as_ref()
                    .ok()
                    .and_then(|e| e.decision.extra_ovdc_networks.clone())
                    .filter(|list| *list != current.machine.extra_ovdc_networks);
                warned.push(Warned {
                    policy: name,
                    index,
                    evaluation: result,
                    would_write,
                });
                continue;
            }
            let mut evaluation = result.map_err(|error| ChainError {
                policy: name.clone(),
                index,
                len: self.policies.len(),
                error,
            })?;
            let decision = if self.step_decisions {
                evaluation.decision.clone()
            } else {
                std::mem::take(&mut evaluation.decision)
            };
            if let Some(list) = combiner.add_owned(&name, decision) {
                current.to_mut().machine.extra_ovdc_networks = list.to_vec();
            }
            steps.push(Step {
                policy: name,
                evaluation,
            });
        }
        let mut combined = combiner.finish();
        let sorted = combined.violations.len();
        let unapplied = self
            .provisioner()
            .map(|(provisioner, on_unapplied)| {
                provisioner::report(provisioner, on_unapplied, request, &mut combined)
            })
            .unwrap_or_default();
        // The provisioner's findings (violations under onUnapplied: Deny) join the policies' in
        // field order; `finish` sorted those already.
        if combined.violations.len() != sorted {
            combined.sort_violations();
        }
        crate::stages::mark(crate::stages::Stage::Combine);
        Ok(ChainEvaluation {
            decision: combined,
            warned,
            logs,
            steps,
            elapsed: started.elapsed(),
            unapplied,
        })
    }
}

pub(crate) use nicpolicy_plugin::combine::attributed;
