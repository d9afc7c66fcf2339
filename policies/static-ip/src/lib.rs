//! MANUAL addresses per network, requested through machine annotations.
//!
//! Some nodes need a fixed address on one network (a storage target's allow-list, a firewall
//! rule on the DMZ). This policy reads annotations of the form
//!
//! ```yaml
//! metadata:
//!   annotations:
//!     nicpolicy.io/ip.storage-net: 10.20.0.55
//!     nicpolicy.io/ip.storage-v6-net: 2001:db8:20::55/64
//! ```
//!
//! and, when the address fits the network in the request's inventory, plans that NIC with
//! `ipAllocationMode: MANUAL` and the address (in its canonical form). Everything else follows
//! the CAPVCD rules. An address is refused, at `metadata.annotations[nicpolicy.io/ip.<network>]`,
//! when:
//!
//! - the object is a VCDMachineTemplate (`Forbidden`: every replica would get the address);
//! - the network is not one of the machine's NICs, or has no inventory entry (`NotFound`);
//! - it does not parse, has a `/prefix` other than the network's, is of the other IP family, lies
//!   outside the subnet or the static IP pool, or is the subnet's own address, its broadcast
//!   address or its gateway (`Invalid`);
//! - it is in the network's `usedIpAddresses` (`Duplicate`);
//! - the settings limit MANUAL addresses to some networks and this is not one (`Forbidden`);
//! - on an UPDATE of a provisioned machine, it differs from the stored one (`Forbidden`: CAPVCD
//!   does not re-address a running VM), unless `capvcd.allowNicChangesOnProvisioned` is set.

use std::collections::BTreeMap;
use std::net::IpAddr;

use nicpolicy_plugin::capvcd::{self, Primary};
use nicpolicy_plugin::schema::IpRange;
use nicpolicy_plugin::settings::{self, PolicySettings};
use nicpolicy_plugin::source::{self, Source};
use nicpolicy_plugin::{
    Decision, IpAllocationMode, Machine, Network, ObjectKind, Operation, Reason, Request, Violation,
};
use serde::Deserialize;
use serde_json::Value;

/// The rule names this policy reports in each violation's and NIC's [`Source`].
pub mod rules {
    /// A MANUAL address requested by annotation: its checks, and the NIC that gets it.
    pub const ADDRESS: &str = "static-ip/address";
    /// A template annotated with an address.
    pub const TEMPLATE: &str = "static-ip/template";
    /// An address changed on a provisioned machine.
    pub const PROVISIONED_UPDATE: &str = "static-ip/provisioned-update";
}

/// Annotation keys that ask for a MANUAL address: this prefix, then the network name.
pub const ANNOTATION_PREFIX: &str = "nicpolicy.io/ip.";

/// The policy's settings (every field optional, unknown fields refused).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Settings {
    /// The CAPVCD rules' own settings (`capvcd:`).
    #[serde(default, deserialize_with = "settings::null_as_default")]
    pub capvcd: capvcd::Settings,
    /// When given, the only networks MANUAL addresses may be requested on (`manualNetworks:`).
    #[serde(default)]
    pub manual_networks: Option<Vec<String>>,
}

impl PolicySettings for Settings {
    fn check(&self) -> Result<(), String> {
        self.capvcd.check_nested("capvcd")?;
        let names = self.manual_networks.as_deref().unwrap_or_default();
        for (i, name) in names.iter().enumerate() {
            capvcd::check_name(name)
                .map_err(|why| format!("manualNetworks[{i}]: network name {name:?} {why}"))?;
            if let Some(first) = names[..i].iter().position(|n| n == name) {
                return Err(format!(
                    "manualNetworks[{i}]: network {name:?} is already listed at \
                     manualNetworks[{first}]"
                ));
            }
            if annotation_key(name).len() > ANNOTATION_PREFIX.len() + MAX_KEY_NAME_LEN {
                return Err(format!(
                    "manualNetworks[{i}]: network name {name:?} is too long for an \
                     annotation key (ip.<network> holds at most {MAX_KEY_NAME_LEN} \
                     characters)"
                ));
            }
        }
        Ok(())
    }
}

impl Settings {
    /// Reads and checks settings; JSON `null` means the CAPVCD defaults and any network.
    ///
    /// # Errors
    /// Why the settings cannot be used, starting with the field at fault.
    pub fn parse(value: &Value) -> Result<Settings, String> {
        settings::parse(value)
    }
}

