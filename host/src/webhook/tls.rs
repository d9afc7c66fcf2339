//! Serving certificates: read from PEM files and re-read when they change (cert-manager rotates
//! them in place), or generated at start for local use (`--tls-self-signed`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use sha2::{Digest, Sha256};

use super::metrics::{Metrics, ResultLabels};
use crate::served::config::{ClientAuth, TlsFiles};

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
    /// The client CA file (`clientAuth.caFile`) is unreadable or holds no usable certificate.
    #[error("clientAuth.caFile {}: {reason}", path.display())]
    ClientCa {
        /// The CA file.
        path: PathBuf,
        /// Why it cannot be used.
        reason: String,
    },
}

/// The rustls configuration serving `cert_pem` with `key_pem`; with `client_ca`, a client
/// certificate is asked for and, when presented, must chain to that CA (a client may present
/// none: probes and metrics are served without one, reviews are refused without one, by the
/// routes). ALPN offers h2 and http/1.1, as axum-server's own configurations do.
fn server_config(
    cert_pem: &[u8],
    key_pem: &[u8],
    client_ca: Option<&ClientAuth>,
    (cert, key): (&Path, &Path),
) -> Result<ServerConfig, TlsError> {
    install_crypto_provider();
    let files = |error: std::io::Error| TlsError::Files {
        cert: cert.to_path_buf(),
        key: key.to_path_buf(),
        error,
    };
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| files(std::io::Error::other(format!("certificate: {err}"))))?;
    if chain.is_empty() {
        return Err(files(std::io::Error::other("no certificate in the PEM")));
    }
    let private = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|err| files(std::io::Error::other(format!("private key: {err}"))))?;
    let builder = ServerConfig::builder();
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(auth) => builder.with_client_cert_verifier(client_verifier(auth)?),
    };
    let mut config = builder
        .with_single_cert(chain, private)
        .map_err(|err| files(std::io::Error::other(err)))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Checks a client certificate against `auth`'s CA, if one is presented.
fn client_verifier(
    auth: &ClientAuth,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let refused = |reason: String| TlsError::ClientCa {
        path: auth.ca_file.clone(),
        reason,
    };
    let pem = std::fs::read(&auth.ca_file).map_err(|err| refused(err.to_string()))?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|err| refused(format!("not PEM certificates: {err}")))?;
        roots
            .add(cert)
            .map_err(|err| refused(format!("not a usable CA certificate: {err}")))?;
    }
    if roots.is_empty() {
        return Err(refused("no certificate in the file".to_string()));
    }
    WebPkiClientVerifier::builder(Arc::new(roots))
        .allow_unauthenticated()
        .build()
        .map_err(|err| refused(err.to_string()))
}

/// Whether a request came over a connection whose client presented a certificate the
/// configured client CA signed: rustls refused the handshake of any other presented
/// certificate, so one present is one verified.
pub fn client_certified(extensions: &axum::http::Extensions) -> bool {
    extensions
        .get::<Arc<axum_server::tls::TlsInfo>>()
        .is_some_and(|info| !info.peer_certificates.is_empty())
}

/// Makes rustls use *ring* (the provider kube's client uses too); harmless when already set.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Reads the certificate and key files (and the client CA, with `client_ca`).
pub fn from_files(
    files: &TlsFiles,
    client_ca: Option<&ClientAuth>,
) -> Result<RustlsConfig, TlsError> {
    Ok(RustlsConfig::from_config(Arc::new(read_files(
        files, client_ca,
    )?)))
}

fn read_files(files: &TlsFiles, client_ca: Option<&ClientAuth>) -> Result<ServerConfig, TlsError> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|error| TlsError::Files {
            cert: files.cert_file.clone(),
            key: files.key_file.clone(),
            error,
        })
    };
    server_config(
        &read(&files.cert_file)?,
        &read(&files.key_file)?,
        client_ca,
        (&files.cert_file, &files.key_file),
    )
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

    /// The rustls configuration serving this certificate (asking for client certificates
    /// `client_ca` signed, with it).
    pub fn rustls(&self, client_ca: Option<&ClientAuth>) -> Result<RustlsConfig, TlsError> {
        let generated = Path::new("(generated)");
        Ok(RustlsConfig::from_config(Arc::new(server_config(
            self.cert_pem.as_bytes(),
            self.key_pem.as_bytes(),
            client_ca,
            (generated, generated),
        )?)))
    }
}

/// The files' contents, hashed: the certificate, the key and the client CA.
fn digest(files: &TlsFiles, client_ca: Option<&ClientAuth>) -> Option<[u8; 32]> {
    let mut hash = Sha256::new();
    hash.update(std::fs::read(&files.cert_file).ok()?);
    hash.update(std::fs::read(&files.key_file).ok()?);
    if let Some(auth) = client_ca {
        hash.update(std::fs::read(&auth.ca_file).ok()?);
    }
    Some(hash.finalize().into())
}

/// Re-reads the files (and the client CA) every `files.reload_interval` and swaps the
/// configuration when they changed; a set that does not load (for example a key written before
/// its certificate) is logged and retried, and the old configuration keeps serving. Runs until
/// the runtime stops.
pub fn watch(
    config: RustlsConfig,
    files: TlsFiles,
    client_ca: Option<ClientAuth>,
    metrics: Arc<Metrics>,
) {
    tokio::spawn(async move {
        let mut loaded = digest(&files, client_ca.as_ref());
        let interval = files.reload_interval.max(Duration::from_millis(100));
        loop {
            tokio::time::sleep(interval).await;
            let now = digest(&files, client_ca.as_ref());
            if now.is_none() || now == loaded {
                continue;
            }
            let result = read_files(&files, client_ca.as_ref())
                .map(|read| config.reload_from_config(Arc::new(read)));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("nicpolicy-tls-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory");
        dir
    }

    #[test]
    fn a_client_ca_that_cannot_be_used_is_named_with_why() {
        let dir = scratch("client-ca");
        let missing = ClientAuth {
            ca_file: dir.join("kube-apiserver-client-ca.crt"),
        };
        let generated = SelfSigned::generate(&[]).expect("a certificate");
        let err = generated.rustls(Some(&missing)).expect_err("no CA file");
        let text = err.to_string();
        assert!(text.starts_with("clientAuth.caFile "), "{text}");
        assert!(text.contains("kube-apiserver-client-ca.crt"), "{text}");

        let key = dir.join("key.pem");
        std::fs::write(&key, &generated.key_pem).expect("write");
        let not_a_ca = ClientAuth { ca_file: key };
        let text = generated
            .rustls(Some(&not_a_ca))
            .expect_err("a key, not a certificate")
            .to_string();
        assert!(text.contains("no certificate in the file"), "{text}");

        let ca = dir.join("ca.pem");
        std::fs::write(&ca, &generated.ca_pem).expect("write");
        assert!(generated.rustls(Some(&ClientAuth { ca_file: ca })).is_ok());
    }
}
