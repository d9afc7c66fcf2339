//! Policy ABI v1: the names and numbers a policy module and the host agree on.
//!
//! A policy is a core WebAssembly module. The host copies JSON into the module's linear memory
//! and reads JSON back; `docs/abi.md` is the full contract. In short:
//!
//! | export | signature | purpose |
//! |---|---|---|
//! | `memory` | memory | the linear memory the host reads and writes |
//! | `nicpolicy_abi_version` | `() -> i32` | returns [`ABI_VERSION`] |
//! | `nicpolicy_alloc` | `(len: i32) -> i32` | reserves `len` bytes for the input; 0 on failure |
//! | `nicpolicy_evaluate` | `(ptr: i32, len: i32) -> i64` | request JSON in, decision JSON out |
//! | `nicpolicy_validate_settings` | `(ptr: i32, len: i32) -> i64` | settings JSON in, verdict out |
//! | `nicpolicy_evaluate_binary1` (optional) | `(ptr: i32, len: i32) -> i64` | request in the [binary format](crate::binary), decision JSON out |
//! | `nicpolicy_evaluate_binary2` (optional) | `(ptr: i32, len: i32) -> i64` | request in the binary format, decision in the [binary decision format](crate::binary::decision) |
//! | `nicpolicy_evaluate_binary3` (optional) | `(ptr: i32, len: i32) -> i64` | as `binary2`, decision in version 2 of that format (with [sources](crate::source)) |
//! | `nicpolicy_evaluate_binary4` (optional) | `(ptr: i32, len: i32) -> i64` | as `binary3`, the NICs without sources (the violations keep theirs) |
//! | `nicpolicy_backstop` (optional) | `(ptr: i32, len: i32) -> i64` | [backstop](crate::backstop) request JSON in, the policy's structural rules as CEL out |
//!
//! Results are packed as `(ptr << 32) | len` in an `i64`. The only import a module may have is
//! [`LOG_IMPORT_MODULE`]`.`[`LOG_IMPORT_NAME`] `(level: i32, ptr: i32, len: i32)`.
//! Metadata lives in the custom section [`METADATA_SECTION`].

use serde::{Deserialize, Serialize};

/// The ABI version this crate implements.
pub const ABI_VERSION: u32 = 1;
/// Export returning the ABI version.
pub const EXPORT_ABI_VERSION: &str = "nicpolicy_abi_version";
/// Export reserving input memory.
pub const EXPORT_ALLOC: &str = "nicpolicy_alloc";
/// Export evaluating a request.
pub const EXPORT_EVALUATE: &str = "nicpolicy_evaluate";
/// Optional export evaluating a request given in the [binary format](crate::binary), version 1;
/// same result as [`EXPORT_EVALUATE`]. Modules built with
/// [`export_policy!`](crate::export_policy) have it.
pub const EXPORT_EVALUATE_BINARY1: &str = "nicpolicy_evaluate_binary1";
/// Optional export evaluating a request given in the [binary format](crate::binary), version 1,
/// and answering in the [binary decision format](crate::binary::decision), version 1: binary
/// both ways, the same decision as [`EXPORT_EVALUATE`]. Modules built with
/// [`export_policy!`](crate::export_policy) have it.
pub const EXPORT_EVALUATE_BINARY2: &str = "nicpolicy_evaluate_binary2";
/// Optional export like [`EXPORT_EVALUATE_BINARY2`] answering in version 2 of the binary
/// decision format, which carries each NIC's and violation's [source](crate::source). A host
/// that knows it prefers it; an older host calls [`EXPORT_EVALUATE_BINARY2`] of the same
/// module. Modules built with [`export_policy!`](crate::export_policy) have it.
pub const EXPORT_EVALUATE_BINARY3: &str = "nicpolicy_evaluate_binary3";
/// Optional export like [`EXPORT_EVALUATE_BINARY3`] for a host that reads the violations'
/// sources but not the NICs' (the webhook, the controller): the decision is in the same format
/// and the same, except that no NIC carries a source, which the policy then need not build.
/// A host that shows NIC sources (`--explain`, case files that expect them) calls
/// [`EXPORT_EVALUATE_BINARY3`]. Modules built with [`export_policy!`](crate::export_policy)
/// have it.
pub const EXPORT_EVALUATE_BINARY4: &str = "nicpolicy_evaluate_binary4";
/// Optional export answering the policy's structural rules as CEL validations for a
/// ValidatingAdmissionPolicy ([`crate::backstop`]): [`BackstopRequest`](crate::backstop::BackstopRequest)
/// JSON in, [`BackstopOutput`](crate::backstop::BackstopOutput) JSON out. Modules built with
/// [`export_backstop!`](crate::export_backstop) have it; a module without it has no backstop.
pub const EXPORT_BACKSTOP: &str = "nicpolicy_backstop";
/// Export validating settings.
pub const EXPORT_VALIDATE_SETTINGS: &str = "nicpolicy_validate_settings";
/// Export holding the linear memory.
pub const EXPORT_MEMORY: &str = "memory";
/// Module of the one optional import.
pub const LOG_IMPORT_MODULE: &str = "nicpolicy";
/// Name of the one optional import.
pub const LOG_IMPORT_NAME: &str = "log";
/// Custom section holding the policy's [`Metadata`] as JSON.
pub const METADATA_SECTION: &str = "nicpolicy.metadata";

