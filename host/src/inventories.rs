//! The inventories of the org VDCs a deployment serves: one per org VDC, named by the VDC as a
//! VCDCluster names it (`spec.ovdc`, or a zone's `ovdc`), and a default for every VDC without
//! one of its own. A machine is judged against the inventory of its cluster's org VDC; the
//! request still carries one inventory, the machine's, so ABI v1 does not change.
//!
//! | the machine's cluster | its inventory |
//! |---|---|
//! | single-zone, `spec.ovdc` with an inventory | that VDC's |
//! | multi-zone, `spec.failureDomain` naming a zone whose `ovdc` has one | that zone's VDC's |
//! | multi-zone, no failure domain (CAPVCD picks a zone) | the networks of every zone's VDC, merged (the first zone's entry of a name kept) |
//! | not known, or a VDC without an inventory | the default, if any |
//!
//! VDCs are matched by name: the request's cluster carries `spec.ovdc`, not `spec.site` or
//! `spec.org`, so one deployment serving two sites needs VDC names that differ between them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use nicpolicy_inputs::manifest::{ManifestError, ManifestFile, Object};
use nicpolicy_plugin::{Cluster, Inventory, Machine};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::pools::{Pool, Pools};

/// The inventories of a deployment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inventories {
    /// The inventory of every org VDC without one of its own.
    pub default: Option<Inventory>,
    /// The inventory of each org VDC, by its name.
    pub by_vdc: BTreeMap<String, Inventory>,
    /// The org VDCs whose file is not written yet ([`Missing::UseDefault`]): they have the
    /// default until it is.
    pub not_written: Vec<String>,
    /// The static pools the same files count ([`crate::pools`]).
    pub pools: Pools,
}

/// What an org VDC's inventory file that does not exist is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missing {
    /// An error, as any file the configuration names.
    Refused,
    /// Not written yet (the controller refreshes it from Cloud Director): that VDC has the
    /// default until it is.
    UseDefault,
}

/// Which inventory a machine was given, for messages and reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Chosen<'a> {
    /// Its org VDC's.
    Vdc(&'a str),
    /// The networks of several VDCs, merged (a multi-zone machine without a failure domain).
    Zones(Vec<&'a str>),
    /// The default.
    Default,
    /// None: no default and no inventory of its VDC.
    None,
}

impl Inventories {
    /// One inventory for every VDC (or none).
    pub fn single(default: Option<Inventory>) -> Inventories {
        Inventories {
            default,
            ..Inventories::default()
        }
    }

    /// Reads the default inventory file and each VDC's; a VDC's file that does not exist is
    /// as `missing` says.
    ///
    /// # Errors
    /// The first file that cannot be read or is not an inventory (named with its path).
    pub fn read(
        default: Option<&Path>,
        by_vdc: &BTreeMap<String, PathBuf>,
        missing: Missing,
    ) -> Result<Inventories, ManifestError> {
        let mut inventories = Inventories::default();
        if let Some(path) = default {
            let (inventory, pools) = read_file(path)?;
            inventories.default = Some(inventory);
            inventories.pools.default = pools;
        }
        for (vdc, path) in by_vdc {
            if missing == Missing::UseDefault && !path.exists() {
                inventories.not_written.push(vdc.clone());
                continue;
            }
            let (inventory, pools) = read_file(path)?;
            inventories.by_vdc.insert(vdc.clone(), inventory);
            inventories.pools.by_vdc.insert(vdc.clone(), pools);
        }
        Ok(inventories)
    }

    /// Whether there is no inventory at all.
    pub fn is_empty(&self) -> bool {
        self.default.is_none() && self.by_vdc.is_empty()
    }

    /// The org VDCs `machine` of `cluster` may be built in (its cluster's, or its zone's; every
    /// zone's without a failure domain); empty when its cluster is not known.
    pub fn vdcs_of<'a>(cluster: Option<&'a Cluster>, machine: &Machine) -> Vec<&'a str> {
        let Some(cluster) = cluster else {
            return Vec::new();
        };
        if !cluster.is_multi_zone() {
            return [cluster.ovdc.as_str()]
                .into_iter()
                .filter(|v| !v.is_empty())
                .collect();
        }
        match machine.failure_domain.as_deref() {
            Some(domain) => cluster
                .zones
                .iter()
                .filter(|z| z.name == domain && !z.ovdc.is_empty())
                .map(|z| z.ovdc.as_str())
                .take(1)
                .collect(),
            None => {
                let mut vdcs: Vec<&str> = Vec::new();
                for zone in &cluster.zones {
                    if !zone.ovdc.is_empty() && !vdcs.contains(&zone.ovdc.as_str()) {
                        vdcs.push(zone.ovdc.as_str());
                    }
                }
                vdcs
            }
        }
    }

    /// Which inventory `machine` of `cluster` is judged against (see the module documentation).
    pub fn choose<'a>(&self, cluster: Option<&'a Cluster>, machine: &Machine) -> Chosen<'a> {
        let known: Vec<&str> = Inventories::vdcs_of(cluster, machine)
            .into_iter()
            .filter(|vdc| self.by_vdc.contains_key(*vdc))
            .collect();
        match known.as_slice() {
            [] if self.default.is_some() => Chosen::Default,
            [] => Chosen::None,
            [one] => Chosen::Vdc(one),
            _ => Chosen::Zones(known),
        }
    }

    /// The inventory `machine` of `cluster` is judged against, as the request carries it.
    pub fn for_machine(&self, cluster: Option<&Cluster>, machine: &Machine) -> Option<Inventory> {
        match self.choose(cluster, machine) {
            Chosen::Vdc(vdc) => self.by_vdc.get(vdc).cloned(),
            Chosen::Zones(vdcs) => {
                let mut merged = Inventory::default();
                for vdc in vdcs {
                    for network in self.by_vdc.get(vdc).into_iter().flat_map(|i| &i.networks) {
                        if merged.networks.iter().all(|n| n.name != network.name) {
                            merged.networks.push(network.clone());
                        }
                    }
                }
                Some(merged)
            }
            Chosen::Default => self.default.clone(),
            Chosen::None => None,
        }
    }

    /// Every inventory: the default first, then each VDC's by name.
    pub fn all(&self) -> impl Iterator<Item = &Inventory> {
        self.default.iter().chain(self.by_vdc.values())
    }
}

