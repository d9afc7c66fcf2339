//! The lifecycle rules: how a policy's decision becomes an answer that never blocks a cluster's
//! lifecycle, whichever policy decides (feature `lifecycle`), and that no request can walk
//! around.
//!
//! Every host that answers admission applies them around the policy, so a policy (a site
//! policy included) does not have to: `nicpolicy`'s host (the webhook, `nicpolicy eval`, the
//! case runner, `audit` and the controller) and the Kubewarden build's waPC glue, which runs
//! where no nicpolicy host is. They are written here alone: [`adjust`] and [`keep_new`] (which
//! nicpolicy's host also applies to each warn-mode policy of a chain), [`settle`], both on one
//! decision, and [`undefaulted`] for validation:
//!
//! 1. **An object being deleted is never denied.** On an UPDATE of a machine with
//!    `metadata.deletionTimestamp` (CAPVCD removing its finalizer), violations become warnings.
//!    A CREATE carrying the field is judged like any other ([`Request::is_deleting`]):
//!    kube-apiserver clears it before storing the object.
//! 2. **No cluster yet, no cluster rules.** With [`Request::cluster_unknown`], violations on
//!    `cluster.*` fields (from a policy that does not read the flag) become warnings; the rules
//!    that need only the machine still deny.
//! 3. **An UPDATE is judged by what it changes** ("ratcheting", as Kubernetes validates CRDs),
//!    and only where the stored object was judged by the same rules ([`may_ratchet`]). When the
//!    decision denies, the stored object is judged too ([`Request::baseline_request`]: the
//!    stored object as an UPDATE that changes nothing); a violation is excused (becomes a
//!    warning) only when the stored object has it too, same field and reason, **and the value
//!    at that field is the same in both** ([`same_value`]). Only new violations deny. A
//!    decision with [`Decision::strict`] opts out.
//! 4. **Validation judges the object as it is** ([`undefaulted`]): a list the policies' own
//!    defaulting would change is denied on CREATE and on UPDATEs that change the NIC inputs, so
//!    a request that skipped (or undid) the mutating webhook cannot store an undefaulted machine.
//!
//! What depends on the host stays with it: nicpolicy's host also admits a deletion whose
//! evaluation failed ([`deleting_failure`]) and denies a request that makes the policy hit its
//! limits; under Kubewarden, policy-server enforces its own limits.
//!
//! Warnings made here start with one of the `*_PREFIX` constants, so users (and tests) can tell
//! them apart from the policy's own.

use std::collections::BTreeMap;

use crate::schema::{Decision, ObjectKind, Operation, Reason, Request, Violation};

/// Starts the warning for a violation the stored object already had.
pub const PREEXISTING_PREFIX: &str = "pre-existing violation, not enforced on this update";
/// Starts the warning for a violation of an object being deleted.
pub const DELETING_PREFIX: &str = "not enforced, the object is being deleted";
/// Starts the warning for a violation about a cluster that is not known yet.
pub const CLUSTER_UNKNOWN_PREFIX: &str = "not enforced until the machine's cluster is known";
/// Starts the message of the violation [`undefaulted`] adds.
pub const UNDEFAULTED_PREFIX: &str = "not defaulted";
/// Starts the warning for a violation of a machine created already built (`clusterctl move`,
/// a restore: [`already_built`]).
pub const ALREADY_BUILT_PREFIX: &str = "already built, not enforced on this create";
/// Starts the warning for a violation of an immutability rule in Cluster API's topology dry
/// run ([`topology_dry_run`]).
pub const TOPOLOGY_DRY_RUN_PREFIX: &str = "not enforced in Cluster API's topology dry run";
/// The annotation Cluster API's topology controller sets on the objects of its server-side
/// dry runs (`topology.cluster.x-k8s.io/dry-run`).
pub const TOPOLOGY_DRY_RUN_ANNOTATION: &str = "topology.cluster.x-k8s.io/dry-run";

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
        keep_new(request, decision, &before);
    }
}

