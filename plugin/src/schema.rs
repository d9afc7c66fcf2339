//! The request a policy receives and the decision it returns.
//!
//! Both travel as JSON (camelCase field names) across the [ABI](crate::abi); `docs/schema.md`
//! describes every field with examples. The host builds the request from the Kubernetes objects
//! (VCDMachine or VCDMachineTemplate, VCDCluster) and an optional inventory of the org VDC's
//! networks, so a policy never parses manifests itself.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Label that names the Cluster API cluster a machine belongs to.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// Label that marks control-plane machines (its value does not matter).
pub const CONTROL_PLANE_LABEL: &str = "cluster.x-k8s.io/control-plane";

/// Everything a policy needs to default and validate one machine's networks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    /// Whether the object is being created or updated.
    pub operation: Operation,
    /// Which kind of object the machine comes from; decides the field paths of violations.
    pub kind: ObjectKind,
    /// The machine (or the machine template's `spec.template`) as it will be stored.
    pub machine: Machine,
    /// The machine as stored before this change; only on [`Operation::Update`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_machine: Option<Machine>,
    /// The VCDCluster the machine belongs to.
    pub cluster: Cluster,
    /// The org VDC's networks, when the host knows them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<Inventory>,
    /// The policy's own settings, as configured by the site (JSON `null` when none).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub settings: Value,
    /// The machine's VCDCluster is not known yet: the machine names no cluster (a
    /// VCDMachineTemplate as `clusterctl generate cluster` writes it), or names one that does not
    /// exist yet. [`Request::cluster`] then holds only the name the machine gives (if any) and
    /// its namespace; check what does not need the cluster. Omitted when `false`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub cluster_unknown: bool,
    /// This request judges the stored object, not a change: `machine` and `oldMachine` are both
    /// the stored object. The host sends it on an UPDATE whose decision denies, to tell the
    /// violations the stored object already had (reported as warnings) from the ones the
    /// UPDATE brings (which deny). Its decision is never the answer. Omitted when `false`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub baseline: bool,
    /// Set by the host, never sent to a policy: on an UPDATE, the stored object named the same
    /// Cluster API cluster as this one ([`crate::objects::cluster_name_of`]: the
    /// `cluster.x-k8s.io/cluster-name` label, or a template's owner Cluster). Only then may the
    /// violations the stored object had be excused ([`crate::lifecycle`]): a stored object
    /// that named no cluster, or another one, was never judged against this cluster. `false`,
    /// the default, never excuses anything.
    #[serde(skip)]
    pub same_cluster_as_stored: bool,
}

fn is_false(value: &bool) -> bool {
    !*value
}

impl Request {
    /// Borrows this request with `settings` in place of its own, so a host can send the
    /// settings of the policy it calls without cloning the request.
    pub fn with_settings<'a>(&'a self, settings: &'a Value) -> RequestRef<'a> {
        // Taken apart field by field, so a field added to `Request` must be placed here too.
        let Request {
            operation,
            kind,
            machine,
            old_machine,
            cluster,
            inventory,
            settings: _,
            cluster_unknown,
            baseline,
            same_cluster_as_stored: _,
        } = self;
        RequestRef {
            operation: *operation,
            kind: *kind,
            machine,
            old_machine: old_machine.as_ref(),
            cluster,
            inventory: inventory.as_ref(),
            settings,
            cluster_unknown: *cluster_unknown,
            baseline: *baseline,
        }
    }

    /// The same request judging the stored object as an UPDATE that changes nothing (see
    /// [`Request::baseline`]); `None` unless this is an UPDATE with its stored object.
    pub fn baseline_request(&self) -> Option<Request> {
        let old = self.old_machine.as_ref()?;
        (self.operation == Operation::Update).then(|| Request {
            operation: Operation::Update,
            kind: self.kind,
            machine: old.clone(),
            old_machine: Some(old.clone()),
            cluster: self.cluster.clone(),
            inventory: self.inventory.clone(),
            settings: self.settings.clone(),
            cluster_unknown: self.cluster_unknown,
            baseline: true,
            same_cluster_as_stored: self.same_cluster_as_stored,
        })
    }

    /// Whether the object is being deleted: an UPDATE of an object with
    /// `metadata.deletionTimestamp` set (CAPVCD removing its finalizer). On a CREATE the field
    /// means nothing: kube-apiserver clears it before storing the object, so a CREATE that
    /// carries one is judged like any other.
    pub fn is_deleting(&self) -> bool {
        self.operation == Operation::Update && self.machine.is_deleting()
    }
}

