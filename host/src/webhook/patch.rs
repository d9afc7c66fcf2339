//! The JSON patch the mutating endpoint answers with: the `extraOvdcNetworks` the policy wrote
//! back and the NIC plan annotation.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, ReplaceOperation};
use nicpolicy_plugin::{Decision, ObjectKind};
use serde_json::Value;

pub use nicpolicy_plugin::mutation::{NicPlan, NIC_PLAN_ANNOTATION};

/// The JSON patch that writes what the policy decided: `extraOvdcNetworks` when it changed
/// the list, and the NIC plan annotation when it differs from the stored one. Empty when the
/// object already says all of it.
pub fn patch_operations(
    kind: ObjectKind,
    object: &Value,
    decision: &Decision,
    plan: Option<&NicPlan<'_>>,
) -> Vec<PatchOperation> {
    let mut operations = Vec::new();
    if let Some(extras) = &decision.extra_ovdc_networks {
        let spec: Vec<&str> = kind.spec_path().split('.').collect();
        let spec_pointer = PointerBuf::from_tokens(spec.iter().copied());
        let spec_value = object.pointer(spec_pointer.as_str());
        let current = spec_value.and_then(|spec| spec.get("extraOvdcNetworks"));
        let wanted = Value::from(extras.clone());
        let unchanged = match current {
            Some(current) => *current == wanted,
            None => extras.is_empty(),
        };
        if !unchanged {
            let mut field = spec_pointer.clone();
            field.push_back("extraOvdcNetworks");
            let spec_exists = spec_value.is_some_and(Value::is_object);
            operations.push(match (current, spec_exists) {
                (Some(_), _) => PatchOperation::Replace(ReplaceOperation {
                    path: field,
                    value: wanted,
                }),
                (None, true) => PatchOperation::Add(AddOperation {
                    path: field,
                    value: wanted,
                }),
                // `spec.template` always exists (the object was read); only the last level may not.
                (None, false) => PatchOperation::Add(AddOperation {
                    path: spec_pointer,
                    value: serde_json::json!({ "extraOvdcNetworks": wanted }),
                }),
            });
        }
    }
    if let Some(plan) = plan {
        // Serialising plain data cannot fail; an empty plan would only be skipped.
        let text = plan.text();
        let annotations = object.pointer("/metadata/annotations");
        let current = annotations
            .and_then(|a| a.get(NIC_PLAN_ANNOTATION))
            .and_then(Value::as_str);
        if !text.is_empty() && current != Some(text.as_str()) {
            operations.push(match annotations {
                Some(Value::Object(_)) => PatchOperation::Add(AddOperation {
                    path: PointerBuf::from_tokens(["metadata", "annotations", NIC_PLAN_ANNOTATION]),
                    value: Value::String(text),
                }),
                _ => PatchOperation::Add(AddOperation {
                    path: PointerBuf::from_tokens(["metadata", "annotations"]),
                    value: serde_json::json!({ NIC_PLAN_ANNOTATION: text }),
                }),
            });
        }
    }
    operations
}

/// The operation that sets annotation `key` of `object` back to `stored` (removes it when
/// `stored` is None); none when it already is.
pub fn restore_annotation(
    object: &Value,
    key: &str,
    stored: Option<&String>,
) -> Option<PatchOperation> {
    let annotations = object.pointer("/metadata/annotations");
    let current = annotations.and_then(|a| a.get(key)).and_then(Value::as_str);
    if current == stored.map(String::as_str) {
        return None;
    }
    let path = PointerBuf::from_tokens(["metadata", "annotations", key]);
    Some(match stored {
        Some(value) if annotations.is_some_and(Value::is_object) => {
            PatchOperation::Add(AddOperation {
                path,
                value: Value::String(value.clone()),
            })
        }
        Some(value) => PatchOperation::Add(AddOperation {
            path: PointerBuf::from_tokens(["metadata", "annotations"]),
            value: serde_json::json!({ key: value }),
        }),
        None => PatchOperation::Remove(json_patch::RemoveOperation { path }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nicpolicy_plugin::Nic;
    use serde_json::json;

    fn nic(index: u32, network: &str) -> Nic {
        Nic::capvcd(index, network)
    }

    fn apply(object: &Value, operations: Vec<PatchOperation>) -> Value {
        let mut patched = object.clone();
        json_patch::patch(&mut patched, &operations).expect("the patch applies");
        patched
    }

    #[test]
    fn patch_writes_extras_and_plan_and_applies() {
        let object =
            json!({"metadata": {"name": "prod-eu1-md-0-x7k2p"}, "spec": {"template": "ubuntu"}});
        let decision = Decision {
            allowed: true,
            nics: vec![nic(0, "mgmt-net"), nic(1, "storage-net")],
            extra_ovdc_networks: Some(vec!["storage-net".into()]),
            vapp_networks: vec!["mgmt-net".into(), "storage-net".into()],
            ..Decision::default()
        };
        let plan = NicPlan {
            policy: "nicpolicy-capvcd",
            nics: &decision.nics,
            vapp_networks: &decision.vapp_networks,
        };
        let operations = patch_operations(ObjectKind::VcdMachine, &object, &decision, Some(&plan));
        let patched = apply(&object, operations);
        assert_eq!(patched["spec"]["extraOvdcNetworks"], json!(["storage-net"]));
        let annotation = patched["metadata"]["annotations"][NIC_PLAN_ANNOTATION]
            .as_str()
            .unwrap();
        let plan: Value = serde_json::from_str(annotation).unwrap();
        assert_eq!(plan["nics"][1]["network"], "storage-net");
        // Applying the same decision to the patched object changes nothing.
        let again = patch_operations(
            ObjectKind::VcdMachine,
            &patched,
            &decision,
            Some(&plan_of(&decision)),
        );
        assert!(again.is_empty(), "{again:?}");
    }

    fn plan_of(decision: &Decision) -> NicPlan<'_> {
        NicPlan {
            policy: "nicpolicy-capvcd",
            nics: &decision.nics,
            vapp_networks: &decision.vapp_networks,
        }
    }

    #[test]
    fn template_patch_goes_under_spec_template_spec() {
        let object = json!({"metadata": {"name": "prod-eu1-md-0", "annotations": {"owner": "platform"}},
                            "spec": {"template": {"spec": {"extraOvdcNetworks": ["workload-net"]}}}});
        let decision = Decision {
            allowed: true,
            extra_ovdc_networks: Some(vec!["storage-net".into(), "workload-net".into()]),
            ..Decision::default()
        };
        let patched = apply(
            &object,
            patch_operations(ObjectKind::VcdMachineTemplate, &object, &decision, None),
        );
        assert_eq!(
            patched["spec"]["template"]["spec"]["extraOvdcNetworks"],
            json!(["storage-net", "workload-net"])
        );
        assert_eq!(patched["metadata"]["annotations"]["owner"], "platform");
    }

    #[test]
    fn no_patch_when_the_policy_changes_nothing() {
        let object = json!({"metadata": {}, "spec": {}});
        let decision = Decision {
            allowed: true,
            extra_ovdc_networks: Some(Vec::new()),
            ..Decision::default()
        };
        assert!(patch_operations(ObjectKind::VcdMachine, &object, &decision, None).is_empty());
    }
}