/// Kubernetes limits the name part of an annotation key to 63 characters, `ip.` included.
const MAX_KEY_NAME_LEN: usize = 63 - "ip.".len();

/// The annotation key that asks for an address on `network`.
pub fn annotation_key(network: &str) -> String {
    format!("{ANNOTATION_PREFIX}{network}")
}

fn annotation_field(key: &str) -> String {
    format!("metadata.annotations[{key}]")
}

/// The address annotations of `machine`: network -> value.
pub fn requested(machine: &Machine) -> BTreeMap<&str, &str> {
    machine
        .annotations
        .iter()
        .filter_map(|(key, value)| {
            key.strip_prefix(ANNOTATION_PREFIX)
                .map(|network| (network, value.as_str()))
        })
        .collect()
}

/// An address annotation's value: the address and the prefix length, when written.
pub fn parse_address(value: &str) -> Result<(IpAddr, Option<u8>), String> {
    if value.is_empty() {
        return Err("is empty; give an address such as 10.20.0.55".to_string());
    }
    if value.chars().any(char::is_whitespace) {
        return Err(format!("{value:?} contains white space"));
    }
    let (address, prefix) = match value.split_once('/') {
        Some((address, prefix)) => (address, Some(prefix)),
        None => (value, None),
    };
    let address: IpAddr = address.parse().map_err(|_| {
        format!("{address:?} is not an IPv4 or IPv6 address (IPv4 octets without leading zeros)")
    })?;
    let max = if address.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix {
        None => None,
        Some(text) => match text.parse::<u8>() {
            Ok(length) if length <= max && text.bytes().all(|b| b.is_ascii_digit()) => Some(length),
            _ => {
                return Err(format!(
                    "prefix length {text:?} is not a number from 0 to {max}"
                ))
            }
        },
    };
    Ok((address, prefix))
}

