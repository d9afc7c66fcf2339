//! Finding a machine's VCDCluster the way Cluster API does: the machine's
//! `cluster.x-k8s.io/cluster-name` label (or, for a template, its owner Cluster) names the
//! `Cluster`, whose `spec.infrastructureRef` names the VCDCluster in the same namespace.
//!
//! Two sources implement [`ClusterSource`]: [`StaticClusters`] here (manifest files, for
//! offline use, the playground and tests) and the host's `clusters::live::KubeClusters`
//! (watch-fed caches of the API server's objects, so a review never waits on an API call).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use nicpolicy_plugin::Cluster;
use serde_json::Value;

use nicpolicy_plugin::objects::{self, cluster_from_object};
pub use nicpolicy_plugin::objects::{cluster_name_of, OwnerMachine};

use crate::manifest::{ManifestError, ManifestFile};

/// Why a machine's cluster could not be found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// The machine names no cluster.
    #[error("the {kind} names no cluster: it has no cluster.x-k8s.io/cluster-name label{owner}")]
    Unnamed {
        /// VCDMachine or VCDMachineTemplate.
        kind: &'static str,
        /// Hint about owner references (templates).
        owner: &'static str,
    },
    /// No such Cluster or VCDCluster.
    #[error("{0}")]
    NotFound(String),
    /// The objects exist but cannot be read.
    #[error("{0}")]
    Invalid(String),
    /// The caches have not finished their first listing yet.
    #[error("the cluster cache is still syncing with the API server")]
    NotReady,
}

/// Where the webhook looks up VCDClusters. Implementations must answer from memory: a review
/// runs within kube-apiserver's webhook timeout.
pub trait ClusterSource: Send + Sync {
    /// The VCDCluster of Cluster API cluster `cluster_name` in `namespace`.
    fn vcd_cluster(&self, namespace: &str, cluster_name: &str) -> Result<Cluster, LookupError>;

    /// Whether lookups can be answered (caches synced).
    fn ready(&self) -> bool {
        true
    }

    /// Why the source should not be sent reviews now, for a readiness probe: `None` when it
    /// can answer well. By default, the caches not synced yet.
    fn unready_reason(&self) -> Option<String> {
        (!self.ready()).then(|| "cluster cache not synced yet".to_string())
    }

    /// Names of the VCDClusters in `namespace`, sorted (to tell a machine without a cluster
    /// whether the namespace's only VCDCluster was used).
    fn vcd_clusters_in(&self, namespace: &str) -> Vec<String> {
        let _ = namespace;
        Vec::new()
    }

    /// Whether Cluster API cluster `cluster_name` in `namespace` is paused (`spec.paused`), as
    /// `clusterctl move` pauses it while it copies the objects; false when not known.
    fn cluster_paused(&self, namespace: &str, cluster_name: &str) -> bool {
        let _ = (namespace, cluster_name);
        false
    }

    /// Cluster API Machine `name` in `namespace` (its labels), when the source knows it.
    fn machine(&self, namespace: &str, name: &str) -> Option<OwnerMachine> {
        let _ = (namespace, name);
        None
    }

    /// Whether the source holds Machines at all (cluster files often hold none): where it
    /// does not, an owner Machine it does not know is no news.
    fn knows_machines(&self) -> bool {
        false
    }
}

/// Whether a Cluster object is paused (`spec.paused: true`).
pub fn is_paused(cluster: &Value) -> bool {
    cluster.pointer("/spec/paused").and_then(Value::as_bool) == Some(true)
}

/// How a VCDMachine's owner Machine bears on its judgement ([`as_capvcd_reads`]).
#[derive(Debug)]
pub enum Owner {
    /// Not a VCDMachine, or no owner Machine yet (Cluster API's MachineSet creates the
    /// VCDMachine first), or a source that holds no Machines: judged by its own labels.
    None,
    /// The owner Machine's labels agree with the VCDMachine's.
    Agrees,
    /// They disagree: the VCDMachine as the Machine says (relabelled), and the warning.
    Relabelled(Value, String),
    /// The owner Machine is named but not known to the source (not created yet, or not in
    /// the cache): judged by its own labels, with this warning.
    Missing(String),
}

