//! The Cloud Director side of a NIC plan: the `NetworkConnectionSection` a provisioner PUTs for
//! it, what stock CAPVCD sends instead, and a VM's section read back (with its MAC addresses) to
//! compare with the plan.
//!
//! The section is `application/vnd.vmware.vcloud.networkConnectionSection+xml`, whose schema
//! (`NetworkConnectionSectionType`, vApp.xsd) is an ordered sequence: `ovf:Info`,
//! `PrimaryNetworkConnectionIndex`, the `NetworkConnection`s, then `Link`s. Each
//! `NetworkConnection` names its network in the `network` attribute, and its children come in the
//! schema's order: `NetworkConnectionIndex`, `IpAddress`, (`IpType`, secondary and external
//! addresses), `IsConnected`, `MACAddress`, `IpAddressAllocationMode`, (the secondary mode),
//! `NetworkAdapterType`. [`render_section`] writes what a PUT carries: no MAC (Cloud Director
//! assigns it), an `IpAddress` only for `MANUAL`. [`parse_section`] reads what a GET returns,
//! `Link`s and elements it does not know included, and ignores those.

use std::fmt::Write as _;

use nicpolicy_plugin::provisioner::{PlanField, Provisioner};
use nicpolicy_plugin::{AdapterType, IpAllocationMode, Nic};
use quick_xml::escape::{escape, resolve_predefined_entity};
use quick_xml::events::Event;
use quick_xml::{Reader, XmlVersion};
use serde::Serialize;

/// The media type of the section, for `Content-Type` on a PUT.
pub const MEDIA_TYPE: &str = "application/vnd.vmware.vcloud.networkConnectionSection+xml";
/// The vCloud API namespace.
pub const VCLOUD_NAMESPACE: &str = "http://www.vmware.com/vcloud/v1.5";
/// The OVF envelope namespace (`ovf:Info`, `ovf:required`).
pub const OVF_NAMESPACE: &str = "http://schemas.dmtf.org/ovf/envelope/1";

/// The body of `PUT <vm>/networkConnectionSection/` that gives a VM the NICs `nics`, in index
/// order; the primary is the NIC marked `primary` (the first, when none is).
pub fn render_section(nics: &[Nic]) -> String {
    let mut nics: Vec<&Nic> = nics.iter().collect();
    nics.sort_by_key(|nic| nic.index);
    let primary = nics
        .iter()
        .find(|nic| nic.primary)
        .or(nics.first())
        .map_or(0, |nic| nic.index);
    let mut out = String::new();
    out.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<NetworkConnectionSection xmlns=\"{VCLOUD_NAMESPACE}\" xmlns:ovf=\"{OVF_NAMESPACE}\" \
         type=\"{MEDIA_TYPE}\" ovf:required=\"false\">"
    );
    out.push_str("  <ovf:Info>Specifies the available VM network connections</ovf:Info>\n");
    let _ = writeln!(
        out,
        "  <PrimaryNetworkConnectionIndex>{primary}</PrimaryNetworkConnectionIndex>"
    );
    for nic in nics {
        let _ = writeln!(
            out,
            "  <NetworkConnection network=\"{}\" needsCustomization=\"false\">",
            escape(nic.network.as_str())
        );
        let _ = writeln!(
            out,
            "    <NetworkConnectionIndex>{}</NetworkConnectionIndex>",
            nic.index
        );
        if nic.ip_allocation_mode == IpAllocationMode::Manual {
            if let Some(address) = &nic.ip_address {
                let _ = writeln!(
                    out,
                    "    <IpAddress>{}</IpAddress>",
                    escape(address.as_str())
                );
            }
        }
        let _ = writeln!(out, "    <IsConnected>{}</IsConnected>", nic.connected);
        let _ = writeln!(
            out,
            "    <IpAddressAllocationMode>{}</IpAddressAllocationMode>",
            nic.ip_allocation_mode.as_str()
        );
        let _ = writeln!(
            out,
            "    <NetworkAdapterType>{}</NetworkAdapterType>",
            nic.adapter_type.as_str()
        );
        out.push_str("  </NetworkConnection>\n");
    }
    out.push_str("</NetworkConnectionSection>\n");
    out
}

