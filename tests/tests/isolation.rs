//! No state survives a call: a policy that counts its calls sees one call every time, whether
//! evaluations come one after another or from several threads at once.

use std::path::PathBuf;

use nicpolicy::{Host, Policy};
use nicpolicy_plugin::testing;
use nicpolicy_tests::{data_result, host, tight_options, Module, DATA_AT};

/// The decision the counting policy returns; `#` marks where it writes its two counts.
const TEMPLATE: &str = r##"{"allowed":true,"warnings":["calls seen: global #, memory #"]}"##;
/// Address of the policy's call counter in linear memory (zero in a fresh instance).
const MEMORY_COUNTER_AT: u32 = 1024;

/// A policy that increments a mutable global and a counter in its linear memory on every
/// evaluation, and reports both counts (as digits) in a warning.
fn counting_policy(host: &Host) -> Policy {
    let mut digits = TEMPLATE.match_indices('#').map(|(i, _)| DATA_AT + i as u32);
    let (global_at, memory_at) = (digits.next().unwrap(), digits.next().unwrap());
    let mut module = Module::evaluating(&format!(
        "(global.set $calls (i32.add (global.get $calls) (i32.const 1)))
         (i32.store (i32.const {MEMORY_COUNTER_AT})
           (i32.add (i32.load (i32.const {MEMORY_COUNTER_AT})) (i32.const 1)))
         (i32.store8 (i32.const {global_at}) (i32.add (global.get $calls) (i32.const 48)))
         (i32.store8 (i32.const {memory_at})
           (i32.add (i32.load (i32.const {MEMORY_COUNTER_AT})) (i32.const 48)))
         i64.const {}",
        data_result(TEMPLATE)
    ));
    module.data = TEMPLATE.to_string();
    module.extra = "(global $calls (mut i32) (i32.const 0))".into();
    host.load(&module.wasm(), tight_options())
        .expect("the counting policy loads")
}

fn counts_seen(policy: &Policy) -> Vec<String> {
    policy
        .evaluate(&testing::worker(&["storage-net", "workload-net"]))
        .expect("the counting policy evaluates")
        .decision
        .warnings
}

fn test_host() -> Host {
    host(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("isolation-cache"))
}

#[test]
fn every_evaluation_sees_a_fresh_instance() {
    let host = test_host();
    let policy = counting_policy(&host);
    for call in 1..=200 {
        assert_eq!(
            counts_seen(&policy),
            ["calls seen: global 1, memory 1"],
            "evaluation {call} saw state from an earlier one"
        );
    }
}

#[test]
fn concurrent_evaluations_share_no_state() {
    let host = test_host();
    let policy = counting_policy(&host);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    (0..300)
                        .filter(|_| counts_seen(&policy) != ["calls seen: global 1, memory 1"])
                        .count()
                })
            })
            .collect();
        for worker in workers {
            assert_eq!(
                worker.join().expect("the thread finishes"),
                0,
                "evaluations saw another call's state"
            );
        }
    });
    // Clones share the compiled module, not instances.
    let clone = policy.clone();
    assert_eq!(counts_seen(&clone), ["calls seen: global 1, memory 1"]);
}
