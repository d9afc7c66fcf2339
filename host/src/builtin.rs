//! Policies built into the binary: every crate under `policies/`, compiled to wasm32 by
//! `build.rs` (feature `builtin`).

use std::sync::Arc;

use nicpolicy_engine::error::LoadError;
use nicpolicy_engine::fetch::ModuleFetcher;
use nicpolicy_engine::spec::PolicySource;

/// A policy module embedded in the binary.
#[derive(Clone, Copy, Debug)]
pub struct BuiltinPolicy {
    /// Directory name under `policies/`, such as `capvcd`.
    pub name: &'static str,
    /// Cargo package name, such as `nicpolicy-capvcd`.
    pub package: &'static str,
    /// The module (ABI v1).
    pub wasm: &'static [u8],
    /// The same policy built for Kubewarden (waPC), when the crate has a `kubewarden` feature.
    pub kubewarden: Option<&'static [u8]>,
}

include!(concat!(env!("OUT_DIR"), "/builtin_policies.rs"));

/// The CAPVCD policy module (`policies/capvcd`), the host's default.
pub const CAPVCD_WASM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/nicpolicy_capvcd.wasm"));

/// The CAPVCD policy (`policies/capvcd`), the default wherever no policy is named.
pub static CAPVCD: BuiltinPolicy = BuiltinPolicy {
    name: "capvcd",
    package: "nicpolicy-capvcd",
    wasm: CAPVCD_WASM,
    kubewarden: Some(include_bytes!(concat!(
        env!("OUT_DIR"),
        "/nicpolicy_capvcd.kubewarden.wasm"
    ))),
};

/// The built-in policy called `name` (its directory under `policies/`).
pub fn get(name: &str) -> Option<&'static BuiltinPolicy> {
    POLICIES.iter().find(|p| p.name == name)
}

/// The built-in policy called `name`, or an error that lists the names there are.
///
/// # Errors
/// [`LoadError::UnknownBuiltin`] when no built-in policy has this name.
pub fn get_or_list(name: &str) -> Result<&'static BuiltinPolicy, LoadError> {
    get(name).ok_or_else(|| LoadError::UnknownBuiltin {
        name: name.to_string(),
        known: names().join(", "),
    })
}

/// Names of the built-in policies.
pub fn names() -> Vec<&'static str> {
    POLICIES.iter().map(|p| p.name).collect()
}

/// What marks a built-in policy where a module can stand (`builtin:capvcd`).
pub const SCHEME: &str = "builtin:";

impl BuiltinPolicy {
    /// This policy as a chain entry's source (`builtin:NAME`), fetched by [`Builtins`].
    pub fn source(&self) -> PolicySource {
        PolicySource::fetched(SCHEME, self.name)
    }
}

/// The fetcher of `builtin:NAME` sources: the modules embedded in this binary.
#[derive(Clone, Copy, Debug, Default)]
pub struct Builtins;

impl ModuleFetcher for Builtins {
    fn scheme(&self) -> &str {
        SCHEME
    }

    fn check(&self, reference: &str) -> Result<(), LoadError> {
        get_or_list(reference).map(|_| ())
    }

    fn fetch(&self, reference: &str) -> Result<Arc<[u8]>, LoadError> {
        get_or_list(reference).map(|policy| Arc::from(policy.wasm))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn capvcd_is_built_in() {
        let capvcd = super::get("capvcd").expect("built in");
        assert_eq!(capvcd.package, "nicpolicy-capvcd");
        assert_eq!(capvcd.wasm, super::CAPVCD_WASM);
        assert!(capvcd.kubewarden.is_some_and(|wasm| wasm != capvcd.wasm));
    }
}
