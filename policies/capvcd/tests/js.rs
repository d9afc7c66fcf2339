//! The JS build (wasm-bindgen, `js` feature) run in Node with wasm-bindgen-test:
//!
//! ```console
//! CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner \
//!   cargo test -p nicpolicy-capvcd --features js --target wasm32-unknown-unknown
//! ```
//!
//! It must decide exactly as the Wasmtime host does on every shared case
//! (`tests/js/parity.json`, kept current by the `js_parity` test of the harness).
#![cfg(all(target_arch = "wasm32", feature = "js"))]

use nicpolicy_capvcd::nicpolicy_js;
use serde_json::Value;
use wasm_bindgen_test::wasm_bindgen_test;

const PARITY: &str = include_str!("../../../tests/js/parity.json");

#[wasm_bindgen_test]
fn decides_like_wasmtime_on_every_shared_case() {
    let cases: Vec<Value> = serde_json::from_str(PARITY).expect("parity file is JSON");
    assert!(cases.len() >= 30, "only {} shared cases", cases.len());
    for case in &cases {
        let output = nicpolicy_js::evaluate_json(&case["request"].to_string());
        let decision: Value = serde_json::from_str(&output).expect("decision is JSON");
        assert_eq!(decision, case["decision"], "case {}", case["case"]);
    }
}

#[wasm_bindgen_test]
fn refuses_bad_settings_with_the_reason() {
    let verdict: Value =
        serde_json::from_str(&nicpolicy_js::validate_settings_json(r#"{"maxNics": 11}"#))
            .expect("verdict is JSON");
    assert_eq!(verdict["valid"], false);
    assert!(verdict["message"]
        .as_str()
        .is_some_and(|m| m.contains("maxNics")));
    let verdict: Value =
        serde_json::from_str(&nicpolicy_js::validate_settings_json(r#"{"maxNics": 6}"#))
            .expect("verdict is JSON");
    assert_eq!(verdict["valid"], true);
}

#[wasm_bindgen_test]
fn unreadable_request_is_an_error_envelope() {
    let output: Value = serde_json::from_str(&nicpolicy_js::evaluate_json("{\"machine\": 3}"))
        .expect("output is JSON");
    assert!(output["error"]
        .as_str()
        .is_some_and(|m| m.contains("could not read the request")));
}

#[wasm_bindgen_test]
fn metadata_names_the_policy() {
    let metadata: Value =
        serde_json::from_str(&nicpolicy_js::metadata_json()).expect("metadata is JSON");
    assert_eq!(metadata["name"], "nicpolicy-capvcd");
    assert_eq!(metadata["abiVersion"], 1);
}