/// The NICs stock CAPVCD gives a new VM of a machine whose primary network is `primary` and
/// whose `spec.extraOvdcNetworks` is `extras`: `[primary] + extras`, numbered `0..n-1`, NIC 0
/// the primary, each created connected, `POOL`, `VMXNET3`, without an address of its own (see
/// [`nicpolicy_plugin::provisioner`]).
pub fn capvcd_nics(primary: &str, extras: &[String]) -> Vec<Nic> {
    std::iter::once(primary)
        .chain(extras.iter().map(String::as_str))
        .enumerate()
        .map(|(i, network)| Nic::capvcd(u32::try_from(i).unwrap_or(u32::MAX), network))
        .collect()
}

/// The NICs `provisioner` builds for `plan` on a machine whose `extraOvdcNetworks` is
/// `extras`: its NICs on the primary network (taken from the plan's NIC 0) and the extras
/// ([`capvcd_nics`]' order), each built from the plan's NIC at that index when it is on the
/// same network ([`Provisioner::build`]: the fields it applies taken from the plan, the others
/// as its profile builds them), as the profile builds an unplanned NIC otherwise.
pub fn built_nics(provisioner: &Provisioner, plan: &[Nic], extras: &[String]) -> Vec<Nic> {
    let Some(primary) = plan.iter().find(|nic| nic.index == 0) else {
        return Vec::new();
    };
    if provisioner.applies(PlanField::Network) {
        // A provisioner that attaches the plan's networks builds the plan's NICs.
        return plan.iter().map(|nic| provisioner.build(nic)).collect();
    }
    capvcd_nics(&primary.network, extras)
        .into_iter()
        .map(
            |stock| match plan.iter().find(|nic| nic.index == stock.index) {
                Some(nic) if nic.network == stock.network => provisioner.build(nic),
                _ => provisioner.build_unplanned(stock.index, &stock.network),
            },
        )
        .collect()
}

/// A VM's network connections as Cloud Director returns them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VmNics {
    /// `PrimaryNetworkConnectionIndex`, when the section has one.
    pub primary_index: Option<u32>,
    /// The connections in the section's order, each as a plan's [`Nic`] (primary set from
    /// `PrimaryNetworkConnectionIndex`, `ipAddress` whatever the mode) with its MAC address.
    pub nics: Vec<VmNic>,
}

/// One network connection of a VM.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VmNic {
    /// The connection in the plan's terms.
    #[serde(flatten)]
    pub nic: Nic,
    /// `MACAddress`, lower case (as guests and cloud-init match it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mac_address: Option<String>,
}

/// Why a section could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SectionError {
    /// Not well-formed XML.
    #[error("not well-formed XML at byte {at}: {message}")]
    Xml {
        /// Byte offset of the error.
        at: u64,
        /// What the parser said.
        message: String,
    },
    /// Not a `NetworkConnectionSection`.
    #[error("the document is a <{0}>, not a <NetworkConnectionSection>")]
    NotASection(String),
    /// The file could not be read.
    #[error("cannot read: {0}")]
    Read(std::io::Error),
    /// The file is larger than any section.
    #[error(
        "{at_least} bytes, over the {SECTION_LIMIT} bytes a NetworkConnectionSection may have"
    )]
    TooLarge {
        /// Its size as far as known.
        at_least: u64,
    },
    /// The file is not UTF-8 text.
    #[error("not UTF-8 text")]
    NotText,
    /// A value the plan's types cannot hold.
    #[error("NetworkConnection[{connection}] ({network:?}).{field}: {problem}")]
    Value {
        /// Position of the connection in the section, from 0.
        connection: usize,
        /// Its `network` attribute.
        network: String,
        /// The element.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
}

