//! Inputs and helpers shared by the benchmarks: realistic multi-homed CAPVCD machines, org VDC
//! inventories of a chosen size, a host with a private module cache, and the CAPVCD policy run
//! natively the three ways the Wasm path is compared against.

#![allow(dead_code)]

pub mod fleet;
pub mod procfs;
pub mod review;

use std::path::PathBuf;

use nicpolicy::{Host, HostConfig, Policy, PolicyOptions};
use nicpolicy_plugin::schema::IpRange;
use nicpolicy_plugin::{
    capvcd, guest, testing, Decision, Inventory, Network, NetworkType, Request,
};

pub use fleet::EXTRAS;

/// A CREATE of worker `prod-eu1-md-0-x7k2p` in cluster `prod-eu1` (primary `mgmt-net`) with
/// `nics` NICs (1..=10): the primary, then the first `nics - 1` of [`EXTRAS`].
pub fn machine(nics: usize) -> Request {
    assert!((1..=10).contains(&nics), "1 to 10 NICs");
    testing::worker(&EXTRAS[..nics - 1])
}

/// One org VDC network as an inventory lists it: type, gateway, prefix, a static pool, DNS.
fn network(name: &str, i: usize) -> Network {
    let (a, b) = (10 + i / 250, i % 250);
    Network {
        name: name.to_string(),
        network_type: Some(if name == "ext-dmz-net" {
            NetworkType::Direct
        } else if i.is_multiple_of(2) {
            NetworkType::Routed
        } else {
            NetworkType::Isolated
        }),
        gateway: Some(format!("10.{a}.{b}.1")),
        prefix_length: Some(24),
        static_ip_ranges: vec![IpRange {
            start: format!("10.{a}.{b}.20"),
            end: format!("10.{a}.{b}.200"),
        }],
        dns: vec![format!("10.{a}.{b}.10")],
        used_ip_addresses: Vec::new(),
    }
}

/// An inventory of `size` networks (at least 10): `mgmt-net` and every name of [`EXTRAS`], then
/// generated ones (`tenant-0011-net`, ...), so every machine of [`machine`] is allowed.
pub fn inventory(size: usize) -> Inventory {
    assert!(size >= 10, "the inventory holds mgmt-net and the 9 extras");
    let mut networks: Vec<Network> = std::iter::once("mgmt-net")
        .chain(EXTRAS)
        .enumerate()
        .map(|(i, name)| network(name, i))
        .collect();
    networks.extend((networks.len()..size).map(|i| network(&format!("tenant-{i:04}-net"), i)));
    Inventory { networks }
}

/// [`machine`] with an inventory of `size` networks.
pub fn machine_with_inventory(nics: usize, size: usize) -> Request {
    let mut request = machine(nics);
    request.inventory = Some(inventory(size));
    request
}

/// The machines the `evaluate` benchmark compares: 1, 3 and 10 NICs, without and with the
/// inventory of the org VDC (10 networks), named like `3nic` and `3nic-inv10`.
pub fn evaluate_cases() -> Vec<(String, Request)> {
    let mut cases = Vec::new();
    for nics in [1, 3, 10] {
        cases.push((format!("{nics}nic"), machine(nics)));
    }
    for nics in [1, 3, 10] {
        cases.push((format!("{nics}nic-inv10"), machine_with_inventory(nics, 10)));
    }
    cases
}

/// A host as the CLI and a server set it up (pooling allocator), with its module cache in
/// `target/bench-cache/<name>`, emptied first.
pub fn host(name: &str) -> Host {
    let dir = cache_dir(name);
    let _ = std::fs::remove_dir_all(&dir);
    Host::new(HostConfig {
        cache_dir: Some(dir),
        ..HostConfig::default()
    })
    .expect("engine starts")
}

/// `target/bench-cache/<name>`.
pub fn cache_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/bench-cache")
        .join(name)
}

