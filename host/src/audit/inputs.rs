//! Manifests to [`Subject`]s: every VCDMachine and VCDMachineTemplate with the request its
//! policy sees, its cluster found as the webhook finds it ([`StaticClusters::find`]), or the
//! reason it cannot be evaluated. One bad object or file never stops the others.

use std::collections::BTreeSet;
use std::fmt;
use std::path::PathBuf;

use nicpolicy_plugin::objects::policy_request;
use nicpolicy_plugin::{Request, Role};
use serde::Serialize;
use serde_json::Value;

use crate::clusters::{
    as_capvcd_reads, cluster_name_of, namespace_of, ClusterGroup, Owner, StaticClusters,
};
use crate::inventories::Inventories;
use nicpolicy_engine::cases::{self, CaseError};
use nicpolicy_inputs::manifest::{
    ManifestError, ManifestFile, Object, CAPVCD_GROUP, SUPPORTED_VERSIONS,
};

/// CAPVCD versions that predate `spec.extraOvdcNetworks`: their objects are reported as not
/// checked rather than refused.
const VERSIONS_WITHOUT_NETWORKS: [&str; 2] = ["v1alpha4", "v1beta1"];

/// Which object a result is about.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectId {
    /// `VCDMachine` or `VCDMachineTemplate`.
    pub kind: String,
    /// Its namespace (`default` when the manifest gives none).
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Where it was read: the file, and the document or list item in it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// `metadata.uid`, for objects read from an API server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Its `apiVersion` as read (from an API server: the version it was listed at), for
    /// references to it in reports and Events.
    #[serde(skip)]
    pub api_version: Option<String>,
}

impl ObjectId {
    /// The `apiVersion` to name this object by: as read, else CAPVCD's released storage version.
    pub fn api_version(&self) -> String {
        self.api_version.clone().unwrap_or_else(|| {
            format!(
                "{}/{}",
                nicpolicy_inputs::manifest::CAPVCD_GROUP,
                SUPPORTED_VERSIONS[0]
            )
        })
    }
}

#[cfg(test)]
impl ObjectId {
    /// A VCDMachine `name` in prod-eu1 read from no file.
    pub(crate) fn worker_for_tests(name: &str) -> ObjectId {
        ObjectId {
            kind: "VCDMachine".into(),
            namespace: "prod-eu1".into(),
            name: name.into(),
            source: None,
            uid: None,
            api_version: None,
        }
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// Why an object was not evaluated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// The object is of an API version without the network fields: nothing to check.
    #[error("{0}")]
    Unsupported(String),
    /// The object cannot be read (a field of the wrong type, an unknown API version).
    #[error("{0}")]
    Invalid(String),
}

/// One machine to evaluate.
#[derive(Clone, Debug)]
pub struct Subject {
    /// The object.
    pub object: ObjectId,
    /// The cluster it belongs to, when known (also when the cluster could not be read).
    pub group: Option<ClusterGroup>,
    /// The request for its policy, or why there is none.
    pub input: Result<Request, Problem>,
    /// Why its cluster is not known, when the request was made without one
    /// ([`Request::cluster_unknown`]).
    pub cluster_unknown: Option<String>,
}

/// Why the inputs could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// A folder could not be listed.
    #[error(transparent)]
    List(#[from] CaseError),
    /// A path given on the command line does not exist.
    #[error("{}: no such file or directory", .0.display())]
    Missing(PathBuf),
}

/// Manifests read for an audit, and the clusters found in them.
#[derive(Debug, Default)]
pub struct Inputs {
    /// The files that parsed.
    pub files: Vec<ManifestFile>,
    /// The files that did not (malformed YAML, unreadable): reported, not fatal.
    pub unreadable: Vec<ManifestError>,
    clusters: StaticClusters,
    /// `(namespace, name)` of the VCDMachineTemplates KubeadmControlPlanes use.
    control_plane_templates: BTreeSet<(String, String)>,
}

impl Inputs {
    /// Reads `paths`: files, and folders searched recursively for `.yaml`, `.yml` and `.json`
    /// files (such as a GitOps repository of many clusters).
    ///
    /// # Errors
    /// A path that does not exist or a folder that cannot be listed. Files that do not parse
    /// are kept in [`Inputs::unreadable`].
    pub fn read(paths: &[PathBuf]) -> Result<Inputs, InputError> {
        if let Some(missing) = paths.iter().find(|p| !p.exists()) {
            return Err(InputError::Missing(missing.clone()));
        }
        let mut inputs = Inputs::default();
        for path in cases::discover(paths)? {
            match ManifestFile::read(&path) {
                Ok(file) => inputs.add(file),
                Err(err) => inputs.unreadable.push(err),
            }
        }
        Ok(inputs)
    }

