//! `nicpolicy`: evaluate and inspect CAPVCD network policies.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use nicpolicy::cases::{self, Case, Outcome};
use nicpolicy::inspect::{inspect, ModuleInfo};
use nicpolicy::plugin::{Decision, Request};
use nicpolicy::{builtin, manifest, Host, HostConfig, Limits, PolicyChain, PolicyOptions};

mod cli;

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
    /// Run the admission webhook (HTTPS) that defaults and validates VCDMachines and
    /// VCDMachineTemplates with the configured policies.
    Serve(cli::serve::ServeArgs),
    /// Answer one AdmissionReview from a file and print the response, as the webhook would.
    Review(cli::serve::ReviewArgs),
    /// Write a built-in policy module to a file (for a ConfigMap or a site's own chain).
    Export(ExportArgs),
}

#[derive(clap::Args)]
struct ExportArgs {
    /// The built-in policy, such as capvcd or role-based.
    #[arg(value_name = "NAME")]
    name: String,
    /// Where to write the module; stdout when omitted.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

#[derive(clap::Args)]
struct TestArgs {
    /// Case files, or directories searched for .yaml/.yml/.json case files.
    #[arg(value_name = "PATH", required = true)]
    paths: Vec<PathBuf>,
    /// Also write a JUnit XML report to FILE: one testcase per case file (classname: its
    /// directory, name: its file name without extension), for CI systems.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Settings of a later policy of the chain (YAML or JSON), placed after its --policy as with
    /// `nicpolicy eval`. The first policy's settings come from each case file.
    #[arg(long = "settings", value_name = "FILE")]
    settings: Vec<PathBuf>,
    #[command(flatten)]
    policy: PolicyArgs,
}

#[derive(clap::Args)]
struct EvalArgs {
    /// File holding the VCDCluster (a whole `clusterctl generate cluster` output works).
    /// Without it the machine is checked as one whose cluster is not known yet: only the rules
    /// that need no cluster apply.
    #[arg(long, value_name = "FILE")]
    cluster: Option<PathBuf>,
    /// File holding the VCDMachine or VCDMachineTemplate.
    #[arg(long, value_name = "FILE")]
    machine: PathBuf,
    /// Which machine, when the machine file holds several.
    #[arg(long, value_name = "NAME")]
    machine_name: Option<String>,
    /// The stored version of the machine: evaluates an UPDATE instead of a CREATE, judged by
    /// what it changes (violations the stored object already has are warnings).
    #[arg(long, value_name = "FILE")]
    old: Option<PathBuf>,
    /// The org VDC's networks (see docs/schema.md).
    #[arg(long, value_name = "FILE")]
    inventory: Option<PathBuf>,
    /// A policy's settings (YAML or JSON). Each --settings applies to the --policy given before
    /// it, or to the first policy when it comes before every --policy; one per policy. For
    /// example: --policy nic-limit.wasm --settings nic-limit.yaml --policy builtin:capvcd
    /// --settings capvcd.yaml
    #[arg(long = "settings", value_name = "FILE")]
    settings: Vec<PathBuf>,
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
    /// A policy: a module file, or builtin:NAME for a policy built into nicpolicy
    /// (builtin:capvcd). Repeat to chain policies: each is evaluated in order and sees the
    /// extraOvdcNetworks the one before it wrote back; the machine is allowed only if every
    /// policy allows it, violations are listed together (messages prefixed with [policy name]),
    /// and the NIC plan is the last policy's. The built-in CAPVCD policy when omitted.
    #[arg(
        long = "policy",
        value_name = "FILE.wasm|builtin:NAME",
        value_parser = parse_policy_source
    )]
    policies: Vec<PolicySource>,
    /// Refuse a policy unless its sha256 is this; applies to the --policy before it, like
    /// --settings.
    #[arg(long = "sha256", value_name = "HEX")]
    sha256: Vec<String>,
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

/// Where a policy module comes from.
#[derive(Clone, Debug)]
enum PolicySource {
    /// A `.wasm` file.
    File(PathBuf),
    /// A module built into the binary, named with `builtin:NAME`.
    Builtin {
        name: &'static str,
        wasm: &'static [u8],
    },
    /// No `--policy`: the built-in CAPVCD policy.
    Default,
}

impl PolicySource {
    /// How error messages name the module: as the command line gives it.
    fn label(&self) -> String {
        match self {
            PolicySource::File(path) => path.display().to_string(),
            PolicySource::Builtin { name, .. } => format!("builtin:{name}"),
            PolicySource::Default => "the built-in CAPVCD policy".to_string(),
        }
    }

    /// What a load error is prefixed with.
    fn load_context(&self) -> String {
        match self {
            PolicySource::Default => "built-in CAPVCD policy: cannot load".to_string(),
            other => format!("{}: cannot load the policy", other.label()),
        }
    }
}

