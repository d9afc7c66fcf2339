//! The live cluster lookup: watch-fed caches (kube-rs reflectors) of the API server's Clusters
//! and VCDClusters, and of its Machines' metadata (a VCDMachine's cluster and role are its owner
//! Machine's), so a review never waits on an API call. The webhook and the controller
//! use it; everything else finds clusters in files ([`super::StaticClusters`]).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, PartialObjectMeta};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use nicpolicy_plugin::schema::{CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL};
use nicpolicy_plugin::Cluster;
use serde_json::Value;

use super::versions::{self, Wanted};
use super::{infrastructure_ref, read_vcd_cluster, ClusterSource, LookupError, OwnerMachine};

/// Watch-fed caches of Cluster and VCDCluster objects (kube-rs reflectors).
pub struct KubeClusters {
    caches: Arc<OnceLock<Caches>>,
    ready: Arc<AtomicBool>,
    /// Watches whose last [`WATCH_FAILURES_UNREADY`] attempts all failed.
    failing: Arc<AtomicUsize>,
}

/// Failed attempts in a row after which a watch makes the webhook not ready (the watcher backs
/// off 0.8 s doubling between them, so about 6 s of an API server that cannot be reached), as
/// the controller's watches do.
const WATCH_FAILURES_UNREADY: u32 = 3;

/// The caches, once the versions to watch are known.
struct Caches {
    clusters: Store<DynamicObject>,
    vcd_clusters: Store<DynamicObject>,
    cluster_resource: ApiResource,
    vcd_resource: ApiResource,
    /// Machines, metadata only; None where Cluster API's Machine is not served.
    machines: Option<(Store<PartialObjectMeta<DynamicObject>>, ApiResource)>,
}

/// How long to wait before asking discovery again, at most.
const DISCOVERY_BACKOFF_MAX: Duration = Duration::from_secs(30);

impl KubeClusters {
    /// Starts watching both kinds in every namespace, each at the version the API server serves
    /// (found through discovery; Cluster at `cluster_api_version` when the configuration pins
    /// one). Must be called inside a Tokio runtime. Until discovery answered and both caches
    /// synced, lookups answer [`LookupError::NotReady`]; discovery is asked again with a backoff,
    /// and the watches run until the process ends, backing off and relisting on errors.
    pub fn start(client: kube::Client, cluster_api_version: Option<&str>) -> KubeClusters {
        let caches = Arc::new(OnceLock::new());
        let ready = Arc::new(AtomicBool::new(false));
        let failing = Arc::new(AtomicUsize::new(0));
        let pinned = cluster_api_version.map(str::to_string);
        let (slot, flag, failures) = (caches.clone(), ready.clone(), failing.clone());
        tokio::spawn(async move {
            let (cluster_resource, vcd_resource, machine_resource) =
                discover(&client, pinned.as_deref()).await;
            let clusters = watch(client.clone(), &cluster_resource, failures.clone());
            let vcd_clusters = watch(client.clone(), &vcd_resource, failures.clone());
            let machines = machine_resource
                .map(|resource| (watch_metadata(client, &resource, failures), resource));
            let (a, b) = (clusters.clone(), vcd_clusters.clone());
            let c = machines.as_ref().map(|(store, _)| store.clone());
            let _ = slot.set(Caches {
                clusters,
                vcd_clusters,
                cluster_resource,
                vcd_resource,
                machines,
            });
            let machines_synced = async {
                match c {
                    Some(store) => store.wait_until_ready().await.is_ok(),
                    None => true,
                }
            };
            let (first, second, third) =
                futures::join!(a.wait_until_ready(), b.wait_until_ready(), machines_synced);
            if first.is_ok() && second.is_ok() && third {
                flag.store(true, Ordering::Release);
                tracing::info!("cluster caches synced");
            }
        });
        KubeClusters {
            caches,
            ready,
            failing,
        }
    }

    fn caches(&self) -> Result<&Caches, LookupError> {
        match self.caches.get() {
            Some(caches) if self.ready() => Ok(caches),
            _ => Err(LookupError::NotReady),
        }
    }
}