/// A VCDMachine object as CAPVCD reads it: CAPVCD takes the cluster and the role from the owner
/// Machine ([`objects::owner_machine_name`]), never from the VCDMachine's labels, so where the
/// Machine is known its labels decide ([`objects::as_owner_says`]). The one rule of the
/// webhook, the controller, `audit` and `review` (docs/schema.md, "Finding a machine's
/// cluster").
pub fn as_capvcd_reads(source: &dyn ClusterSource, object: &Value, display: &str) -> Owner {
    if object.get("kind").and_then(Value::as_str) != Some("VCDMachine") {
        return Owner::None;
    }
    let Some(name) = objects::owner_machine_name(object) else {
        return Owner::None;
    };
    let namespace = namespace_of(object);
    match source.machine(namespace, name) {
        Some(owner) => match objects::as_owner_says(object, &owner, display) {
            Some((relabelled, warning)) => Owner::Relabelled(relabelled, warning),
            None => Owner::Agrees,
        },
        None if !source.knows_machines() => Owner::None,
        None => Owner::Missing(format!(
            "{display} is owned by Machine {name}, which is not known (yet): judged by the \
             VCDMachine's own labels"
        )),
    }
}

/// The VCDCluster a Cluster object points at (see [`objects::infrastructure_ref`]).
pub fn infrastructure_ref(cluster: &Value, at: &str) -> Result<String, LookupError> {
    objects::infrastructure_ref(cluster, at).map_err(LookupError::Invalid)
}

/// Reads a VCDCluster object into the schema's [`Cluster`]; `label` names it in errors.
pub fn read_vcd_cluster(object: &Value, label: &str) -> Result<Cluster, LookupError> {
    cluster_from_object(object).map_err(|err| LookupError::Invalid(format!("{label}: {err}")))
}

/// `(namespace, name)` of an object; objects without a namespace are in `default`, as kubectl
/// would create them.
type Key = (String, String);

/// An object's namespace, `default` when it names none.
pub use crate::manifest::namespace_or_default as namespace_of;

fn key_of(object: &Value) -> Key {
    let namespace = namespace_of(object);
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    (namespace.to_string(), name.to_string())
}

/// What a machine was matched with, for grouping results by cluster.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct ClusterGroup {
    /// `Cluster` (found through the machine's cluster name), `ClusterClass` (a template of a
    /// class), `VCDCluster` or `VCDClusterTemplate` (the only one in the files).
    pub kind: &'static str,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// A machine's cluster as [`StaticClusters::find`] found it.
#[derive(Clone, Debug)]
pub struct Found {
    /// The VCDCluster (or the spec of a VCDClusterTemplate) the policy sees.
    pub cluster: Cluster,
    /// What the machine belongs to.
    pub group: ClusterGroup,
    /// The template is the control-plane machine template of a ClusterClass, which CAPI labels
    /// `cluster.x-k8s.io/control-plane` only in the copies it makes.
    pub control_plane: bool,
}

/// Cluster, VCDCluster, VCDClusterTemplate and ClusterClass objects read from manifest files.
#[derive(Debug, Default)]
pub struct StaticClusters {
    clusters: HashMap<Key, Value>,
    vcd_clusters: HashMap<Key, Value>,
    cluster_templates: HashMap<Key, Value>,
    classes: HashMap<Key, Value>,
    /// Cluster API Machines: what a VCDMachine's owner says of its cluster and role.
    machines: HashMap<Key, OwnerMachine>,
    /// The VCDClusters and VCDClusterTemplates of each file, for machines that name no cluster.
    by_file: HashMap<PathBuf, (Vec<Key>, Vec<Key>)>,
}

impl StaticClusters {
    /// Reads every Cluster (`cluster.x-k8s.io`) and VCDCluster in `files`, checking each
    /// VCDCluster now, so a bad file fails at start rather than per review.
    pub fn read(files: &[PathBuf]) -> Result<StaticClusters, ManifestError> {
        let mut source = StaticClusters::default();
        for path in files {
            let file = ManifestFile::read(path)?;
            for object in file.of_kinds(&["VCDCluster"]) {
                let label = format!("{}: VCDCluster {}", path.display(), object.name());
                read_vcd_cluster(&object.value, &label).map_err(|err| ManifestError::Field {
                    path: path.clone(),
                    field: object.position.clone(),
                    message: err.to_string(),
                })?;
            }
            source.add(&file);
        }
        Ok(source)
    }