/// The address as a number, IPv4 in the low 32 bits.
fn bits(address: IpAddr) -> u128 {
    match address {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// The host-part mask of a `prefix`-long subnet of `address`'s family.
fn host_mask(address: IpAddr, prefix: u8) -> u128 {
    let width: u32 = if address.is_ipv4() { 32 } else { 128 };
    let host_bits = width.saturating_sub(u32::from(prefix));
    if host_bits == 0 {
        0
    } else if host_bits >= 128 {
        u128::MAX
    } else {
        (1u128 << host_bits) - 1
    }
}

/// The subnet as `address/prefix` text.
fn subnet_text(gateway: IpAddr, prefix: u8) -> String {
    let network = bits(gateway) & !host_mask(gateway, prefix);
    let base = match gateway {
        IpAddr::V4(_) => IpAddr::V4((network as u32).into()),
        IpAddr::V6(_) => IpAddr::V6(network.into()),
    };
    format!("{base}/{prefix}")
}

fn in_range(address: IpAddr, range: &IpRange) -> bool {
    match (range.start.parse::<IpAddr>(), range.end.parse::<IpAddr>()) {
        (Ok(start), Ok(end)) if start.is_ipv4() == address.is_ipv4() => {
            (bits(start)..=bits(end)).contains(&bits(address))
        }
        _ => false,
    }
}

fn family(address: IpAddr) -> &'static str {
    if address.is_ipv4() {
        "IPv4"
    } else {
        "IPv6"
    }
}

/// Checks one address against its network; returns the canonical address.
pub fn check_address(
    value: &str,
    network: &Network,
    check_used: bool,
) -> Result<IpAddr, (Reason, String)> {
    let name = &network.name;
    let invalid = |why: String| (Reason::Invalid, why);
    let (address, prefix) =
        parse_address(value).map_err(|why| invalid(format!("the address {why}")))?;
    let (Some(gateway_text), Some(length)) = (&network.gateway, network.prefix_length) else {
        return Err(invalid(format!(
            "the inventory gives network {name:?} no gateway or prefixLength, so the address \
             cannot be checked against its subnet"
        )));
    };
    let gateway: IpAddr = gateway_text.parse().map_err(|_| {
        invalid(format!(
            "the inventory's gateway {gateway_text:?} of network {name:?} is not an address"
        ))
    })?;
    if address.is_ipv4() != gateway.is_ipv4() {
        return Err(invalid(format!(
            "{address} is an {} address, but network {name:?} is {} (gateway {gateway})",
            family(address),
            family(gateway)
        )));
    }
    if let Some(prefix) = prefix.filter(|p| *p != length) {
        return Err(invalid(format!(
            "prefix length /{prefix} does not match network {name:?} ({})",
            subnet_text(gateway, length)
        )));
    }
    let mask = host_mask(gateway, length);
    let subnet = subnet_text(gateway, length);
    if bits(address) & !mask != bits(gateway) & !mask {
        return Err(invalid(format!(
            "{address} is outside network {name:?}'s subnet {subnet}"
        )));
    }
    // Point-to-point (/31, /127) and host (/32, /128) subnets have no subnet or broadcast address.
    if mask > 1 {
        if bits(address) & mask == 0 {
            return Err(invalid(format!(
                "{address} is the subnet address of {subnet}, not a host address"
            )));
        }
        if address.is_ipv4() && bits(address) & mask == mask {
            return Err(invalid(format!(
                "{address} is the broadcast address of {subnet}, not a host address"
            )));
        }
    }
    if address == gateway {
        return Err(invalid(format!(
            "{address} is the gateway of network {name:?}"
        )));
    }
    if !network
        .static_ip_ranges
        .iter()
        .any(|r| in_range(address, r))
    {
        let pools: Vec<String> = network
            .static_ip_ranges
            .iter()
            .map(|r| format!("{}-{}", r.start, r.end))
            .collect();
        let pools = if pools.is_empty() {
            "it has none".to_string()
        } else {
            pools.join(", ")
        };
        return Err(invalid(format!(
            "{address} is outside the static IP pool of network {name:?} ({pools}); Cloud \
             Director assigns MANUAL addresses from the pool only"
        )));
    }
    if check_used
        && network
            .used_ip_addresses
            .iter()
            .filter_map(|used| used.parse::<IpAddr>().ok())
            .any(|used| used == address)
    {
        return Err((
            Reason::Duplicate,
            format!("{address} is already in use on network {name:?}; pick a free address"),
        ));
    }
    Ok(address)
}

/// What [`check_annotations`] found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Addresses {
    /// Network -> address, for every annotation that passed.
    pub manual: BTreeMap<String, IpAddr>,
    /// One per annotation that did not.
    pub violations: Vec<Violation>,
    /// Advice.
    pub warnings: Vec<String>,
}