/// The Cluster, VCDCluster and (when served) Machine resources to watch, asked of discovery
/// until it answers with versions nicpolicy reads. Each failure is logged once per attempt with
/// what was served.
async fn discover(
    client: &kube::Client,
    cluster_api_version: Option<&str>,
) -> (ApiResource, ApiResource, Option<ApiResource>) {
    let pinned = cluster_api_version.map(|v| [v]);
    let pinned = pinned.as_ref().map(|p| &p[..]);
    let wanted = [
        Wanted::cluster_api("Cluster", pinned),
        Wanted::capvcd("VCDCluster"),
        Wanted::cluster_api("Machine", pinned),
    ];
    let mut wait = Duration::from_secs(1);
    loop {
        let why = match versions::resolve(client, &wanted).await {
            Ok(found) => match (found.get("Cluster"), found.get("VCDCluster")) {
                (Some(cluster), Some(vcd)) => {
                    let machine = found.get("Machine").cloned();
                    tracing::info!(
                        cluster = %cluster.api_version,
                        vcd_cluster = %vcd.api_version,
                        machine = %machine.as_ref().map(|m| m.api_version.as_str()).unwrap_or("not served"),
                        "watching Clusters, VCDClusters and Machines at the versions the API server serves"
                    );
                    return (cluster.clone(), vcd.clone(), machine);
                }
                _ => found.missing.join("; "),
            },
            Err(err) => err.to_string(),
        };
        tracing::warn!(error = %why, retry_in_s = wait.as_secs(), "cannot watch clusters yet: not ready");
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(DISCOVERY_BACKOFF_MAX);
    }
}

/// A metadata-only reflector (labels and owners are all that is read of a Machine).
fn watch_metadata(
    client: kube::Client,
    resource: &ApiResource,
    failing: Arc<AtomicUsize>,
) -> Store<PartialObjectMeta<DynamicObject>> {
    // An Api of PartialObjectMeta asks for metadata only.
    reflect(
        Api::all_with(client, resource),
        resource,
        |meta| {
            meta.metadata.managed_fields = None;
            meta.metadata.annotations = None;
        },
        failing,
    )
}

/// A reflector of Clusters or VCDClusters, each kept as [`keep_looked_up`] projects it.
fn watch(
    client: kube::Client,
    resource: &ApiResource,
    failing: Arc<AtomicUsize>,
) -> Store<DynamicObject> {
    let trim: fn(&mut DynamicObject) = if resource.kind == "VCDCluster" {
        |object| keep_looked_up(object, VCD_CLUSTER_READS)
    } else {
        |object| keep_looked_up(object, CLUSTER_READS)
    };
    reflect(Api::all_with(client, resource), resource, trim, failing)
}

/// Objects per page of a watch's list for kinds whose objects may be large. A page is held whole
/// while it is read, before any object in it is trimmed, and a VCDCluster may carry a megabyte
/// of credentials (`spec.userContext` has no length bound), a KubeadmControlPlane a megabyte of
/// files: at kube's default of 500, a webhook that listed 150 such VCDClusters peaked at
/// 438 MiB, past the pod's limit (the admission e2e, `big_vcdclusters_...`). 10 keeps a page
/// under 15 MB of the largest objects etcd stores (1.5 MB; 63-67 MiB peak there), at the price
/// of more list calls at start (a site's thousand VCDClusters: 100 small ones).
pub const LARGE_OBJECTS_PAGE_SIZE: u32 = 10;

/// How a watch of `kind` lists: [`LARGE_OBJECTS_PAGE_SIZE`] objects to a page for the kinds that
/// may carry megabytes, kube's default (500) for the others, whose objects are small and many
/// (10,000 Machines or VCDMachines would take 1,000 list calls at 10).
pub fn watch_config(kind: &str) -> watcher::Config {
    match kind {
        "VCDCluster" | "KubeadmControlPlane" => {
            watcher::Config::default().page_size(LARGE_OBJECTS_PAGE_SIZE)
        }
        _ => watcher::Config::default(),
    }
}

/// The `spec` fields of a Cluster the lookup reads: whether it is paused, and its VCDCluster.
const CLUSTER_READS: &[&str] = &["paused", "infrastructureRef"];

/// The `spec` fields of a VCDCluster the policies see ([`nicpolicy_plugin::Cluster`]): its org
/// VDC, its network and its zones.
const VCD_CLUSTER_READS: &[&str] = &["ovdc", "ovdcNetwork", "multiZoneSpec"];

/// What a cached object may hold once projected, in bytes of JSON. The fields a lookup reads
/// take a few hundred bytes (a dozen zones: a few KB), so this is far above any real object,
/// and a cache of thousands of them stays small whatever the API server is given.
pub const MAX_CACHED_OBJECT_BYTES: usize = 64 * 1024;

