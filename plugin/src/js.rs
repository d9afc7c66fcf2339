//! The JavaScript build: the same policy function exported through wasm-bindgen.
//!
//! [`export_policy!`](crate::export_policy) generates a `nicpolicy_js` module in the policy
//! crate when its `js` feature is on. From JavaScript (after `wasm-bindgen --target nodejs` or
//! `--target web`):
//!
//! ```js
//! const policy = require("./pkg/nicpolicy_capvcd.js");
//! const decision = JSON.parse(policy.evaluate(JSON.stringify(request)));
//! ```
//!
//! Inputs and outputs are the JSON of ABI v1 (`docs/abi.md`), so a JS engine and the Wasmtime
//! host see the same decisions.

use serde_json::Value;

use crate::abi::{Metadata, ABI_VERSION};
use crate::guest;
use crate::schema::{Decision, Request};

pub use wasm_bindgen;

fn text(bytes: Vec<u8>) -> String {
    // serde_json writes UTF-8; the fallback only guards the conversion.
    String::from_utf8(bytes).unwrap_or_else(|_| r#"{"error":"output is not UTF-8"}"#.to_string())
}

/// Evaluates a request given as JSON text.
pub fn evaluate(request: &str, policy: fn(&Request) -> Decision) -> String {
    text(guest::evaluate_json(request.as_bytes(), policy))
}

/// Validates settings given as JSON text.
pub fn validate_settings(settings: &str, check: fn(&Value) -> Result<(), String>) -> String {
    text(guest::validate_settings_json(settings.as_bytes(), check))
}

/// The metadata as JSON text.
pub fn metadata(name: &str, version: &str, description: &str) -> String {
    let metadata = Metadata {
        name: name.to_string(),
        version: version.to_string(),
        abi_version: ABI_VERSION,
        description: description.to_string(),
    };
    serde_json::to_string(&metadata).unwrap_or_default()
}
