//! What each change to the evaluation path gained, measured interleaved in one process: every
//! round runs a batch of each variant in turn, so a slow spell of a noisy machine hits all of
//! them alike, and the median over rounds is compared.
//!
//! Variants: the host's memory-reset settings (the CAPVCD policy as built in), builds of the
//! CAPVCD policy given as `NICPOLICY_BENCH_VARIANTS=label=FILE.wasm,...` (tests/benches/variants.sh
//! builds them and runs this), and the native round trip as the yardstick. Then the webhook's
//! review path in process (no HTTP): the four AdmissionReviews of the load generator's mix,
//! answered by the `serve` reviewer with the policy in Wasm and with the rules native.
//!
//! `cargo bench -p nicpolicy-tests --bench changes [-- --rounds N --batch N]`

mod common;

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use nicpolicy::plugin::ObjectKind;
use nicpolicy::webhook::{App, Endpoint, Reviewer, ServeConfig, StaticClusters};
use nicpolicy::{Host, HostConfig, Policy, PolicyOptions};
use nicpolicy_plugin::Request;

/// A way of evaluating a request, labelled with what it stands for.
type Variant = (String, Box<dyn Fn(&Request)>);

/// A host like the CLI's with `adjust` applied; few slots, since several hosts share the
/// process's address space.
fn host(adjust: impl FnOnce(&mut HostConfig)) -> Host {
    let mut config = HostConfig {
        cache_dir: None,
        max_instances: 8,
        ..HostConfig::default()
    };
    adjust(&mut config);
    Host::new(config).expect("engine starts")
}

fn wasm_variant(label: &str, host: Host, wasm: &[u8]) -> Variant {
    let policy: Policy = host
        .load(wasm, PolicyOptions::default())
        .unwrap_or_else(|err| panic!("{label}: {err}"));
    (
        label.to_string(),
        Box::new(move |request| {
            black_box(common::wasm(&policy, request));
        }),
    )
}

fn variants() -> Vec<Variant> {
    let builtin = nicpolicy::builtin::CAPVCD_WASM;
    let mut variants = vec![
        (
            "native round trip (no Wasm)".to_string(),
            Box::new(|request: &Request| {
                black_box(common::native_round_trip(request));
            }) as Box<dyn Fn(&Request)>,
        ),
        wasm_variant(
            "on-demand allocation (no pool)",
            host(|c| c.pooling = false),
            builtin,
        ),
        wasm_variant(
            "pool, keep 1 MiB resident, memset it",
            host(|c| {
                c.keep_resident_bytes = 1 << 20;
                c.reset_dirty_pages_only = false;
            }),
            builtin,
        ),
        wasm_variant(
            "pool, keep nothing resident",
            host(|c| {
                c.keep_resident_bytes = 0;
                c.reset_dirty_pages_only = false;
            }),
            builtin,
        ),
        wasm_variant(
            "pool, keep 1 MiB, reset dirty pages only",
            host(|c| c.keep_resident_bytes = 1 << 20),
            builtin,
        ),
        wasm_variant(
            "pool, keep 4 MiB, reset dirty pages only (default)",
            host(|_| {}),
            builtin,
        ),
    ];
    if let Ok(list) = std::env::var("NICPOLICY_BENCH_VARIANTS") {
        for entry in list.split(',').filter(|e| !e.is_empty()) {
            let (label, file) = entry
                .split_once('=')
                .unwrap_or_else(|| panic!("NICPOLICY_BENCH_VARIANTS: `{entry}` is not label=FILE"));
            let wasm = std::fs::read(PathBuf::from(file))
                .unwrap_or_else(|err| panic!("NICPOLICY_BENCH_VARIANTS: {file}: {err}"));
            let size = wasm.len() as f64 / 1000.0;
            variants.push(wasm_variant(
                &format!("build: {label} ({size:.1} KB)"),
                host(|_| {}),
                &wasm,
            ));
        }
    }
    variants
}

/// `--name N` from the command line, else `default`.
fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} takes a number"))
        })
        .unwrap_or(default)
}

/// `rounds` interleaved rounds of `batch` calls of each variant; the median per call.
fn interleaved<T>(
    variants: &[(String, T)],
    rounds: usize,
    batch: usize,
    call: impl Fn(&T),
) -> Vec<f64> {
    for (_, variant) in variants {
        call(variant); // warm: compile caches, warm slots, page tables
    }
    let mut samples = vec![Vec::with_capacity(rounds); variants.len()];
    for _ in 0..rounds {
        for ((_, variant), samples) in variants.iter().zip(&mut samples) {
            let started = Instant::now();
            for _ in 0..batch {
                call(variant);
            }
            samples.push(started.elapsed().as_nanos() as f64 / batch as f64);
        }
    }
    samples.iter_mut().map(|s| median(s)).collect()
}

