//! The backstop: the served chains' structural rules as ValidatingAdmissionPolicies, which
//! kube-apiserver evaluates in process while no webhook answers (`nicpolicy export backstop`,
//! docs/deploy.md "The backstop").
//!
//! For each kind, the chain's enforced policies are asked for their CEL validations
//! ([`nicpolicy_plugin::backstop`]) in chain order, and combined: a machine must pass all of
//! them. A policy is asked only while every policy before it judges the machine's own list:
//! after one that may rewrite `extraOvdcNetworks` (defaults, mapped names), or one without a
//! backstop (which might), the later policies judge a list the API server never sees, so they
//! are left to the webhook and said so. Warn-mode entries deny nothing, so they add nothing.
//!
//! The settings are parameters in one ConfigMap (`<name>-backstop`), keyed by kind and chain
//! position (`VCDMachine.0.maxNics`), beside the inventory's network names: a settings change
//! rewrites the ConfigMap, not the policies.

use std::collections::BTreeMap;

use nicpolicy_engine::chain::PolicyChain;
use nicpolicy_engine::mode::Mode;
use nicpolicy_plugin::backstop::{Validation, INVENTORY_PARAM};
use nicpolicy_plugin::{Inventory, ObjectKind, Reason};
use serde_json::{json, Value};

use crate::served::Served;

/// The API group and versions the backstop matches: those the webhook serves.
const GROUP: &str = "infrastructure.cluster.x-k8s.io";
const VERSIONS: [&str; 2] = ["v1beta2", "v1beta3"];

/// Why a backstop could not be written.
#[derive(Debug, thiserror::Error)]
pub enum BackstopError {
    /// A policy's `nicpolicy_backstop` failed or answered garbage.
    #[error("{field} ({policy}): {error}")]
    Policy {
        /// The entry, like `policies.VCDMachine[0]`.
        field: String,
        /// The policy's name.
        policy: String,
        /// Why.
        error: nicpolicy_engine::error::EvalError,
    },
    /// A kind's chain could not be loaded, so nothing can be said of it.
    #[error("{}: {why}", kind.as_str())]
    Unavailable {
        /// The kind.
        kind: ObjectKind,
        /// Why.
        why: String,
    },
}

/// Names and placement of the objects written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Prefix of the objects' names (`nicpolicy`: `nicpolicy-backstop-vcdmachine`).
    pub name: String,
    /// Namespace of the parameter ConfigMap (where nicpolicy runs).
    pub namespace: String,
    /// Leave out namespaces labelled `nicpolicy.io/enforce=false`, as the webhook does when its
    /// opt-out is on.
    pub namespace_opt_out: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            name: "nicpolicy".into(),
            namespace: "nicpolicy".into(),
            namespace_opt_out: false,
        }
    }
}

/// One kind's combined backstop.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KindBackstop {
    /// The validations of the policies asked, in chain order.
    pub validations: Vec<Validation>,
    /// Their parameters.
    pub params: BTreeMap<String, String>,
    /// The policies asked (their names).
    pub covered: Vec<String>,
    /// What the webhook checks that this does not, one line each.
    pub not_covered: Vec<String>,
}

