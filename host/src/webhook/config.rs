//! The `nicpolicy serve` configuration file (YAML or JSON), documented in `docs/deploy.md`.
//!
//! ```yaml
//! apiVersion: nicpolicy.io/v1alpha1
//! kind: ServeConfig
//! listen: 0.0.0.0:9443
//! tls: {certFile: /tls/tls.crt, keyFile: /tls/tls.key}
//! inventory: inventory.yaml            # relative paths are relative to this file
//! onPolicyFailure: Deny                # or Allow (with a warning)
//! onUnknownCluster: CheckWithoutCluster # or Deny, or Allow (with a warning)
//! policies:
//!   VCDMachine:
//!     - path: policies/capvcd.wasm
//!       sha256: 3f1c...                # optional pin
//!       settings: {maxNics: 6}
//!       timeout: 250ms
//!       memory: 64Mi
//!       maxInputBytes: 3Mi             # default: maxRequestBytes
//!   VCDMachineTemplate:
//!     - builtin: capvcd
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nicpolicy_plugin::ObjectKind;
use serde::Deserialize;
use serde_json::Value;

use crate::limits::{self, Limits};
use crate::manifest::{ManifestError, ManifestFile};

/// Port kube-apiserver reaches Cluster API webhooks on.
pub const DEFAULT_PORT: u16 = 9443;

/// What to answer when something other than the policy's decision stands in the way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum FailureMode {
    /// Deny the object, saying why.
    Deny,
    /// Admit the object with a warning saying what was not checked.
    Allow,
}

/// What to answer for a machine whose VCDCluster cannot be found: it names no cluster (a
/// VCDMachineTemplate as `clusterctl generate cluster` writes it), or one that does not exist yet
/// (`kubectl apply` creates a manifest's objects in file order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum UnknownClusterMode {
    /// Check every rule that does not need the cluster (duplicates, NIC count, names, settings,
    /// inventory) and admit with a warning when they pass; the rest runs when the machine is
    /// created with its cluster label. The default.
    CheckWithoutCluster,
    /// Deny, saying what is missing (the strictness of earlier releases).
    Deny,
    /// Admit unchecked, with a warning.
    Allow,
}

/// Where the webhook finds each machine's VCDCluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterSourceConfig {
    /// Watch Cluster and VCDCluster objects through the Kubernetes API (in-cluster config).
    Kubernetes {
        /// The `cluster.x-k8s.io` version to watch Cluster objects at.
        cluster_api_version: String,
    },
    /// Manifest files with Cluster and VCDCluster objects, read at start.
    Static {
        /// The files.
        files: Vec<PathBuf>,
    },
}

/// Where a policy module comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModuleSource {
    /// A `.wasm` file.
    File(PathBuf),
    /// A policy built into the binary (`builtin: capvcd`).
    Builtin(String),
}

impl ModuleSource {
    /// How logs and errors name the module.
    pub fn label(&self) -> String {
        match self {
            ModuleSource::File(path) => path.display().to_string(),
            ModuleSource::Builtin(name) => format!("builtin:{name}"),
        }
    }
}

/// One policy of a kind's chain.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyConfig {
    /// The module.
    pub source: ModuleSource,
    /// Refuse the module unless its sha256 is this.
    pub sha256: Option<String>,
    /// Settings, from `settings` or `settingsFile` (`null` when neither).
    pub settings: Value,
    /// File the settings came from, watched for changes.
    pub settings_file: Option<PathBuf>,
    /// Time and memory limits of every call.
    pub limits: Limits,
    /// Where the entry sits in the file, like `policies.VCDMachine[0]`.
    pub field: String,
}

/// TLS files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificate chain.
    pub cert_file: PathBuf,
    /// PEM private key.
    pub key_file: PathBuf,
    /// How often the files are checked for a new certificate.
    pub reload_interval: Duration,
}

