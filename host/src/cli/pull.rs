//! `nicpolicy pull REF [-o FILE]`: reads a policy module from an OCI registry (Kubewarden's or
//! the CNCF Wasm layout), checks it, and writes it.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use nicpolicy::inspect::inspect;
use nicpolicy::oci::fetcher::without_scheme as without_oci_scheme;

use super::registry_args::{failure, RegistryArgs};
use super::{runtime, Failure};

#[derive(clap::Args)]
pub struct PullArgs {
    /// What to pull: host/repository:tag or host/repository@sha256:... (oci:// in front is
    /// accepted).
    #[arg(value_name = "REF")]
    reference: String,
    /// Where to write the module; default: the repository's last path segment with `.wasm`
    /// in the working directory. `-` writes it to standard output.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// Runs `nicpolicy pull`.
pub fn run(args: PullArgs) -> Result<u8, Failure> {
    let reference = without_oci_scheme(&args.reference);
    let parsed = nicpolicy::oci::parse_reference(reference).map_err(failure)?;
    let options = args.registry.options()?;
    let pulled =
        nicpolicy::oci::blocking(|| nicpolicy::oci::pull(reference, &options)).map_err(failure)?;
    // Checked as a module before it is written: a pulled file is used without a second look.
    let info = inspect(&pulled.bytes)
        .with_context(|| format!("{reference}: the pulled module"))
        .map_err(runtime)?;
    let output = args.output.unwrap_or_else(|| {
        let name = parsed
            .repository()
            .rsplit('/')
            .next()
            .unwrap_or("policy")
            .to_string();
        PathBuf::from(format!("{name}.wasm"))
    });
    if output.as_os_str() == "-" {
        std::io::stdout()
            .write_all(&pulled.bytes)
            .context("standard output")
            .map_err(runtime)?;
    } else {
        std::fs::write(&output, &pulled.bytes)
            .with_context(|| format!("{}: cannot write", output.display()))
            .map_err(runtime)?;
    }
    eprintln!(
        "pulled {} ({} layout): {} bytes, sha256 {}{}",
        pulled.immutable,
        pulled.layout.as_str(),
        pulled.bytes.len(),
        info.sha256,
        if output.as_os_str() == "-" {
            String::new()
        } else {
            format!(", written to {}", output.display())
        }
    );
    Ok(0)
}
