//! Admission that never blocks a cluster's lifecycle, whichever policy decides: the host's
//! side.
//!
//! A policy judges one object; [`judge`] turns its decision into the answer the host gives, for
//! the webhook, `nicpolicy eval` and the case runner alike. The rules on the decision itself
//! (objects being deleted, unknown clusters, ratcheted updates) are
//! [`nicpolicy_plugin::lifecycle`]'s, shared with the Kubewarden build, which applies them
//! without a nicpolicy host. What only a host that runs the policy can know is here:
//!
//! - **A deletion finishes even when the policy fails.** A failure on an UPDATE of an object
//!   that has `metadata.deletionTimestamp` is an allow with a warning.
//! - **A failure the request causes is a denial.** An input over the policy's input cap, a
//!   time, memory or output limit hit on an input larger than an eighth of that cap
//!   ([`EvalError::is_request_fault`], [`crate::LARGE_INPUT_SHARE`]), or such a limit hit on a
//!   machine that lists more extra networks than a VM can have NICs, denies, naming the
//!   largest part of the machine, whatever the webhook's `onPolicyFailure` says; fail-open is
//!   only for faults of the policy or host, which a request cannot cause on purpose.
//! - **The stored object is judged by the same policies** for a ratcheted UPDATE.
//!
//! The warn-mode entries of a chain ([`crate::mode`]) are judged by the same rules, each on its
//! own, so what is left of their violations is exactly what enforcing them would deny; a
//! request-caused failure of theirs becomes such a would-be denial.

use nicpolicy_plugin::lifecycle::{adjust, deleting_failure, keep_new};
use nicpolicy_plugin::{Decision, Reason, Request, Violation};

use crate::chain::{attributed, ChainError, ChainEvaluation, Warned};
use crate::error::EvalError;
use crate::policy::Evaluation;

/// A successful evaluation whose decision [`judge`] may adjust: a single policy's or a chain's.
pub trait Judged: Sized {
    /// The decision to adjust.
    fn decision_mut(&mut self) -> &mut Decision;
    /// An evaluation standing for `decision`, made by the host rather than a policy.
    fn from_decision(decision: Decision) -> Self;
    /// The results of warn-mode policies, judged as if enforced (none outside a chain).
    fn warned_mut(&mut self) -> &mut [Warned] {
        &mut []
    }
}

impl Judged for Evaluation {
    fn decision_mut(&mut self) -> &mut Decision {
        &mut self.decision
    }

    fn from_decision(decision: Decision) -> Self {
        Evaluation {
            decision,
            logs: Vec::new(),
            elapsed: std::time::Duration::ZERO,
            // Decided without running a policy.
            memory_bytes: 0,
            fuel: None,
        }
    }
}

impl Judged for ChainEvaluation {
    fn decision_mut(&mut self) -> &mut Decision {
        &mut self.decision
    }

    fn from_decision(decision: Decision) -> Self {
        ChainEvaluation {
            decision,
            warned: Vec::new(),
            logs: Vec::new(),
            steps: Vec::new(),
            elapsed: std::time::Duration::ZERO,
            unapplied: Vec::new(),
        }
    }

    fn warned_mut(&mut self) -> &mut [Warned] {
        &mut self.warned
    }
}

/// A failed evaluation: a single policy's error or a chain's.
pub trait Failure: std::fmt::Display {
    /// What went wrong in the policy.
    fn eval_error(&self) -> &EvalError;
}

impl Failure for EvalError {
    fn eval_error(&self) -> &EvalError {
        self
    }
}

impl Failure for ChainError {
    fn eval_error(&self) -> &EvalError {
        &self.error
    }
}