/// A borrowed [`Request`]; serialises to the same JSON.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestRef<'a> {
    /// See [`Request::operation`].
    pub operation: Operation,
    /// See [`Request::kind`].
    pub kind: ObjectKind,
    /// See [`Request::machine`].
    pub machine: &'a Machine,
    /// See [`Request::old_machine`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_machine: Option<&'a Machine>,
    /// See [`Request::cluster`].
    pub cluster: &'a Cluster,
    /// See [`Request::inventory`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inventory: Option<&'a Inventory>,
    /// See [`Request::settings`].
    #[serde(skip_serializing_if = "is_null")]
    pub settings: &'a Value,
    /// See [`Request::cluster_unknown`].
    #[serde(skip_serializing_if = "is_false")]
    pub cluster_unknown: bool,
    /// See [`Request::baseline`].
    #[serde(skip_serializing_if = "is_false")]
    pub baseline: bool,
}

fn is_null(value: &&Value) -> bool {
    value.is_null()
}

/// The admission operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Operation {
    /// A new object.
    Create,
    /// A change to an existing object; [`Request::old_machine`] holds the stored version.
    Update,
}

/// The Kubernetes kind the machine was read from. Ordered (VCDMachine first) and hashable, so
/// hosts key maps by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ObjectKind {
    /// `VCDMachine`: one VM.
    #[serde(rename = "VCDMachine")]
    VcdMachine,
    /// `VCDMachineTemplate`: the template a MachineDeployment or control plane stamps out.
    #[serde(rename = "VCDMachineTemplate")]
    VcdMachineTemplate,
}

impl ObjectKind {
    /// Both kinds.
    pub const ALL: [ObjectKind; 2] = [ObjectKind::VcdMachine, ObjectKind::VcdMachineTemplate];

    /// The kind called `kind` (as Kubernetes spells it), if it is one of [`ObjectKind::ALL`].
    pub fn from_kind(kind: &str) -> Option<ObjectKind> {
        ObjectKind::ALL.into_iter().find(|k| k.as_str() == kind)
    }

    /// Path of the `VCDMachineSpec` inside an object of this kind.
    pub fn spec_path(self) -> &'static str {
        match self {
            ObjectKind::VcdMachine => "spec",
            ObjectKind::VcdMachineTemplate => "spec.template.spec",
        }
    }

    /// The kind's name as Kubernetes spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::VcdMachine => "VCDMachine",
            ObjectKind::VcdMachineTemplate => "VCDMachineTemplate",
        }
    }
}

/// The machine's role in the cluster, from the `cluster.x-k8s.io/control-plane` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Carries the `cluster.x-k8s.io/control-plane` label.
    ControlPlane,
    /// Any other machine.
    Worker,
}

/// The network-relevant part of a VCDMachine (or of a VCDMachineTemplate's `spec.template`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Machine {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`.
    #[serde(default)]
    pub namespace: String,
    /// `metadata.labels` (for a template, merged with `spec.template.metadata.labels`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations` (for a template, merged with `spec.template.metadata.annotations`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Derived from the control-plane label.
    pub role: Role,
    /// `spec.failureDomain`: the zone of a multi-zone cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domain: Option<String>,
    /// `spec.extraOvdcNetworks`: networks attached after the primary, in order.
    #[serde(default)]
    pub extra_ovdc_networks: Vec<String>,
    /// `spec.providerID`: set once the VM exists (`vmware-cloud-director://<vm id>`).
    #[serde(
        rename = "providerID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// `metadata.deletionTimestamp`: set once the object is being deleted (its finalizers are
    /// being removed). The host never denies such an object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<String>,
}

impl Machine {
    /// Whether the object carries `metadata.deletionTimestamp`. It counts only on an UPDATE:
    /// use [`Request::is_deleting`] to judge a request.
    pub fn is_deleting(&self) -> bool {
        self.deletion_timestamp
            .as_deref()
            .is_some_and(|t| !t.is_empty())
    }

    /// Whether the VM exists already: CAPVCD sets `providerID` once it has created it.
    pub fn is_provisioned(&self) -> bool {
        self.provider_id.as_deref().is_some_and(|id| !id.is_empty())
    }

