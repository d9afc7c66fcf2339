//! What a provisioner applies of a NIC plan.
//!
//! A policy plans every NIC of a machine's VM: network, index, primary, IP allocation mode,
//! address, adapter, connected. The VM is built by the provisioner, and stock CAPVCD builds it
//! from the machine's networks alone:
//!
//! - the NICs are the primary network (the cluster's `ovdcNetwork`, or the zone's) followed by
//!   `extraOvdcNetworks` in order, numbered 0, 1, 2, ...; NIC 0 is the primary;
//! - every NIC it creates is connected, takes its address from the network's static pool
//!   (`POOL`, no address chosen by anyone else) and is a `VMXNET3` adapter;
//! - a NIC already on the VM is kept as it is, found by its network's name.
//!
//! So a plan that asks for `DHCP` or `NONE`, a `MANUAL` address, another adapter or a
//! disconnected NIC describes a VM that stock CAPVCD will not build. [`unapplied`] lists each
//! such field, with what the provisioner builds instead, so the host can say so: a warning, or
//! a denial where a site wants one ([`OnUnapplied`]). A site whose provisioner applies more (a
//! CAPVCD build of its own, a controller that reconfigures NICs after CAPVCD) declares it with
//! [`Provisioner::applies`]; the fields it does not list are taken to be built as stock CAPVCD
//! builds them.

use serde::{Deserialize, Serialize};

use crate::schema::{AdapterType, Decision, IpAllocationMode, Nic, ObjectKind, Reason, Request};
use crate::Violation;

/// A field of a planned NIC ([`Nic`]), as the plan and docs/schema.md name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PlanField {
    /// The org VDC network of the NIC at this index.
    Network,
    /// Which NIC is the primary.
    Primary,
    /// `IpAddressAllocationMode`.
    IpAllocationMode,
    /// The `MANUAL` address.
    IpAddress,
    /// `NetworkAdapterType`.
    AdapterType,
    /// `IsConnected`.
    Connected,
}

impl PlanField {
    /// Every field, in the plan's order.
    pub const ALL: [PlanField; 6] = [
        PlanField::Network,
        PlanField::Primary,
        PlanField::IpAllocationMode,
        PlanField::IpAddress,
        PlanField::AdapterType,
        PlanField::Connected,
    ];

    /// The field's name in the plan (`ipAllocationMode`).
    pub fn as_str(self) -> &'static str {
        match self {
            PlanField::Network => "network",
            PlanField::Primary => "primary",
            PlanField::IpAllocationMode => "ipAllocationMode",
            PlanField::IpAddress => "ipAddress",
            PlanField::AdapterType => "adapterType",
            PlanField::Connected => "connected",
        }
    }

    /// The field named `name` ([`PlanField::as_str`]).
    pub fn parse(name: &str) -> Option<PlanField> {
        PlanField::ALL.into_iter().find(|f| f.as_str() == name)
    }
}

/// Who builds the VM's NICs, and which plan fields it applies as planned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Provisioner {
    /// The name messages use (`CAPVCD` for the stock provisioner).
    pub name: String,
    /// The fields it applies as planned. The others are built as stock CAPVCD builds them
    /// (the module documentation); stock CAPVCD applies none of them.
    #[serde(default)]
    pub applies: Vec<PlanField>,
}

impl Default for Provisioner {
    fn default() -> Self {
        Provisioner::capvcd()
    }
}

impl Provisioner {
    /// Stock CAPVCD.
    pub fn capvcd() -> Provisioner {
        Provisioner {
            name: "CAPVCD".to_string(),
            applies: Vec::new(),
        }
    }

    /// Whether it applies `field` as planned.
    pub fn applies(&self, field: PlanField) -> bool {
        self.applies.contains(&field)
    }
}

/// What the host does with a plan field the provisioner will not apply.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum OnUnapplied {
    /// Admit, with a warning per field (the default).
    #[default]
    Warn,
    /// Deny: the plan must describe the VM that will be built.
    Deny,
}

