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
    /// Its own decision, logs and time.
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
            let evaluation = result.map_err(|error| ChainError {
                policy: name.clone(),
                index,
                len: self.policies.len(),
                error,
            })?;
            if let Some(list) = combiner.add(&name, &evaluation.decision) {
                current.to_mut().machine.extra_ovdc_networks = list.to_vec();
            }
            steps.push(Step {
                policy: name,
                evaluation,
            });
        }
        let mut combined = combiner.finish();
        let unapplied = self
            .provisioner()
            .map(|(provisioner, on_unapplied)| {
                provisioner::report(provisioner, on_unapplied, request, &mut combined)
            })
            .unwrap_or_default();
        // The provisioner's findings join the policies' in field order.
        combined.sort_violations();
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

// The tests chain the built-in CAPVCD policy with hand-written modules.
#[cfg(all(test, feature = "builtin"))]
mod tests {
    use std::path::Path;
    use std::sync::OnceLock;

    use nicpolicy_plugin::abi::pack;
    use nicpolicy_plugin::{Origin, Reason, Source};
    use serde_json::json;

    use super::*;
    use crate::engine::{Host, HostConfig};
    use crate::policy::PolicyOptions;
    use crate::{builtin, Limits};
    use nicpolicy_inputs::manifest::RequestFiles;

