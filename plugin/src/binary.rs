//! The binary request format, version 1: the [`Request`] of ABI v1 in a layout a policy reads
//! without parsing text.
//!
//! ABI v1 sends the request as JSON, and decoding that JSON is the largest part of a small
//! policy's work inside Wasm. A module built with the SDK also exports
//! [`EXPORT_EVALUATE_BINARY1`](crate::abi::EXPORT_EVALUATE_BINARY1), which takes the same
//! request in this format (the decision still comes back as JSON); a host that finds the
//! export sends this, any other host JSON. `docs/abi.md` is the byte-level contract.
//!
//! The layout follows the schema field by field, so a field added to [`Request`] (or to the
//! types it holds) needs a new version of the format: the encoder takes every struct apart by
//! name, which makes the compiler point at the places to change.
//!
//! The decision can come back in the same kind of layout: see [`decision`] (the optional
//! export [`EXPORT_EVALUATE_BINARY2`](crate::abi::EXPORT_EVALUATE_BINARY2), binary both ways).
//!
//! - integers are little-endian; a *length* or *count* is a `u32`;
//! - a *string* is its length in bytes, then that many bytes of UTF-8;
//! - an *optional* value is a byte `0` (absent) or `1` followed by the value;
//! - a *list* is its count, then its items; a *map* is its count, then key and value strings
//!   in ascending key order.

pub mod decision;

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;

use crate::schema::{
    Cluster, Inventory, IpRange, Machine, Network, NetworkType, ObjectKind, Operation, Request,
    RequestRef, Role, Zone,
};

pub use decision::{
    decode_output, encode_output, encode_output_v2, DECISION_MAGIC, DECISION_MAGIC_V2,
};

/// The first four bytes of a request in this format: `NPB` and the format's version.
pub const MAGIC: [u8; 4] = *b"NPB\x01";

/// Flag bits of the request's header byte.
const HAS_OLD_MACHINE: u8 = 1;
const HAS_INVENTORY: u8 = 1 << 1;
const CLUSTER_UNKNOWN: u8 = 1 << 2;
const BASELINE: u8 = 1 << 3;
const KNOWN_FLAGS: u8 = HAS_OLD_MACHINE | HAS_INVENTORY | CLUSTER_UNKNOWN | BASELINE;

/// Why bytes are not a request (or an [output](decision)) in this format, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatError {
    /// Offset of the byte where reading stopped.
    pub at: usize,
    /// The field being read, as `Type.field`.
    pub field: &'static str,
    /// What is wrong there.
    pub problem: Problem,
}

/// What is wrong with a request or an output in the binary formats.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The input does not start with [`MAGIC`].
    NotBinaryRequest,
    /// The output does not start with [`DECISION_MAGIC`].
    NotBinaryDecision,
    /// The input ends before the field does.
    Truncated,
    /// A string is not UTF-8.
    NotUtf8,
    /// A tag byte (flags, optional, enum) has a value the format does not define.
    BadTag(u8),
    /// A list or map says it holds more items than the bytes left could hold.
    CountTooLarge(u32),
    /// Map keys are not in strictly ascending order.
    KeysOutOfOrder,
    /// The settings are not JSON.
    Settings(String),
    /// Bytes follow the request or the output.
    TrailingBytes(usize),
    /// (Encoding only) a string or list is longer than a `u32` can count.
    TooLong(usize),
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte {}, reading {}: ", self.at, self.field)?;
        match &self.problem {
            Problem::NotBinaryRequest => write!(
                f,
                "not a binary request (it must start with NPB and version byte 1)"
            ),
            Problem::NotBinaryDecision => write!(
                f,
                "not a binary decision (it must start with NPD and version byte 1 or 2)"
            ),
            Problem::Truncated => write!(f, "the input ends inside the field"),
            Problem::NotUtf8 => write!(f, "the string is not UTF-8"),
            Problem::BadTag(tag) => write!(f, "tag byte {tag} is not defined here"),
            Problem::CountTooLarge(count) => write!(
                f,
                "a count of {count} items is more than the bytes left can hold"
            ),
            Problem::KeysOutOfOrder => write!(f, "map keys are not in ascending order"),
            Problem::Settings(err) => write!(f, "the settings are not JSON: {err}"),
            Problem::TrailingBytes(n) => write!(f, "{n} bytes follow the end"),
            Problem::TooLong(n) => write!(f, "{n} items or bytes do not fit a 32-bit length"),
        }
    }
}

