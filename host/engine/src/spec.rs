//! One description of a policy to load ([`PolicySpec`]: where the module comes from, its
//! settings, its digest pin and its limits) and one way to load a list of them into a
//! [`PolicyChain`] ([`Host::load_chain`], or a [`ChainLoader`] for several chains that share
//! module files). The CLI's `--policy` options and the webhook's `policies:` entries both map onto
//! it. Modules named by a reference (`builtin:capvcd`, `oci://...`) come from the
//! [`ModuleFetcher`]s a loader is given ([`ChainLoader::with_fetcher`]).
//!
//! ```no_run
//! use nicpolicy_engine::{Host, HostConfig, Limits, PolicySource, PolicySpec};
//! use std::time::Duration;
//!
//! # fn main() -> anyhow::Result<()> {
//! let host = Host::new(HostConfig::default())?;
//! let chain = host.load_chain(&[
//!     PolicySpec::new(PolicySource::File("policies/dmz-guard.wasm".into()))
//!         .with_settings_file("dmz-guard.yaml"),
//!     PolicySpec::new(PolicySource::File("policies/capvcd.wasm".into()))
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
use crate::fetch::{split_scheme, ModuleFetcher};
use crate::limits::Limits;
use crate::mode::Mode;
use crate::policy::{Policy, PolicyOptions};
use nicpolicy_inputs::manifest;

/// Where a policy module comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum PolicySource {
    /// A `.wasm` file, read when the chain loads.
    File(PathBuf),
    /// Module bytes the caller already holds (from a ConfigMap, a registry, a test); equal
    /// by content.
    Bytes(Arc<[u8]>),
    /// A module that a [`ModuleFetcher`] of the loader gets when the chain loads:
    /// `builtin:capvcd`, `oci://registry.example.net/platform/dmz-guard@sha256:...`.
    Fetched {
        /// The scheme, as written: `builtin:`, `oci://`.
        scheme: String,
        /// The reference after it.
        reference: String,
    },
}

impl PolicySource {
    /// `SCHEME:REFERENCE` (or `SCHEME://REFERENCE`) for a module a fetcher gets, as
    /// [`split_scheme`] reads it; anything else a file path. Only the syntax is read here:
    /// whether a loader can fetch the scheme is known when it loads (`nicpolicy::sources::parse`
    /// checks the references of the schemes the `nicpolicy` binary fetches as it reads them).
    ///
    /// # Errors
    /// None today; the `Result` leaves room for a syntax that can be wrong.
    pub fn parse(text: &str) -> Result<PolicySource, LoadError> {
        Ok(match split_scheme(text) {
            Some((scheme, reference)) => PolicySource::fetched(scheme, reference),
            None => PolicySource::File(PathBuf::from(text)),
        })
    }

    /// The module a fetcher of `scheme` gets for `reference`.
    pub fn fetched(scheme: &str, reference: &str) -> PolicySource {
        PolicySource::Fetched {
            scheme: scheme.to_string(),
            reference: reference.to_string(),
        }
    }