    /// Adds the Clusters, Machines, VCDClusters, VCDClusterTemplates and ClusterClasses of
    /// `file`. They
    /// are read when a machine is matched with them: a bad one fails that machine only.
    pub fn add(&mut self, file: &ManifestFile) {
        let (vcds, templates) = self.by_file.entry(file.path.clone()).or_default();
        for object in &file.objects {
            let key = key_of(&object.value);
            let api_version = object
                .value
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or("");
            let capi = api_version.starts_with("cluster.x-k8s.io/");
            let map = match object.kind() {
                "Machine" if capi => {
                    self.machines
                        .insert(key, OwnerMachine::from_object(&object.value));
                    continue;
                }
                "Cluster" if capi => &mut self.clusters,
                "ClusterClass" if capi => &mut self.classes,
                // A file read twice (`eval --cluster` naming the machine file) counts once.
                "VCDCluster" => {
                    if !vcds.contains(&key) {
                        vcds.push(key.clone());
                    }
                    &mut self.vcd_clusters
                }
                "VCDClusterTemplate" => {
                    if !templates.contains(&key) {
                        templates.push(key.clone());
                    }
                    &mut self.cluster_templates
                }
                _ => continue,
            };
            map.insert(key, object.value.clone());
        }
    }

    /// How many VCDClusters were read.
    pub fn len(&self) -> usize {
        self.vcd_clusters.len()
    }

    /// Whether no VCDCluster was read.
    pub fn is_empty(&self) -> bool {
        self.vcd_clusters.is_empty()
    }

    /// The cluster of `machine` (a VCDMachine or VCDMachineTemplate read from `file`), found as
    /// the webhook finds it (cluster-name label or owner Cluster, then the Cluster's
    /// infrastructureRef); for a template that names no cluster, the VCDClusterTemplate of the
    /// ClusterClass that uses it; for any other machine that names none, the only VCDCluster
    /// (else VCDClusterTemplate) of its file, else of all the files.
    pub fn find(&self, machine: &Value, file: &Path) -> Result<Found, LookupError> {
        let (namespace, name) = key_of(machine);
        if let Some(cluster_name) = cluster_name_of(machine) {
            return Ok(Found {
                cluster: self.vcd_cluster(&namespace, &cluster_name)?,
                group: ClusterGroup {
                    kind: "Cluster",
                    namespace,
                    name: cluster_name,
                },
                control_plane: false,
            });
        }
        let template = machine.get("kind").and_then(Value::as_str) == Some("VCDMachineTemplate");
        if template {
            if let Some(found) = self.class_of_template(&namespace, &name)? {
                return Ok(found);
            }
        }
        let no_cluster = || LookupError::Unnamed {
            kind: if template {
                "VCDMachineTemplate"
            } else {
                "VCDMachine"
            },
            owner: if template {
                ", no Cluster owner reference, no ClusterClass using it, and the files hold no single VCDCluster or VCDClusterTemplate to use"
            } else {
                ", and the files hold no single VCDCluster to use"
            },
        };
        let (file_vcds, file_templates) = self.by_file.get(file).cloned().unwrap_or_default();
        let all_vcds: Vec<Key> = self.vcd_clusters.keys().cloned().collect();
        let all_templates: Vec<Key> = self.cluster_templates.keys().cloned().collect();
        let mut choices = vec![(file_vcds, false), (all_vcds, false)];
        // Only templates are evaluated against a VCDClusterTemplate: a VCDMachine is a VM of
        // a real cluster.
        if template {
            choices.insert(1, (file_templates, true));
            choices.push((all_templates, true));
        }
        for (keys, is_template) in choices {
            match keys.as_slice() {
                [] => continue,
                [key] if !is_template => {
                    return Ok(Found {
                        cluster: self.vcd_cluster(&key.0, &key.1)?,
                        group: self.owner_of(key),
                        control_plane: false,
                    })
                }
                [key] => {
                    return Ok(Found {
                        cluster: self.template_cluster(&key.0, &key.1)?,
                        group: ClusterGroup {
                            kind: "VCDClusterTemplate",
                            namespace: key.0.clone(),
                            name: key.1.clone(),
                        },
                        control_plane: false,
                    })
                }
                _ => return Err(no_cluster()),
            }
        }
        Err(no_cluster())
    }

