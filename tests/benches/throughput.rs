//! Evaluations per second of one loaded CAPVCD policy shared by 1 and 2 threads, a fresh
//! instance for every evaluation (a 3-NIC worker, and a 10-NIC one with the inventory).
//!
//! `cargo bench -p nicpolicy-tests --bench throughput`; the evaluations per second follow
//! criterion's output.

mod common;

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant, SystemTime};

use criterion::{BenchmarkId, Throughput};
use nicpolicy::Policy;
use nicpolicy_plugin::Request;

const THREADS: [usize; 2] = [1, 2];

fn cases() -> [(&'static str, Request); 2] {
    [
        ("3nic", common::machine(3)),
        ("10nic-inv10", common::machine_with_inventory(10, 10)),
    ]
}

/// Runs `iters` evaluations split over `threads` threads that start together; returns the
/// wall-clock time from the start to the last one done.
fn run(policy: &Policy, request: &Request, threads: usize, iters: u64) -> Duration {
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|scope| {
        for t in 0..threads as u64 {
            let share = iters / threads as u64 + u64::from(t < iters % threads as u64);
            let barrier = &barrier;
            scope.spawn(move || {
                barrier.wait();
                for _ in 0..share {
                    black_box(common::wasm(policy, black_box(request)));
                }
            });
        }
        barrier.wait();
        let started = Instant::now();
        // Leaving the scope joins every thread.
        started
    })
    .elapsed()
}

fn main() {
    let since = SystemTime::now();
    let host = common::host("throughput");
    let policy = common::capvcd_policy(&host);
    let mut c = common::criterion().configure_from_args();
    let mut group = c.benchmark_group("throughput");
    group.throughput(Throughput::Elements(1));
    for (name, request) in cases() {
        for threads in THREADS {
            group.bench_with_input(
                BenchmarkId::new(format!("{threads}-thread"), name),
                &request,
                |b, r| b.iter_custom(|iters| run(&policy, r, threads, iters)),
            );
        }
    }
    group.finish();
    c.final_summary();

    let mut lines = Vec::new();
    for (name, _) in cases() {
        for threads in THREADS {
            if let Some(ns) =
                common::median_ns(since, &format!("throughput/{threads}-thread/{name}"))
            {
                lines.push(format!("| {name} | {threads} | {:.0} |", 1e9 / ns));
            }
        }
    }
    if !lines.is_empty() {
        println!("\n| machine | threads | evaluations/s (median) |\n|---|---|---|");
        println!("{}", lines.join("\n"));
    }
}