/// One plan field the provisioner will not apply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Unapplied {
    /// The provisioner's name ([`Provisioner::name`]).
    pub provisioner: String,
    /// The object field whose value made this NIC: the primary network for NIC 0 (the
    /// VCDCluster's `cluster.spec.ovdcNetwork`), `spec.extraOvdcNetworks[i - 1]` for NIC i
    /// (`spec.template.spec...` for a template).
    pub object_field: String,
    /// The NIC's index in the plan.
    pub index: u32,
    /// The NIC's network in the plan.
    pub network: String,
    /// Which field.
    pub field: PlanField,
    /// The plan's value.
    pub planned: String,
    /// What the provisioner builds instead.
    pub built: String,
}

impl Unapplied {
    /// `NIC 2 (storage-net): ipAllocationMode DHCP is not applied: CAPVCD builds POOL`.
    pub fn message(&self) -> String {
        if self.planned == NO_NIC {
            return format!(
                "NIC {} is not in the plan: {} attaches {}",
                self.index, self.provisioner, self.built
            );
        }
        format!(
            "NIC {} ({}): {} {} is not applied: {} builds {}",
            self.index,
            self.network,
            self.field.as_str(),
            self.planned,
            self.provisioner,
            self.built
        )
    }
}

/// [`Unapplied::planned`] of a NIC the provisioner attaches that the plan leaves out.
pub const NO_NIC: &str = "no NIC";

/// The object field that made NIC `index` (see [`Unapplied::object_field`]).
fn object_field(kind: ObjectKind, index: u32) -> String {
    match index {
        0 => "cluster.spec.ovdcNetwork".to_string(),
        i => format!("{}.extraOvdcNetworks[{}]", kind.spec_path(), i - 1),
    }
}

/// The prefix of every warning (and denial message) about an unapplied field.
pub const UNAPPLIED_PREFIX: &str = "nicpolicy: not built as planned: ";
/// The rule named in the source of a violation of [`OnUnapplied::Deny`]: the host's, not a
/// policy's (the policy planned something the provisioner does not build).
pub const NOT_APPLIED_RULE: &str = "nicpolicy/not-applied";

/// Every field of `decision`'s plan that `provisioner` will not apply, NIC by NIC in field
/// order. The NICs are compared with what the provisioner builds from the machine's networks:
/// the primary network first (taken from the plan's NIC 0, which the policy resolved from the
/// cluster), then the `extraOvdcNetworks` the decision writes (or the machine's own).
pub fn unapplied(
    provisioner: &Provisioner,
    request: &Request,
    decision: &Decision,
) -> Vec<Unapplied> {
    let extras = decision
        .extra_ovdc_networks
        .as_ref()
        .unwrap_or(&request.machine.extra_ovdc_networks);
    let mut found = Vec::new();
    for nic in &decision.nics {
        let i = nic.index as usize;
        let mut push = |field: PlanField, planned: String, built: String| {
            if !provisioner.applies(field) {
                found.push(Unapplied {
                    provisioner: provisioner.name.clone(),
                    object_field: object_field(request.kind, nic.index),
                    index: nic.index,
                    network: nic.network.clone(),
                    field,
                    planned,
                    built,
                });
            }
        };
        if i > 0 {
            let built = extras.get(i - 1).map_or_else(
                || format!("no NIC {i} (extraOvdcNetworks has {})", extras.len()),
                |network| format!("{network} (extraOvdcNetworks[{}])", i - 1),
            );
            if extras.get(i - 1) != Some(&nic.network) {
                push(PlanField::Network, nic.network.clone(), built);
            }
        }
        if nic.primary != (i == 0) {
            push(
                PlanField::Primary,
                nic.primary.to_string(),
                format!("NIC 0 as the primary, so {}", i == 0),
            );
        }
        for (field, planned, built) in stock_differences(nic) {
            push(field, planned, built);
        }
    }
    // NICs the provisioner attaches that the plan leaves out (a plan without NICs has none to
    // compare: its primary network is not known).
    if !decision.nics.is_empty() && !provisioner.applies(PlanField::Network) {
        for (i, network) in extras.iter().enumerate() {
            let index = u32::try_from(i + 1).unwrap_or(u32::MAX);
            if decision.nics.iter().all(|nic| nic.index != index) {
                found.push(Unapplied {
                    provisioner: provisioner.name.clone(),
                    object_field: object_field(request.kind, index),
                    index,
                    network: network.clone(),
                    field: PlanField::Network,
                    planned: NO_NIC.to_string(),
                    built: format!("{network} (extraOvdcNetworks[{i}])"),
                });
            }
        }
    }
    found
}