/// One connection while it is read.
#[derive(Default)]
struct Reading {
    network: String,
    index: Option<u32>,
    ip_address: Option<String>,
    connected: Option<bool>,
    mac: Option<String>,
    mode: Option<IpAllocationMode>,
    adapter: Option<AdapterType>,
}

/// Most bytes a saved section may have (ten NICs take a few KiB).
pub const SECTION_LIMIT: u64 = 1 << 20;

/// Reads the section saved in `path` (read to at most [`SECTION_LIMIT`]), as
/// [`parse_section`] does.
///
/// # Errors
/// The file cannot be read, is over the limit or not text, or as for [`parse_section`].
pub fn read_section(path: &std::path::Path) -> Result<VmNics, SectionError> {
    use nicpolicy_inputs::files::{read_at_most, BoundedReadError};
    let bytes = read_at_most(path, SECTION_LIMIT).map_err(|err| match err {
        BoundedReadError::Io(err) => SectionError::Read(err),
        BoundedReadError::Over { at_least } => SectionError::TooLarge { at_least },
    })?;
    let text = String::from_utf8(bytes).map_err(|_| SectionError::NotText)?;
    parse_section(&text)
}

/// Reads a VM's `NetworkConnectionSection` (the body of `GET <vm>/networkConnectionSection/`).
/// Elements it does not use (`Link`, `ExternalIpAddress`, `IpType`, ...) are skipped; a
/// connection without `NetworkConnectionIndex` takes its position, one without
/// `IpAddressAllocationMode` counts as `NONE`, without `IsConnected` as connected, without an
/// adapter type as `VMXNET3` (what Cloud Director defaults to).
///
/// # Errors
/// Malformed XML, another document, or a value the plan's types cannot hold (an adapter type
/// nicpolicy does not plan, an index that is not a number), naming the connection and element.
pub fn parse_section(xml: &str) -> Result<VmNics, SectionError> {
    let mut reader = Reader::from_str(xml);
    reader.config_mut().trim_text(true);
    let mut path: Vec<String> = Vec::new();
    let mut text = String::new();
    let mut primary_index = None;
    let mut readings: Vec<Reading> = Vec::new();
    let xml_error = |reader: &Reader<&[u8]>, err: &dyn std::fmt::Display| SectionError::Xml {
        at: reader.error_position(),
        message: err.to_string(),
    };
    loop {
        let event = reader.read_event().map_err(|e| xml_error(&reader, &e))?;
        match event {
            Event::Start(start) => {
                let name = start.local_name().as_ref().to_string();
                if path.is_empty() && name != "NetworkConnectionSection" {
                    return Err(SectionError::NotASection(name));
                }
                if path.len() == 1 && name == "NetworkConnection" {
                    let mut reading = Reading::default();
                    for attribute in start.attributes() {
                        let attribute = attribute.map_err(|e| xml_error(&reader, &e))?;
                        if attribute.key.local_name().as_ref() == "network" {
                            reading.network = attribute
                                .normalized_value(XmlVersion::Implicit1_0)
                                .map_err(|e| xml_error(&reader, &e))?
                                .into_owned();
                        }
                    }
                    readings.push(reading);
                }
                path.push(name);
                text.clear();
            }
            Event::Empty(start) => {
                let name = start.local_name().as_ref().to_string();
                if path.is_empty() {
                    if name != "NetworkConnectionSection" {
                        return Err(SectionError::NotASection(name));
                    }
                    break;
                }
            }
            Event::Text(content) => text.push_str(&content.xml10_content()),
            Event::CData(content) => text.push_str(&content),
            Event::GeneralRef(reference) => {
                if let Ok(Some(c)) = reference.resolve_char_ref() {
                    text.push(c);
                } else if let Some(s) = resolve_predefined_entity(&reference.xml10_content()) {
                    text.push_str(s);
                }
            }
            Event::End(_) => {
                let Some(name) = path.pop() else { break };
                let value = text.trim().to_string();
                text.clear();
                if path.len() == 1 && name == "PrimaryNetworkConnectionIndex" {
                    primary_index = value.parse().ok();
                }
                if path.len() == 2 && path[1] == "NetworkConnection" {
                    let connection = readings.len().saturating_sub(1);
                    if let Some(reading) = readings.last_mut() {
                        read_field(reading, connection, &name, value)?;
                    }
                }
                if path.is_empty() {
                    break;
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    let nics = readings
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let index = r.index.unwrap_or(u32::try_from(i).unwrap_or(u32::MAX));
            VmNic {
                nic: Nic {
                    index,
                    primary: primary_index == Some(index),
                    network: r.network,
                    ip_allocation_mode: r.mode.unwrap_or(IpAllocationMode::None),
                    ip_address: r.ip_address,
                    adapter_type: r.adapter.unwrap_or(AdapterType::Vmxnet3),
                    connected: r.connected.unwrap_or(true),
                    source: None,
                },
                mac_address: r.mac,
            }
        })
        .collect();
    Ok(VmNics {
        primary_index,
        nics,
    })
}

/// Takes the child `name` of a `NetworkConnection` into `reading`.
fn read_field(
    reading: &mut Reading,
    connection: usize,
    name: &str,
    value: String,
) -> Result<(), SectionError> {
    let invalid = |field: &'static str, problem: String| SectionError::Value {
        connection,
        network: reading.network.clone(),
        field,
        problem,
    };
    match name {
        "NetworkConnectionIndex" => {
            reading.index = Some(value.parse().map_err(|_| {
                invalid(
                    "NetworkConnectionIndex",
                    format!("{value:?} is not an index"),
                )
            })?);
        }
        "IpAddress" if !value.is_empty() => reading.ip_address = Some(value),
        "IsConnected" => {
            reading.connected = Some(match value.as_str() {
                "true" | "1" => true,
                "false" | "0" => false,
                _ => {
                    return Err(invalid(
                        "IsConnected",
                        format!("{value:?} is not true or false"),
                    ))
                }
            });
        }
        "MACAddress" if !value.is_empty() => reading.mac = Some(value.to_ascii_lowercase()),
        "IpAddressAllocationMode" => {
            reading.mode = Some(
                serde_json::from_value(serde_json::Value::String(value.clone())).map_err(|_| {
                    invalid(
                        "IpAddressAllocationMode",
                        format!("{value:?} is not POOL, DHCP, MANUAL or NONE"),
                    )
                })?,
            );
        }
        "NetworkAdapterType" => {
            reading.adapter = Some(
                serde_json::from_value(serde_json::Value::String(value.clone())).map_err(|_| {
                    invalid(
                        "NetworkAdapterType",
                        format!("{value:?} is not an adapter type nicpolicy plans"),
                    )
                })?,
            );
        }
        _ => {}
    }
    Ok(())
}

/// One way a VM's NICs differ from what its provisioner builds for its plan
/// ([`built_nics`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Drift {
    /// A NIC to be built that the VM does not have.
    Missing {
        /// Its index.
        index: u32,
        /// Its network.
        network: String,
    },
    /// A NIC of the VM that is not to be built.
    Unplanned {
        /// Its index on the VM.
        index: u32,
        /// Its network.
        network: String,
    },
    /// A field of a NIC at the same index differs (the network too: another network, or the
    /// same networks in another order).
    Field {
        /// The index.
        index: u32,
        /// Which field.
        field: PlanField,
        /// What the provisioner builds for the plan.
        expected: String,
        /// The VM's.
        found: String,
    },
}

