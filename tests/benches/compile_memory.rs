//! Peak resident memory of compiling the costliest modules the host still accepts, and of
//! refusing the ones over its compile bounds. Each module is loaded in a child process of its
//! own (this binary, re-run), which reports its peak resident set (`VmHWM`), so one compile's
//! garbage never counts against the next. `cargo bench -p nicpolicy-tests --bench
//! compile_memory`; the figures are in docs/benchmarks.md.

use std::process::Command;
use std::time::Instant;

use nicpolicy::limits::CompileBounds;
use nicpolicy::{Host, HostConfig, PolicyOptions};
use nicpolicy_tests::costly;

const SHAPE_VAR: &str = "NICPOLICY_BENCH_COMPILE_SHAPE";

/// Builds one module to measure.
type Build = Box<dyn Fn() -> Vec<u8>>;

/// The modules measured: a name and how to build it.
fn shapes() -> Vec<(&'static str, Build)> {
    let bounds = CompileBounds::default();
    let functions = bounds.max_functions as usize;
    let locals = bounds.max_locals as usize;
    let body = bounds.max_function_bytes as usize;
    let per_code = (bounds.max_code_bytes as usize / body).max(1);
    vec![
        ("host only (no module)", Box::new(Vec::new)),
        (
            "built-in CAPVCD policy",
            Box::new(|| nicpolicy::builtin::CAPVCD_WASM.to_vec()),
        ),
        (
            "max functions, tiny",
            Box::new(move || costly::tiny_functions(functions - 8).wasm()),
        ),
        (
            "max code in largest functions, max locals",
            Box::new(move || costly::heavy_functions(per_code - 1, locals, body - 64).wasm()),
        ),
        (
            "max code in 400-byte functions",
            Box::new(move || {
                let count = (bounds.max_code_bytes as usize / 420).min(functions - 8);
                costly::heavy_functions(count, 16, 400).wasm()
            }),
        ),
        (
            "max code in 4 KiB functions, 200 locals",
            Box::new(move || {
                let count = (bounds.max_code_bytes as usize / 4200).min(functions - 8);
                costly::heavy_functions(count, 200, 4000).wasm()
            }),
        ),
        (
            "refused: 4 MiB of code in 400-byte functions",
            Box::new(|| costly::heavy_functions(10_000, 16, 400).wasm()),
        ),
        (
            "refused: 100,000 tiny functions",
            Box::new(|| costly::tiny_functions(100_000).wasm()),
        ),
    ]
}

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Child: reads the module, starts a host as `nicpolicy serve` does (no cache, so it
/// compiles), loads it, prints `peak_kib load_ms size outcome`.
fn child(path: &str) {
    // Built by the parent: building a module from text here would count against the peak.
    let bytes = std::fs::read(path).expect("module file");
    let host = Host::new(HostConfig {
        cache_dir: None,
        max_instances: 16,
        ..HostConfig::default()
    })
    .expect("engine starts");
    let started = Instant::now();
    let outcome = if bytes.is_empty() {
        "-".to_string()
    } else {
        match host.load(&bytes, PolicyOptions::default()) {
            Ok(_) => "loaded".to_string(),
            Err(err) => format!("refused: {err}"),
        }
    };
    println!(
        "{} {:.0} {} {outcome}",
        peak_rss_kib(),
        started.elapsed().as_secs_f64() * 1e3,
        bytes.len()
    );
}

fn main() {
    if let Ok(path) = std::env::var(SHAPE_VAR) {
        child(&path);
        return;
    }
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this too: measure either way.
    let exe = std::env::current_exe().expect("own path");
    println!(
        "{:<45} {:>10} {:>10} {:>10}  outcome",
        "module", "size", "peak RSS", "load"
    );
    let dir = std::env::temp_dir().join(format!("nicpolicy-compile-memory-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    for (index, (name, build)) in shapes().iter().enumerate() {
        let path = dir.join(format!("{index}.wasm"));
        std::fs::write(&path, build()).expect("module written");
        let output = Command::new(&exe)
            .env(SHAPE_VAR, &path)
            .output()
            .expect("child runs");
        let text = String::from_utf8_lossy(&output.stdout);
        let mut parts = text.trim().splitn(4, ' ');
        let (peak, ms, size, outcome) = (
            parts.next().unwrap_or("?"),
            parts.next().unwrap_or("?"),
            parts.next().unwrap_or("?"),
            parts.next().unwrap_or("(no output)"),
        );
        let peak_mib = peak
            .parse::<f64>()
            .map_or("?".to_string(), |k| format!("{:.0} MiB", k / 1024.0));
        println!("{name:<45} {size:>10} {peak_mib:>10} {ms:>7} ms  {outcome}");
        if !output.status.success() {
            eprintln!("{}", String::from_utf8_lossy(&output.stderr));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
