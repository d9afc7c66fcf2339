//! What a provisioner applies of a NIC plan.
//!
//! A policy plans every NIC of a machine's VM: network, index, primary, IP allocation mode,
//! address, adapter, connected. The VM is built by the provisioner, and every build a site runs
//! builds it from the machine's networks alone:
//!
//! - the NICs are the primary network (the cluster's `ovdcNetwork`, or the zone's) followed by
//!   `extraOvdcNetworks` in order, numbered 0, 1, 2, ...; NIC 0 is the primary;
//! - every NIC it creates is connected, a `VMXNET3` adapter, and takes its address the way the
//!   build does: stock CAPVCD (v1.3.2 and `main`) from the network's static pool (`POOL`),
//!   Deckhouse's patched v1.3.2 by `DHCP`;
//! - a NIC already on the VM is kept as it is, found by its network's name.
//!
//! A site names its build with a [`Profile`]; [`Provisioner::of`] gives what it builds
//! ([`Builds`]). So a plan that asks for another mode, a `MANUAL` address, another adapter or a
//! disconnected NIC describes a VM the build will not make. [`unapplied`] lists each such field,
//! with what the provisioner builds instead, so the host can say so: a warning, or a denial
//! where a site wants one ([`OnUnapplied`]). A site whose provisioner applies more (a build of
//! its own, a controller that reconfigures NICs after CAPVCD) declares it as [`Profile::Custom`]
//! with [`Provisioner::applies`] and [`Provisioner::builds`].

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

/// A provisioner build nicpolicy knows by what it does to NICs (docs/plan-to-vm.md has the
/// facts each rests on).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Profile {
    /// Upstream CAPVCD v1.3.2, the final release: every new NIC `POOL`, `VMXNET3`.
    #[default]
    #[serde(rename = "capvcd-1.3")]
    Capvcd13,
    /// A build of CAPVCD's unreleased `main` (v1beta3, zones): NICs as v1.3.2 builds them, the
    /// primary network taken from the machine's zone.
    #[serde(rename = "capvcd-main")]
    CapvcdMain,
    /// Deckhouse's patched v1.3.2: every new NIC `DHCP`, `VMXNET3`; the VM powered on right
    /// after its NICs are attached; an empty DHCP address on the primary is waited for.
    #[serde(rename = "deckhouse")]
    Deckhouse,
    /// A build of the site's own: what it applies of the plan and what it builds instead are
    /// declared ([`Provisioner::applies`], [`Provisioner::builds`]).
    #[serde(rename = "custom")]
    Custom,
}

impl Profile {
    /// Every profile, the default first.
    pub const ALL: [Profile; 4] = [
        Profile::Capvcd13,
        Profile::CapvcdMain,
        Profile::Deckhouse,
        Profile::Custom,
    ];

    /// The profile's name in configuration and on the command line (`capvcd-1.3`).
    pub fn as_str(self) -> &'static str {
        match self {
            Profile::Capvcd13 => "capvcd-1.3",
            Profile::CapvcdMain => "capvcd-main",
            Profile::Deckhouse => "deckhouse",
            Profile::Custom => "custom",
        }
    }

    /// The profile named `name` ([`Profile::as_str`]).
    pub fn parse(name: &str) -> Option<Profile> {
        Profile::ALL.into_iter().find(|p| p.as_str() == name)
    }

    /// The name messages use for the build.
    pub fn display_name(self) -> &'static str {
        match self {
            Profile::Capvcd13 => "CAPVCD",
            Profile::CapvcdMain => "CAPVCD main",
            Profile::Deckhouse => "Deckhouse's CAPVCD",
            Profile::Custom => "the site's provisioner",
        }
    }
}

/// What a provisioner gives each NIC it creates, for the fields it does not take from the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Builds {
    /// `IpAddressAllocationMode` (no address of anyone's choosing: `MANUAL` is not built).
    pub ip_allocation_mode: IpAllocationMode,
    /// `NetworkAdapterType`.
    pub adapter_type: AdapterType,
    /// `IsConnected`.
    pub connected: bool,
}

impl Default for Builds {
    /// Stock CAPVCD's: `POOL`, `VMXNET3`, connected.
    fn default() -> Self {
        Builds {
            ip_allocation_mode: IpAllocationMode::Pool,
            adapter_type: AdapterType::Vmxnet3,
            connected: true,
        }
    }
}

/// Who builds the VM's NICs: which plan fields it applies as planned, and what it builds for
/// the others.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Provisioner {
    /// The name messages use (`CAPVCD` for the default profile).
    pub name: String,
    /// The build.
    #[serde(default)]
    pub profile: Profile,
    /// The fields it applies as planned; every known build applies none.
    #[serde(default)]
    pub applies: Vec<PlanField>,
    /// What it gives each NIC it creates where it does not apply the plan.
    #[serde(default)]
    pub builds: Builds,
}