/// A VM's NIC that is not yet what it will be, without differing from it: a `DHCP` NIC whose
/// address is not leased yet. Every build waits for the primary's address before the machine
/// is ready (Deckhouse's without an error, patch `010-handle-dhcp-empty-ip`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pending {
    /// The NIC's index.
    pub index: u32,
    /// Its network.
    pub network: String,
    /// Whether it is the primary, whose address the machine waits for.
    pub primary: bool,
}

impl Pending {
    /// `NIC 0 (mgmt-net): DHCP, no address leased yet`.
    pub fn message(&self) -> String {
        let waits = if self.primary {
            " (the machine is not ready until it is)"
        } else {
            ""
        };
        format!(
            "NIC {} ({}): DHCP, no address leased yet{waits}",
            self.index, self.network
        )
    }
}

impl Drift {
    /// `NIC 1: ipAllocationMode is POOL on the VM, DHCP as built from the plan`.
    pub fn message(&self) -> String {
        match self {
            Drift::Missing { index, network } => {
                format!("NIC {index} ({network}) is to be built but the VM has no NIC {index}")
            }
            Drift::Unplanned { index, network } => {
                format!("the VM has NIC {index} ({network}), which is not to be built")
            }
            Drift::Field {
                index,
                field,
                expected,
                found,
            } => format!(
                "NIC {index}: {} is {found} on the VM, {expected} as built from the plan",
                field.as_str()
            ),
        }
    }
}

