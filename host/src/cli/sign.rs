//! `nicpolicy sign REF --key cosign.key` and `nicpolicy generate-key-pair`: cosign-compatible
//! signatures of policy modules made with a key pair, without cosign (`cosign verify --key`
//! reads them, and `cosign sign --key` signatures are what `verify` and the webhook check).

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::{anyhow, Context};
use nicpolicy::oci::fetcher::without_scheme as without_oci_scheme;
use nicpolicy::oci::signature::{key_pair_paths, SigningKey};

use super::registry_args::{failure, RegistryArgs};
use super::{usage, Failure};

/// The environment variable holding the private key's password (cosign's).
const PASSWORD: &str = "COSIGN_PASSWORD";

#[derive(clap::Args)]
pub struct SignArgs {
    /// What to sign: host/repository@sha256:... (a tag is resolved to the digest it names now,
    /// and that digest is signed).
    #[arg(value_name = "REF")]
    reference: String,
    /// The private key (cosign.key, as `cosign generate-key-pair` or `nicpolicy
    /// generate-key-pair` write it; its password in COSIGN_PASSWORD).
    #[arg(long, value_name = "FILE")]
    key: PathBuf,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// Runs `nicpolicy sign`.
pub fn run_sign(args: SignArgs) -> Result<u8, Failure> {
    let reference = without_oci_scheme(&args.reference);
    nicpolicy::oci::parse_reference(reference).map_err(failure)?;
    let password = std::env::var(PASSWORD).unwrap_or_default();
    let key = SigningKey::read(&args.key, password.as_bytes()).map_err(failure)?;
    let options = args.registry.write_options("sign")?;
    let signed =
        nicpolicy::oci::blocking(|| nicpolicy::oci::signature::sign(reference, &key, &options))
            .map_err(failure)?;
    eprintln!("signed {} with {}", signed.immutable, args.key.display());
    println!("{}", signed.signature);
    Ok(0)
}

#[derive(clap::Args)]
pub struct GenerateKeyPairArgs {
    /// Where to write the keys: PREFIX.key (private, sealed with COSIGN_PASSWORD, mode 0600)
    /// and PREFIX.pub (public, for `verification:` and --verify-key).
    #[arg(long, value_name = "PREFIX", default_value = "cosign")]
    output_key_prefix: PathBuf,
}

/// Runs `nicpolicy generate-key-pair`.
pub fn run_generate(args: GenerateKeyPairArgs) -> Result<u8, Failure> {
    let password = std::env::var(PASSWORD).map_err(|_| {
        usage(anyhow!(
            "set {PASSWORD} to the password to seal the private key with (an empty value seals \
             it with an empty password)"
        ))
    })?;
    let (public, private) = key_pair_paths(&args.output_key_prefix);
    for path in [&private, &public] {
        if path.exists() {
            return Err(usage(anyhow!(
                "{}: already exists; move it away or give another --output-key-prefix",
                path.display()
            )));
        }
    }
    let key = SigningKey::generate().map_err(failure)?;
    let sealed = key.to_encrypted_pem(password.as_bytes()).map_err(failure)?;
    let mut file = private_file(&private)
        .with_context(|| format!("{}: cannot write", private.display()))
        .map_err(usage)?;
    file.write_all(sealed.as_bytes())
        .with_context(|| format!("{}: cannot write", private.display()))
        .map_err(usage)?;
    std::fs::write(&public, key.public_pem().map_err(failure)?)
        .with_context(|| format!("{}: cannot write", public.display()))
        .map_err(usage)?;
    eprintln!(
        "Private key written to {}\nPublic key written to {}",
        private.display(),
        public.display()
    );
    Ok(0)
}

/// A new file readable by its owner only; an existing one is not replaced.
fn private_file(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)
}