/// Evaluates `request` with `evaluate` and applies the rules of this module (see the
/// [module documentation](self)). `Err` only for a failure of the policy or host on an object
/// that is not being deleted.
///
/// # Errors
/// The error of `evaluate`, unless the request caused it or the object is being deleted.
pub fn judge<T: Judged, E: Failure>(
    request: &Request,
    evaluate: impl Fn(&Request) -> Result<T, E>,
) -> Result<T, E> {
    let mut evaluation = settle(request, evaluate(request))?;
    let mut ratchet = adjust(request, evaluation.decision_mut());
    for warned in evaluation.warned_mut() {
        if let Some(mut decision) = warned
            .evaluation
            .as_ref()
            .err()
            .and_then(|error| answered(request, error))
        {
            // Named like the warn-mode policy's own messages.
            let label = |text: &mut String| *text = attributed(&warned.policy, text);
            decision
                .violations
                .iter_mut()
                .for_each(|v| label(&mut v.message));
            decision.warnings.iter_mut().for_each(label);
            warned.evaluation = Ok(Evaluation::from_decision(decision));
        }
        if let Ok(theirs) = &mut warned.evaluation {
            ratchet |= adjust(request, &mut theirs.decision);
        }
    }
    if !ratchet {
        return Ok(evaluation);
    }
    let Some(stored) = request.baseline_request() else {
        return Ok(evaluation);
    };
    // The stored object is judged the same way; if that fails, nothing is known to pre-exist.
    let Ok(mut before) = evaluate(&stored) else {
        return Ok(evaluation);
    };
    keep_new(request, evaluation.decision_mut(), before.decision_mut());
    let earlier = before.warned_mut();
    for warned in evaluation.warned_mut() {
        let old = earlier.iter().find(|w| w.index == warned.index);
        if let (Ok(now), Some(Ok(old))) = (&mut warned.evaluation, old.map(|w| &w.evaluation)) {
            keep_new(request, &mut now.decision, &old.decision);
        }
    }
    Ok(evaluation)
}

/// The result of an evaluation once a failure the host answers itself is answered; `Err` is
/// left only for a failure of the policy or host.
fn settle<T: Judged, E: Failure>(request: &Request, result: Result<T, E>) -> Result<T, E> {
    match result {
        Err(failure) => match answered(request, &failure) {
            Some(decision) => Ok(T::from_decision(decision)),
            None => Err(failure),
        },
        ok => ok,
    }
}

/// The decision standing for `failure` when it is not the policy's or host's fault to report:
/// on an object being deleted an allow with a warning, for a failure the request caused a
/// denial.
fn answered(request: &Request, failure: &dyn Failure) -> Option<Decision> {
    if request.is_deleting() {
        return Some(deleting_failure(&failure));
    }
    if caused_by_request(request, failure.eval_error()) {
        tracing::info!(error = %failure, "request too large for the policy: judged a denial");
        return Some(request_fault_denial(request, failure));
    }
    None
}

/// The denial for a request too large for a policy: one violation on the largest part of the
/// machine (its annotations, labels or extra networks), saying the sizes.
fn request_fault_denial(request: &Request, failure: &dyn Failure) -> Decision {
    let machine = &request.machine;
    let spec = request.kind.spec_path();
    let parts = [
        (
            "metadata.annotations".to_string(),
            json_len(&machine.annotations),
        ),
        ("metadata.labels".to_string(), json_len(&machine.labels)),
        (
            format!("{spec}.extraOvdcNetworks"),
            json_len(&machine.extra_ovdc_networks),
        ),
    ];
    let (field, largest) = parts
        .into_iter()
        .max_by_key(|(_, len)| *len)
        .unwrap_or_default();
    Decision::from_violations(vec![Violation::new(
        field.clone(),
        Reason::Invalid,
        format!(
            "the request is too large to check: {failure}; the largest part of the object is \
             {field} ({largest} bytes as JSON)"
        ),
    )])
}

/// Most NICs a Cloud Director VM can have (hardware version 7 and later).
pub const MAX_VM_NICS: usize = 10;

