//! `nicpolicy eval`: evaluates one machine and prints the decision.

use std::path::PathBuf;

use nicpolicy::manifest;

use super::policy_args::{load_chain, policy_specs, PolicyArgs, Positions};
use super::render::render_decision;
use super::{runtime, usage, Failure, Format};
use crate::exit;

#[derive(clap::Args)]
pub struct EvalArgs {
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

/// Runs `nicpolicy eval`.
pub fn run(args: EvalArgs, positions: &Positions) -> Result<u8, Failure> {
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
    let chain = load_chain(&args.policy, &specs, args.verbose)?;

    // The error names the policy that failed and says why.
    // Judged as the webhook judges: deletions, ratcheted updates, request faults.
    let evaluation =
        nicpolicy::lifecycle::judge(&request, |r| chain.evaluate(r)).map_err(runtime)?;
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