impl Default for Provisioner {
    fn default() -> Self {
        Provisioner::capvcd()
    }
}

impl Provisioner {
    /// Stock CAPVCD, v1.3.2 ([`Profile::Capvcd13`]).
    pub fn capvcd() -> Provisioner {
        Provisioner::of(Profile::Capvcd13)
    }

    /// The build `profile` names. [`Profile::Custom`] starts as stock CAPVCD does; a site sets
    /// what its build applies and builds.
    pub fn of(profile: Profile) -> Provisioner {
        let builds = match profile {
            Profile::Deckhouse => Builds {
                ip_allocation_mode: IpAllocationMode::Dhcp,
                ..Builds::default()
            },
            Profile::Capvcd13 | Profile::CapvcdMain | Profile::Custom => Builds::default(),
        };
        Provisioner {
            name: profile.display_name().to_string(),
            profile,
            applies: Vec::new(),
            builds,
        }
    }

    /// Whether it applies `field` as planned.
    pub fn applies(&self, field: PlanField) -> bool {
        self.applies.contains(&field)
    }

    /// The NIC this provisioner creates for the plan's `nic`: the fields it applies taken from
    /// the plan, the others as it [`builds`](Provisioner::builds) them. The network and index
    /// are the plan's; which network a provisioner attaches at an index is [`unapplied`]'s
    /// business.
    pub fn build(&self, nic: &Nic) -> Nic {
        let shape = self.shape_of(nic);
        let mut built = Nic::capvcd(nic.index, nic.network.clone());
        built.primary = shape.primary;
        built.ip_allocation_mode = shape.ip_allocation_mode;
        if shape.keeps_address {
            built.ip_address = nic.ip_address.clone();
        }
        built.adapter_type = shape.adapter_type;
        built.connected = shape.connected;
        built
    }

    /// [`Provisioner::build`]'s NIC but its network and address: what the unapplied check
    /// compares, per NIC of every evaluation, without copying a string.
    fn shape_of(&self, nic: &Nic) -> BuiltShape {
        fn planned_or<T>(applied: bool, planned: T, built: T) -> T {
            if applied {
                planned
            } else {
                built
            }
        }
        BuiltShape {
            primary: planned_or(
                self.applies(PlanField::Primary),
                nic.primary,
                nic.index == 0,
            ),
            ip_allocation_mode: planned_or(
                self.applies(PlanField::IpAllocationMode),
                nic.ip_allocation_mode,
                self.builds.ip_allocation_mode,
            ),
            keeps_address: self.applies(PlanField::IpAddress),
            adapter_type: planned_or(
                self.applies(PlanField::AdapterType),
                nic.adapter_type,
                self.builds.adapter_type,
            ),
            connected: planned_or(
                self.applies(PlanField::Connected),
                nic.connected,
                self.builds.connected,
            ),
        }
    }

    /// A NIC this provisioner creates on `network` at `index` that no plan speaks of.
    pub fn build_unplanned(&self, index: u32, network: &str) -> Nic {
        let mut built = Nic::capvcd(index, network);
        built.ip_allocation_mode = self.builds.ip_allocation_mode;
        built.adapter_type = self.builds.adapter_type;
        built.connected = self.builds.connected;
        built
    }