    /// Role derived from labels, the way Cluster API marks control-plane machines.
    pub fn role_from_labels(labels: &BTreeMap<String, String>) -> Role {
        if labels.contains_key(CONTROL_PLANE_LABEL) {
            Role::ControlPlane
        } else {
            Role::Worker
        }
    }
}

/// The network-relevant part of a VCDCluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cluster {
    /// `metadata.name` of the VCDCluster.
    pub name: String,
    /// `metadata.namespace`.
    #[serde(default)]
    pub namespace: String,
    /// `spec.ovdc`: the org VDC of a single-zone cluster.
    #[serde(default)]
    pub ovdc: String,
    /// `spec.ovdcNetwork`: the primary network of a single-zone cluster (may be empty).
    #[serde(default)]
    pub ovdc_network: String,
    /// `spec.multiZoneSpec.zoneTopology` (for example `DCGroup`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone_topology: Option<String>,
    /// `spec.multiZoneSpec.zones`: empty for a single-zone cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<Zone>,
}

impl Cluster {
    /// What a request says of a cluster that is not known yet: the name the machine gives (may
    /// be empty) and its namespace, nothing else ([`Request::cluster_unknown`]).
    pub fn unknown(name: &str, namespace: &str) -> Cluster {
        Cluster {
            name: name.to_string(),
            namespace: namespace.to_string(),
            ovdc: String::new(),
            ovdc_network: String::new(),
            zone_topology: None,
            zones: Vec::new(),
        }
    }

    /// A cluster is multi-zone when it lists zones.
    pub fn is_multi_zone(&self) -> bool {
        !self.zones.is_empty()
    }
}

/// One zone of a multi-zone cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Zone {
    /// Zone name, as machines give it in `spec.failureDomain`.
    pub name: String,
    /// The org VDC of this zone.
    #[serde(default)]
    pub ovdc: String,
    /// The primary network of machines in this zone.
    #[serde(default)]
    pub ovdc_network_name: String,
    /// Whether control-plane machines may run in this zone.
    #[serde(default)]
    pub control_plane_zone: bool,
}

/// The org VDC networks a site knows of.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Inventory {
    /// Every network machines may attach to.
    pub networks: Vec<Network>,
}

impl Inventory {
    /// Index by name, built once per evaluation so lookups stay O(log n).
    pub fn index(&self) -> BTreeMap<&str, &Network> {
        self.networks.iter().map(|n| (n.name.as_str(), n)).collect()
    }
}

/// One org VDC network.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Network {
    /// The org VDC network name, as machines name it.
    pub name: String,
    /// How the network connects.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub network_type: Option<NetworkType>,
    /// Gateway address (IPv4 or IPv6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    /// Prefix length of the subnet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_length: Option<u8>,
    /// Ranges of the static IP pool (what POOL and MANUAL addresses come from).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub static_ip_ranges: Vec<IpRange>,
    /// DNS servers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dns: Vec<String>,
    /// Addresses already taken on this network (by other VMs, appliances or reservations).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub used_ip_addresses: Vec<String>,
}

impl Network {
    /// A network known by its name only: no type, gateway, ranges, DNS or used addresses.
    pub fn named(name: impl Into<String>) -> Network {
        Network {
            name: name.into(),
            network_type: None,
            gateway: None,
            prefix_length: None,
            static_ip_ranges: Vec::new(),
            dns: Vec::new(),
            used_ip_addresses: Vec::new(),
        }
    }
}

/// Org VDC network types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum NetworkType {
    /// Routed through an edge gateway (NAT_ROUTED).
    Routed,
    /// Isolated, no uplink.
    Isolated,
    /// Connected directly to an external network (needed for SR-IOV).
    Direct,
    /// Imported from NSX-T (an opaque network).
    Imported,
}

impl NetworkType {
    /// The name inventories use.
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkType::Routed => "routed",
            NetworkType::Isolated => "isolated",
            NetworkType::Direct => "direct",
            NetworkType::Imported => "imported",
        }
    }
}

/// An inclusive range of addresses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IpRange {
    /// First address of the range.
    pub start: String,
    /// Last address of the range.
    pub end: String,
}

