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
use std::time::Instant;

use common::review;
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
    // Where the process may be swapped, the host gives every freed page back whatever it was
    // asked (engine::swap_possible): say so in the label rather than measure under a wrong name.
    let label = match nicpolicy::engine::swap_possible() {
        Some(why) if label.contains("dirty pages only") => {
            format!("{label} [run as keep nothing resident: {why}]")
        }
        _ => label.to_string(),
    };
    let label = label.as_str();
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
    samples.iter_mut().map(|s| common::median(s)).collect()
}

fn review_path(rounds: usize, batch: usize) {
    let reviews = review::reviews();
    let servers = vec![
        (
            "reviewer, rules native".to_string(),
            review::reviewer("native", "{builtin: capvcd}", true),
        ),
        (
            "reviewer, policy in Wasm".to_string(),
            review::reviewer("wasm", "{builtin: capvcd}", false),
        ),
    ];
    review::same_answers(&servers, &reviews);
    let medians = interleaved(&servers, rounds, batch.div_ceil(4), |reviewer| {
        for review in &reviews {
            black_box(reviewer.review(review.endpoint, review.kind, black_box(&review.body)));
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

fn main() {
    // `cargo test --benches` runs bench targets with `--bench` absent: keep that quick.
    let benching = common::benching();
    let rounds = common::arg("--rounds", if benching { 40 } else { 1 });
    let batch = common::arg("--batch", if benching { 500 } else { 2 });
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
