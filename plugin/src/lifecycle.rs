//! The lifecycle rules: how a policy's decision becomes an answer that never blocks a cluster's
//! lifecycle, whichever policy decides (feature `lifecycle`).
//!
//! Every host that answers admission applies them around the policy, so a policy (a site
//! policy included) does not have to: `nicpolicy`'s host (the webhook, `nicpolicy eval`, the
//! case runner) and the Kubewarden build's waPC glue, which runs where no nicpolicy host is.
//! They are written here alone: [`adjust`] and [`keep_new`] (which nicpolicy's host also applies
//! to each warn-mode policy of a chain), and [`settle`], both on one decision:
//!
//! 1. **An object being deleted is never denied.** When the machine has
//!    `metadata.deletionTimestamp` (CAPVCD removing its finalizer), violations become warnings.
//! 2. **No cluster yet, no cluster rules.** With [`Request::cluster_unknown`], violations on
//!    `cluster.*` fields (from a policy that does not read the flag) become warnings; the rules
//!    that need only the machine still deny.
//! 3. **An UPDATE is judged by what it changes** ("ratcheting", as Kubernetes validates CRDs).
//!    When the decision denies, the stored object is judged too ([`Request::baseline_request`]:
//!    the stored object as an UPDATE that changes nothing); each violation the stored object has
//!    as well, same field and reason, becomes a warning, and only new violations deny. A
//!    decision with [`Decision::strict`] opts out.
//!
//! What depends on the host stays with it: nicpolicy's host also admits a deletion whose
//! evaluation failed ([`deleting_failure`]) and denies a request that makes the policy hit its
//! limits; under Kubewarden, policy-server enforces its own limits.
//!
//! Warnings made here start with one of the `*_PREFIX` constants, so users (and tests) can tell
//! them apart from the policy's own.

use crate::schema::{Decision, Operation, Request, Violation};

/// Starts the warning for a violation the stored object already had.
pub const PREEXISTING_PREFIX: &str = "pre-existing violation, not enforced on this update";
/// Starts the warning for a violation of an object being deleted.
pub const DELETING_PREFIX: &str = "not enforced, the object is being deleted";
/// Starts the warning for a violation about a cluster that is not known yet.
pub const CLUSTER_UNKNOWN_PREFIX: &str = "not enforced until the machine's cluster is known";

/// Applies the rules of this module (see the [module documentation](self)) to `decision`, the
/// policy's decision on `request`: [`adjust`], then, for an UPDATE that still denies,
/// [`keep_new`] against the stored object's decision.
///
/// `judge_stored` decides the stored object's baseline request; it is called at most once, only
/// for an UPDATE the decision still denies. `None` (its evaluation failed) means nothing is
/// known to pre-exist, so every violation keeps denying.
pub fn settle(
    request: &Request,
    decision: &mut Decision,
    judge_stored: impl FnOnce(&Request) -> Option<Decision>,
) {
    if !adjust(request, decision) {
        return;
    }
    let before = request
        .baseline_request()
        .and_then(|stored| judge_stored(&stored));
    if let Some(before) = before {
        keep_new(decision, &before);
    }
}

/// Applies the rules that need only the request (deletion, unknown cluster) to a denying
/// decision; `true` when it still denies and is to be ratcheted against the stored object
/// ([`keep_new`]).
pub fn adjust(request: &Request, decision: &mut Decision) -> bool {
    if decision.allowed {
        return false;
    }
    if request.machine.is_deleting() {
        downgrade(decision, DELETING_PREFIX, |_| true);
        return false;
    }
    if request.cluster_unknown {
        downgrade(decision, CLUSTER_UNKNOWN_PREFIX, |v| {
            v.field.starts_with("cluster.")
        });
    }
    !decision.allowed && !decision.strict && request.operation == Operation::Update
}

/// Ratchets a denying, non-strict decision: the violations the stored object's decision
/// `before` has as well (same field and reason) become warnings.
pub fn keep_new(decision: &mut Decision, before: &Decision) {
    if decision.allowed || decision.strict {
        return;
    }
    downgrade(decision, PREEXISTING_PREFIX, |v| {
        before
            .violations
            .iter()
            .any(|old| old.field == v.field && old.reason == v.reason)
    });
}

/// The answer for an object being deleted whose evaluation failed with `failure`: allowed with
/// a warning that says so, since a deletion must always finish.
pub fn deleting_failure(failure: &dyn std::fmt::Display) -> Decision {
    Decision {
        allowed: true,
        warnings: vec![format!(
            "{DELETING_PREFIX}: the object was not checked: {failure}"
        )],
        ..Decision::default()
    }
}

/// The warning for a machine checked without its cluster (`display` names it, as
/// `VCDMachine prod-eu1/prod-eu1-md-0-x7k2p`): why the cluster is unknown and what was left
/// unchecked.
pub fn unknown_cluster_warning(display: &str, why: &dyn std::fmt::Display) -> String {
    format!(
        "nicpolicy: {display} was checked without its cluster ({why}): the rules that need the \
         VCDCluster (NIC 0, the primary network listed again, zones) run when a VCDMachine is \
         created with its cluster.x-k8s.io/cluster-name label."
    )
}