/// `builtin:NAME` names an embedded policy; anything else is a file.
fn parse_policy_source(text: &str) -> Result<PolicySource, String> {
    match text.strip_prefix("builtin:") {
        Some(name) => builtin::get(name)
            .map(|policy| PolicySource::Builtin {
                name: policy.name,
                wasm: policy.wasm,
            })
            .ok_or_else(|| {
                format!(
                    "no built-in policy named `{name}`; built-in policies: {}",
                    builtin::names().join(", ")
                )
            }),
        None => Ok(PolicySource::File(PathBuf::from(text))),
    }
}

/// One policy of the chain with the options that apply to it.
struct PolicySpec {
    source: PolicySource,
    settings: Option<PathBuf>,
    sha256: Option<String>,
}

/// Where `--policy`, `--settings` and `--sha256` appear on the command line: an option that
/// belongs to one policy applies to the `--policy` before it.
struct Positions {
    policies: Vec<usize>,
    settings: Vec<usize>,
    sha256: Vec<usize>,
}

impl Positions {
    fn of(matches: Option<&ArgMatches>) -> Positions {
        let indices = |id: &str| -> Vec<usize> {
            matches
                // `indices_of` insists on an argument the subcommand defines.
                .filter(|m| m.try_contains_id(id).unwrap_or(false))
                .and_then(|m| m.indices_of(id))
                .map(Iterator::collect)
                .unwrap_or_default()
        };
        Positions {
            policies: indices("policies"),
            settings: indices("settings"),
            sha256: indices("sha256"),
        }
    }

    /// Which policy (0-based) an option at command-line position `at` belongs to: the last
    /// `--policy` before it, or the first policy when it comes before every `--policy`.
    fn owner(&self, at: usize) -> usize {
        self.policies.iter().rposition(|&p| p < at).unwrap_or(0)
    }
}

/// The chain the command line describes: every `--policy` in order (the built-in CAPVCD policy
/// when there is none), each with its own `--settings` and `--sha256`.
fn policy_specs(
    args: &PolicyArgs,
    settings: &[PathBuf],
    positions: &Positions,
) -> Result<Vec<PolicySpec>, Failure> {
    let mut specs: Vec<PolicySpec> = if args.policies.is_empty() {
        vec![PolicySource::Default]
    } else {
        args.policies.clone()
    }
    .into_iter()
    .map(|source| PolicySpec {
        source,
        settings: None,
        sha256: None,
    })
    .collect();
    // Never out of range: positions come from the same command line as the policies.
    let last = specs.len() - 1;
    for (path, &at) in settings.iter().zip(&positions.settings) {
        let spec = &mut specs[positions.owner(at).min(last)];
        if spec.settings.is_some() {
            return Err(usage(anyhow::anyhow!(
                "two --settings for {}: give each policy one, after its --policy",
                spec.source.label()
            )));
        }
        spec.settings = Some(path.clone());
    }
    for (digest, &at) in args.sha256.iter().zip(&positions.sha256) {
        let spec = &mut specs[positions.owner(at).min(last)];
        if spec.sha256.is_some() {
            return Err(usage(anyhow::anyhow!(
                "two --sha256 for {}: give each policy one, after its --policy",
                spec.source.label()
            )));
        }
        spec.sha256 = Some(digest.clone());
    }
    Ok(specs)
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
    // Parsed in two steps: the raw matches keep where each option stood, which decides the
    // policy a --settings or --sha256 belongs to.
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|err| err.exit());
    let positions = Positions::of(matches.subcommand().map(|(_, m)| m));
    let result = match cli.command {
        Command::Eval(args) => eval(args, &positions),
        Command::Inspect(args) => inspect_cmd(args),
        Command::Test(args) => test_cmd(args, &positions),
        Command::Serve(args) => cli::serve::serve(args).map(|()| 0).map_err(usage),
        Command::Export(args) => export_cmd(args),
        Command::Review(args) => match cli::serve::review(args) {
            Ok(true) => Ok(0),
            Ok(false) => Ok(exit::DENIED),
            Err(error) => Err(usage(error)),
        },
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("error: {:#}", failure.error);
            ExitCode::from(failure.code)
        }
    }
}

