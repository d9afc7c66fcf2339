//! `nicpolicy verify REF --key cosign.pub`: whether a policy module in a registry carries a
//! cosign signature by one of the keys, checked as the webhook checks it before use.

use std::path::PathBuf;

use nicpolicy::oci::fetcher::without_scheme as without_oci_scheme;
use nicpolicy::oci::signature::Verification;
use nicpolicy::oci::OciError;

use super::registry_args::{failure, read_keys, RegistryArgs};
use super::Failure;

#[derive(clap::Args)]
pub struct VerifyArgs {
    /// What to check: host/repository@sha256:... or :tag (the digest the tag names now).
    #[arg(value_name = "REF")]
    reference: String,
    /// A public key (PEM, as cosign.pub); repeat for several, one signature by any is enough.
    #[arg(long, value_name = "FILE", required = true)]
    key: Vec<PathBuf>,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// Runs `nicpolicy verify`: 0 verified, 1 not signed by any of the keys.
pub fn run(args: VerifyArgs) -> Result<u8, Failure> {
    let reference = without_oci_scheme(&args.reference);
    nicpolicy::oci::parse_reference(reference).map_err(failure)?;
    let mut keys = read_keys(&args.key)?;
    let mut options = args.registry.options()?;
    // --verify-key, as on the other commands, adds its keys to --key's.
    keys.extend(
        std::mem::take(&mut options.verification.rules)
            .into_iter()
            .flat_map(|rule| rule.keys),
    );
    options.verification = Verification::every_repository(keys);
    match nicpolicy::oci::blocking(|| nicpolicy::oci::pull(reference, &options)) {
        Ok(pulled) => {
            println!(
                "Verified {}: signed by {}",
                pulled.immutable,
                pulled.verified_by.as_deref().unwrap_or("?")
            );
            Ok(0)
        }
        Err(refused @ OciError::Signature { .. }) => {
            eprintln!("error: {refused}");
            Ok(1)
        }
        Err(error) => Err(failure(error)),
    }
}
