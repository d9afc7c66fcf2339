//! `policies/nic-limit-wat`: a policy written in WebAssembly text from docs/abi.md alone,
//! compiled here with the `wat` crate and run through the host against its case suite.

use std::path::{Path, PathBuf};

use nicpolicy::cases::{discover, Case};
use nicpolicy::inspect::inspect;
use nicpolicy::{EvalError, LoadError, Policy, PolicyOptions};
use nicpolicy_plugin::abi::{self, LogLevel};
use nicpolicy_plugin::Reason;
use nicpolicy_tests::{assert_suite_passes, host};
use serde_json::json;

/// Fewest cases the suite may have.
const MIN_CASES: usize = 8;

fn wasm() -> Vec<u8> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/nic-limit-wat/nic-limit.wat");
    wat::parse_file(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
}

fn load() -> Policy {
    host(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("wat-cache"))
        .load(&wasm(), PolicyOptions::default())
        .expect("nic-limit loads")
}

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("cases/nic-limit")
}

#[test]
fn every_nic_limit_case_passes() {
    let policy = load();
    assert_suite_passes(&policy, &cases_dir(), MIN_CASES);
}

#[test]
fn the_suite_covers_settings_refusals_and_templates() {
    let cases: Vec<Case> = discover(&[cases_dir()])
        .expect("case directory lists")
        .iter()
        .map(|path| Case::load(path).expect("case loads"))
        .collect();
    let rejected = cases
        .iter()
        .filter(|c| c.expect.settings_rejected.is_some())
        .count();
    assert!(rejected >= 3, "only {rejected} settingsRejected cases");
    assert!(cases.iter().any(
        |c| c.request.kind.as_str() == "VCDMachineTemplate" && c.expect.allowed == Some(false)
    ));
}

#[test]
fn the_only_import_is_nicpolicy_log_and_metadata_is_present() {
    let info = inspect(&wasm()).expect("module reads");
    info.check_abi().expect("ABI v1");
    let imports: Vec<(&str, &str, String)> = info
        .imports
        .iter()
        .map(|i| (i.module.as_str(), i.name.as_str(), i.ty.to_string()))
        .collect();
    assert_eq!(
        imports,
        [(
            abi::LOG_IMPORT_MODULE,
            abi::LOG_IMPORT_NAME,
            "func (i32, i32, i32) -> ()".to_string()
        )]
    );
    let meta = info.metadata.expect("nicpolicy.metadata section");
    assert_eq!(meta.name, "nic-limit");
    assert_eq!(meta.version, "1.0.0");
    assert_eq!(meta.abi_version, abi::ABI_VERSION);
}

#[test]
fn each_evaluation_logs_the_count() {
    let policy = load();
    let case = Case::load(&cases_dir().join("02-four-nics-at-default-limit.yaml")).expect("case");
    let evaluation = policy.evaluate(&case.request).expect("evaluates");
    assert_eq!(evaluation.logs.len(), 1, "{:?}", evaluation.logs);
    assert_eq!(evaluation.logs[0].level, LogLevel::Info);
    assert_eq!(
        evaluation.logs[0].message,
        "nic-limit: 4 NICs requested, maxNics 4"
    );
}

#[test]
fn pretty_printed_input_decides_like_compact_input() {
    let policy = load();
    let case =
        Case::load(&cases_dir().join("10-escaped-names-over-limit.yaml")).expect("case loads");
    let policy = policy
        .with_settings(case.settings.clone())
        .expect("settings accepted");
    let compact = policy.evaluate(&case.request).expect("evaluates").decision;
    let mut request = case.request.clone();
    request.settings = case.settings.clone();
    let pretty = serde_json::to_vec_pretty(&request).expect("encodes");
    let decision = policy.evaluate_json(&pretty).expect("evaluates").decision;
    assert_eq!(decision, compact);
    assert_eq!(decision.violations.len(), 1);
    assert_eq!(decision.violations[0].reason, Reason::TooMany);
}

/// Malformed or unexpected input gets an error envelope (`EvalError::Policy`), never a trap.
#[test]
fn malformed_requests_get_error_envelopes() {
    let policy = load();
    let deep = format!(
        r#"{{"kind":"VCDMachine","machine":{{"labels":{{"nesting":{}{}}},"extraOvdcNetworks":["storage-net"]}}}}"#,
        "[".repeat(200_000),
        "]".repeat(200_000)
    );
    for (input, wanted) in [
        ("", "not valid JSON"),
        ("[]", "not valid JSON"),
        (r#"{"kind":"VCDMachine""#, "not valid JSON"),
        (r#"{"kind":"VCDMachine"}"#, "has no machine object"),
        (r#"{"machine":"prod-eu1-md-0"}"#, "has no machine object"),
        (
            r#"{"machine":{"extraOvdcNetworks":["storage-net"#,
            "not valid JSON",
        ),
        (
            r#"{"machine":{"extraOvdcNetworks":["storage-net\"]}}"#,
            "not valid JSON",
        ),
        (
            r#"{"machine":{"extraOvdcNetworks":["storage-net",7]}}"#,
            "must be an array of strings",
        ),
        (
            r#"{"machine":{"extraOvdcNetworks":"storage-net"}}"#,
            "must be an array of strings",
        ),
        (
            r#"{"machine":{"extraOvdcNetworks":[]},"settings":{"maxNics":12}}"#,
            "not an integer from 1 to 10",
        ),
    ] {
        match policy.evaluate_json(input.as_bytes()) {
            Err(EvalError::Policy(message)) => {
                assert!(message.contains(wanted), "{input:?}: {message}")
            }
            other => panic!("{input:?}: expected a policy error, got {other:?}"),
        }
    }
    // Deep nesting elsewhere is skipped without recursion.
    let decision = policy
        .evaluate_json(deep.as_bytes())
        .expect("deep nesting is skipped")
        .decision;
    assert!(decision.allowed);
}

#[test]
fn settings_are_checked_when_the_policy_loads() {
    let policy = load();
    for (settings, accepted) in [
        (json!(null), true),
        (json!({}), true),
        (json!({"maxNics": 1}), true),
        (json!({"maxNics": 10}), true),
        (json!({"maxNics": null}), true),
        (json!({"maxNics": -3}), false),
        (json!({"maxNics": 1e1}), false),
        // 2^32 + 1: would read as 1 if the digits wrapped around.
        (json!({"maxNics": 4_294_967_297u64}), false),
        (json!({"maxNics": true}), false),
        (json!({"maxNics": [4]}), false),
        (json!({"max\"Nics": 4}), false),
        (json!(4), false),
        (json!("maxNics=4"), false),
    ] {
        let verdict = policy.validate_settings(&settings).expect("runs");
        assert_eq!(verdict.is_ok(), accepted, "{settings}: {verdict:?}");
    }
    // The quoted key keeps its escapes, and the message stays valid JSON.
    match policy.with_settings(json!({"max\"Nics\n": 4})) {
        Err(LoadError::Settings(message)) => {
            assert_eq!(
                message,
                r#"unknown setting "max\"Nics\n": nic-limit takes only maxNics"#
            )
        }
        other => panic!("expected a refusal, got {:?}", other.map(|p| p.name())),
    }
}
