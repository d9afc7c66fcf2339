//! Logical network names, mapped to the org VDC networks of the machine's zone.
//!
//! In a multi-zone cluster each zone has its own org VDC, so the "storage network" is
//! `storage-net-a` in zone-a and `storage-net-b` in zone-b. With this policy, machine templates
//! list *logical* names (`storage`, `workload`, `backup`) in `extraOvdcNetworks`, and each
//! machine gets the real networks of its zone written back:
//!
//! ```yaml
//! zones:
//!   zone-a: {storage: storage-net-a, workload: workload-net-a, backup: backup-net}
//!   zone-b: {storage: storage-net-b, workload: workload-net-b, backup: backup-net}
//! default: {storage: storage-net, workload: workload-net, backup: backup-net}
//! capvcd: {maxNics: 6}
//! ```
//!
//! The mapping is the machine's `failureDomain` zone; `default` serves single-zone clusters and
//! machines without a failure domain. In that mapping each extra network that is a logical name
//! becomes its network, a name that is already one of the mapping's networks passes through
//! unchanged, and anything else is `NotFound` at `<spec>.extraOvdcNetworks[i]`. The CAPVCD rules
//! then run on the mapped list, with their field paths pointing at the machine's own entries.

use std::collections::BTreeMap;

use nicpolicy_plugin::capvcd;
use nicpolicy_plugin::settings::{self, PolicySettings};
use nicpolicy_plugin::source::{self, Origin, Source};
use nicpolicy_plugin::{Decision, Machine, Reason, Request, Violation};

/// The rule names this policy reports in each violation's and NIC's [`Source`].
pub mod rules {
    /// A logical name mapped to the network of the machine's zone.
    pub const MAP: &str = "zone-aware/map";
    /// A name the machine's mapping does not know.
    pub const UNMAPPED: &str = "zone-aware/unmapped";
    /// Logical names in a multi-zone cluster without a failure domain or a default mapping.
    pub const ZONE_REQUIRED: &str = "zone-aware/zone-required";
}
use serde::Deserialize;
use serde_json::Value;

/// Logical name -> org VDC network name.
pub type NetworkMap = BTreeMap<String, String>;

/// The policy's settings (unknown fields refused; at least one mapping).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Settings {
    /// The CAPVCD rules' own settings (`capvcd:`).
    #[serde(default, deserialize_with = "settings::null_as_default")]
    pub capvcd: capvcd::Settings,
    /// Mapping per zone, keyed by zone name as machines give it in `spec.failureDomain`.
    #[serde(default, deserialize_with = "zone_maps")]
    pub zones: BTreeMap<String, NetworkMap>,
    /// Mapping for single-zone clusters and for machines without a failure domain.
    #[serde(default, deserialize_with = "default_map")]
    pub default: Option<NetworkMap>,
}

/// An org VDC network name in a mapping; anything but a string is refused in those words.
struct NetworkName(String);

impl<'de> Deserialize<'de> for NetworkName {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::String(name) => Ok(NetworkName(name)),
            other => Err(serde::de::Error::custom(format!(
                "must be an org VDC network name, not {}",
                settings::describe(&other)
            ))),
        }
    }
}

type RawMap = BTreeMap<String, NetworkName>;

fn network_map(raw: RawMap) -> NetworkMap {
    raw.into_iter()
        .map(|(logical, name)| (logical, name.0))
        .collect()
}

/// `zones:`, its network names read as [`NetworkName`]s (`null` maps no zone).
fn zone_maps<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<BTreeMap<String, NetworkMap>, D::Error> {
    let zones: Option<BTreeMap<String, RawMap>> = Deserialize::deserialize(deserializer)?;
    Ok(zones
        .unwrap_or_default()
        .into_iter()
        .map(|(zone, map)| (zone, network_map(map)))
        .collect())
}

/// `default:`, its network names read as [`NetworkName`]s.
fn default_map<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<NetworkMap>, D::Error> {
    let map: Option<RawMap> = Deserialize::deserialize(deserializer)?;
    Ok(map.map(network_map))
}

