//! Finding a machine's VCDCluster the way Cluster API does: the machine's
//! `cluster.x-k8s.io/cluster-name` label (or, for a template, its owner Cluster) names the
//! `Cluster`, whose `spec.infrastructureRef` names the VCDCluster in the same namespace.
//!
//! Two sources implement [`ClusterSource`]: [`StaticClusters`] (manifest files, for offline use
//! and tests) and [`KubeClusters`] (watch-fed caches of the API server's objects, so a review
//! never waits on an API call).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use nicpolicy_plugin::Cluster;
use serde_json::Value;

use nicpolicy_plugin::objects::{cluster_from_object, CAPVCD_GROUP};

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

    /// Names of the VCDClusters in `namespace`, sorted (to tell a machine without a cluster
    /// whether the namespace's only VCDCluster was used).
    fn vcd_clusters_in(&self, namespace: &str) -> Vec<String> {
        let _ = namespace;
        Vec::new()
    }
}

/// The cluster a machine object belongs to: its cluster-name label, else (templates) the
/// Cluster among its owner references.
pub fn cluster_name_of(object: &Value) -> Option<String> {
    let label = object
        .pointer("/metadata/labels")
        .and_then(|labels| labels.get(nicpolicy_plugin::schema::CLUSTER_NAME_LABEL))
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

/// The VCDCluster a Cluster object points at: `spec.infrastructureRef` (name and kind; the
/// namespace is the Cluster's in every Cluster API version).
fn infrastructure_ref(cluster: &Value, at: &str) -> Result<String, LookupError> {
    let reference = cluster.pointer("/spec/infrastructureRef").ok_or_else(|| {
        LookupError::Invalid(format!(
            "{at} has no spec.infrastructureRef: Cluster API has not been told which VCDCluster it uses"
        ))
    })?;
    let kind = reference.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind != "VCDCluster" {
        return Err(LookupError::Invalid(format!(
            "{at}: spec.infrastructureRef is a {kind:?}, not a VCDCluster; nicpolicy serves CAPVCD clusters only"
        )));
    }
    reference
        .get("name")
        .and_then(Value::as_str)
        .filter(|name| !name.is_empty())
        .map(str::to_string)
        .ok_or_else(|| LookupError::Invalid(format!("{at}: spec.infrastructureRef has no name")))
}

/// Reads a VCDCluster object into the schema's [`Cluster`]; `label` names it in errors.
fn read_vcd_cluster(object: &Value, label: &str) -> Result<Cluster, LookupError> {
    cluster_from_object(object).map_err(|err| LookupError::Invalid(format!("{label}: {err}")))
}

/// Cluster and VCDCluster objects read from manifest files.
#[derive(Debug, Default)]
pub struct StaticClusters {
    clusters: HashMap<(String, String), Value>,
    vcd_clusters: HashMap<(String, String), Value>,
}

impl StaticClusters {
    /// Reads every Cluster (`cluster.x-k8s.io`) and VCDCluster in `files`. Objects without a
    /// namespace are taken to be in `default`, as kubectl would create them.
    pub fn read(files: &[PathBuf]) -> Result<StaticClusters, ManifestError> {
        let mut source = StaticClusters::default();
        for path in files {
            let file = ManifestFile::read(path)?;
            for object in &file.objects {
                let namespace = object
                    .value
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("default")
                    .to_string();
                let key = (namespace, object.name().to_string());
                let api_version = object
                    .value
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                match object.kind() {
                    "Cluster" if api_version.starts_with("cluster.x-k8s.io/") => {
                        source.clusters.insert(key, object.value.clone());
                    }
                    "VCDCluster" => {
                        // Checked now, so a bad file fails at start rather than per review.
                        let label = format!("{}: VCDCluster {}", path.display(), key.1);
                        read_vcd_cluster(&object.value, &label).map_err(|err| {
                            ManifestError::Field {
                                path: path.clone(),
                                field: object.position.clone(),
                                message: err.to_string(),
                            }
                        })?;
                        source.vcd_clusters.insert(key, object.value.clone());
                    }
                    _ => {}
                }
            }
        }
        Ok(source)
    }

    /// How many VCDClusters were read.
    pub fn len(&self) -> usize {
        self.vcd_clusters.len()
    }

    /// Whether no VCDCluster was read.
    pub fn is_empty(&self) -> bool {
        self.vcd_clusters.is_empty()
    }
}

impl ClusterSource for StaticClusters {
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

/// Watch-fed caches of Cluster and VCDCluster objects (kube-rs reflectors).
pub struct KubeClusters {
    clusters: Store<DynamicObject>,
    vcd_clusters: Store<DynamicObject>,
    cluster_resource: ApiResource,
    vcd_resource: ApiResource,
    ready: Arc<AtomicBool>,
}

impl KubeClusters {
    /// Starts watching both kinds in every namespace. Must be called inside a Tokio runtime;
    /// the watches run until the process ends, backing off and relisting on errors.
    pub fn start(client: kube::Client, cluster_api_version: &str) -> KubeClusters {
        let cluster_resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("cluster.x-k8s.io", cluster_api_version, "Cluster"),
            "clusters",
        );
        let vcd_resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(CAPVCD_GROUP, "v1beta3", "VCDCluster"),
            "vcdclusters",
        );
        let ready = Arc::new(AtomicBool::new(false));
        let clusters = watch(client.clone(), &cluster_resource);
        let vcd_clusters = watch(client, &vcd_resource);
        let (a, b, flag) = (clusters.clone(), vcd_clusters.clone(), ready.clone());
        tokio::spawn(async move {
            let (first, second) = futures::join!(a.wait_until_ready(), b.wait_until_ready());
            if first.is_ok() && second.is_ok() {
                flag.store(true, Ordering::Release);
                tracing::info!("cluster caches synced");
            }
        });
        KubeClusters {
            clusters,
            vcd_clusters,
            cluster_resource,
            vcd_resource,
            ready,
        }
    }
}