/// The key that stands, in a cached object's data, for the fields it was too large to keep: its
/// value is their size in bytes. No Kubernetes object has a top-level field of this name.
const OVERSIZE: &str = "nicpolicyOversizeBytes";

/// Projects a Cluster or VCDCluster to what a lookup reads before it enters the cache: its name,
/// namespace and uid, and the `spec` fields `reads` (labels, annotations, owners, status,
/// credentials and every other field dropped). When what is left is over
/// [`MAX_CACHED_OBJECT_BYTES`], it is not kept either: the object is cached as its size alone,
/// so a lookup of it fails with [`LookupError::Invalid`], naming the object and the bound, and
/// a warning is logged each time the API server sends it.
pub fn keep_looked_up(object: &mut DynamicObject, reads: &[&str]) {
    keep_read_fields(object);
    let metadata = &mut object.metadata;
    metadata.labels = None;
    metadata.annotations = None;
    metadata.owner_references = None;
    if let Some(spec) = object.data.get_mut("spec").and_then(Value::as_object_mut) {
        spec.retain(|key, _| reads.contains(&key.as_str()));
    }
    // Serialized once per event, after the projection: a few hundred bytes for a real object.
    let bytes = serde_json::to_vec(&object.data).map_or(usize::MAX, |text| text.len());
    if bytes > MAX_CACHED_OBJECT_BYTES {
        tracing::warn!(
            kind = %object.types.as_ref().map(|t| t.kind.as_str()).unwrap_or("object"),
            namespace = %object.metadata.namespace.as_deref().unwrap_or(""),
            name = %object.metadata.name.as_deref().unwrap_or(""),
            bytes,
            bound = MAX_CACHED_OBJECT_BYTES,
            "the fields nicpolicy reads of this object are over the bound; not cached, and its \
             machines' lookups fail until it is smaller"
        );
        object.data = serde_json::json!({ OVERSIZE: bytes });
    }
}

/// The [`LookupError`] for a cached object that was too large to keep, if `object` is one;
/// `reads` are the `spec` fields it was projected to.
fn oversize(object: &DynamicObject, what: &str, reads: &[&str]) -> Option<LookupError> {
    let bytes = object.data.get(OVERSIZE)?.as_u64()?;
    Some(LookupError::Invalid(format!(
        "{what}: the fields nicpolicy reads (spec.{}) take {bytes} bytes, over the {} KiB a \
         cached object may hold; it is not cached (make them smaller)",
        reads.join(", spec."),
        MAX_CACHED_OBJECT_BYTES / 1024
    )))
}

/// Annotation kubectl keeps the whole last-applied object in: the largest part of most objects,
/// and nothing a policy judges.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what neither a cluster lookup nor a policy reads from an object kept in memory:
/// `status`, `managedFields`, kubectl's last-applied copy, the bookkeeping of metadata, and a
/// VCDCluster's credentials (`spec.userContext`: a password or refresh token, with no length
/// bound, that nicpolicy has no use for). What is left (name, namespace, uid, labels,
/// annotations, owner references, deletion timestamp, the rest of `spec`) is all the policies
/// and the lookup read, so a machine judged from it is judged as from the whole object. The
/// webhook's caches and the controller's keep objects this way.
pub fn keep_read_fields(object: &mut DynamicObject) {
    let metadata = &mut object.metadata;
    metadata.managed_fields = None;
    metadata.resource_version = None;
    metadata.creation_timestamp = None;
    metadata.generation = None;
    metadata.finalizers = None;
    if let Some(annotations) = metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
    if let Some(data) = object.data.as_object_mut() {
        data.retain(|key, _| key == "spec");
        if let Some(spec) = data.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("userContext");
        }
    }
}