impl std::error::Error for FormatError {}

/// Appends `request` to `out` in the binary format.
///
/// # Errors
/// [`Problem::TooLong`] for a string or list over `u32::MAX` bytes or items (a host caps
/// requests far below that).
pub fn encode(request: RequestRef<'_>, out: &mut Vec<u8>) -> Result<(), FormatError> {
    let RequestRef {
        operation,
        kind,
        machine,
        old_machine,
        cluster,
        inventory,
        settings,
        cluster_unknown,
        baseline,
    } = request;
    let mut w = Writer { out };
    w.out.extend_from_slice(&MAGIC);
    w.u8(match operation {
        Operation::Create => 0,
        Operation::Update => 1,
    });
    w.u8(match kind {
        ObjectKind::VcdMachine => 0,
        ObjectKind::VcdMachineTemplate => 1,
    });
    w.flags(&[
        (old_machine.is_some(), HAS_OLD_MACHINE),
        (inventory.is_some(), HAS_INVENTORY),
        (cluster_unknown, CLUSTER_UNKNOWN),
        (baseline, BASELINE),
    ]);
    w.machine(machine)?;
    if let Some(old) = old_machine {
        w.machine(old)?;
    }
    w.cluster(cluster)?;
    if let Some(inventory) = inventory {
        w.inventory(inventory)?;
    }
    if settings.is_null() {
        w.u32(0);
    } else {
        // Settings are the policy's own JSON; they travel as JSON text (empty for `null`).
        let at = w.out.len();
        w.u32(0);
        serde_json::to_writer(&mut *w.out, settings).map_err(|err| FormatError {
            at,
            field: "Request.settings",
            problem: Problem::Settings(err.to_string()),
        })?;
        let len = w.len(w.out.len() - at - 4, "Request.settings")?;
        w.out[at..at + 4].copy_from_slice(&len.to_le_bytes());
    }
    Ok(())
}

struct Writer<'a> {
    out: &'a mut Vec<u8>,
}

