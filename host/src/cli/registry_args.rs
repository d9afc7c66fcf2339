//! How the commands that talk to a registry reach it: `--plain-http`, `--registry-config`,
//! `--registry-ca`, and which signatures they require: `--verify-key`.

use std::path::PathBuf;

use nicpolicy::oci::signature::{TrustedKey, Verification};
use nicpolicy::oci::{OciError, RegistryOptions};

use super::{runtime, usage, Failure};

/// Registry options shared by the commands that talk to one.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct RegistryArgs {
    /// Talk plain HTTP to the registry: only for one on loopback (127.0.0.1, ::1, localhost),
    /// such as a test registry or a local mirror.
    #[arg(long)]
    pub plain_http: bool,
    /// The docker config.json with the registry's credentials (`docker login` writes it; an
    /// imagePullSecret holds one). Default: $DOCKER_CONFIG/config.json, else
    /// ~/.docker/config.json, anonymous when there is none.
    #[arg(long, value_name = "FILE")]
    pub registry_config: Option<PathBuf>,
    /// A PEM file of CA certificates to trust beside the system's (a private registry's CA):
    /// FILE for every registry, HOST[:PORT]=FILE for that registry only. Repeat for several.
    #[arg(long = "registry-ca", value_name = "[HOST=]FILE")]
    pub registry_ca: Vec<String>,
    /// Use a module from a registry only when a cosign signature of it checks with this public
    /// key (PEM, as cosign.pub). Repeat for several keys: one signature by any of them is
    /// enough.
    #[arg(long = "verify-key", value_name = "FILE")]
    pub verify_key: Vec<PathBuf>,
}

impl RegistryArgs {
    /// The options of a command that writes to a registry (`push`, `sign`): `--verify-key`,
    /// which checks what is pulled, is refused rather than ignored.
    ///
    /// # Errors
    /// `--verify-key` given (usage).
    pub fn write_options(&self, command: &str) -> Result<RegistryOptions, Failure> {
        if !self.verify_key.is_empty() {
            return Err(usage(anyhow::anyhow!(
                "--verify-key checks modules that are pulled; `{command}` pulls none (`nicpolicy \
                 verify REF --key FILE` checks a module's signatures)"
            )));
        }
        self.options()
    }

    /// The library's options, with the `--verify-key` keys read.
    ///
    /// # Errors
    /// A key file that cannot be read or is not a public key (usage).
    pub fn options(&self) -> Result<RegistryOptions, Failure> {
        let keys = read_keys(&self.verify_key)?;
        let mut options = RegistryOptions {
            plain_http: self.plain_http,
            docker_config: self.registry_config.clone(),
            verification: if keys.is_empty() {
                Verification::default()
            } else {
                Verification::every_repository(keys)
            },
            ..RegistryOptions::default()
        };
        for given in &self.registry_ca {
            // HOST=FILE names a registry (a host has no `/`); a path with `=` in a directory
            // name is still a path.
            match given
                .split_once('=')
                .filter(|(host, _)| !host.contains('/'))
            {
                Some((host, file)) => options
                    .registry_ca_files
                    .entry(host.to_string())
                    .or_default()
                    .push(PathBuf::from(file)),
                None => options.ca_files.push(PathBuf::from(given)),
            }
        }
        Ok(options)
    }
}

/// The public keys in the PEM files `paths`.
///
/// # Errors
/// A file that cannot be read or is not a public key (usage).
pub fn read_keys(paths: &[PathBuf]) -> Result<Vec<TrustedKey>, Failure> {
    paths
        .iter()
        .map(|path| TrustedKey::read(path))
        .collect::<Result<Vec<_>, _>>()
        .map_err(failure)
}

/// The exit status of a registry error: what the user gave (a reference, `--plain-http` to a
/// remote registry, credentials or CA files) is usage (2); what the registry or the artifact
/// did is a run-time failure (3).
pub fn failure(error: OciError) -> Failure {
    match error {
        OciError::Reference { .. } | OciError::PlainHttp { .. } | OciError::Config(_) => {
            usage(error)
        }
        OciError::Registry { .. }
        | OciError::Signature { .. }
        | OciError::Layout { .. }
        | OciError::Digest { .. }
        | OciError::Runtime(_) => runtime(error),
    }
}
