//! Cosign signatures of policy modules made with a key pair: what `cosign sign --key` writes and
//! `cosign verify --key` reads, made (`nicpolicy sign`) and checked here without cosign.
//!
//! The signatures of manifest `sha256:<hex>` in repository `R` are an OCI image at the tag
//! `R:sha256-<hex>.sig`. Each of its layers ([`SIGNATURE_LAYER`]) is a "simple signing" payload,
//! a small JSON document naming the manifest digest it vouches for, and the layer's annotation
//! [`SIGNATURE_ANNOTATION`] holds the base64 ECDSA signature of the payload's bytes. A module is
//! verified when one payload names the digest of the manifest that was pulled and its signature
//! checks with a trusted public key. Transparency-log entries (Rekor bundles) are neither
//! required nor read: the check needs nothing but the registry (or the store) and the keys, so it
//! works in an air gap.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use oci_client::manifest::{OciDescriptor, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use serde::{Deserialize, Serialize};
use sigstore::crypto::signing_key::SigStoreKeyPair;
use sigstore::crypto::{CosignVerificationKey, SigStoreSigner, SigningScheme};

use super::{digest_of, OciError, MANIFEST};

/// The media type of a signature layer.
pub const SIGNATURE_LAYER: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The layer annotation holding the base64 signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The payload's `critical.type`.
const PAYLOAD_TYPE: &str = "cosign container image signature";
/// The signature image's config media type (cosign's).
const IMAGE_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// Bounds on what is read from a signature image: a payload is a few hundred bytes, and a
/// registry that answers more is not a signature store to trust with memory.
const MAX_PAYLOAD_BYTES: u64 = 64 * 1024;
const MAX_SIGNATURES: usize = 64;

/// One signature: the payload's bytes (JSON text) and the base64 signature of them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature {
    /// The simple-signing payload as signed.
    pub payload: String,
    /// The base64 (DER) signature, as the layer's annotation holds it.
    pub signature: String,
}

/// The part of a simple-signing payload that is checked.
#[derive(Deserialize)]
struct Payload {
    critical: Critical,
}

#[derive(Deserialize)]
struct Critical {
    #[serde(rename = "type")]
    kind: String,
    image: Image,
    /// The repository the signer signed the manifest for (cosign writes it).
    #[serde(default)]
    identity: Option<Identity>,
}

#[derive(Deserialize)]
struct Identity {
    #[serde(rename = "docker-reference", default)]
    docker_reference: String,
}

/// The repository of a reference: without its `@digest` or `:tag` (a colon after the last `/`
/// is a tag; one before it is a registry's port).
fn repository_of(reference: &str) -> &str {
    let name = reference.split('@').next().unwrap_or(reference);
    match name.rfind(':') {
        Some(colon) if !name[colon..].contains('/') => &name[..colon],
        _ => name,
    }
}

#[derive(Deserialize)]
struct Image {
    #[serde(rename = "docker-manifest-digest")]
    digest: String,
}

/// A public key that signatures are checked with (PEM, as `cosign generate-key-pair` writes
/// `cosign.pub`).
#[derive(Clone, PartialEq, Eq)]
pub struct TrustedKey {
    name: String,
    pem: Vec<u8>,
    /// The file it was read from, when it was (a configuration watches it for changes).
    file: Option<PathBuf>,
}