fn export_cmd(args: ExportArgs) -> Result<u8, Failure> {
    let name = args.name.strip_prefix("builtin:").unwrap_or(&args.name);
    let policy = builtin::get(name).ok_or_else(|| {
        usage(anyhow::anyhow!(
            "no built-in policy named `{name}`; built-in policies: {}",
            builtin::names().join(", ")
        ))
    })?;
    match &args.output {
        Some(path) => {
            std::fs::write(path, policy.wasm)
                .with_context(|| format!("{}: cannot write", path.display()))
                .map_err(usage)?;
            eprintln!(
                "wrote {} ({} bytes, sha256 {})",
                path.display(),
                policy.wasm.len(),
                nicpolicy::inspect::sha256_hex(policy.wasm)
            );
        }
        None => {
            use std::io::Write as _;
            std::io::stdout()
                .write_all(policy.wasm)
                .context("cannot write to stdout")
                .map_err(usage)?;
        }
    }
    Ok(0)
}

fn eval(args: EvalArgs, positions: &Positions) -> Result<u8, Failure> {
    let request = manifest::RequestFiles {
        cluster: args.cluster.as_deref(),
        machine: Some(&args.machine),
        machine_name: args.machine_name.as_deref(),
        old: args.old.as_deref(),
        inventory: args.inventory.as_deref(),
    }
    .build()
    .map_err(usage)?;
    let specs = policy_specs(&args.policy, &args.settings, positions)?;
    let chain = load_chain(&args.policy, specs, args.verbose)?;

    // Judged as the webhook judges: deletions, ratcheted updates, request faults.
    let evaluation = match nicpolicy::lifecycle::judge(&request, |r| chain.evaluate(r)) {
        Ok(evaluation) => evaluation,
        Err(err) => {
            // The error names the policy that failed and says why.
            return Err(Failure {
                code: exit::POLICY_FAILED,
                error: err.into(),
            });
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
        Format::Table => render_decision(&request, &chain, decision),
        Format::Json => serde_json::to_string_pretty(decision).map_err(usage)? + "\n",
        Format::Yaml => serde_yaml_ng::to_string(decision).map_err(usage)?,
    };
    print!("{text}");
    Ok(if decision.allowed { 0 } else { exit::DENIED })
}

/// Loads every policy of the chain, in order, with its own settings and pinned digest.
fn load_chain(
    args: &PolicyArgs,
    specs: Vec<PolicySpec>,
    verbose: bool,
) -> Result<PolicyChain, Failure> {
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
    let mut chain: Option<PolicyChain> = None;
    for spec in specs {
        let settings = match &spec.settings {
            Some(path) => manifest::read_settings(path).map_err(usage)?,
            None => serde_json::Value::Null,
        };
        let options = PolicyOptions {
            limits: Limits::default()
                .with_timeout(args.timeout)
                .with_memory_bytes(args.memory),
            settings,
            sha256: spec.sha256,
        };
        let loaded = match &spec.source {
            PolicySource::File(path) => host.load_file(path, options),
            PolicySource::Builtin { wasm, .. } => host.load(wasm, options),
            PolicySource::Default => host.load(builtin::CAPVCD_WASM, options),
        };
        let policy = loaded
            .with_context(|| spec.source.load_context())
            .map_err(usage)?;
        if let nicpolicy::cache::CacheStatus::Untrusted(why) = policy.cache_status() {
            eprintln!("warning: compiled-module cache not used: {why}");
        }
        if verbose {
            eprintln!(
                "loaded {} (sha256 {}) in {:.2} ms, cache: {:?}",
                policy.name(),
                policy.info().sha256,
                policy.load_time().as_secs_f64() * 1e3,
                policy.cache_status()
            );
        }
        chain = Some(match chain {
            None => PolicyChain::new(policy),
            Some(chain) => chain.then(policy),
        });
    }
    chain.ok_or_else(|| usage(anyhow::anyhow!("no policy to load")))
}

fn yes(flag: bool) -> &'static str {
    if flag {
        "yes"
    } else {
        "no"
    }
}

