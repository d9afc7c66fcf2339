//! One description of a policy to load ([`PolicySpec`]: where the module comes from, its
//! settings, its digest pin and its limits) and one way to load a list of them into a
//! [`PolicyChain`] ([`Host::load_chain`], or a [`ChainLoader`] for several chains that share
//! module files). The CLI's `--policy` options and the webhook's `policies:` entries both map onto
//! it.
//!
//! ```no_run
//! use nicpolicy::{Host, HostConfig, Limits, PolicySource, PolicySpec};
//! use std::time::Duration;
//!
//! # fn main() -> anyhow::Result<()> {
//! let host = Host::new(HostConfig::default())?;
//! let chain = host.load_chain(&[
//!     PolicySpec::new(PolicySource::File("policies/dmz-guard.wasm".into()))
//!         .with_settings_file("dmz-guard.yaml"),
//!     PolicySpec::new(PolicySource::parse("builtin:capvcd")?)
//!         .with_settings(serde_json::json!({"maxNics": 6}))
//!         .with_limits(Limits::default().with_timeout(Duration::from_millis(250))),
//! ])?;
//! println!("loaded {}", chain.name());
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;

use crate::chain::PolicyChain;
use crate::engine::Host;
use crate::error::LoadError;
use crate::limits::Limits;
use crate::manifest;
use crate::mode::Mode;
use crate::policy::{Policy, PolicyOptions};

/// Where a policy module comes from.
#[derive(Clone, Debug)]
pub enum PolicySource {
    /// A `.wasm` file, read when the chain loads.
    File(PathBuf),
    /// A policy built into the binary (`builtin:NAME`).
    #[cfg(feature = "builtin")]
    Builtin(&'static crate::builtin::BuiltinPolicy),
    /// Module bytes the caller already holds (from a ConfigMap, a registry, a test).
    Bytes(Arc<[u8]>),
    /// A module in an OCI registry (`oci://host/repo@sha256:...` on the command line), pulled
    /// when the chain loads (see [`crate::oci::store`]); the reference without `oci://`.
    #[cfg(feature = "oci")]
    Oci(String),
}

/// What marks a registry reference where a file path could stand (`oci://host/repo@sha256:...`).
pub const OCI_SCHEME: &str = "oci://";

/// `text` without its leading [`OCI_SCHEME`], when it has one.
pub fn oci_reference(text: &str) -> Option<&str> {
    text.strip_prefix(OCI_SCHEME)
}

/// `text` without a leading [`OCI_SCHEME`]: where only a reference can stand, the scheme is
/// optional.
pub fn without_oci_scheme(text: &str) -> &str {
    oci_reference(text).unwrap_or(text)
}

impl PolicySource {
    /// `oci://REFERENCE` for a module in a registry, `builtin:NAME` for a built-in policy,
    /// anything else a file path.
    ///
    /// # Errors
    /// [`LoadError::UnknownBuiltin`] for a `builtin:` name no built-in policy has (always, in a
    /// build without the `builtin` feature); [`LoadError::Registry`] for a reference that does
    /// not parse (always, in a build without the `oci` feature).
    pub fn parse(text: &str) -> Result<PolicySource, LoadError> {
        if let Some(reference) = oci_reference(text) {
            return PolicySource::oci(reference);
        }
        match text.strip_prefix("builtin:") {
            Some(name) => PolicySource::builtin(name),
            None => Ok(PolicySource::File(PathBuf::from(text))),
        }
    }

    /// The module in a registry at `reference` (`host/repo@sha256:...` or `host/repo:tag`, with
    /// or without `oci://`), its shape checked now and the module pulled when the chain loads.
    ///
    /// # Errors
    /// [`LoadError::Registry`] for a reference that does not parse, naming it (always, in a
    /// build without the `oci` feature).
    pub fn oci(reference: &str) -> Result<PolicySource, LoadError> {
        let reference = without_oci_scheme(reference);
        #[cfg(feature = "oci")]
        return crate::oci::parse_reference(reference)
            .map(|_| PolicySource::Oci(reference.to_string()))
            .map_err(|err| LoadError::Registry(err.to_string()));
        #[cfg(not(feature = "oci"))]
        return Err(LoadError::Registry(format!(
            "{reference}: this build of nicpolicy has no OCI registry support (feature oci)"
        )));
    }

    /// The built-in policy called `name`.
    ///
    /// # Errors
    /// [`LoadError::UnknownBuiltin`], listing the names there are.
    pub fn builtin(name: &str) -> Result<PolicySource, LoadError> {
        #[cfg(feature = "builtin")]
        return crate::builtin::get_or_list(name).map(PolicySource::Builtin);
        #[cfg(not(feature = "builtin"))]
        return Err(LoadError::UnknownBuiltin {
            name: name.to_string(),
            known: "none (built without the `builtin` feature)".to_string(),
        });
    }