/// What a policy decided about one machine.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// Whether the machine may be admitted. `false` needs at least one violation.
    pub allowed: bool,
    /// The NIC plan, ordered by index; NIC 0 is the primary.
    #[serde(default)]
    pub nics: Vec<Nic>,
    /// The list to write back into `spec.extraOvdcNetworks`; `None` leaves the spec alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_ovdc_networks: Option<Vec<String>>,
    /// Networks the machine's vApp must hold (bridged to the org VDC network of the same name).
    #[serde(default)]
    pub vapp_networks: Vec<String>,
    /// Every reason to deny, each naming its field.
    #[serde(default)]
    pub violations: Vec<Violation>,
    /// Things the user should know that do not block admission.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// Deny on UPDATE even for violations the stored object already had. Without it, the host
    /// reports those as warnings and denies only what the UPDATE brings (see
    /// [`Request::baseline`]). An object being deleted is never denied, strict or not.
    #[serde(default, skip_serializing_if = "is_false")]
    pub strict: bool,
}

impl Decision {
    /// Builds the decision for `violations`: allowed exactly when there are none.
    pub fn from_violations(violations: Vec<Violation>) -> Self {
        Decision {
            allowed: violations.is_empty(),
            violations,
            ..Decision::default()
        }
    }

    /// The `extraOvdcNetworks` `machine` ends with: those this decision writes, else its own.
    pub fn extras_of<'a>(&'a self, machine: &'a Machine) -> &'a [String] {
        self.extra_ovdc_networks
            .as_deref()
            .unwrap_or(&machine.extra_ovdc_networks)
    }

    /// This decision with `allowed` set from its violations: allowed exactly when there are
    /// none. Call it after adding violations to a decision of the CAPVCD rules.
    pub fn finish(mut self) -> Self {
        self.allowed = self.violations.is_empty();
        self
    }

    /// Orders the violations by field path, indices as numbers (`[1]` before `[2]`, `[2]`
    /// before `[10]`); violations of one field keep their order. The SDK's glue calls it on
    /// every policy's decision and a chain on the combined one, so the CLI, the webhook, the
    /// reports and the page list them alike, whatever order the rules ran in.
    pub fn sort_violations(&mut self) {
        self.violations
            .sort_by(|a, b| field_order(&a.field, &b.field));
    }
}

/// Compares two field paths as [`Decision::sort_violations`] orders them: runs of digits as
/// numbers, everything else as text.
pub fn field_order(a: &str, b: &str) -> std::cmp::Ordering {
    // Bytes, not characters: an ASCII digit is one byte in UTF-8 and no byte of another
    // character looks like one, and byte order is `str`'s order. Called for every pair the
    // violations' sort compares, in the guest and the host alike.
    fn runs(path: &[u8]) -> impl Iterator<Item = (bool, &[u8])> {
        let mut rest = path;
        std::iter::from_fn(move || {
            let digits = rest.first()?.is_ascii_digit();
            let end = rest
                .iter()
                .position(|b| b.is_ascii_digit() != digits)
                .unwrap_or(rest.len());
            let (run, tail) = rest.split_at(end);
            rest = tail;
            Some((digits, run))
        })
    }
    fn trim_zeros(mut digits: &[u8]) -> &[u8] {
        while let [b'0', tail @ ..] = digits {
            digits = tail;
        }
        digits
    }
    if a == b {
        return std::cmp::Ordering::Equal;
    }
    let mut left = runs(a.as_bytes());
    let mut right = runs(b.as_bytes());
    loop {
        let order = match (left.next(), right.next()) {
            (None, None) => return std::cmp::Ordering::Equal,
            (None, Some(_)) => return std::cmp::Ordering::Less,
            (Some(_), None) => return std::cmp::Ordering::Greater,
            // Numbers by value (leading zeros aside: by length, then digits).
            (Some((true, x)), Some((true, y))) => {
                let (x, y) = (trim_zeros(x), trim_zeros(y));
                x.len().cmp(&y.len()).then_with(|| x.cmp(y))
            }
            (Some((_, x)), Some((_, y))) => x.cmp(y),
        };
        if order != std::cmp::Ordering::Equal {
            return order;
        }
    }
}

/// One network card of the planned VM, as Cloud Director's `NetworkConnection` holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Nic {
    /// `NetworkConnectionIndex`: 0-based position.
    pub index: u32,
    /// The org VDC network name.
    pub network: String,
    /// Whether this is the primary NIC (`PrimaryNetworkConnectionIndex`).
    pub primary: bool,
    /// How the NIC gets its address.
    pub ip_allocation_mode: IpAllocationMode,
    /// The address for [`IpAllocationMode::Manual`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_address: Option<String>,
    /// Virtual NIC hardware.
    pub adapter_type: AdapterType,
    /// `IsConnected`.
    pub connected: bool,
    /// Where the NIC's network came from (see [`crate::source`]); optional in every format.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Box<Source>>,
}

