//! The `nicpolicy serve` configuration file (YAML or JSON), documented in `docs/deploy.md`.
//!
//! ```yaml
//! apiVersion: nicpolicy.io/v1alpha1
//! kind: ServeConfig
//! listen: 0.0.0.0:9443
//! tls: {certFile: /tls/tls.crt, keyFile: /tls/tls.key}
//! inventory: inventory.yaml            # relative paths are relative to this file
//! inventories:                         # per org VDC (spec.ovdc, or a zone's); the one above for the rest
//!   eu1-ovdc-prod: inventories/eu1-ovdc-prod.yaml
//! onPolicyFailure: Deny                # or Allow (with a warning)
//! onUnknownCluster: CheckWithoutCluster # or Deny, or Allow (with a warning)
//! connections: {max: 128, maxPerClient: 32, readTimeout: 2s, idleTimeout: 120s, maxBufferedBytes: 64Mi}
//! provisioner: {profile: capvcd-1.3, onUnapplied: Warn}  # or capvcd-main, deckhouse, custom; Deny
//! policies:
//!   VCDMachine:
//!     - path: policies/capvcd.wasm
//!       sha256: 3f1c...                # optional pin
//!       settings: {maxNics: 6}
//!       timeout: 250ms
//!       memory: 64Mi
//!       maxInputBytes: 3Mi             # default: maxRequestBytes
//!     - path: policies/site-rules.wasm
//!       mode: warn                     # violations as warnings, no changes; default enforce
//!   VCDMachineTemplate:
//!     - builtin: capvcd
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nicpolicy_plugin::provisioner::{OnUnapplied, Profile, Provisioner};
use nicpolicy_plugin::IpAllocationMode;
use nicpolicy_plugin::ObjectKind;
use serde::Deserialize;

use nicpolicy_engine::limits::{self, CompileBounds, Limits};
use nicpolicy_engine::spec::{PolicySource, PolicySpec, SettingsSource};
use nicpolicy_inputs::manifest::{ManifestError, ManifestFile};

/// Port kube-apiserver reaches Cluster API webhooks on.
pub const DEFAULT_PORT: u16 = 9443;

/// The value of every optional field the file leaves out, in one place (the number of
/// evaluation slots, which depends on the machine, is [`ServeConfig::default_workers`]).
pub struct Defaults {
    /// `listen`.
    pub listen: SocketAddr,
    /// `tls.reloadInterval`.
    pub tls_reload_interval: Duration,
    /// `timeout` of a policy entry.
    pub policy_timeout: Duration,
    /// `onPolicyFailure`.
    pub failure_mode: FailureMode,
    /// `onUnknownCluster`.
    pub unknown_cluster: UnknownClusterMode,
    /// `evaluation.queueTimeout`.
    pub queue_timeout: Duration,
    /// `evaluation.inlineBudget`.
    pub inline_budget: Duration,
    /// `maxRequestBytes`: kube-apiserver's own limit on a request body. Also the default
    /// `maxInputBytes` of every policy: a policy's request is built from the body (the object
    /// and the stored object without status and managedFields), so a body the server accepts
    /// gives an input under the cap unless the inventory or settings are large.
    pub max_request_bytes: usize,
    /// `reload.interval`.
    pub reload_interval: Duration,
    /// `nicPlanAnnotation`.
    pub nic_plan_annotation: bool,
    /// `connections`.
    pub connections: Connections,
}

/// See [`Defaults`].
pub const DEFAULTS: Defaults = Defaults {
    listen: SocketAddr::new(
        std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        DEFAULT_PORT,
    ),
    tls_reload_interval: Duration::from_secs(10),
    policy_timeout: Duration::from_millis(250),
    failure_mode: FailureMode::Deny,
    unknown_cluster: UnknownClusterMode::CheckWithoutCluster,
    queue_timeout: Duration::from_secs(2),
    inline_budget: Duration::from_millis(5),
    max_request_bytes: 3 << 20,
    reload_interval: Duration::from_secs(2),
    nic_plan_annotation: true,
    connections: Connections {
        max: 128,
        max_per_client: 32,
        read_timeout: Duration::from_secs(2),
        // Above kube-apiserver's 90 s idle timeout for webhook connections: the client closes
        // an idle connection first, so no request of its can race the server's close and be
        // lost to the failurePolicy.
        idle_timeout: Duration::from_secs(120),
        max_buffered_bytes: 64 << 20,
    },
};

/// The `connections` section: what clients may hold of the server (see
/// the webhook's `connections` module and docs/deploy.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Connections {
    /// `max`: connections open at once; more are closed when accepted.
    pub max: usize,
    /// `maxPerClient`: connections open at once from one client address, so that one client
    /// cannot take every place and lock kube-apiserver out.
    pub max_per_client: usize,
    /// `readTimeout`: the TLS handshake, and the reading of one request body (time spent
    /// waiting for room in `maxBufferedBytes` not counted, and bounded by it too).
    pub read_timeout: Duration,
    /// `idleTimeout`: a connection that sends nothing this long is closed (HTTP/1 headers
    /// must also arrive within it).
    pub idle_timeout: Duration,
    /// `maxBufferedBytes`: bytes of request bodies held at once, read or under review; at
    /// least `maxRequestBytes`.
    pub max_buffered_bytes: usize,
}

/// The `compile` section: how each policy is compiled (in a child process of its own, killed at
/// `timeout`, its data limited to `memory`) and the bounds its code is held to before
/// (docs/abi.md, Limits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompileConfig {
    /// `timeout`.
    pub timeout: Duration,
    /// `memory`, in bytes.
    pub memory_bytes: u64,
    /// `maxFunctions`, `maxCodeBytes`, `maxFunctionBytes`, `maxLocals`.
    pub bounds: CompileBounds,
}

impl Default for CompileConfig {
    fn default() -> Self {
        CompileConfig {
            timeout: crate::HostConfig::DEFAULT_COMPILE_TIMEOUT,
            memory_bytes: nicpolicy_engine::compiler::CompilerProcess::DEFAULT_MEMORY_BYTES,
            bounds: CompileBounds::default(),
        }
    }
}

/// The `evaluation` section, read.
struct EvaluationConfig {
    workers: usize,
    queue_timeout: Duration,
    inline_budget: Option<Duration>,
}

/// What to answer when something other than the policy's decision stands in the way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum FailureMode {
    /// Deny the object, saying why.
    Deny,
    /// Admit the object with a warning saying what was not checked.
    Allow,
}

/// `registry.onUnavailableAtStart`: what to do when an `oci:` module can be neither read from
/// the store nor pulled (nor verified) while the server starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub enum UnavailableAtStart {
    /// Do not start, as for a missing module file (the default): a Deployment's rollout stops
    /// at the new pod and the running pods keep serving.
    #[default]
    Exit,
    /// Start with the kinds whose chains loaded; requests of a kind whose module could not be
    /// had are denied saying why (deletions pass), and the module is tried again at every
    /// reload interval until it loads.
    Deny,
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
        /// The `cluster.x-k8s.io` version to watch Cluster objects at (`clusterApiVersion`);
        /// None: the newest version the API server serves that nicpolicy reads (v1beta2,
        /// v1beta1), found through discovery.
        cluster_api_version: Option<String>,
    },
    /// Manifest files with Cluster and VCDCluster objects, read at start.
    Static {
        /// The files.
        files: Vec<PathBuf>,
    },
}

