//! The served policy set: the configuration file ([`config`]), the policies and inventory it
//! names loaded into one [`Served`] snapshot, and their hot reload. The webhook, the controller
//! and the CLI's `review` all serve through it; it knows nothing of HTTP or the Kubernetes API.
//!
//! A review reads one [`Served`] snapshot for its whole life, so every answer comes from exactly
//! one configuration. A reload compiles, ABI-checks and validates the settings of every policy
//! *before* it swaps the snapshot; a configuration that fails any of that is reported (log and
//! the [`ReloadObserver`], which the webhook's metrics are) and the previous snapshot keeps
//! serving.

pub mod config;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use nicpolicy_plugin::ObjectKind;
use sha2::{Digest, Sha256};

use crate::{Host, PolicyChain};
pub use config::{ConfigError, FailureMode, ServeConfig, UnavailableAtStart, UnknownClusterMode};
use nicpolicy_engine::error::LoadError;
use nicpolicy_engine::spec::PolicySpec;
use nicpolicy_inputs::manifest::ManifestError;

use crate::inventories::{Inventories, Missing};

/// Why a configuration's policies could not be made ready.
#[derive(Debug, thiserror::Error)]
pub enum ServeLoadError {
    /// The configuration file itself is wrong.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The inventory file is wrong.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// A policy module was refused.
    #[error("{config}: {field} ({module}): {error}")]
    Policy {
        /// The configuration file.
        config: String,
        /// The entry, like `policies.VCDMachine[0]`.
        field: String,
        /// The module, as the entry names it.
        module: String,
        /// Why it was refused.
        error: Box<LoadError>,
    },
}

/// One consistent set of everything a review reads that a reload may change.
pub struct Served {
    /// Counts loads from 1; tells snapshots apart in logs.
    pub generation: u64,
    /// The configuration this snapshot was loaded from.
    pub config: ServeConfig,
    /// The policy chain of each served kind.
    pub chains: BTreeMap<ObjectKind, PolicyChain>,
    /// The org VDCs' networks, when configured: each VDC's and the default, with the static
    /// pools they count.
    pub inventories: Inventories,
    /// Kinds whose chain could not be loaded because an `oci:` module could not be had at
    /// start (`registry.onUnavailableAtStart: Deny`), with why: their requests are denied
    /// saying so, and the reload watcher tries again at every interval.
    pub unavailable: BTreeMap<ObjectKind, String>,
    fingerprint: Fingerprint,
}

/// Removes from the host's compiled-module cache and module store what `served` (the snapshot
/// about to serve) does not use: the cache and the store otherwise grow with every module
/// version a server ever loaded, until the pod's volume is full and it is evicted.
fn prune(host: &Host, served: &Served) {
    let Some(cache) = host.cache() else {
        return;
    };
    let keep: std::collections::BTreeSet<String> = served
        .chains
        .values()
        .flat_map(|chain| chain.policies())
        .map(|policy| policy.info().sha256.clone())
        .collect();
    let compiled = cache.prune(host.engine(), &keep);
    #[cfg(feature = "oci")]
    let (entries, modules) = {
        let references: std::collections::BTreeSet<String> = served
            .config
            .policies
            .values()
            .flatten()
            .filter_map(|entry| match &entry.spec.source {
                crate::spec::PolicySource::Fetched { scheme, reference }
                    if scheme == nicpolicy_oci::fetcher::SCHEME =>
                {
                    Some(reference.clone())
                }
                _ => None,
            })
            .collect();
        nicpolicy_oci::store::Store::new(cache.dir().join("oci")).prune(&references)
    };
    #[cfg(not(feature = "oci"))]
    let (entries, modules) = (0, 0);
    if compiled + entries + modules > 0 {
        tracing::info!(
            compiled,
            stored_references = entries,
            stored_modules = modules,
            "removed what the new generation does not use from the module cache and store"
        );
    }
}

