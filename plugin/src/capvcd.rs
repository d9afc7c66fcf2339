//! The reference CAPVCD network logic, as plain functions.
//!
//! [`evaluate`] is what the `nicpolicy-capvcd` policy (and so the host's default) runs. Each rule
//! is its own public function, so a site policy can call [`evaluate_with`] and then add, drop or
//! replace one rule without copying the rest:
//!
//! ```
//! use nicpolicy_plugin::capvcd::{self, Settings};
//! use nicpolicy_plugin::{Decision, Reason, Request, Violation};
//!
//! /// CAPVCD's rules, plus: workers never attach to the external network.
//! fn evaluate(request: &Request, settings: &Settings) -> Decision {
//!     let mut decision = capvcd::evaluate_with(request, settings);
//!     let spec = request.kind.spec_path();
//!     for (i, name) in request.machine.extra_ovdc_networks.iter().enumerate() {
//!         if name == "ext-dmz-net" {
//!             decision.violations.push(Violation::new(
//!                 format!("{spec}.extraOvdcNetworks[{i}]"),
//!                 Reason::Forbidden,
//!                 "only load balancers attach to ext-dmz-net",
//!             ));
//!         }
//!     }
//!     decision.finish()
//! }
//!
//! nicpolicy_plugin::export_policy!(evaluate, settings: Settings);
//! # fn main() {}
//! ```

pub mod cel;
mod near;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::settings::{self, PolicySettings};
use crate::source::{Origin, Source};

use crate::schema::{
    AdapterType, Decision, Inventory, IpAllocationMode, Machine, Network, NetworkType, Nic,
    Operation, Reason, Request, Role, Violation,
};

/// The rule names the CAPVCD rules report in each violation's and NIC's [`Source`].
pub mod rules {
    /// Empty or malformed network names.
    pub const NETWORK_NAME: &str = "capvcd/network-name";
    /// A network listed twice.
    pub const DUPLICATE: &str = "capvcd/duplicate";
    /// More NICs than `maxNics`.
    pub const MAX_NICS: &str = "capvcd/max-nics";
    /// NIC 0 cannot be resolved from the VCDCluster.
    pub const PRIMARY_NETWORK: &str = "capvcd/primary-network";
    /// The primary network listed again as an extra network.
    pub const PRIMARY_REPEATED: &str = "capvcd/primary-repeated";
    /// A network the org VDC does not have.
    pub const INVENTORY: &str = "capvcd/inventory";
    /// An address mode or adapter that cannot work.
    pub const NIC_SETUP: &str = "capvcd/nic-setup";
    /// A changed NIC list on a provisioned machine.
    pub const PROVISIONED_UPDATE: &str = "capvcd/provisioned-update";
    /// The NIC plan: NIC 0 from the VCDCluster, then the machine's extra networks.
    pub const PLAN: &str = "capvcd/plan";
}

/// Cloud Director attaches at most this many NICs to one VM.
pub const VCD_MAX_NICS: u32 = 10;
/// Longest network name accepted; Cloud Director entity names stop at 128 characters.
pub const MAX_NETWORK_NAME_LEN: usize = 128;

/// Settings of the CAPVCD policy. Every field is optional; unknown fields are refused so that a
/// typo does not silently fall back to a default.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Settings {
    /// Most NICs a machine may have, the primary included (1 to 10; default 10).
    pub max_nics: u32,
    /// Let a provisioned machine's NIC list change (CAPVCD then hot-removes and renumbers NICs).
    pub allow_nic_changes_on_provisioned: bool,
    /// Address mode for networks without their own entry (default POOL, as CAPVCD does).
    pub default_ip_allocation_mode: IpAllocationMode,
    /// Adapter for networks without their own entry (default VMXNET3, as CAPVCD does).
    pub default_adapter_type: AdapterType,
    /// Per-network overrides, keyed by org VDC network name.
    pub networks: BTreeMap<String, NetworkSettings>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_nics: VCD_MAX_NICS,
            allow_nic_changes_on_provisioned: false,
            default_ip_allocation_mode: IpAllocationMode::Pool,
            default_adapter_type: AdapterType::Vmxnet3,
            networks: BTreeMap::new(),
        }
    }
}

/// How NICs on one network are set up.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetworkSettings {
    /// Address mode for NICs on this network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_allocation_mode: Option<IpAllocationMode>,
    /// Adapter for NICs on this network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter_type: Option<AdapterType>,
    /// Whether NICs on this network start connected (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connected: Option<bool>,
}

impl Settings {
    /// Reads and checks settings; JSON `null` means all defaults. The error says which field is
    /// wrong and why (see [`settings::parse`]).
    ///
    /// # Errors
    /// Why the settings cannot be used.
    pub fn parse(value: &Value) -> Result<Settings, String> {
        settings::parse(value)
    }

    /// [`PolicySettings::check`] for these settings nested under `key` in a site policy's
    /// settings (`capvcd: {maxNics: 6}`): errors start with `key`.
    ///
    /// # Errors
    /// As for [`PolicySettings::check`].
    pub fn check_nested(&self, key: &str) -> Result<(), String> {
        self.check().map_err(|why| format!("{key}: {why}"))
    }
}