/// A checked configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct ServeConfig {
    /// The file it was read from (`None` for the built-in default).
    pub path: Option<PathBuf>,
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Certificate and key; `None` needs `--tls-self-signed`.
    pub tls: Option<TlsFiles>,
    /// The chain of policies for each kind; a kind that is absent is not served.
    pub policies: BTreeMap<KindKey, Vec<PolicyConfig>>,
    /// What to do when a policy fails at run time (trap, time limit, memory cap, bad output).
    pub on_policy_failure: FailureMode,
    /// What to do when the machine's cluster cannot be found.
    pub on_unknown_cluster: UnknownClusterMode,
    /// The org VDC network inventory file.
    pub inventory: Option<PathBuf>,
    /// Where VCDClusters come from.
    pub clusters: ClusterSourceConfig,
    /// Evaluations running at once.
    pub workers: usize,
    /// How long a review waits for a free evaluation slot before it is answered as failed.
    pub queue_timeout: Duration,
    /// Largest AdmissionReview body accepted.
    pub max_request_bytes: usize,
    /// How often policy files, settings, inventory and this file are checked for changes;
    /// `None` turns hot reload off.
    pub reload_interval: Option<Duration>,
    /// Write the NIC plan to the `nicpolicy.io/nic-plan` annotation when mutating.
    pub nic_plan_annotation: bool,
}

/// `ObjectKind` as a map key in a stable order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KindKey {
    /// VCDMachine.
    VcdMachine,
    /// VCDMachineTemplate.
    VcdMachineTemplate,
}

impl KindKey {
    /// Both kinds.
    pub const ALL: [KindKey; 2] = [KindKey::VcdMachine, KindKey::VcdMachineTemplate];

    /// The schema's kind.
    pub fn object_kind(self) -> ObjectKind {
        match self {
            KindKey::VcdMachine => ObjectKind::VcdMachine,
            KindKey::VcdMachineTemplate => ObjectKind::VcdMachineTemplate,
        }
    }

    /// The kind as Kubernetes spells it.
    pub fn as_str(self) -> &'static str {
        self.object_kind().as_str()
    }

    /// Lower-case kind, as webhook paths spell it.
    pub fn path_segment(self) -> &'static str {
        match self {
            KindKey::VcdMachine => "vcdmachine",
            KindKey::VcdMachineTemplate => "vcdmachinetemplate",
        }
    }

    /// The kind for a Kubernetes kind name.
    pub fn from_kind(kind: &str) -> Option<KindKey> {
        KindKey::ALL.into_iter().find(|k| k.as_str() == kind)
    }
}

/// Why a configuration could not be used. Every variant names the file and, where there is one,
/// the field at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read or parsed.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// A field is wrong.
    #[error("{}: {field}: {message}", path.display())]
    Field {
        /// The configuration file.
        path: PathBuf,
        /// Path of the field, like `policies.VCDMachine[0].timeout`.
        field: String,
        /// What is wrong.
        message: String,
    },
}