impl std::fmt::Debug for TrustedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrustedKey")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl TrustedKey {
    /// The key in the PEM file at `path`.
    ///
    /// # Errors
    /// [`OciError::Config`] naming the file: unreadable, or not a public key.
    pub fn read(path: &Path) -> Result<TrustedKey, OciError> {
        let pem = read_key_file(path, "public")?;
        TrustedKey::from_file_pem(path, pem)
    }

    /// The key in `pem`, read from `path` (which names it in messages, and which
    /// [`TrustedKey::file`] gives back).
    ///
    /// # Errors
    /// [`OciError::Config`] when `pem` is not a public key (ECDSA, Ed25519 or RSA, PEM).
    pub fn from_file_pem(path: &Path, pem: Vec<u8>) -> Result<TrustedKey, OciError> {
        let mut key = TrustedKey::from_pem(path.display().to_string(), pem)?;
        key.file = Some(path.to_path_buf());
        Ok(key)
    }

    /// The key in `pem`, named `name` in messages.
    ///
    /// # Errors
    /// [`OciError::Config`] when `pem` is not a public key (ECDSA, Ed25519 or RSA, PEM).
    pub fn from_pem(name: String, pem: Vec<u8>) -> Result<TrustedKey, OciError> {
        let key = TrustedKey::unchecked(name, pem);
        key.key()?;
        Ok(key)
    }

    /// The key in `pem`, checked only when a signature is: for a key a configuration reader
    /// has already checked. One that is not a key refuses every signature it is asked about.
    pub fn unchecked(name: String, pem: Vec<u8>) -> TrustedKey {
        TrustedKey {
            name,
            pem,
            file: None,
        }
    }

    /// The file it was read from ([`TrustedKey::read`]), if it was.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// How messages name it (its file).
    pub fn name(&self) -> &str {
        &self.name
    }

    fn key(&self) -> Result<CosignVerificationKey, OciError> {
        CosignVerificationKey::try_from_pem(&self.pem).map_err(|err| {
            OciError::Config(format!(
                "{}: not a public key in PEM (as cosign.pub): {err}",
                self.name
            ))
        })
    }
}

/// The `which` (public or private) key file at `path`, read to at most
/// [`MAX_KEY_BYTES`](nicpolicy_engine::limits::MAX_KEY_BYTES).
fn read_key_file(path: &Path, which: &str) -> Result<Vec<u8>, OciError> {
    nicpolicy_inputs::files::read_at_most(path, nicpolicy_engine::limits::MAX_KEY_BYTES).map_err(
        |err| {
            OciError::Config(format!(
                "{}: cannot read the {which} key: {err}",
                path.display()
            ))
        },
    )
}

/// Which keys must have signed the modules of which repositories: the `verification:` section
/// of a configuration, or `--verify-key` on the command line (one rule for every repository).
/// Empty, nothing is checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verification {
    /// The rules, first match wins.
    pub rules: Vec<VerificationRule>,
}

/// Modules of the repositories `references` names must be signed by one of `keys`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerificationRule {
    /// Repository patterns: `host/path/name`, where `*` stands for any run of characters
    /// (`registry.example.net/platform/*`, or `*` for every repository).
    pub references: Vec<String>,
    /// The keys, any one of which is enough.
    pub keys: Vec<TrustedKey>,
}

impl Verification {
    /// A rule for every repository: signed by one of `keys`.
    pub fn every_repository(keys: Vec<TrustedKey>) -> Verification {
        Verification {
            rules: vec![VerificationRule {
                references: vec!["*".to_string()],
                keys,
            }],
        }
    }

    /// Whether nothing is checked.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rule for `repository` (`host/path/name`), the first whose pattern matches.
    pub fn rule_for(&self, repository: &str) -> Option<&VerificationRule> {
        self.rules.iter().find(|rule| {
            rule.references
                .iter()
                .any(|pattern| pattern_matches(pattern, repository))
        })
    }

