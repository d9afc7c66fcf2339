//! Evaluation cost of the CAPVCD policy through the host (a fresh instance per evaluation)
//! against the same Rust logic called natively in this process, and how the cost grows with
//! the NIC list and the inventory.
//!
//! `cargo bench -p nicpolicy-tests --bench evaluate`; a table of medians and ratios follows
//! criterion's output.

mod common;

use std::hint::black_box;
use std::time::SystemTime;

use criterion::BenchmarkId;

use common::{show_ns, EXTRAS};

const INVENTORY_SIZES: [usize; 3] = [10, 100, 1000];

fn benches(c: &mut criterion::Criterion, host: &nicpolicy::Host, policy: &nicpolicy::Policy) {
    // The same module sent JSON (ABI v1's `nicpolicy_evaluate`) instead of the binary format.
    let json = policy
        .with_request_format(nicpolicy::RequestFormat::Json)
        .expect("JSON always");
    let mut group = c.benchmark_group("evaluate");
    for (name, request) in common::evaluate_cases() {
        // Same decision both ways, or the comparison means nothing.
        assert_eq!(
            common::wasm(policy, &request),
            common::native_logic(&request)
        );
        let input = common::request_json(&request);
        group.bench_with_input(BenchmarkId::new("wasm", &name), &request, |b, r| {
            b.iter(|| common::wasm(policy, black_box(r)))
        });
        group.bench_with_input(BenchmarkId::new("wasm-json", &name), &request, |b, r| {
            b.iter(|| common::wasm(&json, black_box(r)))
        });
        group.bench_with_input(BenchmarkId::new("native-logic", &name), &request, |b, r| {
            b.iter(|| common::native_logic(black_box(r)))
        });
        group.bench_with_input(BenchmarkId::new("native-guest", &name), &input, |b, i| {
            b.iter(|| common::native_guest(black_box(i)))
        });
        group.bench_with_input(
            BenchmarkId::new("native-round-trip", &name),
            &request,
            |b, r| b.iter(|| common::native_round_trip(black_box(r))),
        );
        group.bench_with_input(
            BenchmarkId::new("native-round-trip-binary", &name),
            &request,
            |b, r| b.iter(|| common::native_round_trip_binary(black_box(r))),
        );
    }
    // The host's own floor: a module that allows without reading its input (instance,
    // input copy, output decode), on the 3-NIC request.
    let noop = host
        .load(
            &nicpolicy_tests::Module::allowing().wasm(),
            nicpolicy::PolicyOptions::default(),
        )
        .expect("the allow-all module loads");
    let request = common::machine(3);
    group.bench_with_input(BenchmarkId::new("wasm-noop", "3nic"), &request, |b, r| {
        b.iter(|| noop.evaluate(black_box(r)).expect("evaluates"))
    });
    group.finish();

    let mut group = c.benchmark_group("nics");
    for nics in 1..=EXTRAS.len() + 1 {
        let request = common::machine_with_inventory(nics, 10);
        let input = common::request_json(&request);
        group.bench_with_input(BenchmarkId::new("wasm", nics), &request, |b, r| {
            b.iter(|| common::wasm(policy, black_box(r)))
        });
        group.bench_with_input(BenchmarkId::new("native-guest", nics), &input, |b, i| {
            b.iter(|| common::native_guest(black_box(i)))
        });
    }
    group.finish();

    let mut group = c.benchmark_group("inventory");
    for size in INVENTORY_SIZES {
        let request = common::machine_with_inventory(3, size);
        let input = common::request_json(&request);
        group.bench_with_input(BenchmarkId::new("wasm", size), &request, |b, r| {
            b.iter(|| common::wasm(policy, black_box(r)))
        });
        group.bench_with_input(BenchmarkId::new("native-guest", size), &input, |b, i| {
            b.iter(|| common::native_guest(black_box(i)))
        });
        group.bench_with_input(BenchmarkId::new("native-logic", size), &request, |b, r| {
            b.iter(|| common::native_logic(black_box(r)))
        });
        // A misspelt network: the "did you mean" hint compares it with every name.
        let mut typo = request.clone();
        typo.machine.extra_ovdc_networks[1] = "workload-nett".into();
        group.bench_with_input(BenchmarkId::new("wasm-typo", size), &typo, |b, r| {
            b.iter(|| common::wasm(policy, black_box(r)))
        });
    }
    group.finish();
}

fn summary(since: SystemTime) {
    let median = |id: String| common::median_ns(since, &id);
    let mut lines = Vec::new();
    for (name, _) in common::evaluate_cases() {
        let at = |function: &str| median(format!("evaluate/{function}/{name}"));
        let (Some(wasm), Some(json), Some(logic), Some(guest), Some(round), Some(round_binary)) = (
            at("wasm"),
            at("wasm-json"),
            at("native-logic"),
            at("native-guest"),
            at("native-round-trip"),
            at("native-round-trip-binary"),
        ) else {
            continue;
        };
        lines.push(format!(
            "| {name} | {} | {} | {} | {} | {} | {} | {:.1} | {:.2} | {:.2} | {:.2} |",
            show_ns(wasm),
            show_ns(json),
            show_ns(logic),
            show_ns(guest),
            show_ns(round),
            show_ns(round_binary),
            wasm / guest,
            json / round,
            wasm / round,
            wasm / round_binary,
        ));
    }
    if !lines.is_empty() {
        println!("\n| machine | wasm | wasm, JSON request | native logic | native guest (JSON in/out) | native round trip | native round trip, binary request | wasm / guest | wasm JSON / round trip | wasm / round trip | wasm / binary round trip |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|");
        println!("{}", lines.join("\n"));
    }

    let mut lines = Vec::new();
    for nics in 1..=EXTRAS.len() + 1 {
        if let (Some(wasm), Some(guest)) = (
            median(format!("nics/wasm/{nics}")),
            median(format!("nics/native-guest/{nics}")),
        ) {
            lines.push(format!(
                "| {nics} | {} | {} |",
                show_ns(wasm),
                show_ns(guest)
            ));
        }
    }
    if !lines.is_empty() {
        println!("\n| NICs (inventory of 10) | wasm | native guest |\n|---|---|---|");
        println!("{}", lines.join("\n"));
    }

    let mut lines = Vec::new();
    for size in INVENTORY_SIZES {
        let at = |function: &str| median(format!("inventory/{function}/{size}"));
        if let (Some(wasm), Some(guest), Some(logic), Some(typo)) = (
            at("wasm"),
            at("native-guest"),
            at("native-logic"),
            at("wasm-typo"),
        ) {
            lines.push(format!(
                "| {size} | {} | {} | {} | {} |",
                show_ns(wasm),
                show_ns(guest),
                show_ns(logic),
                show_ns(typo)
            ));
        }
    }
    if !lines.is_empty() {
        println!("\n| inventory networks (3 NICs) | wasm | native guest | native logic | wasm, one misspelt network |\n|---|---|---|---|---|");
        println!("{}", lines.join("\n"));
    }
}

fn main() {
    let since = SystemTime::now();
    let host = common::host("evaluate");
    let policy = common::capvcd_policy(&host);
    let mut c = common::criterion().configure_from_args();
    benches(&mut c, &host, &policy);
    c.final_summary();
    summary(since);
}