/// Checks every address annotation of the request's machine.
pub fn check_annotations(request: &Request, settings: &Settings) -> Addresses {
    let mut out = Addresses::default();
    let machine = &request.machine;
    let wanted = requested(machine);

    for key in machine.annotations.keys() {
        let lower = key.to_ascii_lowercase();
        if lower.starts_with("nicpolicy.io/ip") && !key.starts_with(ANNOTATION_PREFIX) {
            out.warnings.push(format!(
                "annotation {key} is not read: MANUAL addresses are requested with \
                 {ANNOTATION_PREFIX}<network-name>"
            ));
        }
    }

    if request.kind == ObjectKind::VcdMachineTemplate {
        for (network, value) in &wanted {
            let key = annotation_key(network);
            out.violations.push(
                Violation::new(
                    annotation_field(&key),
                    Reason::Forbidden,
                    format!(
                    "VCDMachineTemplate {:?} would give address {value} on {network:?} to every \
                     machine made from it, and the replicas would collide; annotate single \
                     VCDMachines instead, or remove {key} and let the NIC take a POOL address",
                    machine.name
                ),
                )
                .with_source(Source::rule(rules::TEMPLATE)),
            );
        }
        return out;
    }

    // A provisioned VM keeps the addresses it has: compare with the stored annotations.
    let old = match (request.operation, &request.old_machine) {
        (Operation::Update, Some(old)) if old.is_provisioned() => Some(requested(old)),
        _ => None,
    };
    if let Some(old) = &old {
        let allow = settings.capvcd.allow_nic_changes_on_provisioned;
        let mut networks: Vec<&str> = wanted.keys().chain(old.keys()).copied().collect();
        networks.sort_unstable();
        networks.dedup();
        for network in networks {
            let (before, after) = (old.get(network), wanted.get(network));
            if before == after {
                continue;
            }
            let key = annotation_key(network);
            let what = match (before, after) {
                (Some(b), Some(a)) => format!("the address on {network:?} changes from {b} to {a}"),
                (None, Some(a)) => format!("address {a} on {network:?} is added"),
                (Some(b), None) => format!("address {b} on {network:?} is removed"),
                (None, None) => continue,
            };
            if allow {
                out.warnings.push(format!(
                    "{}: {what} on a running VM; CAPVCD rewrites its NetworkConnectionSection",
                    annotation_field(&key)
                ));
            } else {
                out.violations.push(
                    Violation::new(
                        annotation_field(&key),
                        Reason::Forbidden,
                        format!(
                        "{what}, but the machine is provisioned ({}); CAPVCD does not re-address \
                         a running VM. Replace the machine instead, or set \
                         capvcd.allowNicChangesOnProvisioned",
                        old_provider_id(request)
                    ),
                    )
                    .with_source(
                        Source::rule(rules::PROVISIONED_UPDATE)
                            .with_setting("capvcd.allowNicChangesOnProvisioned"),
                    ),
                );
            }
        }
    }

    let primary = capvcd::resolve_primary(request, machine).unwrap_or(Primary::Unresolved);
    let mut nics: Vec<&str> = primary.name().into_iter().collect();
    nics.extend(machine.extra_ovdc_networks.iter().map(String::as_str));
    let index = request.inventory.as_ref().map(|inv| inv.index());

    for (network, value) in wanted {
        let key = annotation_key(network);
        let field = annotation_field(&key);
        // On a running VM, an unchanged address is its own (and so in usedIpAddresses); a
        // changed one was refused above unless the settings allow changes.
        let unchanged = old
            .as_ref()
            .is_some_and(|old| old.get(network) == Some(&value));
        if old.is_some() && !unchanged && !settings.capvcd.allow_nic_changes_on_provisioned {
            continue;
        }
        let fail = |reason: Reason, message: String| Violation::new(field.clone(), reason, message);
        if network.is_empty() {
            out.violations.push(fail(
                Reason::Invalid,
                format!(
                    "annotation {key} names no network; write {ANNOTATION_PREFIX}<network-name>"
                ),
            ));
            continue;
        }
        if let Some(allowed) = &settings.manual_networks {
            if !allowed.iter().any(|n| n == network) {
                out.violations.push(
                    fail(
                        Reason::Forbidden,
                        format!(
                        "this site allows MANUAL addresses only on {} (manualNetworks); remove \
                         {key} so the NIC on {network:?} takes a POOL address",
                        allowed.join(", ")
                    ),
                    )
                    .with_source(Source::rule(rules::ADDRESS).with_setting("manualNetworks")),
                );
                continue;
            }
        }
        // Without the cluster, a network that is not an extra one may still be NIC 0: the
        // address is checked against the inventory, its NIC once the cluster is known.
        if !nics.contains(&network) && primary != Primary::ClusterUnknown {
            let zone_primary = primary.candidates().iter().any(|(n, _)| *n == network);
            out.violations.push(if zone_primary {
                fail(
                    Reason::Invalid,
                    format!(
                        "network {network:?} is NIC 0 only if CAPVCD places the machine in its \
                         zone; set spec.failureDomain to give NIC 0 a fixed network"
                    ),
                )
            } else {
                fail(
                    Reason::NotFound,
                    format!(
                        "the machine has no NIC on network {network:?} (its NICs: {}); add the \
                         network to spec.extraOvdcNetworks or fix the annotation key",
                        if nics.is_empty() {
                            "none known".to_string()
                        } else {
                            nics.join(", ")
                        }
                    ),
                )
            });
            continue;
        }
        let Some(index) = &index else {
            out.violations.push(fail(
                Reason::NotFound,
                format!(
                    "no inventory of the org VDC's networks was given, so address {value} cannot \
                     be checked against network {network:?}"
                ),
            ));
            continue;
        };
        let Some(entry) = index.get(network) else {
            out.violations.push(fail(
                Reason::NotFound,
                format!(
                    "network {network:?} has no entry in the inventory, so address {value} \
                     cannot be checked"
                ),
            ));
            continue;
        };
        match check_address(value, entry, !unchanged) {
            Ok(address) => {
                out.manual.insert(network.to_string(), address);
            }
            Err((reason, message)) => out.violations.push(fail(reason, message)),
        }
    }
    out
}