impl Served {
    /// Loads every policy of `config` (compiled or from the cache, ABI-checked, settings
    /// validated) and reads the inventory.
    ///
    /// # Errors
    /// The first policy that cannot be loaded, or the inventory.
    pub fn load(
        host: &Host,
        config: ServeConfig,
        generation: u64,
    ) -> Result<Served, ServeLoadError> {
        Served::load_with(host, config, generation, Unavailable::Refused)
    }

    /// The first load of a server: as [`Served::load`], except that with
    /// `registry.onUnavailableAtStart: Deny` a chain whose `oci:` module cannot be had leaves
    /// its kind [`Served::unavailable`] instead of failing the start.
    ///
    /// # Errors
    /// As for [`Served::load`].
    pub fn load_at_start(host: &Host, config: ServeConfig) -> Result<Served, ServeLoadError> {
        let tolerate =
            if config.registry.on_unavailable_at_start == config::UnavailableAtStart::Deny {
                Unavailable::Tolerated
            } else {
                Unavailable::Refused
            };
        Served::load_with(host, config, 1, tolerate)
    }

    /// Whether some kind is [`Served::unavailable`].
    pub fn degraded(&self) -> bool {
        !self.unavailable.is_empty()
    }

    fn load_with(
        host: &Host,
        config: ServeConfig,
        generation: u64,
        unavailable_modules: Unavailable,
    ) -> Result<Served, ServeLoadError> {
        // Taken first: a file changed during the load is seen as changed by the next check.
        let fingerprint = Fingerprint::of(&config.watched_files());
        let config_label = config
            .path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "(built-in configuration)".to_string());
        // One loader for every kind: entries naming the same module file get the same bytes
        // even if the file is replaced while the load runs.
        // `oci:` entries are pulled (or read from the store) with the configuration's registry
        // options.
        #[cfg(feature = "oci")]
        let sources = crate::sources::Sources::with_registry(host, config.registry.options.clone());
        #[cfg(not(feature = "oci"))]
        let sources = crate::sources::Sources::new(host);
        let mut loader = sources.loader(host);
        let mut chains = BTreeMap::new();
        let mut unavailable = BTreeMap::new();
        for (kind, entries) in &config.policies {
            let specs: Vec<PolicySpec> = entries.iter().map(|entry| entry.spec.clone()).collect();
            let loaded = match loader.load(&specs) {
                Ok(loaded) => loaded,
                Err(err) => {
                    let registry = matches!(*err.error, LoadError::Registry(_));
                    let error = ServeLoadError::Policy {
                        config: config_label.clone(),
                        field: entries
                            .get(err.index)
                            .map(|entry| entry.field.clone())
                            .unwrap_or_else(|| format!("policies.{}", kind.as_str())),
                        module: err.label,
                        error: err.error,
                    };
                    // Only a module that could not be had from its registry: anything else
                    // (settings, a pin, a module that is no policy) is the configuration's
                    // fault and stops the load, as before.
                    match unavailable_modules {
                        Unavailable::Refused => return Err(error),
                        _ if !registry => return Err(error),
                        Unavailable::Tolerated => tracing::error!(
                            generation,
                            kind = kind.as_str(),
                            error = %error,
                            "a policy cannot be had from its registry: this kind is denied until \
                             it can (tried again at every reload interval)"
                        ),
                        // Said at start; every retry would say it again.
                        Unavailable::Retried => tracing::debug!(
                            kind = kind.as_str(),
                            error = %error,
                            "the policy still cannot be had"
                        ),
                    }
                    unavailable.insert(*kind, error.to_string());
                    continue;
                }
            };
            // The loader puts each entry in its spec's mode. The webhook and the controller
            // read the violations' sources (rule names), never the NICs': the policies skip
            // building them. They read the combined decision, never a step's.
            let chain = loaded
                .with_provisioner(config.provisioner.clone(), config.on_unapplied)
                .with_nic_sources(false)
                .without_step_decisions();
            // Where each module came from: a restart that compiles instead of loading from
            // the cache shows here (and says why the cache was bypassed).
            for policy in chain.policies() {
                tracing::info!(
                    generation,
                    kind = kind.as_str(),
                    policy = %policy.name(),
                    sha256 = %policy.info().sha256,
                    load_ms = policy.load_time().as_secs_f64() * 1e3,
                    cache = %policy.cache_status(),
                    "policy loaded"
                );
            }
            chains.insert(*kind, chain);
        }
        // With `cloudDirector`, the controller writes the VDCs' files: one not written yet
        // leaves its VDC on the default.
        let missing = if config.cloud_director.is_some() {
            Missing::UseDefault
        } else {
            Missing::Refused
        };
        let inventories =
            Inventories::read(config.inventory.as_deref(), &config.inventories, missing)?;
        for vdc in &inventories.not_written {
            tracing::warn!(generation, ovdc = %vdc, "the org VDC's inventory is not written yet; the default inventory serves it");
        }
        Ok(Served {
            generation,
            config,
            chains,
            inventories,
            unavailable,
            fingerprint,
        })
    }

    /// What to do when a policy fails at run time.
    pub fn on_policy_failure(&self) -> FailureMode {
        self.config.on_policy_failure
    }

    /// What to do when a machine's cluster is unknown.
    pub fn on_unknown_cluster(&self) -> UnknownClusterMode {
        self.config.on_unknown_cluster
    }
}