    fn host() -> &'static Host {
        static HOST: OnceLock<Host> = OnceLock::new();
        HOST.get_or_init(|| {
            Host::new(HostConfig {
                cache_dir: None,
                max_instances: 16,
                ..HostConfig::default()
            })
            .expect("engine starts")
        })
    }

    fn capvcd() -> Policy {
        static CAPVCD: OnceLock<Policy> = OnceLock::new();
        CAPVCD
            .get_or_init(|| {
                host()
                    .load(builtin::CAPVCD_WASM, PolicyOptions::default())
                    .expect("CAPVCD policy loads")
            })
            .clone()
    }

    /// How a test module's `nicpolicy_evaluate` ends.
    enum Ends {
        /// Returns this JSON.
        Returning(&'static str),
        /// Traps.
        Trapping,
    }

    /// An ABI v1 module called `name` that logs its whole input, then returns a fixed output or
    /// traps. The log line shows the test what request the policy saw.
    fn module(name: &str, ends: Ends) -> Policy {
        const OUTPUT_AT: u32 = 64;
        let (output, body) = match ends {
            Ends::Returning(json) => (
                json,
                format!("i64.const {}", pack(OUTPUT_AT, json.len() as u32)),
            ),
            Ends::Trapping => ("", "unreachable".to_string()),
        };
        let escape = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
        let wat = format!(
            r#"(module
  (import "nicpolicy" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 2)
  (global $heap (mut i32) (i32.const 4096))
  (data (i32.const 16) "{{\"valid\":true}}")
  (data (i32.const {OUTPUT_AT}) "{output}")
  (func (export "nicpolicy_abi_version") (result i32) i32.const 1)
  ;; Test requests are a few KiB: the second page holds them.
  (func (export "nicpolicy_alloc") (param $len i32) (result i32)
    (local $p i32)
    (local.set $p (global.get $heap))
    (global.set $heap (i32.add (local.get $p) (local.get $len)))
    (local.get $p))
  (func (export "nicpolicy_validate_settings") (param i32 i32) (result i64)
    i64.const {valid})
  (func (export "nicpolicy_evaluate") (param $ptr i32) (param $len i32) (result i64)
    (call $log (i32.const 1) (local.get $ptr) (local.get $len))
    {body})
  (@custom "nicpolicy.metadata" "{{\"name\":\"{name}\",\"version\":\"1.0.0\",\"abiVersion\":1}}")
)"#,
            output = escape(output),
            valid = pack(16, 14),
        );
        let wasm = wat::parse_str(&wat).unwrap_or_else(|err| panic!("{err}\n{wat}"));
        host()
            .load(&wasm, PolicyOptions::default())
            .expect("test module loads")
    }

    /// Denies listing workload-net second, and warns.
    fn dmz_guard() -> Policy {
        module(
            "dmz-guard",
            Ends::Returning(
                r#"{"allowed":false,"violations":[{"field":"spec.extraOvdcNetworks[1]","reason":"Forbidden","message":"workload-net is reserved for tenants"}],"warnings":["ext-dmz-net is being retired"]}"#,
            ),
        )
    }

    /// Allows, writing backup-net after the example's extra networks.
    fn backup_defaults() -> Policy {
        module(
            "backup-defaults",
            Ends::Returning(
                r#"{"allowed":true,"extraOvdcNetworks":["storage-net","workload-net","backup-net"]}"#,
            ),
        )
    }

    /// The example worker: NIC 0 on mgmt-net, extras storage-net and workload-net.
    fn request() -> Request {
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
        RequestFiles {
            cluster: Some(&examples.join("cluster.yaml")),
            machine: Some(&examples.join("machine.yaml")),
            ..RequestFiles::default()
        }
        .build()
        .expect("example request builds")
    }

    fn networks(decision: &Decision) -> Vec<&str> {
        decision.nics.iter().map(|n| n.network.as_str()).collect()
    }

    #[test]
    fn sources_name_the_policy_behind_each_nic_and_violation() {
        // backup-defaults reports no sources (a module from before them) and writes
        // backup-net; the CAPVCD policy plans every NIC from the list it is given.
        let chain = PolicyChain::new(backup_defaults())
            .then(dmz_guard())
            .then(capvcd());
        let decision = chain.evaluate(&request()).expect("evaluates").decision;
        let sources: Vec<&Source> = decision
            .nics
            .iter()
            .map(|nic| nic.source.as_deref().expect("every NIC has a source"))
            .collect();
        assert_eq!(sources[0].origin, Some(Origin::ClusterNetwork));
        assert_eq!(sources[0].policy.as_deref(), Some("nicpolicy-capvcd"));
        // The machine's own networks: planned by the CAPVCD policy.
        assert_eq!(sources[1].origin, Some(Origin::Machine));
        assert_eq!(
            sources[1].field.as_deref(),
            Some("spec.extraOvdcNetworks[0]")
        );
        assert_eq!(sources[2].policy.as_deref(), Some("nicpolicy-capvcd"));
        // backup-net was written by backup-defaults: its NIC is that policy's, at the field
        // where the entry sits now.
        assert_eq!(decision.nics[3].network, "backup-net");
        assert_eq!(sources[3].policy.as_deref(), Some("backup-defaults"));
        assert_eq!(sources[3].rule, None);
        assert_eq!(
            sources[3].field.as_deref(),
            Some("spec.extraOvdcNetworks[2]")
        );
        let violation = &decision.violations[0];
        let source = violation.source.as_ref().expect("stamped");
        assert_eq!(source.policy.as_deref(), Some("dmz-guard"));
        assert_eq!(source.rule, None, "the module names no rule");
    }

    #[test]
    fn without_nic_sources_the_decision_is_the_same_but_for_the_nics_sources() {
        // The CAPVCD policy is asked through nicpolicy_evaluate_binary4; the hand-written
        // modules have no such export, and their NICs' sources are dropped by the host.
        let chain = || {
            PolicyChain::new(backup_defaults())
                .then(dmz_guard())
                .then(capvcd())
        };
        let full = chain().evaluate(&request()).expect("evaluates");
        let lean_chain = chain().with_nic_sources(false);
        assert!(!lean_chain.nic_sources());
        let lean = lean_chain.evaluate(&request()).expect("evaluates");
        assert!(lean.decision.nics.iter().all(|nic| nic.source.is_none()));
        assert!(full.decision.nics.iter().all(|nic| nic.source.is_some()));
        let mut stripped = full.decision.clone();
        for nic in &mut stripped.nics {
            nic.source = None;
        }
        assert_eq!(lean.decision, stripped);
        // The violations keep their sources, with the policy that found them.
        assert!(!lean.decision.violations.is_empty());
        assert_eq!(lean.decision.violations, full.decision.violations);
        // Each step's decision too.
        for step in &lean.steps {
            assert!(step
                .evaluation
                .decision
                .nics
                .iter()
                .all(|n| n.source.is_none()));
        }
    }

    #[test]
    fn chain_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<PolicyChain>();
        check::<ChainError>();
    }

    #[test]
    fn a_chain_of_one_is_the_policy() {
        let request = request();
        let mut alone = capvcd().evaluate(&request).expect("evaluates").decision;
        let chained = PolicyChain::new(capvcd())
            .evaluate(&request)
            .expect("evaluates");
        // The same decision; the chain names the policy in each source.
        for nic in &mut alone.nics {
            let source = nic
                .source
                .as_mut()
                .expect("the SDK names every NIC's source");
            source.policy = Some("nicpolicy-capvcd".into());
        }
        assert_eq!(chained.decision, alone);
        assert_eq!(chained.steps.len(), 1);
        assert_eq!(PolicyChain::new(capvcd()).name(), "nicpolicy-capvcd");
    }

    #[test]
    fn later_policies_see_the_rewritten_extra_networks() {
        let defaulting = backup_defaults();
        let observer = module("observer", Ends::Returning(r#"{"allowed":true}"#));
        let chain = PolicyChain::new(defaulting).then(observer).then(capvcd());
        assert_eq!(
            chain.name(),
            "backup-defaults -> observer -> nicpolicy-capvcd"
        );
        let result = chain.evaluate(&request()).expect("evaluates");

        // The observer logged the request it was given.
        let seen = &result.steps[1].evaluation.logs[0].message;
        assert!(
            seen.contains(r#""extraOvdcNetworks":["storage-net","workload-net","backup-net"]"#),
            "{seen}"
        );
        // CAPVCD planned the rewritten list, and its plan is the chain's.
        assert_eq!(
            networks(&result.decision),
            ["mgmt-net", "storage-net", "workload-net", "backup-net"]
        );
        assert_eq!(
            result.decision.extra_ovdc_networks.as_deref(),
            Some(&["storage-net", "workload-net", "backup-net"].map(String::from)[..])
        );
        assert!(result.decision.allowed);
        // Chain-level logs say which policy logged what.
        assert!(result.logs[0].message.starts_with("[backup-defaults] {"));
        assert!(result.logs[1].message.starts_with("[observer] {"));
    }

    #[test]
    fn a_rewrite_survives_a_last_policy_that_writes_none() {
        let defaulting = module(
            "backup-defaults",
            Ends::Returning(r#"{"allowed":true,"extraOvdcNetworks":["storage-net","backup-net"]}"#),
        );
        let validating = module("validating", Ends::Returning(r#"{"allowed":true}"#));
        let result = PolicyChain::new(defaulting)
            .then(validating)
            .evaluate(&request())
            .expect("evaluates");
        assert_eq!(
            result.decision.extra_ovdc_networks,
            Some(vec!["storage-net".to_string(), "backup-net".to_string()])
        );
        // The last policy plans nothing, so neither does the chain.
        assert!(result.decision.nics.is_empty());
    }

    #[test]
    fn violations_and_warnings_of_every_policy_are_attributed() {
        let dmz = dmz_guard();
        // CAPVCD with maxNics 2 denies the example's three NICs.
        let capvcd = capvcd()
            .with_settings(json!({"maxNics": 2}))
            .expect("settings accepted");
        let result = PolicyChain::new(dmz)
            .then(capvcd)
            .evaluate(&request())
            .expect("evaluates");
        let decision = &result.decision;
        assert!(!decision.allowed);
        assert_eq!(decision.violations.len(), 2, "{:?}", decision.violations);
        // In field order: the list's own field before its entries, whichever policy ran first.
        let dmz_violation = &decision.violations[1];
        assert_eq!(dmz_violation.field, "spec.extraOvdcNetworks[1]");
        assert_eq!(dmz_violation.reason, Reason::Forbidden);
        assert_eq!(
            dmz_violation.message,
            "[dmz-guard] workload-net is reserved for tenants"
        );
        let capvcd_violation = &decision.violations[0];
        assert_eq!(capvcd_violation.field, "spec.extraOvdcNetworks");
        assert_eq!(capvcd_violation.reason, Reason::TooMany);
        assert!(
            capvcd_violation.message.starts_with("[nicpolicy-capvcd] "),
            "{}",
            capvcd_violation.message
        );
        assert_eq!(
            decision.warnings,
            ["[dmz-guard] ext-dmz-net is being retired"]
        );
        // Each step keeps its own decision unprefixed.
        assert_eq!(
            result.steps[0].evaluation.decision.violations[0].message,
            "workload-net is reserved for tenants"
        );
        crate::policy::check_decision(decision).expect("a coherent decision");
    }

    #[test]
    fn a_failing_policy_stops_the_chain_and_is_named() {
        let broken = module("broken-site-rules", Ends::Trapping);
        // If the chain went on after the trap, this policy would run into its time limit.
        let spinning = host()
            .load(
                &wat::parse_str(
                    r#"(module
                      (memory (export "memory") 1)
                      (data (i32.const 16) "{\"valid\":true}")
                      (func (export "nicpolicy_abi_version") (result i32) i32.const 1)
                      (func (export "nicpolicy_alloc") (param i32) (result i32) i32.const 1024)
                      (func (export "nicpolicy_validate_settings") (param i32 i32) (result i64)
                        i64.const 68719476750)
                      (func (export "nicpolicy_evaluate") (param i32 i32) (result i64)
                        (loop $spin (br $spin)) unreachable))"#,
                )
                .expect("valid wat"),
                PolicyOptions {
                    limits: Limits::default().with_timeout(Duration::from_millis(50)),
                    ..PolicyOptions::default()
                },
            )
            .expect("loads");

        let chain = PolicyChain::new(capvcd())
            .then(broken)
            .then(spinning.clone());
        let err = chain
            .evaluate(&request())
            .expect_err("the second policy traps");
        assert_eq!(err.policy, "broken-site-rules");
        assert_eq!((err.index, err.len), (1, 3));
        assert_eq!(err.error.kind(), "trap");
        assert!(
            err.to_string().starts_with(
                "policy broken-site-rules (2 of 3 in the chain) failed: the policy trapped"
            ),
            "{err}"
        );

        let err = PolicyChain::new(spinning)
            .evaluate(&request())
            .expect_err("times out");
        assert_eq!(err.error.kind(), "timeout");
        assert!(
            err.to_string().starts_with("policy sha256:"),
            "a module without metadata is named by digest: {err}"
        );
    }

    #[test]
    fn warn_mode_entries_change_nothing_and_their_failures_stop_nothing() {
        let defaulting = backup_defaults();
        let dmz = dmz_guard();
        let chain = PolicyChain::new(defaulting)
            .then(dmz)
            .then(module("broken-site-rules", Ends::Trapping))
            .then(capvcd())
            .with_mode(0, Mode::Warn)
            .with_mode(1, Mode::Warn)
            .with_mode(2, Mode::Warn);
        assert_eq!(
            chain.modes(),
            [Mode::Warn, Mode::Warn, Mode::Warn, Mode::Enforce]
        );
        assert_eq!(chain.enforced_name(), "nicpolicy-capvcd");
        let result = chain.evaluate(&request()).expect("the trap stops nothing");
        // CAPVCD, enforced, saw and planned the list as written: the defaults were not applied.
        assert!(result.decision.allowed && result.decision.violations.is_empty());
        assert_eq!(
            networks(&result.decision),
            ["mgmt-net", "storage-net", "workload-net"]
        );
        assert_eq!(
            result.decision.extra_ovdc_networks.as_deref(),
            Some(&["storage-net", "workload-net"].map(String::from)[..])
        );
        let warned = &result.warned;
        assert_eq!(warned.len(), 3);
        assert_eq!(
            warned[0].would_write.as_deref(),
            Some(&["storage-net", "workload-net", "backup-net"].map(String::from)[..])
        );
        let dmz_decision = &warned[1].evaluation.as_ref().expect("decided").decision;
        assert_eq!(
            dmz_decision.violations[0].message,
            "[dmz-guard] workload-net is reserved for tenants"
        );
        let failure = warned[2].evaluation.as_ref().expect_err("trapped");
        assert_eq!(failure.kind(), "trap");

        // An audit counts the warn-mode policies' findings, and their failures.
        let err = result.audited().expect_err("a warn-mode policy failed");
        assert_eq!(
            (err.policy.as_str(), err.index, err.len),
            ("broken-site-rules", 2, 4)
        );
        let audited = PolicyChain::new(capvcd())
            .then(dmz_guard())
            .with_mode(1, Mode::Warn)
            .evaluate(&request())
            .expect("evaluates")
            .audited()
            .expect("nothing failed");
        assert!(!audited.allowed);
        assert_eq!(
            audited.violations[0].message,
            format!("{AUDIT_PREFIX}: [dmz-guard] workload-net is reserved for tenants")
        );
        crate::policy::check_decision(&audited).expect("a coherent decision");
    }

    #[test]
    fn case_settings_go_to_the_first_policy() {
        let chain = PolicyChain::new(capvcd())
            .then(module("observer", Ends::Returning(r#"{"allowed":true}"#)));
        let err = chain
            .with_first_settings(json!({"maxNics": 11}))
            .err()
            .expect("CAPVCD refuses maxNics 11");
        assert!(matches!(err, LoadError::Settings(_)), "{err}");
        let configured = chain
            .with_first_settings(json!({"maxNics": 3}))
            .expect("accepted");
        assert_eq!(configured.first().settings(), &json!({"maxNics": 3}));
        assert!(configured.policies()[1].settings().is_null());
    }
}
