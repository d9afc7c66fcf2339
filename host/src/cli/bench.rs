//! `nicpolicy bench`: how fast a policy loads and evaluates, beside the built-in CAPVCD policy,
//! on the requests of case files. Each evaluation runs as the webhook serves one: a fresh
//! instance from the pool, the policy's settings, its limits, through a chain.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::anyhow;
use nicpolicy::cases::{self, Case};
use nicpolicy::{Host, HostConfig, PolicyChain, PolicySpec};
use serde::{Deserialize, Serialize};

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
    /// Also write the figures (JSON, as `-o json` prints them) to FILE: a baseline for
    /// `--compare`.
    #[arg(long, value_name = "FILE")]
    save: Option<PathBuf>,
    /// Compare with a baseline written by `--save`: exit 1, naming each policy, case and figure,
    /// when a figure grew past `--threshold`.
    #[arg(long, value_name = "FILE")]
    compare: Option<PathBuf>,
    /// The growth `--compare` tolerates, in percent.
    #[arg(long, value_name = "PCT", default_value_t = 10.0, requires = "compare")]
    threshold: f64,
    /// The figures `--compare` checks (repeatable): `fuel`, the Wasm instructions an
    /// evaluation consumes, is the same on any machine; `p50` and `p99` are timings, which flap
    /// on shared machines.
    #[arg(long = "figure", value_enum, default_values_t = [Figure::Fuel], requires = "compare")]
    figures: Vec<Figure>,
    /// Time decisions whose NICs carry their sources, as `eval --explain` and `nicpolicy test`
    /// ask for them. Without it, evaluations run as the webhook and the controller run them:
    /// the violations with their sources, the NICs without.
    #[arg(long)]
    nic_sources: bool,
    #[command(flatten)]
    policy: PolicyArgs,
}

/// A figure `--compare` checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Figure {
    /// Wasm fuel per evaluation.
    Fuel,
    /// Median evaluation time.
    P50,
    /// 99th percentile evaluation time.
    P99,
}

/// Evaluations before timing starts: the pool's slots and the caches warm up.
const WARM_UP: usize = 10;

#[derive(Serialize, Deserialize)]
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

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CaseBench {
    case: String,
    iterations: usize,
    p50_us: f64,
    p99_us: f64,
    /// The instance's linear memory at its peak.
    memory_bytes: usize,
    /// Wasm fuel one evaluation consumes (instructions, roughly), instantiation included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fuel: Option<u64>,
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
    let reference = PolicySpec::new(nicpolicy::builtin::CAPVCD.source());
    let has_reference = specs
        .iter()
        .any(|spec| spec.source.label() == reference.source.label());
    let reference_index = if has_reference {
        None
    } else {
        specs.push(reference);
        Some(specs.len() - 1)
    };

    // Read before timing: a baseline that cannot be used fails at once.
    let baseline = args.compare.as_deref().map(read_baseline).transpose()?;
    let cache_dir = private_temp_dir()?;
    let result = bench_all(&args, &specs, reference_index, &inputs, &cache_dir);
    let _ = std::fs::remove_dir_all(&cache_dir);
    let benches = result?;
    let json = serde_json::to_string_pretty(&benches).map_err(runtime)? + "\n";
    let text = match args.output {
        Format::Table => table(&benches),
        Format::Json => json.clone(),
        Format::Yaml => serde_yaml_ng::to_string(&benches).map_err(runtime)?,
    };
    out::print(&text)?;
    if let Some(path) = &args.save {
        std::fs::write(path, &json)
            .map_err(|err| runtime(anyhow!("cannot write {}: {err}", path.display())))?;
        eprintln!("bench: figures saved to {}", path.display());
    }
    let Some((path, baseline)) = args.compare.as_ref().zip(baseline) else {
        return Ok(0);
    };
    let found = compare(&baseline, &benches, &args.figures, args.threshold);
    for line in &found.missing {
        eprintln!("bench: {line}");
    }
    if found.regressions.is_empty() {
        eprintln!(
            "bench: no figure grew more than {}% over {} ({} compared)",
            args.threshold,
            path.display(),
            found.compared
        );
        Ok(0)
    } else {
        for line in &found.regressions {
            eprintln!("bench: regression: {line}");
        }
        eprintln!(
            "bench: {} of {} figures grew more than {}% over {}",
            found.regressions.len(),
            found.compared,
            args.threshold,
            path.display()
        );
        Ok(1)
    }
}