/// One policy of a kind's chain: what to load, and where the entry sits in the file.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyConfig {
    /// The module, its settings (inline or `settingsFile`), digest pin, limits and mode
    /// (whether its violations deny or only warn, see [`nicpolicy_engine::mode`]).
    pub spec: PolicySpec,
    /// Where the entry sits in the file, like `policies.VCDMachine[0]`.
    pub field: String,
}

/// Who may send reviews (`clientAuth`): clients whose certificate `ca_file`'s CA signed.
/// Probes and metrics stay open to any client (the kubelet and Prometheus present none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientAuth {
    /// PEM CA certificates: the CA that signed kube-apiserver's client certificate for webhooks.
    pub ca_file: PathBuf,
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

/// Where and how often the controller refreshes the org VDCs' inventories from Cloud Director
/// (`cloudDirector`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloudDirectorConfig {
    /// The site (`https://vcd.example.net`).
    pub site: String,
    /// The org.
    pub org: String,
    /// The Secret holding a read-only API token (never CAPVCD's).
    pub token_secret: String,
    /// Its key (default `token`).
    pub token_key: String,
    /// The namespace of the Secret and the ConfigMap (default `$POD_NAMESPACE`, else
    /// `nicpolicy-system`).
    pub namespace: String,
    /// A PEM CA bundle for the site, beside the system's.
    pub ca_file: Option<PathBuf>,
    /// How often.
    pub refresh_interval: Duration,
    /// The ConfigMap the inventories are written to, a key per VDC.
    pub config_map: String,
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
    /// Reviews only from clients with a certificate this CA signed (kube-apiserver's, through
    /// its AdmissionConfiguration); `None`: from any client.
    pub client_auth: Option<ClientAuth>,
    /// The chain of policies for each kind; a kind that is absent is not served.
    pub policies: BTreeMap<ObjectKind, Vec<PolicyConfig>>,
    /// What to do when a policy fails at run time (trap, time limit, memory cap, bad output).
    pub on_policy_failure: FailureMode,
    /// What to do when the machine's cluster cannot be found.
    pub on_unknown_cluster: UnknownClusterMode,
    /// The org VDC network inventory file of every VDC without one of its own.
    pub inventory: Option<PathBuf>,
    /// The inventory file of each org VDC, by its name ([`crate::inventories`]).
    pub inventories: BTreeMap<String, PathBuf>,
    /// Where the controller refreshes those inventories from (`cloudDirector`); with it, an
    /// `inventories` file not written yet is no error: that VDC has the default until it is.
    pub cloud_director: Option<CloudDirectorConfig>,
    /// Where VCDClusters come from.
    pub clusters: ClusterSourceConfig,
    /// Evaluations running at once.
    pub workers: usize,
    /// How long a review waits for a free evaluation slot before it is answered as failed.
    pub queue_timeout: Duration,
    /// How long a review's evaluation may run on the connection's async worker before it is
    /// cut and run again on a blocking thread; `None` evaluates every review on a blocking
    /// thread (see [`crate::Budget`] and docs/deploy.md).
    pub inline_budget: Option<Duration>,
    /// Largest AdmissionReview body accepted.
    pub max_request_bytes: usize,
    /// How often policy files, settings, inventory and this file are checked for changes;
    /// `None` turns hot reload off.
    pub reload_interval: Option<Duration>,
    /// Write the NIC plan to the `nicpolicy.io/nic-plan` annotation when mutating.
    pub nic_plan_annotation: bool,
    /// What clients may hold of the server.
    pub connections: Connections,
    /// Who builds the planned NICs (stock CAPVCD by default): each plan field it will not
    /// apply is reported ([`nicpolicy_plugin::provisioner`]).
    pub provisioner: Provisioner,
    /// Whether such a field is a warning (the default) or a denial.
    pub on_unapplied: OnUnapplied,
    /// How policies are compiled: time and memory limits, and the bounds checked first.
    pub compile: CompileConfig,
    /// How `oci:` policies are pulled (`registry:`).
    pub registry: RegistryConfig,
    /// Command-line flags that replace fields of the file; kept across reloads so a reload
    /// applies them again (flags win over the file for the whole run).
    pub overrides: Overrides,
}

/// `registry:` and `verification:`: how `oci:` policies are pulled, and what this configuration
/// asks of them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegistryConfig {
    /// The registry client's options: `config` (credentials), `caFiles`, `registryCaFiles`,
    /// `plainHttp`, and the rules of `verification:` with their keys read when the configuration
    /// was, so a load uses the keys that were checked.
    #[cfg(feature = "oci")]
    pub options: nicpolicy_oci::RegistryOptions,
    /// `requireDigest`: refuse `oci:` references by tag.
    pub require_digest: bool,
    /// `onUnavailableAtStart`: a module that cannot be had at start stops the start, or
    /// denies its kind.
    pub on_unavailable_at_start: UnavailableAtStart,
}

/// Fields of the configuration given on the command line of `nicpolicy serve`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Overrides {
    /// `--listen`.
    pub listen: Option<SocketAddr>,
    /// `--clusters FILE...`.
    pub clusters: Option<ClusterSourceConfig>,
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

mod file;

impl ServeConfig {
    /// Default evaluation slots: one per core, at least two.
    pub fn default_workers() -> usize {
        std::thread::available_parallelism()
            .map(usize::from)
            .unwrap_or(2)
            .max(2)
    }

    /// The configuration used without a file: the built-in CAPVCD policy for both kinds,
    /// clusters from the Kubernetes API, failures denied.
    #[cfg(feature = "builtin")]
    pub fn builtin_default() -> ServeConfig {
        let capvcd = |kind: ObjectKind| PolicyConfig {
            spec: PolicySpec {
                source: crate::builtin::CAPVCD.source(),
                settings: SettingsSource::default(),
                sha256: None,
                limits: Limits::default()
                    .with_timeout(DEFAULTS.policy_timeout)
                    .with_max_input_bytes(DEFAULTS.max_request_bytes),
                mode: nicpolicy_engine::mode::Mode::Enforce,
            },
            field: format!("policies.{}[0]", kind.as_str()),
        };
        ServeConfig {
            path: None,
            listen: DEFAULTS.listen,
            tls: None,
            client_auth: None,
            policies: ObjectKind::ALL
                .into_iter()
                .map(|k| (k, vec![capvcd(k)]))
                .collect(),
            on_policy_failure: DEFAULTS.failure_mode,
            on_unknown_cluster: DEFAULTS.unknown_cluster,
            inventory: None,
            inventories: BTreeMap::new(),
            cloud_director: None,
            clusters: ClusterSourceConfig::Kubernetes {
                cluster_api_version: None,
            },
            workers: Self::default_workers(),
            queue_timeout: DEFAULTS.queue_timeout,
            inline_budget: Some(DEFAULTS.inline_budget),
            max_request_bytes: DEFAULTS.max_request_bytes,
            reload_interval: Some(DEFAULTS.reload_interval),
            nic_plan_annotation: DEFAULTS.nic_plan_annotation,
            connections: DEFAULTS.connections,
            provisioner: Provisioner::capvcd(),
            on_unapplied: OnUnapplied::default(),
            compile: CompileConfig::default(),
            registry: RegistryConfig::default(),
            overrides: Overrides::default(),
        }
    }

