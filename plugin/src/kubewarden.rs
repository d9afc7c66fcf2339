//! The Kubewarden build: the same policy function exported through waPC for Kubewarden's
//! policy-server and kwctl.
//!
//! The settings and messages of that build live here for every build (hosts and tests read
//! them); the waPC entry points exist with the `kubewarden` feature.
//!
//! [`export_policy!`](crate::export_policy) generates `wapc_init` in the policy crate when its
//! `kubewarden` feature is on; it registers the three operations Kubewarden calls:
//!
//! | operation | input | output |
//! |---|---|---|
//! | `protocol_version` | nothing | `"v1"` |
//! | `validate_settings` | the policy's settings | `{"valid": bool, "message": ...}` |
//! | `validate` | `{"request": AdmissionRequest, "settings": ...}` | `ValidationResponse` |
//!
//! `validate` reads the VCDMachine or VCDMachineTemplate with the same code as
//! `nicpolicy serve` ([`objects`]), finds its Cluster and VCDCluster through
//! Kubewarden's `kubernetes/get_resource` capability (label or owner Cluster, then
//! `spec.infrastructureRef`), runs the policy, applies the lifecycle rules (`lifecycle`)
//! as nicpolicy's host would (a machine whose cluster cannot be found is checked without it;
//! an object being deleted is never denied; an UPDATE is denied only for what it changes), and
//! answers:
//!
//! - denied: rejected with code 422 and a message that names every violation, one per line,
//!   as `field: Reason: message` (Kubewarden carries no field causes);
//! - allowed: accepted with the policy's warnings and, when the settings say `mutating: true`,
//!   the object with `extraOvdcNetworks` defaulted and the NIC plan annotation
//!   ([`mutation::apply`](crate::mutation::apply)); Kubewarden turns it into the same JSON patch `nicpolicy serve` sends.
//!
//! The settings are the policy's own settings plus two keys this build reads itself and removes
//! before the policy sees them: [`MUTATING_KEY`] and [`INVENTORY_KEY`]. `docs/kubewarden.md`
//! shows complete ClusterAdmissionPolicies.

use serde_json::Value;

use crate::objects::{self, CAPVCD_GROUP};
use crate::schema::{Decision, Inventory, ObjectKind, Request};
use crate::settings::describe;

#[cfg(feature = "kubewarden")]
mod wapc;
#[cfg(feature = "kubewarden")]
pub use wapc::{protocol_version, validate, validate_settings, wapc_guest};

/// Settings key that turns defaulting on: `true` in a policy deployed with `mutating: true`.
/// Off by default, because Kubewarden rejects any change from a policy deployed as validating.
pub const MUTATING_KEY: &str = "mutating";
/// Settings key holding the org VDC's networks (`networks: [...]`, as in an inventory file).
pub const INVENTORY_KEY: &str = "inventory";
/// The Cluster API version the policy reads Clusters at (declared in the metadata).
pub const CLUSTER_API_VERSION: &str = "cluster.x-k8s.io/v1beta1";
/// The version the policy reads VCDClusters at (declared in the metadata).
pub const VCD_CLUSTER_API_VERSION: &str = "infrastructure.cluster.x-k8s.io/v1beta3";
/// Custom section holding the Kubewarden metadata.
pub const METADATA_SECTION: &str = "io.kubewarden.metadata";

/// One policy, as `wapc_init` registers it.
#[derive(Clone, Copy)]
pub struct Policy {
    /// The policy's name (its package name), written into the NIC plan annotation.
    pub name: &'static str,
    /// The policy function.
    pub evaluate: fn(&Request) -> Decision,
    /// The policy's settings check.
    pub validate_settings: fn(&Value) -> Result<(), String>,
}

/// The settings of the Kubewarden build, split into what it reads itself and the policy's own.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Settings {
    /// Whether to return the defaulted object.
    pub mutating: bool,
    /// The org VDC's networks, when given.
    pub inventory: Option<Inventory>,
    /// The policy's own settings (JSON `null` when there are none).
    pub policy: Value,
}

