//! Policies built into the binary: every crate under `policies/`, compiled to wasm32 by
//! `build.rs` (feature `builtin`).

use crate::error::LoadError;

/// A policy module embedded in the binary.
#[derive(Clone, Copy, Debug)]
pub struct BuiltinPolicy {
    /// Directory name under `policies/`, such as `capvcd`.
    pub name: &'static str,
    /// Cargo package name, such as `nicpolicy-capvcd`.
    pub package: &'static str,
    /// The module.
    pub wasm: &'static [u8],
}

include!(concat!(env!("OUT_DIR"), "/builtin_policies.rs"));

/// The CAPVCD policy module (`policies/capvcd`), the host's default.
pub const CAPVCD_WASM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/nicpolicy_capvcd.wasm"));

/// The CAPVCD policy (`policies/capvcd`), the default wherever no policy is named.
pub static CAPVCD: BuiltinPolicy = BuiltinPolicy {
    name: "capvcd",
    package: "nicpolicy-capvcd",
    wasm: CAPVCD_WASM,
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

#[cfg(test)]
mod tests {
    #[test]
    fn capvcd_is_built_in() {
        let capvcd = super::get("capvcd").expect("built in");
        assert_eq!(capvcd.package, "nicpolicy-capvcd");
        assert_eq!(capvcd.wasm, super::CAPVCD_WASM);
    }
}