/// A reflector over `api`, each object trimmed by `trim` before it is stored; the watch runs
/// until the process ends, backing off and relisting on errors (logged). While its last
/// [`WATCH_FAILURES_UNREADY`] attempts all failed it counts in `failing`.
fn reflect<K>(
    api: Api<K>,
    resource: &ApiResource,
    trim: fn(&mut K),
    failing: Arc<AtomicUsize>,
) -> Store<K>
where
    K: kube::Resource<DynamicType = ApiResource>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let writer = reflector::store::Writer::new(resource.clone());
    let reader = writer.as_reader();
    let kind = resource.kind.clone();
    let stream = watcher(api, watch_config(&resource.kind))
        .default_backoff()
        .modify(trim)
        .reflect(writer)
        .applied_objects();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        let mut failures = 0u32;
        while let Some(event) = stream.next().await {
            match event {
                Err(err) => {
                    failures += 1;
                    tracing::warn!(kind = %kind, error = %err, failures, "watch error; retrying");
                    if failures == WATCH_FAILURES_UNREADY {
                        failing.fetch_add(1, Ordering::AcqRel);
                        tracing::warn!(kind = %kind, "the watch keeps failing: not ready until it recovers");
                    }
                }
                Ok(_) => {
                    if failures >= WATCH_FAILURES_UNREADY {
                        failing.fetch_sub(1, Ordering::AcqRel);
                        tracing::info!(kind = %kind, "the watch recovered");
                    }
                    failures = 0;
                }
            }
        }
    });
    reader
}

impl ClusterSource for KubeClusters {
    fn cluster_paused(&self, namespace: &str, cluster_name: &str) -> bool {
        let Ok(caches) = self.caches() else {
            return false;
        };
        let key =
            ObjectRef::new_with(cluster_name, caches.cluster_resource.clone()).within(namespace);
        // A served object's `data` holds everything but its metadata: `spec` is where a
        // manifest has it. An oversized Cluster is cached without its spec: not known to be
        // paused, and its lookup fails.
        caches
            .clusters
            .get(&key)
            .is_some_and(|cluster| super::is_paused(&cluster.data))
    }

    fn knows_machines(&self) -> bool {
        self.caches
            .get()
            .is_some_and(|caches| caches.machines.is_some())
    }

    fn machine(&self, namespace: &str, name: &str) -> Option<OwnerMachine> {
        let (store, resource) = self.caches.get()?.machines.as_ref()?;
        let meta = store.get(&ObjectRef::new_with(name, resource.clone()).within(namespace))?;
        let labels = meta.metadata.labels.as_ref();
        Some(OwnerMachine {
            name: name.to_string(),
            cluster: labels
                .and_then(|l| l.get(CLUSTER_NAME_LABEL))
                .filter(|c| !c.is_empty())
                .cloned(),
            control_plane: labels.is_some_and(|l| l.contains_key(CONTROL_PLANE_LABEL)),
        })
    }

    fn vcd_cluster(&self, namespace: &str, cluster_name: &str) -> Result<Cluster, LookupError> {
        let caches = self.caches()?;
        let key =
            ObjectRef::new_with(cluster_name, caches.cluster_resource.clone()).within(namespace);
        let cluster = caches.clusters.get(&key).ok_or_else(|| {
            LookupError::NotFound(format!(
                "no Cluster {namespace}/{cluster_name} (cluster.x-k8s.io/{})",
                caches.cluster_resource.version
            ))
        })?;
        if let Some(err) = oversize(
            &cluster,
            &format!("Cluster {namespace}/{cluster_name}"),
            CLUSTER_READS,
        ) {
            return Err(err);
        }
        let cluster = serde_json::to_value(cluster.as_ref()).map_err(|err| {
            LookupError::Invalid(format!("Cluster {namespace}/{cluster_name}: {err}"))
        })?;
        let vcd_name =
            infrastructure_ref(&cluster, &format!("Cluster {namespace}/{cluster_name}"))?;
        let key = ObjectRef::new_with(&vcd_name, caches.vcd_resource.clone()).within(namespace);
        let vcd = caches.vcd_clusters.get(&key).ok_or_else(|| {
            LookupError::NotFound(format!(
                "Cluster {namespace}/{cluster_name} points at VCDCluster {vcd_name}, which does not exist"
            ))
        })?;
        if let Some(err) = oversize(
            &vcd,
            &format!("VCDCluster {namespace}/{vcd_name}"),
            VCD_CLUSTER_READS,
        ) {
            return Err(err);
        }
        let mut vcd = serde_json::to_value(vcd.as_ref()).map_err(|err| {
            LookupError::Invalid(format!("VCDCluster {namespace}/{vcd_name}: {err}"))
        })?;
        // Objects served by the API carry their version; make sure the reader sees it.
        if let Some(map) = vcd.as_object_mut() {
            map.entry("apiVersion")
                .or_insert_with(|| Value::String(caches.vcd_resource.api_version.clone()));
            map.entry("kind")
                .or_insert_with(|| Value::String("VCDCluster".to_string()));
        }
        read_vcd_cluster(&vcd, &format!("VCDCluster {namespace}/{vcd_name}"))
    }

