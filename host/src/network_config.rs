//! The guest side of a NIC plan: cloud-init network-config version 2 for a multi-homed node,
//! and the kubelet's node IP.
//!
//! Cloud Director's guest customization gives the gateway and DNS servers to the primary NIC
//! only, and CAPVCD's cloud-init path writes no network config. A node on several networks
//! needs exactly one default route (on the primary, whose address the cloud provider reports
//! as the node's InternalIP), routes, DNS and MTU per network, and each NIC found by its MAC
//! address (interface names depend on PCI slots). [`render`] writes that from the plan, the VM's
//! `NetworkConnectionSection` as Cloud Director returns it (MACs and `POOL` addresses exist only
//! once the NICs do, [`crate::vcd::parse_section`]), and the inventory.
//!
//! What each NIC gets:
//!
//! | plan | `ethernets.nic<i>` |
//! |---|---|
//! | every connected NIC | `match: {macaddress: <lower case>}`, `set-name: eth<i>`, `mtu` of its network |
//! | `POOL` or `MANUAL` | `addresses: [<ip>/<prefixLength>]`, `dhcp4: false` |
//! | `DHCP` | `dhcp4: true`; on a NIC other than the primary `dhcp4-overrides: {use-routes: false, use-dns: false}` |
//! | `NONE` | `dhcp4: false`, `optional: true`: no address |
//! | the primary, with a static address | `routes: [{to: 0.0.0.0/0, via: <gateway>}]` (`::/0` for IPv6) and `nameservers` from its network |
//! | every network | its `routes` and, on other NICs than the primary, its `dns`/`dnsSearch` as `nameservers` |
//! | not connected | no entry |
//!
//! `to: 0.0.0.0/0` rather than `default`: cloud-init's networkd renderer refuses `default`.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

use nicpolicy_plugin::{Inventory, IpAllocationMode, Nic, Role};
use serde::{Deserialize, Serialize};

use crate::vcd::VmNics;
use nicpolicy_inputs::manifest::{ManifestError, ManifestFile};

/// What only the guest needs of an org VDC network, read from the same inventory file as the
/// [`Inventory`] (these fields are not sent to policies).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GuestNetwork {
    /// The network's name.
    pub name: String,
    /// MTU of the network's NICs.
    #[serde(default)]
    pub mtu: Option<u32>,
    /// Routes to other subnets through this network's gateways.
    #[serde(default)]
    pub routes: Vec<Route>,
    /// DNS search domains (the servers are the inventory's `dns`).
    #[serde(default)]
    pub dns_search: Vec<String>,
}

/// A route, as cloud-init writes it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub struct Route {
    /// Destination subnet (`10.21.0.0/16`).
    pub to: String,
    /// Next hop.
    pub via: String,
    /// Route metric.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<u32>,
}

/// The guest fields of the inventory file at `path`, by network name.
///
/// # Errors
/// The file cannot be read, or a guest field has the wrong type (named with its path).
pub fn read_guest_networks(path: &Path) -> Result<BTreeMap<String, GuestNetwork>, ManifestError> {
    let file = ManifestFile::read(path)?;
    let mut found = BTreeMap::new();
    crate::inventories::members(&file, |_, _, network: GuestNetwork| {
        found.insert(network.name.clone(), network);
        Ok(())
    })?;
    Ok(found)
}

/// Why a guest config cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The VM's section does not fit the plan.
    #[error("NIC {index}: {problem}")]
    Vm {
        /// The NIC.
        index: u32,
        /// What does not fit.
        problem: String,
    },
    /// The inventory lacks what the config needs.
    #[error("NIC {index} ({network}): {problem}")]
    Inventory {
        /// The NIC.
        index: u32,
        /// Its network.
        network: String,
        /// What is missing.
        problem: String,
    },
}

/// cloud-init network-config version 2.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NetworkConfig {
    /// Always 2.
    pub version: u8,
    /// One entry per connected NIC, `nic<i>`.
    pub ethernets: BTreeMap<String, Ethernet>,
}

/// One `ethernets` entry.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Ethernet {
    /// `macaddress`.
    #[serde(rename = "match")]
    pub matching: Match,
    /// `eth<i>`.
    pub set_name: String,
    /// DHCP for IPv4.
    pub dhcp4: bool,
    /// On a DHCP NIC that is not the primary: take no routes and no DNS from DHCP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dhcp4_overrides: Option<DhcpOverrides>,
    /// Static addresses with their prefix.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
    /// MTU of the network.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// The default route (primary only) and the network's routes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
    /// DNS servers and search domains.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nameservers: Option<Nameservers>,
    /// A NIC without an address: boot does not wait for it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

