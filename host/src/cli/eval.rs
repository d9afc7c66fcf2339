//! `nicpolicy eval`: evaluates one machine and prints the decision.

use std::path::PathBuf;

use nicpolicy::manifest;

use super::policy_args::{load_chain, policy_specs, PolicyArgs, Positions, ProvisionerArgs};
use super::render::render_decision;
use super::{runtime, usage, Failure, Format};
use crate::exit;

#[derive(clap::Args)]
pub struct EvalArgs {
    /// File holding the VCDCluster (a whole `clusterctl generate cluster` output works); the
    /// machine file itself when omitted and it holds one. Without either, the machine is checked
    /// as one whose cluster is not known yet: only the rules that need no cluster apply.
    #[arg(long, value_name = "FILE")]
    cluster: Option<PathBuf>,
    /// File holding the VCDMachine or VCDMachineTemplate. When it holds several, each is
    /// evaluated against its own cluster (found as the webhook finds it) unless --machine-name
    /// picks one.
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
    #[command(flatten)]
    provisioner: ProvisionerArgs,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    output: Format,
    /// Also print load and evaluation times, cache use and the policy's log lines (stderr).
    #[arg(short, long)]
    verbose: bool,
}

/// Runs `nicpolicy eval`.
pub fn run(args: EvalArgs, positions: &Positions) -> Result<u8, Failure> {
    let machines = manifest::ManifestFile::read(&args.machine).map_err(usage)?;
    if args.machine_name.is_none()
        && machines
            .of_kinds(&nicpolicy::audit::inputs::MACHINE_KINDS)
            .count()
            > 1
    {
        return eval_many(args, machines, positions);
    }
    // Without --cluster, the machine file's own VCDCluster (a whole clusterctl output); a file
    // without one leaves the cluster unknown, as the webhook treats a machine without cluster.
    let cluster = match args.cluster.as_deref() {
        Some(path) => Some(path),
        None => machines
            .of_kinds(&["VCDCluster"])
            .next()
            .map(|_| args.machine.as_path()),
    };
    let request = manifest::RequestFiles {
        cluster,
        machine: Some(&args.machine),
        machine_name: args.machine_name.as_deref(),
        old: args.old.as_deref(),
        inventory: args.inventory.as_deref(),
    }
    .build()
    .map_err(usage)?;
    let specs = policy_specs(&args.policy, &args.settings, positions)?;
    let chain = args
        .provisioner
        .apply(load_chain(&args.policy, &specs, args.verbose)?);

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
        Format::Json => {
            serde_json::to_string_pretty(&output(&request, &chain, decision)).map_err(usage)? + "\n"
        }
        Format::Yaml => {
            serde_yaml_ng::to_string(&output(&request, &chain, decision)).map_err(usage)?
        }
    };
    super::out::print(&text)?;
    Ok(if decision.allowed { 0 } else { exit::DENIED })
}

/// A machine file with several machines: each against its own cluster, through the audit.
fn eval_many(
    args: EvalArgs,
    machines: manifest::ManifestFile,
    positions: &Positions,
) -> Result<u8, Failure> {
    if let Some(old) = &args.old {
        return Err(usage(anyhow::anyhow!(
            "--old {}: an UPDATE is of one machine; choose it with --machine-name",
            old.display()
        )));
    }
    let clusters = args
        .cluster
        .as_deref()
        .map(manifest::ManifestFile::read)
        .transpose()
        .map_err(usage)?;
    let inventory = args
        .inventory
        .as_deref()
        .map(manifest::read_inventory)
        .transpose()
        .map_err(usage)?;
    let specs = policy_specs(&args.policy, &args.settings, positions)?;
    let chain = args
        .provisioner
        .apply(load_chain(&args.policy, &specs, args.verbose)?);
    super::audit::eval_many(machines, clusters, inventory, &chain, args.output)
}

/// The decision as `-o json|yaml` prints it: its fields, then `unapplied`, the plan fields the
/// provisioner will not apply (left out when there are none).
#[derive(serde::Serialize)]
struct Output<'a> {
    #[serde(flatten)]
    decision: &'a nicpolicy::plugin::Decision,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    unapplied: Vec<nicpolicy::plugin::provisioner::Unapplied>,
}

fn output<'a>(
    request: &nicpolicy::plugin::Request,
    chain: &nicpolicy::PolicyChain,
    decision: &'a nicpolicy::plugin::Decision,
) -> Output<'a> {
    Output {
        decision,
        unapplied: super::render::unapplied(request, chain, decision),
    }
}
