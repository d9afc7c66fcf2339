//! `nicpolicy export`: writes a built-in policy module (its ABI v1 or its Kubewarden build) to a
//! file or stdout; `nicpolicy export backstop` writes the served chains' structural rules as
//! ValidatingAdmissionPolicies.

use std::path::PathBuf;

use anyhow::Context;
use nicpolicy::backstop::{self, Options};
use nicpolicy::builtin;
use nicpolicy::served::Served;

use super::common::{host_for, read_config};
use super::{usage, Failure};

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct ExportArgs {
    #[command(subcommand)]
    what: Option<Exported>,
    /// The built-in policy, such as capvcd or role-based.
    #[arg(value_name = "NAME", required = true)]
    name: Option<String>,
    /// Where to write the module; stdout when omitted.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Which build to write: `nicpolicy` (ABI v1, for nicpolicy serve/eval/test) or
    /// `kubewarden` (waPC with its metadata, for Kubewarden's policy-server and kwctl).
    #[arg(long, value_enum, default_value_t = ModuleFormat::Nicpolicy)]
    format: ModuleFormat,
}

/// The builds `nicpolicy export` writes.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ModuleFormat {
    /// nicpolicy's ABI v1.
    Nicpolicy,
    /// Kubewarden's waPC protocol.
    Kubewarden,
}

/// What `nicpolicy export` writes besides a module.
#[derive(clap::Subcommand)]
enum Exported {
    /// Writes the served chains' structural rules (names, duplicates, the NIC count, the
    /// inventory's names, a provisioned machine's networks) as a ValidatingAdmissionPolicy and
    /// binding per kind, with their parameters in a ConfigMap: kube-apiserver then refuses
    /// what they catch even while no webhook answers (docs/deploy.md, "The backstop").
    Backstop(BackstopArgs),
}

#[derive(clap::Args)]
struct BackstopArgs {
    /// The serve configuration (docs/deploy.md); without it, the built-in CAPVCD policy's.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Where to write the manifests (YAML); stdout when omitted.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// The namespace nicpolicy runs in, where the parameter ConfigMap goes.
    #[arg(
        long,
        short = 'n',
        value_name = "NAMESPACE",
        default_value = "nicpolicy"
    )]
    namespace: String,
    /// Prefix of the objects' names.
    #[arg(long, value_name = "NAME", default_value = "nicpolicy")]
    name: String,
    /// Leave out namespaces labelled nicpolicy.io/enforce=false, as the webhook does with its
    /// namespace opt-out on.
    #[arg(long)]
    namespace_opt_out: bool,
}

/// Runs `nicpolicy export`.
pub fn run(args: ExportArgs) -> Result<u8, Failure> {
    if let Some(Exported::Backstop(backstop)) = args.what {
        return export_backstop(backstop);
    }
    let Some(name) = args.name.as_deref() else {
        return Err(usage(anyhow::anyhow!(
            "name a built-in policy, or `backstop`"
        )));
    };
    let name = name.strip_prefix("builtin:").unwrap_or(name);
    let policy = builtin::get_or_list(name).map_err(usage)?;
    let wasm = match args.format {
        ModuleFormat::Nicpolicy => policy.wasm,
        ModuleFormat::Kubewarden => policy.kubewarden.ok_or_else(|| {
            usage(anyhow::anyhow!(
                "the built-in policy `{name}` has no Kubewarden build (only Rust policy crates with a `kubewarden` feature have one)"
            ))
        })?,
    };
    match &args.output {
        Some(path) => {
            std::fs::write(path, wasm)
                .with_context(|| format!("{}: cannot write", path.display()))
                .map_err(usage)?;
            eprintln!(
                "wrote {} ({} bytes, sha256 {})",
                path.display(),
                wasm.len(),
                nicpolicy::inspect::sha256_hex(wasm)
            );
        }
        None => {
            use std::io::Write as _;
            std::io::stdout()
                .write_all(wasm)
                .context("cannot write to stdout")
                .map_err(usage)?;
        }
    }
    Ok(0)
}

/// `nicpolicy export backstop`: the manifests, headed by what they do not cover.
fn export_backstop(args: BackstopArgs) -> Result<u8, Failure> {
    let config = read_config(args.config.as_ref()).map_err(usage)?;
    let host = host_for(&config)?;
    let label = args.config.as_ref().map_or_else(
        || "the built-in configuration".to_string(),
        |p| p.display().to_string(),
    );
    let served = Served::load(&host, config, 1)
        .with_context(|| format!("{label}: cannot load its policies"))
        .map_err(usage)?;
    let options = Options {
        name: args.name,
        namespace: args.namespace,
        namespace_opt_out: args.namespace_opt_out,
    };
    let export = backstop::export(&served, &options)
        .with_context(|| format!("{label}: cannot write the backstop"))
        .map_err(usage)?;
    let mut text = format!(
        "# nicpolicy backstop of {label}: kube-apiserver evaluates these itself, so they hold\n\
         # while no webhook answers. They refuse only what the policies refuse.\n"
    );
    for (kind, backstop) in &export.kinds {
        let what = if backstop.covered.is_empty() {
            "no policy written".to_string()
        } else {
            format!("the rules of {}", backstop.covered.join(", "))
        };
        text.push_str(&format!(
            "#\n# {}: {what}. Left to the webhook:\n",
            kind.as_str()
        ));
        for line in &backstop.not_covered {
            text.push_str(&format!("#   - {line}\n"));
        }
    }
    for object in &export.objects {
        text.push_str("---\n");
        text.push_str(
            &serde_yaml_ng::to_string(object)
                .context("cannot write YAML")
                .map_err(usage)?,
        );
    }
    match &args.output {
        Some(path) => {
            std::fs::write(path, &text)
                .with_context(|| format!("{}: cannot write", path.display()))
                .map_err(usage)?;
            eprintln!(
                "wrote {} ({} objects: the parameter ConfigMap, a policy and a binding per kind)",
                path.display(),
                export.objects.len()
            );
        }
        None => super::out::print(&text)?,
    }
    for (kind, backstop) in &export.kinds {
        if backstop.covered.is_empty() {
            eprintln!(
                "warning: {}: no policy of the chain has a backstop; no policy is written for it",
                kind.as_str()
            );
        }
    }
    Ok(0)
}