    /// The Cluster whose infrastructureRef names the VCDCluster `key`, else the VCDCluster.
    fn owner_of(&self, key: &Key) -> ClusterGroup {
        let mut owners: Vec<&Key> = self
            .clusters
            .iter()
            .filter(|((ns, name), cluster)| {
                *ns == key.0
                    && infrastructure_ref(cluster, &format!("Cluster {ns}/{name}"))
                        .ok()
                        .as_ref()
                        == Some(&key.1)
            })
            .map(|(k, _)| k)
            .collect();
        owners.sort();
        match owners.first() {
            Some((ns, name)) => ClusterGroup {
                kind: "Cluster",
                namespace: ns.clone(),
                name: name.clone(),
            },
            None => ClusterGroup {
                kind: "VCDCluster",
                namespace: key.0.clone(),
                name: key.1.clone(),
            },
        }
    }

    /// The ClusterClass in `namespace` whose control plane or machine deployments use the
    /// VCDMachineTemplate `template`, with its VCDClusterTemplate as the cluster.
    fn class_of_template(
        &self,
        namespace: &str,
        template: &str,
    ) -> Result<Option<Found>, LookupError> {
        let mut classes: Vec<(&Key, &Value)> = self
            .classes
            .iter()
            .filter(|((ns, _), _)| ns == namespace)
            .collect();
        classes.sort_by(|a, b| a.0.cmp(b.0));
        for ((_, class_name), class) in classes {
            let control_plane = class_ref(class, "/spec/controlPlane/machineInfrastructure")
                .is_some_and(|(kind, name)| kind == "VCDMachineTemplate" && name == template);
            let worker = class
                .pointer("/spec/workers/machineDeployments")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|deployment| {
                    // v1beta1 nests the reference in `template`, v1beta2 does not.
                    ["/template/infrastructure", "/infrastructure"]
                        .iter()
                        .filter_map(|at| class_ref(deployment, at))
                        .any(|(kind, name)| kind == "VCDMachineTemplate" && name == template)
                });
            if !control_plane && !worker {
                continue;
            }
            let at = format!("ClusterClass {namespace}/{class_name}");
            let (kind, name) = class_ref(class, "/spec/infrastructure").ok_or_else(|| {
                LookupError::Invalid(format!("{at} has no spec.infrastructure reference"))
            })?;
            if kind != "VCDClusterTemplate" {
                return Err(LookupError::Invalid(format!(
                    "{at}: spec.infrastructure is a {kind:?}, not a VCDClusterTemplate; nicpolicy serves CAPVCD clusters only"
                )));
            }
            return Ok(Some(Found {
                cluster: self.template_cluster(namespace, name)?,
                group: ClusterGroup {
                    kind: "ClusterClass",
                    namespace: namespace.to_string(),
                    name: class_name.clone(),
                },
                control_plane,
            }));
        }
        Ok(None)
    }

    /// The cluster a VCDClusterTemplate describes: its `spec.template.spec` read as a
    /// VCDCluster's spec, under the template's name.
    fn template_cluster(&self, namespace: &str, name: &str) -> Result<Cluster, LookupError> {
        let template = self
            .cluster_templates
            .get(&(namespace.to_string(), name.to_string()))
            .ok_or_else(|| {
                LookupError::NotFound(format!(
                    "no VCDClusterTemplate {namespace}/{name} in the files"
                ))
            })?;
        let spec = template
            .pointer("/spec/template/spec")
            .cloned()
            .unwrap_or_else(|| Value::Object(Default::default()));
        let object = serde_json::json!({
            "apiVersion": template.get("apiVersion").cloned().unwrap_or(Value::Null),
            "kind": "VCDCluster",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        });
        read_vcd_cluster(&object, &format!("VCDClusterTemplate {namespace}/{name}"))
    }
}

/// The `kind` and `name` of the template reference at `at` in a ClusterClass: `ref` in
/// `cluster.x-k8s.io/v1beta1`, `templateRef` in `v1beta2`.
fn class_ref<'a>(value: &'a Value, at: &str) -> Option<(&'a str, &'a str)> {
    let holder = value.pointer(at)?;
    let reference = holder.get("ref").or_else(|| holder.get("templateRef"))?;
    Some((
        reference.get("kind").and_then(Value::as_str)?,
        reference.get("name").and_then(Value::as_str)?,
    ))
}

