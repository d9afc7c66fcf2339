//! Policies built into the binary.

/// The CAPVCD policy module (`policies/capvcd` built for wasm32), the host's default.
pub const CAPVCD_WASM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/nicpolicy_capvcd.wasm"));
