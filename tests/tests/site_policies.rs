//! Every built-in policy other than CAPVCD runs its own case suite from `tests/cases/<name>/`.

use std::path::{Path, PathBuf};

use nicpolicy::builtin;
use nicpolicy::PolicyOptions;
use nicpolicy_tests::{host, run_suite};

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