impl PolicySettings for Settings {
    fn check(&self) -> Result<(), String> {
        if self.max_nics == 0 || self.max_nics > VCD_MAX_NICS {
            return Err(format!(
                "maxNics: {} is out of range; a VM has 1 to {VCD_MAX_NICS} NICs in Cloud Director",
                self.max_nics
            ));
        }
        if self.default_ip_allocation_mode == IpAllocationMode::Manual {
            return Err(
                "defaultIpAllocationMode: MANUAL needs an address per machine, which this policy \
                 does not assign; use POOL, DHCP or NONE"
                    .to_string(),
            );
        }
        for (name, network) in &self.networks {
            check_name(name).map_err(|why| format!("networks: key {name:?} {why}"))?;
            if network.ip_allocation_mode == Some(IpAllocationMode::Manual) {
                return Err(format!(
                    "networks.{name}.ipAllocationMode: MANUAL needs an address per machine, \
                     which this policy does not assign; use POOL, DHCP or NONE"
                ));
            }
        }
        Ok(())
    }
}

impl Settings {
    /// The NIC this policy plans for `network` at `index`.
    pub fn nic(&self, index: u32, network: &str) -> Nic {
        Nic {
            index,
            network: network.to_string(),
            primary: index == 0,
            ip_allocation_mode: self.ip_allocation_mode(network),
            ip_address: None,
            adapter_type: self.adapter_type(network),
            connected: self
                .networks
                .get(network)
                .and_then(|n| n.connected)
                .unwrap_or(true),
            source: None,
        }
    }

    /// The setting that shapes NICs on `network`: its `networks` entry, when it has one.
    pub fn network_setting(&self, network: &str) -> Option<String> {
        self.networks
            .contains_key(network)
            .then(|| format!("networks.{network}"))
    }

    /// The address mode of a NIC on `network` (the same for every NIC index). Checks ask
    /// this rather than [`Settings::nic`], which builds a whole NIC.
    pub fn ip_allocation_mode(&self, network: &str) -> IpAllocationMode {
        self.networks
            .get(network)
            .and_then(|n| n.ip_allocation_mode)
            .unwrap_or(self.default_ip_allocation_mode)
    }

    /// The adapter of a NIC on `network`.
    pub fn adapter_type(&self, network: &str) -> AdapterType {
        self.networks
            .get(network)
            .and_then(|n| n.adapter_type)
            .unwrap_or(self.default_adapter_type)
    }
}

/// Checks settings for the `nicpolicy_validate_settings` export.
///
/// # Errors
/// Why the settings cannot be used.
pub fn validate_settings(settings: &Value) -> Result<(), String> {
    settings::validate::<Settings>(settings)
}

/// The decision for settings that could not be read (the host normally refuses them at load).
pub use crate::settings::denial as settings_denial;

/// Where the primary network (NIC 0) comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Primary {
    /// Known: the network and the field that named it.
    Network {
        /// Org VDC network name.
        name: String,
        /// Field path of its source, such as `cluster.spec.ovdcNetwork`.
        field: String,
    },
    /// Multi-zone cluster, machine without a failure domain: CAPVCD picks the zone later, so
    /// NIC 0 will be one of these.
    ZoneDependent(Vec<ZoneNetwork>),
    /// Cannot be resolved; [`resolve_primary`] returned the violation that says why. The rules
    /// about the extra networks still run.
    Unresolved,
    /// The machine's VCDCluster is not known yet ([`Request::cluster_unknown`]): NIC 0 and the
    /// rules that need it are left for when the machine is created with its cluster label. The
    /// rules about the extra networks still run, and the plan lists the extra NICs only.
    ClusterUnknown,
}

/// The primary network of one zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneNetwork {
    /// Zone name.
    pub zone: String,
    /// The zone's `ovdcNetworkName`.
    pub network: String,
    /// Field path of that name in the VCDCluster.
    pub field: String,
}

impl Primary {
    /// Every network NIC 0 may end up on, with the field that names it.
    pub fn candidates(&self) -> Vec<(&str, &str)> {
        match self {
            Primary::Network { name, field } => vec![(name.as_str(), field.as_str())],
            Primary::ZoneDependent(zones) => zones
                .iter()
                .map(|z| (z.network.as_str(), z.field.as_str()))
                .collect(),
            Primary::Unresolved | Primary::ClusterUnknown => Vec::new(),
        }
    }

    /// The network of NIC 0, when it is known now.
    pub fn name(&self) -> Option<&str> {
        match self {
            Primary::Network { name, .. } => Some(name),
            Primary::ZoneDependent(_) | Primary::Unresolved | Primary::ClusterUnknown => None,
        }
    }
}

/// Resolves NIC 0 the way CAPVCD does: `spec.ovdcNetwork` of a single-zone cluster, or the
/// `ovdcNetworkName` of the machine's failure-domain zone; [`Primary::ClusterUnknown`] when the
/// request says the cluster is not known yet.
pub fn resolve_primary(request: &Request, machine: &Machine) -> Result<Primary, Violation> {
    resolve_primary_untagged(request, machine)
        .map_err(|v| v.with_source(Source::rule(rules::PRIMARY_NETWORK)))
}

