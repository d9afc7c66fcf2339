//! Kubernetes objects (as JSON values) mapped to the schema: a VCDMachine or VCDMachineTemplate
//! to a [`Machine`], a VCDCluster to a [`Cluster`], a network inventory to an [`Inventory`].
//!
//! Pure `serde_json`: no files, no YAML, nothing that keeps it from compiling to `wasm32`. The
//! host reads manifest files (with `file:line:column` errors) and calls these functions on each
//! object; a browser or any other embedder can call them on objects it already holds. Enabled
//! with the `objects` feature.
//!
//! ```
//! use nicpolicy_plugin::objects::{cluster_from_object, machine_from_object};
//! use serde_json::json;
//!
//! let (kind, machine) = machine_from_object(&json!({
//!     "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta3",
//!     "kind": "VCDMachine",
//!     "metadata": {"name": "prod-eu1-md-0-x7k2p", "namespace": "prod-eu1"},
//!     "spec": {"extraOvdcNetworks": ["storage-net", "workload-net"]},
//! }))?;
//! assert_eq!(kind.as_str(), "VCDMachine");
//! assert_eq!(machine.extra_ovdc_networks, ["storage-net", "workload-net"]);
//!
//! let err = cluster_from_object(&json!({
//!     "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta3",
//!     "kind": "VCDCluster",
//!     "spec": {"ovdcNetwork": ["mgmt-net"]},
//! }))
//! .unwrap_err();
//! assert_eq!(err.field, "spec.ovdcNetwork");
//! # Ok::<(), nicpolicy_plugin::objects::FieldError>(())
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::schema::{
    Cluster, Inventory, Machine, Network, ObjectKind, Operation, Request, Zone, CLUSTER_NAME_LABEL,
    CONTROL_PLANE_LABEL,
};

/// API group of CAPVCD's kinds.
pub const CAPVCD_GROUP: &str = "infrastructure.cluster.x-k8s.io";
/// Versions whose network fields are read: v1beta2, which CAPVCD's last release (v1.3.2)
/// serves and stores, and v1beta3, CAPVCD's unreleased main (zones). Both carry
/// `extraOvdcNetworks` the same way; v1beta3 adds `failureDomain`.
pub const SUPPORTED_VERSIONS: [&str; 2] = ["v1beta2", "v1beta3"];