    /// What the guest's network config must get past with this build, if anything (printed by
    /// `render network-config`).
    pub fn guest_config_note(&self) -> Option<&'static str> {
        match self.profile {
            Profile::Deckhouse => Some(
                "Deckhouse's CAPVCD writes guestinfo.metadata itself (local-hostname only) and \
                 powers the VM on right after attaching its NICs: this config reaches the guest \
                 only through a change to that build, not a hook that runs after it",
            ),
            _ => None,
        }
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
    let extras = decision.extras_of(&request.machine);
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
        // The texts are made only for what is reported: this runs for every NIC of every
        // evaluation.
        if i > 0 && extras.get(i - 1) != Some(&nic.network) {
            let built = extras.get(i - 1).map_or_else(
                || format!("no NIC {i} (extraOvdcNetworks has {})", extras.len()),
                |network| format!("{network} (extraOvdcNetworks[{}])", i - 1),
            );
            push(PlanField::Network, nic.network.clone(), built);
        }
        if nic.primary != (i == 0) {
            push(
                PlanField::Primary,
                nic.primary.to_string(),
                format!("NIC 0 as the primary, so {}", i == 0),
            );
        }
        for (field, planned, built) in built_differences(provisioner, nic) {
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

/// A built NIC's fields that the plan may have otherwise ([`Provisioner::build`]).
struct BuiltShape {
    primary: bool,
    ip_allocation_mode: IpAllocationMode,
    /// Whether the planned address is kept (applied).
    keeps_address: bool,
    adapter_type: AdapterType,
    connected: bool,
}

/// The fields of `nic` that `provisioner` builds otherwise: (field, planned, built).
fn built_differences(provisioner: &Provisioner, nic: &Nic) -> Vec<(PlanField, String, String)> {
    let built = provisioner.shape_of(nic);
    let mut differences = Vec::new();
    if nic.ip_allocation_mode != built.ip_allocation_mode {
        differences.push((
            PlanField::IpAllocationMode,
            nic.ip_allocation_mode.as_str().to_string(),
            built.ip_allocation_mode.as_str().to_string(),
        ));
    }
    if let (Some(address), false) = (&nic.ip_address, built.keeps_address) {
        let built = match built.ip_allocation_mode {
            IpAllocationMode::Pool => "an address from the network's static pool",
            IpAllocationMode::Dhcp => "an address leased by DHCP",
            IpAllocationMode::Manual | IpAllocationMode::None => "no address",
        };
        differences.push((PlanField::IpAddress, address.clone(), built.to_string()));
    }
    if nic.adapter_type != built.adapter_type {
        differences.push((
            PlanField::AdapterType,
            nic.adapter_type.as_str().to_string(),
            built.adapter_type.as_str().to_string(),
        ));
    }
    if nic.connected != built.connected {
        let state = |connected: bool| {
            if connected {
                "a connected NIC"
            } else {
                "a disconnected NIC"
            }
        };
        differences.push((
            PlanField::Connected,
            nic.connected.to_string(),
            state(built.connected).to_string(),
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
            ..Provisioner::of(Profile::Custom)
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
    fn each_profile_reports_against_what_it_builds() {
        let mut dhcp = nic(1, "storage-net");
        dhcp.ip_allocation_mode = IpAllocationMode::Dhcp;
        let pool = nic(0, "mgmt-net");
        let (request, decision) = planned(&["storage-net"], vec![pool, dhcp]);
        let found = |provisioner: &Provisioner| -> Vec<String> {
            unapplied(provisioner, &request, &decision)
                .iter()
                .map(Unapplied::message)
                .collect()
        };
        // v1.3.2 and main build POOL: the DHCP NIC is not built as planned.
        for profile in [Profile::Capvcd13, Profile::CapvcdMain] {
            assert_eq!(
                found(&Provisioner::of(profile)),
                [format!(
                    "NIC 1 (storage-net): ipAllocationMode DHCP is not applied: {} builds POOL",
                    profile.display_name()
                )]
            );
        }
        // Deckhouse's build makes every NIC DHCP: the POOL one is the one it does not build.
        assert_eq!(
            found(&Provisioner::of(Profile::Deckhouse)),
            [
                "NIC 0 (mgmt-net): ipAllocationMode POOL is not applied: Deckhouse's CAPVCD \
              builds DHCP"
            ]
        );
        // A custom build that makes DHCP NICs and disconnected E1000E adapters.
        let custom = Provisioner {
            builds: Builds {
                ip_allocation_mode: IpAllocationMode::Dhcp,
                adapter_type: AdapterType::E1000e,
                connected: false,
            },
            ..Provisioner::of(Profile::Custom)
        };
        let messages = found(&custom);
        assert_eq!(messages.len(), 5, "{messages:?}");
        assert!(messages.contains(
            &"NIC 1 (storage-net): connected true is not applied: the site's provisioner \
              builds a disconnected NIC"
                .to_string()
        ));
        // A MANUAL address on a Deckhouse VM: leased by DHCP instead.
        let mut manual = nic(0, "mgmt-net");
        manual.ip_allocation_mode = IpAllocationMode::Manual;
        manual.ip_address = Some("10.10.0.50".into());
        let (request, decision) = planned(&[], vec![manual]);
        let built: Vec<String> =
            unapplied(&Provisioner::of(Profile::Deckhouse), &request, &decision)
                .into_iter()
                .map(|u| u.built)
                .collect();
        assert_eq!(built, ["DHCP", "an address leased by DHCP"]);
    }

    #[test]
    fn profile_names_round_trip() {
        for profile in Profile::ALL {
            assert_eq!(Profile::parse(profile.as_str()), Some(profile));
            let json = serde_json::to_string(&profile).unwrap();
            assert_eq!(json, format!("\"{}\"", profile.as_str()));
            assert_eq!(Provisioner::of(profile).profile, profile);
        }
        assert_eq!(Provisioner::default().name, "CAPVCD");
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