fn watch(client: kube::Client, resource: &ApiResource) -> Store<DynamicObject> {
    let api: Api<DynamicObject> = Api::all_with(client, resource);
    let writer = reflector::store::Writer::new(resource.clone());
    let reader = writer.as_reader();
    let kind = resource.kind.clone();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            if let Err(err) = event {
                tracing::warn!(kind = %kind, error = %err, "watch error; retrying");
            }
        }
    });
    reader
}

impl ClusterSource for KubeClusters {
    fn vcd_cluster(&self, namespace: &str, cluster_name: &str) -> Result<Cluster, LookupError> {
        if !self.ready() {
            return Err(LookupError::NotReady);
        }
        let key =
            ObjectRef::new_with(cluster_name, self.cluster_resource.clone()).within(namespace);
        let cluster = self.clusters.get(&key).ok_or_else(|| {
            LookupError::NotFound(format!(
                "no Cluster {namespace}/{cluster_name} (cluster.x-k8s.io/{})",
                self.cluster_resource.version
            ))
        })?;
        let cluster = serde_json::to_value(cluster.as_ref()).map_err(|err| {
            LookupError::Invalid(format!("Cluster {namespace}/{cluster_name}: {err}"))
        })?;
        let vcd_name =
            infrastructure_ref(&cluster, &format!("Cluster {namespace}/{cluster_name}"))?;
        let key = ObjectRef::new_with(&vcd_name, self.vcd_resource.clone()).within(namespace);
        let vcd = self.vcd_clusters.get(&key).ok_or_else(|| {
            LookupError::NotFound(format!(
                "Cluster {namespace}/{cluster_name} points at VCDCluster {vcd_name}, which does not exist"
            ))
        })?;
        let mut vcd = serde_json::to_value(vcd.as_ref()).map_err(|err| {
            LookupError::Invalid(format!("VCDCluster {namespace}/{vcd_name}: {err}"))
        })?;
        // Objects served by the API carry their version; make sure the reader sees it.
        if let Some(map) = vcd.as_object_mut() {
            map.entry("apiVersion")
                .or_insert_with(|| Value::String(self.vcd_resource.api_version.clone()));
            map.entry("kind")
                .or_insert_with(|| Value::String("VCDCluster".to_string()));
        }
        read_vcd_cluster(&vcd, &format!("VCDCluster {namespace}/{vcd_name}"))
    }

    fn ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    fn vcd_clusters_in(&self, namespace: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .vcd_clusters
            .state()
            .iter()
            .filter(|o| o.metadata.namespace.as_deref() == Some(namespace))
            .filter_map(|o| o.metadata.name.clone())
            .collect();
        names.sort();
        names
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use serde_json::json;

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
        let dir = std::env::temp_dir().join(format!("nicpolicy-clusters-{}", std::process::id()));
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