    /// Inputs made of files already parsed (for example, objects listed from an API server).
    pub fn from_files(files: Vec<ManifestFile>) -> Inputs {
        let mut inputs = Inputs::default();
        files.into_iter().for_each(|file| inputs.add(file));
        inputs
    }

    /// Adds one parsed file.
    pub fn add(&mut self, file: ManifestFile) {
        self.clusters.add(&file);
        self.control_plane_templates
            .extend(file.control_plane_templates());
        self.files.push(file);
    }

    /// How many machines and machine templates the files hold.
    pub fn machine_count(&self) -> usize {
        self.files.iter().map(|file| file.machines().count()).sum()
    }

    /// Every machine and machine template, in file order, each with its request (a CREATE of
    /// the object as it is, with the inventory of its org VDC from `inventories`) or the reason
    /// it cannot be evaluated.
    pub fn subjects(&self, inventories: &Inventories) -> Vec<Subject> {
        let mut subjects = Vec::with_capacity(self.machine_count());
        for file in &self.files {
            for object in file.machines() {
                subjects.push(self.subject(file, object, inventories));
            }
        }
        subjects
    }

    fn subject(&self, file: &ManifestFile, object: &Object, inventories: &Inventories) -> Subject {
        let namespace = namespace_of(&object.value);
        let source = if object.position.is_empty() {
            file.path.display().to_string()
        } else {
            format!("{}: {}", file.path.display(), object.position)
        };
        let id = ObjectId {
            kind: object.kind().to_string(),
            namespace: namespace.to_string(),
            name: object.name().to_string(),
            source: Some(source),
            uid: object
                .value
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .map(str::to_string),
            api_version: object
                .value
                .get("apiVersion")
                .and_then(Value::as_str)
                .map(str::to_string),
        };
        let named_group = cluster_name_of(&object.value).map(|name| ClusterGroup {
            kind: "Cluster",
            namespace: namespace.to_string(),
            name,
        });
        if let Some(problem) = unsupported_version(&object.value) {
            return Subject {
                object: id,
                group: named_group,
                input: Err(problem),
                cluster_unknown: None,
            };
        }
        // As CAPVCD reads it: a VCDMachine's cluster and role are its owner Machine's, where the
        // Machine is among the inputs (a live cluster's are; manifest folders rarely hold any).
        let relabelled = match as_capvcd_reads(&self.clusters, &object.value, &id.to_string()) {
            Owner::Relabelled(value, _) => Some(Object {
                value,
                position: object.position.clone(),
            }),
            Owner::None | Owner::Agrees | Owner::Missing(_) => None,
        };
        let object = relabelled.as_ref().unwrap_or(object);
        let named_group = cluster_name_of(&object.value).map(|name| ClusterGroup {
            kind: "Cluster",
            namespace: namespace.to_string(),
            name,
        });
        let machine = match file.machine_object(object) {
            Ok(machine) => machine,
            Err(err) => {
                return Subject {
                    object: id,
                    group: named_group,
                    input: Err(Problem::Invalid(err.to_string())),
                    cluster_unknown: None,
                }
            }
        };
        let (kind, mut machine) = machine;
        if machine.namespace.is_empty() {
            machine.namespace = namespace.to_string();
        }
        let (group, cluster, cluster_unknown) = match self.clusters.find(&object.value, &file.path)
        {
            Ok(found) => {
                // A template named by a KubeadmControlPlane is a control-plane template:
                // clusterctl outputs label neither kind.
                if found.control_plane
                    || self
                        .control_plane_templates
                        .contains(&(namespace.to_string(), id.name.clone()))
                {
                    machine.role = Role::ControlPlane;
                }
                (Some(found.group), Ok(found.cluster), None)
            }
            // As the webhook does (onUnknownCluster: CheckWithoutCluster): the rules that need
            // no cluster still apply, the cluster's are left out and the reason said.
            Err(err) => {
                let name = cluster_name_of(&object.value).unwrap_or_default();
                let why = format!(
                    "cluster not known, checked without it (rules on the cluster's networks not applied): {err}"
                );
                (named_group, Err(name), Some(why))
            }
        };
        let inventory = inventories.for_machine(cluster.as_ref().ok(), &machine);
        Subject {
            object: id,
            group,
            // A CREATE: nothing stored to excuse.
            input: Ok(policy_request(kind, machine, None, cluster, inventory)),
            cluster_unknown,
        }
    }
}

/// The answer for a CAPVCD object of a version that predates the network fields, which the
/// policies cannot check: not an error in the manifests, but nothing nicpolicy can judge.
pub fn unsupported_version(object: &Value) -> Option<Problem> {
    let api_version = object.get("apiVersion").and_then(Value::as_str)?;
    let (group, version) = api_version.split_once('/')?;
    (group == CAPVCD_GROUP && VERSIONS_WITHOUT_NETWORKS.contains(&version)).then(|| {
        Problem::Unsupported(format!(
            "not checked: {api_version} has no network fields (spec.extraOvdcNetworks came with {CAPVCD_GROUP}/{}); \
             the API server stores it as {CAPVCD_GROUP}/{} (CAPVCD v1.3.2) or {} (main), so audit the cluster or convert the manifest",
            SUPPORTED_VERSIONS[0], SUPPORTED_VERSIONS[0], SUPPORTED_VERSIONS[1]
        ))
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn inputs(text: &str) -> Inputs {
        Inputs::from_files(vec![ManifestFile::parse(
            Path::new("clusters/prod-eu1.yaml"),
            text,
        )
        .expect("parses")])
    }

    const CLUSTER: &str = r#"
apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata: {name: prod-eu1, namespace: prod-eu1}
spec:
  infrastructureRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1beta3, kind: VCDCluster, name: prod-eu1}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta3
kind: VCDCluster
metadata: {name: prod-eu1, namespace: prod-eu1}
spec: {ovdc: eu1-ovdc, ovdcNetwork: mgmt-net}
"#;

    #[test]
    fn a_null_spec_reads_as_an_empty_one() {
        let text = format!(
            "{CLUSTER}---\napiVersion: infrastructure.cluster.x-k8s.io/v1beta3\nkind: VCDMachine\nmetadata:\n  name: prod-eu1-md-0-a\n  namespace: prod-eu1\n  labels: {{cluster.x-k8s.io/cluster-name: prod-eu1}}\nspec:\n  # filled in by the MachineDeployment\n"
        );
        let subjects = inputs(&text).subjects(&Default::default());
        let request = subjects[0].input.as_ref().expect("evaluable");
        assert!(request.machine.extra_ovdc_networks.is_empty());
        assert_eq!(request.cluster.ovdc_network, "mgmt-net");
    }

    #[test]
    fn old_versions_are_answered_per_object() {
        let text = format!(
            "{CLUSTER}---\napiVersion: infrastructure.cluster.x-k8s.io/v1beta1\nkind: VCDMachine\nmetadata: {{name: old, namespace: prod-eu1}}\nspec: {{}}\n---\napiVersion: infrastructure.cluster.x-k8s.io/v1beta3\nkind: VCDMachine\nmetadata: {{name: new, namespace: prod-eu1}}\nspec: {{extraOvdcNetworks: [storage-net]}}\n"
        );
        let subjects = inputs(&text).subjects(&Default::default());
        assert!(
            matches!(&subjects[0].input, Err(Problem::Unsupported(m)) if m.contains("v1beta1")),
            "{:?}",
            subjects[0].input
        );
        // The machine without a label falls back to the only VCDCluster of its file, grouped
        // under the Cluster that points at it.
        let request = subjects[1].input.as_ref().expect("evaluable");
        assert_eq!(request.machine.extra_ovdc_networks, ["storage-net"]);
        assert_eq!(request.cluster.name, "prod-eu1");
        let group = subjects[1].group.as_ref().expect("grouped");
        assert_eq!((group.kind, group.name.as_str()), ("Cluster", "prod-eu1"));
    }

    #[test]
    fn a_cluster_class_gives_its_templates_a_cluster_and_a_role() {
        let text = r#"
apiVersion: cluster.x-k8s.io/v1beta1
kind: ClusterClass
metadata: {name: capvcd-class, namespace: fleet}
spec:
  infrastructure: {ref: {apiVersion: infrastructure.cluster.x-k8s.io/v1beta3, kind: VCDClusterTemplate, name: capvcd-cluster}}
  controlPlane:
    ref: {kind: KubeadmControlPlaneTemplate, name: capvcd-cp}
    machineInfrastructure: {ref: {kind: VCDMachineTemplate, name: capvcd-cp-machine}}
  workers:
    machineDeployments:
    - class: default-worker
      template:
        infrastructure: {ref: {kind: VCDMachineTemplate, name: capvcd-worker}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta3
kind: VCDClusterTemplate
metadata: {name: capvcd-cluster, namespace: fleet}
spec: {template: {spec: {ovdc: eu1-ovdc, ovdcNetwork: mgmt-net}}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta3
kind: VCDMachineTemplate
metadata: {name: capvcd-cp-machine, namespace: fleet}
spec: {template: {spec: {}}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta3
kind: VCDMachineTemplate
metadata: {name: capvcd-worker, namespace: fleet}
spec: {template: {spec: {extraOvdcNetworks: [storage-net]}}}
"#;
        let subjects = inputs(text).subjects(&Default::default());
        let cp = subjects[0].input.as_ref().expect("evaluable");
        assert_eq!(cp.machine.role, Role::ControlPlane);
        assert_eq!(cp.cluster.ovdc_network, "mgmt-net");
        assert_eq!(cp.cluster.name, "capvcd-cluster");
        let worker = subjects[1].input.as_ref().expect("evaluable");
        assert_eq!(worker.machine.role, Role::Worker);
        let group = subjects[1].group.as_ref().expect("grouped");
        assert_eq!(
            (group.kind, group.name.as_str()),
            ("ClusterClass", "capvcd-class")
        );
    }

    #[test]
    fn machines_of_an_absent_cluster_are_reported_not_dropped() {
        let text = format!(
            "{CLUSTER}---\napiVersion: infrastructure.cluster.x-k8s.io/v1beta3\nkind: VCDMachine\nmetadata:\n  name: prod-us1-md-0-a\n  namespace: prod-us1\n  labels: {{cluster.x-k8s.io/cluster-name: prod-us1}}\nspec: {{extraOvdcNetworks: [storage-net]}}\n"
        );
        let subjects = inputs(&text).subjects(&Default::default());
        // Checked as the webhook checks a machine whose cluster it cannot find: without it.
        let request = subjects[0].input.as_ref().expect("evaluable");
        assert!(request.cluster_unknown);
        assert_eq!(request.cluster.name, "prod-us1");
        assert!(request.cluster.ovdc_network.is_empty());
        assert!(
            subjects[0]
                .cluster_unknown
                .as_deref()
                .is_some_and(|why| why.contains("prod-us1")),
            "{:?}",
            subjects[0].cluster_unknown
        );
        assert_eq!(
            subjects[0].group.as_ref().map(|g| g.name.as_str()),
            Some("prod-us1")
        );
    }
}
