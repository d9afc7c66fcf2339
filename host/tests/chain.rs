//! Chains of the built-in CAPVCD policy with hand-written modules: how a chain combines,
//! attributes and reports its policies' decisions, and how it fails.

mod common;

use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use nicpolicy::chain::*;
use nicpolicy::mode::{Mode, AUDIT_PREFIX};
use nicpolicy::plugin::abi::pack;
use nicpolicy::plugin::{Decision, Origin, Reason, Request, Source};
use nicpolicy::{builtin, Limits, LoadError, Policy, PolicyOptions, RequestFiles};
use serde_json::json;

use common::host;

fn capvcd() -> Policy {
    static CAPVCD: OnceLock<Policy> = OnceLock::new();
    CAPVCD
        .get_or_init(|| {
            host()
                .load(builtin::CAPVCD_WASM, PolicyOptions::default())
                .expect("CAPVCD policy loads")
        })
        .clone()
}

/// How a test module's `nicpolicy_evaluate` ends.
enum Ends {
    /// Returns this JSON.
    Returning(&'static str),
    /// Traps.
    Trapping,
}

/// An ABI v1 module called `name` that logs its whole input, then returns a fixed output or
/// traps. The log line shows the test what request the policy saw.
fn module(name: &str, ends: Ends) -> Policy {
    const OUTPUT_AT: u32 = 64;
    let (output, body) = match ends {
        Ends::Returning(json) => (
            json,
            format!("i64.const {}", pack(OUTPUT_AT, json.len() as u32)),
        ),
        Ends::Trapping => ("", "unreachable".to_string()),
    };
    let escape = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    let wat = format!(
        r#"(module
  (import "nicpolicy" "log" (func $log (param i32 i32 i32)))
  (memory (export "memory") 2)
  (global $heap (mut i32) (i32.const 4096))
  (data (i32.const 16) "{{\"valid\":true}}")
  (data (i32.const {OUTPUT_AT}) "{output}")
  (func (export "nicpolicy_abi_version") (result i32) i32.const 1)
  ;; Test requests are a few KiB: the second page holds them.
  (func (export "nicpolicy_alloc") (param $len i32) (result i32)
(local $p i32)
(local.set $p (global.get $heap))
(global.set $heap (i32.add (local.get $p) (local.get $len)))
(local.get $p))
  (func (export "nicpolicy_validate_settings") (param i32 i32) (result i64)
i64.const {valid})
  (func (export "nicpolicy_evaluate") (param $ptr i32) (param $len i32) (result i64)
(call $log (i32.const 1) (local.get $ptr) (local.get $len))
{body})
  (@custom "nicpolicy.metadata" "{{\"name\":\"{name}\",\"version\":\"1.0.0\",\"abiVersion\":1}}")
)"#,
        output = escape(output),
        valid = pack(16, 14),
    );
    let wasm = wat::parse_str(&wat).unwrap_or_else(|err| panic!("{err}\n{wat}"));
    host()
        .load(&wasm, PolicyOptions::default())
        .expect("test module loads")
}

/// Denies listing workload-net second, and warns.
fn dmz_guard() -> Policy {
    module(
        "dmz-guard",
        Ends::Returning(
            r#"{"allowed":false,"violations":[{"field":"spec.extraOvdcNetworks[1]","reason":"Forbidden","message":"workload-net is reserved for tenants"}],"warnings":["ext-dmz-net is being retired"]}"#,
        ),
    )
}

/// Allows, writing backup-net after the example's extra networks.
fn backup_defaults() -> Policy {
    module(
        "backup-defaults",
        Ends::Returning(
            r#"{"allowed":true,"extraOvdcNetworks":["storage-net","workload-net","backup-net"]}"#,
        ),
    )
}

/// The example worker: NIC 0 on mgmt-net, extras storage-net and workload-net.
fn request() -> Request {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    RequestFiles {
        cluster: Some(&examples.join("cluster.yaml")),
        machine: Some(&examples.join("machine.yaml")),
        ..RequestFiles::default()
    }
    .build()
    .expect("example request builds")
}

fn networks(decision: &Decision) -> Vec<&str> {
    decision.nics.iter().map(|n| n.network.as_str()).collect()
}

