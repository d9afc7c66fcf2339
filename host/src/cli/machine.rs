//! The inputs of one machine's decision (`--cluster`, `--machine`, `--old`, `--inventory`,
//! the policies and settings) and the machine judged with them: what `eval` and `render` share.

use std::path::PathBuf;

use nicpolicy::manifest;
use nicpolicy::PolicyChain;

use super::policy_args::{load_chain, policy_specs, PolicyArgs, Positions, ProvisionerArgs};
use super::{runtime, usage, Failure};

/// The inputs of one machine's decision, shared by `eval` and `render`.
#[derive(clap::Args)]
pub struct MachineArgs {
    /// File holding the VCDCluster (a whole `clusterctl generate cluster` output works); the
    /// machine file itself when omitted and it holds one. Without either, the machine is checked
    /// as one whose cluster is not known yet: only the rules that need no cluster apply.
    #[arg(long, value_name = "FILE")]
    pub(super) cluster: Option<PathBuf>,
    /// File holding the VCDMachine or VCDMachineTemplate. When it holds several, each is
    /// evaluated against its own cluster (found as the webhook finds it) unless --machine-name
    /// picks one.
    #[arg(long, value_name = "FILE")]
    pub(super) machine: PathBuf,
    /// Which machine, when the machine file holds several.
    #[arg(long, value_name = "NAME")]
    pub(super) machine_name: Option<String>,
    /// The stored version of the machine: evaluates an UPDATE instead of a CREATE, judged by
    /// what it changes (violations the stored object already has are warnings).
    #[arg(long, value_name = "FILE")]
    pub(super) old: Option<PathBuf>,
    /// The org VDC's networks (see docs/schema.md).
    #[arg(long, value_name = "FILE")]
    pub(super) inventory: Option<PathBuf>,
    /// A policy's settings (YAML or JSON). Each --settings applies to the --policy given before
    /// it, or to the first policy when it comes before every --policy; one per policy. For
    /// example: --policy nic-limit.wasm --settings nic-limit.yaml --policy builtin:capvcd
    /// --settings capvcd.yaml
    #[arg(long = "settings", value_name = "FILE")]
    pub(super) settings: Vec<PathBuf>,
    #[command(flatten)]
    pub(super) policy: PolicyArgs,
    #[command(flatten)]
    pub(super) provisioner: ProvisionerArgs,
}

impl MachineArgs {
    /// The machine file, read.
    pub(super) fn machines(&self) -> Result<manifest::ManifestFile, Failure> {
        manifest::ManifestFile::read(&self.machine).map_err(usage)
    }

    /// The inventory file, read (`None` without --inventory).
    pub(super) fn inventory(&self) -> Result<Option<nicpolicy::plugin::Inventory>, Failure> {
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

    pub(super) fn judge_in(
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
        let request = nicpolicy::request::RequestFiles {
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
    pub(super) fn chain(
        &self,
        positions: &Positions,
        verbose: bool,
    ) -> Result<PolicyChain, Failure> {
        let specs = policy_specs(&self.policy, &self.settings, positions)?;
        self.provisioner
            .apply(load_chain(&self.policy, &specs, verbose)?)
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

impl Judged {
    /// The NICs the provisioner builds for its plan ([`nicpolicy::vcd::built_nics`]).
    pub fn built_nics(&self) -> Vec<nicpolicy::plugin::Nic> {
        let decision = &self.evaluation.decision;
        let extras = decision.extras_of(&self.request.machine);
        nicpolicy::vcd::built_nics(self.chain.builder(), &decision.nics, extras)
    }
}