/// Why an object could not be mapped: the field at fault (empty for the object itself) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Path of the field inside the object, like `spec.extraOvdcNetworks[1]`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl FieldError {
    fn new(field: impl Into<String>, message: impl fmt::Display) -> FieldError {
        FieldError {
            field: field.into(),
            message: message.to_string(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

impl std::error::Error for FieldError {}

/// Reads `object` as `T`, with the failing field's path in the error.
fn typed<T: DeserializeOwned>(object: &Value) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(object).map_err(|err| {
        let field = err.path().to_string();
        let field = if field == "." { String::new() } else { field };
        FieldError::new(field, err.inner())
    })
}

/// Refuses objects outside [`CAPVCD_GROUP`] at one of the [`SUPPORTED_VERSIONS`].
fn check_api_version(object: &Value) -> Result<(), FieldError> {
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    if group == CAPVCD_GROUP && SUPPORTED_VERSIONS.contains(&version) {
        return Ok(());
    }
    Err(FieldError::new(
        "apiVersion",
        format!("{api_version:?} is not supported; use {CAPVCD_GROUP}/v1beta2 (CAPVCD v1.3.2) or v1beta3 (CAPVCD main)"),
    ))
}

/// A VCDMachine or VCDMachineTemplate object as the schema's [`Machine`], with its kind. For a
/// template the machine is `spec.template`, with the template's and the inner labels and
/// annotations merged (the inner ones win).
///
/// # Errors
/// A [`FieldError`] for another kind or API version, or a field of the wrong type.
pub fn machine_from_object(object: &Value) -> Result<(ObjectKind, Machine), FieldError> {
    let kind_name = object.get("kind").and_then(Value::as_str).unwrap_or("");
    let kind = ObjectKind::from_kind(kind_name).ok_or_else(|| {
        FieldError::new(
            "kind",
            format!("{kind_name:?} is not a VCDMachine or VCDMachineTemplate"),
        )
    })?;
    check_api_version(object)?;
    let machine = match kind {
        ObjectKind::VcdMachine => {
            let m: crd::VcdMachine = typed(object)?;
            let labels = m.metadata.labels.unwrap_or_default();
            Machine {
                name: m.metadata.name.unwrap_or_default(),
                namespace: m.metadata.namespace.unwrap_or_default(),
                role: Machine::role_from_labels(&labels),
                labels,
                annotations: m.metadata.annotations.unwrap_or_default(),
                failure_domain: m.spec.failure_domain,
                extra_ovdc_networks: m.spec.extra_ovdc_networks.unwrap_or_default(),
                provider_id: m.spec.provider_id,
                deletion_timestamp: m.metadata.deletion_timestamp,
            }
        }
        ObjectKind::VcdMachineTemplate => {
            let t: crd::VcdMachineTemplate = typed(object)?;
            let inner = t.spec.template;
            let mut labels = t.metadata.labels.unwrap_or_default();
            labels.extend(inner.metadata.labels.unwrap_or_default());
            let mut annotations = t.metadata.annotations.unwrap_or_default();
            annotations.extend(inner.metadata.annotations.unwrap_or_default());
            Machine {
                name: t.metadata.name.unwrap_or_default(),
                namespace: t.metadata.namespace.unwrap_or_default(),
                role: Machine::role_from_labels(&labels),
                labels,
                annotations,
                failure_domain: inner.spec.failure_domain,
                extra_ovdc_networks: inner.spec.extra_ovdc_networks.unwrap_or_default(),
                provider_id: inner.spec.provider_id,
                deletion_timestamp: t.metadata.deletion_timestamp,
            }
        }
    };
    Ok((kind, machine))
}

/// A VCDCluster object as the schema's [`Cluster`]. The caller picks the object; its `kind`
/// is not checked.
///
/// # Errors
/// A [`FieldError`] for another API version or a field of the wrong type.
pub fn cluster_from_object(object: &Value) -> Result<Cluster, FieldError> {
    check_api_version(object)?;
    let c: crd::VcdCluster = typed(object)?;
    let multi = c.spec.multi_zone_spec.unwrap_or_default();
    Ok(Cluster {
        name: c.metadata.name.unwrap_or_default(),
        namespace: c.metadata.namespace.unwrap_or_default(),
        ovdc: c.spec.ovdc.unwrap_or_default(),
        ovdc_network: c.spec.ovdc_network.unwrap_or_default(),
        zone_topology: multi.zone_topology.filter(|t| !t.is_empty()),
        zones: multi
            .zones
            .unwrap_or_default()
            .into_iter()
            .map(|z| Zone {
                name: z.name.unwrap_or_default(),
                ovdc: z.ovdc.unwrap_or_default(),
                ovdc_network_name: z.ovdc_network_name.unwrap_or_default(),
                control_plane_zone: z.control_plane_zone.unwrap_or(false),
            })
            .collect(),
    })
}

/// An inventory document (`networks:` with name, type, gateway, prefixLength, staticIpRanges
/// and dns per network, optionally under `kind: NetworkInventory`), checked with
/// [`check_inventory`].
///
/// # Errors
/// A [`FieldError`] for an unknown field, a field of the wrong type, or a check that fails.
pub fn inventory_from_object(object: &Value) -> Result<Inventory, FieldError> {
    let parsed: crd::InventoryFile = typed(object)?;
    let inventory = Inventory {
        networks: parsed.networks,
    };
    check_inventory(&inventory).map_err(|(field, message)| FieldError::new(field, message))?;
    Ok(inventory)
}

/// Sanity checks on an inventory: unique names, addresses that parse, ranges inside the subnet's
/// family and in order.
///
/// # Errors
/// The field at fault and why.
pub fn check_inventory(inventory: &Inventory) -> Result<(), (String, String)> {
    let mut seen = BTreeMap::new();
    for (i, network) in inventory.networks.iter().enumerate() {
        let at = |field: &str| format!("networks[{i}].{field}");
        if network.name.is_empty() {
            return Err((at("name"), "must not be empty".into()));
        }
        if let Some(first) = seen.insert(network.name.as_str(), i) {
            return Err((
                at("name"),
                format!("{:?} is already listed at networks[{first}]", network.name),
            ));
        }
        let gateway = match &network.gateway {
            Some(text) => Some(parse_ip(text).map_err(|why| (at("gateway"), why))?),
            None => None,
        };
        if let Some(prefix) = network.prefix_length {
            let max = match gateway {
                Some(IpAddr::V6(_)) => 128,
                _ => 32,
            };
            if prefix > max {
                return Err((at("prefixLength"), format!("{prefix} is above {max}")));
            }
        }
        check_ranges(network, &at, gateway)?;
        for (j, server) in network.dns.iter().enumerate() {
            parse_ip(server).map_err(|why| (at(&format!("dns[{j}]")), why))?;
        }
        for (j, used) in network.used_ip_addresses.iter().enumerate() {
            parse_ip(used).map_err(|why| (at(&format!("usedIpAddresses[{j}]")), why))?;
        }
    }
    Ok(())
}

/// Static IP ranges whose ends parse, share the gateway's family and come in order.
fn check_ranges(
    network: &Network,
    at: &dyn Fn(&str) -> String,
    gateway: Option<IpAddr>,
) -> Result<(), (String, String)> {
    for (j, range) in network.static_ip_ranges.iter().enumerate() {
        let start = parse_ip(&range.start)
            .map_err(|why| (at(&format!("staticIpRanges[{j}].start")), why))?;
        let end =
            parse_ip(&range.end).map_err(|why| (at(&format!("staticIpRanges[{j}].end")), why))?;
        let same_family = start.is_ipv4() == end.is_ipv4()
            && gateway.is_none_or(|g| g.is_ipv4() == start.is_ipv4());
        if !same_family {
            return Err((
                at(&format!("staticIpRanges[{j}]")),
                "start, end and gateway must be of one IP family".into(),
            ));
        }
        if start > end {
            return Err((
                at(&format!("staticIpRanges[{j}]")),
                format!("start {start} is after end {end}"),
            ));
        }
    }
    Ok(())
}

fn parse_ip(text: &str) -> Result<IpAddr, String> {
    text.parse()
        .map_err(|_| format!("{text:?} is not an IPv4 or IPv6 address"))
}

/// Objects being created may lack the namespace (it is in the request) or the name
/// (generateName): takes them from the request. Empty values are not written.
pub fn fill_metadata(object: &mut Value, namespace: &str, name: &str) {
    let Some(map) = object.as_object_mut() else {
        return;
    };
    let metadata = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Default::default()));
    let Some(metadata) = metadata.as_object_mut() else {
        return;
    };
    if !namespace.is_empty() {
        metadata
            .entry("namespace")
            .or_insert_with(|| Value::String(namespace.to_string()));
    }
    if !name.is_empty() {
        metadata
            .entry("name")
            .or_insert_with(|| Value::String(name.to_string()));
    }
}

