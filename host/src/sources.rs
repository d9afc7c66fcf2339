//! The module sources this build of nicpolicy reads, and the loader that reads them all: files
//! and bytes (the loader's own), `builtin:NAME` ([`crate::builtin::Builtins`], feature
//! `builtin`) and `oci://REFERENCE` ([`nicpolicy_oci::fetcher::OciFetcher`], feature `oci`). The
//! CLI, the served configuration and the controller load through [`Sources::loader`].
//!
//! ```no_run
//! use nicpolicy::{sources, Host, HostConfig, PolicySpec};
//!
//! # fn main() -> anyhow::Result<()> {
//! let host = Host::new(HostConfig::default())?;
//! let chain = sources::Sources::new(&host).loader(&host).load(&[
//!     PolicySpec::new(sources::parse("builtin:capvcd")?),
//!     PolicySpec::new(sources::parse("policies/dmz-guard.wasm")?),
//! ])?;
//! println!("loaded {}", chain.name());
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;

use nicpolicy_engine::engine::Host;
use nicpolicy_engine::error::LoadError;
use nicpolicy_engine::fetch::{split_scheme, ModuleFetcher};
use nicpolicy_engine::spec::{ChainLoader, PolicySource};

/// `oci://REFERENCE` for a module in a registry, `builtin:NAME` for a built-in policy, anything
/// else a file path (a path that looks like another scheme, `site:v2.wasm`, too). The reference
/// is checked now, so a typo is reported where it was written.
///
/// # Errors
/// [`LoadError::UnknownBuiltin`] for a `builtin:` name no built-in policy has (always, in a
/// build without the `builtin` feature); [`LoadError::Registry`] for a registry reference that
/// does not parse (always, in a build without the `oci` feature).
pub fn parse(text: &str) -> Result<PolicySource, LoadError> {
    match split_scheme(text) {
        Some((scheme, reference)) if scheme == BUILTIN => builtin(reference),
        Some((scheme, reference)) if scheme == OCI => oci(reference),
        _ => Ok(PolicySource::File(text.into())),
    }
}

const BUILTIN: &str = "builtin:";
const OCI: &str = "oci://";

/// `text` without a leading `oci://`: where only a registry reference can stand, the scheme is
/// optional.
pub fn without_oci_scheme(text: &str) -> &str {
    text.strip_prefix(OCI).unwrap_or(text)
}

/// The built-in policy called `name`.
///
/// # Errors
/// [`LoadError::UnknownBuiltin`], listing the names there are.
pub fn builtin(name: &str) -> Result<PolicySource, LoadError> {
    #[cfg(feature = "builtin")]
    return crate::builtin::get_or_list(name).map(crate::builtin::BuiltinPolicy::source);
    #[cfg(not(feature = "builtin"))]
    return Err(LoadError::UnknownBuiltin {
        name: name.to_string(),
        known: "none (built without the `builtin` feature)".to_string(),
    });
}

/// The module in a registry at `reference` (`host/repo@sha256:...` or `host/repo:tag`, with or
/// without `oci://`), its shape checked now and the module pulled when the chain loads.
///
/// # Errors
/// [`LoadError::Registry`] for a reference that does not parse, naming it (always, in a build
/// without the `oci` feature).
pub fn oci(reference: &str) -> Result<PolicySource, LoadError> {
    #[cfg(feature = "oci")]
    return nicpolicy_oci::fetcher::source(reference);
    #[cfg(not(feature = "oci"))]
    return Err(LoadError::Registry(format!(
        "{}: this build of nicpolicy has no OCI registry support (feature oci)",
        without_oci_scheme(reference)
    )));
}

/// The fetchers of one load (or of several loads that share what they fetched): every scheme
/// this build reads.
#[derive(Clone)]
pub struct Sources {
    #[cfg(feature = "oci")]
    oci: Arc<nicpolicy_oci::fetcher::OciFetcher>,
    fetchers: Vec<Arc<dyn ModuleFetcher>>,
}

impl Sources {
    /// Every scheme this build reads, registries reached with the default options and modules
    /// stored under `host`'s cache directory.
    pub fn new(host: &Host) -> Sources {
        #[cfg(feature = "oci")]
        return Sources::with_registry(host, nicpolicy_oci::RegistryOptions::default());
        #[cfg(not(feature = "oci"))]
        {
            let _ = host;
            Sources {
                fetchers: Sources::local(),
            }
        }
    }

    /// The fetchers that need no network: the built-in policies.
    fn local() -> Vec<Arc<dyn ModuleFetcher>> {
        #[cfg(feature = "builtin")]
        return vec![Arc::new(crate::builtin::Builtins)];
        #[cfg(not(feature = "builtin"))]
        return Vec::new();
    }

    #[cfg(feature = "oci")]
    fn with_oci(oci: nicpolicy_oci::fetcher::OciFetcher) -> Sources {
        let oci = Arc::new(oci);
        let mut fetchers = Sources::local();
        fetchers.push(oci.clone());
        Sources { oci, fetchers }
    }

    /// These sources reaching registries with `options` (modules stored under `host`'s cache
    /// directory).
    #[cfg(feature = "oci")]
    pub fn with_registry(host: &Host, options: nicpolicy_oci::RegistryOptions) -> Sources {
        Sources::with_oci(nicpolicy_oci::fetcher::OciFetcher::new(
            options,
            host.config().cache_dir.clone(),
        ))
    }

    /// A loader for `host` that fetches with these sources.
    pub fn loader<'h>(&self, host: &'h Host) -> ChainLoader<'h> {
        self.fetchers
            .iter()
            .fold(ChainLoader::new(host), |loader, fetcher| {
                loader.with_fetcher(fetcher.clone())
            })
    }

    /// Each `oci://` reference fetched so far, with the immutable reference it resolved to and
    /// how it was got, for callers that tell their user.
    #[cfg(feature = "oci")]
    pub fn fetched(&self) -> Vec<nicpolicy_oci::fetcher::FetchRecord> {
        self.oci.records()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_that_look_like_a_scheme_stay_files() {
        assert_eq!(
            parse("site:v2.wasm").expect("a path"),
            PolicySource::File("site:v2.wasm".into())
        );
        assert_eq!(
            parse("policies/dmz-guard.wasm").expect("a path"),
            PolicySource::File("policies/dmz-guard.wasm".into())
        );
    }

    #[cfg(feature = "builtin")]
    #[test]
    fn builtin_names_are_checked_as_they_are_read() {
        assert_eq!(
            parse("builtin:capvcd").expect("built in").label(),
            "builtin:capvcd"
        );
        let err = parse("builtin:capvdc").expect_err("no such policy");
        assert!(err.to_string().contains("capvcd"), "{err}");
    }
}
