//! The live cluster lookup: watch-fed caches (kube-rs reflectors) of the API server's Clusters
//! and VCDClusters, so a review never waits on an API call. The webhook and the controller
//! use it; everything else finds clusters in files ([`super::StaticClusters`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use nicpolicy_plugin::objects::CAPVCD_GROUP;
use nicpolicy_plugin::Cluster;
use serde_json::Value;

use super::{infrastructure_ref, read_vcd_cluster, ClusterSource, LookupError};

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
