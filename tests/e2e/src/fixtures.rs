//! The objects the suites create: a multi-homed CAPVCD cluster (mgmt-net primary, storage-net,
//! workload-net) as `clusterctl generate cluster` renders it, its machines and templates, and
//! kube-rs access to them.

use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{json, Value};

use crate::kubectl::Kubectl;

/// CAPVCD's API group and the version the suites write its objects at: v1beta2, the storage
/// version of its last release (v1.3.2), or v1beta3 where the test binary's control plane runs
/// the project's CRDs of CAPVCD's main ([`crate::control_plane::Crds`]).
pub fn infrastructure() -> String {
    format!("infrastructure.cluster.x-k8s.io/{}", capvcd_version())
}

/// The CAPVCD version of [`infrastructure`].
pub fn capvcd_version() -> &'static str {
    crate::control_plane::capvcd_version()
}
/// The annotation nicpolicy writes the NIC plan into.
pub const NIC_PLAN: &str = "nicpolicy.io/nic-plan";
/// What the shipped role-based settings give a worker that lists no extra networks.
pub const WORKER_DEFAULTS: [&str; 2] = ["storage-net", "workload-net"];

/// Creates namespace `name`.
pub fn namespace(kubectl: &Kubectl, name: &str) {
    kubectl.ok(&["create", "namespace", name]);
}

/// Namespace `name` with a Cluster and VCDCluster of the same name on mgmt-net, as
/// `clusterctl generate cluster NAME --target-namespace NAME` lays them out.
pub fn cluster_namespace(kubectl: &Kubectl, name: &str) {
    namespace(kubectl, name);
    kubectl.apply(&cluster(name, name, "mgmt-net"));
}

/// A Cluster and its VCDCluster `name` in `namespace`, primary network `ovdc_network`.
pub fn cluster(namespace: &str, name: &str, ovdc_network: &str) -> String {
    let infrastructure = infrastructure();
    format!(
        r#"apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata:
  name: {name}
  namespace: {namespace}
  labels:
    cluster.x-k8s.io/cluster-name: {name}
spec:
  clusterNetwork:
    pods:
      cidrBlocks: [100.96.0.0/11]
  controlPlaneRef:
    apiVersion: controlplane.cluster.x-k8s.io/v1beta1
    kind: KubeadmControlPlane
    name: {name}-control-plane
  infrastructureRef:
    apiVersion: {infrastructure}
    kind: VCDCluster
    name: {name}
---
apiVersion: {infrastructure}
kind: VCDCluster
metadata:
  name: {name}
  namespace: {namespace}
spec:
  site: https://vcd.eu1.example.net
  org: platform
  ovdc: eu1-ovdc-prod
  ovdcNetwork: {ovdc_network}
  controlPlaneEndpoint:
    host: ""
    port: 6443
  useAsManagementCluster: false
  userContext:
    secretRef:
      name: capvcd-credentials
      namespace: {namespace}
  loadBalancerConfigSpec:
    useOneArm: false
    vipSubnet: 10.10.0.0/24
"#
    )
}

/// [`cluster`] as Cluster API v1beta2 writes it: the Cluster at `cluster.x-k8s.io/v1beta2`,
/// its references naming an `apiGroup` instead of an `apiVersion`.
pub fn cluster_v1beta2(namespace: &str, name: &str, ovdc_network: &str) -> String {
    let v1beta1 = cluster(namespace, name, ovdc_network);
    let infrastructure = infrastructure();
    let v1beta2 = v1beta1
        .replacen(
            "apiVersion: cluster.x-k8s.io/v1beta1",
            "apiVersion: cluster.x-k8s.io/v1beta2",
            1,
        )
        .replace(
            "    apiVersion: controlplane.cluster.x-k8s.io/v1beta1\n",
            "    apiGroup: controlplane.cluster.x-k8s.io\n",
        )
        .replace(
            &format!("    apiVersion: {infrastructure}\n"),
            "    apiGroup: infrastructure.cluster.x-k8s.io\n",
        );
    assert_eq!(v1beta2.matches("apiGroup:").count(), 2, "{v1beta2}");
    v1beta2
}

