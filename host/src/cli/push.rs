//! `nicpolicy push FILE.wasm REF`: writes a policy module to an OCI registry in Kubewarden's
//! layout and prints the immutable reference to pin (`host/repo@sha256:...`).

use std::path::PathBuf;

use anyhow::Context;
use nicpolicy::inspect::inspect;
use nicpolicy::oci::fetcher::without_scheme as without_oci_scheme;

use super::registry_args::{failure, RegistryArgs};
use super::{usage, Failure};

#[derive(clap::Args)]
pub struct PushArgs {
    /// The policy module.
    #[arg(value_name = "FILE.wasm")]
    file: PathBuf,
    /// Where to push it: host/repository:tag (oci:// in front is accepted).
    #[arg(value_name = "REF")]
    reference: String,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// Runs `nicpolicy push`.
pub fn run(args: PushArgs) -> Result<u8, Failure> {
    let bytes = nicpolicy::inspect::read_module(&args.file)
        .with_context(|| format!("{}: cannot read", args.file.display()))
        .map_err(usage)?;
    // Only a module that would load is pushed: the same checks as `inspect`.
    let info = inspect(&bytes)
        .with_context(|| format!("{}: not a policy module", args.file.display()))
        .map_err(usage)?;
    info.check_abi()
        .with_context(|| format!("{}: not a policy module", args.file.display()))
        .map_err(usage)?;
    let reference = without_oci_scheme(&args.reference);
    nicpolicy::oci::parse_reference(reference).map_err(failure)?;
    let options = args.registry.write_options("push")?;
    eprintln!(
        "pushing {} ({} bytes, sha256 {}) to {reference}",
        args.file.display(),
        bytes.len(),
        info.sha256
    );
    let immutable =
        nicpolicy::oci::blocking(|| nicpolicy::oci::push(&bytes, &info, reference, &options))
            .map_err(failure)?;
    println!("{immutable}");
    Ok(0)
}
