//! The decisions the JS build must reproduce: every CAPVCD case's request and the decision the
//! Wasmtime host makes for it, kept in `tests/js/parity.json`. The wasm-bindgen tests (in
//! Node) and `examples/js/check-parity.mjs` compare the JS build against this file; this test
//! keeps the file equal to what Wasmtime decides now. Regenerate it with
//! `NICPOLICY_BLESS=1 cargo test -p nicpolicy-tests --test js_parity`.

use std::path::{Path, PathBuf};

use nicpolicy::{builtin, PolicyOptions};
use nicpolicy_tests::{decided_cases, host};
use serde_json::{json, Value};

#[test]
fn parity_file_matches_what_wasmtime_decides() {
    let host = host(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("parity-cache"));
    let policy = host
        .load(builtin::CAPVCD_WASM, PolicyOptions::default())
        .expect("CAPVCD policy loads");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let entries: Vec<Value> = decided_cases(&policy, &root.join("cases/capvcd"))
        .into_iter()
        .map(|d| json!({"case": d.case.name(), "request": d.request, "decision": d.decision}))
        .collect();
    assert!(entries.len() >= 30, "only {} shared cases", entries.len());
    let expected = serde_json::to_string_pretty(&Value::Array(entries)).expect("JSON") + "\n";
    let file = root.join("js/parity.json");
    if std::env::var_os("NICPOLICY_BLESS").is_some() {
        std::fs::write(&file, &expected).expect("write parity file");
        return;
    }
    let committed = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(
        committed == expected,
        "{} is out of date; regenerate it with NICPOLICY_BLESS=1 cargo test -p nicpolicy-tests --test js_parity",
        file.display()
    );
}