/// The fields of `nic` stock CAPVCD builds otherwise: (field, planned, built).
fn stock_differences(nic: &Nic) -> Vec<(PlanField, String, String)> {
    let mut differences = Vec::new();
    if nic.ip_allocation_mode != IpAllocationMode::Pool {
        differences.push((
            PlanField::IpAllocationMode,
            nic.ip_allocation_mode.as_str().to_string(),
            "POOL".to_string(),
        ));
    }
    if let Some(address) = &nic.ip_address {
        differences.push((
            PlanField::IpAddress,
            address.clone(),
            "an address from the network's static pool".to_string(),
        ));
    }
    if nic.adapter_type != AdapterType::Vmxnet3 {
        differences.push((
            PlanField::AdapterType,
            nic.adapter_type.as_str().to_string(),
            "VMXNET3".to_string(),
        ));
    }
    if !nic.connected {
        differences.push((
            PlanField::Connected,
            "false".to_string(),
            "a connected NIC".to_string(),
        ));
    }
    differences
}

/// Reports what `provisioner` will not apply of `decision`'s plan: a warning each
/// ([`UNAPPLIED_PREFIX`]), or with [`OnUnapplied::Deny`] a violation each (reason
/// `NotSupported`) on the object field that made the NIC ([`Unapplied::object_field`]), which
/// denies. A decision without a plan is left alone. Returns what was found.
pub fn report(
    provisioner: &Provisioner,
    on_unapplied: OnUnapplied,
    request: &Request,
    decision: &mut Decision,
) -> Vec<Unapplied> {
    let found = unapplied(provisioner, request, decision);
    for item in &found {
        let message = item.message();
        match on_unapplied {
            OnUnapplied::Warn => decision
                .warnings
                .push(format!("{UNAPPLIED_PREFIX}{message}")),
            OnUnapplied::Deny => {
                decision.violations.push(
                    Violation::new(
                        item.object_field.clone(),
                        Reason::NotSupported,
                        format!(
                            "{message}; the plan must describe the VM {} builds \
                         (provisioner.onUnapplied: Deny)",
                            provisioner.name
                        ),
                    )
                    .with_source(
                        crate::Source::rule(NOT_APPLIED_RULE)
                            .with_setting("provisioner.onUnapplied"),
                    ),
                );
                decision.allowed = false;
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;

    fn nic(index: u32, network: &str) -> Nic {
        Nic::capvcd(index, network)
    }

    fn planned(extras: &[&str], nics: Vec<Nic>) -> (Request, Decision) {
        let request = testing::worker(extras);
        let decision = Decision {
            allowed: true,
            nics,
            ..Decision::default()
        };
        (request, decision)
    }

    #[test]
    fn a_plan_of_what_capvcd_builds_has_nothing_unapplied() {
        let (request, decision) = planned(
            &["storage-net", "workload-net"],
            vec![
                nic(0, "mgmt-net"),
                nic(1, "storage-net"),
                nic(2, "workload-net"),
            ],
        );
        assert_eq!(unapplied(&Provisioner::capvcd(), &request, &decision), []);
    }

    #[test]
    fn modes_addresses_adapters_and_disconnected_nics_are_not_applied_by_capvcd() {
        let mut manual = nic(0, "mgmt-net");
        manual.ip_allocation_mode = IpAllocationMode::Manual;
        manual.ip_address = Some("10.10.0.50".into());
        let mut dhcp = nic(1, "storage-net");
        dhcp.ip_allocation_mode = IpAllocationMode::Dhcp;
        dhcp.adapter_type = AdapterType::SriovEthernetCard;
        dhcp.connected = false;
        let (request, decision) = planned(&["storage-net"], vec![manual, dhcp]);
        let found = unapplied(&Provisioner::capvcd(), &request, &decision);
        let fields: Vec<_> = found.iter().map(|u| (u.index, u.field)).collect();
        assert_eq!(
            fields,
            [
                (0, PlanField::IpAllocationMode),
                (0, PlanField::IpAddress),
                (1, PlanField::IpAllocationMode),
                (1, PlanField::AdapterType),
                (1, PlanField::Connected),
            ]
        );
        assert_eq!(
            found[2].message(),
            "NIC 1 (storage-net): ipAllocationMode DHCP is not applied: CAPVCD builds POOL"
        );
    }

    #[test]
    fn a_declared_provisioner_applies_what_it_lists() {
        let mut dhcp = nic(1, "storage-net");
        dhcp.ip_allocation_mode = IpAllocationMode::Dhcp;
        dhcp.adapter_type = AdapterType::E1000e;
        let (request, decision) = planned(&["storage-net"], vec![nic(0, "mgmt-net"), dhcp]);
        let site = Provisioner {
            name: "capvcd-site".into(),
            applies: vec![PlanField::IpAllocationMode],
        };
        let found = unapplied(&site, &request, &decision);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].field, PlanField::AdapterType);
    }

    #[test]
    fn a_plan_out_of_the_machines_order_or_primary_elsewhere_is_reported() {
        let mut second = nic(1, "workload-net");
        second.primary = true;
        let mut first = nic(0, "mgmt-net");
        first.primary = false;
        let (request, decision) = planned(
            &["storage-net", "workload-net"],
            vec![first, second, nic(2, "storage-net"), nic(3, "backup-net")],
        );
        let found = unapplied(&Provisioner::capvcd(), &request, &decision);
        let fields: Vec<_> = found.iter().map(|u| (u.index, u.field)).collect();
        assert_eq!(
            fields,
            [
                (0, PlanField::Primary),
                (1, PlanField::Network),
                (1, PlanField::Primary),
                (2, PlanField::Network),
                (3, PlanField::Network),
            ]
        );
        assert_eq!(found[4].built, "no NIC 3 (extraOvdcNetworks has 2)");
    }

    #[test]
    fn a_nic_the_plan_leaves_out_is_reported() {
        let (request, decision) = planned(
            &["storage-net", "workload-net"],
            vec![nic(0, "mgmt-net"), nic(1, "storage-net")],
        );
        let found = unapplied(&Provisioner::capvcd(), &request, &decision);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            found[0].message(),
            "NIC 2 is not in the plan: CAPVCD attaches workload-net (extraOvdcNetworks[1])"
        );
        // Without any plan there is nothing to compare.
        let (request, empty) = planned(&["storage-net"], Vec::new());
        assert_eq!(unapplied(&Provisioner::capvcd(), &request, &empty), []);
    }

    #[test]
    fn the_defaulted_list_is_what_capvcd_attaches() {
        let (request, mut decision) = planned(&[], vec![nic(0, "mgmt-net"), nic(1, "storage-net")]);
        decision.extra_ovdc_networks = Some(vec!["storage-net".into()]);
        assert_eq!(unapplied(&Provisioner::capvcd(), &request, &decision), []);
    }

    #[test]
    fn report_warns_or_denies_on_the_field_that_made_the_nic() {
        let mut dhcp = nic(1, "storage-net");
        dhcp.ip_allocation_mode = IpAllocationMode::Dhcp;
        let (request, decision) = planned(&["storage-net"], vec![nic(0, "mgmt-net"), dhcp]);
        let mut warned = decision.clone();
        report(
            &Provisioner::capvcd(),
            OnUnapplied::Warn,
            &request,
            &mut warned,
        );
        assert!(warned.allowed);
        assert_eq!(
            warned.warnings,
            [format!(
                "{UNAPPLIED_PREFIX}NIC 1 (storage-net): ipAllocationMode DHCP is not applied: \
                 CAPVCD builds POOL"
            )]
        );
        let mut denied = decision;
        report(
            &Provisioner::capvcd(),
            OnUnapplied::Deny,
            &request,
            &mut denied,
        );
        assert!(!denied.allowed);
        assert_eq!(denied.violations[0].field, "spec.extraOvdcNetworks[0]");
        assert_eq!(denied.violations[0].reason, Reason::NotSupported);
    }

    #[test]
    fn field_names_round_trip() {
        for field in PlanField::ALL {
            assert_eq!(PlanField::parse(field.as_str()), Some(field));
            let json = serde_json::to_string(&field).unwrap();
            assert_eq!(json, format!("\"{}\"", field.as_str()));
        }
    }
}
