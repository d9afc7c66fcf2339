//! `nicpolicy export`: writes a built-in policy module to a file or stdout.

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
}

/// Runs `nicpolicy export`.
pub fn run(args: ExportArgs) -> Result<u8, Failure> {
    let name = args.name.strip_prefix("builtin:").unwrap_or(&args.name);
    let policy = builtin::get_or_list(name).map_err(usage)?;
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