/// Human-readable decision, in the spirit of `kubectl describe`.
fn render_decision(request: &Request, chain: &PolicyChain, decision: &Decision) -> String {
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
    if request.cluster_unknown {
        let _ = writeln!(out, "Cluster:   (not known yet: checked without it)");
    } else {
        let _ = writeln!(out, "Cluster:   {}", request.cluster.name);
    }
    let policies: Vec<String> = chain
        .policies()
        .iter()
        .map(|policy| {
            let version = policy
                .info()
                .metadata
                .as_ref()
                .map(|m| format!(" {}", m.version))
                .unwrap_or_default();
            format!("{}{version}", policy.name())
        })
        .collect();
    if let [one] = policies.as_slice() {
        let _ = writeln!(out, "Policy:    {one}");
    } else {
        let _ = writeln!(out, "Policies:  {}", policies.join(" -> "));
    }
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

fn test_cmd(args: TestArgs, positions: &Positions) -> Result<u8, Failure> {
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
    let specs = policy_specs(&args.policy, &args.settings, positions)?;
    if let Some(path) = specs.first().and_then(|spec| spec.settings.as_ref()) {
        return Err(usage(anyhow::anyhow!(
            "--settings {}: each case file sets the first policy's settings; \
             --settings can only apply to a later policy of the chain",
            path.display()
        )));
    }
    let chain = load_chain(&args.policy, specs, false)?;
    println!("running {} cases against {}", paths.len(), chain.name());
    let started = Instant::now();
    let mut reports = Vec::with_capacity(paths.len());
    for path in &paths {
        let case_started = Instant::now();
        let outcome = match Case::load(path) {
            Ok(case) => chain.run_case(&case),
            Err(err) => Outcome::Failed {
                mismatches: vec!["the case could not be loaded".to_string()],
                actual: format!("{err}"),
            },
        };
        let report = CaseReport {
            path: path.clone(),
            outcome,
            elapsed: case_started.elapsed(),
        };
        let verdict = match report.outcome {
            Outcome::Passed => "ok",
            Outcome::Failed { .. } => "FAILED",
        };
        println!("case {} ... {verdict}", report.name());
        reports.push(report);
    }
    let failures: Vec<&CaseReport> = reports
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Failed { .. }))
        .collect();
    if !failures.is_empty() {
        println!("\nfailures:");
        for report in &failures {
            if let Outcome::Failed { mismatches, actual } = &report.outcome {
                println!("\n---- {} ----", report.path.display());
                for m in mismatches {
                    println!("  - {m}");
                }
                println!("  actual:");
                for line in actual.lines() {
                    println!("    {line}");
                }
            }
        }
        println!();
    }
    println!(
        "{} passed, {} failed",
        reports.len() - failures.len(),
        failures.len()
    );
    if let Some(junit) = &args.junit {
        let xml = junit_report(&chain.name(), &reports, started.elapsed());
        std::fs::write(junit, xml)
            .with_context(|| format!("{}: cannot write the JUnit report", junit.display()))
            .map_err(usage)?;
    }
    Ok(if failures.is_empty() { 0 } else { 1 })
}

/// One case's result, as `nicpolicy test` reports it.
struct CaseReport {
    path: PathBuf,
    outcome: Outcome,
    elapsed: Duration,
}

impl CaseReport {
    /// The case file's name without extension.
    fn name(&self) -> String {
        self.path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// The case file's directory, as given on the command line (`.` for a bare file name).
    fn directory(&self) -> String {
        match self.path.parent() {
            Some(dir) if dir != Path::new("") => dir.display().to_string(),
            _ => ".".to_string(),
        }
    }
}

/// A JUnit XML report: one testsuite (named after the chain) with one testcase per case file.
fn junit_report(suite: &str, reports: &[CaseReport], elapsed: Duration) -> String {
    let failures = reports
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Failed { .. }))
        .count();
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        xml,
        "<testsuites name=\"nicpolicy test\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\" time=\"{time:.3}\">",
        tests = reports.len(),
        time = elapsed.as_secs_f64(),
    );
    let _ = writeln!(
        xml,
        "  <testsuite name=\"{name}\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\" skipped=\"0\" time=\"{time:.3}\">",
        name = xml_escape(suite, true),
        tests = reports.len(),
        time = elapsed.as_secs_f64(),
    );
    for report in reports {
        let _ = write!(
            xml,
            "    <testcase classname=\"{classname}\" name=\"{name}\" time=\"{time:.3}\"",
            classname = xml_escape(&report.directory(), true),
            name = xml_escape(&report.name(), true),
            time = report.elapsed.as_secs_f64(),
        );
        match &report.outcome {
            Outcome::Passed => xml.push_str("/>\n"),
            Outcome::Failed { mismatches, actual } => {
                let mut body = String::new();
                for m in mismatches {
                    let _ = writeln!(body, "- {m}");
                }
                let _ = write!(body, "actual:\n{actual}");
                let _ = writeln!(
                    xml,
                    ">\n      <failure message=\"{message}\">{body}</failure>\n    </testcase>",
                    message = xml_escape(&mismatches.join("; "), true),
                    body = xml_escape(&body, false),
                );
            }
        }
    }
    xml.push_str("  </testsuite>\n</testsuites>\n");
    xml
}

/// `text` made safe for XML 1.0. Markup characters become entities. In attribute values, line
/// breaks and tabs become character references, because a parser would turn the raw characters
/// into spaces; carriage returns always do, because parsers fold them into line feeds. Characters
/// XML 1.0 cannot hold even as references (other control characters, U+FFFE, U+FFFF) are
/// written as the text `\u0001`.
fn xml_escape(text: &str, attribute: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\r' => out.push_str("&#13;"),
            '\n' if attribute => out.push_str("&#10;"),
            '\t' if attribute => out.push_str("&#9;"),
            '\n' | '\t' => out.push(c),
            c if u32::from(c) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}
