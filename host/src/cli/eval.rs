//! `nicpolicy eval`: evaluates one machine and prints the decision.

use std::path::PathBuf;

use nicpolicy::manifest;

use nicpolicy::PolicyChain;

use super::policy_args::{load_chain, policy_specs, PolicyArgs, Positions, ProvisionerArgs};
use super::render::render_decision;
use super::{runtime, usage, Failure, Format};
use crate::exit;

/// The inputs of one machine's decision, shared by `eval` and `render`.
#[derive(clap::Args)]
pub struct MachineArgs {
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
}

impl MachineArgs {
    /// The machine file, read.
    fn machines(&self) -> Result<manifest::ManifestFile, Failure> {
        manifest::ManifestFile::read(&self.machine).map_err(usage)
    }

    /// The inventory file, read (`None` without --inventory).
    fn inventory(&self) -> Result<Option<nicpolicy::plugin::Inventory>, Failure> {
        self.inventory
            .as_deref()
            .map(manifest::read_inventory)
            .transpose()
            .map_err(usage)
    }

    /// The inventory file's path.
    pub fn inventory_path(&self) -> Option<&std::path::Path> {
        self.inventory.as_deref()
    }

    /// Loads the chain and judges one machine as the webhook judges it (deletions, ratcheted
    /// updates, request faults); several machines in the file need --machine-name.
    pub fn judge(&self, positions: &Positions, verbose: bool) -> Result<Judged, Failure> {
        let machines = self.machines()?;
        self.judge_in(&machines, positions, verbose)
    }

    fn judge_in(
        &self,
        machines: &manifest::ManifestFile,
        positions: &Positions,
        verbose: bool,
    ) -> Result<Judged, Failure> {
        // Without --cluster, the machine file's own VCDCluster (a whole clusterctl output); a
        // file without one leaves the cluster unknown, as the webhook treats a machine without
        // cluster.
        let cluster = match self.cluster.as_deref() {
            Some(path) => Some(path),
            None => machines
                .of_kinds(&["VCDCluster"])
                .next()
                .map(|_| self.machine.as_path()),
        };
        let request = manifest::RequestFiles {
            cluster,
            machine: Some(&self.machine),
            machine_name: self.machine_name.as_deref(),
            old: self.old.as_deref(),
            inventory: self.inventory.as_deref(),
        }
        .build()
        .map_err(usage)?;
        let chain = self.chain(positions, verbose)?;
        // The error names the policy that failed and says why.
        let evaluation =
            nicpolicy::lifecycle::judge(&request, |r| chain.evaluate(r)).map_err(runtime)?;
        Ok(Judged {
            request,
            chain,
            evaluation,
        })
    }

    /// The chain of --policy (with its --settings), reporting what the provisioner will not
    /// apply.
    fn chain(&self, positions: &Positions, verbose: bool) -> Result<PolicyChain, Failure> {
        let specs = policy_specs(&self.policy, &self.settings, positions)?;
        Ok(self
            .provisioner
            .apply(load_chain(&self.policy, &specs, verbose)?))
    }
}

/// One machine, judged.
pub struct Judged {
    /// The request the policies saw.
    pub request: nicpolicy::plugin::Request,
    /// The chain that judged it.
    pub chain: PolicyChain,
    /// Its decision, logs and time.
    pub evaluation: nicpolicy::ChainEvaluation,
}

#[derive(clap::Args)]
pub struct EvalArgs {
    #[command(flatten)]
    machine: MachineArgs,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    output: Format,
    /// Also print load and evaluation times, cache use and the policy's log lines (stderr).
    #[arg(short, long)]
    verbose: bool,
}

/// Runs `nicpolicy eval`.
pub fn run(args: EvalArgs, positions: &Positions) -> Result<u8, Failure> {
    let machines = args.machine.machines()?;
    if args.machine.machine_name.is_none()
        && machines
            .of_kinds(&nicpolicy::audit::inputs::MACHINE_KINDS)
            .count()
            > 1
    {
        return eval_many(args, machines, positions);
    }
    let Judged {
        request,
        chain,
        evaluation,
    } = args.machine.judge_in(&machines, positions, args.verbose)?;
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
    let unapplied = &evaluation.unapplied;
    let output = Output {
        decision,
        unapplied,
    };
    let text = match args.output {
        Format::Table => render_decision(&request, &chain, decision, unapplied),
        Format::Json => serde_json::to_string_pretty(&output).map_err(usage)? + "\n",
        Format::Yaml => serde_yaml_ng::to_string(&output).map_err(usage)?,
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
    let inputs = &args.machine;
    if let Some(old) = &inputs.old {
        return Err(usage(anyhow::anyhow!(
            "--old {}: an UPDATE is of one machine; choose it with --machine-name",
            old.display()
        )));
    }
    let clusters = inputs
        .cluster
        .as_deref()
        .map(manifest::ManifestFile::read)
        .transpose()
        .map_err(usage)?;
    let inventory = inputs.inventory()?;
    let chain = inputs.chain(positions, args.verbose)?;
    super::audit::eval_many(machines, clusters, inventory, &chain, args.output)
}

/// The decision as `-o json|yaml` prints it: its fields, then `unapplied`, the plan fields the
/// provisioner will not apply (left out when there are none).
#[derive(serde::Serialize)]
struct Output<'a> {
    #[serde(flatten)]
    decision: &'a nicpolicy::plugin::Decision,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    unapplied: &'a [nicpolicy::plugin::provisioner::Unapplied],
}
