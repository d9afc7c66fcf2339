//! Shadow mode: what a candidate chain would decide differently from the chain in force, so a
//! new policy's effect is known before it is enforced.

use nicpolicy_plugin::{Decision, Nic};
use serde::Serialize;

/// How the candidate's decision differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Change {
    /// Same result, same NIC plan, same violations.
    Same,
    /// Allowed today, denied by the candidate.
    NewlyDenied,
    /// Denied today, allowed by the candidate.
    NewlyAllowed,
    /// Allowed by both, with another NIC plan (or another list written back).
    NicPlan,
    /// Denied by both, for other reasons.
    Violations,
    /// The candidate failed at run time.
    CandidateFailed,
    /// The chain in force failed at run time and the candidate decided.
    CurrentFailed,
}

impl Change {
    /// The name as JSON and metrics labels spell it: `same`, `newlyDenied`, ...
    pub fn label(self) -> &'static str {
        match self {
            Change::Same => "same",
            Change::NewlyDenied => "newlyDenied",
            Change::NewlyAllowed => "newlyAllowed",
            Change::NicPlan => "nicPlan",
            Change::Violations => "violations",
            Change::CandidateFailed => "candidateFailed",
            Change::CurrentFailed => "currentFailed",
        }
    }

    /// The column text: `same`, `newly denied`, `newly allowed`, `NIC plan`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Same => "same",
            Change::NewlyDenied => "newly denied",
            Change::NewlyAllowed => "newly allowed",
            Change::NicPlan => "NIC plan",
            Change::Violations => "violations",
            Change::CandidateFailed => "candidate failed",
            Change::CurrentFailed => "current failed",
        }
    }
}

/// The candidate chain's view of one machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Shadow {
    /// How it differs.
    pub change: Change,
    /// What changed, one line each (empty when nothing did).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
    /// The candidate's decision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
}

/// Compares the decision in force with the candidate's (each, or the failure message).
pub fn compare(current: &Result<Decision, String>, candidate: Result<Decision, String>) -> Shadow {
    let candidate = match candidate {
        Ok(decision) => decision,
        Err(message) => {
            return Shadow {
                change: Change::CandidateFailed,
                details: vec![message],
                decision: None,
            }
        }
    };
    let current = match current {
        Ok(decision) => decision,
        Err(_) => {
            return Shadow {
                change: Change::CurrentFailed,
                details: vec![format!(
                    "the candidate {}",
                    if candidate.allowed {
                        "allows it"
                    } else {
                        "denies it"
                    }
                )],
                decision: Some(candidate),
            }
        }
    };
    let mut details = violation_changes(current, &candidate);
    details.extend(plan_changes(current, &candidate));
    let change = match (current.allowed, candidate.allowed) {
        (true, false) => Change::NewlyDenied,
        (false, true) => Change::NewlyAllowed,
        (true, true) if !details.is_empty() => Change::NicPlan,
        (false, false) if !details.is_empty() => Change::Violations,
        _ => Change::Same,
    };
    // A denied machine gets no NIC plan worth comparing: list only what blocks it.
    if !candidate.allowed {
        details.retain(|line| line.starts_with('+') || line.starts_with('-'));
    }
    Shadow {
        change,
        details,
        decision: (change != Change::Same).then_some(candidate),
    }
}

/// Violations only one side has, compared by field and reason: in a chain each message is
/// prefixed with its policy's name, which differs between chains.
fn violation_changes(current: &Decision, candidate: &Decision) -> Vec<String> {
    let key = |v: &nicpolicy_plugin::Violation| (v.field.clone(), v.reason);
    let before: Vec<_> = current.violations.iter().map(key).collect();
    let after: Vec<_> = candidate.violations.iter().map(key).collect();
    let mut lines = Vec::new();
    for v in &candidate.violations {
        if !before.contains(&key(v)) {
            lines.push(format!("+ {} ({:?}): {}", v.field, v.reason, v.message));
        }
    }
    for v in &current.violations {
        if !after.contains(&key(v)) {
            lines.push(format!("- {} ({:?}): {}", v.field, v.reason, v.message));
        }
    }
    lines
}

fn nic_text(nic: &Nic) -> String {
    let mut text = format!(
        "{} {} {}",
        nic.network,
        nic.ip_allocation_mode.as_str(),
        nic.adapter_type.as_str()
    );
    if let Some(ip) = &nic.ip_address {
        text.push_str(&format!(" {ip}"));
    }
    if !nic.connected {
        text.push_str(" disconnected");
    }
    text
}

