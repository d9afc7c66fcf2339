//! Reading CAPVCD's Kubernetes objects into the schema: a VCDMachine or VCDMachineTemplate into
//! a [`Machine`], a VCDCluster into a [`Cluster`], and the steps Cluster API takes from a machine
//! to its VCDCluster (cluster-name label or owner Cluster, then the Cluster's
//! `spec.infrastructureRef`).
//!
//! The host reads manifests and AdmissionReviews with these functions; a policy built for an
//! engine that hands it whole objects (Kubewarden) reads them with the same ones, so both see
//! the same machine. Objects are read at `infrastructure.cluster.x-k8s.io/v1beta3` and
//! `v1beta2`, whose network fields are the same; unknown fields are ignored.

use std::fmt;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::schema::{Cluster, Machine, ObjectKind, Zone, CLUSTER_NAME_LABEL};

/// API group of CAPVCD's kinds.
pub const CAPVCD_GROUP: &str = "infrastructure.cluster.x-k8s.io";
/// Versions whose network fields are read.
pub const SUPPORTED_VERSIONS: [&str; 2] = ["v1beta3", "v1beta2"];

/// A field of an object that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Path of the field inside the object, like `spec.extraOvdcNetworks[1]` (empty for the
    /// object as a whole).
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

/// Checks that the object is of CAPVCD's group at a version whose network fields are read.
pub fn check_api_version(object: &Value) -> Result<(), FieldError> {
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
        format!("{api_version:?} is not supported; use {CAPVCD_GROUP}/v1beta3 (or v1beta2)"),
    ))
}

/// Reads a VCDMachine or VCDMachineTemplate (by its `kind`) into a [`Machine`]. A template's
/// labels and annotations are its own merged with those of `spec.template.metadata`.
pub fn read_machine(object: &Value) -> Result<(ObjectKind, Machine), FieldError> {
    check_api_version(object)?;
    match object.get("kind").and_then(Value::as_str) {
        Some("VCDMachine") => {
            let m: crd::VcdMachine = typed(object)?;
            let labels = m.metadata.labels.unwrap_or_default();
            Ok((
                ObjectKind::VcdMachine,
                Machine {
                    name: m.metadata.name.unwrap_or_default(),
                    namespace: m.metadata.namespace.unwrap_or_default(),
                    role: Machine::role_from_labels(&labels),
                    labels,
                    annotations: m.metadata.annotations.unwrap_or_default(),
                    failure_domain: m.spec.failure_domain,
                    extra_ovdc_networks: m.spec.extra_ovdc_networks.unwrap_or_default(),
                    provider_id: m.spec.provider_id,
                },
            ))
        }
        Some("VCDMachineTemplate") => {
            let t: crd::VcdMachineTemplate = typed(object)?;
            let inner = t.spec.template;
            let mut labels = t.metadata.labels.unwrap_or_default();
            labels.extend(inner.metadata.labels.unwrap_or_default());
            let mut annotations = t.metadata.annotations.unwrap_or_default();
            annotations.extend(inner.metadata.annotations.unwrap_or_default());
            Ok((
                ObjectKind::VcdMachineTemplate,
                Machine {
                    name: t.metadata.name.unwrap_or_default(),
                    namespace: t.metadata.namespace.unwrap_or_default(),
                    role: Machine::role_from_labels(&labels),
                    labels,
                    annotations,
                    failure_domain: inner.spec.failure_domain,
                    extra_ovdc_networks: inner.spec.extra_ovdc_networks.unwrap_or_default(),
                    provider_id: inner.spec.provider_id,
                },
            ))
        }
        other => Err(FieldError::new(
            "kind",
            format!(
                "{:?} is not a VCDMachine or VCDMachineTemplate",
                other.unwrap_or_default()
            ),
        )),
    }
}

/// Reads a VCDCluster into a [`Cluster`].
pub fn read_vcd_cluster(object: &Value) -> Result<Cluster, FieldError> {
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
/// namespace is the Cluster's in every Cluster API version). `at` names the Cluster in errors.
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
    reference
        .get("name")
        .and_then(Value::as_str)
        .filter(|name| !name.is_empty())
        .map(str::to_string)
        .ok_or_else(|| format!("{at}: spec.infrastructureRef has no name"))
}

/// The parts of CAPVCD's objects that are read. Unknown fields are ignored: real objects carry
/// many more.
mod crd {
    use std::collections::BTreeMap;

    use serde::Deserialize;

    #[derive(Deserialize, Default)]
    #[serde(rename_all = "camelCase")]
    pub struct ObjectMeta {
        pub name: Option<String>,
        pub namespace: Option<String>,
        pub labels: Option<BTreeMap<String, String>>,
        pub annotations: Option<BTreeMap<String, String>>,
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
    fn a_bad_field_is_named() {
        let machine = json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta3", "kind": "VCDMachine",
            "metadata": {"name": "prod-eu1-md-0-x7k2p"},
            "spec": {"extraOvdcNetworks": ["storage-net", 7]}
        });
        let err = read_machine(&machine).unwrap_err();
        assert_eq!(err.field, "spec.extraOvdcNetworks[1]");
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
