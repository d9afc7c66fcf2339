//! `oci://` sources for a [`ChainLoader`](nicpolicy_engine::spec::ChainLoader): modules pulled from a
//! registry, or read from the store beside the compiled-module cache.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use super::store::Fetched;
use super::RegistryOptions;
use nicpolicy_engine::error::LoadError;
use nicpolicy_engine::fetch::ModuleFetcher;
use nicpolicy_engine::spec::PolicySource;

/// What marks a registry reference where a file path could stand (`oci://host/repo@sha256:...`).
pub const SCHEME: &str = "oci://";

/// `text` without its leading [`SCHEME`], when it has one.
pub fn reference_of(text: &str) -> Option<&str> {
    text.strip_prefix(SCHEME)
}

/// `text` without a leading [`SCHEME`]: where only a reference can stand, the scheme is
/// optional.
pub fn without_scheme(text: &str) -> &str {
    reference_of(text).unwrap_or(text)
}

/// The module in a registry at `reference` (`host/repo@sha256:...` or `host/repo:tag`, with or
/// without `oci://`) as a chain entry's source, its shape checked now and the module pulled when
/// the chain loads.
///
/// # Errors
/// [`LoadError::Registry`] for a reference that does not parse, naming it.
pub fn source(reference: &str) -> Result<PolicySource, LoadError> {
    let reference = without_scheme(reference);
    check(reference)?;
    Ok(PolicySource::fetched(SCHEME, reference))
}

fn check(reference: &str) -> Result<(), LoadError> {
    super::parse_reference(reference)
        .map(|_| ())
        .map_err(|err| LoadError::Registry(err.to_string()))
}

/// One `oci://` reference a fetcher got: as written, the immutable reference it resolved to,
/// and how it was got (pulled, stored, stored while the registry was unreachable).
#[derive(Clone, Debug)]
pub struct FetchRecord {
    /// The reference as written, without `oci://`.
    pub reference: String,
    /// The immutable (`@sha256:`) reference it resolved to.
    pub immutable: String,
    /// How it was got.
    pub fetched: Fetched,
}

/// The fetcher of `oci://` sources: pulls with the given registry options, through the store
/// under the host's cache directory when it has one (then a digest already stored is not pulled
/// again, and a tag whose registry cannot be reached is served from the store).
#[derive(Debug)]
pub struct OciFetcher {
    options: RegistryOptions,
    cache_dir: Option<PathBuf>,
    records: Mutex<Vec<FetchRecord>>,
}

impl OciFetcher {
    /// A fetcher reaching registries with `options`, storing under `cache_dir` (the host's
    /// [`cache_dir`](nicpolicy_engine::HostConfig::cache_dir)).
    pub fn new(options: RegistryOptions, cache_dir: Option<PathBuf>) -> OciFetcher {
        OciFetcher {
            options,
            cache_dir,
            records: Mutex::new(Vec::new()),
        }
    }

    /// Each reference fetched so far, in order, for callers that tell their user.
    pub fn records(&self) -> Vec<FetchRecord> {
        self.records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl ModuleFetcher for OciFetcher {
    fn scheme(&self) -> &str {
        SCHEME
    }

    fn check(&self, reference: &str) -> Result<(), LoadError> {
        check(reference)
    }

    fn fetch(&self, reference: &str) -> Result<Arc<[u8]>, LoadError> {
        let module = super::fetch_blocking(reference, &self.options, self.cache_dir.as_deref())
            .map_err(|err| LoadError::Registry(err.to_string()))?;
        self.records
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(FetchRecord {
                reference: reference.to_string(),
                immutable: module.immutable,
                fetched: module.fetched,
            });
        Ok(module.bytes.into())
    }
}
