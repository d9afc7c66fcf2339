//! Every built-in policy other than CAPVCD runs its own case suite from `tests/cases/<name>/`.

use std::path::{Path, PathBuf};

use nicpolicy::builtin;
use nicpolicy::{PolicyOptions, RequestFormat};
use nicpolicy_tests::{decided_cases, host, run_suite};

/// Fewest cases a policy's suite may have.
const MIN_CASES: usize = 8;

#[test]
fn every_site_policy_passes_its_cases() {
    let host = host(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("site-cache"));
    let cases_root = Path::new(env!("CARGO_MANIFEST_DIR")).join("cases");
    let mut failures = Vec::new();
    for policy in builtin::POLICIES.iter().filter(|p| p.name != "capvcd") {
        let loaded = host
            .load(policy.wasm, PolicyOptions::default())
            .unwrap_or_else(|err| panic!("{}: {err}", policy.name));
        let dir = cases_root.join(policy.name);
        if !dir.is_dir() {
            failures.push(format!(
                "policies/{name} is built into nicpolicy (every crate under policies/ is), but \
                 its case suite {dir} does not exist: add at least {MIN_CASES} case files there \
                 (docs/testing.md). A site policy that should not be built in lives outside \
                 policies/ (start from examples/site-policy/).",
                name = policy.name,
                dir = dir.display()
            ));
            continue;
        }
        let (count, policy_failures) = run_suite(&loaded, &dir);
        if count < MIN_CASES {
            failures.push(format!(
                "{}: {count} cases in {}, at least {MIN_CASES} needed",
                policy.name,
                dir.display()
            ));
        }
        failures.extend(policy_failures);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn every_built_in_policy_decides_alike_in_every_format() {
    // The binary formats carry the same request and decision: every case of every built-in
    // policy gets the same decision through each entry point.
    let host = host(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("site-cache"));
    let cases_root = Path::new(env!("CARGO_MANIFEST_DIR")).join("cases");
    for policy in builtin::POLICIES {
        let loaded = host
            .load(policy.wasm, PolicyOptions::default())
            .unwrap_or_else(|err| panic!("{}: {err}", policy.name));
        assert_eq!(
            loaded.request_format(),
            RequestFormat::Binary3,
            "{}: built with the SDK, so it takes the binary formats",
            policy.name
        );
        let dir = cases_root.join(policy.name);
        let from_json = decided_cases(
            &loaded
                .with_request_format(RequestFormat::Json)
                .expect("JSON always"),
            &dir,
        );
        assert!(from_json.len() >= MIN_CASES, "{}", policy.name);
        for format in [
            RequestFormat::Binary1,
            RequestFormat::Binary2,
            RequestFormat::Binary3,
        ] {
            let policy_in = loaded.with_request_format(format).expect("SDK module");
            let decided = decided_cases(&policy_in, &dir);
            assert_eq!(decided.len(), from_json.len(), "{} {format}", policy.name);
            for (b, j) in decided.iter().zip(&from_json) {
                let mut expected = j.decision.clone();
                if format == RequestFormat::Binary2 {
                    // Version 1 of the binary decision format predates sources.
                    nicpolicy_plugin::source::strip(&mut expected);
                } else {
                    assert!(
                        expected.nics.iter().all(|nic| nic.source.is_some())
                            && expected.violations.iter().all(|v| v.source.is_some()),
                        "{}: every NIC and violation has a source",
                        b.case.path.display()
                    );
                }
                assert_eq!(b.decision, expected, "{format}: {}", b.case.path.display());
            }
        }
    }
}