impl ClusterSource for StaticClusters {
    fn cluster_paused(&self, namespace: &str, cluster_name: &str) -> bool {
        self.clusters
            .get(&(namespace.to_string(), cluster_name.to_string()))
            .is_some_and(is_paused)
    }

    fn machine(&self, namespace: &str, name: &str) -> Option<OwnerMachine> {
        self.machines
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    fn knows_machines(&self) -> bool {
        !self.machines.is_empty()
    }

    fn vcd_clusters_in(&self, namespace: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .vcd_clusters
            .keys()
            .filter(|(ns, _)| ns == namespace)
            .map(|(_, name)| name.clone())
            .collect();
        names.sort();
        names
    }

    fn vcd_cluster(&self, namespace: &str, cluster_name: &str) -> Result<Cluster, LookupError> {
        let key = (namespace.to_string(), cluster_name.to_string());
        // Files without Cluster objects (a VCDCluster alone) use the name clusterctl gives both.
        let vcd_name = match self.clusters.get(&key) {
            Some(cluster) => {
                infrastructure_ref(cluster, &format!("Cluster {namespace}/{cluster_name}"))?
            }
            None => cluster_name.to_string(),
        };
        let vcd = self
            .vcd_clusters
            .get(&(namespace.to_string(), vcd_name.clone()))
            .ok_or_else(|| {
                LookupError::NotFound(if self.clusters.contains_key(&key) {
                    format!(
                        "Cluster {namespace}/{cluster_name} points at VCDCluster {vcd_name}, which is not in the cluster files"
                    )
                } else {
                    format!(
                        "no Cluster or VCDCluster named {cluster_name} in namespace {namespace} in the cluster files"
                    )
                })
            })?;
        read_vcd_cluster(vcd, &format!("VCDCluster {namespace}/{vcd_name}"))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    const CLUSTERS: &str = r#"
apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata: {name: prod-eu1, namespace: prod-eu1}
spec:
  infrastructureRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1beta3, kind: VCDCluster, name: prod-eu1-vcd}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta3
kind: VCDCluster
metadata: {name: prod-eu1-vcd, namespace: prod-eu1}
spec: {ovdc: eu1-ovdc, ovdcNetwork: mgmt-net}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta3
kind: VCDCluster
metadata: {name: edge-eu1, namespace: edge}
spec: {ovdc: eu1-edge, ovdcNetwork: edge-mgmt-net}
"#;

    fn source() -> StaticClusters {
        // One directory per call: tests run in parallel, and a test reading the file while
        // another rewrites it would see it truncated.
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("nicpolicy-clusters-{}-{call}", std::process::id()));
        StaticClusters::read(&[write(&dir, "clusters.yaml", CLUSTERS)]).unwrap()
    }

    #[test]
    fn follows_the_infrastructure_ref() {
        let cluster = source().vcd_cluster("prod-eu1", "prod-eu1").unwrap();
        assert_eq!(cluster.name, "prod-eu1-vcd");
        assert_eq!(cluster.ovdc_network, "mgmt-net");
    }

    #[test]
    fn a_lone_vcd_cluster_is_found_by_name() {
        let cluster = source().vcd_cluster("edge", "edge-eu1").unwrap();
        assert_eq!(cluster.ovdc_network, "edge-mgmt-net");
    }

    #[test]
    fn unknown_clusters_and_namespaces_are_not_found() {
        let source = source();
        assert!(matches!(
            source.vcd_cluster("prod-eu1", "prod-us1"),
            Err(LookupError::NotFound(_))
        ));
        // Namespaces separate clusters: the same name elsewhere is another cluster.
        assert!(matches!(
            source.vcd_cluster("default", "prod-eu1"),
            Err(LookupError::NotFound(_))
        ));
    }

    #[test]
    fn a_cluster_of_another_provider_is_refused() {
        let dir =
            std::env::temp_dir().join(format!("nicpolicy-clusters-capo-{}", std::process::id()));
        let path = write(
            &dir,
            "c.yaml",
            "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata: {name: os1, namespace: lab}\nspec: {infrastructureRef: {kind: OpenStackCluster, name: os1}}\n",
        );
        let source = StaticClusters::read(&[path]).unwrap();
        let err = source.vcd_cluster("lab", "os1").unwrap_err();
        assert!(err.to_string().contains("OpenStackCluster"), "{err}");
    }
}