/// The backstop of `chain` for `kind`.
///
/// # Errors
/// A policy whose backstop export fails.
pub fn of_chain(
    kind: ObjectKind,
    chain: &PolicyChain,
    fields: &[String],
) -> Result<KindBackstop, BackstopError> {
    let mut out = KindBackstop::default();
    let mut stopped: Option<String> = None;
    for (index, (policy, mode)) in chain.policies().iter().zip(chain.modes()).enumerate() {
        let name = policy.name();
        let field = fields
            .get(index)
            .cloned()
            .unwrap_or_else(|| format!("policies.{}[{index}]", kind.as_str()));
        if *mode == Mode::Warn {
            out.not_covered
                .push(format!("{field} ({name}): warn mode, it denies nothing"));
            continue;
        }
        if let Some(why) = &stopped {
            out.not_covered.push(format!(
                "{field} ({name}): {why}, so it judges a list the backstop never sees"
            ));
            continue;
        }
        let prefix = format!("{}.{index}.", kind.as_str());
        let backstop = policy
            .backstop(kind, &prefix)
            .map_err(|error| BackstopError::Policy {
                field: field.clone(),
                policy: name.clone(),
                error,
            })?;
        let Some(backstop) = backstop else {
            out.not_covered.push(format!(
                "{field} ({name}): no backstop (the module does not export nicpolicy_backstop)"
            ));
            stopped = Some(format!(
                "it runs after {name}, which has no backstop and may rewrite the networks"
            ));
            continue;
        };
        out.covered.push(name.clone());
        out.validations.extend(backstop.validations);
        out.params.extend(backstop.params);
        out.not_covered.extend(
            backstop
                .not_covered
                .into_iter()
                .map(|what| format!("{field} ({name}): {what}")),
        );
        if backstop.rewrites_networks {
            stopped = Some(format!(
                "it runs after {name}, which may rewrite the networks"
            ));
        }
    }
    Ok(out)
}

/// The inventory's network names as [`INVENTORY_PARAM`] holds them: one per line, with a
/// newline before the first and after the last, so `contains('\n' + name + '\n')` is an exact
/// match.
pub fn inventory_param(inventory: &Inventory) -> String {
    let mut names: Vec<&str> = inventory.networks.iter().map(|n| n.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    let mut text = String::from("\n");
    for name in names {
        text.push_str(name);
        text.push('\n');
    }
    text
}

/// What `nicpolicy export backstop` writes.
#[derive(Clone, Debug, PartialEq)]
pub struct Export {
    /// The ConfigMap, then a ValidatingAdmissionPolicy and its binding per kind.
    pub objects: Vec<Value>,
    /// Each kind's backstop; its `not_covered` ends with what no backstop covers.
    pub kinds: BTreeMap<ObjectKind, KindBackstop>,
}

/// The backstop of every kind `served` serves.
///
/// # Errors
/// A kind whose chain is not loaded, or a policy whose backstop export fails.
pub fn export(served: &Served, options: &Options) -> Result<Export, BackstopError> {
    if let Some((kind, why)) = served.unavailable.iter().next() {
        return Err(BackstopError::Unavailable {
            kind: *kind,
            why: why.clone(),
        });
    }
    let mut params = BTreeMap::new();
    // With `cloudDirector` the controller refreshes the VDCs' networks after this is written:
    // names missing here would deny machines the webhook admits, so the existence of a
    // network is left to the webhook.
    if !served.inventories.is_empty() && served.config.cloud_director.is_none() {
        // kube-apiserver cannot tell a machine's org VDC (that takes its VCDCluster): the
        // backstop knows a network when any VDC's inventory has it (`inventory_param` sorts
        // and deduplicates the names).
        let every = nicpolicy_plugin::Inventory {
            networks: served
                .inventories
                .all()
                .flat_map(|i| i.networks.iter().cloned())
                .collect(),
        };
        params.insert(INVENTORY_PARAM.to_string(), inventory_param(&every));
    }
    let mut kinds = BTreeMap::new();
    for (kind, chain) in &served.chains {
        let fields: Vec<String> = served
            .config
            .policies
            .get(kind)
            .map(|entries| entries.iter().map(|e| e.field.clone()).collect())
            .unwrap_or_default();
        let mut backstop = of_chain(*kind, chain, &fields)?;
        params.append(&mut backstop.params);
        backstop.not_covered.extend(
            [
                "defaulting: the mutating webhook's writes (role defaults, mapped names) and the NIC plan annotation",
                "rules that need the machine's VCDCluster or owner Machine (onUnknownCluster, the provisioner's unapplied fields)",
            ]
            .map(String::from),
        );
        kinds.insert(*kind, backstop);
    }
    let mut objects = vec![params_config_map(&params, options)];
    for (kind, backstop) in &kinds {
        if backstop.validations.is_empty() {
            // kube-apiserver refuses a policy without validations; the kind is named as not
            // covered instead.
            continue;
        }
        objects.push(policy_object(*kind, &backstop.validations, options));
        objects.push(binding_object(*kind, options));
    }
    Ok(Export { objects, kinds })
}

/// `<name>-backstop-vcdmachine`.
pub fn policy_name(kind: ObjectKind, options: &Options) -> String {
    format!(
        "{}-backstop-{}",
        options.name,
        kind.as_str().to_ascii_lowercase()
    )
}

/// `<name>-backstop`.
pub fn params_name(options: &Options) -> String {
    format!("{}-backstop", options.name)
}

fn labels(options: &Options) -> Value {
    json!({
        "app.kubernetes.io/name": options.name,
        "app.kubernetes.io/component": "backstop",
    })
}

/// The parameter ConfigMap.
pub fn params_config_map(params: &BTreeMap<String, String>, options: &Options) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": params_name(options),
            "namespace": options.namespace,
            "labels": labels(options),
        },
        "data": params,
    })
}