/// Applies the rules that need only the request (deletion, unknown cluster) to a denying
/// decision; `true` when it still denies and is to be ratcheted against the stored object
/// ([`keep_new`]): an UPDATE [`may_ratchet`] and a decision that is not strict.
pub fn adjust(request: &Request, decision: &mut Decision) -> bool {
    if decision.allowed {
        return false;
    }
    if request.is_deleting() {
        downgrade(decision, DELETING_PREFIX, |_| true);
        return false;
    }
    if request.cluster_unknown {
        downgrade(decision, CLUSTER_UNKNOWN_PREFIX, |v| {
            v.field.starts_with("cluster.")
        });
    }
    !decision.allowed && !decision.strict && may_ratchet(request)
}

/// Whether violations the stored object had may be excused on this UPDATE at all: the stored
/// object must have been judged by the rules that judge this one.
///
/// - the request is an UPDATE with its stored object;
/// - the machine's cluster is known and the stored object named the same one
///   ([`Request::same_cluster_as_stored`]): the first review in which the cluster is known, and
///   any change of cluster, is judged in full;
/// - the zone (`spec.failureDomain`) and the role (the control-plane label) are unchanged;
/// - a VCDMachine was provisioned and stays so: the stored object and this one carry the same
///   non-empty `spec.providerID`. Its VM exists with the stored NICs, which denying cannot
///   undo. An UPDATE that clears or changes the provider ID is judged in full (CAPVCD would
///   build from the list again), and so is a machine not built yet, so nothing stored
///   unchecked (before its cluster existed, say) reaches a VM. A VCDMachineTemplate builds
///   nothing itself: every VCDMachine made from it is judged in full when it is created.
pub fn may_ratchet(request: &Request) -> bool {
    let Some(old) = request.old_machine.as_ref() else {
        return false;
    };
    let new = &request.machine;
    request.operation == Operation::Update
        && request.same_cluster_as_stored
        && !request.cluster_unknown
        && old.failure_domain == new.failure_domain
        && old.role == new.role
        && (request.kind == ObjectKind::VcdMachineTemplate || stays_provisioned(request))
}

/// Whether an UPDATE leaves a provisioned machine provisioned: the stored object and the new
/// one carry the same non-empty `spec.providerID`. What the ratchet ([`may_ratchet`]) and the
/// kept plan record ([`rewritten_plan`]) rest on.
pub fn stays_provisioned(request: &Request) -> bool {
    request.operation == Operation::Update
        && request.old_machine.as_ref().is_some_and(|old| {
            old.is_provisioned() && old.provider_id == request.machine.provider_id
        })
}

/// Applies to a machine created already built (a non-empty `spec.providerID` on a CREATE, as
/// `clusterctl move` and restores create them, while its Cluster is paused): its VM exists with
/// the NICs of this spec, which denying cannot undo and only stops the move half way, so every
/// violation becomes a warning. The host decides when a CREATE is one (docs/deploy.md, "What
/// the ratchet excuses"); it also leaves such a machine undefaulted and its plan annotation as
/// written.
pub fn already_built(decision: &mut Decision) {
    downgrade(decision, ALREADY_BUILT_PREFIX, |_| true);
}

/// Whether a request is Cluster API's topology dry run, as Cluster API's own helper tells it
/// (`topology.IsDryRunRequest`): a server-side dry run (`dry_run`) of an object carrying
/// [`TOPOLOGY_DRY_RUN_ANNOTATION`]. Cluster API expects providers to skip immutability checks
/// there: the dry run compares the stored object with the one it would write.
pub fn is_topology_dry_run(dry_run: bool, annotations: &BTreeMap<String, String>) -> bool {
    dry_run && annotations.contains_key(TOPOLOGY_DRY_RUN_ANNOTATION)
}

/// In a topology dry run ([`is_topology_dry_run`]), violations of the immutability rules (a
/// rule named `.../provisioned-update`: the NIC list of a provisioned machine) become
/// warnings; the structural rules (names, duplicates, counts, the primary) still deny.
pub fn topology_dry_run(decision: &mut Decision) {
    downgrade(decision, TOPOLOGY_DRY_RUN_PREFIX, |v| {
        v.source
            .as_ref()
            .and_then(|s| s.rule.as_deref())
            .is_some_and(|rule| rule.ends_with("/provisioned-update"))
    });
}

