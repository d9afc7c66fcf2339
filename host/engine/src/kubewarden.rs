//! Kubewarden modules: the metadata a waPC policy carries in its `io.kubewarden.metadata` custom
//! section, and the checks Kubewarden's policy-server applies before it runs one.
//!
//! nicpolicy's policies are built for Kubewarden with their `kubewarden` feature
//! (`nicpolicy export NAME --format kubewarden`); `nicpolicy inspect` reads either kind of
//! module and says which ABI it speaks. The checks mirror policy-server and kwctl: a waPC
//! module must export `__guest_call`, `wapc_init` and `memory`, import from `wapc` (or WASI)
//! only, and declare `protocolVersion: v1`; rules follow Kubernetes' wildcard rules.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::inspect::{ItemType, ModuleInfo};

pub use nicpolicy_plugin::kubewarden::METADATA_SECTION;
/// The only waPC protocol version Kubewarden speaks.
pub const PROTOCOL_VERSION: &str = "v1";
/// The execution mode of a waPC policy.
pub const EXECUTION_MODE: &str = "kubewarden-wapc";

/// The metadata of a Kubewarden policy (policy-evaluator's `Metadata`, camelCase).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    /// The waPC protocol version; policy-server refuses a waPC module without `v1`.
    #[serde(default)]
    pub protocol_version: Option<String>,
    /// What the policy is registered for.
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// Whether the policy may return a changed object.
    #[serde(default)]
    pub mutating: bool,
    /// Whether the audit scanner evaluates existing objects with it (default true).
    #[serde(default = "yes")]
    pub background_audit: bool,
    /// `kubewarden-wapc` (the default), `opa`, `gatekeeper` or `wasi`.
    #[serde(default)]
    pub execution_mode: Option<String>,
    /// `kubernetes` (the default) or `raw`.
    #[serde(default)]
    pub policy_type: Option<String>,
    /// The Kubernetes kinds the policy reads through host capabilities.
    #[serde(default)]
    pub context_aware_resources: Vec<ContextAwareResource>,
    /// The host capabilities the policy calls (declarative).
    #[serde(default)]
    pub host_capabilities: Vec<String>,
    /// Title, version, description, license, source (`io.kubewarden.policy.*`).
    #[serde(default)]
    pub annotations: std::collections::BTreeMap<String, String>,
}

fn yes() -> bool {
    true
}

/// One admission rule of the metadata.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    /// API groups (`""` is the core group).
    pub api_groups: Vec<String>,
    /// API versions.
    pub api_versions: Vec<String>,
    /// Resources (plural, lower case).
    pub resources: Vec<String>,
    /// `CREATE`, `UPDATE`, `DELETE`, `CONNECT` or `*`.
    pub operations: Vec<String>,
}

/// A kind the policy reads from the cluster.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextAwareResource {
    /// Its apiVersion, such as `infrastructure.cluster.x-k8s.io/v1beta3`.
    pub api_version: String,
    /// Its kind, such as `VCDCluster`.
    pub kind: String,
}

/// Why policy-server would refuse a module.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubewardenError {
    /// No `io.kubewarden.metadata` section.
    #[error("no {METADATA_SECTION} section: policy-server refuses unannotated waPC modules")]
    MissingMetadata,
    /// The section is not the metadata's JSON.
    #[error("the {METADATA_SECTION} section is not valid metadata: {0}")]
    BadMetadata(String),
    /// The protocol version is missing or not `v1`.
    #[error("protocolVersion is {found}; policy-server runs waPC policies of protocol v1 only")]
    ProtocolVersion {
        /// What the metadata says (`missing` when absent).
        found: String,
    },
    /// Not a waPC policy by its metadata.
    #[error("executionMode is {found:?}; a waPC module must say {EXECUTION_MODE:?}")]
    ExecutionMode {
        /// What the metadata says.
        found: String,
    },
    /// A rule Kubernetes would refuse.
    #[error("rules[{index}]: {message}")]
    Rule {
        /// Position of the rule.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// A waPC export is missing or has another type.
    #[error("export `{name}` must be {expected}")]
    Export {
        /// The export.
        name: &'static str,
        /// Its type under waPC.
        expected: &'static str,
    },
    /// An import outside the waPC (and WASI) modules.
    #[error(
        "forbidden import `{module}.{name}`: a waPC policy imports from `wapc` (or WASI) only"
    )]
    ForbiddenImport {
        /// Import module.
        module: String,
        /// Import name.
        name: String,
    },
}

/// Reads the section's bytes.
pub fn parse_metadata(bytes: &[u8]) -> Result<Metadata, KubewardenError> {
    serde_json::from_slice(bytes).map_err(|err| KubewardenError::BadMetadata(err.to_string()))
}