impl Nic {
    /// NIC `index` on `network` as stock CAPVCD creates every NIC: connected, `POOL` (no
    /// address of its own), `VMXNET3`; the primary exactly at index 0.
    pub fn capvcd(index: u32, network: impl Into<String>) -> Nic {
        Nic {
            index,
            network: network.into(),
            primary: index == 0,
            ip_allocation_mode: IpAllocationMode::Pool,
            ip_address: None,
            adapter_type: AdapterType::Vmxnet3,
            connected: true,
            source: None,
        }
    }
}

/// Cloud Director's `IpAddressAllocationMode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum IpAllocationMode {
    /// A static address from the network's pool (CAPVCD's choice).
    Pool,
    /// DHCP; the address is known only after the guest reports it.
    Dhcp,
    /// A given address inside the network's static range.
    Manual,
    /// No address.
    None,
}

impl IpAllocationMode {
    /// The name Cloud Director uses.
    pub fn as_str(self) -> &'static str {
        match self {
            IpAllocationMode::Pool => "POOL",
            IpAllocationMode::Dhcp => "DHCP",
            IpAllocationMode::Manual => "MANUAL",
            IpAllocationMode::None => "NONE",
        }
    }
}

/// Cloud Director's `NetworkAdapterType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AdapterType {
    /// Paravirtual, CAPVCD's choice.
    #[serde(rename = "VMXNET3")]
    Vmxnet3,
    /// Emulated Intel E1000.
    #[serde(rename = "E1000")]
    E1000,
    /// Emulated Intel E1000E.
    #[serde(rename = "E1000E")]
    E1000e,
    /// SR-IOV passthrough; needs a direct network.
    #[serde(rename = "SRIOVETHERNETCARD")]
    SriovEthernetCard,
    /// Older paravirtual NIC.
    #[serde(rename = "VMXNET2")]
    Vmxnet2,
    /// Emulated AMD PCnet32.
    #[serde(rename = "PCNet32")]
    PcNet32,
}

impl AdapterType {
    /// The name Cloud Director uses.
    pub fn as_str(self) -> &'static str {
        match self {
            AdapterType::Vmxnet3 => "VMXNET3",
            AdapterType::E1000 => "E1000",
            AdapterType::E1000e => "E1000E",
            AdapterType::SriovEthernetCard => "SRIOVETHERNETCARD",
            AdapterType::Vmxnet2 => "VMXNET2",
            AdapterType::PcNet32 => "PCNet32",
        }
    }
}

/// One reason to deny, tied to the field at fault.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Violation {
    /// Field path in the object, like `spec.extraOvdcNetworks[2]`; paths that start with
    /// `cluster.` point into the VCDCluster.
    pub field: String,
    /// Machine-readable reason, as Kubernetes names field errors.
    pub reason: Reason,
    /// What is wrong and how to fix it.
    pub message: String,
    /// The rule and setting behind it (see [`crate::source`]); optional in every format.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<Box<Source>>,
}

impl Violation {
    /// Shorthand constructor.
    pub fn new(field: impl Into<String>, reason: Reason, message: impl Into<String>) -> Self {
        Violation {
            field: field.into(),
            reason,
            message: message.into(),
            source: None,
        }
    }

    /// The violation as kube-apiserver words a field error:
    /// `spec.extraOvdcNetworks[1]: Duplicate value: already listed at ...`.
    pub fn field_error(&self) -> String {
        format!("{}: {}: {}", self.field, self.reason.text(), self.message)
    }
}

/// Kinds of field errors, after Kubernetes' `FieldValue*` cause types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reason {
    /// A value is needed and missing.
    Required,
    /// The value is malformed or not allowed here.
    Invalid,
    /// The value appears twice.
    Duplicate,
    /// The value names something that does not exist.
    NotFound,
    /// Too many items.
    TooMany,
    /// The change is not allowed.
    Forbidden,
    /// The value is not one of the supported ones.
    NotSupported,
}