/// Whether the request, not the policy or the host, caused `error`: an input over the policy's
/// cap, a time, memory or output limit hit on an input over an eighth of it
/// ([`EvalError::is_request_fault`]), or such a limit hit on a machine that lists more extra networks than
/// a VM can have NICs. No policy is built for such a list, and a request must not be able to
/// make the policy fail on purpose and so be admitted unchecked under `onPolicyFailure: Allow`.
fn caused_by_request(request: &Request, error: &EvalError) -> bool {
    error.is_request_fault()
        || (error.is_resource_limit() && request.machine.extra_ovdc_networks.len() >= MAX_VM_NICS)
}

/// Bytes of `value` as compact JSON (0 if it cannot be written).
fn json_len<T: serde::Serialize>(value: &T) -> usize {
    serde_json::to_vec(value).map_or(0, |bytes| bytes.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nicpolicy_plugin::lifecycle::{DELETING_PREFIX, PREEXISTING_PREFIX};
    use nicpolicy_plugin::testing::update;
    use nicpolicy_plugin::{capvcd, testing};

    /// The CAPVCD rules natively, as a stand-in for a loaded policy.
    fn native(request: &Request) -> Result<Evaluation, EvalError> {
        Ok(Evaluation::from_decision(capvcd::evaluate(request)))
    }

    #[test]
    fn an_update_that_keeps_a_stored_violation_is_allowed_with_a_warning() {
        let request = update(
            &["storage-net", "storage-net"],
            &["storage-net", "storage-net"],
        );
        let judged = judge(&request, native).unwrap();
        assert!(judged.decision.allowed, "{:?}", judged.decision);
        assert!(judged.decision.warnings[0].starts_with(PREEXISTING_PREFIX));
        assert!(judged.decision.warnings[0].contains("spec.extraOvdcNetworks[1]: Duplicate value"));
        // A baseline that fails: nothing is known to pre-exist.
        let baseline_fails = |r: &Request| {
            if r.baseline {
                Err(EvalError::Trap {
                    message: "unreachable".into(),
                })
            } else {
                native(r)
            }
        };
        assert!(!judge(&request, baseline_fails).unwrap().decision.allowed);
    }

    #[test]
    fn an_object_being_deleted_is_never_denied() {
        let mut request = update(&["storage-net", "storage-net"], &["mgmt-net"]);
        request.machine.deletion_timestamp = Some("2026-12-03T16:00:00Z".into());
        let d = judge(&request, native).unwrap().decision;
        assert!(d.allowed && d.violations.is_empty());
        assert!(
            d.warnings[0].starts_with(DELETING_PREFIX),
            "{:?}",
            d.warnings
        );
        let failing = |_: &Request| -> Result<Evaluation, EvalError> {
            Err(EvalError::Trap {
                message: "unreachable".into(),
            })
        };
        let d = judge(&request, failing).unwrap().decision;
        assert!(d.allowed && d.warnings[0].contains("unreachable"));
    }

    #[test]
    fn a_time_limit_hit_on_an_impossible_nic_list_is_the_requests_fault() {
        let names: Vec<String> = (0..5000).map(|i| format!("ext-net-{i:05}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let timeout = |_: &Request| -> Result<Evaluation, EvalError> {
            Err(EvalError::Timeout(std::time::Duration::from_millis(250)))
        };
        let d = judge(&testing::worker(&names), timeout).unwrap().decision;
        assert!(!d.allowed);
        assert_eq!(d.violations[0].field, "spec.extraOvdcNetworks");
        // On a list a VM can have, a time limit stays the policy's fault.
        assert!(judge(&testing::worker(&["storage-net"]), timeout).is_err());
    }

    #[test]
    fn an_oversized_request_is_denied_on_its_largest_part() {
        let mut request = testing::worker(&["storage-net"]);
        request
            .machine
            .annotations
            .insert("backup.example.com/notes".into(), "x".repeat(4096));
        let too_large = |_: &Request| -> Result<Evaluation, EvalError> {
            Err(EvalError::InputTooLarge {
                size: 5000,
                limit: 2048,
            })
        };
        let d = judge(&request, too_large).unwrap().decision;
        assert!(!d.allowed);
        assert_eq!(d.violations[0].field, "metadata.annotations");
        assert!(
            d.violations[0].message.contains("2048-byte limit"),
            "{:?}",
            d
        );
        let other = |_: &Request| -> Result<Evaluation, EvalError> {
            Err(EvalError::Timeout(std::time::Duration::from_millis(250)))
        };
        assert!(judge(&request, other).is_err());
    }

    /// A chain whose one policy, the CAPVCD rules, is in warn mode; `fails` makes it fail with
    /// an input over its cap instead.
    fn warn_mode_chain(fails: bool) -> impl Fn(&Request) -> Result<ChainEvaluation, ChainError> {
        move |request: &Request| {
            let evaluation = if fails {
                Err(EvalError::InputTooLarge {
                    size: 5000,
                    limit: 2048,
                })
            } else {
                native(request)
            };
            let mut chain = ChainEvaluation::from_decision(Decision {
                allowed: true,
                ..Decision::default()
            });
            chain.warned.push(Warned {
                policy: "site-rules".into(),
                index: 0,
                evaluation,
                would_write: None,
            });
            Ok(chain)
        }
    }

    fn warned_decision(judged: &ChainEvaluation) -> &Decision {
        &judged.warned[0]
            .evaluation
            .as_ref()
            .expect("judged")
            .decision
    }

    #[test]
    fn warn_mode_policies_are_judged_as_if_enforced() {
        // A stored violation kept by an UPDATE: enforcing would not deny it, so no would-be
        // denial either.
        let request = update(
            &["storage-net", "storage-net"],
            &["storage-net", "storage-net", "mgmt-net"],
        );
        let judged = judge(&request, warn_mode_chain(false)).unwrap();
        assert!(judged.decision.allowed);
        let theirs = warned_decision(&judged);
        // The CAPVCD rule on a provisioned machine's changed list, and the new duplicate (in
        // field order).
        assert_eq!(
            testing::violation_fields(theirs),
            [
                ("spec.extraOvdcNetworks", Reason::Forbidden),
                ("spec.extraOvdcNetworks[2]", Reason::Duplicate)
            ]
        );
        assert!(theirs.warnings[0].starts_with(PREEXISTING_PREFIX));

        // Being deleted: nothing would be denied.
        let mut deleting = request.clone();
        deleting.machine.deletion_timestamp = Some("2026-12-03T16:00:00Z".into());
        let judged = judge(&deleting, warn_mode_chain(false)).unwrap();
        assert!(warned_decision(&judged).allowed);

        // A request too large for the warn-mode policy: a would-be denial named after it,
        // while the chain's own decision still allows.
        let judged = judge(&testing::worker(&["storage-net"]), warn_mode_chain(true)).unwrap();
        assert!(judged.decision.allowed);
        let theirs = warned_decision(&judged);
        assert!(!theirs.allowed);
        assert!(
            theirs.violations[0]
                .message
                .starts_with("[site-rules] the request is too large"),
            "{theirs:?}"
        );
    }

    #[test]
    fn a_limit_hit_on_a_large_input_is_the_requests_fault() {
        let mut request = testing::worker(&["storage-net"]);
        request
            .machine
            .labels
            .insert("inventory.example.net/notes".into(), "x".repeat(4096));
        let large = |_: &Request| -> Result<Evaluation, EvalError> {
            Err(EvalError::LimitOnLargeInput {
                cause: Box::new(EvalError::MemoryLimit { limit: 8 << 20 }),
                size: 4200,
                limit: 8192,
            })
        };
        let d = judge(&request, large).unwrap().decision;
        assert!(!d.allowed);
        assert_eq!(d.violations[0].field, "metadata.labels");
        assert!(d.violations[0].message.contains("memory limit"), "{d:?}");
    }
}
