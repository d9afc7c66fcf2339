//! `nicpolicy export`: writes a built-in policy module (its ABI v1 or its Kubewarden build) to a
//! file or stdout.

use std::path::PathBuf;

use anyhow::Context;
use nicpolicy::builtin;

use super::{usage, Failure};

#[derive(clap::Args)]
pub struct ExportArgs {
    /// The built-in policy, such as capvcd or role-based.
    #[arg(value_name = "NAME")]
    name: String,
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

/// Runs `nicpolicy export`.
pub fn run(args: ExportArgs) -> Result<u8, Failure> {
    let name = args.name.strip_prefix("builtin:").unwrap_or(&args.name);
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