fn old_provider_id(request: &Request) -> &str {
    request
        .old_machine
        .as_ref()
        .and_then(|old| old.provider_id.as_deref())
        .unwrap_or_default()
}

/// The CAPVCD rules, with a MANUAL address on every NIC whose annotation passed.
pub fn evaluate_with(request: &Request, settings: &Settings) -> Decision {
    let addresses = check_annotations(request, settings);
    // NICs that get a MANUAL address are planned as POOL first, so the CAPVCD rules do not
    // complain about a NONE or DHCP mode they will not have.
    let mut capvcd_settings = settings.capvcd.clone();
    for network in addresses.manual.keys() {
        capvcd_settings
            .networks
            .entry(network.clone())
            .or_default()
            .ip_allocation_mode = Some(IpAllocationMode::Pool);
    }
    let mut decision = capvcd::evaluate_with(request, &capvcd_settings);
    source::nest_settings(&mut decision, "capvcd");
    for nic in &mut decision.nics {
        if let Some(address) = addresses.manual.get(&nic.network) {
            nic.ip_allocation_mode = IpAllocationMode::Manual;
            nic.ip_address = Some(address.to_string());
            // The network is where the CAPVCD rules found it; the address is the annotation's
            // (the `networks` entry above is this policy's own, not a setting of the site's).
            if let Some(source) = nic.source.as_mut() {
                source.rule = Some(rules::ADDRESS.to_string());
                source.setting = None;
            }
        }
    }
    let mut violations = addresses.violations;
    source::tag(&mut violations, rules::ADDRESS, None);
    decision.violations.extend(violations);
    decision.warnings.extend(addresses.warnings);
    decision.allowed = decision.violations.is_empty();
    decision
}

nicpolicy_plugin::export_policy!(evaluate_with, settings: Settings);

/// The backstop: the CAPVCD rules' structural part with the `capvcd` settings (the addresses
/// change the NIC plan, not the list). The addresses themselves are the webhook's.
fn backstop(settings: &Settings, builder: &mut nicpolicy_plugin::backstop::Builder) {
    nicpolicy_plugin::capvcd::cel::all(&settings.capvcd, builder);
    builder.not_covered(
        "MANUAL addresses from nicpolicy.io/ip.<network> annotations: they are checked against the inventory's subnets",
    );
}

nicpolicy_plugin::export_backstop!(backstop, settings: Settings);

#[cfg(test)]
mod tests {
    use super::*;
    use nicpolicy_plugin::testing;
    use nicpolicy_plugin::Inventory;
    use serde_json::json;

