//! `nicpolicy copy SRC DST`: copies a policy module from one registry to another (an air-gapped
//! mirror), checked on the way as `pull` checks it, with the same manifest digest and its
//! cosign signatures, and prints the copy's immutable reference.

use anyhow::Context;
use nicpolicy::inspect::inspect;
use nicpolicy::oci::fetcher::without_scheme as without_oci_scheme;

use super::registry_args::{failure, RegistryArgs};
use super::{runtime, Failure};

#[derive(clap::Args)]
pub struct CopyArgs {
    /// The module to copy: host/repository@sha256:... (or :tag).
    #[arg(value_name = "SRC")]
    source: String,
    /// Where to write it: host/repository:tag.
    #[arg(value_name = "DST")]
    destination: String,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// Runs `nicpolicy copy`.
pub fn run(args: CopyArgs) -> Result<u8, Failure> {
    let source = without_oci_scheme(&args.source);
    let destination = without_oci_scheme(&args.destination);
    nicpolicy::oci::parse_reference(source).map_err(failure)?;
    nicpolicy::oci::parse_reference(destination).map_err(failure)?;
    let options = args.registry.options()?;
    let copied =
        nicpolicy::oci::blocking(|| nicpolicy::oci::mirror::copy(source, destination, &options))
            .map_err(failure)?;
    let info = inspect(&copied.pulled.bytes)
        .with_context(|| format!("{source}: the copied module"))
        .map_err(runtime)?;
    eprintln!(
        "copied {} ({} bytes, sha256 {}) to {destination} with {} signature(s)",
        copied.pulled.immutable,
        copied.pulled.bytes.len(),
        info.sha256,
        copied.signatures
    );
    println!("{}", copied.immutable);
    Ok(0)
}