fn resolve_primary_untagged(request: &Request, machine: &Machine) -> Result<Primary, Violation> {
    if request.cluster_unknown {
        return Ok(Primary::ClusterUnknown);
    }
    let cluster = &request.cluster;
    let spec = request.kind.spec_path();
    if !cluster.is_multi_zone() {
        if cluster.ovdc_network.is_empty() {
            return Err(Violation::new(
                "cluster.spec.ovdcNetwork",
                Reason::Required,
                format!(
                    "VCDCluster {:?} has neither spec.ovdcNetwork nor zones, so the primary \
                     network (NIC 0) cannot be resolved",
                    cluster.name
                ),
            ));
        }
        return Ok(Primary::Network {
            name: cluster.ovdc_network.clone(),
            field: "cluster.spec.ovdcNetwork".to_string(),
        });
    }

    let zone_network = |i: usize| -> Result<ZoneNetwork, Violation> {
        let zone = &cluster.zones[i];
        let field = format!("cluster.spec.multiZoneSpec.zones[{i}].ovdcNetworkName");
        if zone.ovdc_network_name.is_empty() {
            return Err(Violation::new(
                field,
                Reason::Required,
                format!(
                    "zone {:?} of VCDCluster {:?} names no ovdcNetworkName, so the primary \
                     network (NIC 0) of its machines cannot be resolved",
                    zone.name, cluster.name
                ),
            ));
        }
        Ok(ZoneNetwork {
            zone: zone.name.clone(),
            network: zone.ovdc_network_name.clone(),
            field,
        })
    };

    match machine
        .failure_domain
        .as_deref()
        .filter(|fd| !fd.is_empty())
    {
        Some(domain) => {
            let Some(i) = cluster.zones.iter().position(|z| z.name == domain) else {
                // `String`s, like every other list joined here: one `join` in the module.
                let known: Vec<String> = cluster.zones.iter().map(|z| z.name.clone()).collect();
                return Err(Violation::new(
                    format!("{spec}.failureDomain"),
                    Reason::NotFound,
                    format!(
                        "zone {domain:?} is not a zone of VCDCluster {:?} (zones: {})",
                        cluster.name,
                        known.join(", ")
                    ),
                ));
            };
            let zone = zone_network(i)?;
            Ok(Primary::Network {
                name: zone.network,
                field: zone.field,
            })
        }
        None => {
            // Control-plane machines only land in zones marked for them, when any zone is.
            let control_plane_only = machine.role == Role::ControlPlane
                && cluster.zones.iter().any(|z| z.control_plane_zone);
            let zones = (0..cluster.zones.len())
                .filter(|&i| !control_plane_only || cluster.zones[i].control_plane_zone)
                .map(zone_network)
                .collect::<Result<Vec<_>, _>>()?;
            if zones.iter().all(|z| z.network == zones[0].network) {
                let first = zones.into_iter().next();
                // `is_multi_zone` guarantees a first zone.
                return Ok(first.map_or(Primary::ZoneDependent(Vec::new()), |z| {
                    Primary::Network {
                        name: z.network,
                        field: z.field,
                    }
                }));
            }
            Ok(Primary::ZoneDependent(zones))
        }
    }
}

/// Why `name` is not a usable network name, if it is not (the reason reads after the name).
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("is empty; name an org VDC network".to_string());
    }
    // A name of at most MAX bytes has at most MAX characters: count only longer ones.
    let chars = if name.len() <= MAX_NETWORK_NAME_LEN {
        name.len()
    } else {
        name.chars().count()
    };
    if chars > MAX_NETWORK_NAME_LEN {
        return Err(format!(
            "is {chars} characters long; Cloud Director network names have at most \
             {MAX_NETWORK_NAME_LEN}"
        ));
    }
    // Every rule that reads a name checks it first, so ASCII names (nearly all) take bytes.
    let (padded, control) = match name.as_bytes() {
        [first, .., last] if name.is_ascii() => (
            char::from(*first).is_whitespace() || char::from(*last).is_whitespace(),
            name.bytes().any(|b| b.is_ascii_control()),
        ),
        _ => (name.trim() != name, name.chars().any(char::is_control)),
    };
    if padded {
        return Err(
            "has leading or trailing white space, which no Cloud Director network name has"
                .to_string(),
        );
    }
    if control {
        return Err("contains a control character".to_string());
    }
    Ok(())
}

/// How violations name an entry of `extraOvdcNetworks`: `<spec>.extraOvdcNetworks[i]`, with `i`
/// the entry's position in the machine's own list.
///
/// A site policy that rewrites the list before the rules run (zone-aware maps logical names to
/// networks and leaves out entries it refused) gives the rules the rewritten list and, here,
/// where each of its entries stood in the original ([`ExtraFields::with_positions`]), so every
/// field path and every message points at what the user wrote.
#[derive(Clone, Copy, Debug)]
pub struct ExtraFields<'a> {
    spec: &'static str,
    positions: Option<&'a [usize]>,
}