    fn ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Not synced yet, or a watch that keeps failing: lookups still answer from the caches
    /// (the last state the API server gave), while the probe takes this replica out of the
    /// Service until the watches recover.
    fn unready_reason(&self) -> Option<String> {
        if !self.ready() {
            return Some("cluster cache not synced yet".to_string());
        }
        match self.failing.load(Ordering::Acquire) {
            0 => None,
            n => Some(format!(
                "{n} cluster watch(es) keep failing (the API server cannot be reached); the \
                 caches may be stale"
            )),
        }
    }

    fn vcd_clusters_in(&self, namespace: &str) -> Vec<String> {
        let Some(caches) = self.caches.get() else {
            return Vec::new();
        };
        let mut names: Vec<String> = caches
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
    use super::*;

    fn vcd_cluster(network: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "VCDCluster",
            "metadata": {
                "name": "prod-eu1", "namespace": "prod-eu1", "uid": "5d1c",
                "labels": {"cluster.x-k8s.io/cluster-name": "prod-eu1"},
                "annotations": {LAST_APPLIED: "{}", "team": "platform"},
                "managedFields": [{"manager": "clusterctl"}],
            },
            "spec": {
                "site": "https://vcd.eu1.example.net", "org": "platform",
                "ovdc": "eu1-ovdc-prod", "ovdcNetwork": network,
                "userContext": {"username": "capvcd", "password": "p".repeat(100_000)},
                "loadBalancerConfigSpec": {"vipSubnet": "10.10.0.0/24"},
            },
            "status": {"ready": true},
        }))
        .expect("a VCDCluster")
    }

    #[test]
    fn a_vcd_cluster_is_kept_as_the_policies_read_it() {
        let mut object = vcd_cluster("mgmt-net");
        let whole = serde_json::to_value(&object).expect("JSON");
        keep_looked_up(&mut object, VCD_CLUSTER_READS);
        assert_eq!(
            object.data,
            serde_json::json!({"spec": {"ovdc": "eu1-ovdc-prod", "ovdcNetwork": "mgmt-net"}})
        );
        assert!(object.metadata.labels.is_none() && object.metadata.annotations.is_none());
        assert!(object.metadata.managed_fields.is_none());
        assert_eq!(object.metadata.uid.as_deref(), Some("5d1c"));
        assert!(oversize(&object, "VCDCluster prod-eu1/prod-eu1", VCD_CLUSTER_READS).is_none());
        // The policies' view of it is that of the whole object.
        let kept = serde_json::to_value(&object).expect("JSON");
        assert_eq!(
            read_vcd_cluster(&kept, "kept").expect("read"),
            read_vcd_cluster(&whole, "whole").expect("read")
        );
    }

    #[test]
    fn a_cluster_keeps_its_pause_and_its_vcd_cluster() {
        let mut object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "prod-eu1", "namespace": "prod-eu1"},
            "spec": {
                "paused": true,
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "VCDCluster", "name": "prod-eu1"},
                "clusterNetwork": {"pods": {"cidrBlocks": ["100.96.0.0/11"]}},
                "topology": {"classRef": {"name": "capvcd-1.3"}},
            },
        }))
        .expect("a Cluster");
        keep_looked_up(&mut object, CLUSTER_READS);
        let spec = object.data["spec"].as_object().expect("a spec");
        assert_eq!(
            spec.keys().collect::<Vec<_>>(),
            ["infrastructureRef", "paused"]
        );
        assert!(super::super::is_paused(&object.data));
    }

    #[test]
    fn an_object_whose_read_fields_are_over_the_bound_is_cached_as_its_size() {
        let mut object = vcd_cluster(&format!("backup-{}", "n".repeat(MAX_CACHED_OBJECT_BYTES)));
        keep_looked_up(&mut object, VCD_CLUSTER_READS);
        assert!(object.data.get("spec").is_none(), "{}", object.data);
        let err =
            oversize(&object, "VCDCluster prod-eu1/prod-eu1", VCD_CLUSTER_READS).expect("refused");
        let text = err.to_string();
        assert!(text.contains("VCDCluster prod-eu1/prod-eu1"), "{text}");
        assert!(text.contains("over the 64 KiB"), "{text}");
        assert!(text.contains("spec.ovdcNetwork"), "{text}");
    }
}
