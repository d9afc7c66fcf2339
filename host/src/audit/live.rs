//! The objects of a live cluster as audit inputs: VCDMachines, VCDMachineTemplates, their
//! Clusters, VCDClusters, ClusterClasses and VCDClusterTemplates, listed page by page through
//! the Kubernetes API and read exactly as manifest files are.

use std::collections::BTreeMap;
use std::path::PathBuf;

use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;

use crate::manifest::{ManifestFile, Object, CAPVCD_GROUP};
use crate::webhook::clusters::namespace_of;

/// Objects per list call: large lists come in pages, as kubectl fetches them.
const PAGE: u32 = 500;

/// The resources an audit reads: `(group, kind, plural)`; Cluster API's at
/// `cluster_api_version`, CAPVCD's at v1beta3 (the version the API server stores).
pub fn resources(cluster_api_version: &str) -> Vec<ApiResource> {
    let capvcd = |kind: &str, plural: &str| {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(CAPVCD_GROUP, "v1beta3", kind),
            plural,
        )
    };
    let capi = |kind: &str, plural: &str| {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("cluster.x-k8s.io", cluster_api_version, kind),
            plural,
        )
    };
    vec![
        capvcd("VCDMachine", "vcdmachines"),
        capvcd("VCDMachineTemplate", "vcdmachinetemplates"),
        capvcd("VCDCluster", "vcdclusters"),
        capvcd("VCDClusterTemplate", "vcdclustertemplates"),
        capi("Cluster", "clusters"),
        capi("ClusterClass", "clusterclasses"),
    ]
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
/// Any other API error (no access, server unreachable).
pub async fn list(
    client: kube::Client,
    namespaces: &[String],
    cluster_api_version: &str,
) -> Result<(Vec<ManifestFile>, Vec<String>), kube::Error> {
    let mut values = Vec::new();
    let mut notes = Vec::new();
    for resource in resources(cluster_api_version) {
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
                Err(err) => return Err(err),
            }
        }
    }
    Ok((files_by_namespace(values), notes))
}

async fn list_all(
    api: &Api<DynamicObject>,
    resource: &ApiResource,
    into: &mut Vec<Value>,
) -> Result<(), kube::Error> {
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = api.list(&params).await?;
        into.extend(page.items.iter().map(|o| object_value(o, resource)));
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(()),
        }
    }
}