impl<'a> ExtraFields<'a> {
    /// Entries named by their position in `request`'s own list.
    pub fn of(request: &Request) -> ExtraFields<'static> {
        ExtraFields {
            spec: request.kind.spec_path(),
            positions: None,
        }
    }

    /// Entry `j` of `request`'s list named as entry `positions[j]` of the original list.
    pub fn with_positions(request: &Request, positions: &'a [usize]) -> ExtraFields<'a> {
        ExtraFields {
            spec: request.kind.spec_path(),
            positions: Some(positions),
        }
    }

    /// The field path of entry `i`.
    pub fn at(&self, i: usize) -> String {
        let i = self
            .positions
            .and_then(|positions| positions.get(i).copied())
            .unwrap_or(i);
        format!("{}.extraOvdcNetworks[{i}]", self.spec)
    }
}

/// Empty or malformed names in `extraOvdcNetworks`.
pub fn check_names(request: &Request) -> Vec<Violation> {
    check_names_at(request, &ExtraFields::of(request))
}

fn check_names_at(request: &Request, fields: &ExtraFields<'_>) -> Vec<Violation> {
    let extras = &request.machine.extra_ovdc_networks;
    extras
        .iter()
        .enumerate()
        .filter_map(|(i, name)| {
            check_name(name).err().map(|why| {
                let reason = if name.is_empty() {
                    Reason::Required
                } else {
                    Reason::Invalid
                };
                // Quote the name unless it is empty or too long to read.
                let shown = if name.is_empty() || name.chars().count() > 64 {
                    String::new()
                } else {
                    format!(" {name:?}")
                };
                Violation::new(fields.at(i), reason, format!("network name{shown} {why}"))
                    .with_source(Source::rule(rules::NETWORK_NAME))
            })
        })
        .collect()
}

/// `(name, position)` pairs sorted by name; equal names stay in position order. One sort, so
/// lookups and duplicate checks stay O(n log n) however long the lists are.
fn sorted_by_name(mut pairs: Vec<(&str, usize)>) -> Vec<(&str, usize)> {
    pairs.sort_by(|a, b| a.0.cmp(b.0));
    pairs
}

/// For each name, the position of the first earlier name equal to it, if any.
fn earlier_equal<'a>(names: impl Iterator<Item = &'a str>) -> Vec<Option<usize>> {
    let sorted = sorted_by_name(names.enumerate().map(|(i, name)| (name, i)).collect());
    let mut earlier = vec![None; sorted.len()];
    for run in sorted.chunk_by(|a, b| a.0 == b.0) {
        for &(_, i) in &run[1..] {
            earlier[i] = Some(run[0].1);
        }
    }
    earlier
}

/// A name listed twice in `extraOvdcNetworks` (CAPVCD would create two NICs with one index).
pub fn check_duplicates(request: &Request) -> Vec<Violation> {
    check_duplicates_at(request, &ExtraFields::of(request))
}

fn check_duplicates_at(request: &Request, fields: &ExtraFields<'_>) -> Vec<Violation> {
    let extras = &request.machine.extra_ovdc_networks;
    let earlier = earlier_equal(extras.iter().map(String::as_str));
    let mut violations = Vec::new();
    for (i, name) in extras.iter().enumerate() {
        if let (false, Some(first)) = (name.is_empty(), earlier[i]) {
            violations.push(
                Violation::new(
                    fields.at(i),
                    Reason::Duplicate,
                    format!(
                    "network {name:?} is already listed at {}; each network can be attached once",
                    fields.at(first)
                ),
                )
                .with_source(Source::rule(rules::DUPLICATE)),
            );
        }
    }
    violations
}

/// The inventory's networks by name, for binary search (of equal names the last one counts,
/// as in [`Inventory::index`]).
struct NetworkIndex<'a> {
    networks: &'a [Network],
    sorted: Vec<(&'a str, usize)>,
}

impl<'a> NetworkIndex<'a> {
    fn new(inventory: &'a Inventory) -> Self {
        let mut sorted = sorted_by_name(
            inventory
                .networks
                .iter()
                .enumerate()
                .map(|(i, n)| (n.name.as_str(), i))
                .collect(),
        );
        // Keep the last of equal names: `dedup_by` keeps the first, so move the later one in.
        sorted.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                *kept = *later;
            }
            same
        });
        NetworkIndex {
            networks: &inventory.networks,
            sorted,
        }
    }

    fn get(&self, name: &str) -> Option<&'a Network> {
        let at = self.sorted.binary_search_by(|(n, _)| (*n).cmp(name)).ok()?;
        self.networks.get(self.sorted[at].1)
    }

    fn names(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.sorted.iter().map(|(name, _)| *name)
    }
}

/// The primary network listed again among the extras (it is always NIC 0 already).
pub fn check_primary_repeated(request: &Request, primary: &Primary) -> Vec<Violation> {
    check_primary_repeated_at(request, primary, &ExtraFields::of(request))
}

fn check_primary_repeated_at(
    request: &Request,
    primary: &Primary,
    fields: &ExtraFields<'_>,
) -> Vec<Violation> {
    let mut violations = Vec::new();
    for (i, name) in request.machine.extra_ovdc_networks.iter().enumerate() {
        let message = match primary {
            Primary::Network { name: p, field } if p == name => format!(
                "network {name:?} is this machine's primary network (from {field}), which \
                 CAPVCD always attaches as NIC 0; remove it from the extra networks"
            ),
            Primary::ZoneDependent(zones) => match zones.iter().find(|z| &z.network == name) {
                Some(zone) => format!(
                    "network {name:?} is the primary network of zone {:?}; if CAPVCD places \
                     the machine there it would be attached twice",
                    zone.zone
                ),
                None => continue,
            },
            Primary::Network { .. } | Primary::Unresolved | Primary::ClusterUnknown => continue,
        };
        violations.push(
            Violation::new(fields.at(i), Reason::Duplicate, message)
                .with_source(Source::rule(rules::PRIMARY_REPEATED)),
        );
    }
    violations
}