    /// How errors and logs name the module: the file path, `builtin:NAME`, or `module bytes`.
    pub fn label(&self) -> String {
        match self {
            PolicySource::File(path) => path.display().to_string(),
            #[cfg(feature = "builtin")]
            PolicySource::Builtin(policy) => format!("builtin:{}", policy.name),
            PolicySource::Bytes(bytes) => format!("module bytes ({} bytes)", bytes.len()),
            #[cfg(feature = "oci")]
            PolicySource::Oci(reference) => format!("{OCI_SCHEME}{reference}"),
        }
    }
}

/// Files by path, built-in policies by name, bytes by content.
impl PartialEq for PolicySource {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (PolicySource::File(a), PolicySource::File(b)) => a == b,
            #[cfg(feature = "builtin")]
            (PolicySource::Builtin(a), PolicySource::Builtin(b)) => a.name == b.name,
            (PolicySource::Bytes(a), PolicySource::Bytes(b)) => a == b,
            #[cfg(feature = "oci")]
            (PolicySource::Oci(a), PolicySource::Oci(b)) => a == b,
            _ => false,
        }
    }
}

/// Where a policy's settings come from.
#[derive(Clone, Debug, PartialEq)]
pub enum SettingsSource {
    /// Given as a value (`null` for the policy's defaults).
    Inline(Value),
    /// A YAML or JSON file holding one mapping (or nothing), read when the chain loads.
    File(PathBuf),
}

impl Default for SettingsSource {
    fn default() -> Self {
        SettingsSource::Inline(Value::Null)
    }
}

/// One policy of a chain: its module, settings, digest pin and limits.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicySpec {
    /// The module.
    pub source: PolicySource,
    /// Its settings.
    pub settings: SettingsSource,
    /// Refuse the module unless its sha256 (hex) is this.
    pub sha256: Option<String>,
    /// Time and memory limits of every call.
    pub limits: Limits,
    /// How a chain uses its decision: enforced, or in warn mode ([`crate::mode`]).
    pub mode: Mode,
}

impl PolicySpec {
    /// `source` with no settings, no pin, the default limits, enforced.
    pub fn new(source: PolicySource) -> PolicySpec {
        PolicySpec {
            source,
            settings: SettingsSource::default(),
            sha256: None,
            limits: Limits::default(),
            mode: Mode::Enforce,
        }
    }

    /// This spec in `mode`.
    pub fn with_mode(mut self, mode: Mode) -> PolicySpec {
        self.mode = mode;
        self
    }

    /// The same spec with these settings.
    pub fn with_settings(mut self, settings: Value) -> PolicySpec {
        self.settings = SettingsSource::Inline(settings);
        self
    }

    /// The same spec with settings read from `path`.
    pub fn with_settings_file(mut self, path: impl Into<PathBuf>) -> PolicySpec {
        self.settings = SettingsSource::File(path.into());
        self
    }

    /// The same spec pinned to a sha256 digest (hex).
    pub fn with_sha256(mut self, sha256: impl Into<String>) -> PolicySpec {
        self.sha256 = Some(sha256.into());
        self
    }

    /// The same spec with other limits.
    pub fn with_limits(mut self, limits: Limits) -> PolicySpec {
        self.limits = limits;
        self
    }
}

/// Why a chain could not be loaded: which entry failed, and why.
#[derive(Debug, thiserror::Error)]
#[error("{label}: cannot load the policy")]
pub struct ChainLoadError {
    /// Position of the entry in the list, from 0.
    pub index: usize,
    /// The entry's [`PolicySource::label`].
    pub label: String,
    /// Why it was refused.
    #[source]
    pub error: Box<LoadError>,
}

/// Loads lists of [`PolicySpec`]s into chains. Each module file is read once per loader, so
/// several chains loaded by one loader (the webhook's, one per kind) get the same bytes for the
/// same file even if it is replaced while they load.
pub struct ChainLoader<'h> {
    host: &'h Host,
    files: HashMap<PathBuf, Arc<[u8]>>,
    /// How to reach registries for `oci://` sources.
    #[cfg(feature = "oci")]
    registry: crate::oci::RegistryOptions,
    /// Each `oci://` reference loaded: the immutable reference and how it was got.
    #[cfg(feature = "oci")]
    fetched: Vec<(String, String, crate::oci::store::Fetched)>,
    /// The module of each reference pulled, so a reference in several chains is pulled once
    /// and gives them all the same bytes, as a file does.
    #[cfg(feature = "oci")]
    pulled: HashMap<String, Arc<[u8]>>,
}

