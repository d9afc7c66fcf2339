//! `nicpolicy`: evaluate and inspect CAPVCD network policies.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use nicpolicy::cases::{self, Case, Outcome};
use nicpolicy::inspect::{inspect, ModuleInfo};
use nicpolicy::plugin::{Decision, Request};
use nicpolicy::{builtin, manifest, Host, HostConfig, Limits, Policy, PolicyOptions};

/// Exit codes, as documented in the README.
mod exit {
    pub const DENIED: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const POLICY_FAILED: u8 = 3;
}

#[derive(Parser)]
#[command(
    name = "nicpolicy",
    version,
    about = "Network defaulting and validation for CAPVCD machines, as WebAssembly policies",
    after_help = "Exit codes: 0 allowed, 1 denied, 2 bad usage or input, 3 the policy failed at run time."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Evaluate a policy for one machine and print its decision (NIC plan, violations).
    Eval(EvalArgs),
    /// Show a policy module's metadata, imports, exports and sha256.
    Inspect(InspectArgs),
    /// Run case files (manifests plus the expected decision) against a policy.
    Test(TestArgs),
}

#[derive(clap::Args)]
struct TestArgs {
    /// Case files, or directories searched for .yaml/.yml/.json case files.
    #[arg(value_name = "PATH", required = true)]
    paths: Vec<PathBuf>,
    #[command(flatten)]
    policy: PolicyArgs,
}

#[derive(clap::Args)]
struct EvalArgs {
    /// File holding the VCDCluster (a whole `clusterctl generate cluster` output works).
    #[arg(long, value_name = "FILE")]
    cluster: PathBuf,
    /// File holding the VCDMachine or VCDMachineTemplate.
    #[arg(long, value_name = "FILE")]
    machine: PathBuf,
    /// Which machine, when the machine file holds several.
    #[arg(long, value_name = "NAME")]
    machine_name: Option<String>,
    /// The stored version of the machine: evaluates an UPDATE instead of a CREATE.
    #[arg(long, value_name = "FILE")]
    old: Option<PathBuf>,
    /// The org VDC's networks (see docs/schema.md).
    #[arg(long, value_name = "FILE")]
    inventory: Option<PathBuf>,
    /// The policy's settings (YAML or JSON).
    #[arg(long, value_name = "FILE")]
    settings: Option<PathBuf>,
    #[command(flatten)]
    policy: PolicyArgs,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    output: Format,
    /// Also print load and evaluation times, cache use and the policy's log lines (stderr).
    #[arg(short, long)]
    verbose: bool,
}

#[derive(clap::Args)]
struct PolicyArgs {
    /// Policy module; the built-in CAPVCD policy when omitted.
    #[arg(long, value_name = "FILE.wasm")]
    policy: Option<PathBuf>,
    /// Refuse the policy unless its sha256 is this.
    #[arg(long, value_name = "HEX")]
    sha256: Option<String>,
    /// Time limit for one evaluation, like 250ms or 2s.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = nicpolicy::limits::parse_duration)]
    timeout: Duration,
    /// Memory cap for the policy, like 64Mi.
    #[arg(long, value_name = "SIZE", default_value = "64Mi", value_parser = nicpolicy::limits::parse_size)]
    memory: usize,
    /// Compile the module without reading or writing the compiled-module cache.
    #[arg(long)]
    no_cache: bool,
}

#[derive(clap::Args)]
struct InspectArgs {
    /// Policy module; the built-in CAPVCD policy when omitted.
    #[arg(value_name = "FILE.wasm")]
    file: Option<PathBuf>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    output: Format,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Table,
    Json,
    Yaml,
}

/// An error with the exit code it ends the process with.
struct Failure {
    code: u8,
    error: anyhow::Error,
}

fn usage(error: impl Into<anyhow::Error>) -> Failure {
    Failure {
        code: exit::USAGE,
        error: error.into(),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Eval(args) => eval(args),
        Command::Inspect(args) => inspect_cmd(args),
        Command::Test(args) => test_cmd(args),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("error: {:#}", failure.error);
            ExitCode::from(failure.code)
        }
    }
}

fn eval(args: EvalArgs) -> Result<u8, Failure> {
    let request = manifest::RequestFiles {
        cluster: Some(&args.cluster),
        machine: Some(&args.machine),
        machine_name: args.machine_name.as_deref(),
        old: args.old.as_deref(),
        inventory: args.inventory.as_deref(),
    }
    .build()
    .map_err(usage)?;
    let settings = match &args.settings {
        Some(path) => manifest::read_settings(path).map_err(usage)?,
        None => serde_json::Value::Null,
    };
    let policy = load_policy(&args.policy, settings, args.verbose)?;

    let evaluation = match policy.evaluate(&request) {
        Ok(evaluation) => evaluation,
        Err(err) => {
            return Err(Failure {
                code: exit::POLICY_FAILED,
                error: anyhow::Error::new(err).context(format!("policy {} failed", policy.name())),
            })
        }
    };
    if args.verbose {
        for line in &evaluation.logs {
            eprintln!("policy log [{:?}]: {}", line.level, line.message);
        }
        eprintln!(
            "evaluated in {:.3} ms",
            evaluation.elapsed.as_secs_f64() * 1e3
        );
    }
    let decision = &evaluation.decision;
    let text = match args.output {
        Format::Table => render_decision(&request, &policy, decision),
        Format::Json => serde_json::to_string_pretty(decision).map_err(usage)? + "\n",
        Format::Yaml => serde_yaml_ng::to_string(decision).map_err(usage)?,
    };
    print!("{text}");
    Ok(if decision.allowed { 0 } else { exit::DENIED })
}

