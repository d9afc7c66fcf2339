//! The certificates and keys a loopback control plane needs: one CA that signs the API server's
//! serving certificate and the client certificates (the CN is the user, O the groups), and the
//! service-account signing key.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// Files written by [`Pki::write`].
pub struct Pki {
    /// The CA certificate (PEM): the API server's client CA and what clients trust.
    pub ca_file: PathBuf,
    /// The CA certificate's text.
    pub ca_pem: String,
    /// kube-apiserver's serving certificate and key.
    pub serving_cert: PathBuf,
    /// kube-apiserver's serving key.
    pub serving_key: PathBuf,
    /// The service-account signing key (ECDSA P-256, PKCS#8): kube-apiserver signs tokens
    /// with it.
    pub service_account_key: PathBuf,
    /// Its public key, which kube-apiserver checks tokens with.
    pub service_account_public_key: PathBuf,
    /// A CA of its own for the client certificate kube-apiserver presents to webhooks that ask
    /// for one (its AdmissionConfiguration): what nicpolicy's `clientAuth.caFile` names.
    pub webhook_client_ca_file: PathBuf,
    /// That client certificate (CN kube-apiserver-webhook-client).
    pub webhook_client: ClientCert,
    issuer: Issuer<'static, KeyPair>,
    dir: PathBuf,
}

/// A client certificate and its key, as PEM files.
pub struct ClientCert {
    /// Certificate file.
    pub cert: PathBuf,
    /// Key file.
    pub key: PathBuf,
}

impl Pki {
    /// Generates everything into `dir`.
    pub fn write(dir: &Path) -> anyhow::Result<Pki> {
        std::fs::create_dir_all(dir)?;
        let (ca_pem, issuer) = certificate_authority("nicpolicy-e2e-ca")?;
        let ca_file = dir.join("ca.crt");
        std::fs::write(&ca_file, &ca_pem)?;
        let (webhook_ca_pem, webhook_issuer) =
            certificate_authority("nicpolicy-e2e-webhook-client-ca")?;
        let webhook_client_ca_file = dir.join("webhook-client-ca.crt");
        std::fs::write(&webhook_client_ca_file, &webhook_ca_pem)?;
        let webhook_client = client_cert(
            &webhook_issuer,
            &dir.join("webhook-client"),
            "kube-apiserver-webhook-client",
            "system:masters",
        )?;

        let key = KeyPair::generate()?;
        let mut serving = CertificateParams::new(vec![
            "127.0.0.1".to_string(),
            "localhost".to_string(),
            "kubernetes.default.svc".to_string(),
        ])?;
        serving
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving_cert = dir.join("apiserver.crt");
        let serving_key = dir.join("apiserver.key");
        std::fs::write(&serving_cert, serving.signed_by(&key, &issuer)?.pem())?;
        std::fs::write(&serving_key, key.serialize_pem())?;

        let service_account_key = dir.join("service-account.key");
        let service_account_public_key = dir.join("service-account.pub");
        let signing = KeyPair::generate()?;
        std::fs::write(&service_account_key, signing.serialize_pem())?;
        std::fs::write(&service_account_public_key, signing.public_key_pem())?;
        Ok(Pki {
            ca_file,
            ca_pem,
            serving_cert,
            serving_key,
            service_account_key,
            service_account_public_key,
            webhook_client_ca_file,
            webhook_client,
            issuer,
            dir: dir.to_path_buf(),
        })
    }

    /// A client certificate for `user` in `group` (the O of the subject), named `file_stem` in
    /// the PKI directory.
    pub fn client(&self, file_stem: &str, user: &str, group: &str) -> anyhow::Result<ClientCert> {
        client_cert(&self.issuer, &self.dir.join(file_stem), user, group)
    }
}

/// A self-signed CA named `name`: its PEM and the issuer that signs with it.
fn certificate_authority(name: &str) -> anyhow::Result<(String, Issuer<'static, KeyPair>)> {
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, name);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_pem = ca.self_signed(&ca_key)?.pem();
    Ok((ca_pem, Issuer::new(ca, ca_key)))
}

/// A client certificate for `user` in `group`, signed by `issuer`, written to `stem`.crt/.key.
fn client_cert(
    issuer: &Issuer<'static, KeyPair>,
    stem: &Path,
    user: &str,
    group: &str,
) -> anyhow::Result<ClientCert> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(DnType::CommonName, user);
    params
        .distinguished_name
        .push(DnType::OrganizationName, group);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = stem.with_extension("crt");
    let key_file = stem.with_extension("key");
    std::fs::write(&cert, params.signed_by(&key, issuer)?.pem())?;
    std::fs::write(&key_file, key.serialize_pem())?;
    Ok(ClientCert {
        cert,
        key: key_file,
    })
}