    /// Checks `signatures` of the manifest `manifest_digest` of `reference` (repository
    /// `repository`) against the rule for the repository; answers the key that verified, or
    /// `None` when nothing is configured.
    ///
    /// # Errors
    /// [`OciError::Signature`]: no rule names the repository, no signature, or none of them
    /// names this manifest and checks with a key of the rule.
    pub fn check(
        &self,
        reference: &str,
        repository: &str,
        manifest_digest: &str,
        signatures: &[Signature],
    ) -> Result<Option<String>, OciError> {
        if self.is_empty() {
            return Ok(None);
        }
        let refuse = |why: String| OciError::Signature {
            reference: reference.to_string(),
            why,
        };
        let Some(rule) = self.rule_for(repository) else {
            return Err(refuse(format!(
                "signatures are verified, and no verification rule names {repository}: add its \
                 repository to a rule's references with the key it is signed with"
            )));
        };
        let names = rule
            .keys
            .iter()
            .map(|key| key.name.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        if signatures.is_empty() {
            return Err(refuse(format!(
                "the module is not signed (no cosign signature at {}); it must be signed by one \
                 of: {names}",
                signature_tag_reference(repository, manifest_digest)
            )));
        }
        let keys = rule
            .keys
            .iter()
            .map(|key| key.key().map(|parsed| (key.name.as_str(), parsed)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut other_digests = Vec::new();
        let mut other_repositories = Vec::new();
        for signature in signatures {
            let Ok(payload) = serde_json::from_str::<Payload>(&signature.payload) else {
                continue;
            };
            if payload.critical.kind != PAYLOAD_TYPE {
                continue;
            }
            if payload.critical.image.digest != manifest_digest {
                other_digests.push(payload.critical.image.digest);
                continue;
            }
            // What it was signed for: this repository, or one the rule names (the original of
            // a mirror, when the rule lists both). A signature made for another repository does
            // not vouch for this one, even of the same bytes.
            let signed_for = payload
                .critical
                .identity
                .as_ref()
                .map(|identity| repository_of(&identity.docker_reference))
                .unwrap_or_default();
            let names_this = signed_for == repository
                || rule
                    .references
                    .iter()
                    .any(|pattern| pattern_matches(pattern, signed_for));
            for (name, key) in &keys {
                let checked = key.verify_signature(
                    sigstore::crypto::Signature::Base64Encoded(signature.signature.as_bytes()),
                    signature.payload.as_bytes(),
                );
                if checked.is_ok() {
                    if names_this {
                        return Ok(Some((*name).to_string()));
                    }
                    other_repositories.push(if signed_for.is_empty() {
                        "no repository".to_string()
                    } else {
                        signed_for.to_string()
                    });
                }
            }
        }
        let mut why = format!(
            "none of its {} signature(s) is by a trusted key ({names})",
            signatures.len()
        );
        if !other_repositories.is_empty() {
            why.push_str(&format!(
                "; {} trusted signature(s) were made for {}, which the rule for {repository} does                  not name (a mirror's rule lists its original's repository too)",
                other_repositories.len(),
                other_repositories.join(", ")
            ));
        }
        if !other_digests.is_empty() {
            why.push_str(&format!(
                "; {} of them sign(s) another manifest ({}), not {manifest_digest}",
                other_digests.len(),
                other_digests.join(", ")
            ));
        }
        Err(refuse(why))
    }
}

/// Whether `repository` matches `pattern`, where `*` stands for any run of characters.
fn pattern_matches(pattern: &str, repository: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = repository.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        // No `*`: the whole pattern was the prefix.
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

/// Checks that `pattern` names repositories: no tag, no digest.
///
/// # Errors
/// Why it does not.
pub fn check_pattern(pattern: &str) -> Result<(), String> {
    let name = pattern.rsplit('/').next().unwrap_or(pattern);
    if pattern.is_empty() {
        Err(
            "a reference pattern is empty; write host/path/name, with * for any run of characters"
                .to_string(),
        )
    } else if pattern.contains('@') || (pattern.contains('/') && name.contains(':')) {
        Err(format!(
            "{pattern:?} names a tag or a digest; a pattern names repositories (host/path/name, \
             * for any run of characters), and every tag and digest of them is checked"
        ))
    } else {
        Ok(())
    }
}

/// The tag holding the signatures of `manifest_digest`.
fn signature_tag(manifest_digest: &str) -> String {
    format!("{}.sig", manifest_digest.replacen(':', "-", 1))
}

/// `repository:sha256-<hex>.sig`, for messages.
fn signature_tag_reference(repository: &str, manifest_digest: &str) -> String {
    format!("{repository}:{}", signature_tag(manifest_digest))
}

/// The reference of the signature image of `manifest_digest` in `parsed`'s repository.
pub fn signature_reference(parsed: &Reference, manifest_digest: &str) -> Reference {
    Reference::with_tag(
        parsed.registry().to_string(),
        parsed.repository().to_string(),
        signature_tag(manifest_digest),
    )
}

/// Whether the registry's error says the manifest does not exist.
pub(super) fn is_not_found(err: &oci_client::errors::OciDistributionError) -> bool {
    use oci_client::errors::{OciDistributionError as E, OciErrorCode};
    match err {
        E::ImageManifestNotFoundError(_) => true,
        E::RegistryError { envelope, .. } => envelope.errors.iter().any(|e| {
            matches!(
                e.code,
                OciErrorCode::ManifestUnknown | OciErrorCode::NameUnknown
            )
        }),
        E::ServerError { code, .. } => *code == 404,
        _ => false,
    }
}

/// The signature image of `manifest_digest`, if the registry has one.
async fn signature_image(
    client: &Client,
    manifests: &super::manifest::Manifests,
    auth: &RegistryAuth,
    parsed: &Reference,
    manifest_digest: &str,
) -> Result<Option<OciImageManifest>, oci_client::errors::OciDistributionError> {
    let at = signature_reference(parsed, manifest_digest);
    match manifests
        .get(client, auth, &at, &super::manifest::IMAGE_MANIFEST_TYPES)
        .await
    {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|err| {
            oci_client::errors::OciDistributionError::ManifestParsingError(format!(
                "the signature image {at}: {err}"
            ))
        }),
        Err(err) if is_not_found(&err) => Ok(None),
        Err(err) => Err(err),
    }
}

/// The signatures of `manifest_digest` in `parsed`'s repository (none when there is no
/// signature image). Layers that are not simple-signing payloads, have no signature annotation
/// or are too large are passed over.
pub(super) async fn fetch(
    client: &Client,
    manifests: &super::manifest::Manifests,
    auth: &RegistryAuth,
    parsed: &Reference,
    manifest_digest: &str,
) -> Result<Vec<Signature>, oci_client::errors::OciDistributionError> {
    let Some(image) = signature_image(client, manifests, auth, parsed, manifest_digest).await?
    else {
        return Ok(Vec::new());
    };
    let at = signature_reference(parsed, manifest_digest);
    let mut signatures = Vec::new();
    for layer in image.layers.iter().take(MAX_SIGNATURES) {
        let Some(signature) = annotation(layer) else {
            continue;
        };
        if layer.media_type != SIGNATURE_LAYER {
            continue;
        }
        // Read to at most the size the layer declares and the payload bound, whatever the
        // registry sends: a payload that is not what its descriptor says is no signature.
        let payload = match super::blob::read(client, &at, layer, MAX_PAYLOAD_BYTES).await {
            Ok(payload) => payload,
            Err(super::blob::BlobError::Registry(err)) => return Err(err),
            Err(super::blob::BlobError::Broken { error, .. }) => return Err(error.into()),
            Err(_) => continue,
        };
        if let Ok(payload) = String::from_utf8(payload) {
            signatures.push(Signature {
                payload,
                signature: signature.to_string(),
            });
        }
    }
    Ok(signatures)
}

fn annotation(layer: &OciDescriptor) -> Option<&str> {
    layer
        .annotations
        .as_ref()?
        .get(SIGNATURE_ANNOTATION)
        .map(String::as_str)
}

/// A private key that signs (ECDSA P-256, cosign's kind).
pub struct SigningKey {
    signer: SigStoreSigner,
    pair: SigStoreKeyPair,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey { .. }")
    }
}

impl SigningKey {
    /// A new key pair.
    ///
    /// # Errors
    /// [`OciError::Config`] when no key could be made.
    pub fn generate() -> Result<SigningKey, OciError> {
        let signer = SigningScheme::ECDSA_P256_SHA256_ASN1
            .create_signer()
            .map_err(|err| OciError::Config(format!("cannot make a key pair: {err}")))?;
        let pair = signer
            .to_sigstore_keypair()
            .map_err(|err| OciError::Config(format!("cannot make a key pair: {err}")))?;
        Ok(SigningKey { signer, pair })
    }

    /// The private key in `pem`: cosign's encrypted format (`ENCRYPTED SIGSTORE PRIVATE KEY`,
    /// `ENCRYPTED COSIGN PRIVATE KEY`, opened with `password`) or a PKCS#8 `PRIVATE KEY`.
    ///
    /// # Errors
    /// [`OciError::Config`] naming `name`: a wrong password, not a private key, not ECDSA P-256.
    pub fn from_pem(name: &str, pem: &[u8], password: &[u8]) -> Result<SigningKey, OciError> {
        let encrypted = String::from_utf8_lossy(pem).contains("ENCRYPTED");
        let pair = if encrypted {
            SigStoreKeyPair::from_encrypted_pem(pem, password)
        } else {
            SigStoreKeyPair::from_pem(pem)
        }
        .map_err(|err| {
            OciError::Config(format!(
                "{name}: cannot open the private key{}: {err}",
                if encrypted {
                    " (is COSIGN_PASSWORD its password?)"
                } else {
                    ""
                }
            ))
        })?;
        let signer = pair
            .to_sigstore_signer(&SigningScheme::ECDSA_P256_SHA256_ASN1)
            .map_err(|err| {
                OciError::Config(format!(
                    "{name}: signs only with ECDSA P-256 keys (cosign's): {err}"
                ))
            })?;
        Ok(SigningKey { signer, pair })
    }

    /// The key in the file at `path` (see [`SigningKey::from_pem`]).
    ///
    /// # Errors
    /// As for [`SigningKey::from_pem`], and an unreadable file.
    pub fn read(path: &Path, password: &[u8]) -> Result<SigningKey, OciError> {
        let pem = read_key_file(path, "private")?;
        SigningKey::from_pem(&path.display().to_string(), &pem, password)
    }

    /// The private key in cosign's encrypted format, sealed with `password`.
    ///
    /// # Errors
    /// [`OciError::Config`] when it cannot be written.
    pub fn to_encrypted_pem(&self, password: &[u8]) -> Result<String, OciError> {
        self.pair
            .private_key_to_encrypted_pem(password)
            .map(|pem| pem.to_string())
            .map_err(|err| OciError::Config(format!("cannot write the private key: {err}")))
    }

    /// The public key in PEM (`cosign.pub`).
    ///
    /// # Errors
    /// [`OciError::Config`] when it cannot be written.
    pub fn public_pem(&self) -> Result<String, OciError> {
        self.pair
            .public_key_to_pem()
            .map_err(|err| OciError::Config(format!("cannot write the public key: {err}")))
    }

    /// The base64 signature of `payload`, as a signature layer's annotation holds it.
    fn sign(&self, payload: &[u8]) -> Result<String, OciError> {
        self.signer
            .sign(payload)
            .map(|signature| {
                base64::Engine::encode(&base64::engine::general_purpose::STANDARD, signature)
            })
            .map_err(|err| OciError::Config(format!("cannot sign: {err}")))
    }
}

/// The simple-signing payload for the manifest `manifest_digest` of `repository`.
fn payload(repository: &str, manifest_digest: &str) -> String {
    serde_json::json!({
        "critical": {
            "identity": {"docker-reference": repository},
            "image": {"docker-manifest-digest": manifest_digest},
            "type": PAYLOAD_TYPE,
        },
        "optional": null,
    })
    .to_string()
}

/// What [`sign`] did.
#[derive(Clone, Debug)]
pub struct Signed {
    /// The immutable reference of what was signed.
    pub immutable: String,
    /// Where the signature is: `host/repo:sha256-<hex>.sig`.
    pub signature: String,
}

/// Signs the manifest `reference` names with `key` and adds the signature to its signature
/// image (as `cosign sign --key` does, without a transparency-log entry).
///
/// # Errors
/// [`OciError`] naming the reference and the step the registry refused.
pub async fn sign(
    reference: &str,
    key: &SigningKey,
    options: &super::RegistryOptions,
) -> Result<Signed, OciError> {
    let parsed = super::parse_reference(reference)?;
    let (client, auth, manifests) = super::client(reference, &parsed, options)?;
    client
        .auth(&parsed, &auth, oci_client::RegistryOperation::Push)
        .await
        .map_err(super::registry_error(reference, "signing in"))?;
    let digest = match parsed.digest() {
        Some(digest) => digest.to_string(),
        None => client
            .fetch_manifest_digest(&parsed, &auth)
            .await
            .map_err(super::registry_error(reference, "resolving the tag"))?,
    };
    let repository = super::repository(&parsed);
    let payload = payload(&repository, &digest);
    let signature = key.sign(payload.as_bytes())?;
    let at = signature_reference(&parsed, &digest);
    let mut layers = signature_image(&client, &manifests, &auth, &parsed, &digest)
        .await
        .map_err(super::registry_error(reference, "reading its signatures"))?
        .map(|image| image.layers)
        .unwrap_or_default();
    let layer = OciDescriptor {
        media_type: SIGNATURE_LAYER.to_string(),
        digest: digest_of(payload.as_bytes()),
        size: payload.len() as i64,
        annotations: Some(BTreeMap::from([(
            SIGNATURE_ANNOTATION.to_string(),
            signature,
        )])),
        ..OciDescriptor::default()
    };
    client
        .push_blob(&at, payload.into_bytes(), &layer.digest)
        .await
        .map_err(super::registry_error(reference, "pushing the signature"))?;
    layers.retain(|existing| existing.annotations != layer.annotations);
    layers.push(layer);
    // cosign's config: the layers as the image's root filesystem.
    let config = serde_json::json!({
        "architecture": "",
        "created": "0001-01-01T00:00:00Z",
        "history": [{"created": "0001-01-01T00:00:00Z"}],
        "os": "",
        "rootfs": {"type": "layers", "diff_ids": layers.iter().map(|l| l.digest.clone()).collect::<Vec<_>>()},
        "config": {},
    })
    .to_string()
    .into_bytes();
    let config_digest = digest_of(&config);
    let config_size = config.len() as i64;
    client
        .push_blob(&at, config, &config_digest)
        .await
        .map_err(super::registry_error(
            reference,
            "pushing the signature's config",
        ))?;
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {"mediaType": IMAGE_CONFIG, "digest": config_digest, "size": config_size},
        "layers": layers,
    });
    let manifest = serde_json::to_vec(&manifest)
        .map_err(|err| OciError::Config(format!("cannot write the signature manifest: {err}")))?;
    client
        .push_manifest_raw(&at, manifest, http::HeaderValue::from_static(MANIFEST))
        .await
        .map_err(super::registry_error(
            reference,
            "pushing the signature manifest",
        ))?;
    Ok(Signed {
        immutable: super::immutable(&parsed, &digest),
        signature: signature_tag_reference(&repository, &digest),
    })
}

