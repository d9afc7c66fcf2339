//! 10,000 evaluations in a row, most of them hostile, leave the host's resident memory where it
//! was. This file holds one test so that nothing else runs in its process while it measures.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nicpolicy::{builtin, EvalError, Host, HostConfig, Limits, Policy, PolicyOptions};
use nicpolicy_plugin::abi::pack;
use nicpolicy_plugin::{testing, Request};
use nicpolicy_tests::{tight_options, Module};

/// Evaluations after the warm-up.
const EVALUATIONS: usize = 10_000;
/// Evaluations before the first measurement (pool slots, allocator arenas and caches fill up).
const WARM_UP: usize = 1_000;
/// Allowed growth of resident memory over the 10,000 evaluations. A leak of 1 KiB per
/// evaluation (10,000 KiB) cannot stay under it.
const TOLERANCE_KIB: u64 = 4 * 1024;

/// The process's resident set size, from /proc/self/status.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status reads");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

/// What one kind of evaluation must produce.
enum Expect {
    Allowed,
    Error(&'static str),
}

struct Kind {
    policy: Policy,
    request: Request,
    expect: Expect,
}

fn load(host: &Host, module: &Module, options: PolicyOptions) -> Policy {
    host.load(&module.wasm(), options)
        .unwrap_or_else(|err| panic!("module loads: {err}"))
}

fn kinds(host: &Host) -> Vec<Kind> {
    let request = testing::worker(&["storage-net", "workload-net"]);
    let tight = tight_options;
    let capvcd = host
        .load(builtin::CAPVCD_WASM, PolicyOptions::default())
        .expect("CAPVCD policy loads");
    let grow = "(loop $more (br_if $more (i32.ne (memory.grow (i32.const 16)) (i32.const -1)))) unreachable";
    let mut recursion = Module::evaluating("i32.const 0 call $down drop i64.const 0");
    recursion.extra =
        "(func $down (param i32) (result i32) local.get 0 i32.const 1 i32.add call $down)".into();
    let mut logging = Module::evaluating(&format!(
        "(call $log (i32.const 1) (i32.const 256) (i32.const 20)) i64.const {}",
        nicpolicy_tests::allow_result()
    ));
    logging.imports = r#"(import "nicpolicy" "log" (func $log (param i32 i32 i32)))"#.into();
    logging.data = "checking storage-net".into();
    let kind = |policy, expect| Kind {
        policy,
        request: request.clone(),
        expect,
    };
    vec![
        kind(capvcd, Expect::Allowed),
        kind(
            load(host, &Module::evaluating("unreachable"), tight()),
            Expect::Error("trap"),
        ),
        kind(
            load(host, &Module::evaluating(grow), tight()),
            Expect::Error("memory"),
        ),
        kind(load(host, &recursion, tight()), Expect::Error("trap")),
        kind(
            load(host, &Module::returning("allowed: yes"), tight()),
            Expect::Error("bad_output"),
        ),
        kind(
            load(
                host,
                &Module::evaluating(&format!("i64.const {}", pack(0xFFFF_0000, 64))),
                tight(),
            ),
            Expect::Error("bad_output"),
        ),
        kind(
            load(
                host,
                &Module::returning(r#"{"error":"inventory service unreachable"}"#),
                tight(),
            ),
            Expect::Error("policy_error"),
        ),
        kind(load(host, &logging, tight()), Expect::Allowed),
    ]
}

fn evaluate(kind: &Kind) {
    match (&kind.expect, kind.policy.evaluate(&kind.request)) {
        (Expect::Allowed, Ok(evaluation)) => assert!(evaluation.decision.allowed),
        (Expect::Error(expected), Err(err)) => assert_eq!(err.kind(), *expected, "{err}"),
        (Expect::Allowed, Err(err)) => panic!("expected a decision, got {err}"),
        (Expect::Error(expected), Ok(_)) => panic!("expected a {expected} error, got a decision"),
    }
}

/// A policy stopped by a 2 ms time limit; a timeout costs a few milliseconds, so only one
/// evaluation in 100 is one.
fn spinning(host: &Host) -> Policy {
    let options = PolicyOptions {
        limits: Limits::default()
            .with_timeout(Duration::from_millis(2))
            .with_memory_bytes(8 << 20),
        ..PolicyOptions::default()
    };
    load(
        host,
        &Module::evaluating("(loop $spin (br $spin)) unreachable"),
        options,
    )
}

#[test]
fn ten_thousand_hostile_evaluations_do_not_grow_resident_memory() {
    let host = Host::new(HostConfig {
        cache_dir: Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rss-cache")),
        epoch_tick: Duration::from_millis(1),
        ..HostConfig::default()
    })
    .expect("engine starts");
    let kinds = kinds(&host);
    let spinning = spinning(&host);
    let request = testing::worker(&["storage-net"]);
    let run = |count: usize| {
        let mut timeouts = 0;
        for i in 0..count {
            if i % 100 == 99 {
                let err = spinning
                    .evaluate(&request)
                    .expect_err("the loop is stopped");
                assert!(matches!(err, EvalError::Timeout(_)), "{err}");
                timeouts += 1;
            } else {
                evaluate(&kinds[i % kinds.len()]);
            }
        }
        timeouts
    };

    run(WARM_UP);
    let before = rss_kib();
    let started = Instant::now();
    let timeouts = run(EVALUATIONS);
    let elapsed = started.elapsed();
    let after = rss_kib();
    eprintln!(
        "{EVALUATIONS} evaluations ({timeouts} timeouts) in {elapsed:?}: VmRSS {before} KiB \
         before, {after} KiB after ({:+} KiB)",
        after as i64 - before as i64
    );
    assert!(
        after <= before + TOLERANCE_KIB,
        "resident memory grew from {before} KiB to {after} KiB over {EVALUATIONS} evaluations"
    );
}
