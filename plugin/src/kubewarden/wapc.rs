//! The waPC entry points of the Kubewarden build (the `kubewarden` feature).

use kubewarden_policy_sdk::request::{KubernetesAdmissionRequest, ValidationRequest};
use kubewarden_policy_sdk::response::ValidationResponse;
use kubewarden_policy_sdk::settings::SettingsValidationResponse;
pub use kubewarden_policy_sdk::wapc_guest;
use serde::Serialize;
use serde_json::Value;
use wapc_guest::CallResult;

use super::{denial_message, Policy, Settings, CLUSTER_API_VERSION, VCD_CLUSTER_API_VERSION};
use crate::lifecycle;
use crate::mutation::{self, NicPlan};
use crate::objects::{self, CAPVCD_GROUP};
use crate::schema::{Cluster, ObjectKind, Operation};

fn to_json<T: Serialize>(value: &T) -> CallResult {
    Ok(serde_json::to_vec(value)?)
}

/// `protocol_version`: the protocol this build speaks (`"v1"`).
pub fn protocol_version(payload: &[u8]) -> CallResult {
    kubewarden_policy_sdk::protocol_version_guest(payload)
}

/// `validate_settings`: the settings as JSON in, `{"valid": bool, "message": ...}` out.
pub fn validate_settings(payload: &[u8], policy: &Policy) -> CallResult {
    let verdict = match serde_json::from_slice::<Value>(payload) {
        Ok(value) => Settings::parse(&value, policy.validate_settings),
        Err(err) => Err(format!("settings are not JSON: {err}")),
    };
    to_json(&SettingsValidationResponse {
        valid: verdict.is_ok(),
        message: verdict.err(),
    })
}

/// Why a request cannot be decided: the answer is a waPC error (Kubewarden reports it as a
/// failed evaluation) naming the cause, never a trap.
fn failure(message: String) -> CallResult {
    Err(message.into())
}

fn answer(
    accepted: bool,
    message: Option<String>,
    code: Option<u16>,
    mutated: Option<Value>,
    warnings: Vec<String>,
) -> CallResult {
    to_json(&ValidationResponse {
        accepted,
        message,
        code,
        mutated_object: mutated,
        audit_annotations: None,
        warnings: (!warnings.is_empty()).then_some(warnings),
    })
}

/// A request that is not one the policy can check (wrong kind, missing or unreadable object):
/// rejected with 400 and the reason, as `nicpolicy serve` answers it.
fn bad_request(message: String) -> CallResult {
    answer(false, Some(message), Some(400), None, Vec::new())
}

/// `validate`: a ValidationRequest in, a ValidationResponse out.
pub fn validate(payload: &[u8], policy: &Policy) -> CallResult {
    let validation: ValidationRequest<Value> = match serde_path_to_error::deserialize(
        &mut serde_json::Deserializer::from_slice(payload),
    ) {
        Ok(validation) => validation,
        Err(err) => {
            return failure(format!(
                "malformed ValidationRequest at {}: {}",
                err.path(),
                err.inner()
            ))
        }
    };
    let settings = match Settings::parse(&validation.settings, policy.validate_settings) {
        Ok(settings) => settings,
        Err(why) => return failure(format!("the policy's settings are invalid: {why}")),
    };
    let request = validation.request;
    let kind = &request.kind;
    let object_kind = match (kind.group.as_str(), kind.kind.as_str()) {
        (CAPVCD_GROUP, "VCDMachine") => ObjectKind::VcdMachine,
        (CAPVCD_GROUP, "VCDMachineTemplate") => ObjectKind::VcdMachineTemplate,
        _ => {
            let got = if kind.group.is_empty() {
                format!("{} (core)", kind.kind)
            } else {
                format!("{}.{}", kind.kind, kind.group)
            };
            return bad_request(format!(
                "{} checks VCDMachine and VCDMachineTemplate objects of {CAPVCD_GROUP}, not {got}; \
                 check the policy's rules",
                policy.name
            ));
        }
    };
    let operation = match request.operation.as_str() {
        "CREATE" => Operation::Create,
        "UPDATE" => Operation::Update,
        // Deletions and connections carry no network choice to check.
        "DELETE" | "CONNECT" => return answer(true, None, None, None, Vec::new()),
        other => {
            return failure(format!(
                "unknown operation {other:?}: expected CREATE, UPDATE, DELETE or CONNECT"
            ))
        }
    };
    // Status updates carry no network choice either.
    if !request.sub_resource.is_empty() {
        return answer(true, None, None, None, Vec::new());
    }
    decide(policy, &settings, &request, object_kind, operation)
}