/// The public and private key files `generate-key-pair` writes beside `prefix`
/// (`prefix.pub`, `prefix.key`).
pub fn key_pair_paths(prefix: &Path) -> (PathBuf, PathBuf) {
    let with = |extension: &str| {
        let mut name = prefix.as_os_str().to_owned();
        name.push(extension);
        PathBuf::from(name)
    };
    (with(".pub"), with(".key"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> (SigningKey, TrustedKey) {
        let signing = SigningKey::generate().expect("key");
        let public = TrustedKey::from_pem(
            "site.pub".to_string(),
            signing.public_pem().expect("pem").into_bytes(),
        )
        .expect("public key");
        (signing, public)
    }

    fn signature(key: &SigningKey, digest: &str) -> Signature {
        let payload = payload("registry.example.net/platform/dmz-guard", digest);
        let signature = key.sign(payload.as_bytes()).expect("sign");
        Signature { payload, signature }
    }

    const DIGEST: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const OTHER: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";
    const REPOSITORY: &str = "registry.example.net/platform/dmz-guard";

    #[test]
    fn patterns_match_repositories() {
        assert!(pattern_matches("*", REPOSITORY));
        assert!(pattern_matches(
            "registry.example.net/platform/*",
            REPOSITORY
        ));
        assert!(pattern_matches(
            "registry.example.net/*/dmz-guard",
            REPOSITORY
        ));
        assert!(pattern_matches(REPOSITORY, REPOSITORY));
        assert!(!pattern_matches(
            "registry.example.net/platform",
            REPOSITORY
        ));
        assert!(!pattern_matches(
            "registry.example.net/storage/*",
            REPOSITORY
        ));
        assert!(!pattern_matches("*/storage-guard", REPOSITORY));
        assert!(check_pattern("127.0.0.1:5000/platform/*").is_ok());
        assert!(check_pattern("registry.example.net/platform/dmz-guard:1.2").is_err());
        assert!(check_pattern("registry.example.net/platform/dmz-guard@sha256:11").is_err());
        assert!(check_pattern("").is_err());
    }

    #[test]
    fn a_signature_by_a_trusted_key_for_this_digest_verifies() {
        let (signing, public) = key();
        let verification = Verification::every_repository(vec![public]);
        let verified = verification
            .check("r", REPOSITORY, DIGEST, &[signature(&signing, DIGEST)])
            .expect("verified");
        assert_eq!(verified.as_deref(), Some("site.pub"));
    }

    #[test]
    fn unsigned_other_key_other_digest_and_unnamed_repositories_are_refused() {
        let (signing, public) = key();
        let (stranger, _) = key();
        let verification = Verification {
            rules: vec![VerificationRule {
                references: vec!["registry.example.net/platform/*".to_string()],
                keys: vec![public],
            }],
        };
        let refused = |signatures: &[Signature], repository: &str| {
            verification
                .check("r", repository, DIGEST, signatures)
                .expect_err("refused")
                .to_string()
        };
        assert!(refused(&[], REPOSITORY).contains("not signed"));
        assert!(refused(&[signature(&stranger, DIGEST)], REPOSITORY).contains("trusted key"));
        assert!(refused(&[signature(&signing, OTHER)], REPOSITORY).contains(OTHER));
        let mut forged = signature(&signing, DIGEST);
        forged.payload = payload(REPOSITORY, OTHER);
        assert!(refused(&[forged], REPOSITORY).contains("trusted key"));
        assert!(refused(
            &[signature(&signing, DIGEST)],
            "registry.example.net/storage/x"
        )
        .contains("no verification rule"));
        assert_eq!(
            Verification::default()
                .check("r", REPOSITORY, DIGEST, &[])
                .expect("nothing configured"),
            None
        );
    }

    #[test]
    fn a_signature_vouches_only_for_the_repositories_the_rule_names() {
        let (signing, public) = key();
        let signed_for = |repository: &str| {
            let payload = payload(repository, DIGEST);
            let signature = signing.sign(payload.as_bytes()).expect("sign");
            Signature { payload, signature }
        };
        let mirror = "mirror.eu1.example.net/platform/dmz-guard";
        let rule = |references: &[&str]| Verification {
            rules: vec![VerificationRule {
                references: references.iter().map(|r| r.to_string()).collect(),
                keys: vec![public.clone()],
            }],
        };
        // The same bytes signed for another team's repository: refused here.
        let only_platform = rule(&["registry.example.net/platform/*"]);
        let err = only_platform
            .check(
                "r",
                REPOSITORY,
                DIGEST,
                &[signed_for("registry.example.net/sandbox/dmz-guard")],
            )
            .expect_err("signed for another repository")
            .to_string();
        assert!(
            err.contains("made for registry.example.net/sandbox/dmz-guard"),
            "{err}"
        );
        // A mirror's copy: accepted where its rule names the original too, not otherwise.
        let mirrored = rule(&[
            "mirror.eu1.example.net/platform/*",
            "registry.example.net/platform/*",
        ]);
        assert!(mirrored
            .check("r", mirror, DIGEST, &[signed_for(REPOSITORY)])
            .is_ok());
        let mirror_only = rule(&["mirror.eu1.example.net/platform/*"]);
        assert!(mirror_only
            .check("r", mirror, DIGEST, &[signed_for(REPOSITORY)])
            .is_err());
        // A tag or digest in the signed reference, and a registry port, are not the repository.
        assert_eq!(
            repository_of("127.0.0.1:5000/platform/dmz-guard:1.2"),
            "127.0.0.1:5000/platform/dmz-guard"
        );
        assert_eq!(
            repository_of("127.0.0.1:5000/platform/dmz-guard@sha256:11"),
            "127.0.0.1:5000/platform/dmz-guard"
        );
        assert_eq!(
            repository_of("127.0.0.1:5000/platform/dmz-guard"),
            "127.0.0.1:5000/platform/dmz-guard"
        );
        assert!(only_platform
            .check(
                "r",
                REPOSITORY,
                DIGEST,
                &[signed_for(&format!("{REPOSITORY}:0.1.0"))]
            )
            .is_ok());
    }

    #[test]
    fn keys_survive_their_encrypted_pem() {
        let (signing, public) = key();
        let pem = signing.to_encrypted_pem(b"correct horse").expect("pem");
        assert!(pem.contains("ENCRYPTED"));
        let opened =
            SigningKey::from_pem("cosign.key", pem.as_bytes(), b"correct horse").expect("opened");
        let verification = Verification::every_repository(vec![public]);
        assert!(verification
            .check("r", REPOSITORY, DIGEST, &[signature(&opened, DIGEST)])
            .is_ok());
        let wrong = SigningKey::from_pem("cosign.key", pem.as_bytes(), b"wrong")
            .expect_err("wrong password");
        assert!(wrong.to_string().contains("COSIGN_PASSWORD"), "{wrong}");
        assert!(TrustedKey::from_pem("x.pub".to_string(), b"not a key".to_vec()).is_err());
    }
}