/// More NICs than `settings.max_nics`.
pub fn check_nic_count(request: &Request, settings: &Settings) -> Vec<Violation> {
    let extras = request.machine.extra_ovdc_networks.len();
    let total = extras + 1;
    if total <= settings.max_nics as usize {
        return Vec::new();
    }
    let limit = if settings.max_nics == VCD_MAX_NICS {
        format!("Cloud Director attaches at most {VCD_MAX_NICS} NICs to a VM")
    } else {
        format!(
            "this site allows at most {} NICs (maxNics)",
            settings.max_nics
        )
    };
    vec![Violation::new(
        format!("{}.extraOvdcNetworks", request.kind.spec_path()),
        Reason::TooMany,
        format!(
            "{total} NICs requested (the primary and {extras} extra {}), but {limit}; list at \
             most {} extra {}",
            networks(extras),
            settings.max_nics - 1,
            networks(settings.max_nics as usize - 1),
        ),
    )
    .with_source(Source::rule(rules::MAX_NICS).with_setting("maxNics"))]
}

fn networks(count: usize) -> &'static str {
    if count == 1 {
        "network"
    } else {
        "networks"
    }
}

/// Networks missing from the inventory, when the request carries one.
pub fn check_inventory(request: &Request, primary: &Primary) -> Vec<Violation> {
    check_inventory_at(request, primary, &ExtraFields::of(request))
}

fn check_inventory_at(
    request: &Request,
    primary: &Primary,
    fields: &ExtraFields<'_>,
) -> Vec<Violation> {
    let Some(inventory) = &request.inventory else {
        return Vec::new();
    };
    let index = NetworkIndex::new(inventory);
    // `field` is called only for a violation: most names are found.
    let missing = |name: &str, field: &dyn Fn() -> String, what: &str| -> Option<Violation> {
        // Malformed names get their own violation from `check_names`.
        if check_name(name).is_err() || index.get(name).is_some() {
            return None;
        }
        let hint = near::closest(name, index.names())
            .map(|near| format!("; did you mean {near:?}?"))
            .unwrap_or_default();
        Some(
            Violation::new(
                field(),
                Reason::NotFound,
                format!("{what} {name:?} is not a network of the org VDC{hint}"),
            )
            .with_source(Source::rule(rules::INVENTORY)),
        )
    };
    let mut violations: Vec<Violation> = primary
        .candidates()
        .into_iter()
        .filter_map(|(name, field)| missing(name, &|| field.to_string(), "primary network"))
        .collect();
    for (i, name) in request.machine.extra_ovdc_networks.iter().enumerate() {
        violations.extend(missing(name, &|| fields.at(i), "network"));
    }
    violations
}

/// Where a NIC's network is set: the cluster field naming NIC 0, or an extra network's index.
#[derive(Clone, Copy)]
enum SetAt<'a> {
    Primary(&'a str),
    Extra(usize),
}

/// Address modes and adapters that cannot work: a primary without an address, SR-IOV on a
/// network that is not direct. Every network NIC 0 may end up on is checked.
pub fn check_nic_setup(
    request: &Request,
    settings: &Settings,
    primary: &Primary,
) -> Vec<Violation> {
    check_nic_setup_at(request, settings, primary, &ExtraFields::of(request))
}

fn check_nic_setup_at(
    request: &Request,
    settings: &Settings,
    primary: &Primary,
    fields: &ExtraFields<'_>,
) -> Vec<Violation> {
    // Only SR-IOV NICs need the inventory: index it on first use.
    let mut index = None;
    // Field paths are spelt out only for a violation.
    let candidates = primary
        .candidates()
        .into_iter()
        .map(|(network, field)| (network, SetAt::Primary(field)));
    let extras = request
        .machine
        .extra_ovdc_networks
        .iter()
        .enumerate()
        .filter(|(_, name)| check_name(name).is_ok())
        .map(|(i, name)| (name.as_str(), SetAt::Extra(i)));
    let mut violations = Vec::new();
    for (network, at) in candidates.chain(extras) {
        let field = || match at {
            SetAt::Primary(field) => field.to_string(),
            SetAt::Extra(i) => fields.at(i),
        };
        if matches!(at, SetAt::Primary(_))
            && settings.ip_allocation_mode(network) == IpAllocationMode::None
        {
            violations.push(
                Violation::new(
                    field(),
                    Reason::Invalid,
                    format!(
                    "the primary NIC on {network:?} would get no address (ipAllocationMode NONE \
                     in the policy settings); machine addresses come from the primary NIC, so \
                     the node would never become ready"
                ),
                )
                .with_source(Source::rule(rules::NIC_SETUP).with_setting(
                    setting_of(
                        settings,
                        network,
                        "ipAllocationMode",
                        "defaultIpAllocationMode",
                    ),
                )),
            );
        }
        if settings.adapter_type(network) == AdapterType::SriovEthernetCard {
            let network_type = request
                .inventory
                .as_ref()
                .and_then(|inv| {
                    index
                        .get_or_insert_with(|| NetworkIndex::new(inv))
                        .get(network)
                })
                .and_then(|n| n.network_type);
            if let Some(kind) = network_type.filter(|t| *t != NetworkType::Direct) {
                violations.push(
                    Violation::new(
                        field(),
                        Reason::Invalid,
                        format!(
                            "network {network:?} is {}, but SR-IOV NICs (adapterType \
                         SRIOVETHERNETCARD in the policy settings) need a direct network",
                            kind.as_str()
                        ),
                    )
                    .with_source(Source::rule(rules::NIC_SETUP).with_setting(
                        setting_of(settings, network, "adapterType", "defaultAdapterType"),
                    )),
                );
            }
        }
    }
    violations
}