/// Ratchets a denying, non-strict decision on `request`: the violations the stored object's
/// decision `before` has as well (same field and reason) become warnings, when the value at
/// that field is the same in the stored object and in this one ([`same_value`]).
pub fn keep_new(request: &Request, decision: &mut Decision, before: &Decision) {
    if decision.allowed || decision.strict {
        return;
    }
    downgrade(decision, PREEXISTING_PREFIX, |v| {
        same_value(request, &v.field)
            && before
                .violations
                .iter()
                .any(|old| old.field == v.field && old.reason == v.reason)
    });
}

/// Whether the UPDATE leaves the value at `field` (a violation's path) as it was: the same
/// network at `extraOvdcNetworks[i]`, the same whole list for `extraOvdcNetworks` (so a list
/// stored too long cannot grow), the same zone, the same label or annotation. `cluster.*` and
/// `settings.*` are the same in both judgements ([`may_ratchet`] holds the cluster fixed). A
/// path this does not know counts as unchanged only when the machine's NIC inputs (extra
/// networks, zone, role) all are. `false` without a stored object.
pub fn same_value(request: &Request, field: &str) -> bool {
    let Some(old) = request.old_machine.as_ref() else {
        return false;
    };
    let new = &request.machine;
    let spec = request.kind.spec_path();
    let nic_inputs_same = old.extra_ovdc_networks == new.extra_ovdc_networks
        && old.failure_domain == new.failure_domain
        && old.role == new.role;
    if field.starts_with("cluster.") || field.starts_with("settings.") {
        return true;
    }
    if let Some(rest) = field
        .strip_prefix(spec)
        .and_then(|rest| rest.strip_prefix('.'))
    {
        if rest == "extraOvdcNetworks" {
            return old.extra_ovdc_networks == new.extra_ovdc_networks;
        }
        if let Some(index) = rest
            .strip_prefix("extraOvdcNetworks[")
            .and_then(|rest| rest.strip_suffix(']'))
        {
            return match index.parse::<usize>() {
                Ok(i) => old.extra_ovdc_networks.get(i) == new.extra_ovdc_networks.get(i),
                Err(_) => nic_inputs_same,
            };
        }
        if rest == "failureDomain" {
            return old.failure_domain == new.failure_domain;
        }
        return nic_inputs_same;
    }
    same_entry(field, "metadata.labels", &old.labels, &new.labels)
        .or_else(|| {
            same_entry(
                field,
                "metadata.annotations",
                &old.annotations,
                &new.annotations,
            )
        })
        .unwrap_or(nic_inputs_same)
}

/// For a `field` under `prefix` (`metadata.labels` or `metadata.labels[key]`), whether the
/// map, or its entry, is the same in `old` and `new`; `None` for another field.
fn same_entry(
    field: &str,
    prefix: &str,
    old: &BTreeMap<String, String>,
    new: &BTreeMap<String, String>,
) -> Option<bool> {
    let rest = field.strip_prefix(prefix)?;
    if rest.is_empty() {
        return Some(old == new);
    }
    let key = rest.strip_prefix('[')?.strip_suffix(']')?;
    Some(old.get(key) == new.get(key))
}

/// The violation for an object the mutating webhook did not default: `decision` (the
/// policies' allowing decision on `request`) would write another `extraOvdcNetworks` than the
/// object has. Checked on CREATE and on an UPDATE that changes the NIC inputs (extra networks,
/// zone, role, or the cluster), so a machine stored before defaulting existed is not blocked on
/// metadata-only updates; never for an object being deleted. A validating webhook adds it, so
/// a request that skipped or undid defaulting (another mutating webhook after nicpolicy's, a
/// made-up `deletionTimestamp` that kept the mutating webhook out) cannot store the object.
pub fn undefaulted(request: &Request, decision: &Decision) -> Option<Violation> {
    let written = decision.extra_ovdc_networks.as_ref()?;
    let machine = &request.machine;
    if !decision.allowed || *written == machine.extra_ovdc_networks || request.is_deleting() {
        return None;
    }
    let inputs_changed = match (&request.operation, &request.old_machine) {
        (Operation::Update, Some(old)) => {
            old.extra_ovdc_networks != machine.extra_ovdc_networks
                || old.failure_domain != machine.failure_domain
                || old.role != machine.role
                || !request.same_cluster_as_stored
        }
        _ => true,
    };
    if !inputs_changed {
        return None;
    }
    Some(Violation::new(
        format!("{}.extraOvdcNetworks", request.kind.spec_path()),
        Reason::Invalid,
        format!(
            "{UNDEFAULTED_PREFIX}: the policies' defaulting sets {written:?} here, the object has \
             {:?}; create it through the mutating webhook (nicpolicy's \
             MutatingWebhookConfiguration, reinvocationPolicy: IfNeeded) or write the list yourself",
            machine.extra_ovdc_networks
        ),
    ))
}