/// Checks one `logical: network` map at `at`.
fn check_map(map: &NetworkMap, at: &str) -> Result<(), String> {
    if map.is_empty() {
        return Err(format!(
            "{at}: maps no logical names; map at least one (storage: storage-net) or remove it"
        ));
    }
    for (logical, network) in map {
        capvcd::check_name(logical)
            .map_err(|why| format!("{at}: logical name {logical:?} {why}"))?;
        capvcd::check_name(network)
            .map_err(|why| format!("{at}.{logical}: network name {network:?} {why}"))?;
    }
    // Keys come in order, so the first of two logical names mapped to one network is the
    // smaller one.
    for (i, (logical, network)) in map.iter().enumerate() {
        if let Some((other, _)) = map.iter().skip(i + 1).find(|(_, n)| *n == network) {
            return Err(format!(
                "{at}: {logical} and {other} both map to {network:?}; a machine listing both \
                 would attach the network twice"
            ));
        }
    }
    Ok(())
}

impl PolicySettings for Settings {
    fn check(&self) -> Result<(), String> {
        self.capvcd.check_nested("capvcd")?;
        for (zone, map) in &self.zones {
            if zone.is_empty() || zone.trim() != zone {
                return Err(format!(
                    "zones: zone name {zone:?} is empty or has white space at either end; use \
                     the zone names of the VCDCluster"
                ));
            }
            check_map(map, &format!("zones.{zone}"))?;
        }
        if let Some(map) = &self.default {
            check_map(map, "default")?;
        }
        if self.zones.is_empty() && self.default.is_none() {
            return Err(
                "settings map no networks: give zones (logical name to network, per zone), a \
                 default mapping, or both"
                    .to_string(),
            );
        }
        self.check_names_unambiguous()
    }
}

impl Settings {
    /// Reads and checks settings; JSON `null` maps nothing (the CAPVCD rules alone).
    ///
    /// # Errors
    /// Why the settings cannot be used, starting with the field at fault.
    pub fn parse(value: &Value) -> Result<Settings, String> {
        settings::parse(value)
    }

    /// Every mapping with the settings path it sits at.
    fn maps(&self) -> impl Iterator<Item = (String, &NetworkMap)> {
        self.zones
            .iter()
            .map(|(zone, map)| (format!("zones.{zone}"), map))
            .chain(self.default.iter().map(|map| ("default".to_string(), map)))
    }

