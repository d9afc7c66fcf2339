//! One nicpolicy case through both hosts: nicpolicy's (the ABI v1 build) and the waPC test host
//! (the Kubewarden build), compared on what each host's users see.
//!
//! - settings: both accept them, or both refuse them with the same reason;
//! - allowed or denied: the same, nicpolicy's decision judged by its lifecycle rules
//!   ([`nicpolicy::lifecycle::judge`]) as its webhook judges a review: objects being deleted,
//!   ratcheted UPDATEs, machines whose cluster is not known (checked without it, with the
//!   warning `onUnknownCluster: CheckWithoutCluster` gives first);
//! - denied: code 422, and every violation on a line of its own as
//!   `field: Reason: message`, so each field path is in the message;
//! - warnings: the same, in order;
//! - allowed: the difference between the mutated object and the input (the JSON patch
//!   Kubewarden sends) equals the difference nicpolicy's webhook patch makes.

use nicpolicy::cases::Case;
use nicpolicy::lifecycle::judge;
use nicpolicy::webhook::patch::{patch_operations, NicPlan};
use nicpolicy::LoadError;
use nicpolicy_plugin::kubewarden::{INVENTORY_KEY, MUTATING_KEY};
use nicpolicy_plugin::lifecycle::unknown_cluster_warning;
use nicpolicy_plugin::objects::{cluster_name_of, infrastructure_ref};
use nicpolicy_plugin::schema::CLUSTER_NAME_LABEL;
use serde_json::{json, Map, Value};

use crate::{admission_request, Cluster, PolicyServer};

/// What a compared case came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Compared {
    /// Both hosts decided the same way.
    Decided,
    /// Both hosts refused the settings with the same reason.
    SettingsRefused,
    /// The case is about nicpolicy's own host or tools: it expects a host failure (timeouts,
    /// traps), sets the host's input cap (`maxInputBytes`; policy-server has limits of its
    /// own), or its template is a control-plane one by the KubeadmControlPlane beside it in its
    /// file (the offline tools' rule; an admission review carries the template alone).
    HostOnly,
}

/// The namespace the API server gives an object created without one.
const DEFAULT_NAMESPACE: &str = "default";

fn namespace_of(object: &Value) -> Option<&str> {
    object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|ns| !ns.is_empty())
}

/// Sets `metadata.namespace` when missing, as `kubectl apply -n` does for namespaced objects.
fn with_namespace(mut object: Value, namespace: &str) -> Value {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata
            .entry("namespace")
            .or_insert_with(|| Value::String(namespace.to_string()));
    }
    object
}

/// The Kubewarden settings for a case: the policy's own settings plus defaulting and the
/// case's inventory, under the keys the Kubewarden build reads itself.
pub fn settings(case: &Case, mutating: bool) -> Value {
    let mut map = match &case.settings {
        Value::Object(map) => map.clone(),
        Value::Null => Map::new(),
        // Not a map: passed as it is, for the policy to refuse.
        other => return other.clone(),
    };
    map.insert(MUTATING_KEY.to_string(), Value::Bool(mutating));
    if let Some(inventory) = &case.request.inventory {
        map.insert(
            INVENTORY_KEY.to_string(),
            serde_json::to_value(inventory).unwrap_or(Value::Null),
        );
    }
    Value::Object(map)
}