/// Log levels of the `nicpolicy.log` import.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[repr(i32)]
pub enum LogLevel {
    /// Detail for policy authors.
    Debug = 0,
    /// Normal information.
    Info = 1,
    /// Something looks wrong.
    Warn = 2,
    /// Something failed.
    Error = 3,
}

impl LogLevel {
    /// Level for a raw import argument; unknown numbers are treated as `Info`.
    pub fn from_i32(level: i32) -> LogLevel {
        match level {
            0 => LogLevel::Debug,
            2 => LogLevel::Warn,
            3 => LogLevel::Error,
            _ => LogLevel::Info,
        }
    }
}

/// What the `nicpolicy.metadata` custom section holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    /// Policy name, such as `nicpolicy-capvcd`.
    pub name: String,
    /// Policy version (semver).
    pub version: String,
    /// ABI version the module implements.
    pub abi_version: u32,
    /// One line on what the policy enforces.
    #[serde(default)]
    pub description: String,
}

/// Packs a result pointer and length the way the ABI returns them.
pub fn pack(ptr: u32, len: u32) -> u64 {
    (u64::from(ptr) << 32) | u64::from(len)
}

/// Splits a packed result into pointer and length.
pub fn unpack(packed: u64) -> (u32, u32) {
    ((packed >> 32) as u32, packed as u32)
}

/// Builds the metadata section's bytes at compile time (used by
/// [`export_policy!`](crate::export_policy)).
///
/// Refuses, at compile time, text that would need JSON escaping: names, versions and
/// descriptions of policies are plain text.
pub const fn metadata_bytes<const N: usize>(json: &str) -> [u8; N] {
    joined_bytes::<N>(&[json])
}

/// The length of `parts` joined (for the array [`joined_bytes`] fills).
pub const fn joined_len(parts: &[&str]) -> usize {
    let mut len = 0;
    let mut i = 0;
    while i < parts.len() {
        len += parts[i].len();
        i += 1;
    }
    len
}

/// `parts` joined into one array at compile time: a metadata section assembled from pieces
/// that are present or not depending on the crate (used by
/// [`export_policy!`](crate::export_policy)).
pub const fn joined_bytes<const N: usize>(parts: &[&str]) -> [u8; N] {
    assert!(joined_len(parts) == N, "metadata length mismatch");
    let mut out = [0u8; N];
    let mut at = 0;
    let mut part = 0;
    while part < parts.len() {
        let src = parts[part].as_bytes();
        let mut i = 0;
        while i < src.len() {
            out[at] = src[i];
            at += 1;
            i += 1;
        }
        part += 1;
    }
    out
}

/// Checks at compile time that a metadata value needs no JSON escaping.
pub const fn plain_text(value: &str) -> &str {
    let bytes = value.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        assert!(
            b != b'"' && b != b'\\' && b >= 0x20,
            "policy name, version and description must not contain quotes, backslashes or control characters"
        );
        i += 1;
    }
    value
}