/// The Cluster API cluster a machine object belongs to: its cluster-name label, else
/// (templates) the Cluster among its owner references.
pub fn cluster_name_of(object: &Value) -> Option<String> {
    let label = object
        .pointer("/metadata/labels")
        .and_then(|labels| labels.get(CLUSTER_NAME_LABEL))
        .and_then(Value::as_str)
        .filter(|name| !name.is_empty());
    if let Some(name) = label {
        return Some(name.to_string());
    }
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|owner| {
            owner.get("kind").and_then(Value::as_str) == Some("Cluster")
                && owner
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .is_some_and(|v| v.starts_with("cluster.x-k8s.io/"))
        })
        .and_then(|owner| owner.get("name").and_then(Value::as_str))
        .map(str::to_string)
}

/// The Machine a VCDMachine belongs to, named as CAPVCD finds it (Cluster API's
/// `util.GetOwnerMachine`): the first owner reference of kind `Machine` in group
/// `cluster.x-k8s.io`, whatever its version.
pub fn owner_machine_name(object: &Value) -> Option<&str> {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|owner| {
            owner.get("kind").and_then(Value::as_str) == Some("Machine")
                && owner
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .is_some_and(|v| v.starts_with("cluster.x-k8s.io/"))
        })
        .and_then(|owner| owner.get("name").and_then(Value::as_str))
        .filter(|name| !name.is_empty())
}