/// How a load treats a chain whose `oci:` module cannot be had.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unavailable {
    /// The load fails.
    Refused,
    /// The kind is left unavailable, logged as an error (the start).
    Tolerated,
    /// The kind is left unavailable quietly (a retry of a degraded snapshot).
    Retried,
}

/// Contents digests of the files a configuration depends on.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Fingerprint(Vec<(PathBuf, Option<[u8; 32]>)>);

impl Fingerprint {
    fn of(files: &[PathBuf]) -> Fingerprint {
        // Contents, not mtimes: a ConfigMap update swaps a symlink and keeps old timestamps.
        Fingerprint(
            files
                .iter()
                .map(|path| {
                    let digest = std::fs::read(path).ok().map(|b| Sha256::digest(b).into());
                    (path.clone(), digest)
                })
                .collect(),
        )
    }
}

/// Told the outcome of every reload that found changed files: the webhook counts them
/// (`nicpolicy_policy_reloads_total`); `()` ignores them.
pub trait ReloadObserver: Send + Sync {
    /// A changed configuration was loaded and swapped in (`true`) or refused (`false`).
    fn reloaded(&self, success: bool);
}

impl ReloadObserver for () {
    fn reloaded(&self, _success: bool) {}
}

/// What the reload watcher remembers between checks.
#[derive(Debug, Default)]
pub struct ReloadState {
    refused: Option<Fingerprint>,
}

/// The snapshot reviews read, swapped atomically by reloads.
pub struct ServedPolicies {
    current: RwLock<Arc<Served>>,
    /// Whether a reload prunes the host's module cache and store to what it serves.
    prunes: bool,
}

impl ServedPolicies {
    /// Starts with `served`; each reload prunes the host's module cache and store to what the
    /// new generation uses.
    pub fn new(served: Served) -> Arc<ServedPolicies> {
        Arc::new(ServedPolicies {
            current: RwLock::new(Arc::new(served)),
            prunes: true,
        })
    }

    /// Starts with `served`, leaving the module cache and store as they are on reload: for
    /// snapshots that share a host with another (the controller's chains in force and its
    /// candidate), whose modules the other's pruning would take away.
    pub fn sharing_the_cache(served: Served) -> Arc<ServedPolicies> {
        Arc::new(ServedPolicies {
            current: RwLock::new(Arc::new(served)),
            prunes: false,
        })
    }