fn load_policy(
    args: &PolicyArgs,
    settings: serde_json::Value,
    verbose: bool,
) -> Result<Policy, Failure> {
    let mut config = HostConfig::default();
    if args.no_cache {
        config.cache_dir = None;
    }
    config.max_memory_bytes = config.max_memory_bytes.max(args.memory);
    // The CLI evaluates one machine: a small pool is enough.
    config.max_instances = 4;
    let host = Host::new(config).map_err(|err| Failure {
        code: exit::POLICY_FAILED,
        error: err.into(),
    })?;
    let options = PolicyOptions {
        limits: Limits::default()
            .with_timeout(args.timeout)
            .with_memory_bytes(args.memory),
        settings,
        sha256: args.sha256.clone(),
    };
    let loaded = match &args.policy {
        Some(path) => host
            .load_file(path, options)
            .with_context(|| format!("{}: cannot load the policy", path.display())),
        None => host
            .load(builtin::CAPVCD_WASM, options)
            .context("built-in CAPVCD policy: cannot load"),
    };
    let policy = loaded.map_err(usage)?;
    if verbose {
        eprintln!(
            "loaded {} (sha256 {}) in {:.2} ms, cache: {:?}",
            policy.name(),
            policy.info().sha256,
            policy.load_time().as_secs_f64() * 1e3,
            policy.cache_status()
        );
    }
    Ok(policy)
}

fn yes(flag: bool) -> &'static str {
    if flag {
        "yes"
    } else {
        "no"
    }
}

/// Human-readable decision, in the spirit of `kubectl describe`.
fn render_decision(request: &Request, policy: &Policy, decision: &Decision) -> String {
    let mut out = String::new();
    let machine = &request.machine;
    let namespace = if machine.namespace.is_empty() {
        String::new()
    } else {
        format!("{}/", machine.namespace)
    };
    let _ = writeln!(
        out,
        "Machine:   {} {namespace}{} ({:?}, {})",
        request.kind.as_str(),
        machine.name,
        request.operation,
        match machine.role {
            nicpolicy::plugin::Role::ControlPlane => "control plane",
            nicpolicy::plugin::Role::Worker => "worker",
        }
    );
    let _ = writeln!(out, "Cluster:   {}", request.cluster.name);
    let version = policy
        .info()
        .metadata
        .as_ref()
        .map(|m| format!(" {}", m.version))
        .unwrap_or_default();
    let _ = writeln!(out, "Policy:    {}{version}", policy.name());
    let _ = writeln!(
        out,
        "Decision:  {}",
        if decision.allowed {
            "allowed"
        } else {
            "denied"
        }
    );

    if !decision.nics.is_empty() {
        let mut rows = vec![[
            "NIC".to_string(),
            "NETWORK".to_string(),
            "PRIMARY".to_string(),
            "IP MODE".to_string(),
            "IP ADDRESS".to_string(),
            "ADAPTER".to_string(),
            "CONNECTED".to_string(),
        ]];
        for nic in &decision.nics {
            rows.push([
                nic.index.to_string(),
                nic.network.clone(),
                yes(nic.primary).to_string(),
                nic.ip_allocation_mode.as_str().to_string(),
                nic.ip_address.clone().unwrap_or_else(|| "-".to_string()),
                nic.adapter_type.as_str().to_string(),
                yes(nic.connected).to_string(),
            ]);
        }
        out.push('\n');
        out.push_str(&table(&rows));
    }
    if !decision.vapp_networks.is_empty() {
        let _ = writeln!(
            out,
            "\nvApp networks: {}",
            decision.vapp_networks.join(", ")
        );
    }
    if let Some(extras) = &decision.extra_ovdc_networks {
        if *extras != machine.extra_ovdc_networks {
            let _ = writeln!(
                out,
                "Defaulted {}.extraOvdcNetworks: [{}]",
                request.kind.spec_path(),
                extras.join(", ")
            );
        }
    }
    if !decision.violations.is_empty() {
        let _ = writeln!(out, "\nViolations:");
        for v in &decision.violations {
            let _ = writeln!(out, "  {} ({:?}): {}", v.field, v.reason, v.message);
        }
    }
    if !decision.warnings.is_empty() {
        let _ = writeln!(out, "\nWarnings:");
        for w in &decision.warnings {
            let _ = writeln!(out, "  {w}");
        }
    }
    out
}