/// The Kubewarden metadata of a module: `None` without an `io.kubewarden.metadata` section, an
/// error when the section is not valid metadata.
pub fn metadata(info: &ModuleInfo) -> Option<Result<Metadata, KubewardenError>> {
    info.kubewarden_section.as_deref().map(parse_metadata)
}

const OPERATIONS: [&str; 5] = ["CREATE", "UPDATE", "DELETE", "CONNECT", "*"];

/// Kubernetes' checks of a rule: no empty list, `*` alone, known operations.
fn check_rule(rule: &Rule) -> Result<(), String> {
    let lists = [
        ("apiGroups", &rule.api_groups),
        ("apiVersions", &rule.api_versions),
        ("resources", &rule.resources),
        ("operations", &rule.operations),
    ];
    for (name, list) in lists {
        if list.is_empty() {
            return Err(format!("{name} must not be empty"));
        }
        if list.len() > 1 && list.iter().any(|item| item == "*") {
            return Err(format!("{name}: \"*\" must be the only item"));
        }
        if name != "apiGroups" && list.iter().any(String::is_empty) {
            return Err(format!("{name} must not hold an empty string"));
        }
    }
    if let Some(bad) = rule
        .operations
        .iter()
        .find(|op| !OPERATIONS.contains(&op.as_str()))
    {
        return Err(format!(
            "operation {bad:?} is not one of {}",
            OPERATIONS.join(", ")
        ));
    }
    Ok(())
}

/// What policy-server checks before it runs a waPC module: the exports and imports of the
/// protocol, and metadata with protocol version v1, the waPC execution mode and valid rules.
/// Returns the metadata.
pub fn check(info: &ModuleInfo) -> Result<Metadata, KubewardenError> {
    let exports: [(&str, ItemType, &str); 3] = [
        (
            "__guest_call",
            ItemType::Func {
                params: vec!["i32".into(), "i32".into()],
                results: vec!["i32".into()],
            },
            "func (i32, i32) -> i32",
        ),
        (
            "wapc_init",
            ItemType::Func {
                params: Vec::new(),
                results: Vec::new(),
            },
            "func () -> ()",
        ),
        ("memory", ItemType::Memory, "memory"),
    ];
    for (name, ty, expected) in exports {
        if !info.exports.iter().any(|e| e.name == name && e.ty == ty) {
            return Err(KubewardenError::Export { name, expected });
        }
    }
    if let Some(import) = info
        .imports
        .iter()
        .find(|i| i.module != "wapc" && i.module != "wasi_snapshot_preview1")
    {
        return Err(KubewardenError::ForbiddenImport {
            module: import.module.clone(),
            name: import.name.clone(),
        });
    }
    let metadata = match metadata(info) {
        None => return Err(KubewardenError::MissingMetadata),
        Some(result) => result?,
    };
    match metadata.protocol_version.as_deref() {
        Some(PROTOCOL_VERSION) => {}
        other => {
            return Err(KubewardenError::ProtocolVersion {
                found: other.unwrap_or("missing").to_string(),
            })
        }
    }
    match metadata.execution_mode.as_deref() {
        None | Some(EXECUTION_MODE) => {}
        Some(other) => {
            return Err(KubewardenError::ExecutionMode {
                found: other.to_string(),
            })
        }
    }
    for (index, rule) in metadata.rules.iter().enumerate() {
        check_rule(rule).map_err(|message| KubewardenError::Rule { index, message })?;
    }
    Ok(metadata)
}

/// The metadata as JSON, for `nicpolicy inspect -o json`.
pub fn metadata_json(metadata: &Metadata) -> Value {
    serde_json::to_value(metadata).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(operations: &[&str]) -> Rule {
        Rule {
            api_groups: vec!["infrastructure.cluster.x-k8s.io".into()],
            api_versions: vec!["v1beta3".into()],
            resources: vec!["vcdmachines".into()],
            operations: operations.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn rules_follow_the_kubernetes_checks() {
        assert!(check_rule(&rule(&["CREATE", "UPDATE"])).is_ok());
        assert!(check_rule(&rule(&["*", "CREATE"]))
            .unwrap_err()
            .contains("only item"));
        assert!(check_rule(&rule(&["PATCH"])).unwrap_err().contains("PATCH"));
        assert!(check_rule(&rule(&[])).unwrap_err().contains("empty"));
    }

    #[test]
    fn background_audit_defaults_to_true() {
        let metadata = parse_metadata(br#"{"protocolVersion":"v1","rules":[]}"#).unwrap();
        assert!(metadata.background_audit);
        assert!(!metadata.mutating);
    }
}