/// The reviewer `nicpolicy serve` runs, from the load generator's configuration (example
/// cluster and inventory, the CAPVCD policy for both kinds), with the rules native or not.
fn reviewer(native: bool) -> Arc<Reviewer> {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let examples = workspace.join("examples");
    let dir = common::cache_dir("changes-serve");
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let config = format!(
        "inventory: {inventory}\n\
         clusters: {{source: Static, files: [{cluster}]}}\n\
         reload: {{enabled: false}}\n\
         policies:\n  VCDMachine: [{{builtin: capvcd}}]\n  VCDMachineTemplate: [{{builtin: capvcd}}]\n",
        inventory = examples.join("inventory.yaml").display(),
        cluster = examples.join("cluster.yaml").display(),
    );
    let path = dir.join("nicpolicy.yaml");
    std::fs::write(&path, config).expect("write config");
    let config = ServeConfig::read(&path).expect("config is valid");
    let clusters = StaticClusters::read(&[examples.join("cluster.yaml")]).expect("clusters");
    let mut app = App::new(host(|_| {}), config, Arc::new(clusters)).expect("policies load");
    if native {
        app = app.with_native_evaluator(Arc::new(nicpolicy_plugin::capvcd::evaluate));
    }
    app.reviewer().clone()
}

/// The load generator's mix: (endpoint, kind, fixture).
const REVIEWS: [(Endpoint, ObjectKind, &str); 4] = [
    (
        Endpoint::Mutate,
        ObjectKind::VcdMachine,
        "vcdmachine-create-worker",
    ),
    (
        Endpoint::Validate,
        ObjectKind::VcdMachine,
        "vcdmachine-create-worker",
    ),
    (
        Endpoint::Validate,
        ObjectKind::VcdMachine,
        "vcdmachine-create-invalid",
    ),
    (
        Endpoint::Validate,
        ObjectKind::VcdMachineTemplate,
        "vcdmachinetemplate-create-worker",
    ),
];

fn review_path(rounds: usize, batch: usize) {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let reviews: Vec<(Endpoint, ObjectKind, Vec<u8>)> = REVIEWS
        .iter()
        .map(|(endpoint, kind, fixture)| {
            let file = workspace.join(format!("tests/fixtures/admission/{fixture}.json"));
            let body =
                std::fs::read(&file).unwrap_or_else(|err| panic!("{}: {err}", file.display()));
            (*endpoint, *kind, body)
        })
        .collect();
    let servers = vec![
        ("reviewer, rules native".to_string(), reviewer(true)),
        ("reviewer, policy in Wasm".to_string(), reviewer(false)),
    ];
    // The same answers both ways, or the comparison means nothing.
    for (endpoint, kind, body) in &reviews {
        let answers: Vec<Vec<u8>> = servers
            .iter()
            .map(|(_, r)| r.review(*endpoint, *kind, body).body)
            .collect();
        assert_eq!(answers[0], answers[1], "native and Wasm answer alike");
    }
    let medians = interleaved(&servers, rounds, batch.div_ceil(4), |reviewer| {
        for (endpoint, kind, body) in &reviews {
            black_box(reviewer.review(*endpoint, *kind, black_box(body)));
        }
    });
    println!("\nwebhook review path in process (no HTTP, no TLS), the mix of 4 reviews");
    println!("| variant | per review | / native |");
    println!("|---|---|---|");
    for ((label, _), ns) in servers.iter().zip(&medians) {
        println!(
            "| {label} | {} | {:.2} |",
            common::show_ns(ns / 4.0),
            ns / medians[0]
        );
    }
}

fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn main() {
    // `cargo test --benches` runs bench targets with `--bench` absent: keep that quick.
    let benching = std::env::args().any(|a| a == "--bench");
    let rounds = arg("--rounds", if benching { 40 } else { 1 });
    let batch = arg("--batch", if benching { 500 } else { 2 });
    let variants = variants();
    let cases = [
        ("3nic", common::machine(3)),
        ("10nic-inv10", common::machine_with_inventory(10, 10)),
    ];
    for (name, request) in &cases {
        let medians = interleaved(&variants, rounds, batch, |run| run(black_box(request)));
        let native = medians[0];
        println!("\n{name}: median of {rounds} interleaved rounds of {batch} evaluations");
        println!("| variant | per evaluation | / native round trip | evaluations/s (1 thread) |");
        println!("|---|---|---|---|");
        for ((label, _), ns) in variants.iter().zip(&medians) {
            println!(
                "| {} | {} | {:.1} | {:.0} |",
                label,
                common::show_ns(*ns),
                ns / native,
                1e9 / ns
            );
        }
    }
    review_path(rounds, batch);
}