/// The setting that gives `network`'s NICs their `key`: the network's own entry when it sets
/// the key, else the policy-wide `default`.
fn setting_of(settings: &Settings, network: &str, key: &str, default: &str) -> String {
    let own = settings.networks.get(network).is_some_and(|n| match key {
        "ipAllocationMode" => n.ip_allocation_mode.is_some(),
        _ => n.adapter_type.is_some(),
    });
    if own {
        format!("networks.{network}.{key}")
    } else {
        default.to_string()
    }
}

/// On UPDATE of a provisioned machine, a changed NIC list (CAPVCD would hot-remove and
/// renumber NICs of a running VM). Returns violations, or warnings when the settings allow it.
pub fn check_provisioned_update(
    request: &Request,
    settings: &Settings,
    primary: &Primary,
) -> (Vec<Violation>, Vec<String>) {
    let (Operation::Update, Some(old)) = (request.operation, &request.old_machine) else {
        return (Vec::new(), Vec::new());
    };
    if !old.is_provisioned() {
        return (Vec::new(), Vec::new());
    }
    let spec = request.kind.spec_path();
    let provider_id = old.provider_id.as_deref().unwrap_or_default();
    let mut changes = Vec::new();
    if old.extra_ovdc_networks != request.machine.extra_ovdc_networks {
        changes.push((
            format!("{spec}.extraOvdcNetworks"),
            format!(
                "the extra networks change from [{}] to [{}]",
                old.extra_ovdc_networks.join(", "),
                request.machine.extra_ovdc_networks.join(", ")
            ),
        ));
    }
    if let Ok(Primary::Network { name: before, .. }) = resolve_primary(request, old) {
        let change = match primary.name() {
            Some(after) if after == before => None,
            Some(after) => Some(format!(
                "the primary network changes from {before:?} to {after:?}"
            )),
            None => Some(format!(
                "the primary network {before:?} would no longer be fixed by the zone"
            )),
        };
        if let Some(what) = change {
            changes.push((format!("{spec}.failureDomain"), what));
        }
    }
    if settings.allow_nic_changes_on_provisioned {
        let warnings = changes
            .into_iter()
            .map(|(field, what)| {
                format!(
                    "{field}: {what} on a running VM; CAPVCD rewrites its NetworkConnectionSection, \
                     removing NICs and renumbering the rest"
                )
            })
            .collect();
        return (Vec::new(), warnings);
    }
    let violations = changes
        .into_iter()
        .map(|(field, what)| {
            Violation::new(
                field,
                Reason::Forbidden,
                format!(
                    "{what}, but the machine is provisioned ({provider_id}); CAPVCD would \
                     hot-remove and renumber the NICs of the running VM. Replace the machine \
                     instead, or set allowNicChangesOnProvisioned"
                ),
            )
            .with_source(
                Source::rule(rules::PROVISIONED_UPDATE)
                    .with_setting("allowNicChangesOnProvisioned"),
            )
        })
        .collect();
    (violations, Vec::new())
}

/// The NIC plan: the primary as NIC 0 (when known), then the extras in order, each with its
/// [`Source`].
pub fn plan_nics(request: &Request, settings: &Settings, primary: &Primary) -> Vec<Nic> {
    plan_nics_at(request, settings, primary, &ExtraFields::of(request))
}

fn plan_nics_at(
    request: &Request,
    settings: &Settings,
    primary: &Primary,
    fields: &ExtraFields<'_>,
) -> Vec<Nic> {
    if *primary == Primary::Unresolved {
        return Vec::new();
    }
    // The field is made only when the source is wanted: formatting it is most of a source's
    // cost.
    let wanted = crate::source::nic_sources_wanted();
    let sourced = |mut nic: Nic, origin: Origin, field: &dyn Fn() -> String| {
        if wanted {
            let mut source = Source::nic(origin, field(), rules::PLAN);
            source.setting = settings.network_setting(&nic.network);
            nic.source = Some(Box::new(source));
        }
        nic
    };
    let mut nics = Vec::with_capacity(request.machine.extra_ovdc_networks.len() + 1);
    if let Primary::Network { name, field } = primary {
        let origin = if request.cluster.is_multi_zone() {
            Origin::Zone
        } else {
            Origin::ClusterNetwork
        };
        nics.push(sourced(settings.nic(0, name), origin, &|| field.clone()));
    }
    for (i, name) in request.machine.extra_ovdc_networks.iter().enumerate() {
        nics.push(sourced(
            settings.nic(i as u32 + 1, name),
            Origin::Machine,
            &|| fields.at(i),
        ));
    }
    nics
}