/// A worker VCDMachine of `cluster` (None: no cluster label); `extras` None leaves
/// `extraOvdcNetworks` out.
pub fn worker(
    namespace: &str,
    name: &str,
    cluster: Option<&str>,
    extras: Option<&[&str]>,
) -> Value {
    let mut labels = json!({});
    if let Some(cluster) = cluster {
        labels["cluster.x-k8s.io/cluster-name"] = json!(cluster);
        labels["cluster.x-k8s.io/deployment-name"] = json!(format!("{cluster}-md-0"));
    }
    let mut spec = json!({
        "catalog": "k8s-templates",
        "template": "ubuntu-2404-kube-v1.33.4",
        "sizingPolicy": "worker-4c16g",
        "storageProfile": "ssd-tier1",
        "diskSize": "80Gi",
        "bootstrapped": false
    });
    if let Some(extras) = extras {
        spec["extraOvdcNetworks"] = json!(extras);
    }
    json!({
        "apiVersion": infrastructure(),
        "kind": "VCDMachine",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": spec
    })
}

/// A control-plane VCDMachine of `cluster`.
pub fn control_plane(namespace: &str, name: &str, cluster: &str, extras: &[&str]) -> Value {
    let mut machine = worker(namespace, name, Some(cluster), Some(extras));
    let labels = &mut machine["metadata"]["labels"];
    labels["cluster.x-k8s.io/control-plane"] = json!("");
    if let Some(labels) = labels.as_object_mut() {
        labels.remove("cluster.x-k8s.io/deployment-name");
    }
    machine["spec"]["sizingPolicy"] = json!("control-plane-4c8g");
    machine
}

/// A worker VCDMachineTemplate; with `cluster`, labelled with it.
pub fn template(
    namespace: &str,
    name: &str,
    cluster: Option<&str>,
    extras: Option<&[&str]>,
) -> Value {
    let machine = worker(namespace, name, None, extras);
    let mut labels = json!({});
    if let Some(cluster) = cluster {
        labels["cluster.x-k8s.io/cluster-name"] = json!(cluster);
    }
    json!({
        "apiVersion": infrastructure(),
        "kind": "VCDMachineTemplate",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"template": {"spec": machine["spec"]}}
    })
}

/// The API of kind `kind` (Cluster, Machine, VCDMachine, VCDMachineTemplate, VCDCluster) in
/// `namespace`, CAPVCD's at [`capvcd_version`].
pub fn api(client: &kube::Client, namespace: &str, kind: &str) -> Api<DynamicObject> {
    api_at(client, namespace, kind, capvcd_version())
}