fn plan_changes(current: &Decision, candidate: &Decision) -> Vec<String> {
    let mut lines = Vec::new();
    let len = current.nics.len().max(candidate.nics.len());
    for i in 0..len {
        match (current.nics.get(i), candidate.nics.get(i)) {
            (Some(a), Some(b)) if a != b => {
                lines.push(format!("NIC {i}: {} -> {}", nic_text(a), nic_text(b)))
            }
            (Some(a), None) => lines.push(format!("NIC {i}: {} -> (none)", nic_text(a))),
            (None, Some(b)) => lines.push(format!("NIC {i}: (none) -> {}", nic_text(b))),
            _ => {}
        }
    }
    if current.extra_ovdc_networks != candidate.extra_ovdc_networks {
        let show = |list: &Option<Vec<String>>| match list {
            Some(list) => format!("[{}]", list.join(", ")),
            None => "unchanged".to_string(),
        };
        lines.push(format!(
            "extraOvdcNetworks written back: {} -> {}",
            show(&current.extra_ovdc_networks),
            show(&candidate.extra_ovdc_networks)
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use nicpolicy_plugin::{AdapterType, IpAllocationMode, Reason, Violation};

    fn nic(index: u32, network: &str, mode: IpAllocationMode) -> Nic {
        Nic {
            index,
            network: network.to_string(),
            primary: index == 0,
            ip_allocation_mode: mode,
            ip_address: None,
            adapter_type: AdapterType::Vmxnet3,
            connected: true,
            source: None,
        }
    }

    fn allowed(nics: Vec<Nic>) -> Decision {
        Decision {
            allowed: true,
            nics,
            ..Decision::default()
        }
    }

    fn denied(field: &str, reason: Reason) -> Decision {
        Decision::from_violations(vec![Violation::new(field, reason, "too many NICs")])
    }

    #[test]
    fn the_same_decision_is_the_same() {
        let plan = allowed(vec![nic(0, "mgmt-net", IpAllocationMode::Pool)]);
        let shadow = compare(&Ok(plan.clone()), Ok(plan));
        assert_eq!(shadow.change, Change::Same);
        assert!(shadow.details.is_empty());
        assert!(shadow.decision.is_none());
    }

    #[test]
    fn newly_denied_names_the_new_violation() {
        let plan = allowed(vec![nic(0, "mgmt-net", IpAllocationMode::Pool)]);
        let shadow = compare(
            &Ok(plan),
            Ok(denied("spec.extraOvdcNetworks", Reason::TooMany)),
        );
        assert_eq!(shadow.change, Change::NewlyDenied);
        assert_eq!(
            shadow.details,
            ["+ spec.extraOvdcNetworks (TooMany): too many NICs"]
        );
    }

    #[test]
    fn newly_allowed_names_the_violation_gone() {
        let plan = allowed(vec![nic(0, "mgmt-net", IpAllocationMode::Pool)]);
        let shadow = compare(
            &Ok(denied("spec.extraOvdcNetworks", Reason::TooMany)),
            Ok(plan),
        );
        assert_eq!(shadow.change, Change::NewlyAllowed);
        assert!(shadow.details[0].starts_with("- spec.extraOvdcNetworks (TooMany)"));
    }

    #[test]
    fn another_plan_lists_each_nic_that_changed() {
        let before = allowed(vec![
            nic(0, "mgmt-net", IpAllocationMode::Pool),
            nic(1, "storage-net", IpAllocationMode::Pool),
        ]);
        let after = allowed(vec![
            nic(0, "mgmt-net", IpAllocationMode::Pool),
            nic(1, "storage-net", IpAllocationMode::Dhcp),
            nic(2, "workload-net", IpAllocationMode::Pool),
        ]);
        let shadow = compare(&Ok(before), Ok(after));
        assert_eq!(shadow.change, Change::NicPlan);
        assert_eq!(
            shadow.details,
            [
                "NIC 1: storage-net POOL VMXNET3 -> storage-net DHCP VMXNET3",
                "NIC 2: (none) -> workload-net POOL VMXNET3"
            ]
        );
    }

    #[test]
    fn other_violations_and_failures_are_told_apart() {
        let shadow = compare(
            &Ok(denied("spec.extraOvdcNetworks", Reason::TooMany)),
            Ok(denied("spec.extraOvdcNetworks[1]", Reason::NotFound)),
        );
        assert_eq!(shadow.change, Change::Violations);
        assert_eq!(shadow.details.len(), 2);
        let failed = compare(
            &Ok(denied("spec", Reason::Invalid)),
            Err("policy dmz-guard failed: time limit".into()),
        );
        assert_eq!(failed.change, Change::CandidateFailed);
    }
}