/// Advice that does not block admission.
pub fn advise(request: &Request, settings: &Settings, primary: &Primary) -> Vec<String> {
    let mut warnings = Vec::new();
    if let Primary::ZoneDependent(zones) = primary {
        let choices: Vec<String> = zones
            .iter()
            .map(|z| format!("{} -> {}", z.zone, z.network))
            .collect();
        warnings.push(format!(
            "{}.failureDomain is not set in a multi-zone cluster: NIC 0 will be the primary \
             network of the zone CAPVCD picks ({}); the plan lists the extra NICs only",
            request.kind.spec_path(),
            choices.join(", ")
        ));
    }
    if !request.cluster.is_multi_zone() && !request.cluster_unknown {
        if let Some(domain) = request.machine.failure_domain.as_deref() {
            if !domain.is_empty() {
                warnings.push(format!(
                    "{}.failureDomain {domain:?} has no effect on networks: VCDCluster {:?} has \
                     no zones",
                    request.kind.spec_path(),
                    request.cluster.name
                ));
            }
        }
    }
    let mut seen: Vec<&str> = Vec::new();
    for (network, _) in primary.candidates() {
        if seen.contains(&network) {
            continue;
        }
        seen.push(network);
        if settings.ip_allocation_mode(network) == IpAllocationMode::Dhcp {
            warnings.push(format!(
                "NIC 0 ({network}) uses DHCP: the machine's addresses are known only after the \
                 guest reports them, which delays node readiness"
            ));
        }
    }
    for (i, name) in request.machine.extra_ovdc_networks.iter().enumerate() {
        if settings.ip_allocation_mode(name) == IpAllocationMode::None {
            warnings.push(format!(
                "NIC {} ({name}) gets no address (ipAllocationMode NONE); configure it in the guest",
                i + 1
            ));
        }
    }
    warnings
}

/// The networks the vApp must hold, once each, in NIC order.
pub fn vapp_networks(nics: &[Nic]) -> Vec<String> {
    let earlier = earlier_equal(nics.iter().map(|nic| nic.network.as_str()));
    nics.iter()
        .zip(earlier)
        .filter(|(_, earlier)| earlier.is_none())
        .map(|(nic, _)| nic.network.clone())
        .collect()
}

/// The CAPVCD policy: reads the settings from the request, then [`evaluate_with`].
pub fn evaluate(request: &Request) -> Decision {
    settings::evaluate(request, evaluate_with)
}

/// The CAPVCD policy's backstop: its structural rules as CEL ([`cel::all`]; see
/// [`crate::backstop`]).
pub fn backstop(settings: &Settings, builder: &mut crate::backstop::Builder) {
    cel::all(settings, builder);
}

/// Every CAPVCD rule, all violations reported together.
pub fn evaluate_with(request: &Request, settings: &Settings) -> Decision {
    evaluate_fields(request, settings, &ExtraFields::of(request))
}