/// How `vm` differs from `expected`, the NICs its provisioner builds ([`built_nics`]), NIC by
/// NIC in index order. The address is compared only where one is fixed (`MANUAL`): a `POOL` or
/// `DHCP` address is the VM's to have.
pub fn drift(expected: &[Nic], vm: &VmNics) -> Vec<Drift> {
    let mut found = Vec::new();
    let mut indexes: Vec<u32> = expected
        .iter()
        .map(|n| n.index)
        .chain(vm.nics.iter().map(|n| n.nic.index))
        .collect();
    indexes.sort_unstable();
    indexes.dedup();
    for index in indexes {
        let planned = expected.iter().find(|n| n.index == index);
        let actual = vm
            .nics
            .iter()
            .find(|n| n.nic.index == index)
            .map(|n| &n.nic);
        match (planned, actual) {
            (Some(p), None) => found.push(Drift::Missing {
                index,
                network: p.network.clone(),
            }),
            (None, Some(a)) => found.push(Drift::Unplanned {
                index,
                network: a.network.clone(),
            }),
            (Some(p), Some(a)) => {
                let mut differ = |field: PlanField, expected: String, actual: String| {
                    if expected != actual {
                        found.push(Drift::Field {
                            index,
                            field,
                            expected,
                            found: actual,
                        });
                    }
                };
                differ(PlanField::Network, p.network.clone(), a.network.clone());
                differ(
                    PlanField::Primary,
                    p.primary.to_string(),
                    a.primary.to_string(),
                );
                differ(
                    PlanField::IpAllocationMode,
                    p.ip_allocation_mode.as_str().to_string(),
                    a.ip_allocation_mode.as_str().to_string(),
                );
                if p.ip_allocation_mode == IpAllocationMode::Manual {
                    let none = || "none".to_string();
                    differ(
                        PlanField::IpAddress,
                        p.ip_address.clone().unwrap_or_else(none),
                        a.ip_address.clone().unwrap_or_else(none),
                    );
                }
                differ(
                    PlanField::AdapterType,
                    p.adapter_type.as_str().to_string(),
                    a.adapter_type.as_str().to_string(),
                );
                differ(
                    PlanField::Connected,
                    p.connected.to_string(),
                    a.connected.to_string(),
                );
            }
            (None, None) => {}
        }
    }
    found
}