/// What a VCDMachine's owner Machine says of it: the two labels CAPVCD reads from the Machine,
/// never from the VCDMachine (its cluster, `util.GetClusterFromMetadata`, and its role,
/// `util.IsControlPlaneMachine`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerMachine {
    /// The Machine's name.
    pub name: String,
    /// Its `cluster.x-k8s.io/cluster-name` label.
    pub cluster: Option<String>,
    /// Whether it carries `cluster.x-k8s.io/control-plane`.
    pub control_plane: bool,
}

impl OwnerMachine {
    /// Reads a Machine object (only its metadata is looked at).
    pub fn from_object(object: &Value) -> OwnerMachine {
        let labels = object.pointer("/metadata/labels");
        OwnerMachine {
            name: object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            cluster: labels
                .and_then(|l| l.get(CLUSTER_NAME_LABEL))
                .and_then(Value::as_str)
                .filter(|name| !name.is_empty())
                .map(str::to_string),
            control_plane: labels.is_some_and(|l| l.get(CONTROL_PLANE_LABEL).is_some()),
        }
    }
}

/// A VCDMachine object as its owner Machine says it is: its cluster-name and control-plane
/// labels replaced by the Machine's, the rest untouched, with a warning that says what the
/// VCDMachine said and what the Machine says. None when they agree (nothing to change).
/// `display` names the VCDMachine in the warning.
pub fn as_owner_says(
    object: &Value,
    owner: &OwnerMachine,
    display: &str,
) -> Option<(Value, String)> {
    let labels = object.pointer("/metadata/labels");
    let own_cluster = labels
        .and_then(|l| l.get(CLUSTER_NAME_LABEL))
        .and_then(Value::as_str)
        .filter(|name| !name.is_empty());
    let own_control_plane = labels.is_some_and(|l| l.get(CONTROL_PLANE_LABEL).is_some());
    if own_cluster == owner.cluster.as_deref() && own_control_plane == owner.control_plane {
        return None;
    }
    let mut relabelled = object.clone();
    let metadata = relabelled
        .as_object_mut()?
        .entry("metadata")
        .or_insert_with(|| Value::Object(Default::default()));
    let labels = metadata
        .as_object_mut()?
        .entry("labels")
        .or_insert_with(|| Value::Object(Default::default()));
    if !labels.is_object() {
        *labels = Value::Object(Default::default());
    }
    let labels = labels.as_object_mut()?;
    match &owner.cluster {
        Some(cluster) => labels.insert(
            CLUSTER_NAME_LABEL.to_string(),
            Value::String(cluster.clone()),
        ),
        None => labels.remove(CLUSTER_NAME_LABEL),
    };
    if owner.control_plane {
        labels
            .entry(CONTROL_PLANE_LABEL)
            .or_insert_with(|| Value::String(String::new()));
    } else {
        labels.remove(CONTROL_PLANE_LABEL);
    }
    let says = |cluster: Option<&str>, control_plane: bool| {
        format!(
            "cluster {}, {}",
            cluster.unwrap_or("(none)"),
            if control_plane {
                "control plane"
            } else {
                "worker"
            }
        )
    };
    let warning = format!(
        "{display} is labelled {}, but its owner Machine {} says {}: judged as the Machine says, \
         which is what CAPVCD builds from",
        says(own_cluster, own_control_plane),
        owner.name,
        says(owner.cluster.as_deref(), owner.control_plane),
    );
    Some((relabelled, warning))
}