mod file {
    use super::*;

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    pub struct ConfigFile {
        pub api_version: Option<String>,
        pub kind: Option<String>,
        pub listen: Option<String>,
        pub tls: Option<Tls>,
        #[serde(default)]
        pub policies: BTreeMap<String, Vec<Policy>>,
        pub on_policy_failure: Option<FailureMode>,
        pub on_unknown_cluster: Option<UnknownClusterMode>,
        pub inventory: Option<PathBuf>,
        pub clusters: Option<Clusters>,
        pub evaluation: Option<Evaluation>,
        pub max_request_bytes: Option<Size>,
        pub reload: Option<Reload>,
        pub nic_plan_annotation: Option<bool>,
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
    pub struct Policy {
        pub path: Option<PathBuf>,
        pub builtin: Option<String>,
        pub sha256: Option<String>,
        pub settings: Option<Value>,
        pub settings_file: Option<PathBuf>,
        pub timeout: Option<String>,
        pub memory: Option<Size>,
        pub max_input_bytes: Option<Size>,
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
}

impl ServeConfig {
    /// Default `maxRequestBytes`: kube-apiserver's own limit on a request body. It is also the
    /// default input cap of every policy (`maxInputBytes`): a policy's request is built from
    /// the body (the object and the stored object without status and managedFields), so a body
    /// the server accepts gives an input under the cap unless the inventory or settings are
    /// large.
    pub const DEFAULT_MAX_REQUEST_BYTES: usize = 3 << 20;

    /// Default evaluation slots: one per core, at least two.
    pub fn default_workers() -> usize {
        std::thread::available_parallelism()
            .map(usize::from)
            .unwrap_or(2)
            .max(2)
    }

    /// The configuration used without a file: the built-in CAPVCD policy for both kinds,
    /// clusters from the Kubernetes API, failures denied.
    pub fn builtin_default() -> ServeConfig {
        let max_request_bytes = Self::DEFAULT_MAX_REQUEST_BYTES;
        let capvcd = |kind: KindKey| PolicyConfig {
            source: ModuleSource::Builtin("capvcd".to_string()),
            sha256: None,
            settings: Value::Null,
            settings_file: None,
            limits: Limits::default()
                .with_timeout(Duration::from_millis(250))
                .with_max_input_bytes(max_request_bytes),
            field: format!("policies.{}[0]", kind.as_str()),
        };
        ServeConfig {
            path: None,
            listen: SocketAddr::from(([0, 0, 0, 0], DEFAULT_PORT)),
            tls: None,
            policies: KindKey::ALL
                .into_iter()
                .map(|k| (k, vec![capvcd(k)]))
                .collect(),
            on_policy_failure: FailureMode::Deny,
            on_unknown_cluster: UnknownClusterMode::CheckWithoutCluster,
            inventory: None,
            clusters: ClusterSourceConfig::Kubernetes {
                cluster_api_version: "v1beta1".to_string(),
            },
            workers: Self::default_workers(),
            queue_timeout: Duration::from_secs(2),
            max_request_bytes,
            reload_interval: Some(Duration::from_secs(2)),
            nic_plan_annotation: true,
        }
    }

    /// Reads and checks a configuration file. Settings are checked later, when the policies
    /// load (they need the module).
    pub fn read(path: &Path) -> Result<ServeConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|error| ManifestError::Read {
            path: path.to_path_buf(),
            error,
        })?;
        Self::parse(path, &text)
    }