/// A baseline written by `--save`.
fn read_baseline(path: &std::path::Path) -> Result<Vec<PolicyBench>, Failure> {
    let text = std::fs::read_to_string(path).map_err(|err| {
        usage(anyhow!(
            "cannot read the baseline {}: {err}",
            path.display()
        ))
    })?;
    serde_json::from_str(&text).map_err(|err| {
        usage(anyhow!(
            "{}: not a baseline written by `nicpolicy bench --save`: {err}",
            path.display()
        ))
    })
}

/// What [`compare`] found.
#[derive(Debug, Default)]
struct Comparison {
    /// `policy / case: figure before -> after (+N%)`, for each figure past the threshold.
    regressions: Vec<String>,
    /// Policies and cases this run measured that the baseline lacks.
    missing: Vec<String>,
    /// Figures compared.
    compared: usize,
}

/// Compares `now` with `baseline` case by case (matched by policy name and case name).
fn compare(
    baseline: &[PolicyBench],
    now: &[PolicyBench],
    figures: &[Figure],
    threshold: f64,
) -> Comparison {
    let mut found = Comparison::default();
    for policy in now {
        let Some(before) = baseline.iter().find(|b| b.policy == policy.policy) else {
            found
                .missing
                .push(format!("{}: not in the baseline", policy.policy));
            continue;
        };
        for case in &policy.cases {
            let Some(old) = before.cases.iter().find(|c| c.case == case.case) else {
                found.missing.push(format!(
                    "{} / {}: not in the baseline",
                    policy.policy, case.case
                ));
                continue;
            };
            for figure in figures {
                let (was, is, unit) = match figure {
                    Figure::Fuel => match (old.fuel, case.fuel) {
                        (Some(was), Some(is)) => (was as f64, is as f64, ""),
                        _ => {
                            found.missing.push(format!(
                                "{} / {}: no fuel figure to compare",
                                policy.policy, case.case
                            ));
                            continue;
                        }
                    },
                    Figure::P50 => (old.p50_us, case.p50_us, " µs"),
                    Figure::P99 => (old.p99_us, case.p99_us, " µs"),
                };
                found.compared += 1;
                if was > 0.0 && is > was * (1.0 + threshold / 100.0) {
                    found.regressions.push(format!(
                        "{} / {}: {} {was}{unit} -> {is}{unit} (+{:.1}%, threshold {threshold}%)",
                        policy.policy,
                        case.case,
                        figure.name(),
                        (is / was - 1.0) * 100.0
                    ));
                }
            }
        }
    }
    found
}

impl Figure {
    fn name(self) -> &'static str {
        match self {
            Figure::Fuel => "fuel",
            Figure::P50 => "p50",
            Figure::P99 => "p99",
        }
    }
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

fn host(cache_dir: Option<PathBuf>, memory: usize, count_fuel: bool) -> Result<Host, Failure> {
    let mut config = HostConfig::default();
    config.cache_dir = cache_dir;
    config.max_memory_bytes = config.max_memory_bytes.max(memory);
    config.max_instances = 4;
    config.count_fuel = count_fuel;
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
    let uncached = host(None, memory, false)?;
    let cached = host(Some(cache_dir.to_path_buf()), memory, false)?;
    // Fuel is counted on an engine of its own: the counting slows the code it is compiled into.
    let counting = host(None, memory, true)?;
    // oci:// policies are pulled with the command's registry options, as `eval` pulls them.
    let registry = args.policy.registry.options()?;
    let load = |host: &Host, one: &[PolicySpec]| {
        nicpolicy::sources::Sources::with_registry(host, registry.clone())
            .loader(host)
            .load(one)
            // As the webhook evaluates, unless NIC sources are asked for (as --explain does).
            .map(|chain| {
                if args.nic_sources {
                    chain.with_nic_sources(true)
                } else {
                    chain.with_nic_sources(false).without_step_decisions()
                }
            })
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
        let fuel_chain = load(&counting, one)?;
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
            let mut timed = time_case(&from_cache, case, args.iterations);
            if timed.error.is_none() {
                timed.fuel = fuel_chain
                    .evaluate(&case.request)
                    .ok()
                    .and_then(|evaluation| evaluation.into_evaluation().fuel);
            }
            cases.push(timed);
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
                    fuel: None,
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
        fuel: None,
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
        "FUEL".to_string(),
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
                case.fuel
                    .map_or_else(|| "-".to_string(), |fuel| fuel.to_string()),
            ]);
        }
    }
    let widths: Vec<usize> = (0..6)
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