/// Exports a policy through ABI v1.
///
/// With typed settings (a type that implements
/// [`PolicySettings`](crate::settings::PolicySettings)), the policy is one function of the
/// request and its settings; the SDK reads the settings (`null` means the defaults), refuses
/// unreadable ones with the reason when the host loads the policy, and never calls the function
/// without them:
///
/// ```
/// use nicpolicy_plugin::{capvcd, Decision, Request};
///
/// fn evaluate(request: &Request, settings: &capvcd::Settings) -> Decision {
///     capvcd::evaluate_with(request, settings)
/// }
///
/// nicpolicy_plugin::export_policy!(evaluate, settings: capvcd::Settings);
/// # fn main() {}
/// ```
///
/// The typed form also defines `pub fn evaluate_request(&Request) -> Decision` beside the
/// policy: the policy as the host runs it, settings read from the request, for native callers
/// and unit tests.
///
/// The hand-written form takes the evaluate function and a settings check of the raw JSON:
///
/// ```
/// use nicpolicy_plugin::{Decision, Request};
///
/// fn evaluate(request: &Request) -> Decision {
///     nicpolicy_plugin::capvcd::evaluate(request)
/// }
///
/// fn validate_settings(settings: &serde_json::Value) -> Result<(), String> {
///     nicpolicy_plugin::capvcd::Settings::parse(settings).map(|_| ())
/// }
///
/// nicpolicy_plugin::export_policy!(evaluate, validate_settings);
/// # fn main() {}
/// ```
///
/// With one argument, every settings value is accepted. The metadata (name, version,
/// description) comes from the policy crate's `Cargo.toml`. The exports exist only when
/// compiling for `wasm32`, so the same crate runs natively under `cargo test`.
///
/// When the policy crate's own `js` feature is on (forwarding to `nicpolicy-plugin/js`), the
/// module exports `evaluate`, `validateSettings` and `metadata` through wasm-bindgen instead, for
/// JavaScript engines; see the `js` module (feature `js`). The ABI v1 build never carries
/// wasm-bindgen imports.
///
/// When its `kubewarden` feature is on (forwarding to `nicpolicy-plugin/kubewarden`), the module
/// is a Kubewarden waPC policy instead: `wapc_init` registers `validate`, `validate_settings`
/// and `protocol_version`, and the `io.kubewarden.metadata` section is written at build time;
/// see the `kubewarden` module (feature `kubewarden`).
#[macro_export]
macro_rules! export_policy {
    ($evaluate:path) => {
        $crate::export_policy!($evaluate, $crate::guest::accept_any_settings);
    };
    ($evaluate:path, settings: $settings:ty) => {
        /// The policy as the host runs it: the request's settings read as the policy's
        /// settings type (unreadable ones denied with the reason), then the policy. For native
        /// callers and unit tests.
        pub fn evaluate_request(request: &$crate::Request) -> $crate::Decision {
            $crate::settings::evaluate::<$settings>(request, $evaluate)
        }

        /// The policy's settings read and checked as its type.
        fn nicpolicy_typed_validate_settings(
            settings: &$crate::settings::Value,
        ) -> ::core::result::Result<(), ::std::string::String> {
            $crate::settings::validate::<$settings>(settings)
        }

        $crate::export_policy!(evaluate_request, nicpolicy_typed_validate_settings);
    };
    ($evaluate:path, $validate_settings:path) => {
        /// The policy's JavaScript entry points (wasm-bindgen), with the `js` feature.
        #[cfg(feature = "js")]
        pub mod nicpolicy_js {
            // The policy's functions are named relative to the crate root.
            #[allow(unused_imports)]
            use super::*;
            use $crate::js::wasm_bindgen::prelude::wasm_bindgen;

            /// Request JSON in, decision (or `{"error": ...}`) JSON out.
            #[wasm_bindgen(js_name = evaluate, wasm_bindgen = $crate::js::wasm_bindgen)]
            pub fn evaluate_json(request: &str) -> String {
                $crate::js::evaluate(request, $evaluate)
            }

            /// Settings JSON in, `{"valid": bool, "message": string}` out.
            #[wasm_bindgen(js_name = validateSettings, wasm_bindgen = $crate::js::wasm_bindgen)]
            pub fn validate_settings_json(settings: &str) -> String {
                $crate::js::validate_settings(settings, $validate_settings)
            }

            /// The metadata JSON (name, version, abiVersion, description).
            #[wasm_bindgen(js_name = metadata, wasm_bindgen = $crate::js::wasm_bindgen)]
            pub fn metadata_json() -> String {
                $crate::js::metadata(
                    env!("CARGO_PKG_NAME"),
                    env!("CARGO_PKG_VERSION"),
                    env!("CARGO_PKG_DESCRIPTION"),
                )
            }
        }

        #[cfg(all(target_arch = "wasm32", feature = "kubewarden", not(feature = "js")))]
        // The waPC exports: an unmangled `wapc_init` and the metadata's link section.
        #[allow(unsafe_code)]
        const _: () = {
            const POLICY: $crate::kubewarden::Policy = $crate::kubewarden::Policy {
                name: env!("CARGO_PKG_NAME"),
                evaluate: $evaluate,
                validate_settings: $validate_settings,
            };

            fn kubewarden_validate(payload: &[u8]) -> $crate::kubewarden::wapc_guest::CallResult {
                $crate::kubewarden::validate(payload, &POLICY)
            }

            fn kubewarden_validate_settings(
                payload: &[u8],
            ) -> $crate::kubewarden::wapc_guest::CallResult {
                $crate::kubewarden::validate_settings(payload, &POLICY)
            }

            #[no_mangle]
            pub extern "C" fn wapc_init() {
                use $crate::kubewarden::wapc_guest::register_function;
                register_function("validate", kubewarden_validate);
                register_function("validate_settings", kubewarden_validate_settings);
                register_function("protocol_version", $crate::kubewarden::protocol_version);
            }

            // Kubewarden's metadata, written at build time so the module needs no
            // `kwctl annotate`; the versions match kubewarden::CLUSTER_API_VERSION and
            // VCD_CLUSTER_API_VERSION, and the test host refuses any other lookup. The
            // annotations come from the policy crate's Cargo.toml; `source` only when it
            // declares a `repository`.
            const KUBEWARDEN_METADATA_HEAD: &str = concat!(
                "{\"protocolVersion\":\"v1\",",
                "\"rules\":[{\"apiGroups\":[\"infrastructure.cluster.x-k8s.io\"],",
                "\"apiVersions\":[\"v1beta3\"],",
                "\"resources\":[\"vcdmachines\",\"vcdmachinetemplates\"],",
                "\"operations\":[\"CREATE\",\"UPDATE\"]}],",
                "\"mutating\":true,\"backgroundAudit\":true,",
                "\"executionMode\":\"kubewarden-wapc\",\"policyType\":\"kubernetes\",",
                "\"contextAwareResources\":[",
                "{\"apiVersion\":\"cluster.x-k8s.io/v1beta1\",\"kind\":\"Cluster\"},",
                "{\"apiVersion\":\"infrastructure.cluster.x-k8s.io/v1beta3\",\"kind\":\"VCDCluster\"}],",
                "\"hostCapabilities\":[\"kubernetes/get_resource\"],",
                "\"annotations\":{",
                "\"io.kubewarden.policy.title\":\"",
                env!("CARGO_PKG_NAME"),
                "\",\"io.kubewarden.policy.version\":\"",
                env!("CARGO_PKG_VERSION"),
                "\",\"io.kubewarden.policy.description\":\"",
                env!("CARGO_PKG_DESCRIPTION"),
                "\",\"io.kubewarden.policy.license\":\"",
                env!("CARGO_PKG_LICENSE"),
                "\""
            );
            const REPOSITORY: &str = $crate::abi::plain_text(env!("CARGO_PKG_REPOSITORY"));
            const KUBEWARDEN_METADATA_PARTS: [&str; 4] = if REPOSITORY.is_empty() {
                [KUBEWARDEN_METADATA_HEAD, "", "", "}}"]
            } else {
                [
                    KUBEWARDEN_METADATA_HEAD,
                    ",\"io.kubewarden.policy.source\":\"",
                    REPOSITORY,
                    "\"}}",
                ]
            };
            const _CHECK: [&str; 4] = [
                $crate::abi::plain_text(env!("CARGO_PKG_NAME")),
                $crate::abi::plain_text(env!("CARGO_PKG_VERSION")),
                $crate::abi::plain_text(env!("CARGO_PKG_DESCRIPTION")),
                $crate::abi::plain_text(env!("CARGO_PKG_LICENSE")),
            ];
            const KUBEWARDEN_METADATA_LEN: usize =
                $crate::abi::joined_len(&KUBEWARDEN_METADATA_PARTS);

            #[link_section = "io.kubewarden.metadata"]
            #[used]
            static KUBEWARDEN_METADATA: [u8; KUBEWARDEN_METADATA_LEN] =
                $crate::abi::joined_bytes::<KUBEWARDEN_METADATA_LEN>(&KUBEWARDEN_METADATA_PARTS);
        };

        #[cfg(all(target_arch = "wasm32", not(feature = "js"), not(feature = "kubewarden")))]
        // The exports are the ABI: unmangled names and raw pointers into linear memory.
        #[allow(unsafe_code)]
        const _: () = {
            // Each call gets a fresh instance: a bump allocator is all it needs.
            #[global_allocator]
            static ALLOCATOR: $crate::guest::BumpAllocator = $crate::guest::BumpAllocator::new();

            #[no_mangle]
            pub extern "C" fn nicpolicy_abi_version() -> u32 {
                $crate::abi::ABI_VERSION
            }

            #[no_mangle]
            pub extern "C" fn nicpolicy_alloc(len: u32) -> u32 {
                $crate::guest::alloc(len)
            }

            #[no_mangle]
            pub extern "C" fn nicpolicy_evaluate(ptr: u32, len: u32) -> u64 {
                // SAFETY: the host wrote `len` bytes at `ptr`, which came from `nicpolicy_alloc`.
                unsafe { $crate::guest::evaluate(ptr, len, $evaluate) }
            }

            #[no_mangle]
            pub extern "C" fn nicpolicy_evaluate_binary1(ptr: u32, len: u32) -> u64 {
                // SAFETY: as above.
                unsafe { $crate::guest::evaluate_binary(ptr, len, $evaluate) }
            }

            #[no_mangle]
            pub extern "C" fn nicpolicy_evaluate_binary2(ptr: u32, len: u32) -> u64 {
                // SAFETY: as above.
                unsafe { $crate::guest::evaluate_binary2(ptr, len, $evaluate) }
            }

            #[no_mangle]
            pub extern "C" fn nicpolicy_evaluate_binary3(ptr: u32, len: u32) -> u64 {
                // SAFETY: as above.
                unsafe { $crate::guest::evaluate_binary3(ptr, len, $evaluate) }
            }

            #[no_mangle]
            pub extern "C" fn nicpolicy_evaluate_binary4(ptr: u32, len: u32) -> u64 {
                // SAFETY: as above.
                unsafe { $crate::guest::evaluate_binary4(ptr, len, $evaluate) }
            }

            #[no_mangle]
            pub extern "C" fn nicpolicy_validate_settings(ptr: u32, len: u32) -> u64 {
                // SAFETY: as above.
                unsafe { $crate::guest::validate_settings(ptr, len, $validate_settings) }
            }

            const METADATA_JSON: &str = concat!(
                "{\"name\":\"",
                env!("CARGO_PKG_NAME"),
                "\",\"version\":\"",
                env!("CARGO_PKG_VERSION"),
                "\",\"abiVersion\":1,\"description\":\"",
                env!("CARGO_PKG_DESCRIPTION"),
                "\"}"
            );
            const _CHECK: [&str; 3] = [
                $crate::abi::plain_text(env!("CARGO_PKG_NAME")),
                $crate::abi::plain_text(env!("CARGO_PKG_VERSION")),
                $crate::abi::plain_text(env!("CARGO_PKG_DESCRIPTION")),
            ];

            #[link_section = "nicpolicy.metadata"]
            #[used]
            static METADATA: [u8; METADATA_JSON.len()] =
                $crate::abi::metadata_bytes::<{ METADATA_JSON.len() }>(METADATA_JSON);
        };
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_round_trips_full_range() {
        for (ptr, len) in [(0, 0), (1, 2), (u32::MAX, u32::MAX), (65_536, 1_048_576)] {
            assert_eq!(unpack(pack(ptr, len)), (ptr, len));
        }
    }

    #[test]
    fn metadata_bytes_copies_text() {
        const JSON: &str = "{\"name\":\"storage-only\"}";
        let bytes = metadata_bytes::<{ JSON.len() }>(JSON);
        assert_eq!(&bytes, JSON.as_bytes());
    }

    #[test]
    fn joined_bytes_joins_the_parts_present() {
        const PARTS: [&str; 4] = ["{\"title\":\"nicpolicy-capvcd\"", "", "", "}"];
        const LEN: usize = joined_len(&PARTS);
        let bytes = joined_bytes::<LEN>(&PARTS);
        assert_eq!(&bytes, b"{\"title\":\"nicpolicy-capvcd\"}");
    }

    #[test]
    #[should_panic(expected = "quotes")]
    fn plain_text_rejects_quotes() {
        plain_text("say \"hi\"");
    }
}
