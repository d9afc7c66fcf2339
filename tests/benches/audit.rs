//! The audit at scale: 10,000 generated machines and templates in 100 clusters (a realistic mix
//! of valid and invalid ones), read from a folder of manifests as `nicpolicy audit` reads it,
//! evaluated with the built-in CAPVCD policy in Wasm and with the same rules native, in one
//! run. Then the controller's view of the same objects: one PolicyReport per namespace, and how
//! many reports one changed machine rewrites. Prints CPU seconds (user + system, from
//! /proc/self/stat) and the process's peak resident memory.
//!
//! `cargo bench -p nicpolicy-tests --bench audit [-- --clusters N --machines N]`

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use nicpolicy::audit::{evaluate_all, Inputs, Summary};
use nicpolicy::controller::report::{self, Bounds};
use nicpolicy::{PolicyChain, PolicyOptions};
use nicpolicy_plugin::capvcd;

use common::fleet;

/// CPU seconds (user + system) this process has used.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces): state is field 3; utime and stime
    // are fields 14 and 15, in clock ticks (100 per second on Linux).
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// Peak resident memory of this process (VmHWM), in MiB.
fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo test --benches` runs this too: keep that quick.
    let quick = !std::env::args().any(|a| a == "--bench");
    let clusters = arg("--clusters", if quick { 3 } else { 100 });
    let per_cluster = arg("--machines", 100);
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/bench-audit");
    let (namespaces, mix) = fleet::generate(clusters, per_cluster);
    fleet::write(&dir, &namespaces);
    println!(
        "{} objects in {clusters} clusters ({} per cluster): {mix:?}",
        clusters * per_cluster,
        per_cluster
    );
    let inventory = common::inventory(24);
    let host = common::host("audit");
    let chain = PolicyChain::new(
        host.load(common::capvcd_wasm(), PolicyOptions::default())
            .expect("the CAPVCD policy loads"),
    );

    let cpu = cpu_seconds();
    let wall = Instant::now();
    let inputs = Inputs::read(std::slice::from_ref(&dir)).expect("the generated folder reads");
    let subjects = inputs.subjects(Some(&inventory));
    let read_cpu = cpu_seconds() - cpu;
    let read_wall = wall.elapsed();

    let native_subjects = subjects.clone();
    let cpu = cpu_seconds();
    let wall = Instant::now();
    let findings = evaluate_all(subjects, &chain, None);
    let wasm_cpu = cpu_seconds() - cpu;
    let wasm_wall = wall.elapsed();

    let cpu = cpu_seconds();
    let wall = Instant::now();
    let mut native_denied = 0;
    for subject in native_subjects {
        if let Ok(request) = subject.input {
            native_denied += usize::from(!capvcd::evaluate(&request).allowed);
        }
    }
    let native_cpu = cpu_seconds() - cpu;
    let native_wall = wall.elapsed();

    let summary = Summary::of(&findings);
    assert_eq!(
        summary.count(nicpolicy::audit::Verdict::Denied),
        native_denied,
        "Wasm and native must deny the same machines"
    );
    println!("{}", summary.line());
    println!("violations by rule: {:?}", summary.reasons);
    println!(
        "read + match clusters: {read_cpu:.2} s CPU ({:.2} s wall)",
        read_wall.as_secs_f64()
    );
    println!(
        "evaluate, Wasm:   {wasm_cpu:.2} s CPU ({:.2} s wall, {:.1} us per object)",
        wasm_wall.as_secs_f64(),
        wasm_wall.as_secs_f64() * 1e6 / findings.len() as f64
    );
    println!(
        "evaluate, native: {native_cpu:.2} s CPU ({:.2} s wall, {:.1} us per object)",
        native_wall.as_secs_f64(),
        native_wall.as_secs_f64() * 1e6 / findings.len() as f64
    );
    println!(
        "full audit (read + Wasm): {:.2} s CPU; with native rules: {:.2} s CPU; evaluation Wasm / native: {:.1}x",
        read_cpu + wasm_cpu,
        read_cpu + native_cpu,
        wasm_wall.as_secs_f64() / native_wall.as_secs_f64().max(1e-9)
    );

    // The controller's reports: one per namespace; a second pass after one machine changed
    // rewrites one report.
    let by_namespace = |findings: &[nicpolicy::audit::Finding]| {
        let mut groups: BTreeMap<String, Vec<nicpolicy::audit::Finding>> = BTreeMap::new();
        for f in findings {
            groups
                .entry(f.object.namespace.clone())
                .or_default()
                .push(f.clone());
        }
        groups
    };
    let policy = |_: &str| "nicpolicy-capvcd".to_string();
    let cpu = cpu_seconds();
    let first: BTreeMap<String, report::Report> = by_namespace(&findings)
        .into_iter()
        .map(|(ns, fs)| {
            let built = report::build(&ns, &policy, &fs, Bounds::default());
            (ns, built)
        })
        .collect();
    let report_cpu = cpu_seconds() - cpu;
    let largest = first
        .values()
        .map(|r| r.object.to_string().len())
        .max()
        .unwrap_or(0);
    let mut changed = findings.clone();
    if let Some(f) = changed
        .iter_mut()
        .find(|f| f.result == nicpolicy::audit::Verdict::Denied)
    {
        f.result = nicpolicy::audit::Verdict::Allowed;
        if let Some(d) = f.decision.as_mut() {
            d.allowed = true;
            d.violations.clear();
        }
    }
    let rewritten = by_namespace(&changed)
        .into_iter()
        .filter(|(ns, fs)| {
            first.get(ns).map(|r| &r.fingerprint)
                != Some(&report::build(ns, &policy, fs, Bounds::default()).fingerprint)
        })
        .count();
    println!(
        "PolicyReports: {} built in {report_cpu:.2} s CPU, largest {:.0} KiB; after one machine was fixed, {rewritten} of {} would be written again",
        first.len(),
        largest as f64 / 1024.0,
        first.len()
    );
    println!("peak resident memory: {:.0} MiB", peak_rss_mib());
    let _ = std::fs::remove_dir_all(&dir);
}