/// The machine (and stored machine) as the API server would send them, and the cluster's
/// objects as `get_resource` would find them.
///
/// A case file may hold a machine without a cluster-name label when its cluster file has one
/// VCDCluster (nicpolicy's offline commands pick that one). The API server path needs the
/// label, so such a machine gets the label of the cluster the case means; nothing the policy
/// reads changes. A cluster file without a Cluster object gets one whose infrastructureRef
/// names its VCDCluster, as clusterctl generates them. A case without a cluster file is about a
/// machine whose cluster is not known yet: its objects are sent as they are, and there is no
/// cluster to find.
pub fn objects(case: &Case) -> (Value, Option<Value>, Cluster) {
    if case.request.cluster_unknown {
        let namespace = namespace_of(&case.objects.machine)
            .unwrap_or(DEFAULT_NAMESPACE)
            .to_string();
        let machine = with_namespace(case.objects.machine.clone(), &namespace);
        let old = case
            .objects
            .old
            .as_ref()
            .map(|old| with_namespace(old.clone(), &namespace));
        return (machine, old, Cluster::default());
    }
    let vcd_name = &case.request.cluster.name;
    // Objects without a namespace are in the machine's (or, failing that, the VCDCluster's).
    let vcd_namespace = case.objects.cluster.iter().find_map(|object| {
        let is_vcd = object.get("kind").and_then(Value::as_str) == Some("VCDCluster")
            && object.pointer("/metadata/name").and_then(Value::as_str) == Some(vcd_name);
        if is_vcd {
            namespace_of(object)
        } else {
            None
        }
    });
    let namespace = namespace_of(&case.objects.machine)
        .or(vcd_namespace)
        .unwrap_or(DEFAULT_NAMESPACE)
        .to_string();
    let mut cluster_objects: Vec<Value> = case
        .objects
        .cluster
        .iter()
        .map(|object| with_namespace(object.clone(), &namespace))
        .collect();
    let owner = cluster_objects
        .iter()
        .find(|object| {
            object.get("kind").and_then(Value::as_str) == Some("Cluster")
                && infrastructure_ref(object, "Cluster").as_deref() == Ok(vcd_name.as_str())
        })
        .and_then(|object| object.pointer("/metadata/name").and_then(Value::as_str))
        .unwrap_or(vcd_name)
        .to_string();
    let label = |object: &Value| {
        let mut object = with_namespace(object.clone(), &namespace);
        if cluster_name_of(&object).is_none() {
            if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                let labels = metadata
                    .entry("labels")
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Some(labels) = labels.as_object_mut() {
                    labels.insert(CLUSTER_NAME_LABEL.to_string(), Value::String(owner.clone()));
                }
            }
        }
        object
    };
    let machine = label(&case.objects.machine);
    // The stored machine gets the label only when nicpolicy judged both against the same
    // cluster: a case about a label added later keeps its stored machine unlabelled.
    let old = case.objects.old.as_ref().map(|old| {
        if case.request.same_cluster_as_stored {
            label(old)
        } else {
            with_namespace(old.clone(), &namespace)
        }
    });
    let has_cluster = cluster_objects.iter().any(|object| {
        object.get("kind").and_then(Value::as_str) == Some("Cluster")
            && object.pointer("/metadata/name").and_then(Value::as_str) == Some(owner.as_str())
    });
    if !has_cluster {
        cluster_objects.push(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": "Cluster",
            "metadata": {"name": owner, "namespace": namespace},
            "spec": {"infrastructureRef": {
                "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta3",
                "kind": "VCDCluster",
                "name": vcd_name
            }}
        }));
    }
    (
        machine,
        old,
        Cluster {
            objects: cluster_objects,
        },
    )
}

/// The AdmissionRequest policy-server would send for `case`, and the cluster's objects.
pub fn request(case: &Case) -> (Value, Cluster) {
    let (machine, old, cluster) = objects(case);
    (admission_request(&machine, old.as_ref()), cluster)
}