fn decide(
    policy: &Policy,
    settings: &Settings,
    request: &KubernetesAdmissionRequest,
    object_kind: ObjectKind,
    operation: Operation,
) -> CallResult {
    let read = |object: &Value, label: &str| {
        let mut object = object.clone();
        if !object.is_object() {
            return Err(format!(
                "{label} is missing: a {} review must carry the object",
                request.operation
            ));
        }
        objects::fill_metadata(&mut object, &request.namespace, &request.name);
        let (kind, machine) =
            objects::machine_from_object(&object).map_err(|err| format!("{label}: {err}"))?;
        if kind != object_kind {
            return Err(format!(
                "{label} is a {}, but the request is for a {}",
                kind.as_str(),
                object_kind.as_str()
            ));
        }
        Ok(machine)
    };
    let machine = match read(&request.object, "request.object") {
        Ok(machine) => machine,
        Err(why) => return bad_request(why),
    };
    let old_machine = match operation {
        Operation::Update => match read(&request.old_object, "request.oldObject") {
            Ok(old) => Some(old),
            Err(why) => return bad_request(why),
        },
        Operation::Create => None,
    };
    let display = format!(
        "{} {}/{}",
        object_kind.as_str(),
        machine.namespace,
        machine.name
    );
    // A machine whose cluster cannot be found (none named, or not found, or unreadable) is
    // checked without it, as `nicpolicy serve` does with `onUnknownCluster: CheckWithoutCluster`:
    // the rules that need only the machine still apply, the cluster's wait for the cluster.
    let mut warnings = Vec::new();
    let cluster = match objects::cluster_name_of(&request.object)
        .ok_or_else(|| objects::unnamed_cluster(object_kind))
        .and_then(|name| find_cluster(&machine.namespace, &name))
    {
        Ok(cluster) => Ok(cluster),
        Err(why) => {
            warnings.push(lifecycle::unknown_cluster_warning(&display, &why));
            Err(objects::cluster_name_of(&request.object).unwrap_or_default())
        }
    };
    let name = machine.name.clone();
    // `old_machine` is read on an UPDATE only (above).
    let stored = old_machine.map(|machine| objects::Stored {
        machine,
        same_cluster: objects::same_cluster(&request.object, &request.old_object),
    });
    let mut request_for_policy = objects::policy_request(
        object_kind,
        machine,
        stored,
        cluster,
        settings.inventory.clone(),
    );
    // The policy's settings travel in the request (Kubewarden has no separate settings call
    // per evaluation).
    request_for_policy.settings = settings.policy.clone();
    let deleting = request_for_policy.is_deleting();
    // Deletions, unknown clusters and ratcheted updates, as nicpolicy's host judges them.
    let mut decision = (policy.evaluate)(&request_for_policy);
    decision.sort_violations();
    lifecycle::settle(&request_for_policy, &mut decision, |stored| {
        Some((policy.evaluate)(stored))
    });
    // Deployed to validate only, the build judges the object as it is, as nicpolicy's
    // validating webhook does: a list its own defaulting would change is denied.
    if !settings.mutating {
        if let Some(violation) = lifecycle::undefaulted(&request_for_policy, &decision) {
            decision.violations.push(violation);
            decision.allowed = false;
        }
    }
    warnings.extend(std::mem::take(&mut decision.warnings));
    if !decision.allowed {
        return answer(
            false,
            Some(denial_message(object_kind, &name, &decision)),
            Some(422),
            None,
            warnings,
        );
    }
    // Defaulting an object being deleted helps nobody; without the cluster NIC 0 is unknown, so
    // there is no plan to write yet.
    let mutated = if settings.mutating && !deleting {
        let plan = NicPlan {
            policy: policy.name,
            nics: &decision.nics,
            vapp_networks: &decision.vapp_networks,
        };
        let plan = (!request_for_policy.cluster_unknown).then_some(&plan);
        let mut object = request.object.clone();
        mutation::apply(object_kind, &mut object, &decision, plan).then_some(object)
    } else {
        None
    };
    answer(true, None, None, mutated, warnings)
}

/// What `kubernetes/get_resource` takes (Kubewarden's `GetResourceRequest`).
#[derive(Serialize)]
struct GetResource<'a> {
    api_version: &'a str,
    kind: &'a str,
    name: &'a str,
    namespace: Option<&'a str>,
    disable_cache: bool,
}

/// One object through the host's `kubernetes/get_resource` capability.
fn get_resource(
    api_version: &str,
    kind: &str,
    namespace: &str,
    name: &str,
) -> Result<Value, String> {
    let request = GetResource {
        api_version,
        kind,
        name,
        namespace: Some(namespace),
        disable_cache: false,
    };
    let what = format!("{kind} {namespace}/{name} ({api_version})");
    let payload = serde_json::to_vec(&request).map_err(|err| format!("{what}: {err}"))?;
    let bytes = wapc_guest::host_call("kubewarden", "kubernetes", "get_resource", &payload)
        .map_err(|err| format!("cannot read {what}: {err}"))?;
    serde_json::from_slice(&bytes)
        .map_err(|err| format!("{what}: the host's answer is not JSON: {err}"))
}

/// The VCDCluster of Cluster API cluster `cluster_name`, found the way Cluster API finds it.
fn find_cluster(namespace: &str, cluster_name: &str) -> Result<Cluster, String> {
    let cluster = get_resource(CLUSTER_API_VERSION, "Cluster", namespace, cluster_name)?;
    let vcd_name =
        objects::infrastructure_ref(&cluster, &format!("Cluster {namespace}/{cluster_name}"))?;
    let mut vcd = get_resource(VCD_CLUSTER_API_VERSION, "VCDCluster", namespace, &vcd_name)?;
    // Objects served by the API carry their version; make sure the reader sees it.
    if let Some(map) = vcd.as_object_mut() {
        map.entry("apiVersion")
            .or_insert_with(|| Value::String(VCD_CLUSTER_API_VERSION.to_string()));
    }
    objects::cluster_from_object(&vcd)
        .map_err(|err| format!("VCDCluster {namespace}/{vcd_name}: {err}"))
}
