//! A decision in words: the text `nicpolicy eval` prints, in the spirit of `kubectl describe`,
//! and the playground shows in its "nicpolicy eval" view (exported to the page, as
//! [`crate::combine`] is), so the two never drift apart.

use std::fmt::Write as _;

use crate::provisioner::{PlanField, Unapplied};
use crate::schema::{Decision, Request, Role, Source};

/// What [`decision_text`] describes besides the decision: the request it answers, the chain's
/// policies (`name version`, in order), the plan fields the provisioner will not apply, and
/// whether to say where each NIC and violation comes from (`--explain`).
#[derive(Clone, Copy, Debug)]
pub struct Described<'a> {
    /// The request the decision answers.
    pub request: &'a Request,
    /// The chain's policies, `name version` each, in order.
    pub policies: &'a [String],
    /// Plan fields the provisioner will not apply: marked `*` in the NIC table.
    pub unapplied: &'a [Unapplied],
    /// Where each NIC and violation comes from, below the table and each violation.
    pub explain: bool,
}

/// The decision as `nicpolicy eval` prints it: which machine, cluster and policies, the
/// verdict, the NIC plan as a table, the defaulted networks, the violations and the warnings.
pub fn decision_text(described: &Described<'_>, decision: &Decision) -> String {
    let Described {
        request,
        unapplied,
        explain,
        ..
    } = *described;
    let mut out = header(described, decision);
    if !decision.nics.is_empty() {
        out.push('\n');
        out.push_str(&nic_table(decision, unapplied));
        if let Some(first) = unapplied.first() {
            let _ = writeln!(
                out,
                "* not built as planned: {} builds it otherwise (see Warnings or Violations)",
                first.provisioner
            );
        }
        if explain {
            let _ = writeln!(out, "\nWhere each NIC comes from:");
            let rows: Vec<[String; 3]> = decision
                .nics
                .iter()
                .map(|nic| {
                    [
                        format!("  NIC {}", nic.index),
                        nic.network.clone(),
                        describe(nic.source.as_deref()),
                    ]
                })
                .collect();
            out.push_str(&table(&rows));
        }
    }
    if !decision.vapp_networks.is_empty() {
        let _ = writeln!(
            out,
            "\nvApp networks: {}",
            decision.vapp_networks.join(", ")
        );
    }
    if let Some(extras) = &decision.extra_ovdc_networks {
        if *extras != request.machine.extra_ovdc_networks {
            let _ = writeln!(
                out,
                "Defaulted {}.extraOvdcNetworks: [{}]",
                request.kind.spec_path(),
                extras.join(", ")
            );
        }
    }
    if !decision.violations.is_empty() {
        let _ = writeln!(out, "\nViolations:");
        for v in &decision.violations {
            let _ = writeln!(out, "  {} ({:?}): {}", v.field, v.reason, v.message);
            if explain {
                let _ = writeln!(out, "    from: {}", describe(v.source.as_deref()));
            }
        }
    }
    if !decision.warnings.is_empty() {
        let _ = writeln!(out, "\nWarnings:");
        for w in &decision.warnings {
            let _ = writeln!(out, "  {w}");
        }
    }
    out
}

/// A source in words; a part without one (a policy run outside a chain) says so.
fn describe(source: Option<&Source>) -> String {
    source.map_or_else(|| "not reported".to_string(), Source::describe)
}

fn yes(flag: bool) -> &'static str {
    if flag {
        "yes"
    } else {
        "no"
    }
}

/// Which machine, cluster and policies, and the verdict.
fn header(described: &Described<'_>, decision: &Decision) -> String {
    let request = described.request;
    let mut out = String::new();
    let machine = &request.machine;
    let namespace = if machine.namespace.is_empty() {
        String::new()
    } else {
        format!("{}/", machine.namespace)
    };
    let _ = writeln!(
        out,
        "Machine:   {} {namespace}{} ({:?}, {})",
        request.kind.as_str(),
        machine.name,
        request.operation,
        match machine.role {
            Role::ControlPlane => "control plane",
            Role::Worker => "worker",
        }
    );
    if request.cluster_unknown {
        let _ = writeln!(out, "Cluster:   (not known yet: checked without it)");
    } else {
        let _ = writeln!(out, "Cluster:   {}", request.cluster.name);
    }
    if let [one] = described.policies {
        let _ = writeln!(out, "Policy:    {one}");
    } else {
        let _ = writeln!(out, "Policies:  {}", described.policies.join(" -> "));
    }
    let _ = writeln!(
        out,
        "Decision:  {}",
        if decision.allowed {
            "allowed"
        } else {
            "denied"
        }
    );
    out
}

/// The NIC plan as a table; a field in `unapplied` is marked `*`.
fn nic_table(decision: &Decision, unapplied: &[Unapplied]) -> String {
    let mut rows = vec![[
        "NIC".to_string(),
        "NETWORK".to_string(),
        "PRIMARY".to_string(),
        "IP MODE".to_string(),
        "IP ADDRESS".to_string(),
        "ADAPTER".to_string(),
        "CONNECTED".to_string(),
    ]];
    for nic in &decision.nics {
        let mark = |field: PlanField, cell: String| {
            if unapplied
                .iter()
                .any(|u| u.index == nic.index && u.field == field)
            {
                cell + "*"
            } else {
                cell
            }
        };
        rows.push([
            nic.index.to_string(),
            mark(PlanField::Network, nic.network.clone()),
            mark(PlanField::Primary, yes(nic.primary).to_string()),
            mark(
                PlanField::IpAllocationMode,
                nic.ip_allocation_mode.as_str().to_string(),
            ),
            mark(
                PlanField::IpAddress,
                nic.ip_address.clone().unwrap_or_else(|| "-".to_string()),
            ),
            mark(
                PlanField::AdapterType,
                nic.adapter_type.as_str().to_string(),
            ),
            mark(PlanField::Connected, yes(nic.connected).to_string()),
        ]);
    }
    table(&rows)
}

/// Left-aligned columns separated by three spaces, like kubectl's tables.
pub fn table<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == N {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}   ", width = widths[i]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::table;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let rows = [
            ["NIC".to_string(), "NETWORK".to_string()],
            ["0".to_string(), "mgmt-net".to_string()],
        ];
        assert_eq!(table(&rows), "NIC   NETWORK\n0     mgmt-net\n");
    }
}
