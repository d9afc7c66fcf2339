//! Cold start: making the CAPVCD policy ready from its `.wasm` (compile) against loading it
//! from the compiled-module cache, and the size of every built-in policy module.
//!
//! `cargo bench -p nicpolicy-tests --bench cold_start`; a table of medians, the speed-up and
//! the module sizes follow criterion's output.

mod common;

use std::time::{Duration, SystemTime};

use criterion::SamplingMode;
use nicpolicy::cache::{CacheStatus, ModuleCache};
use nicpolicy::{Host, HostConfig, PolicyOptions};

fn main() {
    let since = SystemTime::now();
    let wasm = common::capvcd_wasm();
    // Compiling every time: no cache.
    let uncached = Host::new(HostConfig {
        cache_dir: None,
        ..HostConfig::default()
    })
    .expect("engine starts");
    // A warm cache, as a restarted host finds it.
    let cached = common::host("cold-start");
    let policy = common::capvcd_policy(&cached);
    assert_eq!(policy.cache_status(), &CacheStatus::Stored);
    let cache = ModuleCache::new(common::cache_dir("cold-start"));
    let sha256 = policy.info().sha256.clone();

    let mut c = common::criterion().configure_from_args();
    let mut group = c.benchmark_group("cold_start");
    // Compiling takes ~100 ms: ten samples of one compile each.
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .measurement_time(Duration::from_secs(3));
    group.bench_function("compile", |b| {
        b.iter(|| nicpolicy::cache::compile(uncached.engine(), wasm).expect("compiles"))
    });
    group.bench_function("load-compile", |b| {
        b.iter(|| {
            uncached
                .load(wasm, PolicyOptions::default())
                .expect("loads")
        })
    });
    group.finish();

    let mut group = c.benchmark_group("cold_start");
    group.bench_function("deserialize", |b| {
        b.iter(|| {
            let (module, status) = cache
                .load_or_compile(cached.engine(), &sha256, || {
                    nicpolicy::cache::compile_within(
                        cached.engine(),
                        wasm,
                        HostConfig::DEFAULT_COMPILE_TIMEOUT,
                    )
                })
                .expect("loads");
            assert_eq!(status, CacheStatus::Hit);
            module
        })
    });
    group.bench_function("load-cached", |b| {
        b.iter(|| {
            let policy = cached.load(wasm, PolicyOptions::default()).expect("loads");
            assert_eq!(policy.cache_status(), &CacheStatus::Hit);
            policy
        })
    });
    group.finish();
    c.final_summary();

    let median = |id: &str| common::median_ns(since, &format!("cold_start/{id}"));
    if let (Some(compile), Some(load_compile), Some(deserialize), Some(load_cached)) = (
        median("compile"),
        median("load-compile"),
        median("deserialize"),
        median("load-cached"),
    ) {
        println!("\n| step | from the .wasm (compile) | from the cache | cache speed-up |");
        println!("|---|---|---|---|");
        println!(
            "| module only | {} | {} | {:.0}x |",
            common::show_ns(compile),
            common::show_ns(deserialize),
            compile / deserialize
        );
        println!(
            "| policy ready (inspect, module, ABI and settings checks) | {} | {} | {:.0}x |",
            common::show_ns(load_compile),
            common::show_ns(load_cached),
            load_compile / load_cached
        );
    }

    println!("\n| policy module | bytes | KB |\n|---|---|---|");
    for builtin in nicpolicy::builtin::POLICIES {
        println!(
            "| {} | {} | {:.1} |",
            builtin.package,
            builtin.wasm.len(),
            builtin.wasm.len() as f64 / 1000.0
        );
    }
}