/// Whether `object` and `stored` (its stored version, on an UPDATE) both name a cluster
/// ([`cluster_name_of`]) and it is the same one: what
/// [`Request::same_cluster_as_stored`](crate::Request::same_cluster_as_stored) says.
///
/// A VCDMachine whose owner Machine ([`owner_machine_name`]) is set or changed by this UPDATE
/// is not the same either: that is the update CAPVCD waits for before it builds anything, so
/// it is judged in full, against the cluster and role the Machine gives it.
pub fn same_cluster(object: &Value, stored: &Value) -> bool {
    let same_name = match (cluster_name_of(object), cluster_name_of(stored)) {
        (Some(name), Some(stored_name)) => name == stored_name,
        _ => false,
    };
    same_name && owner_machine_name(object) == owner_machine_name(stored)
}

/// The stored version of a machine, on an UPDATE.
#[derive(Clone, Debug)]
pub struct Stored {
    /// The stored machine.
    pub machine: Machine,
    /// Whether it names the same cluster as the machine written ([`same_cluster`]).
    pub same_cluster: bool,
}

/// The policy request for a machine, built one way by every host: the webhook, the audit,
/// manifests (`eval`, `test`, the playground) and the Kubewarden build. An UPDATE when
/// `stored` is given, a CREATE otherwise. `cluster` is the machine's cluster, or the name of one
/// not known (yet): the request then says so ([`Request::cluster_unknown`]) and carries
/// [`Cluster::unknown`] of that name in the machine's namespace, so the rules that need no
/// cluster still run. Settings stay `null` and `baseline` false: the host sets them.
pub fn policy_request(
    kind: ObjectKind,
    machine: Machine,
    stored: Option<Stored>,
    cluster: Result<Cluster, String>,
    inventory: Option<Inventory>,
) -> Request {
    let (cluster, cluster_unknown) = match cluster {
        Ok(cluster) => (cluster, false),
        Err(name) => (Cluster::unknown(&name, &machine.namespace), true),
    };
    let same_cluster_as_stored = stored.as_ref().is_some_and(|s| s.same_cluster);
    Request {
        operation: if stored.is_some() {
            Operation::Update
        } else {
            Operation::Create
        },
        kind,
        machine,
        old_machine: stored.map(|s| s.machine),
        cluster,
        inventory,
        settings: Value::Null,
        cluster_unknown,
        baseline: false,
        same_cluster_as_stored,
    }
}

/// Why a machine names no cluster, worded for the machine's kind.
pub fn unnamed_cluster(kind: ObjectKind) -> String {
    let owner = match kind {
        ObjectKind::VcdMachineTemplate => " and no Cluster owner reference",
        ObjectKind::VcdMachine => "",
    };
    format!(
        "the {} names no cluster: it has no {CLUSTER_NAME_LABEL} label{owner}",
        kind.as_str()
    )
}