/// The reason kube-apiserver reports for a refusal: Forbidden for a forbidden change, Invalid
/// for the rest (the only other reasons a policy may give are about authorization and size).
fn status_reason(reason: Reason) -> &'static str {
    match reason {
        Reason::Forbidden => "Forbidden",
        _ => "Invalid",
    }
}

/// The ValidatingAdmissionPolicy of `kind`.
pub fn policy_object(kind: ObjectKind, validations: &[Validation], options: &Options) -> Value {
    let resource = format!("{}s", kind.as_str().to_ascii_lowercase());
    let validations: Vec<Value> = validations
        .iter()
        .map(|v| {
            let mut out = json!({
                "expression": v.expression,
                "message": v.message,
                "reason": status_reason(v.reason),
            });
            if let Some(expression) = &v.message_expression {
                out["messageExpression"] = expression.clone().into();
            }
            out
        })
        .collect();
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": policy_name(kind, options), "labels": labels(options)},
        "spec": {
            // An expression that cannot be evaluated refuses: the ConfigMap is missing a value
            // it should hold, which whoever edited it can put back.
            "failurePolicy": "Fail",
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {
                "matchPolicy": "Equivalent",
                "resourceRules": [{
                    "apiGroups": [GROUP],
                    "apiVersions": VERSIONS,
                    "operations": ["CREATE", "UPDATE"],
                    "resources": [resource],
                    "scope": "Namespaced",
                }],
            },
            // As the webhook: an object being deleted is never refused (CAPVCD removes its
            // finalizer with an UPDATE).
            "matchConditions": [{
                "name": "not-being-deleted",
                "expression": "object == null || oldObject == null || !has(object.metadata.deletionTimestamp)",
            }],
            "variables": nicpolicy_plugin::backstop::variables(kind)
                .iter()
                .map(|(name, expression)| json!({"name": name, "expression": expression}))
                .collect::<Vec<_>>(),
            "validations": validations,
        },
    })
}

/// The binding of `kind`'s policy: deny, parameters from the ConfigMap.
pub fn binding_object(kind: ObjectKind, options: &Options) -> Value {
    let mut spec = json!({
        "policyName": policy_name(kind, options),
        "validationActions": ["Deny"],
        "paramRef": {
            "name": params_name(options),
            "namespace": options.namespace,
            // Without its parameters the backstop refuses rather than admits unchecked.
            "parameterNotFoundAction": "Deny",
        },
    });
    if options.namespace_opt_out {
        spec["matchResources"] = json!({
            "namespaceSelector": {
                "matchExpressions": [{
                    "key": "nicpolicy.io/enforce",
                    "operator": "NotIn",
                    "values": ["false"],
                }],
            },
        });
    }
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy_name(kind, options), "labels": labels(options)},
        "spec": spec,
    })
}
