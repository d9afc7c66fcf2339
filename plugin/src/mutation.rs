//! What defaulting writes into a machine object: `extraOvdcNetworks` when the policy changed the
//! list, and the NIC plan in the [`NIC_PLAN_ANNOTATION`] annotation.
//!
//! `nicpolicy serve` sends these changes as a JSON patch; a policy built for Kubewarden returns
//! the changed object, which Kubewarden turns into the same patch. [`apply`] is that changed
//! object; its difference from the input is what the webhook's patch writes.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::schema::{Decision, Nic, ObjectKind};

/// Annotation that carries the NIC plan, written by defaulting.
pub const NIC_PLAN_ANNOTATION: &str = "nicpolicy.io/nic-plan";

/// The NIC plan as the annotation holds it (JSON).
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NicPlan<'a> {
    /// The policy (or chain of policies) that planned it.
    pub policy: &'a str,
    /// Every NIC, NIC 0 first (their sources left out: the annotation says what will be
    /// built, and stays the same when only an explanation changes).
    #[serde(serialize_with = "without_sources")]
    pub nics: &'a [Nic],
    /// The vApp networks the machine needs.
    pub vapp_networks: &'a [String],
}

impl NicPlan<'_> {
    /// The annotation's value. Serialising plain data cannot fail; an empty text is never
    /// written.
    pub fn text(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

fn without_sources<S: serde::Serializer>(nics: &&[Nic], out: S) -> Result<S::Ok, S::Error> {
    out.collect_seq(nics.iter().map(|nic| Nic {
        source: None,
        ..nic.clone()
    }))
}

/// Writes what `decision` defaults into `object` (a VCDMachine, or a VCDMachineTemplate whose
/// spec is `spec.template.spec`): the extra networks when they differ from the object's (a
/// missing list counts as empty), and `plan` as the annotation when it differs from the stored
/// one. Returns whether anything changed.
pub fn apply(
    kind: ObjectKind,
    object: &mut Value,
    decision: &Decision,
    plan: Option<&NicPlan<'_>>,
) -> bool {
    let mut changed = false;
    if let Some(extras) = &decision.extra_ovdc_networks {
        let mut spec = &mut *object;
        for key in kind.spec_path().split('.') {
            spec = entry(spec, key);
        }
        let current = spec.get("extraOvdcNetworks");
        let wanted = Value::from(extras.clone());
        let unchanged = match current {
            Some(current) => *current == wanted,
            None => extras.is_empty(),
        };
        if !unchanged {
            if let Some(map) = spec.as_object_mut() {
                map.insert("extraOvdcNetworks".to_string(), wanted);
                changed = true;
            }
        }
    }
    if let Some(plan) = plan {
        let text = plan.text();
        let current = object
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(NIC_PLAN_ANNOTATION))
            .and_then(Value::as_str);
        if !text.is_empty() && current != Some(text.as_str()) {
            let annotations = entry(entry(object, "metadata"), "annotations");
            if let Some(map) = annotations.as_object_mut() {
                map.insert(NIC_PLAN_ANNOTATION.to_string(), Value::String(text));
                changed = true;
            }
        }
    }
    changed
}

/// The member `key` of `value`, created as an empty map when missing; a value that is not a
/// map (such as `metadata: null`) is replaced by one, as a JSON patch `add` of the map would.
fn entry<'a>(value: &'a mut Value, key: &str) -> &'a mut Value {
    if !value.is_object() {
        *value = Value::Object(Map::new());
    }
    match value {
        Value::Object(map) => map
            .entry(key.to_string())
            .and_modify(|inner| {
                if inner.is_null() {
                    *inner = Value::Object(Map::new());
                }
            })
            .or_insert_with(|| Value::Object(Map::new())),
        // Made a map just above.
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{AdapterType, IpAllocationMode};
    use serde_json::json;

    fn decision(extras: &[&str]) -> Decision {
        Decision {
            allowed: true,
            nics: vec![Nic {
                index: 0,
                network: "mgmt-net".to_string(),
                primary: true,
                ip_allocation_mode: IpAllocationMode::Pool,
                ip_address: None,
                adapter_type: AdapterType::Vmxnet3,
                connected: true,
                source: Some(Box::new(crate::Source::rule("capvcd/plan"))),
            }],
            extra_ovdc_networks: Some(extras.iter().map(|s| s.to_string()).collect()),
            vapp_networks: vec!["mgmt-net".to_string()],
            ..Decision::default()
        }
    }

    #[test]
    fn writes_extras_and_plan_into_a_template() {
        let mut object = json!({"metadata": {"name": "prod-eu1-md-0"},
            "spec": {"template": {"spec": {"template": "ubuntu-2204"}}}});
        let decision = decision(&["storage-net"]);
        let plan = NicPlan {
            policy: "nicpolicy-capvcd",
            nics: &decision.nics,
            vapp_networks: &decision.vapp_networks,
        };
        assert!(apply(
            ObjectKind::VcdMachineTemplate,
            &mut object,
            &decision,
            Some(&plan)
        ));
        assert_eq!(
            object["spec"]["template"]["spec"]["extraOvdcNetworks"],
            json!(["storage-net"])
        );
        let text = object["metadata"]["annotations"][NIC_PLAN_ANNOTATION]
            .as_str()
            .unwrap();
        let written = serde_json::from_str::<Value>(text).unwrap();
        assert_eq!(written["policy"], "nicpolicy-capvcd");
        // The plan says what will be built; why is not stored in the object.
        assert!(written["nics"][0].get("source").is_none(), "{written}");
        assert_eq!(written["nics"][0]["network"], "mgmt-net");
        // Applying again changes nothing.
        assert!(!apply(
            ObjectKind::VcdMachineTemplate,
            &mut object,
            &decision,
            Some(&plan)
        ));
    }

    #[test]
    fn an_empty_list_is_not_written_to_an_object_without_one() {
        let mut object = json!({"metadata": {"name": "prod-eu1-md-0-x7k2p"}, "spec": {}});
        assert!(!apply(
            ObjectKind::VcdMachine,
            &mut object,
            &decision(&[]),
            None
        ));
        assert_eq!(
            object,
            json!({"metadata": {"name": "prod-eu1-md-0-x7k2p"}, "spec": {}})
        );
    }
}