/// The name of the VCDCluster a Cluster object points at: `spec.infrastructureRef` (the
/// namespace is the Cluster's in every Cluster API version). Both reference shapes are read:
/// `apiVersion: infrastructure.cluster.x-k8s.io/v1beta3` (Cluster API v1beta1) and `apiGroup:
/// infrastructure.cluster.x-k8s.io` (v1beta2); a VCDCluster of another group is not CAPVCD's.
/// `at` names the Cluster in errors.
pub fn infrastructure_ref(cluster: &Value, at: &str) -> Result<String, String> {
    let reference = cluster.pointer("/spec/infrastructureRef").ok_or_else(|| {
        format!(
            "{at} has no spec.infrastructureRef: Cluster API has not been told which VCDCluster it uses"
        )
    })?;
    let kind = reference.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind != "VCDCluster" {
        return Err(format!(
            "{at}: spec.infrastructureRef is a {kind:?}, not a VCDCluster; nicpolicy serves CAPVCD clusters only"
        ));
    }
    let group = match (
        reference.get("apiGroup").and_then(Value::as_str),
        reference.get("apiVersion").and_then(Value::as_str),
    ) {
        (Some(group), _) => Some(("apiGroup", group)),
        (None, Some(version)) => Some(("apiVersion", version.split('/').next().unwrap_or(""))),
        (None, None) => None,
    };
    if let Some((field, group)) = group.filter(|(_, group)| *group != CAPVCD_GROUP) {
        return Err(format!(
            "{at}: spec.infrastructureRef.{field} names the group {group:?}, not {CAPVCD_GROUP}; nicpolicy serves CAPVCD clusters only"
        ));
    }
    reference
        .get("name")
        .and_then(Value::as_str)
        .filter(|name| !name.is_empty())
        .map(str::to_string)
        .ok_or_else(|| format!("{at}: spec.infrastructureRef has no name"))
}

/// The parts of CAPVCD's objects that are read. Unknown fields are ignored: real manifests
/// carry many more.
mod crd {
    use std::collections::BTreeMap;

    use serde::Deserialize;

    use crate::schema::Network;

    #[derive(Deserialize, Default)]
    #[serde(rename_all = "camelCase")]
    pub struct ObjectMeta {
        pub name: Option<String>,
        pub namespace: Option<String>,
        pub labels: Option<BTreeMap<String, String>>,
        pub annotations: Option<BTreeMap<String, String>>,
        pub deletion_timestamp: Option<String>,
    }

    #[derive(Deserialize, Default)]
    #[serde(rename_all = "camelCase")]
    pub struct VcdMachineSpec {
        #[serde(rename = "providerID")]
        pub provider_id: Option<String>,
        pub extra_ovdc_networks: Option<Vec<String>>,
        pub failure_domain: Option<String>,
    }

    #[derive(Deserialize)]
    pub struct VcdMachine {
        #[serde(default)]
        pub metadata: ObjectMeta,
        #[serde(default)]
        pub spec: VcdMachineSpec,
    }

    #[derive(Deserialize)]
    pub struct VcdMachineTemplate {
        #[serde(default)]
        pub metadata: ObjectMeta,
        pub spec: VcdMachineTemplateSpec,
    }

    #[derive(Deserialize)]
    pub struct VcdMachineTemplateSpec {
        pub template: VcdMachineTemplateResource,
    }

    #[derive(Deserialize)]
    pub struct VcdMachineTemplateResource {
        #[serde(default)]
        pub metadata: ObjectMeta,
        #[serde(default)]
        pub spec: VcdMachineSpec,
    }

    #[derive(Deserialize)]
    pub struct VcdCluster {
        #[serde(default)]
        pub metadata: ObjectMeta,
        #[serde(default)]
        pub spec: VcdClusterSpec,
    }

    #[derive(Deserialize, Default)]
    #[serde(rename_all = "camelCase")]
    pub struct VcdClusterSpec {
        pub ovdc: Option<String>,
        pub ovdc_network: Option<String>,
        pub multi_zone_spec: Option<MultiZoneSpec>,
    }