    /// Replaces fields with the command line's `overrides` (and keeps them for reloads).
    pub fn override_with(&mut self, overrides: Overrides) {
        if let Some(listen) = overrides.listen {
            self.listen = listen;
        }
        if let Some(clusters) = &overrides.clusters {
            self.clusters = clusters.clone();
        }
        self.overrides = overrides;
    }

    /// Reads and checks a configuration file. Settings are checked later, when the policies
    /// load (they need the module).
    ///
    /// # Errors
    /// A [`ConfigError`] naming the file and, where there is one, the field at fault.
    pub fn read(path: &Path) -> Result<ServeConfig, ConfigError> {
        let text = nicpolicy_inputs::manifest::read_text(path)?;
        Self::parse(path, &text)
    }

    /// Parses `text` as the content of `path`.
    ///
    /// # Errors
    /// As for [`ServeConfig::read`].
    pub fn parse(path: &Path, text: &str) -> Result<ServeConfig, ConfigError> {
        let manifest = ManifestFile::parse(path, text)?;
        let mut reader = Reader {
            path,
            max_request_bytes: DEFAULTS.max_request_bytes,
        };
        let value = match manifest.objects.as_slice() {
            [one] => &one.value,
            [] => return Err(reader.error("", "the file is empty")),
            _ => return Err(reader.error("", "a configuration file holds one document")),
        };
        let raw: file::ConfigFile = serde_path_to_error::deserialize(value).map_err(|err| {
            let field = err.path().to_string();
            let field = if field == "." { String::new() } else { field };
            reader.error(&field, err.inner())
        })?;
        reader.header(&raw)?;
        // Read first: it is every policy's default input cap.
        reader.max_request_bytes = reader.size(
            "maxRequestBytes",
            &raw.max_request_bytes,
            DEFAULTS.max_request_bytes,
        )?;
        let evaluation = reader.evaluation(raw.evaluation.as_ref())?;
        Ok(ServeConfig {
            path: Some(path.to_path_buf()),
            listen: match &raw.listen {
                Some(text) => parse_listen(text).map_err(|m| reader.error("listen", m))?,
                None => DEFAULTS.listen,
            },
            tls: raw.tls.as_ref().map(|tls| reader.tls(tls)).transpose()?,
            client_auth: raw
                .client_auth
                .as_ref()
                .map(|auth| reader.client_auth(auth)),
            policies: reader.policies(
                &raw.policies,
                raw.registry
                    .as_ref()
                    .and_then(|r| r.require_digest)
                    .unwrap_or(false),
            )?,
            on_policy_failure: raw.on_policy_failure.unwrap_or(DEFAULTS.failure_mode),
            on_unknown_cluster: raw.on_unknown_cluster.unwrap_or(DEFAULTS.unknown_cluster),
            inventory: raw.inventory.as_deref().map(|p| reader.resolve(p)),
            inventories: reader.inventories(raw.inventories.as_ref())?,
            cloud_director: reader.cloud_director(
                raw.cloud_director.as_ref(),
                raw.inventories.as_ref().is_some_and(|i| !i.is_empty()),
            )?,
            clusters: reader.clusters(raw.clusters.as_ref())?,
            workers: evaluation.workers,
            queue_timeout: evaluation.queue_timeout,
            inline_budget: evaluation.inline_budget,
            max_request_bytes: reader.max_request_bytes,
            reload_interval: reader.reload(raw.reload.as_ref())?,
            nic_plan_annotation: raw
                .nic_plan_annotation
                .unwrap_or(DEFAULTS.nic_plan_annotation),
            connections: reader.connections(raw.connections.as_ref())?,
            provisioner: reader.provisioner(raw.provisioner.as_ref())?,
            compile: reader.compile(raw.compile.as_ref())?,
            registry: reader.registry(raw.registry.as_ref(), raw.verification.as_deref())?,
            on_unapplied: raw
                .provisioner
                .as_ref()
                .and_then(|p| p.on_unapplied)
                .unwrap_or_default(),
            overrides: Overrides::default(),
        })
    }

    /// Every file the configuration depends on (itself, modules, settings, inventory, static
    /// clusters), for the reload watcher.
    pub fn watched_files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = self.path.iter().cloned().collect();
        for chain in self.policies.values() {
            for policy in chain {
                if let PolicySource::File(path) = &policy.spec.source {
                    files.push(path.clone());
                }
                if let SettingsSource::File(path) = &policy.spec.settings {
                    files.push(path.clone());
                }
            }
        }
        // New credentials or CAs take effect on the next reload, as a new module file does.
        #[cfg(feature = "oci")]
        {
            let options = &self.registry.options;
            files.extend(options.docker_config.iter().cloned());
            files.extend(options.ca_files.iter().cloned());
            files.extend(options.registry_ca_files.values().flatten().cloned());
            // A key added or revoked takes effect on the next reload too.
            for rule in &options.verification.rules {
                files.extend(
                    rule.keys
                        .iter()
                        .filter_map(|key| key.file())
                        .map(Path::to_path_buf),
                );
            }
        }
        files.extend(self.inventory.iter().cloned());
        files.extend(self.inventories.values().cloned());
        files.extend(self.cloud_director.iter().filter_map(|c| c.ca_file.clone()));
        if let ClusterSourceConfig::Static { files: f } = &self.clusters {
            files.extend(f.iter().cloned());
        }
        files.sort();
        files.dedup();
        files
    }
}

/// Reads the sections of one configuration file: relative paths resolve against its
/// directory, and every error names it and the field.
struct Reader<'a> {
    path: &'a Path,
    /// `maxRequestBytes`, the default `maxInputBytes` of each policy.
    max_request_bytes: usize,
}