/// The built-in CAPVCD policy module, as the host embeds it; `NICPOLICY_BENCH_WASM=FILE`
/// benchmarks another build of it instead (another profile, or post-processed).
pub fn capvcd_wasm() -> &'static [u8] {
    static WASM: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    WASM.get_or_init(|| match std::env::var_os("NICPOLICY_BENCH_WASM") {
        Some(path) => std::fs::read(&path)
            .unwrap_or_else(|err| panic!("{}: {err}", PathBuf::from(path).display())),
        None => nicpolicy::builtin::CAPVCD_WASM.to_vec(),
    })
}

/// The CAPVCD policy loaded with default settings.
pub fn capvcd_policy(host: &Host) -> Policy {
    host.load(capvcd_wasm(), PolicyOptions::default())
        .expect("the CAPVCD policy loads")
}

/// Through the host: encode the request (in the binary format, as the host sends it to this
/// module; JSON for a policy set to [`nicpolicy::RequestFormat::Json`]), fresh instance, guest
/// decode + rules + encode, decode and check the decision.
pub fn wasm(policy: &Policy, request: &Request) -> Decision {
    policy
        .evaluate(request)
        .expect("the CAPVCD policy evaluates")
        .decision
}

/// Native, the rules only: `capvcd::evaluate` on the parsed request.
pub fn native_logic(request: &Request) -> Decision {
    capvcd::evaluate(request)
}

/// Native, what the guest does: request JSON in, rules, decision JSON out.
pub fn native_guest(input: &[u8]) -> Vec<u8> {
    guest::evaluate_json(input, capvcd::evaluate)
}

/// Native, the whole round trip the host path makes, without Wasm: encode the request, the
/// guest's work, decode and check the decision.
pub fn native_round_trip(request: &Request) -> Decision {
    let input = serde_json::to_vec(request).expect("requests encode");
    let output = native_guest(&input);
    nicpolicy::policy::decode_decision(&output).expect("decisions decode")
}

/// [`native_round_trip`] with the request in the binary format (the host's default for
/// modules built with the SDK): encode, the guest's decode, rules and JSON encode, decode and
/// check the decision.
pub fn native_round_trip_binary(request: &Request) -> Decision {
    let mut input = Vec::with_capacity(1024);
    nicpolicy_plugin::binary::encode(request.with_settings(&request.settings), &mut input)
        .expect("requests encode");
    let output = guest::evaluate_binary_request(&input, capvcd::evaluate);
    nicpolicy::policy::decode_decision(&output).expect("decisions decode")
}

/// The request as JSON, as the host sends it.
pub fn request_json(request: &Request) -> Vec<u8> {
    serde_json::to_vec(request).expect("requests encode")
}

/// Where criterion writes its results: `$CRITERION_HOME`, else `$CARGO_TARGET_DIR/criterion`,
/// else the workspace's `target/criterion` (set explicitly so [`median_ns`] finds them).
pub fn criterion_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(dir);
    }
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"))
        .join("criterion")
}

/// Criterion settings for these benchmarks: short warm-up and measurement so a whole run fits
/// in a few minutes on 2 cores (command-line flags still override them).
pub fn criterion() -> criterion::Criterion {
    criterion::Criterion::default()
        .output_directory(&criterion_dir())
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_millis(1500))
        .sample_size(50)
}

/// The median (ns per iteration) criterion measured for `group/function/parameter` in this
/// run, or `None` when it did not run (filtered out, or `cargo test --benches`).
pub fn median_ns(since: std::time::SystemTime, id: &str) -> Option<f64> {
    let path = criterion_dir().join(id).join("new/estimates.json");
    let fresh = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .is_ok_and(|modified| modified >= since);
    if !fresh {
        return None;
    }
    let text = std::fs::read_to_string(&path).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    value["median"]["point_estimate"].as_f64()
}

/// `ns` in the unit a person reads best.
pub fn show_ns(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} us", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

/// `--name N` from the command line, else `default`.
pub fn arg(name: &str, default: usize) -> usize {
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

/// Whether `cargo bench` runs this (`cargo test --benches` runs bench targets without
/// `--bench`: keep that quick).
pub fn benching() -> bool {
    std::env::args().any(|a| a == "--bench")
}

/// The median of `samples` (sorted in place).
pub fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}
