//! `nicpolicy copy SRC DST`: copies a policy module from one registry to another (an air-gapped
//! mirror), checked on the way as `pull` checks it, and prints the copy's immutable reference.

use anyhow::Context;
use nicpolicy::inspect::inspect;

use super::registry_args::{failure, without_scheme, RegistryArgs};
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
    let source = without_scheme(&args.source);
    let destination = without_scheme(&args.destination);
    nicpolicy::oci::parse_reference(source).map_err(failure)?;
    nicpolicy::oci::parse_reference(destination).map_err(failure)?;
    let options = args.registry.options();
    let pulled =
        nicpolicy::oci::blocking(|| nicpolicy::oci::pull(source, &options)).map_err(failure)?;
    let info = inspect(&pulled.bytes)
        .with_context(|| format!("{source}: the pulled module"))
        .map_err(runtime)?;
    eprintln!(
        "copying {} ({} bytes, sha256 {}) to {destination}",
        pulled.immutable,
        pulled.bytes.len(),
        info.sha256
    );
    let immutable = nicpolicy::oci::blocking(|| {
        nicpolicy::oci::push(&pulled.bytes, &info, destination, &options)
    })
    .map_err(failure)?;
    println!("{immutable}");
    Ok(0)
}