    /// Parses `text` as the content of `path`.
    pub fn parse(path: &Path, text: &str) -> Result<ServeConfig, ConfigError> {
        let manifest = ManifestFile::parse(path, text)?;
        let field_error = |field: &str, message: String| ConfigError::Field {
            path: path.to_path_buf(),
            field: field.to_string(),
            message,
        };
        let value = match manifest.objects.as_slice() {
            [one] => &one.value,
            [] => return Err(field_error("", "the file is empty".to_string())),
            _ => {
                return Err(field_error(
                    "",
                    "a configuration file holds one document".to_string(),
                ))
            }
        };
        let raw: file::ConfigFile = serde_path_to_error::deserialize(value).map_err(|err| {
            let field = err.path().to_string();
            let field = if field == "." { String::new() } else { field };
            field_error(&field, err.inner().to_string())
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let resolve = |p: &Path| -> PathBuf {
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                base.join(p)
            }
        };
        let duration = |field: &str, text: &Option<String>, default: Duration| match text {
            Some(text) => limits::parse_duration(text).map_err(|m| field_error(field, m)),
            None => Ok(default),
        };
        let size = |field: &str, size: &Option<file::Size>, default: usize| match size {
            Some(file::Size::Bytes(0)) => Err(field_error(field, "must be above zero".into())),
            Some(file::Size::Bytes(n)) => {
                usize::try_from(*n).map_err(|_| field_error(field, format!("{n} is out of range")))
            }
            Some(file::Size::Text(text)) => {
                limits::parse_size(text).map_err(|m| field_error(field, m))
            }
            None => Ok(default),
        };

        let defaults = ServeConfig::builtin_default();
        if let Some(kind) = raw.kind.as_deref().filter(|k| *k != "ServeConfig") {
            return Err(field_error(
                "kind",
                format!("{kind:?}: expected ServeConfig"),
            ));
        }
        if let Some(version) = raw
            .api_version
            .as_deref()
            .filter(|v| *v != "nicpolicy.io/v1alpha1")
        {
            return Err(field_error(
                "apiVersion",
                format!("{version:?}: expected nicpolicy.io/v1alpha1"),
            ));
        }
        let listen = match &raw.listen {
            Some(text) => parse_listen(text).map_err(|m| field_error("listen", m))?,
            None => defaults.listen,
        };
        let tls = match &raw.tls {
            Some(tls) => Some(TlsFiles {
                cert_file: resolve(&tls.cert_file),
                key_file: resolve(&tls.key_file),
                reload_interval: duration(
                    "tls.reloadInterval",
                    &tls.reload_interval,
                    Duration::from_secs(10),
                )?,
            }),
            None => None,
        };

        if raw.policies.is_empty() {
            return Err(field_error(
                "policies",
                "no policies: list at least one under VCDMachine or VCDMachineTemplate".into(),
            ));
        }
        let mut policies = BTreeMap::new();
        for (kind_name, entries) in &raw.policies {
            let kind = KindKey::from_kind(kind_name).ok_or_else(|| {
                field_error(
                    &format!("policies.{kind_name}"),
                    "unknown kind: policies are listed under VCDMachine or VCDMachineTemplate"
                        .into(),
                )
            })?;
            if entries.is_empty() {
                return Err(field_error(
                    &format!("policies.{kind_name}"),
                    "the list is empty: remove the kind, or list at least one policy".into(),
                ));
            }
            let mut chain = Vec::new();
            for (i, entry) in entries.iter().enumerate() {
                let at = format!("policies.{kind_name}[{i}]");
                let source = match (&entry.path, &entry.builtin) {
                    (Some(path), None) => ModuleSource::File(resolve(path)),
                    (None, Some(name)) => {
                        if crate::builtin::get(name).is_none() {
                            return Err(field_error(
                                &format!("{at}.builtin"),
                                format!(
                                    "no built-in policy named {name:?}; built-in policies: {}",
                                    crate::builtin::names().join(", ")
                                ),
                            ));
                        }
                        ModuleSource::Builtin(name.clone())
                    }
                    (Some(_), Some(_)) => {
                        return Err(field_error(
                            &at,
                            "give either path or builtin, not both".into(),
                        ))
                    }
                    (None, None) => {
                        return Err(field_error(
                            &at,
                            "a policy needs path (a .wasm file) or builtin (such as capvcd)".into(),
                        ))
                    }
                };
                if let Some(pin) = &entry.sha256 {
                    if pin.len() != 64 || !pin.chars().all(|c| c.is_ascii_hexdigit()) {
                        return Err(field_error(
                            &format!("{at}.sha256"),
                            format!("{pin:?} is not a hex sha256 (64 hex digits); `nicpolicy inspect FILE` prints it"),
                        ));
                    }
                }
                let (settings, settings_file) = match (&entry.settings, &entry.settings_file) {
                    (Some(_), Some(_)) => {
                        return Err(field_error(
                            &at,
                            "give either settings or settingsFile, not both".into(),
                        ))
                    }
                    (Some(value), None) => (value.clone(), None),
                    (None, Some(file)) => (Value::Null, Some(resolve(file))),
                    (None, None) => (Value::Null, None),
                };
                let default_limits = defaults.policies[&kind][0].limits;
                let max_request_bytes = size(
                    "maxRequestBytes",
                    &raw.max_request_bytes,
                    defaults.max_request_bytes,
                )?;
                let limits = Limits::default()
                    .with_timeout(duration(
                        &format!("{at}.timeout"),
                        &entry.timeout,
                        default_limits.timeout,
                    )?)
                    .with_memory_bytes(size(
                        &format!("{at}.memory"),
                        &entry.memory,
                        default_limits.memory_bytes,
                    )?)
                    .with_max_input_bytes(size(
                        &format!("{at}.maxInputBytes"),
                        &entry.max_input_bytes,
                        max_request_bytes,
                    )?);
                chain.push(PolicyConfig {
                    source,
                    sha256: entry.sha256.as_ref().map(|s| s.to_ascii_lowercase()),
                    settings,
                    settings_file,
                    limits,
                    field: at,
                });
            }
            policies.insert(kind, chain);
        }

        let clusters = match &raw.clusters {
            None => defaults.clusters,
            Some(c) => match c.source {
                file::Source::Kubernetes => {
                    if !c.files.is_empty() {
                        return Err(field_error(
                            "clusters.files",
                            "files are read only with source: Static".into(),
                        ));
                    }
                    ClusterSourceConfig::Kubernetes {
                        cluster_api_version: c
                            .cluster_api_version
                            .clone()
                            .unwrap_or_else(|| "v1beta1".to_string()),
                    }
                }
                file::Source::Static => {
                    if c.files.is_empty() {
                        return Err(field_error(
                            "clusters.files",
                            "source: Static needs at least one file with Cluster and VCDCluster objects".into(),
                        ));
                    }
                    ClusterSourceConfig::Static {
                        files: c.files.iter().map(|f| resolve(f)).collect(),
                    }
                }
            },
        };
        let workers = match raw.evaluation.as_ref().and_then(|e| e.workers) {
            Some(0) => {
                return Err(field_error(
                    "evaluation.workers",
                    "must be at least 1".into(),
                ))
            }
            Some(n) => n,
            None => defaults.workers,
        };
        let queue_timeout = duration(
            "evaluation.queueTimeout",
            &raw.evaluation
                .as_ref()
                .and_then(|e| e.queue_timeout.clone()),
            defaults.queue_timeout,
        )?;
        let reload_interval = match &raw.reload {
            Some(file::Reload {
                enabled: Some(false),
                ..
            }) => None,
            Some(reload) => Some(duration(
                "reload.interval",
                &reload.interval,
                Duration::from_secs(2),
            )?),
            None => defaults.reload_interval,
        };
        Ok(ServeConfig {
            path: Some(path.to_path_buf()),
            listen,
            tls,
            policies,
            on_policy_failure: raw.on_policy_failure.unwrap_or(defaults.on_policy_failure),
            on_unknown_cluster: raw
                .on_unknown_cluster
                .unwrap_or(defaults.on_unknown_cluster),
            inventory: raw.inventory.as_deref().map(resolve),
            clusters,
            workers,
            queue_timeout,
            max_request_bytes: size(
                "maxRequestBytes",
                &raw.max_request_bytes,
                defaults.max_request_bytes,
            )?,
            reload_interval,
            nic_plan_annotation: raw.nic_plan_annotation.unwrap_or(true),
        })
    }

    /// Every file the configuration depends on (itself, modules, settings, inventory, static
    /// clusters), for the reload watcher.
    pub fn watched_files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = self.path.iter().cloned().collect();
        for chain in self.policies.values() {
            for policy in chain {
                if let ModuleSource::File(path) = &policy.source {
                    files.push(path.clone());
                }
                files.extend(policy.settings_file.iter().cloned());
            }
        }
        files.extend(self.inventory.iter().cloned());
        if let ClusterSourceConfig::Static { files: f } = &self.clusters {
            files.extend(f.iter().cloned());
        }
        files.sort();
        files.dedup();
        files
    }
}

