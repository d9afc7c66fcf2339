//! Serving certificates: read from PEM files and re-read when they change (cert-manager rotates
//! them in place), or generated at start for local use (`--tls-self-signed`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use sha2::{Digest, Sha256};

use super::metrics::{Metrics, ResultLabels};
use crate::served::config::TlsFiles;

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The certificate or key file is unreadable or not PEM of the right kind.
    #[error("cannot use the certificate {} with the key {}: {error}", cert.display(), key.display())]
    Files {
        /// Certificate file.
        cert: PathBuf,
        /// Key file.
        key: PathBuf,
        /// What went wrong.
        error: std::io::Error,
    },
    /// Generating the self-signed certificate failed.
    #[error("cannot generate a self-signed certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// Writing the CA bundle failed.
    #[error("{}: cannot write the CA bundle: {error}", path.display())]
    WriteBundle {
        /// The bundle file.
        path: PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },
}

/// Makes rustls use *ring* (the provider kube's client uses too); harmless when already set.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Reads the certificate and key files.
pub async fn from_files(files: &TlsFiles) -> Result<RustlsConfig, TlsError> {
    install_crypto_provider();
    RustlsConfig::from_pem_file(&files.cert_file, &files.key_file)
        .await
        .map_err(|error| TlsError::Files {
            cert: files.cert_file.clone(),
            key: files.key_file.clone(),
            error,
        })
}

/// A certificate generated at start: a CA and a serving certificate it signed.
pub struct SelfSigned {
    /// The CA certificate (PEM): what a client or a webhook configuration's `caBundle` trusts.
    pub ca_pem: String,
    /// The serving certificate (PEM).
    pub cert_pem: String,
    /// Its private key (PKCS#8 PEM).
    pub key_pem: String,
}

impl SelfSigned {
    /// A CA and a serving certificate for `localhost`, `127.0.0.1`, `::1` and `names` (DNS
    /// names or IP addresses, such as `nicpolicy-webhook.nicpolicy-system.svc`).
    pub fn generate(names: &[String]) -> Result<SelfSigned, TlsError> {
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "nicpolicy self-signed CA");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca, ca_key);

        let mut sans = vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
        ];
        sans.extend(names.iter().cloned());
        sans.dedup();
        let key = KeyPair::generate()?;
        let mut leaf = CertificateParams::new(sans)?;
        leaf.distinguished_name
            .push(DnType::CommonName, "nicpolicy webhook");
        let cert = leaf.signed_by(&key, &issuer)?;
        Ok(SelfSigned {
            ca_pem: ca_cert.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// Writes the CA bundle (PEM) to `path`.
    pub fn write_ca_bundle(&self, path: &Path) -> Result<(), TlsError> {
        std::fs::write(path, &self.ca_pem).map_err(|error| TlsError::WriteBundle {
            path: path.to_path_buf(),
            error,
        })
    }

    /// The rustls configuration serving this certificate.
    pub async fn rustls(&self) -> Result<RustlsConfig, TlsError> {
        install_crypto_provider();
        RustlsConfig::from_pem(
            self.cert_pem.clone().into_bytes(),
            self.key_pem.clone().into_bytes(),
        )
        .await
        .map_err(|error| TlsError::Files {
            cert: PathBuf::from("(generated)"),
            key: PathBuf::from("(generated)"),
            error,
        })
    }
}

fn digest(files: &TlsFiles) -> Option<[u8; 32]> {
    let cert = std::fs::read(&files.cert_file).ok()?;
    let key = std::fs::read(&files.key_file).ok()?;
    let mut hash = Sha256::new();
    hash.update(&cert);
    hash.update(&key);
    Some(hash.finalize().into())
}

/// Re-reads the files every `files.reload_interval` and swaps the certificate when they
/// changed; a pair that does not load (for example a key written before its certificate) is
/// logged and retried, and the old certificate keeps serving. Runs until the runtime stops.
pub fn watch(config: RustlsConfig, files: TlsFiles, metrics: Arc<Metrics>) {
    tokio::spawn(async move {
        let mut loaded = digest(&files);
        let interval = files.reload_interval.max(Duration::from_millis(100));
        loop {
            tokio::time::sleep(interval).await;
            let now = digest(&files);
            if now.is_none() || now == loaded {
                continue;
            }
            let result = config
                .reload_from_pem_file(&files.cert_file, &files.key_file)
                .await;
            let label = |ok: bool| ResultLabels {
                result: if ok { "success" } else { "failure" }.to_string(),
            };
            match result {
                Ok(()) => {
                    loaded = now;
                    metrics.tls_reloads.get_or_create(&label(true)).inc();
                    tracing::info!(cert = %files.cert_file.display(), "serving certificate reloaded");
                }
                Err(err) => {
                    metrics.tls_reloads.get_or_create(&label(false)).inc();
                    tracing::warn!(cert = %files.cert_file.display(), error = %err, "new certificate not loaded; the old one keeps serving");
                }
            }
        }
    });
}
