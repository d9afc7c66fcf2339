//! `nicpolicy render`: a machine's NIC plan as the documents that build it, the Cloud Director
//! `NetworkConnectionSection` (`render vcd`) and the guest's cloud-init network config
//! (`render network-config`). Both take `nicpolicy eval`'s inputs and judge the machine the same
//! way first: a denied machine is built by nobody, so nothing is rendered for it.

use std::path::PathBuf;

use anyhow::{anyhow, Context as _};
use nicpolicy::network_config::{self, BootstrapVersion};
use nicpolicy::vcd;

use super::machine::{Judged, MachineArgs};
use super::policy_args::Positions;
use super::{usage, Failure};
use crate::exit;

#[derive(clap::Args)]
pub struct RenderArgs {
    #[command(subcommand)]
    what: Rendering,
}

#[derive(clap::Subcommand)]
enum Rendering {
    /// The NetworkConnectionSection (Cloud Director API XML) a provisioner PUTs to the VM for the
    /// machine's plan, with the vApp networks to attach on stderr. Fields the provisioner will
    /// not apply are named on stderr; --built writes what it PUTs instead.
    Vcd(VcdArgs),
    /// cloud-init network-config version 2 for the machine's VM, from its plan as the
    /// provisioner (--provisioner) builds it, the VM's NetworkConnectionSection (--nics: MAC and
    /// pool addresses) and the inventory: one ethernets entry per NIC matched by MAC, exactly
    /// one default route on the primary. The kubelet's node-ip patch goes to --kubelet-patch
    /// (or stderr).
    NetworkConfig(NetworkConfigArgs),
}

#[derive(clap::Args)]
struct VcdArgs {
    #[command(flatten)]
    machine: MachineArgs,
    /// Write what the provisioner (--provisioner) PUTs rather than the plan: stock CAPVCD every
    /// NIC POOL, VMXNET3, connected; Deckhouse's build DHCP.
    #[arg(long)]
    built: bool,
}

#[derive(clap::Args)]
struct NetworkConfigArgs {
    #[command(flatten)]
    machine: MachineArgs,
    /// The VM's NetworkConnectionSection as Cloud Director returns it (GET
    /// <vm>/networkConnectionSection/), once its NICs exist.
    #[arg(long, value_name = "FILE")]
    nics: PathBuf,
    /// The Cluster API bootstrap version of the kubelet patch (v1beta2 writes kubeletExtraArgs
    /// as a name/value list).
    #[arg(long, value_name = "VERSION", default_value = "v1beta1", value_parser = ["v1beta1", "v1beta2"])]
    bootstrap_version: String,
    /// Write the kubelet node-ip patch to FILE instead of stderr.
    #[arg(long, value_name = "FILE")]
    kubelet_patch: Option<PathBuf>,
}

/// Runs `nicpolicy render`.
pub fn run(args: RenderArgs, positions: &Positions) -> Result<u8, Failure> {
    match args.what {
        Rendering::Vcd(args) => vcd_section(args, positions),
        Rendering::NetworkConfig(args) => guest_config(args, positions),
    }
}

/// The machine judged; a denial is reported on stderr and ends the command with exit code 1.
fn allowed(machine: &MachineArgs, positions: &Positions) -> Result<Result<Judged, u8>, Failure> {
    let judged = machine.judge(positions, false)?;
    let decision = &judged.evaluation.decision;
    if !decision.allowed {
        eprintln!("the machine is denied: nothing is built for it");
        for v in &decision.violations {
            eprintln!("  {}", v.field_error());
        }
        return Ok(Err(exit::DENIED));
    }
    if decision.nics.is_empty() {
        return Err(usage(anyhow!(
            "the plan has no NICs (is the machine's cluster, with its primary network, given \
             with --cluster?)"
        )));
    }
    Ok(Ok(judged))
}

fn vcd_section(args: VcdArgs, positions: &Positions) -> Result<u8, Failure> {
    let judged = match allowed(&args.machine, positions)? {
        Ok(judged) => judged,
        Err(code) => return Ok(code),
    };
    let decision = &judged.evaluation.decision;
    let nics = if args.built {
        judged.built_nics()
    } else {
        decision.nics.clone()
    };
    for item in &judged.evaluation.unapplied {
        let note = if args.built {
            "written as built"
        } else {
            "not built as planned"
        };
        eprintln!("{note}: {}", item.message());
    }
    if !decision.vapp_networks.is_empty() {
        eprintln!(
            "vApp networks to attach (each bridged to the org VDC network of the same name): {}",
            decision.vapp_networks.join(", ")
        );
    }
    super::out::print(&vcd::render_section(&nics))?;
    Ok(0)
}

fn guest_config(args: NetworkConfigArgs, positions: &Positions) -> Result<u8, Failure> {
    let inventory_path = args
        .machine
        .inventory_path()
        .ok_or_else(|| {
            usage(anyhow!(
                "--inventory is needed: it gives each network's prefix length, gateway and DNS"
            ))
        })?
        .to_path_buf();
    let vm = vcd::read_section(&args.nics)
        .with_context(|| format!("--nics {}", args.nics.display()))
        .map_err(usage)?;
    let judged = match allowed(&args.machine, positions)? {
        Ok(judged) => judged,
        Err(code) => return Ok(code),
    };
    // The request carries the inventory as read for the policies; the guest-only members are
    // read from the same file.
    let inventory = judged.request.inventory.clone().unwrap_or_default();
    let guest = network_config::read_guest_networks(&inventory_path).map_err(usage)?;
    // The guest gets the NICs as they are built: a plan's POOL NIC is DHCP on a Deckhouse VM.
    let built = judged.built_nics();
    if let Some(note) = judged.chain.builder().guest_config_note() {
        eprintln!("note: {note}");
    }
    let rendered = network_config::render(&built, &vm, &inventory, &guest)
        .with_context(|| format!("--nics {}", args.nics.display()))
        .map_err(usage)?;
    let yaml = serde_yaml_ng::to_string(&rendered.config).map_err(usage)?;
    super::out::print(&yaml)?;
    let version = match args.bootstrap_version.as_str() {
        "v1beta2" => BootstrapVersion::V1beta2,
        _ => BootstrapVersion::V1beta1,
    };
    let Some(ip) = rendered.node_ip else {
        eprintln!(
            "no kubelet node-ip: the primary NIC takes its address by DHCP, known only at boot"
        );
        return Ok(0);
    };
    let patch = network_config::node_ip_patch(judged.request.machine.role, &ip, version);
    match &args.kubelet_patch {
        Some(path) => std::fs::write(path, &patch)
            .with_context(|| format!("--kubelet-patch {}", path.display()))
            .map_err(usage)?,
        None => eprint!("# the kubelet's node IP, the primary NIC's address:\n{patch}"),
    }
    Ok(0)
}