/// `0.0.0.0:9443`, `[::]:9443`, `127.0.0.1:0`, or `:9443` (every IPv4 address).
fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    let full = match text.strip_prefix(':') {
        Some(port) => format!("0.0.0.0:{port}"),
        None => text.to_string(),
    };
    full.parse()
        .map_err(|_| format!("{text:?} is not an address like 0.0.0.0:9443"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ServeConfig, ConfigError> {
        ServeConfig::parse(Path::new("/etc/nicpolicy/config.yaml"), text)
    }

    #[test]
    fn full_config_is_read_with_paths_relative_to_the_file() {
        let config = parse(
            r#"
apiVersion: nicpolicy.io/v1alpha1
kind: ServeConfig
listen: ":8443"
tls: {certFile: tls/tls.crt, keyFile: /tls/tls.key}
inventory: inventory.yaml
onPolicyFailure: Allow
policies:
  VCDMachine:
    - path: policies/capvcd.wasm
      sha256: 0D5A4C0FB9A5B8C2D3E4F5061728394A5B6C7D8E9F00112233445566778899AA
      settings: {maxNics: 6}
      timeout: 300ms
      memory: 32Mi
  VCDMachineTemplate:
    - builtin: capvcd
      settingsFile: capvcd-settings.yaml
clusters: {source: Static, files: [clusters.yaml]}
evaluation: {workers: 4, queueTimeout: 500ms}
maxRequestBytes: 1Mi
reload: {interval: 1s}
"#,
        )
        .expect("valid");
        assert_eq!(config.listen, "0.0.0.0:8443".parse().unwrap());
        let tls = config.tls.as_ref().unwrap();
        assert_eq!(tls.cert_file, Path::new("/etc/nicpolicy/tls/tls.crt"));
        assert_eq!(tls.key_file, Path::new("/tls/tls.key"));
        assert_eq!(config.on_policy_failure, FailureMode::Allow);
        assert_eq!(
            config.on_unknown_cluster,
            UnknownClusterMode::CheckWithoutCluster
        );
        let machine = &config.policies[&KindKey::VcdMachine][0];
        assert_eq!(
            machine.source,
            ModuleSource::File("/etc/nicpolicy/policies/capvcd.wasm".into())
        );
        assert_eq!(machine.limits.timeout, Duration::from_millis(300));
        assert_eq!(machine.limits.memory_bytes, 32 << 20);
        assert!(machine.sha256.as_ref().unwrap().starts_with("0d5a"));
        let template = &config.policies[&KindKey::VcdMachineTemplate][0];
        assert_eq!(
            template.settings_file.as_deref(),
            Some(Path::new("/etc/nicpolicy/capvcd-settings.yaml"))
        );
        assert_eq!(config.workers, 4);
        assert_eq!(config.max_request_bytes, 1 << 20);
        assert_eq!(config.reload_interval, Some(Duration::from_secs(1)));
        assert!(config
            .watched_files()
            .contains(&PathBuf::from("/etc/nicpolicy/clusters.yaml")));
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (
                "policies: {VCDMachine: [{builtin: capvcd, timeout: fast}]}",
                "policies.VCDMachine[0].timeout",
            ),
            (
                "policies: {VCDMachine: [{builtin: capvd}]}",
                "policies.VCDMachine[0].builtin",
            ),
            ("policies: {VCDMachine: [{}]}", "policies.VCDMachine[0]"),
            (
                "policies: {VCDMachines: [{builtin: capvcd}]}",
                "policies.VCDMachines",
            ),
            (
                "policies: {VCDMachine: [{builtin: capvcd, sha256: abc}]}",
                "policies.VCDMachine[0].sha256",
            ),
            (
                "policies: {VCDMachine: [{builtin: capvcd, memroy: 1Mi}]}",
                "policies.VCDMachine[0]",
            ),
            (
                "policies: {VCDMachine: [{builtin: capvcd}]}\nonPolicyFailure: Ignore",
                "onPolicyFailure",
            ),
            (
                "policies: {VCDMachine: [{builtin: capvcd}]}\nlisten: localhost",
                "listen",
            ),
            (
                "policies: {VCDMachine: [{builtin: capvcd}]}\nclusters: {source: Static}",
                "clusters.files",
            ),
            (
                "policies: {VCDMachine: [{builtin: capvcd}]}\nevaluation: {workers: 0}",
                "evaluation.workers",
            ),
            ("listen: :9443", "policies"),
        ];
        for (text, field) in cases {
            match parse(text) {
                Err(ConfigError::Field { field: got, .. }) => {
                    assert!(
                        got.starts_with(field),
                        "{text}: field {got}, expected {field}"
                    )
                }
                other => panic!("{text}: expected a field error, got {other:?}"),
            }
        }
    }

    #[test]
    fn syntax_errors_give_the_line() {
        let err = parse("policies:\n  VCDMachine: [\n").unwrap_err();
        assert!(
            err.to_string().starts_with("/etc/nicpolicy/config.yaml:"),
            "{err}"
        );
    }
}