    /// A name must not be a logical name in one place and a network in another: a machine
    /// listing it could mean either.
    fn check_names_unambiguous(&self) -> Result<(), String> {
        for (at, map) in self.maps() {
            for logical in map.keys() {
                if let Some((other_at, other_logical)) = self.maps().find_map(|(other_at, m)| {
                    m.iter()
                        .find(|(_, network)| *network == logical)
                        .map(|(l, _)| (other_at, l.clone()))
                }) {
                    return Err(format!(
                        "{at}: {logical:?} is a logical name, but {other_at}.{other_logical} \
                         maps to a network of that name; a machine listing it would be \
                         ambiguous. Network names pass through unchanged, so only logical \
                         names need entries"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Whether `name` is a logical name of any mapping.
    pub fn is_logical(&self, name: &str) -> bool {
        self.maps().any(|(_, map)| map.contains_key(name))
    }
}

/// The mapping that applies to one machine.
#[derive(Clone, Debug, PartialEq)]
pub enum Resolved<'a> {
    /// This mapping, described for messages (`zone "zone-a"`, `the default mapping`).
    Mapped {
        /// How messages name the mapping.
        label: String,
        /// Where the mapping sits in the settings (`zones.zone-a`, `default`).
        at: String,
        /// Logical name -> network.
        map: &'a NetworkMap,
    },
    /// No mapping applies. `violation` says why once for the machine; otherwise each logical
    /// name is `NotFound` with `per_name` as the reason, when given.
    Unmapped {
        /// One violation for the machine (`Required` at `<spec>.failureDomain`).
        violation: Option<Violation>,
        /// Why a logical name cannot be mapped, for a `NotFound` on each.
        per_name: Option<String>,
    },
}

/// Picks the mapping for `machine`: its failure-domain zone's, or the default one.
pub fn resolve<'a>(request: &Request, machine: &Machine, settings: &'a Settings) -> Resolved<'a> {
    let cluster = &request.cluster;
    let spec = request.kind.spec_path();
    let default = || {
        settings.default.as_ref().map(|map| Resolved::Mapped {
            label: "the default mapping".to_string(),
            at: "default".to_string(),
            map,
        })
    };
    if request.cluster_unknown {
        // Without the cluster only the machine's own zone and the settings are known: that
        // zone's mapping, else the default one; without either, logical names wait for the
        // cluster (the machine is created with its cluster label).
        let zone = machine.failure_domain.as_deref().filter(|z| !z.is_empty());
        let zone_map = zone.and_then(|zone| {
            settings.zones.get(zone).map(|map| Resolved::Mapped {
                label: format!("zone {zone:?}"),
                at: format!("zones.{zone}"),
                map,
            })
        });
        return zone_map.or_else(default).unwrap_or(Resolved::Unmapped {
            violation: None,
            per_name: None,
        });
    }
    if !cluster.is_multi_zone() {
        return default().unwrap_or_else(|| Resolved::Unmapped {
            violation: None,
            per_name: Some(format!(
                "VCDCluster {:?} has no zones and the policy settings give no default mapping",
                cluster.name
            )),
        });
    }
    match machine.failure_domain.as_deref().filter(|z| !z.is_empty()) {
        Some(zone) => {
            if let Some(map) = settings.zones.get(zone) {
                return Resolved::Mapped {
                    label: format!("zone {zone:?}"),
                    at: format!("zones.{zone}"),
                    map,
                };
            }
            // A zone the cluster does not have is CAPVCD's NotFound at failureDomain already.
            let per_name = cluster.zones.iter().any(|z| z.name == zone).then(|| {
                format!(
                    "zone {zone:?} has no network mapping in the policy settings (mapped zones: \
                     {})",
                    names(settings.zones.keys())
                )
            });
            Resolved::Unmapped {
                violation: None,
                per_name,
            }
        }
        None => default().unwrap_or_else(|| {
            let zones: Vec<&str> = cluster.zones.iter().map(|z| z.name.as_str()).collect();
            Resolved::Unmapped {
                violation: Some(
                    Violation::new(
                        format!("{spec}.failureDomain"),
                        Reason::Required,
                        format!(
                        "VCDCluster {:?} has zones and this machine lists logical networks, which \
                         are mapped per zone: set failureDomain to one of {}, or give the policy \
                         a default mapping",
                        cluster.name,
                        zones.join(", ")
                    ),
                    )
                    .with_source(Source::rule(rules::ZONE_REQUIRED)),
                ),
                per_name: None,
            }
        }),
    }
}

fn names<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let names: Vec<&str> = names.map(String::as_str).collect();
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

/// One extra network after mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapped {
    /// Index in the machine's own `extraOvdcNetworks`.
    pub index: usize,
    /// The org VDC network.
    pub network: String,
    /// The logical name it came from, when it was mapped.
    pub logical: Option<String>,
    /// The settings entry that mapped it (`zones.zone-a.storage`), when it was mapped.
    pub setting: Option<String>,
}

/// Maps the machine's extra networks: the kept entries (in order) and a violation for each
/// entry that cannot be mapped.
pub fn map_extras(
    request: &Request,
    machine: &Machine,
    settings: &Settings,
) -> (Vec<Mapped>, Vec<Violation>) {
    let spec = request.kind.spec_path();
    let resolved = resolve(request, machine, settings);
    let mut kept = Vec::new();
    let mut violations = Vec::new();
    let mut needs_zone = false;
    for (index, name) in machine.extra_ovdc_networks.iter().enumerate() {
        let keep = |logical: Option<&String>, network: &str, at: Option<&str>| Mapped {
            index,
            network: network.to_string(),
            logical: logical.cloned(),
            setting: at
                .zip(logical)
                .map(|(at, logical)| format!("{at}.{logical}")),
        };
        // Malformed names are CAPVCD's to report.
        if capvcd::check_name(name).is_err() {
            kept.push(keep(None, name, None));
            continue;
        }
        let field = format!("{spec}.extraOvdcNetworks[{index}]");
        match &resolved {
            Resolved::Mapped { label, at, map } => {
                if let Some(network) = map.get(name) {
                    kept.push(keep(Some(name), network, Some(at)));
                } else if map.values().any(|n| n == name) {
                    kept.push(keep(None, name, None));
                } else {
                    let hint = elsewhere(settings, name);
                    violations.push(
                        Violation::new(
                            field,
                            Reason::NotFound,
                            format!(
                            "network {name:?} has no mapping in {label} (its logical networks: \
                             {}){hint}",
                            names(map.keys())
                        ),
                        )
                        .with_source(Source::rule(rules::UNMAPPED).with_setting(at.clone())),
                    );
                }
            }
            Resolved::Unmapped { per_name, .. } => {
                if !settings.is_logical(name) {
                    kept.push(keep(None, name, None));
                    continue;
                }
                needs_zone = true;
                if let Some(why) = per_name {
                    violations.push(
                        Violation::new(
                            field,
                            Reason::NotFound,
                            format!("logical network {name:?} cannot be mapped: {why}"),
                        )
                        .with_source(Source::rule(rules::UNMAPPED)),
                    );
                }
            }
        }
    }
    if let Resolved::Unmapped {
        violation: Some(violation),
        ..
    } = resolved
    {
        if needs_zone {
            violations.insert(0, violation);
        }
    }
    (kept, violations)
}

/// Where else `name` is known, as a hint after a `NotFound`.
fn elsewhere(settings: &Settings, name: &str) -> String {
    for (at, map) in settings.maps() {
        let what = if map.contains_key(name) {
            "a logical name"
        } else if map.values().any(|n| n == name) {
            "a network"
        } else {
            continue;
        };
        let place = match at.strip_prefix("zones.") {
            Some(zone) => format!("zone {zone:?}"),
            None => "the default mapping".to_string(),
        };
        return format!("; {name:?} is {what} of {place}");
    }
    String::new()
}

/// The machine's extra networks mapped with its own zone, for comparing a stored machine with a
/// new one (entries that cannot be mapped stay as they are).
fn mapped_list(request: &Request, machine: &Machine, settings: &Settings) -> Vec<String> {
    match resolve(request, machine, settings) {
        Resolved::Mapped { map, .. } => machine
            .extra_ovdc_networks
            .iter()
            .map(|name| map.get(name).unwrap_or(name).clone())
            .collect(),
        Resolved::Unmapped { .. } => machine.extra_ovdc_networks.clone(),
    }
}

/// Maps the extra networks, then runs the CAPVCD rules on the mapped list; their violations
/// name each entry where the machine lists it.
pub fn evaluate_with(request: &Request, settings: &Settings) -> Decision {
    let spec = request.kind.spec_path();
    let (kept, mut violations) = map_extras(request, &request.machine, settings);

    let mut mapped = request.clone();
    mapped.machine.extra_ovdc_networks = kept.iter().map(|m| m.network.clone()).collect();
    if let Some(old) = mapped.old_machine.as_mut() {
        old.extra_ovdc_networks = mapped_list(request, old, settings);
    }
    let positions: Vec<usize> = kept.iter().map(|m| m.index).collect();
    let fields = capvcd::ExtraFields::with_positions(&mapped, &positions);
    let mut decision = capvcd::evaluate_fields(&mapped, &settings.capvcd, &fields);
    source::nest_settings(&mut decision, "capvcd");
    // A mapped NIC comes from the mapping's entry, not from the name the machine lists.
    for nic in decision.nics.iter_mut().filter(|nic| nic.index > 0) {
        let Some(entry) = kept.get(nic.index as usize - 1) else {
            continue;
        };
        if let (Some(setting), Some(source)) = (&entry.setting, nic.source.as_mut()) {
            source.origin = Some(Origin::Settings);
            source.rule = Some(rules::MAP.to_string());
            source.setting = Some(setting.clone());
        }
    }

    let prefix = format!("{spec}.extraOvdcNetworks[");
    for violation in &mut decision.violations {
        let listed = violation
            .field
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix(']'))
            .and_then(|i| i.parse::<usize>().ok())
            .and_then(|i| kept.iter().find(|m| m.index == i));
        if let Some(Mapped {
            logical: Some(logical),
            network,
            ..
        }) = listed
        {
            violation.message.push_str(&format!(
                " (listed as logical network {logical:?}, mapped to {network:?})"
            ));
        }
    }
    violations.append(&mut decision.violations);
    decision.violations = violations;
    if request.cluster_unknown && kept.len() != request.machine.extra_ovdc_networks.len() {
        // Logical names wait for the cluster's zones: leave the machine's list as it is rather
        // than write it back without them.
        decision.extra_ovdc_networks = None;
    }
    decision.finish()
}

nicpolicy_plugin::export_policy!(evaluate_with, settings: Settings);

/// The backstop: the CAPVCD rules that hold for logical names as they do for the networks they
/// map to (names, duplicates, the count), with the `capvcd` settings. The inventory and the
/// provisioned-machine rule judge the mapped list, which only the webhook writes.
fn backstop(settings: &Settings, builder: &mut nicpolicy_plugin::backstop::Builder) {
    use nicpolicy_plugin::capvcd::cel;
    cel::names(builder);
    cel::duplicates(builder);
    cel::max_nics(&settings.capvcd, builder);
    cel::not_covered(builder);
    builder.not_covered(
        "the mapping of logical names, the inventory and a changed list on a provisioned machine: they judge the mapped list, which depends on the machine's zone",
    );
    builder.rewrites_networks();
}

nicpolicy_plugin::export_backstop!(backstop, settings: Settings);

#[cfg(test)]
mod tests {
    use super::*;
    use nicpolicy_plugin::testing::{self, violation_fields as fields};
    use nicpolicy_plugin::{Inventory, Network, Operation, Zone};
    use serde_json::json;