/// The NICs of `vm` that are [`Pending`]: `DHCP` where `expected` (the NICs its provisioner
/// builds) has `DHCP` too, connected, with no address yet.
pub fn pending(expected: &[Nic], vm: &VmNics) -> Vec<Pending> {
    vm.nics
        .iter()
        .filter(|on_vm| {
            on_vm.nic.ip_allocation_mode == IpAllocationMode::Dhcp
                && on_vm.nic.connected
                && on_vm.nic.ip_address.is_none()
                && expected.iter().any(|nic| {
                    nic.index == on_vm.nic.index
                        && nic.network == on_vm.nic.network
                        && nic.ip_allocation_mode == IpAllocationMode::Dhcp
                })
        })
        .map(|on_vm| Pending {
            index: on_vm.nic.index,
            network: on_vm.nic.network.clone(),
            primary: on_vm.nic.primary,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Vec<Nic> {
        let mut nics = capvcd_nics("mgmt-net", &["storage-net".into(), "workload-net".into()]);
        nics[1].ip_allocation_mode = IpAllocationMode::Manual;
        nics[1].ip_address = Some("10.20.0.50".into());
        nics
    }

    #[test]
    fn a_rendered_section_reads_back_as_the_plan() {
        let xml = render_section(&plan());
        let read = parse_section(&xml).expect("parses");
        assert_eq!(read.primary_index, Some(0));
        let nics: Vec<Nic> = read.nics.into_iter().map(|n| n.nic).collect();
        assert_eq!(nics, plan());
        assert!(drift(&plan(), &parse_section(&xml).unwrap()).is_empty());
    }

    #[test]
    fn children_follow_the_schema_order_and_only_manual_nics_carry_an_address() {
        let xml = render_section(&plan());
        let second = &xml[xml.find("network=\"storage-net\"").unwrap()..];
        let order: Vec<usize> = [
            "<NetworkConnectionIndex>",
            "<IpAddress>",
            "<IsConnected>",
            "<IpAddressAllocationMode>",
            "<NetworkAdapterType>",
        ]
        .iter()
        .map(|tag| second.find(tag).expect(tag))
        .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{xml}");
        assert_eq!(xml.matches("<IpAddress>").count(), 1, "{xml}");
        let info = xml.find("<ovf:Info>").unwrap();
        let primary = xml.find("<PrimaryNetworkConnectionIndex>").unwrap();
        assert!(info < primary && primary < xml.find("<NetworkConnection ").unwrap());
    }

    #[test]
    fn names_are_escaped() {
        let nics = capvcd_nics("r&d \"net\" <a>", &[]);
        let xml = render_section(&nics);
        assert!(
            xml.contains("network=\"r&amp;d &quot;net&quot; &lt;a&gt;\""),
            "{xml}"
        );
        assert_eq!(
            parse_section(&xml).unwrap().nics[0].nic.network,
            "r&d \"net\" <a>"
        );
    }

    #[test]
    fn a_get_response_is_read_with_macs_links_and_unknown_elements_ignored() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<NetworkConnectionSection xmlns="http://www.vmware.com/vcloud/v1.5" xmlns:ovf="http://schemas.dmtf.org/ovf/envelope/1" href="https://vcd.example.com/api/vApp/vm-1/networkConnectionSection/" type="application/vnd.vmware.vcloud.networkConnectionSection+xml" ovf:required="false">
  <ovf:Info>Specifies the available VM network connections</ovf:Info>
  <PrimaryNetworkConnectionIndex>1</PrimaryNetworkConnectionIndex>
  <NetworkConnection needsCustomization="false" network="storage-net">
    <NetworkConnectionIndex>0</NetworkConnectionIndex>
    <IpAddress>10.20.0.31</IpAddress>
    <IpType>IPV4</IpType>
    <ExternalIpAddress>198.51.100.7</ExternalIpAddress>
    <IsConnected>true</IsConnected>
    <MACAddress>00:50:56:01:AB:CD</MACAddress>
    <IpAddressAllocationMode>DHCP</IpAddressAllocationMode>
    <SecondaryIpAddressAllocationMode>NONE</SecondaryIpAddressAllocationMode>
    <NetworkAdapterType>VMXNET3</NetworkAdapterType>
  </NetworkConnection>
  <NetworkConnection needsCustomization="false" network="mgmt-net">
    <NetworkConnectionIndex>1</NetworkConnectionIndex>
    <IpAddress>10.10.0.23</IpAddress>
    <IsConnected>true</IsConnected>
    <MACAddress>00:50:56:01:ab:ce</MACAddress>
    <IpAddressAllocationMode>POOL</IpAddressAllocationMode>
    <NetworkAdapterType>E1000E</NetworkAdapterType>
  </NetworkConnection>
  <Link rel="edit" href="https://vcd.example.com/api/vApp/vm-1/networkConnectionSection/" type="application/vnd.vmware.vcloud.networkConnectionSection+xml"/>
</NetworkConnectionSection>"#;
        let read = parse_section(xml).expect("parses");
        assert_eq!(read.primary_index, Some(1));
        assert_eq!(read.nics.len(), 2);
        assert_eq!(
            read.nics[0].mac_address.as_deref(),
            Some("00:50:56:01:ab:cd")
        );
        assert_eq!(read.nics[1].nic.ip_address.as_deref(), Some("10.10.0.23"));
        assert!(read.nics[1].nic.primary && !read.nics[0].nic.primary);
        // Against the plan: another order, another mode and adapter.
        let drifted = drift(&capvcd_nics("mgmt-net", &["storage-net".into()]), &read);
        let fields: Vec<String> = drifted.iter().map(Drift::message).collect();
        assert_eq!(
            fields,
            [
                "NIC 0: network is storage-net on the VM, mgmt-net as built from the plan",
                "NIC 0: primary is false on the VM, true as built from the plan",
                "NIC 0: ipAllocationMode is DHCP on the VM, POOL as built from the plan",
                "NIC 1: network is mgmt-net on the VM, storage-net as built from the plan",
                "NIC 1: primary is true on the VM, false as built from the plan",
                "NIC 1: adapterType is E1000E on the VM, VMXNET3 as built from the plan",
            ]
        );
    }

    #[test]
    fn missing_and_unplanned_nics_are_drift() {
        let vm = parse_section(&render_section(&capvcd_nics("mgmt-net", &[]))).unwrap();
        let planned = capvcd_nics("mgmt-net", &["storage-net".into()]);
        assert_eq!(
            drift(&planned, &vm),
            [Drift::Missing {
                index: 1,
                network: "storage-net".into()
            }]
        );
        assert_eq!(
            drift(
                &planned[..1],
                &parse_section(&render_section(&planned)).unwrap()
            ),
            [Drift::Unplanned {
                index: 1,
                network: "storage-net".into()
            }]
        );
    }

    #[test]
    fn bad_documents_are_refused_with_the_place() {
        assert!(matches!(
            parse_section("<NetworkConnectionSection><NetworkConnection"),
            Err(SectionError::Xml { .. })
        ));
        assert!(matches!(
            parse_section("<VApp/>"),
            Err(SectionError::NotASection(name)) if name == "VApp"
        ));
        let bad = parse_section(
            "<NetworkConnectionSection><NetworkConnection network=\"mgmt-net\">\
             <NetworkAdapterType>VLANCE</NetworkAdapterType></NetworkConnection>\
             </NetworkConnectionSection>",
        )
        .unwrap_err();
        assert_eq!(
            bad.to_string(),
            "NetworkConnection[0] (\"mgmt-net\").NetworkAdapterType: \"VLANCE\" is not an adapter \
             type nicpolicy plans"
        );
    }

    /// A VM as Deckhouse's build leaves it: every NIC DHCP, `leased` giving each NIC's address.
    fn dhcp_vm(leased: [Option<&str>; 2]) -> VmNics {
        let mut nics = capvcd_nics("mgmt-net", &["storage-net".into()]);
        for (nic, address) in nics.iter_mut().zip(leased) {
            nic.ip_allocation_mode = IpAllocationMode::Dhcp;
            nic.ip_address = address.map(str::to_string);
        }
        let mut xml = render_section(&nics);
        // A GET gives DHCP addresses too (render_section writes only MANUAL ones).
        for (i, address) in leased.iter().enumerate() {
            if let Some(address) = address {
                let at = xml
                    .match_indices("<IsConnected>")
                    .nth(i)
                    .map(|(at, _)| at)
                    .unwrap();
                xml.insert_str(at, &format!("<IpAddress>{address}</IpAddress>\n    "));
            }
        }
        parse_section(&xml).unwrap()
    }

    #[test]
    fn the_profile_decides_what_the_vm_is_compared_with() {
        use nicpolicy_plugin::provisioner::Profile;
        // The plan of a stock policy: POOL everywhere.
        let plan = capvcd_nics("mgmt-net", &["storage-net".into()]);
        let extras = ["storage-net".to_string()];
        let deckhouse = Provisioner::of(Profile::Deckhouse);
        let built = built_nics(&deckhouse, &plan, &extras);
        assert!(built
            .iter()
            .all(|n| n.ip_allocation_mode == IpAllocationMode::Dhcp));

        // Deckhouse's VM with its addresses: nothing to say.
        let leased = dhcp_vm([Some("10.10.0.23"), Some("10.20.0.31")]);
        assert_eq!(drift(&built, &leased), []);
        assert_eq!(pending(&built, &leased), []);
        // Without them (still booting): pending, not drift.
        let booting = dhcp_vm([None, None]);
        assert_eq!(drift(&built, &booting), []);
        let waiting: Vec<String> = pending(&built, &booting)
            .iter()
            .map(Pending::message)
            .collect();
        assert_eq!(
            waiting,
            [
                "NIC 0 (mgmt-net): DHCP, no address leased yet (the machine is not ready until \
                 it is)",
                "NIC 1 (storage-net): DHCP, no address leased yet",
            ]
        );

        // Stock CAPVCD never builds DHCP: the same VM drifted, with or without addresses.
        let stock = built_nics(&Provisioner::capvcd(), &plan, &extras);
        for vm in [&leased, &booting] {
            let messages: Vec<String> = drift(&stock, vm).iter().map(Drift::message).collect();
            assert_eq!(
                messages,
                [
                    "NIC 0: ipAllocationMode is DHCP on the VM, POOL as built from the plan",
                    "NIC 1: ipAllocationMode is DHCP on the VM, POOL as built from the plan",
                ]
            );
            assert_eq!(pending(&stock, vm), []);
        }
        // And a POOL VM on a Deckhouse site drifted.
        let pool_vm = parse_section(&render_section(&plan)).unwrap();
        assert_eq!(drift(&built, &pool_vm).len(), 2);
    }

    #[test]
    fn built_nics_follow_the_profile_and_what_a_custom_build_applies() {
        use nicpolicy_plugin::provisioner::{Builds, Profile};
        let mut plan = capvcd_nics("mgmt-net", &["storage-net".into()]);
        plan[1].ip_allocation_mode = IpAllocationMode::Manual;
        plan[1].ip_address = Some("10.20.0.50".into());
        let extras = ["storage-net".to_string(), "backup-net".to_string()];
        // Stock: POOL, no address; the extra the plan leaves out built as stock builds it.
        let stock = built_nics(&Provisioner::capvcd(), &plan, &extras);
        assert_eq!(stock, capvcd_nics("mgmt-net", &extras));
        // A custom build that applies the mode and address, and builds E1000E adapters.
        let custom = Provisioner {
            name: "capvcd-eu1".into(),
            applies: vec![PlanField::IpAllocationMode, PlanField::IpAddress],
            builds: Builds {
                adapter_type: AdapterType::E1000e,
                ..Builds::default()
            },
            ..Provisioner::of(Profile::Custom)
        };
        let built = built_nics(&custom, &plan, &extras);
        assert_eq!(built[1].ip_allocation_mode, IpAllocationMode::Manual);
        assert_eq!(built[1].ip_address.as_deref(), Some("10.20.0.50"));
        assert!(built.iter().all(|n| n.adapter_type == AdapterType::E1000e));
        assert_eq!(built[2].ip_allocation_mode, IpAllocationMode::Pool);
    }
}
