//! `nicpolicy bench`: how fast a policy loads and evaluates, beside the built-in CAPVCD policy,
//! on the requests of case files. Each evaluation runs as the webhook serves one: a fresh
//! instance from the pool, the policy's settings, its limits, through a chain.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::anyhow;
use nicpolicy::cases::{self, Case};
use nicpolicy::{Host, HostConfig, PolicyChain, PolicySource, PolicySpec};
use serde::Serialize;

use super::policy_args::{policy_specs, PolicyArgs, Positions};
use super::{out, runtime, usage, Failure, Format};

/// Each --policy is timed on its own, not as a chain.
#[derive(clap::Args)]
pub struct BenchArgs {
    /// Case files, or directories of them (as `nicpolicy test` takes them): each case's request
    /// is one input. Cases that expect a failure or refused settings are left out.
    #[arg(value_name = "PATH", required = true)]
    paths: Vec<PathBuf>,
    /// Timed evaluations per policy and case, after 10 untimed ones.
    #[arg(long, value_name = "N", default_value_t = 200)]
    iterations: usize,
    /// Each policy's settings (YAML or JSON), after its --policy as with `nicpolicy eval`.
    #[arg(long = "settings", value_name = "FILE")]
    settings: Vec<PathBuf>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    output: Format,
    #[command(flatten)]
    policy: PolicyArgs,
}

