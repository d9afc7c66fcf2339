//! Copying a policy module between registries (an air-gapped mirror) as it was written: the
//! manifest's bytes, so the copy has the same digest and a pinned reference only changes its
//! host, and the module's cosign signatures with it, which vouch for that digest and so check
//! at the mirror as at the source.

use oci_client::manifest::OciImageManifest;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};

use super::signature::signature_reference;
use super::{
    client, digest_of, immutable, parse_reference, pull, registry_error, OciError, Pulled,
};
use super::{RegistryOptions, MANIFEST};

/// A signature image's config or payload, or a policy's config, is small; a larger blob is
/// not copied through memory.
const MAX_SMALL_BLOB: u64 = 1 << 20;

/// What [`copy`] did.
#[derive(Debug)]
pub struct Copied {
    /// The module as pulled from the source (checked as `pull` checks it).
    pub pulled: Pulled,
    /// The copy's immutable reference (`host/repo@sha256:...`, the source's digest).
    pub immutable: String,
    /// How many signatures were copied with it.
    pub signatures: usize,
}

/// One side of the copy.
struct End<'a> {
    reference: &'a str,
    parsed: Reference,
    client: Client,
    auth: RegistryAuth,
    manifests: super::manifest::Manifests,
}

impl<'a> End<'a> {
    fn new(reference: &'a str, options: &RegistryOptions) -> Result<End<'a>, OciError> {
        let parsed = parse_reference(reference)?;
        let (client, auth, manifests) = client(reference, &parsed, options)?;
        Ok(End {
            reference,
            parsed,
            client,
            auth,
            manifests,
        })
    }

    /// The manifest at `at` as written, and its parsed form; `None` when there is none.
    async fn manifest(
        &self,
        at: &Reference,
        what: &'static str,
    ) -> Result<Option<(Vec<u8>, OciImageManifest)>, OciError> {
        match self
            .manifests
            .get(&self.client, &self.auth, at, &[MANIFEST])
            .await
        {
            Ok(bytes) => {
                let manifest = serde_json::from_slice(&bytes).map_err(|err| OciError::Layout {
                    reference: self.reference.to_string(),
                    why: format!("{what}: not an OCI image manifest: {err}"),
                })?;
                Ok(Some((bytes, manifest)))
            }
            Err(err) if super::signature::is_not_found(&err) => Ok(None),
            Err(err) => Err(registry_error(self.reference, what)(err)),
        }
    }

    /// A config or signature blob, read to at most its declared size and [`MAX_SMALL_BLOB`]
    /// ([`super::blob::read`]: cut off at the first byte more, digest checked).
    async fn small_blob(
        &self,
        at: &Reference,
        descriptor: &oci_client::manifest::OciDescriptor,
    ) -> Result<Vec<u8>, OciError> {
        use super::blob::BlobError;
        match super::blob::read(&self.client, at, descriptor, MAX_SMALL_BLOB).await {
            Ok(bytes) => Ok(bytes),
            Err(BlobError::Digest { expected, actual }) => Err(OciError::Digest {
                reference: self.reference.to_string(),
                expected,
                actual,
            }),
            Err(err @ (BlobError::Registry(_) | BlobError::Broken { .. })) => {
                Err(OciError::Registry {
                    reference: self.reference.to_string(),
                    what: "reading a blob",
                    unreachable: err.unreachable(),
                    why: err.to_string(),
                })
            }
            Err(err) => Err(OciError::Layout {
                reference: self.reference.to_string(),
                why: format!(
                    "blob {} (a config or signature, at most {MAX_SMALL_BLOB} bytes): {err}",
                    descriptor.digest
                ),
            }),
        }
    }

    async fn push_blob(
        &self,
        at: &Reference,
        bytes: Vec<u8>,
        digest: &str,
    ) -> Result<(), OciError> {
        self.client
            .push_blob(at, bytes, digest)
            .await
            .map(|_| ())
            .map_err(registry_error(self.reference, "pushing a blob"))
    }

    async fn push_manifest(&self, at: &Reference, bytes: Vec<u8>) -> Result<(), OciError> {
        self.client
            .push_manifest_raw(at, bytes, http::HeaderValue::from_static(MANIFEST))
            .await
            .map(|_| ())
            .map_err(registry_error(self.reference, "pushing the manifest"))
    }
}

/// Copies the module at `source` to `destination` (`host/repo:tag`) with its signatures.
///
/// # Errors
/// [`OciError`] naming the side and the step that failed; the source is checked (layout, layer
/// digest, Wasm, and signatures when `options` verifies them) before anything is written.
pub async fn copy(
    source: &str,
    destination: &str,
    options: &RegistryOptions,
) -> Result<Copied, OciError> {
    let pulled = pull(source, options).await?;
    let digest = pulled
        .immutable
        .rsplit_once('@')
        .map(|(_, digest)| digest.to_string())
        .unwrap_or_default();
    let from = End::new(source, options)?;
    let to = End::new(destination, options)?;
    let pinned = from.parsed.clone_with_digest(digest.clone());
    let Some((manifest_bytes, manifest)) = from.manifest(&pinned, "reading the manifest").await?
    else {
        return Err(OciError::Layout {
            reference: source.to_string(),
            why: format!("the manifest {digest} went away while it was copied"),
        });
    };
    if digest_of(&manifest_bytes) != digest {
        return Err(OciError::Digest {
            reference: source.to_string(),
            expected: digest,
            actual: digest_of(&manifest_bytes),
        });
    }
    to.client
        .auth(&to.parsed, &to.auth, RegistryOperation::Push)
        .await
        .map_err(registry_error(destination, "signing in"))?;
    let config = from.small_blob(&pinned, &manifest.config).await?;
    to.push_blob(&to.parsed, config, &manifest.config.digest)
        .await?;
    // The module's layer: the bytes pull checked against this manifest.
    let layer = manifest
        .layers
        .first()
        .map(|l| l.digest.clone())
        .unwrap_or_default();
    to.push_blob(&to.parsed, pulled.bytes.clone(), &layer)
        .await?;
    to.push_manifest(&to.parsed, manifest_bytes).await?;
    let signatures = copy_signatures(&from, &to, &digest).await?;
    let immutable = immutable(&to.parsed, &digest);
    Ok(Copied {
        pulled,
        immutable,
        signatures,
    })
}

/// Copies the signature image of `digest`, if the source has one; answers how many signatures
/// it holds.
async fn copy_signatures(from: &End<'_>, to: &End<'_>, digest: &str) -> Result<usize, OciError> {
    let at = signature_reference(&from.parsed, digest);
    let Some((bytes, manifest)) = from.manifest(&at, "reading its signatures").await? else {
        return Ok(0);
    };
    let target = signature_reference(&to.parsed, digest);
    for descriptor in std::iter::once(&manifest.config).chain(&manifest.layers) {
        let blob = from.small_blob(&at, descriptor).await?;
        to.push_blob(&target, blob, &descriptor.digest).await?;
    }
    to.push_manifest(&target, bytes).await?;
    Ok(manifest.layers.len())
}