/// The inventory file at `path`, read once: its inventory and the pools its networks count.
fn read_file(path: &Path) -> Result<(Inventory, BTreeMap<String, Pool>), ManifestError> {
    let file = ManifestFile::read(path)?;
    let inventory = file.inventory()?;
    Ok((inventory, pools_of(&file)?))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CountedNetwork {
    name: String,
    #[serde(default)]
    total_ip_count: Option<u64>,
    #[serde(default)]
    used_ip_count: Option<u64>,
}

/// The pools of inventory `file` whose networks carry both counts, by network name.
///
/// # Errors
/// A count that is not a whole number (named with its path), or a network that uses more than
/// it has.
pub fn pools_of(file: &ManifestFile) -> Result<BTreeMap<String, Pool>, ManifestError> {
    let mut pools = BTreeMap::new();
    members(file, |object, i, network: CountedNetwork| {
        if let (Some(total), Some(used)) = (network.total_ip_count, network.used_ip_count) {
            if used > total {
                return Err(file.field_error(
                    object,
                    &format!("networks[{i}].usedIpCount"),
                    format!("{used} is more than totalIpCount {total}"),
                ));
            }
            pools.insert(network.name, Pool { total, used });
        }
        Ok(())
    })?;
    Ok(pools)
}

#[derive(Deserialize)]
struct Members<T> {
    #[serde(default = "Vec::new")]
    networks: Vec<T>,
}

/// Reads each network of inventory `file` as `T`, the members a host-side reader wants of it
/// (the guest's, the pool counts: never sent to policies), and hands each to `each` with its
/// document and index.
///
/// # Errors
/// A member has the wrong type (named with its path), or `each`'s.
pub fn members<T: DeserializeOwned>(
    file: &ManifestFile,
    mut each: impl FnMut(&Object, usize, T) -> Result<(), ManifestError>,
) -> Result<(), ManifestError> {
    for object in &file.objects {
        let members: Members<T> = serde_path_to_error::deserialize(&object.value)
            .map_err(|err| file.field_error(object, &err.path().to_string(), err.inner()))?;
        for (i, member) in members.networks.into_iter().enumerate() {
            each(object, i, member)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nicpolicy_plugin::{Network, Zone};

    fn inventory(names: &[&str]) -> Inventory {
        Inventory {
            networks: names.iter().map(|n| Network::named(*n)).collect(),
        }
    }

    fn names(inventory: Option<Inventory>) -> Vec<String> {
        inventory
            .map(|i| i.networks.into_iter().map(|n| n.name).collect())
            .unwrap_or_default()
    }

    fn inventories() -> Inventories {
        Inventories {
            default: Some(inventory(&["mgmt-net"])),
            by_vdc: BTreeMap::from([
                (
                    "eu1-ovdc-prod".to_string(),
                    inventory(&["mgmt-net", "storage-net"]),
                ),
                (
                    "eu1-ovdc-az-b".to_string(),
                    inventory(&["mgmt-net-b", "storage-net-b"]),
                ),
                (
                    "eu1-ovdc-az-c".to_string(),
                    inventory(&["mgmt-net-c", "storage-net-b"]),
                ),
            ]),
            ..Inventories::default()
        }
    }

    fn single(ovdc: &str) -> Cluster {
        Cluster {
            ovdc: ovdc.into(),
            ovdc_network: "mgmt-net".into(),
            ..Cluster::unknown("prod-eu1", "prod-eu1")
        }
    }

    fn zoned() -> Cluster {
        let zone = |name: &str, ovdc: &str| Zone {
            name: name.into(),
            ovdc: ovdc.into(),
            ovdc_network_name: format!("mgmt-{name}"),
            control_plane_zone: true,
        };
        Cluster {
            zone_topology: Some("DCGroup".into()),
            zones: vec![
                zone("zone-a", "eu1-ovdc-az-a"),
                zone("zone-b", "eu1-ovdc-az-b"),
                zone("zone-c", "eu1-ovdc-az-c"),
            ],
            ..Cluster::unknown("prod-eu1", "prod-eu1")
        }
    }

    fn machine(failure_domain: Option<&str>) -> Machine {
        let mut machine = nicpolicy_plugin::testing::worker(&[]).machine;
        machine.failure_domain = failure_domain.map(str::to_string);
        machine
    }

    #[test]
    fn a_machine_gets_its_vdcs_inventory_or_the_default() {
        let all = inventories();
        let worker = machine(None);
        let prod = single("eu1-ovdc-prod");
        assert_eq!(
            all.choose(Some(&prod), &worker),
            Chosen::Vdc("eu1-ovdc-prod")
        );
        assert_eq!(
            names(all.for_machine(Some(&prod), &worker)),
            ["mgmt-net", "storage-net"]
        );
        // A VDC without an inventory, and a cluster not known: the default.
        let stage = single("eu1-ovdc-stage");
        assert_eq!(all.choose(Some(&stage), &worker), Chosen::Default);
        assert_eq!(all.choose(None, &worker), Chosen::Default);
        assert_eq!(names(all.for_machine(None, &worker)), ["mgmt-net"]);
        // Without a default: none.
        let no_default = Inventories {
            default: None,
            ..inventories()
        };
        assert_eq!(no_default.choose(Some(&stage), &worker), Chosen::None);
        assert_eq!(no_default.for_machine(Some(&stage), &worker), None);
    }

    #[test]
    fn a_zone_machine_gets_its_zones_vdc_and_one_without_a_zone_every_zones() {
        let all = inventories();
        let cluster = zoned();
        let in_b = machine(Some("zone-b"));
        assert_eq!(
            all.choose(Some(&cluster), &in_b),
            Chosen::Vdc("eu1-ovdc-az-b")
        );
        // zone-a's VDC has no inventory: the default.
        assert_eq!(
            all.choose(Some(&cluster), &machine(Some("zone-a"))),
            Chosen::Default
        );
        // No failure domain: CAPVCD may put it in any zone, so the zones' networks merged.
        let anywhere = machine(None);
        assert_eq!(
            all.choose(Some(&cluster), &anywhere),
            Chosen::Zones(vec!["eu1-ovdc-az-b", "eu1-ovdc-az-c"])
        );
        assert_eq!(
            names(all.for_machine(Some(&cluster), &anywhere)),
            ["mgmt-net-b", "storage-net-b", "mgmt-net-c"]
        );
    }

    #[test]
    fn a_vdc_file_not_written_yet_leaves_its_vdc_on_the_default_only_when_allowed() {
        let dir =
            std::env::temp_dir().join(format!("nicpolicy-inventories-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let default = dir.join("default.yaml");
        std::fs::write(&default, "networks:\n  - name: mgmt-net\n").unwrap();
        let by_vdc = BTreeMap::from([(
            "eu1-ovdc-prod".to_string(),
            dir.join("not-yet/eu1-ovdc-prod.yaml"),
        )]);
        let read = Inventories::read(Some(&default), &by_vdc, Missing::UseDefault).unwrap();
        assert_eq!(read.not_written, ["eu1-ovdc-prod"]);
        assert!(read.by_vdc.is_empty());
        let refused = Inventories::read(Some(&default), &by_vdc, Missing::Refused).unwrap_err();
        assert!(
            refused.to_string().contains("eu1-ovdc-prod.yaml"),
            "{refused}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