impl Writer<'_> {
    fn u8(&mut self, value: u8) {
        self.out.push(value);
    }

    fn u32(&mut self, value: u32) {
        self.out.extend_from_slice(&value.to_le_bytes());
    }

    fn len(&self, len: usize, field: &'static str) -> Result<u32, FormatError> {
        u32::try_from(len).map_err(|_| FormatError {
            at: self.out.len(),
            field,
            problem: Problem::TooLong(len),
        })
    }

    /// A list's or map's count of `len` items.
    fn count(&mut self, len: usize, field: &'static str) -> Result<(), FormatError> {
        let count = self.len(len, field)?;
        self.u32(count);
        Ok(())
    }

    /// A byte of flags: each bit whose condition is set.
    fn flags(&mut self, bits: &[(bool, u8)]) {
        let flags = bits
            .iter()
            .filter(|(set, _)| *set)
            .fold(0, |flags, (_, bit)| flags | bit);
        self.u8(flags);
    }

    fn str(&mut self, value: &str, field: &'static str) -> Result<(), FormatError> {
        let len = self.len(value.len(), field)?;
        self.u32(len);
        self.out.extend_from_slice(value.as_bytes());
        Ok(())
    }

    fn opt_str(&mut self, value: Option<&str>, field: &'static str) -> Result<(), FormatError> {
        match value {
            None => self.u8(0),
            Some(value) => {
                self.u8(1);
                self.str(value, field)?;
            }
        }
        Ok(())
    }

    fn strs(&mut self, values: &[String], field: &'static str) -> Result<(), FormatError> {
        self.count(values.len(), field)?;
        values.iter().try_for_each(|value| self.str(value, field))
    }

    fn map(
        &mut self,
        map: &BTreeMap<String, String>,
        field: &'static str,
    ) -> Result<(), FormatError> {
        self.count(map.len(), field)?;
        for (key, value) in map {
            self.str(key, field)?;
            self.str(value, field)?;
        }
        Ok(())
    }

    fn machine(&mut self, machine: &Machine) -> Result<(), FormatError> {
        let Machine {
            name,
            namespace,
            labels,
            annotations,
            role,
            failure_domain,
            extra_ovdc_networks,
            provider_id,
            deletion_timestamp,
        } = machine;
        self.str(name, "Machine.name")?;
        self.str(namespace, "Machine.namespace")?;
        self.map(labels, "Machine.labels")?;
        self.map(annotations, "Machine.annotations")?;
        self.u8(match role {
            Role::ControlPlane => 0,
            Role::Worker => 1,
        });
        self.opt_str(failure_domain.as_deref(), "Machine.failureDomain")?;
        self.strs(extra_ovdc_networks, "Machine.extraOvdcNetworks")?;
        self.opt_str(provider_id.as_deref(), "Machine.providerID")?;
        self.opt_str(deletion_timestamp.as_deref(), "Machine.deletionTimestamp")
    }

    fn cluster(&mut self, cluster: &Cluster) -> Result<(), FormatError> {
        let Cluster {
            name,
            namespace,
            ovdc,
            ovdc_network,
            zone_topology,
            zones,
        } = cluster;
        self.str(name, "Cluster.name")?;
        self.str(namespace, "Cluster.namespace")?;
        self.str(ovdc, "Cluster.ovdc")?;
        self.str(ovdc_network, "Cluster.ovdcNetwork")?;
        self.opt_str(zone_topology.as_deref(), "Cluster.zoneTopology")?;
        self.count(zones.len(), "Cluster.zones")?;
        for zone in zones {
            let Zone {
                name,
                ovdc,
                ovdc_network_name,
                control_plane_zone,
            } = zone;
            self.str(name, "Zone.name")?;
            self.str(ovdc, "Zone.ovdc")?;
            self.str(ovdc_network_name, "Zone.ovdcNetworkName")?;
            self.u8(u8::from(*control_plane_zone));
        }
        Ok(())
    }

    fn inventory(&mut self, inventory: &Inventory) -> Result<(), FormatError> {
        let Inventory { networks } = inventory;
        self.count(networks.len(), "Inventory.networks")?;
        for network in networks {
            let Network {
                name,
                network_type,
                gateway,
                prefix_length,
                static_ip_ranges,
                dns,
                used_ip_addresses,
            } = network;
            self.str(name, "Network.name")?;
            self.u8(match network_type {
                None => 0,
                Some(NetworkType::Routed) => 1,
                Some(NetworkType::Isolated) => 2,
                Some(NetworkType::Direct) => 3,
                Some(NetworkType::Imported) => 4,
            });
            self.opt_str(gateway.as_deref(), "Network.gateway")?;
            match prefix_length {
                None => self.u8(0),
                Some(prefix) => {
                    self.u8(1);
                    self.u8(*prefix);
                }
            }
            self.count(static_ip_ranges.len(), "Network.staticIpRanges")?;
            for IpRange { start, end } in static_ip_ranges {
                self.str(start, "IpRange.start")?;
                self.str(end, "IpRange.end")?;
            }
            self.strs(dns, "Network.dns")?;
            self.strs(used_ip_addresses, "Network.usedIpAddresses")?;
        }
        Ok(())
    }
}

/// Reads a request in the binary format.
///
/// # Errors
/// A [`FormatError`] naming the byte and field where the input stops being a request: wrong
/// magic, a truncated field, a string that is not UTF-8, an undefined tag, a count larger than
/// the input, map keys out of order, settings that are not JSON, or bytes after the end.
pub fn decode(bytes: &[u8]) -> Result<Request, FormatError> {
    let mut reader = Reader::new(bytes);
    let request = reader.request();
    reader.finish(request, "Request")
}