    fn settings() -> Value {
        json!({
            "zones": {
                "zone-a": {"storage": "storage-net-a", "workload": "workload-net-a", "backup": "backup-net"},
                "zone-b": {"storage": "storage-net-b", "workload": "workload-net-b"}
            },
            "default": {"storage": "storage-net", "workload": "workload-net", "backup": "backup-net"}
        })
    }

    fn zones() -> Vec<Zone> {
        testing::zones(&["a", "b", "c"])
    }

    fn request(zone: Option<&str>, extras: &[&str]) -> Request {
        let mut request = testing::worker(extras);
        request.machine.name = "prod-eu1-md-a-4kd9s".into();
        request.machine.failure_domain = zone.map(str::to_string);
        request.cluster.ovdc = String::new();
        request.cluster.ovdc_network = String::new();
        request.cluster.zone_topology = Some("DCGroup".into());
        request.cluster.zones = zones();
        request.settings = settings();
        request
    }

    fn networks(decision: &Decision) -> Vec<&str> {
        decision.nics.iter().map(|n| n.network.as_str()).collect()
    }

    #[test]
    fn maps_logical_names_of_the_zone() {
        let d = evaluate_request(&request(Some("zone-b"), &["storage", "workload"]));
        assert!(d.allowed, "{d:?}");
        assert_eq!(
            networks(&d),
            ["mgmt-net-b", "storage-net-b", "workload-net-b"]
        );
        assert_eq!(
            d.extra_ovdc_networks,
            Some(vec!["storage-net-b".into(), "workload-net-b".into()])
        );
    }