    #[derive(Deserialize, Default)]
    #[serde(rename_all = "camelCase")]
    pub struct MultiZoneSpec {
        pub zone_topology: Option<String>,
        pub zones: Option<Vec<ZoneSpec>>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct ZoneSpec {
        pub name: Option<String>,
        // CAPVCD releases spell the zone's org VDC both ways.
        #[serde(alias = "ovdcName")]
        pub ovdc: Option<String>,
        pub ovdc_network_name: Option<String>,
        pub control_plane_zone: Option<bool>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    pub struct InventoryFile {
        #[serde(default)]
        #[allow(dead_code)]
        pub api_version: Option<String>,
        #[serde(default)]
        #[allow(dead_code)]
        pub kind: Option<String>,
        pub networks: Vec<Network>,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::schema::Role;

    fn machine(spec: Value) -> Value {
        json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta3",
            "kind": "VCDMachine",
            "metadata": {"name": "prod-eu1-md-0-x7k2p", "namespace": "prod-eu1",
                         "labels": {"cluster.x-k8s.io/cluster-name": "prod-eu1"}},
            "spec": spec,
        })
    }

    #[test]
    fn a_machine_is_read_with_its_extras() {
        let (kind, m) = machine_from_object(&machine(
            json!({"providerID": "vmware-cloud-director://urn:vcloud:vm:4a7f",
                   "extraOvdcNetworks": ["storage-net", "workload-net"]}),
        ))
        .expect("reads");
        assert_eq!(kind, ObjectKind::VcdMachine);
        assert_eq!(m.extra_ovdc_networks, ["storage-net", "workload-net"]);
        assert!(m.is_provisioned());
        assert_eq!(m.role, Role::Worker);
    }

    #[test]
    fn errors_name_the_field() {
        let err = machine_from_object(&machine(
            json!({"extraOvdcNetworks": ["storage-net", {"name": "x"}]}),
        ))
        .unwrap_err();
        assert_eq!(err.field, "spec.extraOvdcNetworks[1]");
        let mut old = machine(json!({}));
        old["apiVersion"] = json!("infrastructure.cluster.x-k8s.io/v1alpha4");
        assert_eq!(machine_from_object(&old).unwrap_err().field, "apiVersion");
        let mut other = machine(json!({}));
        other["kind"] = json!("VCDCluster");
        assert_eq!(machine_from_object(&other).unwrap_err().field, "kind");
    }