impl Reader<'_> {
    fn error(&self, field: &str, message: impl std::fmt::Display) -> ConfigError {
        ConfigError::Field {
            path: self.path.to_path_buf(),
            field: field.to_string(),
            message: message.to_string(),
        }
    }

    fn resolve(&self, path: &Path) -> PathBuf {
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.path.parent().unwrap_or(Path::new(".")).join(path)
        }
    }

    fn duration(
        &self,
        field: &str,
        text: &Option<String>,
        default: Duration,
    ) -> Result<Duration, ConfigError> {
        match text {
            Some(text) => limits::parse_duration(text).map_err(|m| self.error(field, m)),
            None => Ok(default),
        }
    }

    fn size(
        &self,
        field: &str,
        size: &Option<file::Size>,
        default: usize,
    ) -> Result<usize, ConfigError> {
        match size {
            Some(file::Size::Bytes(0)) => Err(self.error(field, "must be above zero")),
            Some(file::Size::Bytes(n)) => {
                usize::try_from(*n).map_err(|_| self.error(field, format!("{n} is out of range")))
            }
            Some(file::Size::Text(text)) => {
                limits::parse_size(text).map_err(|m| self.error(field, m))
            }
            None => Ok(default),
        }
    }

    /// `kind` and `apiVersion`, when given.
    fn header(&self, raw: &file::ConfigFile) -> Result<(), ConfigError> {
        if let Some(kind) = raw.kind.as_deref().filter(|k| *k != "ServeConfig") {
            return Err(self.error("kind", format!("{kind:?}: expected ServeConfig")));
        }
        if let Some(version) = raw
            .api_version
            .as_deref()
            .filter(|v| *v != "nicpolicy.io/v1alpha1")
        {
            return Err(self.error(
                "apiVersion",
                format!("{version:?}: expected nicpolicy.io/v1alpha1"),
            ));
        }
        Ok(())
    }

    /// `clientAuth`. The CA file is read where it is used, when `serve` starts (an error names
    /// `clientAuth.caFile`): the controller reads the same configuration without it mounted.
    fn client_auth(&self, auth: &file::ClientAuth) -> ClientAuth {
        ClientAuth {
            ca_file: self.resolve(&auth.ca_file),
        }
    }

    fn tls(&self, tls: &file::Tls) -> Result<TlsFiles, ConfigError> {
        Ok(TlsFiles {
            cert_file: self.resolve(&tls.cert_file),
            key_file: self.resolve(&tls.key_file),
            reload_interval: self.duration(
                "tls.reloadInterval",
                &tls.reload_interval,
                DEFAULTS.tls_reload_interval,
            )?,
        })
    }

    /// `policies`: a non-empty chain per kind.
    fn policies(
        &self,
        raw: &BTreeMap<String, Vec<file::Policy>>,
        require_digest: bool,
    ) -> Result<BTreeMap<ObjectKind, Vec<PolicyConfig>>, ConfigError> {
        if raw.is_empty() {
            return Err(self.error(
                "policies",
                "no policies: list at least one under VCDMachine or VCDMachineTemplate",
            ));
        }
        let mut policies = BTreeMap::new();
        for (kind_name, entries) in raw {
            let at = format!("policies.{kind_name}");
            let kind = ObjectKind::from_kind(kind_name).ok_or_else(|| {
                self.error(
                    &at,
                    "unknown kind: policies are listed under VCDMachine or VCDMachineTemplate",
                )
            })?;
            if entries.is_empty() {
                return Err(self.error(
                    &at,
                    "the list is empty: remove the kind, or list at least one policy",
                ));
            }
            let chain = entries
                .iter()
                .enumerate()
                .map(|(i, entry)| self.policy(&format!("{at}[{i}]"), entry, require_digest))
                .collect::<Result<_, _>>()?;
            policies.insert(kind, chain);
        }
        Ok(policies)
    }

    /// `registry:`, its paths resolved against this file's directory, and `verification:`,
    /// each rule's patterns checked and its keys read and parsed, at their field.
    fn registry(
        &self,
        raw: Option<&file::Registry>,
        rules: Option<&[file::VerificationRule]>,
    ) -> Result<RegistryConfig, ConfigError> {
        let empty = file::Registry::default();
        let raw = raw.unwrap_or(&empty);
        let rules = match rules {
            None => &[][..],
            Some(rules) => {
                #[cfg(not(feature = "oci"))]
                if !rules.is_empty() {
                    return Err(self.error(
                        "verification",
                        "this build of nicpolicy has no OCI registry support (feature oci)",
                    ));
                }
                if rules.is_empty() {
                    return Err(self.error(
                        "verification",
                        "the section is empty; give rules (references and keys), or leave it \
                         out to not verify signatures",
                    ));
                }
                rules
            }
        };
        #[cfg(feature = "oci")]
        let options = nicpolicy_oci::RegistryOptions {
            docker_config: raw.config.as_deref().map(|p| self.resolve(p)),
            ca_files: raw
                .ca_files
                .iter()
                .flatten()
                .map(|p| self.resolve(p))
                .collect(),
            registry_ca_files: raw
                .registry_ca_files
                .iter()
                .flatten()
                .map(|(host, files)| {
                    (
                        host.clone(),
                        files.iter().map(|p| self.resolve(p)).collect(),
                    )
                })
                .collect(),
            plain_http: raw.plain_http.unwrap_or(false),
            timeouts: self.timeouts(raw.timeouts.as_ref())?,
            verification: nicpolicy_oci::signature::Verification {
                rules: rules
                    .iter()
                    .enumerate()
                    .map(|(i, rule)| {
                        let keys: Vec<PathBuf> =
                            rule.keys.iter().map(|p| self.resolve(p)).collect();
                        nicpolicy_oci::config::verification_rule(&rule.references, &keys).map_err(
                            |err| {
                                self.error(&format!("verification[{i}].{}", err.field), err.message)
                            },
                        )
                    })
                    .collect::<Result<_, _>>()?,
            },
        };
        // Settings of a client this build does not have are refused, not ignored.
        #[cfg(not(feature = "oci"))]
        {
            let _ = rules;
            let client = raw.config.is_some()
                || raw.ca_files.is_some()
                || raw.registry_ca_files.is_some()
                || raw.plain_http.is_some()
                || raw.timeouts.is_some();
            if client {
                return Err(self.error(
                    "registry",
                    "this build of nicpolicy has no OCI registry support (feature oci)",
                ));
            }
        }
        Ok(RegistryConfig {
            #[cfg(feature = "oci")]
            options,
            require_digest: raw.require_digest.unwrap_or(false),
            on_unavailable_at_start: raw.on_unavailable_at_start.unwrap_or_default(),
        })
    }

    /// `registry.timeouts`: how long the registry client waits to connect, between bytes, and
    /// for a whole pull.
    #[cfg(feature = "oci")]
    fn timeouts(
        &self,
        raw: Option<&file::RegistryTimeouts>,
    ) -> Result<nicpolicy_oci::Timeouts, ConfigError> {
        let defaults = nicpolicy_oci::Timeouts::default();
        let Some(raw) = raw else {
            return Ok(defaults);
        };
        Ok(nicpolicy_oci::Timeouts {
            connect: self.duration("registry.timeouts.connect", &raw.connect, defaults.connect)?,
            read: self.duration("registry.timeouts.read", &raw.read, defaults.read)?,
            pull: self.duration("registry.timeouts.pull", &raw.pull, defaults.pull)?,
        })
    }

    /// An `oci:` entry's source, at `at`.
    fn oci_source(
        &self,
        at: &str,
        reference: &str,
        require_digest: bool,
    ) -> Result<PolicySource, ConfigError> {
        let reference = crate::sources::without_oci_scheme(reference);
        if require_digest && !reference.contains("@sha256:") {
            return Err(self.error(
                at,
                format!(
                    "{reference:?} names a tag, and this configuration requires digests \
                     (registry.requireDigest): write host/repo@sha256:..., which nicpolicy push \
                     prints"
                ),
            ));
        }
        crate::sources::oci(reference).map_err(|err| self.error(at, err))
    }

    /// One entry of a chain, at `at` (like `policies.VCDMachine[0]`).
    fn policy(
        &self,
        at: &str,
        entry: &file::Policy,
        require_digest: bool,
    ) -> Result<PolicyConfig, ConfigError> {
        let source = match (&entry.path, &entry.builtin, &entry.oci) {
            (Some(path), None, None) => PolicySource::File(self.resolve(path)),
            (None, Some(name), None) => crate::sources::builtin(name)
                .map_err(|err| self.error(&format!("{at}.builtin"), err))?,
            (None, None, Some(reference)) => {
                self.oci_source(&format!("{at}.oci"), reference, require_digest)?
            }
            (None, None, None) => {
                return Err(self.error(
                    at,
                    "a policy needs path (a .wasm file), builtin (such as capvcd) or oci (a \
                     registry reference)",
                ))
            }
            _ => return Err(self.error(at, "give one of path, builtin and oci")),
        };
        if let Some(pin) = &entry.sha256 {
            if pin.len() != 64 || !pin.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(self.error(
                    &format!("{at}.sha256"),
                    format!("{pin:?} is not a hex sha256 (64 hex digits); `nicpolicy inspect FILE` prints it"),
                ));
            }
        }
        let settings = match (&entry.settings, &entry.settings_file) {
            (Some(_), Some(_)) => {
                return Err(self.error(at, "give either settings or settingsFile, not both"))
            }
            (Some(value), None) => SettingsSource::Inline(value.clone()),
            (None, Some(file)) => SettingsSource::File(self.resolve(file)),
            (None, None) => SettingsSource::default(),
        };
        let limits = Limits::default()
            .with_timeout(self.duration(
                &format!("{at}.timeout"),
                &entry.timeout,
                DEFAULTS.policy_timeout,
            )?)
            .with_memory_bytes(self.size(
                &format!("{at}.memory"),
                &entry.memory,
                Limits::DEFAULT_MEMORY_BYTES,
            )?)
            .with_max_input_bytes(self.size(
                &format!("{at}.maxInputBytes"),
                &entry.max_input_bytes,
                self.max_request_bytes,
            )?);
        Ok(PolicyConfig {
            spec: PolicySpec {
                source,
                settings,
                sha256: entry.sha256.as_ref().map(|s| s.to_ascii_lowercase()),
                limits,
                mode: entry.mode.unwrap_or_default(),
            },
            field: at.to_string(),
        })
    }

    fn clusters(&self, raw: Option<&file::Clusters>) -> Result<ClusterSourceConfig, ConfigError> {
        let Some(c) = raw else {
            return Ok(ClusterSourceConfig::Kubernetes {
                cluster_api_version: None,
            });
        };
        match c.source {
            file::Source::Kubernetes => {
                if !c.files.is_empty() {
                    return Err(
                        self.error("clusters.files", "files are read only with source: Static")
                    );
                }
                Ok(ClusterSourceConfig::Kubernetes {
                    cluster_api_version: c.cluster_api_version.clone(),
                })
            }
            file::Source::Static => {
                if c.files.is_empty() {
                    return Err(self.error(
                        "clusters.files",
                        "source: Static needs at least one file with Cluster and VCDCluster objects",
                    ));
                }
                Ok(ClusterSourceConfig::Static {
                    files: c.files.iter().map(|f| self.resolve(f)).collect(),
                })
            }
        }
    }

    /// `evaluation`: the number of slots, how long a review waits for one, and how long an
    /// evaluation may run on an async worker.
    fn evaluation(&self, raw: Option<&file::Evaluation>) -> Result<EvaluationConfig, ConfigError> {
        let workers = match raw.and_then(|e| e.workers) {
            Some(0) => return Err(self.error("evaluation.workers", "must be at least 1")),
            Some(n) => n,
            None => ServeConfig::default_workers(),
        };
        let queue_timeout = self.duration(
            "evaluation.queueTimeout",
            &raw.and_then(|e| e.queue_timeout.clone()),
            DEFAULTS.queue_timeout,
        )?;
        const FIELD: &str = "evaluation.inlineBudget";
        let inline_budget = match raw.and_then(|e| e.inline_budget.as_ref()) {
            // Zero in any unit turns evaluation on the async workers off.
            Some(file::Budget::Number(0)) => None,
            Some(file::Budget::Number(n)) => {
                return Err(self.error(FIELD, format!("`{n}` needs a unit, e.g. `{n}ms`")))
            }
            Some(file::Budget::Text(text)) if is_zero_duration(text) => None,
            Some(file::Budget::Text(text)) => {
                Some(limits::parse_duration(text).map_err(|m| self.error(FIELD, m))?)
            }
            None => Some(DEFAULTS.inline_budget),
        };
        Ok(EvaluationConfig {
            workers,
            queue_timeout,
            inline_budget,
        })
    }

    /// `cloudDirector`: the site, org and token the controller refreshes `inventories` with.
    fn cloud_director(
        &self,
        raw: Option<&file::CloudDirector>,
        names_vdcs: bool,
    ) -> Result<Option<CloudDirectorConfig>, ConfigError> {
        let Some(raw) = raw else {
            return Ok(None);
        };
        if !(raw.site.starts_with("https://") || raw.site.starts_with("http://")) {
            return Err(self.error(
                "cloudDirector.site",
                format!(
                    "{:?} is not an https:// URL of the Cloud Director site",
                    raw.site
                ),
            ));
        }
        for (field, value) in [
            ("cloudDirector.org", raw.org.as_str()),
            (
                "cloudDirector.tokenSecret.name",
                raw.token_secret.name.as_str(),
            ),
        ] {
            if value.trim().is_empty() {
                return Err(self.error(field, "must not be empty"));
            }
        }
        if !names_vdcs {
            return Err(self.error(
                "cloudDirector",
                "refreshes the inventories of the org VDCs `inventories` names, and it names none",
            ));
        }
        let refresh_interval = self.duration(
            "cloudDirector.refreshInterval",
            &raw.refresh_interval,
            Duration::from_secs(600),
        )?;
        if refresh_interval < Duration::from_secs(1) {
            return Err(self.error("cloudDirector.refreshInterval", "must be at least 1s"));
        }
        let config_map = raw
            .config_map
            .clone()
            .unwrap_or_else(|| "nicpolicy-inventories".to_string());
        if config_map.is_empty()
            || config_map.len() > 253
            || !config_map
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        {
            return Err(self.error(
                "cloudDirector.configMap",
                format!("{config_map:?} is not a ConfigMap name"),
            ));
        }
        Ok(Some(CloudDirectorConfig {
            site: raw.site.clone(),
            org: raw.org.clone(),
            token_secret: raw.token_secret.name.clone(),
            token_key: raw
                .token_secret
                .key
                .clone()
                .unwrap_or_else(|| "token".to_string()),
            namespace: raw.namespace.clone().unwrap_or_else(|| {
                std::env::var("POD_NAMESPACE").unwrap_or_else(|_| "nicpolicy-system".to_string())
            }),
            ca_file: raw.ca_file.as_deref().map(|p| self.resolve(p)),
            refresh_interval,
            config_map,
        }))
    }

    /// `inventories`: each org VDC's inventory file, resolved.
    fn inventories(
        &self,
        raw: Option<&BTreeMap<String, PathBuf>>,
    ) -> Result<BTreeMap<String, PathBuf>, ConfigError> {
        let mut found = BTreeMap::new();
        for (vdc, path) in raw.into_iter().flatten() {
            if vdc.trim().is_empty() {
                return Err(self.error("inventories", "an org VDC name must not be empty"));
            }
            if path.as_os_str().is_empty() {
                return Err(self.error(&format!("inventories.{vdc}"), "names no file"));
            }
            found.insert(vdc.clone(), self.resolve(path));
        }
        Ok(found)
    }

    /// `provisioner`: a profile's build (stock CAPVCD v1.3.2 by default), or a custom one with
    /// what it applies and builds. `name`, `applies` or `builds` without a profile stand for a
    /// custom build, as before profiles were named.
    fn provisioner(&self, raw: Option<&file::Provisioner>) -> Result<Provisioner, ConfigError> {
        let Some(raw) = raw else {
            return Ok(Provisioner::capvcd());
        };
        let declares = raw.applies.is_some() || raw.builds.is_some();
        let profile = match raw.profile {
            Some(profile) => profile,
            None if declares || raw.name.is_some() => Profile::Custom,
            None => Profile::Capvcd13,
        };
        if profile != Profile::Custom {
            for (field, given) in [
                ("provisioner.applies", raw.applies.is_some()),
                ("provisioner.builds", raw.builds.is_some()),
            ] {
                if given {
                    return Err(self.error(
                        field,
                        format!(
                            "only a custom build declares this; the {} profile states what it \
                             applies and builds (profile: custom)",
                            profile.as_str()
                        ),
                    ));
                }
            }
        }
        let mut provisioner = Provisioner::of(profile);
        match raw.name.as_deref() {
            Some("") => return Err(self.error("provisioner.name", "must not be empty")),
            Some(name) => provisioner.name = name.to_string(),
            None => {}
        }
        let mut applies = raw.applies.clone().unwrap_or_default();
        applies.sort();
        applies.dedup();
        provisioner.applies = applies;
        if let Some(builds) = &raw.builds {
            if builds.ip_allocation_mode == Some(IpAllocationMode::Manual) {
                return Err(self.error(
                    "provisioner.builds.ipAllocationMode",
                    "MANUAL needs the plan's address: list ipAllocationMode and ipAddress in \
                     provisioner.applies instead",
                ));
            }
            let built = &mut provisioner.builds;
            built.ip_allocation_mode = builds
                .ip_allocation_mode
                .unwrap_or(built.ip_allocation_mode);
            built.adapter_type = builds.adapter_type.unwrap_or(built.adapter_type);
            built.connected = builds.connected.unwrap_or(built.connected);
        }
        Ok(provisioner)
    }

    /// `compile`, each field defaulted on its own.
    fn compile(&self, raw: Option<&file::Compile>) -> Result<CompileConfig, ConfigError> {
        let default = CompileConfig::default();
        let none = file::Compile::default();
        let raw = raw.unwrap_or(&none);
        let timeout = self.duration("compile.timeout", &raw.timeout, default.timeout)?;
        if timeout.is_zero() {
            return Err(self.error("compile.timeout", "must be above zero"));
        }
        let memory = self.size("compile.memory", &raw.memory, default.memory_bytes as usize)?;
        if memory < 32 << 20 {
            return Err(self.error(
                "compile.memory",
                format!("{memory} bytes is under 32Mi: no policy compiles in that"),
            ));
        }
        let positive = |field: &str, value: Option<u64>, default: u64| match value {
            Some(0) => Err(self.error(field, "must be at least 1")),
            Some(n) => Ok(n),
            None => Ok(default),
        };
        let bytes = |field: &str, value: &Option<file::Size>, default: u64| {
            let bytes = self.size(field, value, usize::try_from(default).unwrap_or(usize::MAX))?;
            positive(field, Some(bytes as u64), default)
        };
        let d = default.bounds;
        Ok(CompileConfig {
            timeout,
            memory_bytes: memory as u64,
            bounds: CompileBounds {
                max_functions: positive(
                    "compile.maxFunctions",
                    raw.max_functions,
                    d.max_functions,
                )?,
                max_code_bytes: bytes(
                    "compile.maxCodeBytes",
                    &raw.max_code_bytes,
                    d.max_code_bytes,
                )?,
                max_function_bytes: bytes(
                    "compile.maxFunctionBytes",
                    &raw.max_function_bytes,
                    d.max_function_bytes,
                )?,
                max_locals: positive("compile.maxLocals", raw.max_locals, d.max_locals)?,
            },
        })
    }

    /// `connections`, each field defaulted on its own.
    fn connections(&self, raw: Option<&file::Connections>) -> Result<Connections, ConfigError> {
        let default = DEFAULTS.connections;
        let none = file::Connections::default();
        let raw = raw.unwrap_or(&none);
        let max = match raw.max {
            Some(0) => return Err(self.error("connections.max", "must be at least 1")),
            Some(n) => n,
            None => default.max,
        };
        let timeout = |field: &str, text: &Option<String>, default: Duration| {
            let value = self.duration(field, text, default)?;
            if value.is_zero() {
                return Err(self.error(field, "must be above zero"));
            }
            Ok(value)
        };
        let read_timeout = timeout(
            "connections.readTimeout",
            &raw.read_timeout,
            default.read_timeout,
        )?;
        let idle_timeout = timeout(
            "connections.idleTimeout",
            &raw.idle_timeout,
            default.idle_timeout,
        )?;
        let max_buffered_bytes = self.size(
            "connections.maxBufferedBytes",
            &raw.max_buffered_bytes,
            default.max_buffered_bytes.max(self.max_request_bytes),
        )?;
        if max_buffered_bytes < self.max_request_bytes {
            return Err(self.error(
                "connections.maxBufferedBytes",
                format!(
                    "{max_buffered_bytes} bytes is less than maxRequestBytes ({} bytes): the \
                     largest review could never be read",
                    self.max_request_bytes
                ),
            ));
        }
        let max_per_client = match raw.max_per_client {
            Some(0) => return Err(self.error("connections.maxPerClient", "must be at least 1")),
            Some(n) => n,
            None => default.max_per_client.min(max),
        };
        Ok(Connections {
            max,
            max_per_client,
            read_timeout,
            idle_timeout,
            max_buffered_bytes,
        })
    }

    /// `reload`: the check interval, or `None` when turned off.
    fn reload(&self, raw: Option<&file::Reload>) -> Result<Option<Duration>, ConfigError> {
        match raw {
            Some(file::Reload {
                enabled: Some(false),
                ..
            }) => Ok(None),
            Some(reload) => self
                .duration(
                    "reload.interval",
                    &reload.interval,
                    DEFAULTS.reload_interval,
                )
                .map(Some),
            None => Ok(Some(DEFAULTS.reload_interval)),
        }
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

/// Zero in any unit (`0`, `00ms`, `0s`, `0m`): what turns a duration setting off, where
/// [`limits::parse_duration`] refuses zero.
fn is_zero_duration(text: &str) -> bool {
    let text = text.trim();
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &text[digits.len()..];
    !digits.is_empty() && digits.bytes().all(|b| b == b'0') && matches!(unit, "" | "ms" | "s" | "m")
}

#[cfg(test)]
mod tests {
    use super::*;
    use nicpolicy_engine::mode::Mode;
    use nicpolicy_plugin::provisioner::{Builds, PlanField};

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
evaluation: {workers: 4, queueTimeout: 500ms, inlineBudget: 2ms}
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
        let machine = &config.policies[&ObjectKind::VcdMachine][0];
        assert_eq!(
            machine.spec.source,
            PolicySource::File("/etc/nicpolicy/policies/capvcd.wasm".into())
        );
        assert_eq!(machine.spec.limits.timeout, Duration::from_millis(300));
        assert_eq!(machine.spec.limits.memory_bytes, 32 << 20);
        assert!(machine.spec.sha256.as_ref().unwrap().starts_with("0d5a"));
        let template = &config.policies[&ObjectKind::VcdMachineTemplate][0];
        assert_eq!(
            template.spec.settings,
            SettingsSource::File("/etc/nicpolicy/capvcd-settings.yaml".into())
        );
        assert_eq!(config.workers, 4);
        assert_eq!(config.inline_budget, Some(Duration::from_millis(2)));
        assert_eq!(config.max_request_bytes, 1 << 20);
        assert_eq!(config.reload_interval, Some(Duration::from_secs(1)));
        assert!(config
            .watched_files()
            .contains(&PathBuf::from("/etc/nicpolicy/clusters.yaml")));
    }

    #[test]
    fn inline_budget_defaults_to_5ms_and_zero_turns_it_off() {
        let base = "policies: {VCDMachine: [{builtin: capvcd}]}\n";
        let budget = |extra: &str| {
            parse(&format!("{base}{extra}"))
                .expect("valid")
                .inline_budget
        };
        assert_eq!(budget(""), Some(Duration::from_millis(5)));
        for off in ["0", "'0'", "0ms", "0s", "00ms", "'000'", " 0m"] {
            assert_eq!(
                budget(&format!("evaluation: {{inlineBudget: {off}}}")),
                None,
                "{off}"
            );
        }
    }

    #[cfg(feature = "oci")]
    #[test]
    fn oci_entries_and_the_registry_section_are_read() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let config = parse(&format!(
            "policies:\n  VCDMachine:\n    - oci: oci://registry.example.net/platform/dmz-guard@{digest}\n\
             \x20   - builtin: capvcd\n\
             registry: {{config: registry/config.json, caFiles: [registry/ca.pem], requireDigest: true,\n\
             \x20 registryCaFiles: {{mirror.internal:5000: [registry/mirror-ca.pem]}}}}\n"
        ))
        .expect("valid");
        let chain = &config.policies[&ObjectKind::VcdMachine];
        assert_eq!(
            chain[0].spec.source,
            PolicySource::fetched(
                "oci://",
                &format!("registry.example.net/platform/dmz-guard@{digest}")
            )
        );
        assert!(config.registry.require_digest);
        assert!(!config.registry.options.plain_http);
        assert_eq!(
            config.registry.options.timeouts,
            nicpolicy_oci::Timeouts::default(),
            "the defaults, unless registry.timeouts says otherwise"
        );
        // Paths resolve against the file's directory, and a change to them is a reload.
        let credentials = config
            .registry
            .options
            .docker_config
            .clone()
            .expect("config");
        assert!(
            credentials.ends_with("registry/config.json"),
            "{credentials:?}"
        );
        assert!(credentials.is_absolute());
        assert!(config.watched_files().contains(&credentials));
        assert_eq!(config.registry.options.ca_files.len(), 1);
        let mirror = &config.registry.options.registry_ca_files["mirror.internal:5000"][0];
        assert!(mirror.is_absolute() && config.watched_files().contains(mirror));
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
                "policies: {VCDMachine: [{builtin: capvcd, oci: registry.example.net/p/x:1}]}",
                "policies.VCDMachine[0]",
            ),
            (
                "policies: {VCDMachine: [{oci: 'Not A Reference'}]}",
                "policies.VCDMachine[0].oci",
            ),
            (
                "policies: {VCDMachine: [{oci: registry.example.net/platform/dmz-guard:1.2.0}]}\n\
                 registry: {requireDigest: true}",
                "policies.VCDMachine[0].oci",
            ),
            (
                "policies: {VCDMachine: [{builtin: capvcd}]}\nregistry: {plainHTTP: true}",
                "registry",
            ),
            (
                "policies: {VCDMachine: [{builtin: capvcd}]}\nregistry: {timeouts: {pull: soon}}",
                "registry.timeouts.pull",
            ),
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
            (
                "policies: {VCDMachine: [{builtin: capvcd}]}\nevaluation: {inlineBudget: soon}",
                "evaluation.inlineBudget",
            ),
            (
                "policies: {VCDMachine: [{builtin: capvcd}]}\nevaluation: {inlineBudget: 5}",
                "evaluation.inlineBudget",
            ),
            ("listen: :9443", "policies"),
            (
                "policies: {VCDMachine: [{builtin: capvcd}]}\nprovisioner: {applies: [macAddress]}",
                "provisioner.applies[0]",
            ),
            (
                "policies: {VCDMachine: [{builtin: capvcd}]}\nprovisioner: {onUnapplied: Ignore}",
                "provisioner.onUnapplied",
            ),
            (
                "policies: {VCDMachine: [{builtin: capvcd}]}\nprovisioner: {name: ''}",
                "provisioner.name",
            ),
            (
                "policies: {VCDMachine: [{builtin: capvcd}]}\nconnections: {max: 0}",
                "connections.max",
            ),
            (
                "policies: {VCDMachine: [{builtin: capvcd}]}\ncompile: {memory: 1Mi}",
                "compile.memory",
            ),
            (
                "policies: {VCDMachine: [{builtin: capvcd}]}\ncompile: {maxLocals: 0}",
                "compile.maxLocals",
            ),
            (
                "policies: {VCDMachine: [{builtin: capvcd}]}\ncompile: {timeout: 0s}",
                "compile.timeout",
            ),
            (
                "policies: {VCDMachine: [{builtin: capvcd}]}\nconnections: {readTimeout: 0s}",
                "connections.readTimeout",
            ),
            (
                "policies: {VCDMachine: [{builtin: capvcd}]}\nconnections: {maxBufferedBytes: 1Mi}",
                "connections.maxBufferedBytes",
            ),
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
    fn the_compile_section_sets_the_limits_and_bounds() {
        let config = parse(
            "policies: {VCDMachine: [{builtin: capvcd}]}\ncompile: {timeout: 5s, memory: 256Mi, \
             maxFunctions: 8000, maxCodeBytes: 1536Ki, maxFunctionBytes: 64Ki, maxLocals: 300}",
        )
        .expect("valid");
        assert_eq!(
            config.compile,
            CompileConfig {
                timeout: Duration::from_secs(5),
                memory_bytes: 256 << 20,
                bounds: CompileBounds {
                    max_functions: 8000,
                    max_code_bytes: 1536 << 10,
                    max_function_bytes: 64 << 10,
                    max_locals: 300,
                },
            }
        );
        let defaults = parse("policies: {VCDMachine: [{builtin: capvcd}]}").expect("valid");
        assert_eq!(defaults.compile, CompileConfig::default());
    }

    #[test]
    fn each_org_vdcs_inventory_is_read_relative_and_watched() {
        let config = parse(
            "policies: {VCDMachine: [{builtin: capvcd}]}\ninventory: inventory.yaml\n\
             inventories:\n  eu1-ovdc-prod: inventories/eu1-ovdc-prod.yaml\n  \
             eu1 ovdc stage: /srv/stage.yaml\n",
        )
        .expect("valid");
        assert_eq!(
            config.inventories,
            BTreeMap::from([
                (
                    "eu1 ovdc stage".to_string(),
                    PathBuf::from("/srv/stage.yaml")
                ),
                (
                    "eu1-ovdc-prod".to_string(),
                    PathBuf::from("/etc/nicpolicy/inventories/eu1-ovdc-prod.yaml")
                ),
            ])
        );
        let watched = config.watched_files();
        assert!(watched.contains(&PathBuf::from("/srv/stage.yaml")));
        assert!(watched.contains(&PathBuf::from(
            "/etc/nicpolicy/inventories/eu1-ovdc-prod.yaml"
        )));
        for (text, field) in [
            ("inventories: {' ': a.yaml}", "inventories"),
            (
                "inventories: {eu1-ovdc-prod: ''}",
                "inventories.eu1-ovdc-prod",
            ),
            ("inventories: [a.yaml]", "inventories"),
        ] {
            let err = parse(&format!(
                "policies: {{VCDMachine: [{{builtin: capvcd}}]}}\n{text}"
            ))
            .expect_err(text)
            .to_string();
            assert!(err.contains(field), "{text}: {err}");
        }
    }

    #[test]
    fn cloud_director_names_the_site_token_and_configmap_of_the_refresh() {
        let base = "policies: {VCDMachine: [{builtin: capvcd}]}\ninventories: {eu1-ovdc-prod: cloud-director/eu1-ovdc-prod.yaml}\n";
        let config = parse(&format!(
            "{base}cloudDirector:\n  site: https://vcd.eu1.example.net\n  org: platform\n  \
             tokenSecret: {{name: nicpolicy-vcd-token}}\n  namespace: nicpolicy-system\n  \
             caFile: ca.pem\n  refreshInterval: 5m\n"
        ))
        .expect("valid");
        let refresh = config.cloud_director.clone().expect("a refresh");
        assert_eq!(refresh.token_key, "token");
        assert_eq!(refresh.config_map, "nicpolicy-inventories");
        assert_eq!(refresh.refresh_interval, Duration::from_secs(300));
        assert_eq!(
            refresh.ca_file,
            Some(PathBuf::from("/etc/nicpolicy/ca.pem"))
        );
        assert!(config
            .watched_files()
            .contains(&PathBuf::from("/etc/nicpolicy/ca.pem")));
        for (text, field) in [
            (
                format!("{base}cloudDirector: {{site: vcd.example.net, org: platform, tokenSecret: {{name: t}}}}"),
                "cloudDirector.site",
            ),
            (
                format!("{base}cloudDirector: {{site: 'https://vcd', org: '', tokenSecret: {{name: t}}}}"),
                "cloudDirector.org",
            ),
            (
                format!("{base}cloudDirector: {{site: 'https://vcd', org: o, tokenSecret: {{name: t}}, configMap: Inventories}}"),
                "cloudDirector.configMap",
            ),
            (
                format!("{base}cloudDirector: {{site: 'https://vcd', org: o, tokenSecret: {{name: t}}, refreshInterval: 10ms}}"),
                "cloudDirector.refreshInterval",
            ),
            (
                "policies: {VCDMachine: [{builtin: capvcd}]}\ncloudDirector: {site: 'https://vcd', org: o, tokenSecret: {name: t}}".to_string(),
                "cloudDirector",
            ),
            (
                format!("{base}cloudDirector: {{site: 'https://vcd', org: o, token: abc}}"),
                "cloudDirector",
            ),
        ] {
            let err = parse(&text).expect_err(&text).to_string();
            assert!(err.contains(field), "{text}: {err}");
        }
    }

    #[test]
    fn the_provisioner_is_stock_capvcd_unless_declared() {
        let stock = parse("policies: {VCDMachine: [{builtin: capvcd}]}").expect("valid");
        assert_eq!(stock.provisioner, Provisioner::capvcd());
        assert_eq!(stock.on_unapplied, OnUnapplied::Warn);
        let site = parse(
            "policies: {VCDMachine: [{builtin: capvcd}]}\nprovisioner:\n  name: capvcd-eu1\n  \
             applies: [ipAddress, ipAllocationMode, ipAddress]\n  onUnapplied: Deny\n",
        )
        .expect("valid");
        assert_eq!(site.provisioner.name, "capvcd-eu1");
        assert_eq!(
            site.provisioner.applies,
            [PlanField::IpAllocationMode, PlanField::IpAddress]
        );
        assert_eq!(site.on_unapplied, OnUnapplied::Deny);
        assert_eq!(site.provisioner.profile, Profile::Custom);
        assert_eq!(site.provisioner.builds, Builds::default());

        let deckhouse =
            parse("policies: {VCDMachine: [{builtin: capvcd}]}\nprovisioner: {profile: deckhouse}")
                .expect("valid");
        assert_eq!(deckhouse.provisioner, Provisioner::of(Profile::Deckhouse));
        assert_eq!(
            deckhouse.provisioner.builds.ip_allocation_mode,
            IpAllocationMode::Dhcp
        );
        let custom = parse(
            "policies: {VCDMachine: [{builtin: capvcd}]}\nprovisioner:\n  profile: custom\n  \
             builds: {ipAllocationMode: DHCP, connected: false}\n",
        )
        .expect("valid");
        assert_eq!(
            custom.provisioner.builds,
            Builds {
                ip_allocation_mode: IpAllocationMode::Dhcp,
                connected: false,
                ..Builds::default()
            }
        );

        // What only a custom build declares, on a named build; MANUAL without an address.
        for (text, field, says) in [
            (
                "provisioner: {profile: deckhouse, applies: [ipAddress]}",
                "provisioner.applies",
                "the deckhouse profile states what it applies and builds",
            ),
            (
                "provisioner: {profile: capvcd-main, builds: {connected: false}}",
                "provisioner.builds",
                "profile: custom",
            ),
            (
                "provisioner: {builds: {ipAllocationMode: MANUAL}}",
                "provisioner.builds.ipAllocationMode",
                "MANUAL needs the plan's address",
            ),
        ] {
            let err = parse(&format!(
                "policies: {{VCDMachine: [{{builtin: capvcd}}]}}\n{text}"
            ))
            .expect_err(text)
            .to_string();
            assert!(err.contains(field) && err.contains(says), "{text}: {err}");
        }
        let unknown = parse(
            "policies: {VCDMachine: [{builtin: capvcd}]}\nprovisioner: {profile: capvcd-1.2}",
        )
        .expect_err("an unknown profile")
        .to_string();
        assert!(unknown.contains("provisioner.profile"), "{unknown}");
    }

    #[test]
    fn modes_default_to_enforce_and_a_bad_one_names_the_entry() {
        let config = parse(
            "policies:\n  VCDMachine:\n    - {builtin: capvcd, mode: warn}\n    - {builtin: capvcd, mode: Enforce}\n    - {builtin: capvcd}\n",
        )
        .expect("valid");
        let modes: Vec<Mode> = config.policies[&ObjectKind::VcdMachine]
            .iter()
            .map(|p| p.spec.mode)
            .collect();
        assert_eq!(modes, [Mode::Warn, Mode::Enforce, Mode::Enforce]);

        let err = parse(
            "policies:\n  VCDMachine:\n    - {builtin: capvcd}\n    - {builtin: capvcd, mode: audit}\n",
        )
        .unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("/etc/nicpolicy/config.yaml: policies.VCDMachine[1].mode: unknown variant `audit`, expected"),
            "{text}"
        );
        assert!(
            text.contains("`enforce`") && text.contains("`warn`"),
            "{text}"
        );
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