    #[test]
    fn real_names_pass_through() {
        let d = evaluate_request(&request(Some("zone-a"), &["storage-net-a", "backup"]));
        assert!(d.allowed, "{d:?}");
        assert_eq!(networks(&d), ["mgmt-net-a", "storage-net-a", "backup-net"]);
    }

    #[test]
    fn unmapped_names_are_not_found_and_capvcd_paths_keep_original_indexes() {
        let d = evaluate_request(&request(
            Some("zone-b"),
            &["backup", "storage-net-a", "storage", "storage-net-b"],
        ));
        assert_eq!(
            fields(&d),
            [
                ("spec.extraOvdcNetworks[0]", Reason::NotFound),
                ("spec.extraOvdcNetworks[1]", Reason::NotFound),
                ("spec.extraOvdcNetworks[3]", Reason::Duplicate),
            ]
        );
        assert!(d.violations[0].message.contains("zone \"zone-b\""));
        assert!(d.violations[0].message.contains("storage, workload"));
        assert!(d.violations[1]
            .message
            .contains("is a network of zone \"zone-a\""));
        assert!(d.violations[2]
            .message
            .contains("already listed at spec.extraOvdcNetworks[2]"));
    }

    #[test]
    fn mapped_entry_named_in_capvcd_violation() {
        let mut r = request(Some("zone-a"), &["workload", "storage"]);
        r.inventory = Some(Inventory {
            networks: ["mgmt-net-a", "storage-net-a"]
                .iter()
                .map(|n| Network::named(*n))
                .collect(),
        });
        let d = evaluate_request(&r);
        assert_eq!(
            fields(&d),
            [("spec.extraOvdcNetworks[0]", Reason::NotFound)]
        );
        assert!(d.violations[0]
            .message
            .contains("(listed as logical network \"workload\", mapped to \"workload-net-a\")"));
    }