#[test]
fn sources_name_the_policy_behind_each_nic_and_violation() {
    // backup-defaults reports no sources (a module from before them) and writes
    // backup-net; the CAPVCD policy plans every NIC from the list it is given.
    let chain = PolicyChain::new(backup_defaults())
        .then(dmz_guard())
        .then(capvcd());
    let decision = chain.evaluate(&request()).expect("evaluates").decision;
    let sources: Vec<&Source> = decision
        .nics
        .iter()
        .map(|nic| nic.source.as_deref().expect("every NIC has a source"))
        .collect();
    assert_eq!(sources[0].origin, Some(Origin::ClusterNetwork));
    assert_eq!(sources[0].policy.as_deref(), Some("nicpolicy-capvcd"));
    // The machine's own networks: planned by the CAPVCD policy.
    assert_eq!(sources[1].origin, Some(Origin::Machine));
    assert_eq!(
        sources[1].field.as_deref(),
        Some("spec.extraOvdcNetworks[0]")
    );
    assert_eq!(sources[2].policy.as_deref(), Some("nicpolicy-capvcd"));
    // backup-net was written by backup-defaults: its NIC is that policy's, at the field
    // where the entry sits now.
    assert_eq!(decision.nics[3].network, "backup-net");
    assert_eq!(sources[3].policy.as_deref(), Some("backup-defaults"));
    assert_eq!(sources[3].rule, None);
    assert_eq!(
        sources[3].field.as_deref(),
        Some("spec.extraOvdcNetworks[2]")
    );
    let violation = &decision.violations[0];
    let source = violation.source.as_ref().expect("stamped");
    assert_eq!(source.policy.as_deref(), Some("dmz-guard"));
    assert_eq!(source.rule, None, "the module names no rule");
}

#[test]
fn without_nic_sources_the_decision_is_the_same_but_for_the_nics_sources() {
    // The CAPVCD policy is asked through nicpolicy_evaluate_binary4; the hand-written
    // modules have no such export, and their NICs' sources are dropped by the host.
    let chain = || {
        PolicyChain::new(backup_defaults())
            .then(dmz_guard())
            .then(capvcd())
    };
    let full = chain().evaluate(&request()).expect("evaluates");
    let lean_chain = chain().with_nic_sources(false);
    assert!(!lean_chain.nic_sources());
    let lean = lean_chain.evaluate(&request()).expect("evaluates");
    assert!(lean.decision.nics.iter().all(|nic| nic.source.is_none()));
    assert!(full.decision.nics.iter().all(|nic| nic.source.is_some()));
    let mut stripped = full.decision.clone();
    for nic in &mut stripped.nics {
        nic.source = None;
    }
    assert_eq!(lean.decision, stripped);
    // The violations keep their sources, with the policy that found them.
    assert!(!lean.decision.violations.is_empty());
    assert_eq!(lean.decision.violations, full.decision.violations);
    // Each step's decision too.
    for step in &lean.steps {
        assert!(step
            .evaluation
            .decision
            .nics
            .iter()
            .all(|n| n.source.is_none()));
    }
}

#[test]
fn chain_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<PolicyChain>();
    check::<ChainError>();
}

#[test]
fn a_chain_of_one_is_the_policy() {
    let request = request();
    let mut alone = capvcd().evaluate(&request).expect("evaluates").decision;
    let chained = PolicyChain::new(capvcd())
        .evaluate(&request)
        .expect("evaluates");
    // The same decision; the chain names the policy in each source.
    for nic in &mut alone.nics {
        let source = nic
            .source
            .as_mut()
            .expect("the SDK names every NIC's source");
        source.policy = Some("nicpolicy-capvcd".into());
    }
    assert_eq!(chained.decision, alone);
    assert_eq!(chained.steps.len(), 1);
    assert_eq!(PolicyChain::new(capvcd()).name(), "nicpolicy-capvcd");
}