/// The stored NIC plan annotation of a machine that was provisioned and stays so (the same
/// non-empty provider ID on both objects), when this UPDATE changes it: `Some(stored)`, the
/// value (None: no annotation) the record must keep. The plan of a provisioned machine is the
/// record of what its VM was built with; nobody rewrites it, nicpolicy included.
pub fn rewritten_plan(request: &Request) -> Option<Option<&String>> {
    let old = request.old_machine.as_ref()?;
    let new = &request.machine;
    if !stays_provisioned(request) || request.is_deleting() {
        return None;
    }
    let (was, is) = (
        old.annotations.get(crate::mutation::NIC_PLAN_ANNOTATION),
        new.annotations.get(crate::mutation::NIC_PLAN_ANNOTATION),
    );
    (was != is).then_some(was)
}

/// The violation of an UPDATE that rewrites a provisioned machine's NIC plan annotation
/// ([`rewritten_plan`]); the mutating webhook puts the stored one back first, so only a
/// request that skipped it meets this.
pub fn rewritten_plan_violation(request: &Request) -> Option<Violation> {
    rewritten_plan(request)?;
    Some(Violation::new(
        format!(
            "metadata.annotations[{}]",
            crate::mutation::NIC_PLAN_ANNOTATION
        ),
        Reason::Forbidden,
        format!(
            "the NIC plan of a provisioned machine ({}) is the record of what its VM was built \
             with and is kept as stored",
            request.machine.provider_id.as_deref().unwrap_or_default()
        ),
    ))
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
    use crate::testing::update;
    use crate::{capvcd, testing, Reason};

    /// The violations of `d` but the CAPVCD policy's rule 7 (`Forbidden` on the list: the NICs
    /// of a provisioned machine changed), which every UPDATE below that changes the list has.
    fn besides_rule_7(d: &Decision) -> Vec<(&str, Reason)> {
        let fields = testing::violation_fields(d);
        assert!(
            fields.contains(&("spec.extraOvdcNetworks", Reason::Forbidden)),
            "rule 7 is never excused: {d:?}"
        );
        fields
            .into_iter()
            .filter(|(_, reason)| *reason != Reason::Forbidden)
            .collect()
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
            besides_rule_7(&d),
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

    #[test]
    fn a_stored_violation_excuses_only_the_same_value() {
        // Another unknown (here: duplicate) network put in the stored one's place is denied.
        let d = settled(&update(
            &["storage-net", "storage-net"],
            &["storage-net", "mgmt-net"],
        ));
        assert_eq!(
            besides_rule_7(&d),
            [("spec.extraOvdcNetworks[1]", Reason::Duplicate)]
        );
        assert!(d.warnings.is_empty(), "{:?}", d.warnings);
    }

    #[test]
    fn a_list_stored_too_long_cannot_grow() {
        let names: Vec<String> = (0..14).map(|i| format!("ext-net-{i:02}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        // 11 extras kept as they are: excused.
        let kept = settled(&update(&names[..11], &names[..11]));
        assert!(kept.allowed, "{kept:?}");
        // 11 -> 14: the count violation is on another value now.
        let grown = settled(&update(&names[..11], &names));
        assert!(!grown.allowed);
        assert_eq!(
            besides_rule_7(&grown),
            [("spec.extraOvdcNetworks", Reason::TooMany)]
        );
    }

    #[test]
    fn the_first_known_cluster_and_a_change_of_cluster_are_judged_in_full() {
        let same = update(
            &["storage-net", "storage-net"],
            &["storage-net", "storage-net"],
        );
        assert!(settled(&same).allowed);
        // The stored object named no cluster, or another one.
        let mut first_known = same.clone();
        first_known.same_cluster_as_stored = false;
        let d = settled(&first_known);
        assert!(!d.allowed && d.warnings.is_empty(), "{d:?}");
        // The cluster is still unknown: nothing the stored object had was judged against it.
        let mut unknown = same.clone();
        unknown.cluster_unknown = true;
        assert!(!settled(&unknown).allowed);
        assert!(!may_ratchet(&unknown));
    }

    #[test]
    fn a_machine_not_built_yet_a_zone_change_or_a_role_change_is_judged_in_full() {
        let same = update(
            &["storage-net", "storage-net"],
            &["storage-net", "storage-net"],
        );
        let mut unbuilt = same.clone();
        if let Some(old) = unbuilt.old_machine.as_mut() {
            old.provider_id = None;
        }
        assert!(!settled(&unbuilt).allowed);
        // A template builds no VM: its stored violations are excused without a providerID.
        let mut template = unbuilt.clone();
        template.kind = ObjectKind::VcdMachineTemplate;
        assert!(may_ratchet(&template));
        let mut zone = same.clone();
        zone.machine.failure_domain = Some("eu1-az2".into());
        assert!(!may_ratchet(&zone));
        let mut role = same;
        role.machine.role = crate::Role::ControlPlane;
        assert!(!may_ratchet(&role));
    }

    #[test]
    fn same_value_reads_every_kind_of_path() {
        let mut request = update(
            &["storage-net", "backup-net"],
            &["storage-net", "workload-net"],
        );
        let old = request.old_machine.as_mut().unwrap();
        old.annotations
            .insert("nicpolicy.io/ip.storage-net".into(), "10.20.0.15".into());
        request
            .machine
            .annotations
            .insert("nicpolicy.io/ip.storage-net".into(), "10.20.0.16".into());
        request
            .machine
            .labels
            .insert("team".into(), "platform".into());
        assert!(same_value(&request, "spec.extraOvdcNetworks[0]"));
        assert!(!same_value(&request, "spec.extraOvdcNetworks[1]"));
        assert!(!same_value(&request, "spec.extraOvdcNetworks"));
        assert!(same_value(&request, "spec.failureDomain"));
        assert!(!same_value(
            &request,
            "metadata.annotations[nicpolicy.io/ip.storage-net]"
        ));
        assert!(same_value(
            &request,
            "metadata.annotations[nicpolicy.io/ip.mgmt-net]"
        ));
        assert!(!same_value(&request, "metadata.labels"));
        assert!(same_value(&request, "cluster.spec.ovdcNetwork"));
        // An unknown path: the NIC inputs changed.
        assert!(!same_value(&request, "spec.extraOvdcNetworks[x]"));
        assert!(!same_value(&request, "spec.somethingElse"));
    }

    #[test]
    fn a_create_with_a_deletion_timestamp_is_judged_like_any_other() {
        let mut create = testing::worker(&["storage-net", "storage-net"]);
        create.machine.deletion_timestamp = Some("2026-12-03T16:00:00Z".into());
        assert!(!create.is_deleting());
        assert!(!settled(&create).allowed);
    }

    #[test]
    fn validation_denies_a_list_defaulting_would_change() {
        let mut defaulted = Decision::from_violations(Vec::new());
        defaulted.extra_ovdc_networks = Some(vec!["storage-net".into()]);
        let create = testing::worker(&[]);
        let v = undefaulted(&create, &defaulted).expect("denied");
        assert_eq!(v.field, "spec.extraOvdcNetworks");
        assert!(v.message.starts_with(UNDEFAULTED_PREFIX), "{}", v.message);
        // Defaulted already: nothing to say.
        assert!(undefaulted(&testing::worker(&["storage-net"]), &defaulted).is_none());
        // A metadata-only UPDATE of a machine stored before defaulting: not blocked.
        let relabel = update(&[], &[]);
        assert!(undefaulted(&relabel, &defaulted).is_none());
        // An UPDATE that changes the list, or the first with a known cluster: checked.
        assert!(undefaulted(&update(&["backup-net"], &[]), &defaulted).is_some());
        let mut first_known = relabel.clone();
        first_known.same_cluster_as_stored = false;
        assert!(undefaulted(&first_known, &defaulted).is_some());
        // Being deleted: never.
        let mut deleting = update(&["backup-net"], &[]);
        deleting.machine.deletion_timestamp = Some("2026-12-03T16:00:00Z".into());
        assert!(undefaulted(&deleting, &defaulted).is_none());
    }
}