impl Reason {
    /// Every reason, in the order of the list above.
    pub const ALL: [Reason; 7] = [
        Reason::Required,
        Reason::Invalid,
        Reason::Duplicate,
        Reason::NotFound,
        Reason::TooMany,
        Reason::Forbidden,
        Reason::NotSupported,
    ];

    /// The reason's name as it is serialised (`NotFound`), for metric labels and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Required => "Required",
            Reason::Invalid => "Invalid",
            Reason::Duplicate => "Duplicate",
            Reason::NotFound => "NotFound",
            Reason::TooMany => "TooMany",
            Reason::Forbidden => "Forbidden",
            Reason::NotSupported => "NotSupported",
        }
    }

    /// Kubernetes' words for this reason, as `field.ErrorList` prints them.
    pub fn text(self) -> &'static str {
        match self {
            Reason::Required => "Required value",
            Reason::Invalid => "Invalid value",
            Reason::Duplicate => "Duplicate value",
            Reason::NotFound => "Not found",
            Reason::TooMany => "Too many",
            Reason::Forbidden => "Forbidden",
            Reason::NotSupported => "Unsupported value",
        }
    }

    /// The Kubernetes `StatusCause.type` for this reason.
    pub fn kubernetes_cause(self) -> &'static str {
        match self {
            Reason::Required => "FieldValueRequired",
            Reason::Invalid => "FieldValueInvalid",
            Reason::Duplicate => "FieldValueDuplicate",
            Reason::NotFound => "FieldValueNotFound",
            Reason::TooMany => "FieldValueTooMany",
            Reason::Forbidden => "FieldValueForbidden",
            Reason::NotSupported => "FieldValueNotSupported",
        }
    }
}

/// What `nicpolicy_validate_settings` returns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SettingsValidation {
    /// Whether the settings can be used.
    pub valid: bool,
    /// Why not, when `valid` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The envelope a policy returns from `nicpolicy_evaluate`: a decision, or an error when the
/// policy could not decide (for example an input it could not read).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum EvaluateOutput {
    /// The policy failed; the host reports the message as a policy failure, not a denial.
    Error {
        /// What went wrong.
        error: String,
    },
    /// The decision.
    Decision(Decision),
}

// Where a decision's parts come from ([`crate::source`] says how policies attach them). Part of
// the schema: the NICs and violations above carry them.

/// Where a planned NIC's network was taken from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Origin {
    /// The VCDCluster's `spec.ovdcNetwork` (NIC 0 of a single-zone cluster).
    ClusterNetwork,
    /// The `ovdcNetworkName` of the machine's zone (NIC 0 of a multi-zone cluster).
    Zone,
    /// The machine's own `spec.extraOvdcNetworks`.
    Machine,
    /// A policy's defaults for the machine's role, written into a machine that listed none.
    RoleDefaults,
    /// A policy's settings otherwise (a mapping of logical names, a site default).
    Settings,
}

impl Origin {
    /// Every origin, in the order above.
    pub const ALL: [Origin; 5] = [
        Origin::ClusterNetwork,
        Origin::Zone,
        Origin::Machine,
        Origin::RoleDefaults,
        Origin::Settings,
    ];

    /// The name as it is serialised (`clusterNetwork`).
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::ClusterNetwork => "clusterNetwork",
            Origin::Zone => "zone",
            Origin::Machine => "machine",
            Origin::RoleDefaults => "roleDefaults",
            Origin::Settings => "settings",
        }
    }

    /// How a person reads it.
    pub fn text(self) -> &'static str {
        match self {
            Origin::ClusterNetwork => "the cluster's ovdcNetwork",
            Origin::Zone => "the machine's zone",
            Origin::Machine => "the machine's own list",
            Origin::RoleDefaults => "role defaults",
            Origin::Settings => "policy settings",
        }
    }
}

/// Why a NIC or a violation is in a decision.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    /// Where a NIC's network was taken from (NICs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
    /// The object field the value was read from: `cluster.spec.ovdcNetwork`,
    /// `spec.extraOvdcNetworks[1]` (paths that start with `cluster.` point into the VCDCluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// The rule that planned the NIC or found the violation, `policy-kind/rule`
    /// (`capvcd/plan`, `role-based/forbidden`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The setting behind it, as a path into the policy's settings (`worker.defaults[0]`,
    /// `capvcd.maxNics`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setting: Option<String>,
    /// The chain entry whose decision carried it; the host fills it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
}

