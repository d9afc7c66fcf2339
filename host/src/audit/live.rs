//! The objects of a live cluster as audit inputs: VCDMachines, VCDMachineTemplates, their
//! Clusters, VCDClusters, ClusterClasses and VCDClusterTemplates, listed page by page through
//! the Kubernetes API and read exactly as manifest files are.

use std::collections::BTreeMap;
use std::path::PathBuf;

use kube::api::{Api, DynamicObject, ListParams};
use kube::core::ApiResource;
use serde_json::Value;

use crate::clusters::live::keep_read_fields;
use crate::clusters::namespace_of;
use crate::clusters::versions::{self, VersionError, Wanted};
use nicpolicy_inputs::manifest::{ManifestFile, Object};

/// Objects per list call: large lists come in pages, as kubectl fetches them.
const PAGE: u32 = 500;

/// The kinds an audit reads: CAPVCD's at the newest version the API server serves of
/// [`versions::CAPVCD_READABLE`], Cluster API's at `cluster_api_version` when given, else at
/// the newest served of [`versions::CLUSTER_API_READABLE`].
pub fn wanted<'a>(cluster_api_version: Option<&'a [&'a str; 1]>) -> [Wanted<'a>; 9] {
    let pinned = cluster_api_version.map(|v| &v[..]);
    [
        Wanted::capvcd("VCDMachine"),
        Wanted::capvcd("VCDMachineTemplate"),
        Wanted::capvcd("VCDCluster"),
        Wanted::capvcd("VCDClusterTemplate"),
        Wanted::cluster_api("Cluster", pinned),
        Wanted::cluster_api("ClusterClass", pinned),
        // A VCDMachine's cluster and role are its owner Machine's (labels only are kept).
        Wanted::cluster_api("Machine", pinned),
        // The rollouts whose machines take from the static pools (audit::capacity).
        Wanted::cluster_api("MachineDeployment", pinned),
        Wanted::control_plane("KubeadmControlPlane"),
    ]
}

/// What is kept of an object of `resource`: [`keep_read_fields`], and of a Machine its
/// metadata alone ([`keep_owner_fields`]).
pub fn trimmer(resource: &ApiResource) -> fn(&mut DynamicObject) {
    match resource.kind.as_str() {
        "Machine" => keep_owner_fields,
        "KubeadmControlPlane" => keep_rollout_fields,
        _ => keep_read_fields,
    }
}

/// Of a KubeadmControlPlane, what its rollout's count reads: replicas, the machine template and
/// the rollout strategy (its kubeadm configuration, often large, is dropped).
pub fn keep_rollout_fields(object: &mut DynamicObject) {
    keep_read_fields(object);
    if let Some(spec) = object
        .data
        .get_mut("spec")
        .and_then(serde_json::Value::as_object_mut)
    {
        spec.retain(|key, _| {
            matches!(
                key.as_str(),
                "replicas" | "machineTemplate" | "rolloutStrategy" | "rollout"
            )
        });
    }
}

/// Of a Machine, what a VCDMachine's judgement reads: its name, namespace and labels.
pub fn keep_owner_fields(object: &mut DynamicObject) {
    keep_read_fields(object);
    object.metadata.annotations = None;
    object.metadata.owner_references = None;
    object.data = Value::Object(Default::default());
}

/// The resources an audit reads, as the API server serves them (see [`wanted`]); kinds it does
/// not serve are named in [`versions::Resolved::missing`].
///
/// # Errors
/// Discovery failed, or a kind is served only at versions nicpolicy cannot read.
pub async fn resources(
    client: &kube::Client,
    cluster_api_version: Option<&str>,
) -> Result<versions::Resolved, VersionError> {
    let pinned = cluster_api_version.map(|v| [v]);
    versions::resolve(client, &wanted(pinned.as_ref())).await
}