    /// How errors and logs name the module: the file path, the reference with its scheme
    /// (`builtin:capvcd`), or `module bytes`.
    pub fn label(&self) -> String {
        match self {
            PolicySource::File(path) => path.display().to_string(),
            PolicySource::Bytes(bytes) => format!("module bytes ({} bytes)", bytes.len()),
            PolicySource::Fetched { scheme, reference } => format!("{scheme}{reference}"),
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

/// Loads lists of [`PolicySpec`]s into chains. Each module file is read, and each fetched
/// reference fetched, once per loader, so several chains loaded by one loader (the webhook's,
/// one per kind) get the same bytes for the same module even if it is replaced while they load.
pub struct ChainLoader<'h> {
    host: &'h Host,
    files: HashMap<PathBuf, Arc<[u8]>>,
    /// The fetchers of [`PolicySource::Fetched`] sources, by scheme.
    fetchers: Vec<Arc<dyn ModuleFetcher>>,
    /// The module of each reference fetched, by scheme and reference.
    fetched: HashMap<(String, String), Arc<[u8]>>,
}

impl<'h> ChainLoader<'h> {
    /// A loader that has read no file yet and fetches nothing: files and bytes only, until
    /// [`ChainLoader::with_fetcher`].
    pub fn new(host: &'h Host) -> ChainLoader<'h> {
        ChainLoader {
            host,
            files: HashMap::new(),
            fetchers: Vec::new(),
            fetched: HashMap::new(),
        }
    }

    /// This loader getting the sources of `fetcher`'s scheme from it (in place of an earlier
    /// fetcher of the same scheme).
    pub fn with_fetcher(mut self, fetcher: Arc<dyn ModuleFetcher>) -> ChainLoader<'h> {
        self.fetchers
            .retain(|known| known.scheme() != fetcher.scheme());
        self.fetchers.push(fetcher);
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
            PolicySource::Bytes(bytes) => self.host.load(bytes, options),
            PolicySource::Fetched { scheme, reference } => {
                let bytes = self.fetch(scheme, reference)?;
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

    /// The module of `scheme` `reference`, from this loader's fetcher of that scheme (once per
    /// loader).
    fn fetch(&mut self, scheme: &str, reference: &str) -> Result<Arc<[u8]>, LoadError> {
        let key = (scheme.to_string(), reference.to_string());
        if let Some(bytes) = self.fetched.get(&key) {
            return Ok(bytes.clone());
        }
        let fetcher = self
            .fetchers
            .iter()
            .find(|fetcher| fetcher.scheme() == scheme)
            .ok_or_else(|| LoadError::NoFetcher {
                scheme: scheme.to_string(),
                reference: reference.to_string(),
                known: match self.fetchers.is_empty() {
                    true => "none".to_string(),
                    false => self
                        .fetchers
                        .iter()
                        .map(|fetcher| fetcher.scheme())
                        .collect::<Vec<_>>()
                        .join(", "),
                },
            })?;
        let bytes = fetcher.fetch(reference)?;
        self.fetched.insert(key, bytes.clone());
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
    /// Loads `specs` in order into one chain (see [`ChainLoader::load`]) with a loader that has
    /// no fetcher: files and bytes only.
    ///
    /// # Errors
    /// A [`ChainLoadError`] naming the first entry that could not be loaded, and why.
    pub fn load_chain(&self, specs: &[PolicySpec]) -> Result<PolicyChain, ChainLoadError> {
        ChainLoader::new(self).load(specs)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::engine::HostConfig;

    /// The smallest ABI v1 policy: valid settings, allows everything.
    fn allow_all() -> Vec<u8> {
        wat::parse_str(
            r#"(module
  (memory (export "memory") 1)
  (data (i32.const 16) "{\"valid\":true}")
  (data (i32.const 32) "{\"allowed\":true}")
  (func (export "nicpolicy_abi_version") (result i32) i32.const 1)
  (func (export "nicpolicy_alloc") (param i32) (result i32) i32.const 1024)
  (func (export "nicpolicy_validate_settings") (param i32 i32) (result i64)
    i64.const 68719476750)
  (func (export "nicpolicy_evaluate") (param i32 i32) (result i64)
    i64.const 137438953488)
  (@custom "nicpolicy.metadata" "{\"name\":\"allow-all\",\"version\":\"1.0.0\",\"abiVersion\":1}")
)"#,
        )
        .expect("valid wat")
    }

    /// Modules kept by name, counting its fetches.
    struct Named {
        modules: Vec<(&'static str, Arc<[u8]>)>,
        fetches: AtomicUsize,
    }

    impl ModuleFetcher for Named {
        fn scheme(&self) -> &str {
            "configmap:"
        }

        fn fetch(&self, reference: &str) -> Result<Arc<[u8]>, LoadError> {
            self.fetches.fetch_add(1, Ordering::SeqCst);
            self.modules
                .iter()
                .find(|(name, _)| *name == reference)
                .map(|(_, bytes)| bytes.clone())
                .ok_or_else(|| LoadError::Fetch {
                    module: format!("configmap:{reference}"),
                    reason: "no such key in the ConfigMap".to_string(),
                })
        }
    }

    fn host() -> Host {
        Host::new(HostConfig {
            cache_dir: None,
            max_instances: 4,
            ..HostConfig::default()
        })
        .expect("engine starts")
    }

    #[test]
    fn references_load_through_the_fetcher_of_their_scheme_once_per_loader() {
        let host = host();
        let fetcher = Arc::new(Named {
            modules: vec![("allow-all.wasm", allow_all().into())],
            fetches: AtomicUsize::new(0),
        });
        let mut loader = ChainLoader::new(&host).with_fetcher(fetcher.clone());
        let spec =
            PolicySpec::new(PolicySource::parse("configmap:allow-all.wasm").expect("parses"));
        assert_eq!(spec.source.label(), "configmap:allow-all.wasm");
        // Two chains (the webhook loads one per kind) naming the same module: one fetch.
        let first = loader.load(std::slice::from_ref(&spec)).expect("loads");
        let second = loader.load(&[spec.clone(), spec]).expect("loads");
        assert_eq!(first.name(), "allow-all");
        assert_eq!(second.policies().len(), 2);
        assert_eq!(fetcher.fetches.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_fetch_that_fails_names_the_entry_and_why() {
        let host = host();
        let fetcher = Arc::new(Named {
            modules: vec![("allow-all.wasm", allow_all().into())],
            fetches: AtomicUsize::new(0),
        });
        let specs = [
            PolicySpec::new(PolicySource::parse("configmap:allow-all.wasm").expect("parses")),
            PolicySpec::new(PolicySource::parse("configmap:dmz-guard.wasm").expect("parses")),
        ];
        let err = ChainLoader::new(&host)
            .with_fetcher(fetcher)
            .load(&specs)
            .err()
            .expect("no such key");
        assert_eq!(err.index, 1);
        assert_eq!(err.label, "configmap:dmz-guard.wasm");
        assert_eq!(
            err.error.to_string(),
            "configmap:dmz-guard.wasm: no such key in the ConfigMap"
        );
    }

    #[test]
    fn a_scheme_without_a_fetcher_is_refused_naming_the_schemes_there_are() {
        let host = host();
        let spec = PolicySpec::new(
            PolicySource::parse("oci://registry.example.net/platform/dmz-guard:v2")
                .expect("parses"),
        );
        let err = ChainLoader::new(&host)
            .load(std::slice::from_ref(&spec))
            .err()
            .expect("no fetcher");
        assert!(matches!(*err.error, LoadError::NoFetcher { .. }), "{err:?}");
        assert_eq!(
            err.error.to_string(),
            "oci://registry.example.net/platform/dmz-guard:v2: nothing here fetches `oci://` \
             modules (known: none)"
        );
        let fetcher = Arc::new(Named {
            modules: Vec::new(),
            fetches: AtomicUsize::new(0),
        });
        let err = ChainLoader::new(&host)
            .with_fetcher(fetcher)
            .load(&[spec])
            .err()
            .expect("no fetcher");
        assert!(
            err.error.to_string().ends_with("(known: configmap:)"),
            "{err}"
        );
    }

    #[test]
    fn files_are_read_once_per_loader() {
        let host = host();
        let dir = std::env::temp_dir().join(format!("nicpolicy-spec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("allow-all.wasm");
        std::fs::write(&path, allow_all()).expect("written");
        let mut loader = ChainLoader::new(&host);
        let spec = PolicySpec::new(PolicySource::File(path.clone()));
        loader.load(std::slice::from_ref(&spec)).expect("loads");
        // Replaced while the loader loads its other chains: they still get the bytes first read.
        std::fs::write(&path, b"not wasm").expect("written");
        loader.load(&[spec]).expect("the same bytes");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