    #[test]
    fn a_template_merges_labels_of_both_levels() {
        let (kind, m) = machine_from_object(&json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "VCDMachineTemplate",
            "metadata": {"name": "prod-eu1-control-plane", "labels": {"team": "platform"}},
            "spec": {"template": {"metadata": {"labels": {"cluster.x-k8s.io/control-plane": ""}},
                                  "spec": {"extraOvdcNetworks": ["storage-net"]}}}
        }))
        .expect("reads");
        assert_eq!(kind, ObjectKind::VcdMachineTemplate);
        assert_eq!(m.role, Role::ControlPlane);
        assert_eq!(m.labels["team"], "platform");
    }

    #[test]
    fn a_cluster_is_read_with_its_zones() {
        let cluster = cluster_from_object(&json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta3", "kind": "VCDCluster",
            "metadata": {"name": "prod-eu1", "namespace": "prod-eu1"},
            "spec": {"multiZoneSpec": {"zoneTopology": "UserSpecifiedEdgeGateway", "zones": [
                {"name": "zone-a", "ovdcName": "eu1-ovdc-a", "ovdcNetworkName": "mgmt-net-a"}]}}
        }))
        .expect("reads");
        assert_eq!(cluster.zones[0].ovdc, "eu1-ovdc-a");
        assert_eq!(cluster.zones[0].ovdc_network_name, "mgmt-net-a");
    }

    #[test]
    fn inventory_checks_addresses() {
        let err = inventory_from_object(&json!({"networks": [
            {"name": "storage-net", "gateway": "10.20.0.1", "prefixLength": 24,
             "staticIpRanges": [{"start": "10.20.0.50", "end": "10.20.0.10"}]}
        ]}))
        .unwrap_err();
        assert_eq!(err.field, "networks[0].staticIpRanges[0]");
    }

    #[test]
    fn cluster_name_comes_from_the_label_or_the_owner() {
        let labelled =
            json!({"metadata": {"labels": {"cluster.x-k8s.io/cluster-name": "prod-eu1"}}});
        assert_eq!(cluster_name_of(&labelled).as_deref(), Some("prod-eu1"));
        let owned = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "Cluster", "name": "not-capi"},
            {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "name": "prod-eu1"}
        ]}});
        assert_eq!(cluster_name_of(&owned).as_deref(), Some("prod-eu1"));
        assert_eq!(cluster_name_of(&json!({"metadata": {}})), None);
    }

    #[test]
    fn one_builder_makes_every_request() {
        let machine = crate::testing::worker(&["storage-net"]).machine;
        let cluster = crate::testing::worker(&[]).cluster;
        let create = policy_request(
            ObjectKind::VcdMachine,
            machine.clone(),
            None,
            Ok(cluster.clone()),
            None,
        );
        assert_eq!(create.operation, Operation::Create);
        assert!(!create.cluster_unknown && !create.same_cluster_as_stored && !create.baseline);
        assert_eq!(create.cluster, cluster);
        assert!(create.settings.is_null());

        let stored = Stored {
            machine: machine.clone(),
            same_cluster: true,
        };
        let update = policy_request(
            ObjectKind::VcdMachine,
            machine.clone(),
            Some(stored),
            Err("prod-eu1".to_string()),
            None,
        );
        assert_eq!(update.operation, Operation::Update);
        assert_eq!(update.old_machine.as_ref(), Some(&machine));
        assert!(update.same_cluster_as_stored);
        // Not known: a stand-in of that name in the machine's namespace, and said so.
        assert!(update.cluster_unknown);
        assert_eq!(
            update.cluster,
            Cluster::unknown("prod-eu1", &machine.namespace)
        );
    }

    #[test]
    fn infrastructure_ref_reads_both_cluster_api_shapes_and_checks_the_group() {
        let v1beta1: Value = json!({"spec": {"infrastructureRef": {
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta3", "kind": "VCDCluster", "name": "prod-eu1"}}});
        assert_eq!(infrastructure_ref(&v1beta1, "Cluster").unwrap(), "prod-eu1");
        let v1beta2: Value = json!({"spec": {"infrastructureRef": {
            "apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "VCDCluster", "name": "prod-eu2"}}});
        assert_eq!(infrastructure_ref(&v1beta2, "Cluster").unwrap(), "prod-eu2");
        let other: Value = json!({"spec": {"infrastructureRef": {
            "apiGroup": "infrastructure.example.net", "kind": "VCDCluster", "name": "lab"}}});
        let err = infrastructure_ref(&other, "Cluster lab/lab").unwrap_err();
        assert!(
            err.contains(
                "spec.infrastructureRef.apiGroup names the group \"infrastructure.example.net\""
            ),
            "{err}"
        );
        let other: Value = json!({"spec": {"infrastructureRef": {
            "apiVersion": "infrastructure.example.net/v1", "kind": "VCDCluster", "name": "lab"}}});
        let err = infrastructure_ref(&other, "Cluster lab/lab").unwrap_err();
        assert!(err.contains("spec.infrastructureRef.apiVersion"), "{err}");
    }

    #[test]
    fn infrastructure_ref_must_be_a_vcd_cluster() {
        let capo =
            json!({"spec": {"infrastructureRef": {"kind": "OpenStackCluster", "name": "os1"}}});
        let err = infrastructure_ref(&capo, "Cluster lab/os1").unwrap_err();
        assert!(err.contains("OpenStackCluster"), "{err}");
        let vcd =
            json!({"spec": {"infrastructureRef": {"kind": "VCDCluster", "name": "prod-eu1-vcd"}}});
        assert_eq!(infrastructure_ref(&vcd, "Cluster").unwrap(), "prod-eu1-vcd");
    }
}