/// An object served by the API as a manifest would hold it: list items carry no `apiVersion`
/// and `kind`, so they are filled in from the resource.
pub fn object_value(object: &DynamicObject, resource: &ApiResource) -> Value {
    let mut value = serde_json::to_value(object).unwrap_or(Value::Null);
    if let Some(map) = value.as_object_mut() {
        map.insert(
            "apiVersion".to_string(),
            Value::String(resource.api_version.clone()),
        );
        map.insert("kind".to_string(), Value::String(resource.kind.clone()));
        // Bookkeeping the policies never read; dropping it keeps large audits small.
        if let Some(metadata) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.remove("managedFields");
        }
    }
    value
}

/// Objects grouped into one pseudo-file per namespace (named `cluster:NAMESPACE`), so a machine
/// that names no cluster falls back to the only VCDCluster of its namespace.
pub fn files_by_namespace(values: Vec<Value>) -> Vec<ManifestFile> {
    let mut namespaces: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for value in values {
        let namespace = namespace_of(&value).to_string();
        namespaces.entry(namespace).or_default().push(value);
    }
    namespaces
        .into_iter()
        .map(|(namespace, values)| ManifestFile {
            path: PathBuf::from(format!("cluster:{namespace}")),
            objects: values
                .into_iter()
                .map(|value| Object {
                    value,
                    position: String::new(),
                })
                .collect(),
        })
        .collect()
}

/// Lists every audited resource in `namespaces` (all of them when empty). A resource whose CRD
/// is not installed (no ClusterClass, no VCDClusterTemplate) is left out and named in the
/// returned notes.
///
/// # Errors
/// Any other API error (no access, server unreachable), or a kind served only at versions
/// nicpolicy cannot read.
pub async fn list(
    client: kube::Client,
    namespaces: &[String],
    cluster_api_version: Option<&str>,
) -> Result<(Vec<ManifestFile>, Vec<String>), LiveError> {
    let mut values = Vec::new();
    let found = resources(&client, cluster_api_version).await?;
    let mut notes: Vec<String> = found
        .missing
        .iter()
        .map(|missing| format!("{missing}; none read"))
        .collect();
    for resource in found.resources {
        let apis: Vec<Api<DynamicObject>> = if namespaces.is_empty() {
            vec![Api::all_with(client.clone(), &resource)]
        } else {
            namespaces
                .iter()
                .map(|ns| Api::namespaced_with(client.clone(), ns, &resource))
                .collect()
        };
        for api in apis {
            match list_all(&api, &resource, &mut values).await {
                Ok(()) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    notes.push(format!(
                        "{} ({}) is not served by this cluster; none read",
                        resource.kind, resource.api_version
                    ));
                    break;
                }
                Err(err) => return Err(err.into()),
            }
        }
    }
    Ok((files_by_namespace(values), notes))
}