/// Moves the violations `matches` picks into the warnings, each after `prefix`; the decision
/// allows when none is left.
fn downgrade(decision: &mut Decision, prefix: &str, matches: impl Fn(&Violation) -> bool) {
    let (moved, kept): (Vec<Violation>, Vec<Violation>) = std::mem::take(&mut decision.violations)
        .into_iter()
        .partition(|v| matches(v));
    decision.warnings.extend(
        moved
            .iter()
            .map(|v| format!("{prefix}: {}", v.field_error())),
    );
    decision.violations = kept;
    decision.allowed = decision.violations.is_empty();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{capvcd, testing, Reason};

    fn update(old: &[&str], new: &[&str]) -> Request {
        let mut request = testing::worker(new);
        request.operation = Operation::Update;
        request.old_machine = Some(testing::worker(old).machine);
        request
    }

    /// The CAPVCD rules settled as a host settles a policy's decision.
    fn settled(request: &Request) -> Decision {
        let mut decision = capvcd::evaluate(request);
        settle(request, &mut decision, |stored| {
            Some(capvcd::evaluate(stored))
        });
        decision
    }

    #[test]
    fn an_update_that_keeps_a_stored_violation_is_allowed_with_a_warning() {
        let d = settled(&update(
            &["storage-net", "storage-net"],
            &["storage-net", "storage-net"],
        ));
        assert!(d.allowed, "{d:?}");
        assert!(d.warnings[0].starts_with(PREEXISTING_PREFIX));
        assert!(d.warnings[0].contains("spec.extraOvdcNetworks[1]: Duplicate value"));
    }

    #[test]
    fn an_update_that_adds_a_violation_is_denied_for_it_alone() {
        let d = settled(&update(
            &["storage-net", "storage-net"],
            &["storage-net", "storage-net", "mgmt-net"],
        ));
        assert!(!d.allowed);
        assert_eq!(
            testing::violation_fields(&d),
            [("spec.extraOvdcNetworks[2]", Reason::Duplicate)]
        );
        assert_eq!(d.warnings.len(), 1, "{:?}", d.warnings);
    }

    #[test]
    fn a_strict_decision_or_a_failed_baseline_is_not_ratcheted() {
        let request = update(
            &["storage-net", "storage-net"],
            &["storage-net", "storage-net"],
        );
        let mut strict = capvcd::evaluate(&request);
        strict.strict = true;
        settle(&request, &mut strict, |stored| {
            Some(capvcd::evaluate(stored))
        });
        assert!(!strict.allowed);
        let mut unknown = capvcd::evaluate(&request);
        settle(&request, &mut unknown, |_| None);
        assert!(!unknown.allowed && unknown.warnings.is_empty());
    }

    #[test]
    fn the_stored_object_is_judged_only_when_needed() {
        let judged = std::cell::Cell::new(0);
        let count = |stored: &Request| {
            judged.set(judged.get() + 1);
            assert!(stored.baseline);
            Some(capvcd::evaluate(stored))
        };
        let mut allowed = Decision::from_violations(Vec::new());
        settle(
            &update(&["storage-net"], &["storage-net"]),
            &mut allowed,
            count,
        );
        let mut create = capvcd::evaluate(&testing::worker(&["storage-net", "storage-net"]));
        settle(
            &testing::worker(&["storage-net", "storage-net"]),
            &mut create,
            count,
        );
        assert_eq!(judged.get(), 0);
        assert!(!create.allowed);
    }

    #[test]
    fn an_object_being_deleted_is_never_denied() {
        let mut request = update(&["storage-net", "storage-net"], &["mgmt-net"]);
        request.machine.deletion_timestamp = Some("2026-12-03T16:00:00Z".into());
        let d = settled(&request);
        assert!(d.allowed && d.violations.is_empty());
        assert!(
            d.warnings[0].starts_with(DELETING_PREFIX),
            "{:?}",
            d.warnings
        );
        let d = deleting_failure(&"wasm trap: unreachable");
        assert!(d.allowed && d.warnings[0].contains("unreachable"));
    }

    #[test]
    fn cluster_violations_wait_for_the_cluster() {
        // A policy that does not read `clusterUnknown` sees an empty cluster.
        let request = testing::template_without_cluster(&["storage-net", "storage-net"]);
        let mut plain = request.clone();
        plain.cluster_unknown = false;
        let mut d = capvcd::evaluate(&plain);
        settle(&request, &mut d, |_| None);
        assert_eq!(
            testing::violation_fields(&d),
            [("spec.template.spec.extraOvdcNetworks[1]", Reason::Duplicate)]
        );
        assert!(d
            .warnings
            .iter()
            .any(|w| w.starts_with(CLUSTER_UNKNOWN_PREFIX)));
    }
}
