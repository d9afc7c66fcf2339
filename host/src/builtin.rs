//! Policies built into the binary: every crate under `policies/`, compiled to wasm32.

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

/// The built-in policy called `name` (its directory under `policies/`).
pub fn get(name: &str) -> Option<&'static BuiltinPolicy> {
    POLICIES.iter().find(|p| p.name == name)
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
        assert!(capvcd.kubewarden.is_some_and(|wasm| wasm != capvcd.wasm));
    }
}