impl Source {
    /// The source of a part made by `rule`.
    pub fn rule(rule: impl Into<String>) -> Source {
        Source {
            rule: Some(rule.into()),
            ..Source::default()
        }
    }

    /// A NIC taken from `origin` at `field` by `rule`.
    pub fn nic(origin: Origin, field: impl Into<String>, rule: impl Into<String>) -> Source {
        Source {
            origin: Some(origin),
            field: Some(field.into()),
            rule: Some(rule.into()),
            ..Source::default()
        }
    }

    /// This source with `setting` as the setting behind it.
    pub fn with_setting(mut self, setting: impl Into<String>) -> Source {
        self.setting = Some(setting.into());
        self
    }

    /// Whether nothing is known.
    pub fn is_empty(&self) -> bool {
        *self == Source::default()
    }

    /// One line for people: `role defaults (worker.defaults[0]) by role-based/defaults, policy
    /// site`; empty parts are left out.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        match (self.origin, &self.field) {
            (Some(origin), Some(field)) => parts.push(format!("{} ({field})", origin.text())),
            (Some(origin), None) => parts.push(origin.text().to_string()),
            (None, Some(field)) => parts.push(field.clone()),
            (None, None) => {}
        }
        if let Some(setting) = &self.setting {
            parts.push(format!("setting {setting}"));
        }
        if let Some(rule) = &self.rule {
            parts.push(format!("rule {rule}"));
        }
        if let Some(policy) = &self.policy {
            parts.push(format!("policy {policy}"));
        }
        if parts.is_empty() {
            "not reported".to_string()
        } else {
            parts.join(", ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Decision, Reason, Violation};

    #[test]
    fn a_reasons_name_is_its_serialised_form() {
        for reason in Reason::ALL {
            let json = serde_json::to_value(reason).expect("serialises");
            assert_eq!(json, reason.as_str(), "{reason:?}");
        }
    }

    #[test]
    fn violations_are_ordered_by_field_path_with_indices_as_numbers() {
        let v = |field: &str, message: &str| Violation::new(field, Reason::Invalid, message);
        let mut decision = Decision::from_violations(vec![
            v("spec.extraOvdcNetworks[10]", ""),
            v("spec.failureDomain", ""),
            v("spec.extraOvdcNetworks[2]", ""),
            v("spec.extraOvdcNetworks[1]", "first at [1]"),
            v("spec.extraOvdcNetworks", ""),
            v("spec.extraOvdcNetworks[1]", "second at [1]"),
        ]);
        decision.sort_violations();
        let fields: Vec<&str> = decision
            .violations
            .iter()
            .map(|v| v.field.as_str())
            .collect();
        assert_eq!(
            fields,
            [
                "spec.extraOvdcNetworks",
                "spec.extraOvdcNetworks[1]",
                "spec.extraOvdcNetworks[1]",
                "spec.extraOvdcNetworks[2]",
                "spec.extraOvdcNetworks[10]",
                "spec.failureDomain"
            ]
        );
        // Stable: the two at [1] keep the order the rules gave them.
        assert_eq!(decision.violations[1].message, "first at [1]");
        assert_eq!(decision.violations[2].message, "second at [1]");
    }

    #[test]
    fn field_order_compares_digit_runs_as_numbers_in_any_text() {
        use std::cmp::Ordering::{Equal, Greater, Less};
        let cases = [
            (
                "spec.extraOvdcNetworks[2]",
                "spec.extraOvdcNetworks[10]",
                Less,
            ),
            (
                "spec.extraOvdcNetworks[010]",
                "spec.extraOvdcNetworks[10]",
                Equal,
            ),
            (
                "spec.extraOvdcNetworks[0]",
                "spec.extraOvdcNetworks[00]",
                Equal,
            ),
            ("spec.extraOvdcNetworks", "spec.extraOvdcNetworks[0]", Less),
            (
                "cluster.spec.ovdcNetwork",
                "spec.extraOvdcNetworks[0]",
                Less,
            ),
            ("spec.netze.ü[3]", "spec.netze.ü[12]", Less),
            ("spec.netze.ü[3]", "spec.netze.z[3]", Greater),
            ("9", "a", Less),
            ("", "", Equal),
            ("", "0", Less),
        ];
        for (a, b, order) in cases {
            assert_eq!(super::field_order(a, b), order, "{a:?} {b:?}");
            assert_eq!(super::field_order(b, a), order.reverse(), "{b:?} {a:?}");
        }
    }
}