/// [`api`] with CAPVCD's kinds at `capvcd_version`.
pub fn api_at(
    client: &kube::Client,
    namespace: &str,
    kind: &str,
    capvcd_version: &str,
) -> Api<DynamicObject> {
    let (group, version, plural) = match kind {
        "Cluster" => ("cluster.x-k8s.io", "v1beta1", "clusters"),
        "Machine" => ("cluster.x-k8s.io", "v1beta1", "machines"),
        "MachineSet" => ("cluster.x-k8s.io", "v1beta1", "machinesets"),
        "MachineDeployment" => ("cluster.x-k8s.io", "v1beta1", "machinedeployments"),
        "VCDCluster" => (
            "infrastructure.cluster.x-k8s.io",
            capvcd_version,
            "vcdclusters",
        ),
        "VCDMachine" => (
            "infrastructure.cluster.x-k8s.io",
            capvcd_version,
            "vcdmachines",
        ),
        "VCDMachineTemplate" => (
            "infrastructure.cluster.x-k8s.io",
            capvcd_version,
            "vcdmachinetemplates",
        ),
        other => panic!("no API for {other}"),
    };
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// Creates `object` through kube-rs as a controller does (`dry_run`: server-side dry run);
/// returns the object as the API server stored (or would store) it.
pub async fn create(
    client: &kube::Client,
    object: &Value,
    dry_run: bool,
) -> Result<Value, kube::Error> {
    let kind = object["kind"].as_str().expect("kind");
    let namespace = object["metadata"]["namespace"].as_str().expect("namespace");
    let typed: DynamicObject = serde_json::from_value(object.clone()).expect("a valid object");
    let params = PostParams {
        dry_run,
        field_manager: Some("nicpolicy-e2e".into()),
    };
    let version = object["apiVersion"]
        .as_str()
        .and_then(|v| v.rsplit('/').next())
        .unwrap_or("v1beta2");
    let created = api_at(client, namespace, kind, version)
        .create(&params, &typed)
        .await?;
    Ok(serde_json::to_value(created).expect("serialisable"))
}

/// The object `kind/name` in `namespace` as stored, or None.
pub async fn get(client: &kube::Client, namespace: &str, kind: &str, name: &str) -> Option<Value> {
    api(client, namespace, kind)
        .get_opt(name)
        .await
        .expect("the API answers")
        .map(|object| serde_json::to_value(object).expect("serialisable"))
}

/// The NIC plan annotation of an object (a template's own metadata), parsed.
pub fn plan(object: &Value) -> Option<Value> {
    let text = object
        .pointer("/metadata/annotations")?
        .get(NIC_PLAN)?
        .as_str()?;
    Some(serde_json::from_str(text).expect("the NIC plan annotation is JSON"))
}

/// The networks of an object's NIC plan, NIC 0 first.
pub fn plan_networks(object: &Value) -> Vec<String> {
    plan(object)
        .and_then(|plan| plan.get("nics").cloned())
        .and_then(|nics| nics.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|nic| nic.get("network")?.as_str().map(str::to_string))
        .collect()
}

/// `spec.extraOvdcNetworks` of a machine or of a template's machine spec.
pub fn extras(object: &Value) -> Vec<String> {
    let spec = if object["kind"] == "VCDMachineTemplate" {
        &object["spec"]["template"]["spec"]
    } else {
        &object["spec"]
    };
    spec["extraOvdcNetworks"]
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|n| n.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The status of a refused request: (code, reason, message, causes as (field, message)).
pub fn refusal(err: &kube::Error) -> (u16, String, String, Vec<(String, String)>) {
    match err {
        kube::Error::Api(status) => {
            let causes = status
                .details
                .as_ref()
                .map(|details| {
                    details
                        .causes
                        .iter()
                        .map(|c| (c.field.clone(), c.message.clone()))
                        .collect()
                })
                .unwrap_or_default();
            (
                status.code,
                status.reason.clone(),
                status.message.clone(),
                causes,
            )
        }
        other => panic!("expected a refusal from the API server, got {other}"),
    }
}

/// How long a Cluster or VCDCluster change may take to reach the webhook's caches.
pub const CACHE_DEADLINE: Duration = Duration::from_secs(10);

/// Dry-run creates a worker of `cluster` until its NIC plan starts with `primary`: the
/// webhook's caches know the cluster as it is now. Returns how long that took; panics after
/// `deadline`.
pub async fn planned_on(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
    primary: &str,
    deadline: Duration,
) -> Duration {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < deadline {
        let probe = worker(
            namespace,
            &format!("{cluster}-md-0-probe"),
            Some(cluster),
            None,
        );
        match create(client, &probe, true).await {
            Ok(object) if plan_networks(&object).first().map(String::as_str) == Some(primary) => {
                return start.elapsed();
            }
            Ok(object) => last = format!("admitted with plan {:?}", plan_networks(&object)),
            Err(err) => last = refusal(&err).2,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no review planned NIC 0 on {primary} within {deadline:?}; last answer: {last}");
}

/// The objects of a multi-document YAML text (`helm template`'s, `nicpolicy export`'s): the
/// documents that parse, empty ones left out.
pub fn yaml_objects(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .filter_map(|document| {
            let value: Option<Value> = serde::Deserialize::deserialize(document).ok();
            value.filter(|v| !v.is_null())
        })
        .collect()
}