/// Runs `case` through nicpolicy's host (`policy`, the ABI v1 build) and the waPC test host
/// (`kubewarden`, the Kubewarden build of the same crate); returns every difference.
pub fn compare(
    case: &Case,
    policy: &nicpolicy::Policy,
    kubewarden: &PolicyServer,
) -> Result<Compared, Vec<String>> {
    let labelled_control_plane = case
        .objects
        .machine
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .is_some_and(|labels| labels.contains_key("cluster.x-k8s.io/control-plane"))
        || case
            .objects
            .machine
            .pointer("/spec/template/metadata/labels")
            .and_then(Value::as_object)
            .is_some_and(|labels| labels.contains_key("cluster.x-k8s.io/control-plane"));
    let role_from_beside = case.request.machine.role == nicpolicy_plugin::Role::ControlPlane
        && !labelled_control_plane;
    if case.expect.error.is_some() || case.max_input_bytes.is_some() || role_from_beside {
        return Ok(Compared::HostOnly);
    }
    let kw_settings = settings(case, true);
    let verdict = kubewarden
        .validate_settings(&kw_settings)
        .map_err(|err| vec![format!("validate_settings failed: {err}")])?;
    let policy = match policy.with_settings(case.settings.clone()) {
        Ok(policy) => policy,
        Err(LoadError::Settings(reason)) => {
            return match verdict.message {
                Some(message) if !verdict.valid && message == reason => {
                    Ok(Compared::SettingsRefused)
                }
                other => Err(vec![format!(
                    "nicpolicy refuses the settings ({reason}); Kubewarden says valid={} ({other:?})",
                    verdict.valid
                )]),
            };
        }
        Err(err) => return Err(vec![format!("nicpolicy cannot load the settings: {err}")]),
    };
    if !verdict.valid {
        return Err(vec![format!(
            "nicpolicy accepts the settings; Kubewarden refuses them: {:?}",
            verdict.message
        )]);
    }
    let decision = judge(&case.request, |request| policy.evaluate(request))
        .map_err(|err| vec![format!("nicpolicy failed: {err}")])?
        .decision;
    let unknown = case.request.cluster_unknown;

    let (request, cluster) = request(case);
    let machine = request["object"].clone();
    let (response, calls) = kubewarden
        .validate(&request, &kw_settings, &cluster)
        .map_err(|err| vec![format!("validate failed: {err}")])?;

    let mut mismatches = Vec::new();
    let lookups: Vec<&str> = calls.iter().map(|c| c.operation.as_str()).collect();
    let all_get_resource = lookups
        .iter()
        .all(|op| *op == "kubewarden/kubernetes/get_resource");
    if !all_get_resource || (lookups.len() == 2) == unknown {
        mismatches.push(format!(
            "expected {} get_resource calls, got {lookups:?}",
            if unknown {
                "fewer than two (the cluster is not there)"
            } else {
                "two (Cluster, VCDCluster)"
            }
        ));
    }
    if response.accepted != decision.allowed {
        mismatches.push(format!(
            "nicpolicy allowed={}, Kubewarden accepted={} ({:?})",
            decision.allowed, response.accepted, response.message
        ));
    }
    let mut warnings = response.warnings.clone().unwrap_or_default();
    if unknown {
        // First the warning of a machine checked without its cluster, as the webhook gives it;
        // why the cluster is unknown is worded by each host's lookup.
        let display = format!(
            "{} {}/{}",
            case.request.kind.as_str(),
            case.request.machine.namespace,
            case.request.machine.name
        );
        const WHY: &str = "\u{0}";
        let expected = unknown_cluster_warning(&display, &WHY);
        let (head, tail) = expected.split_once(WHY).unwrap_or_default();
        match warnings.first() {
            Some(first) if first.starts_with(head) && first.ends_with(tail) => {
                warnings.remove(0);
            }
            other => mismatches.push(format!(
                "expected the unknown-cluster warning first ({head}...), got {other:?}"
            )),
        }
    }
    if warnings != decision.warnings {
        mismatches.push(format!(
            "warnings differ: nicpolicy {:?}, Kubewarden {warnings:?}",
            decision.warnings
        ));
    }
    if !decision.allowed {
        let message = response.message.clone().unwrap_or_default();
        let lines: Vec<&str> = message.lines().skip(1).collect();
        let expected: Vec<String> = decision
            .violations
            .iter()
            .map(|v| v.field_error())
            .collect();
        if lines != expected {
            mismatches.push(format!(
                "the message must list every violation, one per line:\n    want {expected:?}\n    got  {lines:?}"
            ));
        }
        for violation in &decision.violations {
            if !message.contains(&violation.field) {
                mismatches.push(format!("field {} is not in the message", violation.field));
            }
        }
        if response.code != Some(422) {
            mismatches.push(format!("denial code {:?}, want 422", response.code));
        }
        if response.mutated_object.is_some() {
            mismatches.push("a denial carries a mutated object".to_string());
        }
    } else {
        let plan = NicPlan {
            policy: &policy.name(),
            nics: &decision.nics,
            vapp_networks: &decision.vapp_networks,
        };
        // As the webhook's mutating endpoint: an object being deleted is left alone, and
        // without the cluster there is no NIC plan to write.
        let operations = if case.request.machine.is_deleting() {
            Vec::new()
        } else {
            let plan = (!unknown).then_some(&plan);
            patch_operations(case.request.kind, &machine, &decision, plan)
        };
        let mut patched = machine.clone();
        if let Err(err) = json_patch::patch(&mut patched, &operations) {
            mismatches.push(format!("nicpolicy's patch does not apply: {err}"));
        }
        let mutated = response
            .mutated_object
            .clone()
            .unwrap_or_else(|| machine.clone());
        let webhook = json_patch::diff(&machine, &patched);
        let kubewarden = json_patch::diff(&machine, &mutated);
        if webhook != kubewarden {
            mismatches.push(format!(
                "the mutation differs:\n    nicpolicy  {}\n    Kubewarden {}",
                serde_json::to_string(&webhook).unwrap_or_default(),
                serde_json::to_string(&kubewarden).unwrap_or_default()
            ));
        }
        if operations.is_empty() && response.mutated_object.is_some() {
            mismatches.push("a mutated object where nicpolicy patches nothing".to_string());
        }
    }
    if mismatches.is_empty() {
        Ok(Compared::Decided)
    } else {
        Err(mismatches)
    }
}