/// `match`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Match {
    /// Lower-case MAC address.
    pub macaddress: String,
}

/// `dhcp4-overrides`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct DhcpOverrides {
    /// Take routes from DHCP.
    pub use_routes: bool,
    /// Take DNS from DHCP.
    pub use_dns: bool,
}

/// `nameservers`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Nameservers {
    /// Servers.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
    /// Search domains.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub search: Vec<String>,
}

/// The guest config of one VM.
#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    /// The network config.
    pub config: NetworkConfig,
    /// The primary NIC's address, the kubelet's `node-ip`; `None` when it is known only at boot
    /// (DHCP).
    pub node_ip: Option<String>,
}

/// The network config of the VM whose NICs Cloud Director reports as `vm`, built to `plan` (the
/// NICs as the provisioner builds them: [`crate::vcd::built_nics`]), with the networks' details
/// from `inventory` and `guest` (see the module documentation).
///
/// # Errors
/// The VM does not have a planned NIC or has it on another network or in another mode, a NIC
/// with a static address has none on the VM and in the plan, or the inventory does not give a
/// static NIC's network its prefix length, or the primary's gateway.
pub fn render(
    plan: &[Nic],
    vm: &VmNics,
    inventory: &Inventory,
    guest: &BTreeMap<String, GuestNetwork>,
) -> Result<Rendered, RenderError> {
    let networks = inventory.index();
    let mut ethernets = BTreeMap::new();
    let mut node_ip = None;
    for nic in plan.iter().filter(|nic| nic.connected) {
        let index = nic.index;
        let on_vm = vm
            .nics
            .iter()
            .find(|v| v.nic.index == index)
            .ok_or_else(|| RenderError::Vm {
                index,
                problem: format!(
                    "the VM has no NIC {index}; the plan puts {} there",
                    nic.network
                ),
            })?;
        if on_vm.nic.network != nic.network {
            return Err(RenderError::Vm {
                index,
                problem: format!(
                    "the VM's NIC {index} is on {}, the plan's on {}: the section is not of a VM \
                     built to this plan",
                    on_vm.nic.network, nic.network
                ),
            });
        }
        // The guest is configured for the NIC as built: a VM in another mode is not one built
        // by the provisioner the plan was built for (a profile that is not the site's build).
        if on_vm.nic.ip_allocation_mode != nic.ip_allocation_mode {
            return Err(RenderError::Vm {
                index,
                problem: format!(
                    "the VM's NIC {index} is {}, built to the plan it is {}: is the provisioner \
                     (--provisioner) the site's build?",
                    on_vm.nic.ip_allocation_mode.as_str(),
                    nic.ip_allocation_mode.as_str()
                ),
            });
        }
        let mac = on_vm.mac_address.clone().ok_or_else(|| RenderError::Vm {
            index,
            problem: "the VM's section gives no MACAddress (read it with GET after the NICs \
                      exist)"
                .to_string(),
        })?;
        let inventory_error = |problem: String| RenderError::Inventory {
            index,
            network: nic.network.clone(),
            problem,
        };
        let network = networks.get(nic.network.as_str()).copied();
        let extra = guest.get(&nic.network);
        let mut entry = Ethernet {
            matching: Match {
                macaddress: mac.to_ascii_lowercase(),
            },
            set_name: format!("eth{index}"),
            dhcp4: false,
            dhcp4_overrides: None,
            addresses: Vec::new(),
            mtu: extra.and_then(|g| g.mtu),
            routes: Vec::new(),
            nameservers: None,
            optional: false,
        };
        match nic.ip_allocation_mode {
            IpAllocationMode::Pool | IpAllocationMode::Manual => {
                let address = if nic.ip_allocation_mode == IpAllocationMode::Manual {
                    nic.ip_address
                        .clone()
                        .or_else(|| on_vm.nic.ip_address.clone())
                } else {
                    on_vm.nic.ip_address.clone()
                }
                .ok_or_else(|| RenderError::Vm {
                    index,
                    problem: format!(
                        "{} without an address on the VM yet (Cloud Director assigns it when the \
                         NIC is created)",
                        nic.ip_allocation_mode.as_str()
                    ),
                })?;
                let prefix = network.and_then(|n| n.prefix_length).ok_or_else(|| {
                    inventory_error(
                        "the inventory gives the network no prefixLength for its static address"
                            .to_string(),
                    )
                })?;
                entry.addresses.push(format!("{address}/{prefix}"));
                if nic.primary {
                    let gateway = network.and_then(|n| n.gateway.clone()).ok_or_else(|| {
                        inventory_error(
                            "the inventory gives the primary network no gateway for the default \
                             route"
                                .to_string(),
                        )
                    })?;
                    let default = match gateway.parse::<IpAddr>() {
                        Ok(IpAddr::V6(_)) => "::/0",
                        _ => "0.0.0.0/0",
                    };
                    entry.routes.push(Route {
                        to: default.to_string(),
                        via: gateway,
                        metric: None,
                    });
                    node_ip = Some(address);
                }
            }
            IpAllocationMode::Dhcp => {
                entry.dhcp4 = true;
                if !nic.primary {
                    entry.dhcp4_overrides = Some(DhcpOverrides {
                        use_routes: false,
                        use_dns: false,
                    });
                }
            }
            IpAllocationMode::None => entry.optional = true,
        }
        if let Some(extra) = extra {
            entry.routes.extend(extra.routes.iter().cloned());
        }
        // Each NIC takes the DNS its network names (a DHCP NIC other than the primary takes
        // none from DHCP).
        let servers = network.map(|n| n.dns.clone()).unwrap_or_default();
        let search = extra.map(|g| g.dns_search.clone()).unwrap_or_default();
        if !servers.is_empty() || !search.is_empty() {
            entry.nameservers = Some(Nameservers {
                addresses: servers,
                search,
            });
        }
        ethernets.insert(format!("nic{index}"), entry);
    }
    Ok(Rendered {
        config: NetworkConfig {
            version: 2,
            ethernets,
        },
        node_ip,
    })
}