/// [`evaluate_with`], naming the extra networks with `fields` (see [`ExtraFields`]).
pub fn evaluate_fields(
    request: &Request,
    settings: &Settings,
    fields: &ExtraFields<'_>,
) -> Decision {
    let mut violations = check_names_at(request, fields);
    violations.extend(check_duplicates_at(request, fields));
    violations.extend(check_nic_count(request, settings));
    let primary = match resolve_primary(request, &request.machine) {
        Ok(primary) => primary,
        Err(violation) => {
            violations.push(violation);
            Primary::Unresolved
        }
    };
    violations.extend(check_primary_repeated_at(request, &primary, fields));
    violations.extend(check_inventory_at(request, &primary, fields));
    violations.extend(check_nic_setup_at(request, settings, &primary, fields));
    let (update_violations, update_warnings) =
        check_provisioned_update(request, settings, &primary);
    violations.extend(update_violations);
    let mut warnings = advise(request, settings, &primary);
    warnings.extend(update_warnings);

    let nics = plan_nics_at(request, settings, &primary, fields);
    Decision {
        allowed: violations.is_empty(),
        vapp_networks: vapp_networks(&nics),
        nics,
        extra_ovdc_networks: Some(request.machine.extra_ovdc_networks.clone()),
        violations,
        warnings,
        strict: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{Inventory, Network, Zone};

    fn request(extras: &[&str]) -> Request {
        crate::testing::worker(extras)
    }

    fn zones() -> Vec<Zone> {
        crate::testing::zones(&["a", "b"])
    }

    #[test]
    fn plans_primary_then_extras_with_capvcd_defaults() {
        let d = evaluate(&request(&["storage-net", "workload-net"]));
        assert!(d.allowed, "{d:?}");
        let names: Vec<&str> = d.nics.iter().map(|n| n.network.as_str()).collect();
        assert_eq!(names, ["mgmt-net", "storage-net", "workload-net"]);
        assert!(d.nics[0].primary && !d.nics[1].primary);
        assert!(d
            .nics
            .iter()
            .all(|n| n.ip_allocation_mode == IpAllocationMode::Pool
                && n.adapter_type == AdapterType::Vmxnet3
                && n.connected));
        assert_eq!(d.vapp_networks, ["mgmt-net", "storage-net", "workload-net"]);
    }

    #[test]
    fn reports_every_violation_together() {
        let d = evaluate(&request(&["storage-net", "mgmt-net", "storage-net", ""]));
        let fields: Vec<(&str, Reason)> = d
            .violations
            .iter()
            .map(|v| (v.field.as_str(), v.reason))
            .collect();
        assert!(!d.allowed);
        assert!(fields.contains(&("spec.extraOvdcNetworks[3]", Reason::Required)));
        assert!(fields.contains(&("spec.extraOvdcNetworks[2]", Reason::Duplicate)));
        assert!(fields.contains(&("spec.extraOvdcNetworks[1]", Reason::Duplicate)));
        assert_eq!(fields.len(), 3);
    }

    #[test]
    fn zone_of_failure_domain_gives_primary() {
        let mut r = request(&["storage-net"]);
        r.cluster.ovdc_network.clear();
        r.cluster.zones = zones();
        r.machine.failure_domain = Some("zone-b".into());
        let d = evaluate(&r);
        assert_eq!(d.nics[0].network, "mgmt-net-b");

        r.machine.failure_domain = Some("zone-c".into());
        let d = evaluate(&r);
        assert_eq!(d.violations[0].field, "spec.failureDomain");
        assert_eq!(d.violations[0].reason, Reason::NotFound);
    }

    #[test]
    fn zone_dependent_primary_warns_and_checks_every_zone() {
        let mut r = request(&["mgmt-net-a"]);
        r.cluster.zones = zones();
        let d = evaluate(&r);
        assert!(!d.allowed);
        assert!(d.violations[0].message.contains("zone-a"));
        assert!(d.warnings[0].contains("zone-a -> mgmt-net-a"));
    }

    #[test]
    fn inventory_misses_are_not_found_with_hint() {
        let mut r = request(&["storage-nett"]);
        r.inventory = Some(Inventory {
            networks: ["mgmt-net", "storage-net"]
                .iter()
                .map(|n| Network {
                    network_type: Some(NetworkType::Routed),
                    ..Network::named(*n)
                })
                .collect(),
        });
        let d = evaluate(&r);
        assert_eq!(d.violations.len(), 1);
        assert_eq!(d.violations[0].reason, Reason::NotFound);
        assert!(d.violations[0]
            .message
            .contains("did you mean \"storage-net\""));
    }

    #[test]
    fn settings_are_checked() {
        assert!(Settings::parse(&serde_json::json!({"maxNics": 11})).is_err());
        assert!(Settings::parse(&serde_json::json!({"maxNic": 4}))
            .unwrap_err()
            .contains("unknown field"));
        assert!(Settings::parse(&serde_json::json!({
            "networks": {"storage-net": {"ipAllocationMode": "MANUAL"}}
        }))
        .is_err());
        let s = Settings::parse(&serde_json::json!({
            "networks": {"storage-net": {"ipAllocationMode": "DHCP"}}
        }))
        .unwrap();
        assert_eq!(
            s.nic(1, "storage-net").ip_allocation_mode,
            IpAllocationMode::Dhcp
        );
    }

    #[test]
    fn names_are_checked_alike_whether_ascii_or_not() {
        // What `check_name` decides, spelled out on characters.
        fn reference(name: &str) -> Option<&'static str> {
            if name.trim() != name {
                Some("white space")
            } else if name.chars().any(char::is_control) {
                Some("control character")
            } else {
                None
            }
        }
        let names = [
            "storage-net",
            "s",
            " ",
            "\t",
            "storage-net ",
            " storage-net",
            "\tmgmt-net",
            "mgmt-net\n",
            "mgmt\tnet",
            "mgmt\u{7f}net",
            "mgmt-net\u{0b}",
            "mgmt-net\u{1c}",
            "speicher-netz-ü",
            "\u{a0}speicher-netz",
            "speicher-netz\u{85}",
            "netz\u{9f}ü",
            "ü",
            "\u{2003}",
        ];
        for name in names {
            let found = check_name(name).err();
            match reference(name) {
                Some(why) => assert!(
                    found.as_deref().is_some_and(|f| f.contains(why)),
                    "{name:?}: {found:?}"
                ),
                None => assert_eq!(found, None, "{name:?}"),
            }
        }
    }

    #[test]
    fn extra_fields_name_entries_where_the_machine_lists_them() {
        let request = crate::testing::worker(&["storage-net", "storage-net"]);
        let positions = [2, 5];
        let fields = ExtraFields::with_positions(&request, &positions);
        let decision = evaluate_fields(&request, &Settings::default(), &fields);
        assert_eq!(decision.violations[0].field, "spec.extraOvdcNetworks[5]");
        assert!(
            decision.violations[0]
                .message
                .contains("already listed at spec.extraOvdcNetworks[2]"),
            "{}",
            decision.violations[0].message
        );
    }
}