/// Reading stopped; the reason is in [`Reader::error`]. Small, so that the `Result` of every
/// field read stays small (a policy's size counts, docs/benchmarks.md).
struct Stop;

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    /// Why reading stopped.
    error: Option<FormatError>,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Reader {
            bytes,
            at: 0,
            error: None,
        }
    }

    /// What reading gave: the value, or the error recorded where it stopped.
    fn finish<T>(self, read: Result<T, Stop>, what: &'static str) -> Result<T, FormatError> {
        // Every `Stop` records its error first; the fallback is never used.
        read.map_err(|Stop| {
            self.error.unwrap_or(FormatError {
                at: 0,
                field: what,
                problem: Problem::Truncated,
            })
        })
    }

    /// Refuses bytes after the end of `what`.
    fn end(&mut self, what: &'static str) -> Result<(), Stop> {
        let left = self.bytes.len() - self.at;
        if left > 0 {
            return Err(self.error_at(self.at, what, Problem::TrailingBytes(left)));
        }
        Ok(())
    }

    fn request(&mut self) -> Result<Request, Stop> {
        let r = self;
        if r.take(4, "Request.magic")? != MAGIC {
            return Err(r.error_at(0, "Request.magic", Problem::NotBinaryRequest));
        }
        let operation = match r.u8("Request.operation")? {
            0 => Operation::Create,
            1 => Operation::Update,
            tag => return Err(r.bad_tag(tag, "Request.operation")),
        };
        let kind = match r.u8("Request.kind")? {
            0 => ObjectKind::VcdMachine,
            1 => ObjectKind::VcdMachineTemplate,
            tag => return Err(r.bad_tag(tag, "Request.kind")),
        };
        let flags = r.u8("Request.flags")?;
        if flags & !KNOWN_FLAGS != 0 {
            return Err(r.bad_tag(flags, "Request.flags"));
        }
        let machine = r.machine()?;
        let old_machine = if flags & HAS_OLD_MACHINE != 0 {
            Some(r.machine()?)
        } else {
            None
        };
        let cluster = r.cluster()?;
        let inventory = if flags & HAS_INVENTORY != 0 {
            Some(r.inventory()?)
        } else {
            None
        };
        let settings_len = r.u32("Request.settings")? as usize;
        let settings_at = r.at;
        let settings = match r.take(settings_len, "Request.settings")? {
            [] => Value::Null,
            text => match serde_json::from_slice(text) {
                Ok(settings) => settings,
                Err(err) => {
                    let problem = Problem::Settings(err.to_string());
                    return Err(r.error_at(settings_at, "Request.settings", problem));
                }
            },
        };
        r.end("Request")?;
        Ok(Request {
            operation,
            kind,
            machine,
            old_machine,
            cluster,
            inventory,
            settings,
            cluster_unknown: flags & CLUSTER_UNKNOWN != 0,
            baseline: flags & BASELINE != 0,
            same_cluster_as_stored: false,
        })
    }

    #[inline(never)]
    fn error_at(&mut self, at: usize, field: &'static str, problem: Problem) -> Stop {
        self.error = Some(FormatError { at, field, problem });
        Stop
    }

    /// The tag byte just read was `tag`, which `field` does not define.
    fn bad_tag(&mut self, tag: u8, field: &'static str) -> Stop {
        self.error_at(self.at - 1, field, Problem::BadTag(tag))
    }

    fn take(&mut self, len: usize, field: &'static str) -> Result<&'a [u8], Stop> {
        let bytes = self.bytes;
        match self
            .at
            .checked_add(len)
            .and_then(|end| bytes.get(self.at..end))
        {
            Some(slice) => {
                self.at += len;
                Ok(slice)
            }
            None => Err(self.error_at(self.at, field, Problem::Truncated)),
        }
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, Stop> {
        Ok(self.take(1, field)?[0])
    }

    // Not inlined: called for every field, and a policy's size counts (docs/benchmarks.md).
    #[inline(never)]
    fn u32(&mut self, field: &'static str) -> Result<u32, Stop> {
        let mut le = [0; 4];
        le.copy_from_slice(self.take(4, field)?);
        Ok(u32::from_le_bytes(le))
    }

    fn flag(&mut self, field: &'static str) -> Result<bool, Stop> {
        match self.u8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            tag => Err(self.bad_tag(tag, field)),
        }
    }

    /// A count of items that take at least `min_size` bytes each: refused when the bytes left
    /// cannot hold them, so a forged count never reserves memory.
    // Not inlined: called for every field, and a policy's size counts (docs/benchmarks.md).
    #[inline(never)]
    fn count(&mut self, field: &'static str, min_size: usize) -> Result<usize, Stop> {
        let at = self.at;
        let count = self.u32(field)?;
        let left = self.bytes.len() - self.at;
        if (count as usize).saturating_mul(min_size) > left {
            return Err(self.error_at(at, field, Problem::CountTooLarge(count)));
        }
        Ok(count as usize)
    }

    // Not inlined: called for every field, and a policy's size counts (docs/benchmarks.md).
    #[inline(never)]
    fn str(&mut self, field: &'static str) -> Result<String, Stop> {
        let len = self.u32(field)? as usize;
        let at = self.at;
        let bytes = self.take(len, field)?;
        // Nearly every string is ASCII, which `is_ascii` checks a word at a time where
        // `from_utf8` goes byte by byte on short, unaligned strings: a seventh of a small
        // evaluation's guest time was that validation.
        let text = if bytes.is_ascii() {
            #[allow(unsafe_code)]
            // SAFETY: ASCII bytes are valid UTF-8.
            Ok(unsafe { std::str::from_utf8_unchecked(bytes) })
        } else {
            std::str::from_utf8(bytes)
        };
        match text {
            Ok(text) => Ok(text.to_owned()),
            Err(_) => Err(self.error_at(at, field, Problem::NotUtf8)),
        }
    }

    // Not inlined: called for every field, and a policy's size counts (docs/benchmarks.md).
    #[inline(never)]
    fn opt_str(&mut self, field: &'static str) -> Result<Option<String>, Stop> {
        Ok(if self.flag(field)? {
            Some(self.str(field)?)
        } else {
            None
        })
    }

    fn strs(&mut self, field: &'static str) -> Result<Vec<String>, Stop> {
        let count = self.count(field, 4)?;
        (0..count).map(|_| self.str(field)).collect()
    }

    fn map(&mut self, field: &'static str) -> Result<BTreeMap<String, String>, Stop> {
        let count = self.count(field, 8)?;
        let mut map = BTreeMap::new();
        for _ in 0..count {
            let at = self.at;
            let key = self.str(field)?;
            let value = self.str(field)?;
            // Ascending keys make each insert an append, and a key given twice is refused.
            if map.last_key_value().is_some_and(|(last, _)| *last >= key) {
                return Err(self.error_at(at, field, Problem::KeysOutOfOrder));
            }
            map.insert(key, value);
        }
        Ok(map)
    }

    // The records are filled field by field into a whole value rather than built from
    // temporaries, so that a stop anywhere drops one value: far less code in the policy.
    fn machine(&mut self) -> Result<Machine, Stop> {
        let mut machine = Machine {
            name: self.str("Machine.name")?,
            namespace: String::new(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            role: Role::Worker,
            failure_domain: None,
            extra_ovdc_networks: Vec::new(),
            provider_id: None,
            deletion_timestamp: None,
        };
        machine.namespace = self.str("Machine.namespace")?;
        machine.labels = self.map("Machine.labels")?;
        machine.annotations = self.map("Machine.annotations")?;
        machine.role = match self.u8("Machine.role")? {
            0 => Role::ControlPlane,
            1 => Role::Worker,
            tag => return Err(self.bad_tag(tag, "Machine.role")),
        };
        machine.failure_domain = self.opt_str("Machine.failureDomain")?;
        machine.extra_ovdc_networks = self.strs("Machine.extraOvdcNetworks")?;
        machine.provider_id = self.opt_str("Machine.providerID")?;
        machine.deletion_timestamp = self.opt_str("Machine.deletionTimestamp")?;
        Ok(machine)
    }

    fn cluster(&mut self) -> Result<Cluster, Stop> {
        let name = self.str("Cluster.name")?;
        let namespace = self.str("Cluster.namespace")?;
        let ovdc = self.str("Cluster.ovdc")?;
        let ovdc_network = self.str("Cluster.ovdcNetwork")?;
        let zone_topology = self.opt_str("Cluster.zoneTopology")?;
        // A zone is at least three empty strings and a flag.
        let count = self.count("Cluster.zones", 13)?;
        let mut zones = Vec::with_capacity(count);
        for _ in 0..count {
            zones.push(Zone {
                name: self.str("Zone.name")?,
                ovdc: self.str("Zone.ovdc")?,
                ovdc_network_name: self.str("Zone.ovdcNetworkName")?,
                control_plane_zone: self.flag("Zone.controlPlaneZone")?,
            });
        }
        Ok(Cluster {
            name,
            namespace,
            ovdc,
            ovdc_network,
            zone_topology,
            zones,
        })
    }

    fn inventory(&mut self) -> Result<Inventory, Stop> {
        // A network is at least an empty name, three tags and three empty lists.
        let count = self.count("Inventory.networks", 19)?;
        let mut networks = Vec::with_capacity(count);
        for _ in 0..count {
            let mut network = Network::named(self.str("Network.name")?);
            network.network_type = match self.u8("Network.type")? {
                0 => None,
                1 => Some(NetworkType::Routed),
                2 => Some(NetworkType::Isolated),
                3 => Some(NetworkType::Direct),
                4 => Some(NetworkType::Imported),
                tag => return Err(self.bad_tag(tag, "Network.type")),
            };
            network.gateway = self.opt_str("Network.gateway")?;
            if self.flag("Network.prefixLength")? {
                network.prefix_length = Some(self.u8("Network.prefixLength")?);
            }
            let ranges = self.count("Network.staticIpRanges", 8)?;
            network.static_ip_ranges.reserve_exact(ranges);
            for _ in 0..ranges {
                let start = self.str("IpRange.start")?;
                let end = self.str("IpRange.end")?;
                network.static_ip_ranges.push(IpRange { start, end });
            }
            network.dns = self.strs("Network.dns")?;
            network.used_ip_addresses = self.strs("Network.usedIpAddresses")?;
            networks.push(network);
        }
        Ok(Inventory { networks })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;

    fn encoded(request: &Request) -> Vec<u8> {
        let mut out = Vec::new();
        encode(request.with_settings(&request.settings), &mut out).unwrap();
        out
    }

    fn full_request() -> Request {
        let mut request = testing::worker(&["storage-net", "workload-net"]);
        request.operation = Operation::Update;
        request.kind = ObjectKind::VcdMachineTemplate;
        request
            .machine
            .labels
            .insert("cluster.x-k8s.io/control-plane".into(), String::new());
        request
            .machine
            .annotations
            .insert("nicpolicy.io/ün".into(), "ž".into());
        request.machine.role = Role::ControlPlane;
        request.machine.failure_domain = Some("zone-a".into());
        request.machine.provider_id = Some("vmware-cloud-director://urn:vcloud:vm:1".into());
        request.machine.deletion_timestamp = Some("2026-12-04T07:00:00Z".into());
        request.old_machine = Some(request.machine.clone());
        request.cluster.zone_topology = Some("DCGroup".into());
        request.cluster.zones = vec![Zone {
            name: "zone-a".into(),
            ovdc: "ovdc-a".into(),
            ovdc_network_name: "mgmt-net-a".into(),
            control_plane_zone: true,
        }];
        request.inventory = Some(Inventory {
            networks: vec![
                Network {
                    name: "storage-net".into(),
                    network_type: Some(NetworkType::Isolated),
                    gateway: Some("10.20.0.1".into()),
                    prefix_length: Some(24),
                    static_ip_ranges: vec![IpRange {
                        start: "10.20.0.10".into(),
                        end: "10.20.0.200".into(),
                    }],
                    dns: vec!["10.20.0.2".into()],
                    used_ip_addresses: vec!["10.20.0.10".into(), "10.20.0.11".into()],
                },
                Network::named("workload-net"),
            ],
        });
        request.settings = serde_json::json!({"requireInventory": true});
        request.cluster_unknown = true;
        request.baseline = true;
        request
    }

    #[test]
    fn requests_round_trip() {
        let full = full_request();
        let plain = testing::worker(&["storage-net"]);
        for request in [full, plain] {
            assert_eq!(decode(&encoded(&request)).unwrap(), request);
        }
    }

    #[test]
    fn every_enum_value_round_trips() {
        // Encoder and decoder each map the enums to tag bytes: every value must come back.
        let mut request = full_request();
        for operation in [Operation::Create, Operation::Update] {
            for kind in ObjectKind::ALL {
                for role in [Role::ControlPlane, Role::Worker] {
                    request.operation = operation;
                    request.kind = kind;
                    request.machine.role = role;
                    assert_eq!(decode(&encoded(&request)).unwrap(), request);
                }
            }
        }
        let types = [
            None,
            Some(NetworkType::Routed),
            Some(NetworkType::Isolated),
            Some(NetworkType::Direct),
            Some(NetworkType::Imported),
        ];
        for network_type in types {
            if let Some(inventory) = request.inventory.as_mut() {
                inventory.networks[0].network_type = network_type;
            }
            assert_eq!(decode(&encoded(&request)).unwrap(), request);
        }
    }

    #[test]
    fn every_truncation_is_refused_without_panicking() {
        let bytes = encoded(&full_request());
        for end in 0..bytes.len() {
            let err = decode(&bytes[..end]).unwrap_err();
            assert!(
                matches!(
                    err.problem,
                    Problem::Truncated | Problem::CountTooLarge(_) | Problem::NotBinaryRequest
                ),
                "cut at {end}: {err}"
            );
        }
    }

    #[test]
    fn every_flipped_byte_decodes_or_names_the_problem() {
        // No panic and no runaway allocation, whichever byte is corrupted.
        let bytes = encoded(&full_request());
        for at in 0..bytes.len() {
            for flip in [0x01, 0x80, 0xff] {
                let mut corrupt = bytes.clone();
                corrupt[at] ^= flip;
                if let Err(err) = decode(&corrupt) {
                    assert!(err.at <= corrupt.len(), "{err}");
                }
            }
        }
    }

    #[test]
    fn errors_name_the_byte_and_field() {
        let mut bytes = encoded(&testing::worker(&[]));
        assert_eq!(
            decode(br#"{"operation":"CREATE"}"#).unwrap_err().to_string(),
            "at byte 0, reading Request.magic: not a binary request (it must start with NPB and version byte 1)"
        );
        bytes[5] = 7;
        assert_eq!(
            decode(&bytes).unwrap_err().to_string(),
            "at byte 5, reading Request.kind: tag byte 7 is not defined here"
        );
        bytes[5] = 0;
        bytes.push(0);
        assert_eq!(
            decode(&bytes).unwrap_err().to_string(),
            format!(
                "at byte {}, reading Request: 1 bytes follow the end",
                bytes.len() - 1
            )
        );
    }

    #[test]
    fn forged_counts_and_bad_strings_are_refused() {
        let request = testing::worker(&["storage-net"]);
        let bytes = encoded(&request);
        // Machine.name's length sits right after the 7-byte header.
        let mut huge = bytes.clone();
        huge[7..11].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode(&huge).unwrap_err().problem, Problem::Truncated);
        let mut not_utf8 = bytes.clone();
        not_utf8[11] = 0xff;
        assert_eq!(decode(&not_utf8).unwrap_err().problem, Problem::NotUtf8);
        // Labels: a count no input could hold.
        let labels_at = 11 + request.machine.name.len() + 4 + request.machine.namespace.len();
        let mut forged = bytes;
        forged[labels_at..labels_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            decode(&forged).unwrap_err().problem,
            Problem::CountTooLarge(u32::MAX)
        );
    }

    #[test]
    fn map_keys_must_ascend() {
        let mut request = testing::worker(&[]);
        request.machine.labels.insert("tier-a".into(), "1".into());
        request.machine.labels.insert("tier-b".into(), "2".into());
        let bytes = encoded(&request);
        // Rename the first key to sort after the second.
        let at = bytes
            .windows(6)
            .position(|w| w == b"tier-a")
            .expect("the first label key");
        let mut out_of_order = bytes.clone();
        out_of_order[at + 5] = b'c';
        let err = decode(&out_of_order).unwrap_err();
        assert_eq!(err.problem, Problem::KeysOutOfOrder);
        assert_eq!(err.field, "Machine.labels");
        // The same key twice is out of order too.
        out_of_order[at + 5] = b'b';
        assert_eq!(
            decode(&out_of_order).unwrap_err().problem,
            Problem::KeysOutOfOrder
        );
    }
}