/// The Cluster API bootstrap versions whose `kubeletExtraArgs` shapes differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootstrapVersion {
    /// `bootstrap.cluster.x-k8s.io/v1beta1`: `kubeletExtraArgs` is a map.
    V1beta1,
    /// `bootstrap.cluster.x-k8s.io/v1beta2`: a list of `{name, value}`.
    V1beta2,
}

/// A merge patch that sets the kubelet's `node-ip` to `ip` in the bootstrap config of a machine
/// of `role`: `KubeadmConfig` (`spec.joinConfiguration`) for a worker, `KubeadmControlPlane`
/// (`spec.kubeadmConfigSpec`, init and join) for the control plane, in `version`'s shape.
pub fn node_ip_patch(role: Role, ip: &str, version: BootstrapVersion) -> String {
    let args = match version {
        BootstrapVersion::V1beta1 => format!("kubeletExtraArgs:\n{{indent}}  node-ip: \"{ip}\"\n"),
        BootstrapVersion::V1beta2 => format!(
            "kubeletExtraArgs:\n{{indent}}  - name: node-ip\n{{indent}}    value: \"{ip}\"\n"
        ),
    };
    let api = match version {
        BootstrapVersion::V1beta1 => "v1beta1",
        BootstrapVersion::V1beta2 => "v1beta2",
    };
    let registration = |indent: &str| {
        format!("{indent}nodeRegistration:\n{indent}  ")
            + &args.replace("{indent}", &format!("{indent}  "))
    };
    match role {
        Role::Worker => format!(
            "apiVersion: bootstrap.cluster.x-k8s.io/{api}\nkind: KubeadmConfig\nspec:\n  \
             joinConfiguration:\n{}",
            registration("    ")
        ),
        Role::ControlPlane => format!(
            "apiVersion: controlplane.cluster.x-k8s.io/{api}\nkind: KubeadmControlPlane\nspec:\n  \
             kubeadmConfigSpec:\n    initConfiguration:\n{}    joinConfiguration:\n{}",
            registration("      "),
            registration("      ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vcd::{capvcd_nics, VmNic};
    use nicpolicy_plugin::Network;

    fn inventory() -> Inventory {
        let network = |name: &str, gateway: &str, prefix: u8, dns: &[&str]| Network {
            gateway: Some(gateway.into()),
            prefix_length: Some(prefix),
            dns: dns.iter().map(|s| s.to_string()).collect(),
            ..Network::named(name)
        };
        Inventory {
            networks: vec![
                network("mgmt-net", "10.10.0.1", 24, &["10.10.0.10"]),
                network("storage-net", "10.20.0.1", 24, &[]),
                network("workload-net", "10.30.0.1", 22, &[]),
            ],
        }
    }

    fn vm(plan: &[Nic], addresses: &[Option<&str>]) -> VmNics {
        VmNics {
            primary_index: Some(0),
            nics: plan
                .iter()
                .zip(addresses)
                .map(|(nic, address)| VmNic {
                    nic: Nic {
                        ip_address: address.map(str::to_string),
                        ..nic.clone()
                    },
                    mac_address: Some(format!("00:50:56:01:AB:0{}", nic.index)),
                })
                .collect(),
        }
    }

    fn plan() -> Vec<Nic> {
        let mut plan = capvcd_nics("mgmt-net", &["storage-net".into(), "workload-net".into()]);
        plan[2].ip_allocation_mode = IpAllocationMode::Dhcp;
        plan
    }

    #[test]
    fn one_default_route_on_the_primary_and_each_nic_by_its_mac() {
        let plan = plan();
        let vm = vm(&plan, &[Some("10.10.0.23"), Some("10.20.0.31"), None]);
        let mut guest = BTreeMap::new();
        guest.insert(
            "storage-net".to_string(),
            GuestNetwork {
                name: "storage-net".into(),
                mtu: Some(9000),
                routes: vec![Route {
                    to: "10.21.0.0/16".into(),
                    via: "10.20.0.1".into(),
                    metric: None,
                }],
                dns_search: Vec::new(),
            },
        );
        let rendered = render(&plan, &vm, &inventory(), &guest).expect("renders");
        assert_eq!(rendered.node_ip.as_deref(), Some("10.10.0.23"));
        let e = &rendered.config.ethernets;
        assert_eq!(e["nic0"].matching.macaddress, "00:50:56:01:ab:00");
        assert_eq!(e["nic0"].addresses, ["10.10.0.23/24"]);
        let defaults: Vec<&str> = e
            .values()
            .flat_map(|n| &n.routes)
            .filter(|r| r.to == "0.0.0.0/0")
            .map(|r| r.via.as_str())
            .collect();
        assert_eq!(defaults, ["10.10.0.1"]);
        assert_eq!(e["nic1"].mtu, Some(9000));
        assert_eq!(e["nic1"].routes[0].to, "10.21.0.0/16");
        assert!(e["nic2"].dhcp4);
        assert_eq!(
            e["nic2"].dhcp4_overrides,
            Some(DhcpOverrides {
                use_routes: false,
                use_dns: false
            })
        );
        assert_eq!(
            e["nic0"].nameservers.as_ref().map(|n| n.addresses.clone()),
            Some(vec!["10.10.0.10".to_string()])
        );
    }

    #[test]
    fn a_section_of_another_vm_or_without_addresses_is_refused() {
        let plan = plan();
        let mut other = vm(&plan, &[Some("10.10.0.23"), Some("10.20.0.31"), None]);
        other.nics[1].nic.network = "backup-net".into();
        let err = render(&plan, &other, &inventory(), &BTreeMap::new()).unwrap_err();
        assert!(err.to_string().contains("is on backup-net"), "{err}");
        let mut other_mode = vm(&plan, &[Some("10.10.0.23"), Some("10.20.0.31"), None]);
        other_mode.nics[1].nic.ip_allocation_mode = IpAllocationMode::Dhcp;
        let err = render(&plan, &other_mode, &inventory(), &BTreeMap::new()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "NIC 1: the VM's NIC 1 is DHCP, built to the plan it is POOL: is the provisioner \
             (--provisioner) the site's build?"
        );
        let unbuilt = vm(&plan, &[None, None, None]);
        let err = render(&plan, &unbuilt, &inventory(), &BTreeMap::new()).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("NIC 0: POOL without an address"),
            "{err}"
        );
    }

    #[test]
    fn node_ip_patches_follow_the_bootstrap_version() {
        let v1 = node_ip_patch(Role::Worker, "10.10.0.23", BootstrapVersion::V1beta1);
        assert_eq!(
            v1,
            "apiVersion: bootstrap.cluster.x-k8s.io/v1beta1\nkind: KubeadmConfig\nspec:\n  \
             joinConfiguration:\n    nodeRegistration:\n      kubeletExtraArgs:\n        \
             node-ip: \"10.10.0.23\"\n"
        );
        let v2 = node_ip_patch(Role::ControlPlane, "10.10.0.5", BootstrapVersion::V1beta2);
        let parsed: serde_json::Value = serde_yaml_ng::from_str(&v2).expect("YAML");
        let args = &parsed["spec"]["kubeadmConfigSpec"]["joinConfiguration"]["nodeRegistration"]
            ["kubeletExtraArgs"];
        assert_eq!(args[0]["name"], "node-ip");
        assert_eq!(args[0]["value"], "10.10.0.5");
        assert!(parsed["spec"]["kubeadmConfigSpec"]["initConfiguration"].is_object());
    }
}
