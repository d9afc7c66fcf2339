//! Modules that come from somewhere other than a file or the caller's bytes: a [`ModuleFetcher`]
//! gets the module of a [`PolicySource::Fetched`] reference when a [`ChainLoader`] loads it.
//! The loader knows no transport of its own; whoever builds it hands it the fetchers its
//! program has (the `nicpolicy` binary: `builtin:` and `oci://`, see `nicpolicy::sources`).
//!
//! ```
//! use std::sync::Arc;
//! use nicpolicy_engine::{fetch::ModuleFetcher, Host, HostConfig, LoadError, PolicySource, PolicySpec};
//!
//! /// Modules kept in memory by name, as a ConfigMap or a test would hold them.
//! struct Named(Vec<(&'static str, Arc<[u8]>)>);
//!
//! impl ModuleFetcher for Named {
//!     fn scheme(&self) -> &str {
//!         "configmap:"
//!     }
//!     fn fetch(&self, reference: &str) -> Result<Arc<[u8]>, LoadError> {
//!         self.0
//!             .iter()
//!             .find(|(name, _)| *name == reference)
//!             .map(|(_, bytes)| bytes.clone())
//!             .ok_or_else(|| LoadError::Fetch {
//!                 module: format!("configmap:{reference}"),
//!                 reason: "no such key".to_string(),
//!             })
//!     }
//! }
//!
//! # fn main() -> anyhow::Result<()> {
//! let host = Host::new(HostConfig::default())?;
//! let mut loader = nicpolicy_engine::ChainLoader::new(&host).with_fetcher(Arc::new(Named(vec![])));
//! let spec = PolicySpec::new(PolicySource::parse("configmap:dmz-guard.wasm")?);
//! // No such key: the loader says which entry and why.
//! assert!(loader.load(&[spec]).is_err());
//! # Ok(())
//! # }
//! ```
//!
//! [`PolicySource::Fetched`]: crate::spec::PolicySource::Fetched
//! [`ChainLoader`]: crate::spec::ChainLoader

use std::sync::Arc;

use crate::error::LoadError;

/// Gets the modules of one scheme of reference (`oci://`, `builtin:`, ...).
///
/// A loader calls [`ModuleFetcher::fetch`] once per reference and keeps the bytes, so every
/// chain it loads gets the same module for the same reference, as it does for a file.
pub trait ModuleFetcher: Send + Sync {
    /// The prefix of its references, as written: `oci://`, `builtin:`.
    fn scheme(&self) -> &str;

    /// Checks a reference's shape without fetching anything, where a configuration or a
    /// command line is read, so that a typo is reported beside the field that holds it. Accepts
    /// everything unless the fetcher says otherwise.
    ///
    /// # Errors
    /// A [`LoadError`] saying what is wrong with `reference`.
    fn check(&self, reference: &str) -> Result<(), LoadError> {
        let _ = reference;
        Ok(())
    }

    /// The module at `reference` (written without the scheme).
    ///
    /// # Errors
    /// A [`LoadError`] naming the reference and why it could not be got.
    fn fetch(&self, reference: &str) -> Result<Arc<[u8]>, LoadError>;
}

/// The scheme at the start of `text` and the rest: `oci://host/repo@sha256:...` gives
/// `("oci://", "host/repo@sha256:...")`, `builtin:capvcd` gives `("builtin:", "capvcd")`. A
/// scheme is a letter and then at least one letter, digit, `+`, `-` or `.` (so a Windows drive,
/// `C:\`, is a path), followed by `:`, or by `://` where the URL form is used.
pub fn split_scheme(text: &str) -> Option<(&str, &str)> {
    let colon = text.find(':')?;
    let name = &text[..colon];
    let mut chars = name.chars();
    let first = chars.next()?;
    if name.len() < 2
        || !first.is_ascii_alphabetic()
        || !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    {
        return None;
    }
    let end = if text[colon..].starts_with("://") {
        colon + 3
    } else {
        colon + 1
    };
    let rest = &text[end..];
    (!rest.is_empty()).then(|| (&text[..end], rest))
}

#[cfg(test)]
mod tests {
    use super::split_scheme;

    #[test]
    fn schemes_are_split_and_paths_are_not() {
        assert_eq!(
            split_scheme("oci://registry.example.net/platform/dmz-guard:v2"),
            Some(("oci://", "registry.example.net/platform/dmz-guard:v2"))
        );
        assert_eq!(split_scheme("builtin:capvcd"), Some(("builtin:", "capvcd")));
        assert_eq!(split_scheme("policies/dmz-guard.wasm"), None);
        assert_eq!(split_scheme("C:\\policies\\dmz-guard.wasm"), None);
        assert_eq!(split_scheme("./site:v2.wasm"), None);
        assert_eq!(split_scheme("builtin:"), None);
        assert_eq!(split_scheme(":capvcd"), None);
    }
}