#[test]
fn later_policies_see_the_rewritten_extra_networks() {
    let defaulting = backup_defaults();
    let observer = module("observer", Ends::Returning(r#"{"allowed":true}"#));
    let chain = PolicyChain::new(defaulting).then(observer).then(capvcd());
    assert_eq!(
        chain.name(),
        "backup-defaults -> observer -> nicpolicy-capvcd"
    );
    let result = chain.evaluate(&request()).expect("evaluates");

    // The observer logged the request it was given.
    let seen = &result.steps[1].evaluation.logs[0].message;
    assert!(
        seen.contains(r#""extraOvdcNetworks":["storage-net","workload-net","backup-net"]"#),
        "{seen}"
    );
    // CAPVCD planned the rewritten list, and its plan is the chain's.
    assert_eq!(
        networks(&result.decision),
        ["mgmt-net", "storage-net", "workload-net", "backup-net"]
    );
    assert_eq!(
        result.decision.extra_ovdc_networks.as_deref(),
        Some(&["storage-net", "workload-net", "backup-net"].map(String::from)[..])
    );
    assert!(result.decision.allowed);
    // Chain-level logs say which policy logged what.
    assert!(result.logs[0].message.starts_with("[backup-defaults] {"));
    assert!(result.logs[1].message.starts_with("[observer] {"));
}

#[test]
fn a_rewrite_survives_a_last_policy_that_writes_none() {
    let defaulting = module(
        "backup-defaults",
        Ends::Returning(r#"{"allowed":true,"extraOvdcNetworks":["storage-net","backup-net"]}"#),
    );
    let validating = module("validating", Ends::Returning(r#"{"allowed":true}"#));
    let result = PolicyChain::new(defaulting)
        .then(validating)
        .evaluate(&request())
        .expect("evaluates");
    assert_eq!(
        result.decision.extra_ovdc_networks,
        Some(vec!["storage-net".to_string(), "backup-net".to_string()])
    );
    // The last policy plans nothing, so neither does the chain.
    assert!(result.decision.nics.is_empty());
}

#[test]
fn violations_and_warnings_of_every_policy_are_attributed() {
    let dmz = dmz_guard();
    // CAPVCD with maxNics 2 denies the example's three NICs.
    let capvcd = capvcd()
        .with_settings(json!({"maxNics": 2}))
        .expect("settings accepted");
    let result = PolicyChain::new(dmz)
        .then(capvcd)
        .evaluate(&request())
        .expect("evaluates");
    let decision = &result.decision;
    assert!(!decision.allowed);
    assert_eq!(decision.violations.len(), 2, "{:?}", decision.violations);
    // In field order: the list's own field before its entries, whichever policy ran first.
    let dmz_violation = &decision.violations[1];
    assert_eq!(dmz_violation.field, "spec.extraOvdcNetworks[1]");
    assert_eq!(dmz_violation.reason, Reason::Forbidden);
    assert_eq!(
        dmz_violation.message,
        "[dmz-guard] workload-net is reserved for tenants"
    );
    let capvcd_violation = &decision.violations[0];
    assert_eq!(capvcd_violation.field, "spec.extraOvdcNetworks");
    assert_eq!(capvcd_violation.reason, Reason::TooMany);
    assert!(
        capvcd_violation.message.starts_with("[nicpolicy-capvcd] "),
        "{}",
        capvcd_violation.message
    );
    assert_eq!(
        decision.warnings,
        ["[dmz-guard] ext-dmz-net is being retired"]
    );
    // Each step keeps its own decision unprefixed.
    assert_eq!(
        result.steps[0].evaluation.decision.violations[0].message,
        "workload-net is reserved for tenants"
    );
    nicpolicy::policy::check_decision(decision).expect("a coherent decision");
}

#[test]
fn a_chain_without_step_decisions_combines_the_same_decision() {
    let chain = || {
        PolicyChain::new(dmz_guard()).then(
            capvcd()
                .with_settings(json!({"maxNics": 2}))
                .expect("settings accepted"),
        )
    };
    let kept = chain().evaluate(&request()).expect("evaluates");
    let moved = chain()
        .without_step_decisions()
        .evaluate(&request())
        .expect("evaluates");
    assert_eq!(moved.decision, kept.decision);
    assert!(!kept.steps[0].evaluation.decision.violations.is_empty());
    // What the served path does not read is not kept: the decisions moved into the combined one.
    for step in &moved.steps {
        assert_eq!(step.evaluation.decision, Decision::default());
    }
}

#[test]
fn a_failing_policy_stops_the_chain_and_is_named() {
    let broken = module("broken-site-rules", Ends::Trapping);
    // If the chain went on after the trap, this policy would run into its time limit.
    let spinning = host()
        .load(
            &common::abi_module("(loop $spin (br $spin)) unreachable"),
            PolicyOptions {
                limits: Limits::default().with_timeout(Duration::from_millis(50)),
                ..PolicyOptions::default()
            },
        )
        .expect("loads");

    let chain = PolicyChain::new(capvcd())
        .then(broken)
        .then(spinning.clone());
    let err = chain
        .evaluate(&request())
        .expect_err("the second policy traps");
    assert_eq!(err.policy, "broken-site-rules");
    assert_eq!((err.index, err.len), (1, 3));
    assert_eq!(err.error.kind(), "trap");
    assert!(
        err.to_string().starts_with(
            "policy broken-site-rules (2 of 3 in the chain) failed: the policy trapped"
        ),
        "{err}"
    );

    let err = PolicyChain::new(spinning)
        .evaluate(&request())
        .expect_err("times out");
    assert_eq!(err.error.kind(), "timeout");
    assert!(
        err.to_string().starts_with("policy sha256:"),
        "a module without metadata is named by digest: {err}"
    );
}

#[test]
fn warn_mode_entries_change_nothing_and_their_failures_stop_nothing() {
    let defaulting = backup_defaults();
    let dmz = dmz_guard();
    let chain = PolicyChain::new(defaulting)
        .then(dmz)
        .then(module("broken-site-rules", Ends::Trapping))
        .then(capvcd())
        .with_mode(0, Mode::Warn)
        .with_mode(1, Mode::Warn)
        .with_mode(2, Mode::Warn);
    assert_eq!(
        chain.modes(),
        [Mode::Warn, Mode::Warn, Mode::Warn, Mode::Enforce]
    );
    assert_eq!(chain.enforced_name(), "nicpolicy-capvcd");
    let result = chain.evaluate(&request()).expect("the trap stops nothing");
    // CAPVCD, enforced, saw and planned the list as written: the defaults were not applied.
    assert!(result.decision.allowed && result.decision.violations.is_empty());
    assert_eq!(
        networks(&result.decision),
        ["mgmt-net", "storage-net", "workload-net"]
    );
    assert_eq!(
        result.decision.extra_ovdc_networks.as_deref(),
        Some(&["storage-net", "workload-net"].map(String::from)[..])
    );
    let warned = &result.warned;
    assert_eq!(warned.len(), 3);
    assert_eq!(
        warned[0].would_write.as_deref(),
        Some(&["storage-net", "workload-net", "backup-net"].map(String::from)[..])
    );
    let dmz_decision = &warned[1].evaluation.as_ref().expect("decided").decision;
    assert_eq!(
        dmz_decision.violations[0].message,
        "[dmz-guard] workload-net is reserved for tenants"
    );
    let failure = warned[2].evaluation.as_ref().expect_err("trapped");
    assert_eq!(failure.kind(), "trap");

    // An audit counts the warn-mode policies' findings, and their failures.
    let err = result.audited().expect_err("a warn-mode policy failed");
    assert_eq!(
        (err.policy.as_str(), err.index, err.len),
        ("broken-site-rules", 2, 4)
    );
    let audited = PolicyChain::new(capvcd())
        .then(dmz_guard())
        .with_mode(1, Mode::Warn)
        .evaluate(&request())
        .expect("evaluates")
        .audited()
        .expect("nothing failed");
    assert!(!audited.allowed);
    assert_eq!(
        audited.violations[0].message,
        format!("{AUDIT_PREFIX}: [dmz-guard] workload-net is reserved for tenants")
    );
    nicpolicy::policy::check_decision(&audited).expect("a coherent decision");
}

#[test]
fn case_settings_go_to_the_first_policy() {
    let chain =
        PolicyChain::new(capvcd()).then(module("observer", Ends::Returning(r#"{"allowed":true}"#)));
    let err = chain
        .with_first_settings(json!({"maxNics": 11}))
        .err()
        .expect("CAPVCD refuses maxNics 11");
    assert!(matches!(err, LoadError::Settings(_)), "{err}");
    let configured = chain
        .with_first_settings(json!({"maxNics": 3}))
        .expect("accepted");
    assert_eq!(configured.first().settings(), &json!({"maxNics": 3}));
    assert!(configured.policies()[1].settings().is_null());
}