/// Left-aligned columns separated by three spaces, like kubectl's tables.
fn table<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == N {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}   ", width = widths[i]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn inspect_cmd(args: InspectArgs) -> Result<u8, Failure> {
    let (label, bytes) = match &args.file {
        Some(path) => (
            path.display().to_string(),
            std::fs::read(path)
                .with_context(|| format!("{}: cannot read", path.display()))
                .map_err(usage)?,
        ),
        None => (
            "(built-in CAPVCD policy)".to_string(),
            builtin::CAPVCD_WASM.to_vec(),
        ),
    };
    let info = inspect(&bytes)
        .with_context(|| format!("{label}: cannot inspect"))
        .map_err(usage)?;
    let abi_check = info.check_abi();
    let text = match args.output {
        Format::Table => render_info(&label, &info, abi_check.as_ref().err()),
        Format::Json | Format::Yaml => {
            let value = info_json(&info, abi_check.as_ref().err());
            if args.output == Format::Json {
                serde_json::to_string_pretty(&value).map_err(usage)? + "\n"
            } else {
                serde_yaml_ng::to_string(&value).map_err(usage)?
            }
        }
    };
    print!("{text}");
    match abi_check {
        Ok(()) => Ok(0),
        Err(err) => Err(usage(
            anyhow::Error::new(err).context(format!("{label}: not a valid ABI v1 policy")),
        )),
    }
}

fn info_json(info: &ModuleInfo, problem: Option<&nicpolicy::LoadError>) -> serde_json::Value {
    let items = |items: &[nicpolicy::inspect::Item]| -> Vec<serde_json::Value> {
        items
            .iter()
            .map(|i| {
                let name = if i.module.is_empty() {
                    i.name.clone()
                } else {
                    format!("{}.{}", i.module, i.name)
                };
                serde_json::json!({"name": name, "type": i.ty.to_string()})
            })
            .collect()
    };
    serde_json::json!({
        "sha256": info.sha256,
        "size": info.size,
        "metadata": info.metadata,
        "imports": items(&info.imports),
        "exports": items(&info.exports),
        "abiCheck": problem.map_or("ok".to_string(), |p| p.to_string()),
    })
}

fn render_info(label: &str, info: &ModuleInfo, problem: Option<&nicpolicy::LoadError>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "File:         {label}");
    let _ = writeln!(out, "sha256:       {}", info.sha256);
    let _ = writeln!(out, "Size:         {} bytes", info.size);
    match &info.metadata {
        Some(meta) => {
            let _ = writeln!(out, "Name:         {}", meta.name);
            let _ = writeln!(out, "Version:      {}", meta.version);
            let _ = writeln!(out, "ABI version:  {}", meta.abi_version);
            let _ = writeln!(out, "Description:  {}", meta.description);
        }
        None => {
            let _ = writeln!(out, "Metadata:     (no nicpolicy.metadata section)");
        }
    }
    let list = |out: &mut String, title: &str, items: &[nicpolicy::inspect::Item]| {
        let _ = writeln!(out, "{title}:");
        if items.is_empty() {
            let _ = writeln!(out, "  (none)");
        }
        for i in items {
            let name = if i.module.is_empty() {
                i.name.clone()
            } else {
                format!("{}.{}", i.module, i.name)
            };
            let _ = writeln!(out, "  {name:<30} {}", i.ty);
        }
    };
    list(&mut out, "Imports", &info.imports);
    list(&mut out, "Exports", &info.exports);
    let _ = writeln!(
        out,
        "ABI v1 check: {}",
        problem.map_or("ok".to_string(), |p| p.to_string())
    );
    let _ = writeln!(out, "Pin with:     --sha256 {}", info.sha256);
    out
}

fn test_cmd(args: TestArgs) -> Result<u8, Failure> {
    let paths = cases::discover(&args.paths).map_err(usage)?;
    if paths.is_empty() {
        return Err(usage(anyhow::anyhow!(
            "no case files (.yaml, .yml, .json) under {}",
            args.paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let policy = load_policy(&args.policy, serde_json::Value::Null, false)?;
    println!("running {} cases against {}", paths.len(), policy.name());
    let mut failures = Vec::new();
    let mut passed = 0usize;
    for path in &paths {
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let outcome = match Case::load(path) {
            Ok(case) => case.run(&policy),
            Err(err) => Outcome::Failed {
                mismatches: vec!["the case could not be loaded".to_string()],
                actual: format!("{err}"),
            },
        };
        match outcome {
            Outcome::Passed => {
                passed += 1;
                println!("case {name} ... ok");
            }
            Outcome::Failed { mismatches, actual } => {
                println!("case {name} ... FAILED");
                failures.push((path.clone(), mismatches, actual));
            }
        }
    }
    if !failures.is_empty() {
        println!("\nfailures:");
        for (path, mismatches, actual) in &failures {
            println!("\n---- {} ----", path.display());
            for m in mismatches {
                println!("  - {m}");
            }
            println!("  actual:");
            for line in actual.lines() {
                println!("    {line}");
            }
        }
        println!();
    }
    println!("{passed} passed, {} failed", failures.len());
    Ok(if failures.is_empty() { 0 } else { 1 })
}