    fn network(
        name: &str,
        gateway: &str,
        prefix: u8,
        range: (&str, &str),
        used: &[&str],
    ) -> Network {
        Network {
            name: name.into(),
            network_type: None,
            gateway: Some(gateway.into()),
            prefix_length: Some(prefix),
            static_ip_ranges: vec![IpRange {
                start: range.0.into(),
                end: range.1.into(),
            }],
            dns: Vec::new(),
            used_ip_addresses: used.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn inventory() -> Inventory {
        Inventory {
            networks: vec![
                network(
                    "mgmt-net",
                    "10.10.0.1",
                    24,
                    ("10.10.0.20", "10.10.0.200"),
                    &[],
                ),
                network(
                    "storage-net",
                    "10.20.0.1",
                    24,
                    ("10.20.0.20", "10.20.0.250"),
                    &["10.20.0.21"],
                ),
                network(
                    "storage-v6-net",
                    "2001:db8:20::1",
                    64,
                    ("2001:db8:20::100", "2001:db8:20::1ff"),
                    &["2001:db8:20::101"],
                ),
            ],
        }
    }

    fn request(extras: &[&str], annotations: &[(&str, &str)]) -> Request {
        let mut request = testing::worker(extras);
        request.machine.annotations = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        request.inventory = Some(inventory());
        request
    }

    fn one_violation(d: &Decision) -> (&str, Reason, &str) {
        assert_eq!(d.violations.len(), 1, "{d:?}");
        let v = &d.violations[0];
        (v.field.as_str(), v.reason, v.message.as_str())
    }

    #[test]
    fn manual_address_planned() {
        let d = evaluate_request(&request(
            &["storage-net"],
            &[("nicpolicy.io/ip.storage-net", "10.20.0.55")],
        ));
        assert!(d.allowed, "{d:?}");
        assert_eq!(d.nics[0].ip_allocation_mode, IpAllocationMode::Pool);
        assert_eq!(d.nics[1].ip_allocation_mode, IpAllocationMode::Manual);
        assert_eq!(d.nics[1].ip_address.as_deref(), Some("10.20.0.55"));
    }

    #[test]
    fn primary_and_full_ipv6_with_prefix() {
        let d = evaluate_request(&request(
            &["storage-v6-net"],
            &[
                ("nicpolicy.io/ip.mgmt-net", "10.10.0.50/24"),
                (
                    "nicpolicy.io/ip.storage-v6-net",
                    "2001:0db8:0020:0000:0000:0000:0000:0142/64",
                ),
            ],
        ));
        assert!(d.allowed, "{d:?}");
        assert_eq!(d.nics[0].ip_address.as_deref(), Some("10.10.0.50"));
        assert_eq!(d.nics[1].ip_address.as_deref(), Some("2001:db8:20::142"));
    }

    #[test]
    fn address_checks() {
        let storage = &inventory().networks[1];
        let v6 = &inventory().networks[2];
        let reason = |value: &str, net: &Network| check_address(value, net, true).unwrap_err();
        for bad in [
            "10.20.0",
            "10.20.0.055",
            "10.20.0.55 ",
            "",
            "10.20.0.55/x",
            "10.20.0.55/33",
        ] {
            assert_eq!(reason(bad, storage).0, Reason::Invalid, "{bad}");
        }
        assert!(reason("10.20.0.55/16", storage)
            .1
            .contains("does not match"));
        assert!(reason("2001:db8:20::150", storage)
            .1
            .contains("IPv6 address"));
        assert!(reason("10.21.0.55", storage).1.contains("outside network"));
        assert!(reason("10.20.0.0", storage).1.contains("subnet address"));
        assert!(reason("10.20.0.255", storage).1.contains("broadcast"));
        assert!(reason("10.20.0.1", storage).1.contains("gateway"));
        assert!(reason("10.20.0.10", storage).1.contains("static IP pool"));
        assert_eq!(reason("10.20.0.21", storage).0, Reason::Duplicate);
        assert_eq!(reason("2001:0db8:0020::0101", v6).0, Reason::Duplicate);
        assert!(reason("2001:db8:21::150", v6)
            .1
            .contains("2001:db8:20::/64"));
        assert!(check_address("10.20.0.21", storage, false).is_ok());
        assert!(check_address("2001:db8:20::1ff", v6, true).is_ok());
    }

    #[test]
    fn host_masks() {
        let v4: IpAddr = "10.0.0.1".parse().unwrap();
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(host_mask(v4, 24), 0xff);
        assert_eq!(host_mask(v4, 32), 0);
        assert_eq!(host_mask(v4, 0), 0xffff_ffff);
        assert_eq!(host_mask(v6, 0), u128::MAX);
        assert_eq!(host_mask(v6, 64), u128::from(u64::MAX));
        assert_eq!(subnet_text(v4, 0), "0.0.0.0/0");
    }

    #[test]
    fn network_must_be_a_nic_with_inventory() {
        let d = evaluate_request(&request(
            &[],
            &[("nicpolicy.io/ip.storage-net", "10.20.0.55")],
        ));
        let (field, reason, message) = one_violation(&d);
        assert_eq!(field, "metadata.annotations[nicpolicy.io/ip.storage-net]");
        assert_eq!(reason, Reason::NotFound);
        assert!(message.contains("its NICs: mgmt-net"));

        let mut r = request(
            &["backup-net"],
            &[("nicpolicy.io/ip.backup-net", "10.40.0.55")],
        );
        let d = evaluate_request(&r);
        // Ours for the annotation, and CAPVCD's NotFound for the extra (in field order).
        assert_eq!(d.violations.len(), 2, "{d:?}");
        assert_eq!(
            d.violations[0].field,
            "metadata.annotations[nicpolicy.io/ip.backup-net]"
        );

        r.inventory = None;
        let d = evaluate_request(&r);
        let (_, reason, message) = one_violation(&d);
        assert_eq!(reason, Reason::NotFound);
        assert!(message.contains("no inventory"));
    }

    #[test]
    fn templates_are_forbidden() {
        let mut r = request(
            &["storage-net"],
            &[("nicpolicy.io/ip.storage-net", "10.20.0.55")],
        );
        r.kind = ObjectKind::VcdMachineTemplate;
        let d = evaluate_request(&r);
        let (_, reason, message) = one_violation(&d);
        assert_eq!(reason, Reason::Forbidden);
        assert!(message.contains("POOL"));
        assert_eq!(d.nics[1].ip_allocation_mode, IpAllocationMode::Pool);
    }

    #[test]
    fn provisioned_update() {
        let mut r = request(
            &["storage-net"],
            &[("nicpolicy.io/ip.storage-net", "10.20.0.21")],
        );
        r.operation = Operation::Update;
        r.machine.provider_id = Some("vmware-cloud-director://urn:vcloud:vm:1".into());
        r.old_machine = Some(r.machine.clone());
        // Its own address is in usedIpAddresses: no Duplicate.
        let d = evaluate_request(&r);
        assert!(d.allowed, "{d:?}");
        assert_eq!(d.nics[1].ip_address.as_deref(), Some("10.20.0.21"));

        r.machine
            .annotations
            .insert("nicpolicy.io/ip.storage-net".into(), "10.20.0.56".into());
        let d = evaluate_request(&r);
        let (_, reason, message) = one_violation(&d);
        assert_eq!(reason, Reason::Forbidden);
        assert!(message.contains("changes from 10.20.0.21 to 10.20.0.56"));

        r.settings = json!({"capvcd": {"allowNicChangesOnProvisioned": true}});
        let d = evaluate_request(&r);
        assert!(d.allowed, "{d:?}");
        assert_eq!(d.warnings.len(), 1);
        assert_eq!(d.nics[1].ip_address.as_deref(), Some("10.20.0.56"));
    }

    #[test]
    fn manual_networks_setting() {
        let mut r = request(
            &["storage-net"],
            &[
                ("nicpolicy.io/ip.mgmt-net", "10.10.0.50"),
                ("nicpolicy.io/ip.storage-net", "10.20.0.55"),
            ],
        );
        r.settings = json!({"manualNetworks": ["storage-net"]});
        let d = evaluate_request(&r);
        let (field, reason, _) = one_violation(&d);
        assert_eq!(field, "metadata.annotations[nicpolicy.io/ip.mgmt-net]");
        assert_eq!(reason, Reason::Forbidden);
        assert_eq!(d.nics[1].ip_allocation_mode, IpAllocationMode::Manual);
    }

    #[test]
    fn manual_overrides_none_primary_mode() {
        let mut r = request(&[], &[("nicpolicy.io/ip.mgmt-net", "10.10.0.50")]);
        r.settings = json!({"capvcd": {"networks": {"mgmt-net": {"ipAllocationMode": "NONE"}}}});
        let d = evaluate_request(&r);
        assert!(d.allowed, "{d:?}");
        assert_eq!(d.nics[0].ip_allocation_mode, IpAllocationMode::Manual);
    }

    #[test]
    fn misspelt_annotation_warns() {
        let d = evaluate_request(&request(
            &[],
            &[("nicpolicy.io/ip-storage-net", "10.20.0.55")],
        ));
        assert!(d.allowed);
        assert_eq!(d.warnings.len(), 1);
        assert!(d.warnings[0].contains("nicpolicy.io/ip.<network-name>"));
    }

    #[test]
    fn settings_are_checked() {
        let err = |v: Value| Settings::parse(&v).unwrap_err();
        assert!(err(json!({"manualNetwork": []})).contains("unknown field `manualNetwork`"));
        assert!(
            err(json!({"manualNetworks": ["storage-net", "storage-net"]}))
                .contains("already listed at manualNetworks[0]")
        );
        assert!(err(json!({"manualNetworks": [""]})).starts_with("manualNetworks[0]: network name"));
        assert!(err(json!({"manualNetworks": ["n".repeat(61)]})).contains("too long"));
        assert!(err(json!({"capvcd": {"maxNics": 0}})).starts_with("capvcd: maxNics"));
        assert!(err(json!("storage-net")).contains("must be a map"));
        assert!(Settings::parse(&json!({"manualNetworks": ["n".repeat(60)]})).is_ok());
    }
}
