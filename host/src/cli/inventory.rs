//! `nicpolicy inventory import`: the org VDC networks as Cloud Director knows them, written as
//! the inventory file the rest of nicpolicy reads.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, Context};
use nicpolicy::clouddirector::file::{self, file_name};
use nicpolicy::clouddirector::import::Imported;
use nicpolicy::clouddirector::{import, Bounds, Client, Owner};

use super::{runtime, usage, Failure};

/// The environment variable holding the API token when no `--token-file` is given.
pub const TOKEN_ENV: &str = "NICPOLICY_VCD_API_TOKEN";

#[derive(clap::Args)]
pub struct InventoryArgs {
    #[command(subcommand)]
    command: InventoryCommand,
}

#[derive(clap::Subcommand)]
enum InventoryCommand {
    /// Read the org VDC networks of one or more org VDCs (or VDC groups) from Cloud Director's
    /// OpenAPI and write them as an inventory (sorted, so a diff shows what changed in the
    /// site). The API token comes from --token-file or NICPOLICY_VCD_API_TOKEN, never from the
    /// command line.
    Import(ImportArgs),
}

#[derive(clap::Args)]
struct ImportArgs {
    /// The Cloud Director site, as a VCDCluster's spec.site names it (https://vcd.example.net).
    #[arg(long, value_name = "URL")]
    site: String,
    /// The org (spec.org); `system` logs in as the provider.
    #[arg(long, value_name = "ORG")]
    org: String,
    /// An org VDC whose networks to read, by name (spec.ovdc); repeat for several. None of
    /// --vdc, --vdc-group, --owner-id: every network of the org.
    #[arg(long = "vdc", value_name = "NAME")]
    vdcs: Vec<String>,
    /// A VDC group whose networks to read, by name; repeat for several.
    #[arg(long = "vdc-group", value_name = "NAME")]
    vdc_groups: Vec<String>,
    /// An org VDC or VDC group by URN (a VCDCluster's status.vcdResourceMap.ovdcs[].id).
    #[arg(long = "owner-id", value_name = "URN")]
    owner_ids: Vec<String>,
    /// A file holding the API token (User preferences > API tokens); without it,
    /// NICPOLICY_VCD_API_TOKEN.
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// PEM CA bundle to trust for the site, beside the system's.
    #[arg(long, value_name = "FILE")]
    ca_file: Option<PathBuf>,
    /// Where to write the inventory; stdout when omitted. Written whole or not at all.
    #[arg(short, long, value_name = "FILE", conflicts_with = "per_vdc")]
    output: Option<PathBuf>,
    /// Write each --vdc's networks into an inventory of its own, DIR/<VDC>.yaml, for the serve
    /// configuration's `inventories` (printed on stderr); no file is written unless every VDC
    /// was read.
    #[arg(long, value_name = "DIR", requires = "vdcs")]
    per_vdc: Option<PathBuf>,
    /// Seconds each call may take, its answer included.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    timeout: u64,
}

/// Runs `nicpolicy inventory`.
pub fn run(args: InventoryArgs) -> Result<u8, Failure> {
    match args.command {
        InventoryCommand::Import(args) => run_import(args),
    }
}

fn run_import(args: ImportArgs) -> Result<u8, Failure> {
    let token = match &args.token_file {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("{}: cannot read the API token", path.display()))
            .map_err(usage)?,
        None => std::env::var(TOKEN_ENV).map_err(|_| {
            usage(anyhow!(
                "no API token: give --token-file FILE or set {TOKEN_ENV} (never on the command line)"
            ))
        })?,
    };
    let token = token.trim().to_string();
    if token.is_empty() {
        return Err(usage(anyhow!("the API token is empty")));
    }
    let owners: Vec<Owner> = args
        .vdcs
        .iter()
        .cloned()
        .map(Owner::Vdc)
        .chain(args.vdc_groups.iter().cloned().map(Owner::VdcGroup))
        .chain(args.owner_ids.iter().cloned().map(Owner::Id))
        .collect();
    let bounds = Bounds {
        call: Duration::from_secs(args.timeout.max(1)),
        ..Bounds::default()
    };
    let mut client = Client::new(
        &args.site,
        &args.org,
        token,
        args.ca_file.as_deref(),
        bounds,
    )
    .map_err(usage)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")
        .map_err(runtime)?;
    if let Some(dir) = &args.per_vdc {
        if !args.vdc_groups.is_empty() || !args.owner_ids.is_empty() {
            return Err(usage(anyhow!(
                "--per-vdc writes one inventory per --vdc; --vdc-group and --owner-id do not name one"
            )));
        }
        let mut names: Vec<String> = args.vdcs.iter().map(|v| file_name(v)).collect();
        names.sort();
        if let Some(twice) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(usage(anyhow!(
                "--per-vdc: two --vdc names would both be written to {}",
                twice[0]
            )));
        }
        // Every VDC read before anything is written.
        let mut texts = Vec::new();
        for vdc in &args.vdcs {
            let imported = rt
                .block_on(import(&mut client, &[Owner::Vdc(vdc.clone())]))
                .map_err(runtime)?;
            texts.push((vdc, file_name(vdc), inventory_text(&args, &imported)?));
        }
        std::fs::create_dir_all(dir)
            .with_context(|| format!("{}: cannot create", dir.display()))
            .map_err(runtime)?;
        for (_, name, text) in &texts {
            write_whole(&dir.join(name), text)?;
        }
        eprintln!(
            "wrote {} inventories into {}; the serve configuration names them:\ninventories:",
            texts.len(),
            dir.display()
        );
        for (vdc, name, _) in &texts {
            eprintln!("  {}: {}", yaml_key(vdc), dir.join(name).display());
        }
        return Ok(0);
    }
    let imported = rt.block_on(import(&mut client, &owners)).map_err(runtime)?;
    let text = inventory_text(&args, &imported)?;
    match &args.output {
        Some(path) => {
            write_whole(path, &text)?;
            eprintln!(
                "wrote {} ({} networks)",
                path.display(),
                imported.inventory.networks.len()
            );
        }
        None => super::out::print(&text)?,
    }
    Ok(0)
}

/// The inventory file of `imported`, its warnings said on stderr.
fn inventory_text(args: &ImportArgs, imported: &Imported) -> Result<String, Failure> {
    for warning in &imported.warnings {
        eprintln!("warning: {warning}");
    }
    file::render(&args.site, &args.org, imported)
        .context("cannot write YAML")
        .map_err(runtime)
}

/// Writes `text` to `path` whole or not at all: a reader never sees half an inventory.
fn write_whole(path: &Path, text: &str) -> Result<(), Failure> {
    let partial = path.with_extension("partial");
    std::fs::write(&partial, text)
        .and_then(|()| std::fs::rename(&partial, path))
        .with_context(|| format!("{}: cannot write", path.display()))
        .map_err(runtime)
}

/// `vdc` as a YAML mapping key: quoted unless plain.
fn yaml_key(vdc: &str) -> String {
    if vdc
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        vdc.to_string()
    } else {
        format!("{vdc:?}")
    }
}