/// Evaluations before timing starts: the pool's slots and the caches warm up.
const WARM_UP: usize = 10;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PolicyBench {
    policy: String,
    sha256: String,
    /// Whether this is the built-in CAPVCD policy added for reference.
    reference: bool,
    /// Inspect, compile and settings check, without the cache.
    compile_ms: f64,
    /// The same load from the compiled-module cache.
    cache_load_ms: f64,
    cases: Vec<CaseBench>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct CaseBench {
    case: String,
    iterations: usize,
    p50_us: f64,
    p99_us: f64,
    /// The instance's linear memory at its peak.
    memory_bytes: usize,
    /// Why the case was not timed (the policy failed on it).
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

pub fn run(args: BenchArgs, positions: &Positions) -> Result<u8, Failure> {
    if args.iterations == 0 {
        return Err(usage(anyhow!("--iterations must be at least 1")));
    }
    let paths = cases::discover(&args.paths).map_err(usage)?;
    let mut inputs = Vec::new();
    for path in &paths {
        let case = Case::load(path).map_err(usage)?;
        if case.expect.error.is_none() && case.expect.settings_rejected.is_none() {
            inputs.push(case);
        }
    }
    if inputs.is_empty() {
        return Err(usage(anyhow!(
            "no case to time under {} (cases that expect a failure or refused settings are left out)",
            args.paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let mut specs = policy_specs(&args.policy, &args.settings, positions)?;
    let reference = PolicySpec::new(PolicySource::parse("builtin:capvcd").map_err(usage)?);
    let has_reference = specs
        .iter()
        .any(|spec| spec.source.label() == reference.source.label());
    let reference_index = if has_reference {
        None
    } else {
        specs.push(reference);
        Some(specs.len() - 1)
    };

    let cache_dir = private_temp_dir()?;
    let result = bench_all(&args, &specs, reference_index, &inputs, &cache_dir);
    let _ = std::fs::remove_dir_all(&cache_dir);
    let benches = result?;
    let text = match args.output {
        Format::Table => table(&benches),
        Format::Json => serde_json::to_string_pretty(&benches).map_err(runtime)? + "\n",
        Format::Yaml => serde_yaml_ng::to_string(&benches).map_err(runtime)?,
    };
    out::print(&text)?;
    Ok(0)
}

/// A directory only this process can use, for the cache timing.
fn private_temp_dir() -> Result<PathBuf, Failure> {
    let dir = std::env::temp_dir().join(format!("nicpolicy-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(runtime)?;
    }
    #[cfg(not(unix))]
    std::fs::create_dir(&dir).map_err(runtime)?;
    Ok(dir)
}

fn host(cache_dir: Option<PathBuf>, memory: usize) -> Result<Host, Failure> {
    let mut config = HostConfig::default();
    config.cache_dir = cache_dir;
    config.max_memory_bytes = config.max_memory_bytes.max(memory);
    config.max_instances = 4;
    Host::new(config).map_err(runtime)
}

fn bench_all(
    args: &BenchArgs,
    specs: &[PolicySpec],
    reference_index: Option<usize>,
    inputs: &[Case],
    cache_dir: &std::path::Path,
) -> Result<Vec<PolicyBench>, Failure> {
    let memory = specs
        .iter()
        .map(|s| s.limits.memory_bytes)
        .max()
        .unwrap_or(0);
    let uncached = host(None, memory)?;
    let cached = host(Some(cache_dir.to_path_buf()), memory)?;
    // oci:// policies are pulled with the command's registry options, as `eval` pulls them.
    let registry = args.policy.registry.options()?;
    let load = |host: &Host, one: &[PolicySpec]| {
        nicpolicy::spec::ChainLoader::new(host)
            .with_registry(registry.clone())
            .load(one)
            .map_err(usage)
    };
    let progress = std::io::stderr().is_terminal();
    let mut benches = Vec::new();
    for (index, spec) in specs.iter().enumerate() {
        let one = std::slice::from_ref(spec);
        let compiled = load(&uncached, one)?;
        // The first cached load stores the module, the second reads it back.
        load(&cached, one)?;
        let from_cache = load(&cached, one)?;
        let (Some(policy), Some(cached_policy)) =
            (compiled.policies().first(), from_cache.policies().first())
        else {
            return Err(runtime(anyhow!(
                "{}: loaded no policy",
                spec.source.label()
            )));
        };
        let name = policy.name();
        let mut cases = Vec::new();
        for (n, case) in inputs.iter().enumerate() {
            if progress {
                eprint!(
                    "\rbench: {name} ({}/{}): case {}/{} {:<40}",
                    index + 1,
                    specs.len(),
                    n + 1,
                    inputs.len(),
                    case.name()
                );
            }
            cases.push(time_case(&from_cache, case, args.iterations));
        }
        if progress {
            eprint!("\r{:<100}\r", "");
        } else {
            eprintln!(
                "bench: {name}: {} cases x {} evaluations",
                inputs.len(),
                args.iterations
            );
        }
        benches.push(PolicyBench {
            policy: name,
            sha256: policy.info().sha256.clone(),
            reference: reference_index == Some(index),
            compile_ms: ms(policy.load_time()),
            cache_load_ms: ms(cached_policy.load_time()),
            cases,
        });
    }
    Ok(benches)
}

fn time_case(chain: &PolicyChain, case: &Case, iterations: usize) -> CaseBench {
    let mut times = Vec::with_capacity(iterations);
    let mut memory_bytes = 0;
    for i in 0..WARM_UP + iterations {
        match chain.evaluate(&case.request) {
            Ok(evaluation) => {
                let evaluation = evaluation.into_evaluation();
                memory_bytes = memory_bytes.max(evaluation.memory_bytes);
                if i >= WARM_UP {
                    times.push(evaluation.elapsed);
                }
            }
            Err(err) => {
                return CaseBench {
                    case: case.name(),
                    iterations: 0,
                    p50_us: 0.0,
                    p99_us: 0.0,
                    memory_bytes,
                    error: Some(err.to_string()),
                }
            }
        }
    }
    times.sort();
    CaseBench {
        case: case.name(),
        iterations,
        p50_us: us(percentile(&times, 50)),
        p99_us: us(percentile(&times, 99)),
        memory_bytes,
        error: None,
    }
}

/// The `p`th percentile of sorted `times` (nearest rank).
fn percentile(times: &[Duration], p: usize) -> Duration {
    if times.is_empty() {
        return Duration::ZERO;
    }
    let rank = (times.len() * p).div_ceil(100).clamp(1, times.len());
    times[rank - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn table(benches: &[PolicyBench]) -> String {
    let mut rows = vec![[
        "POLICY".to_string(),
        "CASE".to_string(),
        "P50".to_string(),
        "P99".to_string(),
        "MEMORY".to_string(),
    ]];
    let mut loads = String::new();
    for bench in benches {
        let label = if bench.reference {
            format!("{} (reference)", bench.policy)
        } else {
            bench.policy.clone()
        };
        loads.push_str(&format!(
            "{label}: compile {:.1} ms, from the cache {:.2} ms (sha256 {})\n",
            bench.compile_ms,
            bench.cache_load_ms,
            &bench.sha256[..12.min(bench.sha256.len())]
        ));
        for case in &bench.cases {
            let (p50, p99) = match &case.error {
                Some(err) => (format!("failed: {err}"), String::new()),
                None => (
                    format!("{:.1} µs", case.p50_us),
                    format!("{:.1} µs", case.p99_us),
                ),
            };
            rows.push([
                label.clone(),
                case.case.clone(),
                p50,
                p99,
                format!("{} KiB", case.memory_bytes / 1024),
            ]);
        }
    }
    let widths: Vec<usize> = (0..5)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut text = loads;
    text.push('\n');
    for row in &rows {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, cell)| format!("{cell:<width$}", width = widths[i]))
            .collect();
        text.push_str(line.join("   ").trim_end());
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let times: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        assert_eq!(percentile(&times, 50), Duration::from_micros(50));
        assert_eq!(percentile(&times, 99), Duration::from_micros(99));
        assert_eq!(percentile(&times[..1], 99), Duration::from_micros(1));
        assert_eq!(percentile(&[], 50), Duration::ZERO);
    }
}