impl<'h> ChainLoader<'h> {
    /// A loader that has read no file yet.
    pub fn new(host: &'h Host) -> ChainLoader<'h> {
        ChainLoader {
            host,
            files: HashMap::new(),
            #[cfg(feature = "oci")]
            registry: crate::oci::RegistryOptions::default(),
            #[cfg(feature = "oci")]
            fetched: Vec::new(),
            #[cfg(feature = "oci")]
            pulled: HashMap::new(),
        }
    }

    /// Each `oci://` reference this loader loaded, with the immutable reference it resolved
    /// to and how it was got (pulled, stored, stored while the registry was unreachable), for
    /// callers that tell their user.
    #[cfg(feature = "oci")]
    pub fn fetched(&self) -> &[(String, String, crate::oci::store::Fetched)] {
        &self.fetched
    }

    /// This loader reaching registries with `options`.
    #[cfg(feature = "oci")]
    pub fn with_registry(mut self, options: crate::oci::RegistryOptions) -> ChainLoader<'h> {
        self.registry = options;
        self
    }

    /// Loads every spec, in order, into one chain.
    ///
    /// # Errors
    /// The first entry that cannot be loaded, with its index: unreadable module or settings
    /// file, a module that is not a valid ABI v1 policy, a digest mismatch, limits the host
    /// cannot give, or settings the policy refuses. An empty list is
    /// [`LoadError::EmptyChain`] at index 0.
    pub fn load(&mut self, specs: &[PolicySpec]) -> Result<PolicyChain, ChainLoadError> {
        let mut policies = Vec::with_capacity(specs.len());
        for (index, spec) in specs.iter().enumerate() {
            let policy = self.load_one(spec).map_err(|error| ChainLoadError {
                index,
                label: spec.source.label(),
                error: Box::new(error),
            })?;
            policies.push(policy);
        }
        let mut policies = policies.into_iter();
        let first = policies.next().ok_or(ChainLoadError {
            index: 0,
            label: "(no policy)".to_string(),
            error: Box::new(LoadError::EmptyChain),
        })?;
        let chain = policies.fold(PolicyChain::new(first), PolicyChain::then);
        // Each entry in the mode its spec says.
        Ok(specs
            .iter()
            .enumerate()
            .fold(chain, |chain, (index, spec)| {
                chain.with_mode(index, spec.mode)
            }))
    }

    /// Loads one spec.
    ///
    /// # Errors
    /// As for [`ChainLoader::load`].
    pub fn load_one(&mut self, spec: &PolicySpec) -> Result<Policy, LoadError> {
        let settings = match &spec.settings {
            SettingsSource::Inline(value) => value.clone(),
            SettingsSource::File(path) => manifest::read_settings(path)
                .map_err(|err| LoadError::SettingsFile(Box::new(err)))?,
        };
        let options = PolicyOptions {
            limits: spec.limits,
            settings,
            sha256: spec.sha256.clone(),
        };
        let loaded = match &spec.source {
            PolicySource::File(path) => {
                let bytes = self.read(path)?;
                self.host.load(&bytes, options)
            }
            #[cfg(feature = "builtin")]
            PolicySource::Builtin(policy) => self.host.load(policy.wasm, options),
            PolicySource::Bytes(bytes) => self.host.load(bytes, options),
            #[cfg(feature = "oci")]
            PolicySource::Oci(reference) => {
                let bytes = self.pull(reference)?;
                self.host.load(&bytes, options)
            }
        };
        // A refusal of settings from a file names the file: that is where the fix goes.
        loaded.map_err(|error| match (error, &spec.settings) {
            (LoadError::Settings(reason), SettingsSource::File(path)) => {
                LoadError::SettingsFileRefused {
                    path: path.clone(),
                    reason,
                }
            }
            (error, _) => error,
        })
    }

    /// The module of `reference`, from the store beside the compiled-module cache (none without
    /// one: then it is pulled every time).
    #[cfg(feature = "oci")]
    fn pull(&mut self, reference: &str) -> Result<Arc<[u8]>, LoadError> {
        if let Some(bytes) = self.pulled.get(reference) {
            return Ok(bytes.clone());
        }
        let module = crate::oci::fetch_blocking(
            reference,
            &self.registry,
            self.host.config().cache_dir.as_deref(),
        )
        .map_err(|err| LoadError::Registry(err.to_string()))?;
        self.fetched
            .push((reference.to_string(), module.immutable, module.fetched));
        let bytes: Arc<[u8]> = module.bytes.into();
        self.pulled.insert(reference.to_string(), bytes.clone());
        Ok(bytes)
    }

    fn read(&mut self, path: &PathBuf) -> Result<Arc<[u8]>, LoadError> {
        if let Some(bytes) = self.files.get(path) {
            return Ok(bytes.clone());
        }
        let bytes: Arc<[u8]> = crate::inspect::read_module(path)?.into();
        self.files.insert(path.clone(), bytes.clone());
        Ok(bytes)
    }
}

impl Host {
    /// Loads `specs` in order into one chain (see [`ChainLoader::load`]).
    ///
    /// # Errors
    /// A [`ChainLoadError`] naming the first entry that could not be loaded, and why.
    pub fn load_chain(&self, specs: &[PolicySpec]) -> Result<PolicyChain, ChainLoadError> {
        ChainLoader::new(self).load(specs)
    }
}