    /// The snapshot to use for one review.
    pub fn get(&self) -> Arc<Served> {
        match self.current.read() {
            Ok(guard) => guard.clone(),
            // A panic while swapping cannot leave a half-written Arc behind.
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn swap(&self, served: Served) {
        let served = Arc::new(served);
        match self.current.write() {
            Ok(mut guard) => *guard = served,
            Err(poisoned) => *poisoned.into_inner() = served,
        }
    }

    /// Checks the watched files once; when they changed, loads the new configuration and swaps
    /// it in. A snapshot with [`Served::unavailable`] kinds loads again at every check and is
    /// swapped out when its files changed or fewer kinds are unavailable. Returns `Ok(true)`
    /// after a swap, `Ok(false)` when nothing changed.
    pub fn reload_if_changed(
        &self,
        host: &Host,
        observer: &dyn ReloadObserver,
        state: &mut ReloadState,
    ) -> Result<bool, ServeLoadError> {
        let current = self.get();
        let now = Fingerprint::of(&current.config.watched_files());
        let changed = now != current.fingerprint;
        // A snapshot that started without some kind's module tries again at every check, the
        // same files included, and keeps the kinds it has while the module cannot be had. Any
        // other snapshot loads only changed files, and a refused set of files only once they
        // change again.
        let degraded = current.degraded();
        if !degraded && (!changed || state.refused.as_ref() == Some(&now)) {
            return Ok(false);
        }
        let unavailable_modules = if degraded {
            Unavailable::Retried
        } else {
            Unavailable::Refused
        };
        let result = reread(&current).and_then(|config| {
            Served::load_with(host, config, current.generation + 1, unavailable_modules)
        });
        match result {
            // A retry with the same files is swapped in only when it has more kinds.
            Ok(served) if changed || served.unavailable.len() < current.unavailable.len() => {
                let generation = served.generation;
                let unavailable = served.unavailable.len();
                if self.prunes {
                    prune(host, &served);
                }
                self.swap(served);
                state.refused = None;
                observer.reloaded(true);
                tracing::info!(generation, unavailable, "configuration reloaded");
                Ok(true)
            }
            Ok(_) => Ok(false),
            Err(err) => {
                // A refusal of changed files is counted; a degraded snapshot's retry of the
                // files it loaded is not.
                if changed {
                    state.refused = Some(now);
                    observer.reloaded(false);
                }
                tracing::error!(error = %err, generation = current.generation, "reload refused; the previous policies keep serving");
                Err(err)
            }
        }
    }

    /// Checks for changes every `interval` on a thread of its own (loads compile modules, which
    /// must not block the async runtime). The thread ends when the snapshot is dropped.
    pub fn watch(
        self: &Arc<Self>,
        host: Host,
        observer: Arc<dyn ReloadObserver>,
        interval: Duration,
    ) -> std::io::Result<()> {
        let weak: Weak<ServedPolicies> = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("nicpolicy-reload".into())
            .spawn(move || {
                let mut state = ReloadState::default();
                loop {
                    std::thread::sleep(interval);
                    let Some(policies) = weak.upgrade() else {
                        break;
                    };
                    // Errors are logged and counted inside; the old snapshot keeps serving.
                    let _ = policies.reload_if_changed(&host, observer.as_ref(), &mut state);
                }
            })
            .map(drop)
    }
}

/// The configuration a reload loads: the file again (the same configuration without one), with
/// the flags given to `serve`, which still win over the file.
fn reread(current: &Served) -> Result<ServeConfig, ServeLoadError> {
    let mut config = match &current.config.path {
        Some(path) => ServeConfig::read(path)?,
        None => current.config.clone(),
    };
    config.override_with(current.config.overrides.clone());
    warn_restart_only(&current.config, &config);
    Ok(config)
}

/// Settings read once at start: say so when a reload changes them.
fn warn_restart_only(old: &ServeConfig, new: &ServeConfig) {
    let changed = [
        ("listen", old.listen != new.listen),
        ("tls", old.tls != new.tls),
        ("clusters", old.clusters != new.clusters),
        (
            "evaluation",
            old.workers != new.workers || old.queue_timeout != new.queue_timeout,
        ),
        (
            "maxRequestBytes",
            old.max_request_bytes != new.max_request_bytes,
        ),
        ("reload", old.reload_interval != new.reload_interval),
        ("connections", old.connections != new.connections),
        ("compile", old.compile != new.compile),
    ];
    for (field, _) in changed.iter().filter(|(_, changed)| *changed) {
        tracing::warn!(
            field,
            "this setting changed; it takes effect after a restart"
        );
    }
}