/// Why a live cluster could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// Which versions to read could not be found.
    #[error(transparent)]
    Versions(#[from] VersionError),
    /// A list call failed.
    #[error(transparent)]
    Api(#[from] kube::Error),
}

async fn list_all(
    api: &Api<DynamicObject>,
    resource: &ApiResource,
    into: &mut Vec<Value>,
) -> Result<(), kube::Error> {
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let mut page = api.list(&params).await?;
        let trim = trimmer(resource);
        page.items.iter_mut().for_each(trim);
        into.extend(page.items.iter().map(|o| object_value(o, resource)));
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;

    use super::*;
    use crate::audit::Inputs;
    use crate::clusters::live::LAST_APPLIED;

    #[test]
    fn a_vcdclusters_credentials_and_status_are_not_kept() {
        let full = json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "VCDCluster",
            "metadata": {"name": "prod-eu1", "namespace": "prod-eu1",
                         "managedFields": [{"manager": "capvcd", "operation": "Update"}]},
            "spec": {
                "site": "https://vcd.example.net", "org": "platform", "ovdc": "eu1-ovdc",
                "ovdcNetwork": "mgmt-net",
                "userContext": {"username": "capvcd", "password": "x".repeat(1 << 20),
                                "refreshToken": "y".repeat(1 << 20)}
            },
            "status": {"ready": true}
        });
        let mut object: DynamicObject = serde_json::from_value(full.clone()).expect("object");
        keep_read_fields(&mut object);
        let kept = serde_json::to_value(&object).expect("JSON");
        assert!(kept["spec"].get("userContext").is_none(), "{kept}");
        assert!(kept.get("status").is_none());
        assert!(kept["metadata"].get("managedFields").is_none());
        assert!(kept.to_string().len() < 1024, "{kept}");
        // The cluster reads the same from what is kept.
        assert_eq!(
            nicpolicy_plugin::objects::cluster_from_object(&kept).expect("a VCDCluster"),
            nicpolicy_plugin::objects::cluster_from_object(&full).expect("a VCDCluster")
        );
    }

    #[test]
    fn kept_fields_are_the_ones_an_audit_reads() {
        let full = json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta3",
            "kind": "VCDMachine",
            "metadata": {
                "name": "prod-eu1-md-0-x7k2p",
                "namespace": "prod-eu1",
                "uid": "7f3c0001-8f1e-4b52-9b7e-3f2b5a9d0e11",
                "resourceVersion": "48213",
                "generation": 3,
                "creationTimestamp": "2026-12-01T09:12:44Z",
                "finalizers": ["vcdmachine.infrastructure.cluster.x-k8s.io"],
                "labels": {"cluster.x-k8s.io/cluster-name": "prod-eu1"},
                "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": "{\"spec\":{}}",
                    "nicpolicy.io/nic-plan": "{\"nics\":[]}"
                },
                "ownerReferences": [{"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
                                     "name": "prod-eu1-md-0-x7k2p", "uid": "m-1"}],
                "managedFields": [{"manager": "manager", "operation": "Update"}]
            },
            "spec": {"extraOvdcNetworks": ["storage-net", "storage-net"]},
            "status": {"ready": true, "bootstrapped": true}
        });
        let resource = &ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk(
                nicpolicy_plugin::objects::CAPVCD_GROUP,
                "v1beta2",
                "VCDMachine",
            ),
            "vcdmachines",
        );
        let mut object: DynamicObject = serde_json::from_value(full.clone()).expect("object");
        keep_read_fields(&mut object);
        let kept = object_value(&object, resource);
        assert!(kept.get("status").is_none());
        let metadata = &kept["metadata"];
        for gone in [
            "managedFields",
            "resourceVersion",
            "generation",
            "finalizers",
        ] {
            assert!(metadata.get(gone).is_none(), "{gone} kept");
        }
        assert_eq!(
            metadata["annotations"],
            json!({"nicpolicy.io/nic-plan": "{\"nics\":[]}"})
        );
        assert_eq!(
            metadata["ownerReferences"],
            full["metadata"]["ownerReferences"]
        );
        assert_eq!(metadata["uid"], full["metadata"]["uid"]);

        // The machine reads the same from what is kept as from the whole object.
        let cluster = json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta3", "kind": "VCDCluster",
            "metadata": {"name": "prod-eu1", "namespace": "prod-eu1"},
            "spec": {"ovdc": "eu1-ovdc", "ovdcNetwork": "mgmt-net"}
        });
        let request = |machine: Value| {
            let mut file = ManifestFile::parse(Path::new("cluster:prod-eu1"), "").expect("empty");
            for value in [cluster.clone(), machine] {
                file.objects.push(Object {
                    value,
                    position: String::new(),
                });
            }
            let subjects = Inputs::from_files(vec![file]).subjects(&Default::default());
            let mut request = subjects[0].input.clone().expect("evaluable");
            request.machine.annotations.remove(LAST_APPLIED);
            request
        };
        assert_eq!(request(kept), request(full));
    }
}