    #[test]
    fn without_failure_domain_default_or_required() {
        let d = evaluate_request(&request(None, &["storage"]));
        assert_eq!(d.extra_ovdc_networks, Some(vec!["storage-net".into()]));

        let mut r = request(None, &["storage", "ext-dmz-net"]);
        r.settings = json!({"zones": settings()["zones"]});
        let d = evaluate_request(&r);
        assert_eq!(fields(&d), [("spec.failureDomain", Reason::Required)]);
        // Nothing logical listed: nothing to map, no violation.
        let mut r = request(None, &["ext-dmz-net"]);
        r.settings = json!({"zones": settings()["zones"]});
        assert!(evaluate_request(&r).allowed);
    }

    #[test]
    fn zone_without_mapping() {
        let d = evaluate_request(&request(Some("zone-c"), &["storage"]));
        assert_eq!(
            fields(&d),
            [("spec.extraOvdcNetworks[0]", Reason::NotFound)]
        );
        assert!(d.violations[0].message.contains("zone \"zone-c\" has no"));
        // Not a zone of the cluster: CAPVCD's violation only.
        let d = evaluate_request(&request(Some("zone-x"), &["storage"]));
        assert_eq!(fields(&d), [("spec.failureDomain", Reason::NotFound)]);
    }

    #[test]
    fn single_zone_cluster_uses_default() {
        let mut r = request(None, &["workload"]);
        r.cluster.zones.clear();
        r.cluster.ovdc_network = "mgmt-net".into();
        let d = evaluate_request(&r);
        assert!(d.allowed, "{d:?}");
        assert_eq!(networks(&d), ["mgmt-net", "workload-net"]);
        r.settings = json!({"zones": settings()["zones"]});
        let d = evaluate_request(&r);
        assert_eq!(
            fields(&d),
            [("spec.extraOvdcNetworks[0]", Reason::NotFound)]
        );
    }

    #[test]
    fn provisioned_update_compares_mapped_lists() {
        let mut r = request(Some("zone-a"), &["storage"]);
        r.operation = Operation::Update;
        r.machine.provider_id = Some("vmware-cloud-director://urn:vcloud:vm:1".into());
        let mut old = r.machine.clone();
        old.extra_ovdc_networks = vec!["storage-net-a".into()];
        r.old_machine = Some(old);
        assert!(evaluate_request(&r).allowed);
        r.machine.extra_ovdc_networks.push("workload".into());
        let d = evaluate_request(&r);
        assert_eq!(fields(&d), [("spec.extraOvdcNetworks", Reason::Forbidden)]);
    }

    #[test]
    fn null_settings_are_plain_capvcd() {
        let mut r = request(Some("zone-a"), &["storage-net"]);
        r.settings = Value::Null;
        assert_eq!(evaluate_request(&r), capvcd::evaluate(&r));
    }

    #[test]
    fn settings_are_checked() {
        let err = |v: Value| Settings::parse(&v).unwrap_err();
        assert!(err(json!({})).contains("settings map no networks"));
        assert!(err(json!({"zone": {}})).contains("unknown field `zone`"));
        assert!(err(json!({"zones": {"zone-a": {}}})).starts_with("zones.zone-a: maps no"));
        assert!(err(json!({"zones": {"zone-a": {"storage": 7}}}))
            .starts_with("zones.zone-a.storage: must be an org VDC network name"));
        assert!(
            err(json!({"zones": {"zone-a": {"storage": "storage-net-a ", }}}))
                .starts_with("zones.zone-a.storage: network name")
        );
        assert!(
            err(json!({"zones": {"zone-a": {"storage": "net-a", "backup": "net-a"}}}))
                .contains("backup and storage both map to \"net-a\"")
        );
        assert!(err(
            json!({"zones": {"zone-a": {"storage-net": "storage-net-a"}},
                           "default": {"storage": "storage-net"}})
        )
        .contains("\"storage-net\" is a logical name"));
        assert!(err(json!({"zones": ["zone-a"]}))
            .contains("zones: invalid type: sequence, expected a map"));
        assert!(err(json!({"default": "storage-net"})).contains("default: invalid type: string"));
        assert!(
            err(json!({"default": {"storage": "storage-net"}, "capvcd": {"maxNics": 0}}))
                .starts_with("capvcd: maxNics")
        );
        assert!(Settings::parse(&settings()).is_ok());
    }
}
