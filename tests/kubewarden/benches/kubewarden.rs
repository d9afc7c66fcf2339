//! The CAPVCD policy's Kubewarden build through the waPC test host against its ABI v1 build
//! through nicpolicy's host, on the same cases, in one run.
//!
//! `cd tests/kubewarden && cargo bench`; a table of medians and ratios follows criterion's
//! output, then the module sizes.
//!
//! - `nicpolicy`: `Policy::evaluate` of the case's request (fresh instance, request JSON in,
//!   decision JSON out) judged by the lifecycle rules, as `nicpolicy serve` calls it once a
//!   review is read (a denied UPDATE evaluates the stored object too);
//! - `kubewarden`: `validate` of the case's ValidationRequest as policy-server runs it (fresh
//!   instance from the pre-instantiated module, `wapc_init`, the AdmissionRequest read and
//!   mapped in the guest, Cluster and VCDCluster read through two `get_resource` host calls,
//!   the lifecycle rules (the stored object evaluated again for a denied UPDATE), the mutated
//!   object built and returned).

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion};
use nicpolicy::cases::Case;
use nicpolicy::lifecycle::judge;
use nicpolicy::{builtin, Host, HostConfig, PolicyOptions};
use nicpolicy_kubewarden_tests::compare::{request, settings};
use nicpolicy_kubewarden_tests::PolicyServer;
use nicpolicy_plugin::Request;

/// Cases of the CAPVCD suite: allowed with one extra, three extras, denied with several
/// violations, and an UPDATE denied for what it adds (both hosts judge the stored object too).
const CASES: [&str; 4] = [
    "02-one-extra.yaml",
    "03-three-extras-in-order.yaml",
    "11-several-violations-together.yaml",
    "74-update-adds-violation-to-stored-one.yaml",
];

fn main() {
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let capvcd = builtin::get("capvcd").expect("built in");
    let host = Host::new(HostConfig::default()).expect("engine starts");
    let policy = host
        .load(capvcd.wasm, PolicyOptions::default())
        .expect("loads");
    let kubewarden_wasm = capvcd.kubewarden.expect("a Kubewarden build");
    let server = PolicyServer::load(kubewarden_wasm).expect("loads");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../cases/capvcd");

    let mut group = criterion.benchmark_group("kubewarden");
    let mut names = Vec::new();
    for file in CASES {
        let case = Case::load(&dir.join(file)).expect("case loads");
        let name = file.trim_end_matches(".yaml").to_string();
        let (request, cluster) = request(&case);
        let kw_settings = settings(&case, true);
        // Same answer both ways, or the comparison means nothing.
        let judged = |request: &Request| judge(request, |r| policy.evaluate(r)).expect("evaluates");
        let decision = judged(&case.request).decision;
        let (response, _) = server
            .validate(&request, &kw_settings, &cluster)
            .expect("validates");
        assert_eq!(decision.allowed, response.accepted, "{name}");
        group.bench_with_input(BenchmarkId::new("nicpolicy", &name), &case, |b, case| {
            b.iter(|| judged(black_box(&case.request)))
        });
        group.bench_with_input(BenchmarkId::new("kubewarden", &name), &request, |b, r| {
            b.iter(|| {
                server
                    .validate(black_box(r), &kw_settings, &cluster)
                    .expect("validates")
            })
        });
        names.push(name);
    }
    group.finish();
    criterion.final_summary();

    println!("\n| case | nicpolicy host (µs) | waPC test host (µs) | ratio |");
    println!("|---|---:|---:|---:|");
    for name in &names {
        let median = |variant: &str| median_ns(&format!("kubewarden/{variant}/{name}"));
        if let (Some(ours), Some(theirs)) = (median("nicpolicy"), median("kubewarden")) {
            println!(
                "| {name} | {:.1} | {:.1} | ×{:.2} |",
                ours / 1000.0,
                theirs / 1000.0,
                theirs / ours
            );
        }
    }
    println!(
        "\nmodule sizes: ABI v1 {} bytes, Kubewarden {} bytes",
        capvcd.wasm.len(),
        kubewarden_wasm.len()
    );
}

/// The median criterion measured for `id`, in nanoseconds.
fn median_ns(id: &str) -> Option<f64> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/criterion")
        .join(id)
        .join("new/estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    value.pointer("/median/point_estimate")?.as_f64()
}