impl Settings {
    /// Splits the settings Kubewarden passes and checks every part: the two keys of this build,
    /// then the rest with the policy's own check, as `nicpolicy serve` would check it.
    pub fn parse(value: &Value, check: fn(&Value) -> Result<(), String>) -> Result<Self, String> {
        let mut settings = Settings::default();
        settings.policy = match value {
            Value::Object(map) => {
                let mut rest = map.clone();
                if let Some(mutating) = rest.remove(MUTATING_KEY) {
                    settings.mutating = match mutating {
                        Value::Bool(on) => on,
                        other => {
                            return Err(format!(
                                "{MUTATING_KEY}: must be true or false, not {}",
                                describe(&other)
                            ))
                        }
                    };
                }
                if let Some(inventory) = rest.remove(INVENTORY_KEY) {
                    settings.inventory = Some(read_inventory(&inventory)?);
                }
                // No settings of its own: the policy's defaults, as with no settings at all.
                if rest.is_empty() {
                    Value::Null
                } else {
                    Value::Object(rest)
                }
            }
            other => other.clone(),
        };
        check(&settings.policy)?;
        Ok(settings)
    }
}

fn read_inventory(value: &Value) -> Result<Inventory, String> {
    objects::inventory_from_object(value).map_err(|err| {
        if err.field.is_empty() {
            format!("{INVENTORY_KEY}: {}", err.message)
        } else {
            format!("{INVENTORY_KEY}.{}: {}", err.field, err.message)
        }
    })
}

/// The message of a denial: which object is invalid, then every violation on a line of its own
/// as `field: Reason: message`, in the policy's order.
pub fn denial_message(kind: ObjectKind, name: &str, decision: &Decision) -> String {
    let mut message = format!("{}.{CAPVCD_GROUP} {name:?} is invalid:", kind.as_str());
    for violation in &decision.violations {
        message.push('\n');
        message.push_str(&violation.field_error());
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capvcd;
    use serde_json::json;

    #[test]
    fn own_keys_are_taken_out_and_the_rest_checked_by_the_policy() {
        let value = json!({"mutating": true, "maxNics": 4,
            "inventory": {"networks": [{"name": "storage-net"}]}});
        let settings = Settings::parse(&value, capvcd::validate_settings).unwrap();
        assert!(settings.mutating);
        assert_eq!(settings.inventory.unwrap().networks[0].name, "storage-net");
        assert_eq!(settings.policy, json!({"maxNics": 4}));
        // Nothing of its own: the policy's defaults, as with no settings at all.
        let settings = Settings::parse(&json!({"mutating": false}), capvcd::validate_settings);
        assert_eq!(settings.unwrap().policy, Value::Null);
    }

    #[test]
    fn bad_settings_name_the_key() {
        let check = capvcd::validate_settings;
        let err = Settings::parse(&json!({"mutating": "yes"}), check).unwrap_err();
        assert!(err.starts_with("mutating: "), "{err}");
        let err = Settings::parse(
            &json!({"inventory": {"networks": [{"name": "storage-net", "gateway": "10.20.0.300"}]}}),
            check,
        )
        .unwrap_err();
        assert!(err.starts_with("inventory.networks[0].gateway: "), "{err}");
        let err = Settings::parse(&json!({"maxNics": 0}), check).unwrap_err();
        assert_eq!(
            err,
            capvcd::validate_settings(&json!({"maxNics": 0})).unwrap_err()
        );
    }

    #[test]
    fn a_denial_lists_every_violation_on_its_own_line() {
        let decision = Decision::from_violations(vec![
            crate::Violation::new(
                "spec.extraOvdcNetworks[1]",
                crate::Reason::Duplicate,
                "already listed at spec.extraOvdcNetworks[0]",
            ),
            crate::Violation::new(
                "spec.extraOvdcNetworks[2]",
                crate::Reason::NotFound,
                "no such network",
            ),
        ]);
        let message = denial_message(ObjectKind::VcdMachine, "prod-eu1-md-0-x7k2p", &decision);
        let lines: Vec<&str> = message.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(
            lines[1],
            "spec.extraOvdcNetworks[1]: Duplicate value: already listed at spec.extraOvdcNetworks[0]"
        );
    }
}
