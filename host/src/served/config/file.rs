//! The configuration file as written: every field optional, unknown fields refused. The
//! parent module checks it section by section into a [`ServeConfig`](super::ServeConfig).

use std::collections::BTreeMap;
use std::path::PathBuf;

use nicpolicy_plugin::provisioner::{OnUnapplied, PlanField, Profile};
use nicpolicy_plugin::{AdapterType, IpAllocationMode};
use serde::Deserialize;
use serde_json::Value;

use super::{FailureMode, UnavailableAtStart, UnknownClusterMode};
use nicpolicy_engine::mode::Mode;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfigFile {
    pub api_version: Option<String>,
    pub kind: Option<String>,
    pub listen: Option<String>,
    pub tls: Option<Tls>,
    pub client_auth: Option<ClientAuth>,
    #[serde(default)]
    pub policies: BTreeMap<String, Vec<Policy>>,
    pub on_policy_failure: Option<FailureMode>,
    pub on_unknown_cluster: Option<UnknownClusterMode>,
    pub inventory: Option<PathBuf>,
    pub inventories: Option<BTreeMap<String, PathBuf>>,
    pub cloud_director: Option<CloudDirector>,
    pub clusters: Option<Clusters>,
    pub evaluation: Option<Evaluation>,
    pub max_request_bytes: Option<Size>,
    pub reload: Option<Reload>,
    pub nic_plan_annotation: Option<bool>,
    pub connections: Option<Connections>,
    pub provisioner: Option<Provisioner>,
    pub compile: Option<Compile>,
    pub registry: Option<Registry>,
    pub verification: Option<Vec<VerificationRule>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
// Read only by a build with registry support; without one, a rule is refused whole.
#[cfg_attr(not(feature = "oci"), allow(dead_code))]
pub struct VerificationRule {
    pub references: Vec<String>,
    pub keys: Vec<PathBuf>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Registry {
    pub config: Option<PathBuf>,
    pub ca_files: Option<Vec<PathBuf>>,
    pub registry_ca_files: Option<BTreeMap<String, Vec<PathBuf>>>,
    pub plain_http: Option<bool>,
    pub require_digest: Option<bool>,
    pub on_unavailable_at_start: Option<UnavailableAtStart>,
    pub timeouts: Option<RegistryTimeouts>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
// Read only by a build with registry support; without one, the section is refused whole.
#[cfg_attr(not(feature = "oci"), allow(dead_code))]
pub struct RegistryTimeouts {
    pub connect: Option<String>,
    pub read: Option<String>,
    pub pull: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Compile {
    pub timeout: Option<String>,
    pub memory: Option<Size>,
    pub max_functions: Option<u64>,
    pub max_code_bytes: Option<Size>,
    pub max_function_bytes: Option<Size>,
    pub max_locals: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Provisioner {
    pub profile: Option<Profile>,
    pub name: Option<String>,
    pub applies: Option<Vec<PlanField>>,
    pub builds: Option<Builds>,
    pub on_unapplied: Option<OnUnapplied>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CloudDirector {
    pub site: String,
    pub org: String,
    pub token_secret: TokenSecret,
    pub namespace: Option<String>,
    pub ca_file: Option<PathBuf>,
    pub refresh_interval: Option<String>,
    pub config_map: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TokenSecret {
    pub name: String,
    pub key: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Builds {
    pub ip_allocation_mode: Option<IpAllocationMode>,
    pub adapter_type: Option<AdapterType>,
    pub connected: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Connections {
    pub max: Option<usize>,
    pub max_per_client: Option<usize>,
    pub read_timeout: Option<String>,
    pub idle_timeout: Option<String>,
    pub max_buffered_bytes: Option<Size>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Tls {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub reload_interval: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClientAuth {
    pub ca_file: PathBuf,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Policy {
    pub path: Option<PathBuf>,
    pub builtin: Option<String>,
    pub oci: Option<String>,
    pub sha256: Option<String>,
    pub settings: Option<Value>,
    pub settings_file: Option<PathBuf>,
    pub timeout: Option<String>,
    pub memory: Option<Size>,
    pub max_input_bytes: Option<Size>,
    pub mode: Option<Mode>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Clusters {
    pub source: Source,
    #[serde(default)]
    pub files: Vec<PathBuf>,
    pub cluster_api_version: Option<String>,
}

#[derive(Deserialize, Clone, Copy)]
pub enum Source {
    Kubernetes,
    Static,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Evaluation {
    pub workers: Option<usize>,
    pub queue_timeout: Option<String>,
    pub inline_budget: Option<Budget>,
}

/// `evaluation.inlineBudget`: a duration (`5ms`), or a bare `0` (YAML reads it as a number)
/// to turn the budget off.
#[derive(Deserialize)]
#[serde(untagged)]
pub enum Budget {
    Number(u64),
    Text(String),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Reload {
    pub enabled: Option<bool>,
    pub interval: Option<String>,
}

/// `64Mi` or a plain number of bytes.
#[derive(Deserialize)]
#[serde(untagged)]
pub enum Size {
    Bytes(u64),
    Text(String),
}
