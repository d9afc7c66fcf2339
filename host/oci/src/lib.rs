//! Policies as OCI artifacts: `nicpolicy push` writes a module to a registry, `nicpolicy pull`
//! reads it back, both through oci-client (the OCI distribution client of the ORAS project).
//!
//! - **Push** writes Kubewarden's layout, so `kwctl` and policy-server read the same artifact:
//!   a config of type [`KUBEWARDEN_CONFIG`] (`{}`), one layer of type [`KUBEWARDEN_LAYER`] (the
//!   module), and annotations from the module's metadata. It answers the immutable reference
//!   `host/repo@sha256:...` of the manifest it wrote: sign and pin that, never a tag.
//! - **Pull** accepts that layout and the CNCF Wasm artifact layout ([`CNCF_CONFIG`],
//!   [`CNCF_LAYER`]); anything else (an image, two layers) is refused naming what it holds. The
//!   layer's digest is checked against the manifest as it is read, and the bytes must be a
//!   WebAssembly module.
//! - **Transport**: HTTPS with the system's CAs plus any given; plain HTTP only to a loopback
//!   registry (`--plain-http`), for tests and local mirrors. Credentials come from a docker
//!   `config.json` ([`auth`]), the format of an imagePullSecret.
//! - **Signatures**: with a [`signature::Verification`] in the options, a pulled module is used
//!   only when a cosign signature of its manifest checks with a trusted key ([`signature`]).

pub mod auth;
pub mod blob;
pub mod config;
pub mod fetcher;
pub mod manifest;
pub mod mirror;
pub mod signature;
pub mod store;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::manifest::OciImageManifest;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};
use sha2::{Digest, Sha256};

use nicpolicy_engine::inspect::ModuleInfo;

/// Kubewarden's config media type (written on push, read on pull).
pub const KUBEWARDEN_CONFIG: &str = "application/vnd.wasm.config.v1+json";
/// Kubewarden's layer media type.
pub const KUBEWARDEN_LAYER: &str = "application/vnd.wasm.content.layer.v1+wasm";
/// The CNCF Wasm artifact's config media type (read on pull).
pub const CNCF_CONFIG: &str = "application/vnd.wasm.config.v0+json";
/// The CNCF Wasm artifact's layer media type.
pub const CNCF_LAYER: &str = "application/wasm";
/// The manifest media type written.
const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// Why a registry operation failed; every variant names the reference.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// The reference does not parse.
    #[error("{reference}: not an OCI reference ({why}); write host/repository:tag or host/repository@sha256:...")]
    Reference {
        /// As given.
        reference: String,
        /// The parser's words.
        why: String,
    },
    /// `--plain-http` to a registry that is not on this machine.
    #[error("{reference}: plain HTTP is only for a registry on loopback (127.0.0.1, ::1, localhost), not {registry}; use HTTPS (a private CA: --registry-ca)")]
    PlainHttp {
        /// As given.
        reference: String,
        /// Its registry.
        registry: String,
    },
    /// The registry refused, or could not be reached.
    #[error("{reference}: {what}: {why}")]
    Registry {
        /// As given.
        reference: String,
        /// What was being done (`pulling`, `pushing the layer`, ...).
        what: &'static str,
        /// The client's words.
        why: String,
        /// Whether the registry could not be reached or could not answer (a connection that
        /// failed or timed out, a 5xx or 429 answer), rather than answered no (404, 401, 403,
        /// a manifest it refuses): only then may a stored copy stand in for a tag.
        unreachable: bool,
    },
    /// The artifact is not a Wasm policy in a layout this reads.
    #[error("{reference}: {why}")]
    Layout {
        /// As given.
        reference: String,
        /// What it holds instead.
        why: String,
    },
    /// The bytes are not what the manifest says.
    #[error(
        "{reference}: the layer's bytes have digest {actual}, but the manifest says {expected}"
    )]
    Digest {
        /// As given.
        reference: String,
        /// The manifest's.
        expected: String,
        /// The bytes'.
        actual: String,
    },
    /// Signatures are verified, and the module has none that checks.
    #[error("{reference}: refused: {why}")]
    Signature {
        /// As given.
        reference: String,
        /// What is missing or wrong.
        why: String,
    },
    /// Credentials, CA or key files that cannot be used.
    #[error("{0}")]
    Config(String),
    /// The registry client could not run (no async runtime could be started).
    #[error("{0}")]
    Runtime(String),
}

/// How to reach registries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegistryOptions {
    /// Plain HTTP, refused for anything but a loopback registry.
    pub plain_http: bool,
    /// The docker `config.json` with credentials; `None` looks where docker does
    /// (`$DOCKER_CONFIG/config.json`, `~/.docker/config.json`), and none there is anonymous.
    pub docker_config: Option<PathBuf>,
    /// PEM files of CAs to trust beside the system's, for every registry.
    pub ca_files: Vec<PathBuf>,
    /// PEM files of CAs to trust for one registry (`host[:port]` as references write it).
    pub registry_ca_files: BTreeMap<String, Vec<PathBuf>>,
    /// The keys pulled modules must be signed with; empty, signatures are not checked.
    pub verification: signature::Verification,
    /// How long a pull may take.
    pub timeouts: Timeouts,
}

/// How long the registry client waits: the time bounds of every request and of a whole pull.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Setting up a connection (TCP and TLS).
    pub connect: Duration,
    /// The longest wait for the next bytes of an answer.
    pub read: Duration,
    /// A whole pull: the manifest, the module and its signatures. A pull past it is refused as
    /// a registry that cannot be reached.
    pub pull: Duration,
}

impl Default for Timeouts {
    /// 10 s to connect, 30 s between bytes, 60 s for a pull: a module is at most a few MiB.
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(10),
            read: Duration::from_secs(30),
            pull: Duration::from_secs(60),
        }
    }
}

/// A pulled module.
#[derive(Clone, Debug)]
pub struct Pulled {
    /// The module's bytes.
    pub bytes: Vec<u8>,
    /// `sha256:...` of the layer (the module's sha256 with the prefix).
    pub layer_digest: String,
    /// The manifest's bytes, as the registry sent them (their digest is the immutable
    /// reference's).
    pub manifest: Vec<u8>,
    /// The immutable reference of what was pulled: `host/repo@sha256:...` (the manifest's).
    pub immutable: String,
    /// Which layout it was in.
    pub layout: Layout,
    /// The signatures that were read (only when signatures are verified).
    pub signatures: Vec<signature::Signature>,
    /// The key that verified a signature, when signatures are verified.
    pub verified_by: Option<String>,
}

/// The artifact layouts pull reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Kubewarden's (`kwctl push`, `nicpolicy push`).
    Kubewarden,
    /// The CNCF Wasm artifact.
    Cncf,
}

impl Layout {
    /// How messages name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Layout::Kubewarden => "Kubewarden",
            Layout::Cncf => "CNCF Wasm",
        }
    }
}

/// Parses `reference` (`host/repo:tag`, `host/repo@sha256:...`).
///
/// # Errors
/// [`OciError::Reference`].
pub fn parse_reference(reference: &str) -> Result<Reference, OciError> {
    reference
        .parse::<Reference>()
        .map_err(|err| OciError::Reference {
            reference: reference.to_string(),
            why: err.to_string(),
        })
}

/// A registry client for `reference` with `options`, the credentials to use, and the bounded
/// manifest reader with the same TLS settings.
fn client(
    reference: &str,
    parsed: &Reference,
    options: &RegistryOptions,
) -> Result<(Client, RegistryAuth, manifest::Manifests), OciError> {
    // reqwest is built without a TLS provider of its own: the process uses ring, as the
    // webhook does (one TLS stack; no aws-lc-rs).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let registry = parsed.resolve_registry().to_string();
    let protocol = if options.plain_http {
        let host = registry
            .rsplit_once(':')
            .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
            .map_or(registry.as_str(), |(host, _)| host);
        if !matches!(host, "127.0.0.1" | "localhost" | "[::1]" | "::1") {
            return Err(OciError::PlainHttp {
                reference: reference.to_string(),
                registry,
            });
        }
        ClientProtocol::HttpsExcept(vec![registry.clone()])
    } else {
        ClientProtocol::Https
    };
    let mut extra_root_certificates = Vec::new();
    let own = options
        .registry_ca_files
        .get(&registry)
        .into_iter()
        .flatten();
    for path in options.ca_files.iter().chain(own) {
        let data = nicpolicy_inputs::files::read_at_most(path, 1 << 20).map_err(|err| {
            OciError::Config(format!(
                "{}: cannot read the CA bundle: {err}",
                path.display()
            ))
        })?;
        extra_root_certificates.push(oci_client::client::Certificate {
            encoding: oci_client::client::CertificateEncoding::Pem,
            data,
        });
    }
    let manifests = manifest::Manifests::new(
        &extra_root_certificates,
        options.plain_http,
        &options.timeouts,
    )
    .map_err(|err| OciError::Config(format!("{reference}: the registry client: {err}")))?;
    let client = Client::new(ClientConfig {
        protocol,
        extra_root_certificates,
        connect_timeout: Some(options.timeouts.connect),
        read_timeout: Some(options.timeouts.read),
        ..ClientConfig::default()
    });
    let auth = auth::credentials(&registry, options.docker_config.as_deref())
        .map_err(|err| OciError::Config(err.to_string()))?;
    Ok((client, auth, manifests))
}

fn registry_error<'a>(
    reference: &'a str,
    what: &'static str,
) -> impl Fn(oci_client::errors::OciDistributionError) -> OciError + 'a {
    move |err| {
        // The transport's causes (refused connection, certificate, TLS to a plain-HTTP
        // registry) are in the error's sources: say them.
        let mut why = err.to_string();
        let mut source = std::error::Error::source(&err);
        while let Some(cause) = source {
            let text = cause.to_string();
            if !why.contains(&text) {
                why.push_str(": ");
                why.push_str(&text);
            }
            source = cause.source();
        }
        OciError::Registry {
            reference: reference.to_string(),
            what,
            why,
            unreachable: unreachable(&err),
        }
    }
}

/// Whether `err` says the registry could not be reached or could not answer now (so that
/// asking again later may work), as opposed to an answer: a tag withdrawn (404), credentials
/// refused (401, 403), an artifact the registry will not give.
fn unreachable(err: &oci_client::errors::OciDistributionError) -> bool {
    use oci_client::errors::OciDistributionError as E;
    let transient = |code: u16| code >= 500 || code == 429;
    match err {
        // No status: the request never got an answer (connection, TLS, timeout, body cut).
        E::RequestError(err) => err.status().is_none_or(|status| transient(status.as_u16())),
        E::IoError(_) => true,
        E::ServerError { code, .. } => transient(*code),
        _ => false,
    }
}

/// `sha256:<hex>` of `bytes`.
pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

/// `host/repo`: the repository of `parsed`, as verification rules name it.
fn repository(parsed: &Reference) -> String {
    format!("{}/{}", parsed.resolve_registry(), parsed.repository())
}

/// `host/repo@digest`: the immutable form of `reference`.
fn immutable(parsed: &Reference, digest: &str) -> String {
    format!("{}@{digest}", repository(parsed))
}

/// Pulls the module at `reference`, within [`Timeouts::pull`]: the manifest, then its one
/// layer (refused before it is fetched when the manifest names more than one, or declares more
/// than [`MAX_MODULE_BYTES`](nicpolicy_engine::limits::MAX_MODULE_BYTES)), read to at most the
/// size it declares and checked against its digest, then the signatures when they are verified.
///
/// # Errors
/// [`OciError`] naming the reference: the registry's refusal, a pull past its deadline, a
/// layout that is not a Wasm policy, a layer whose bytes do not match the manifest, bytes that
/// are not WebAssembly.
pub async fn pull(reference: &str, options: &RegistryOptions) -> Result<Pulled, OciError> {
    let limit = options.timeouts.pull;
    match tokio::time::timeout(limit, pull_unbounded(reference, options)).await {
        Ok(pulled) => pulled,
        Err(_) => Err(OciError::Registry {
            reference: reference.to_string(),
            what: "pulling",
            why: format!(
                "not finished within {} s (registry.timeouts.pull)",
                limit.as_secs_f64()
            ),
            unreachable: true,
        }),
    }
}

async fn pull_unbounded(reference: &str, options: &RegistryOptions) -> Result<Pulled, OciError> {
    let parsed = parse_reference(reference)?;
    let (client, auth, manifests) = client(reference, &parsed, options)?;
    let layout_error = |why: String| OciError::Layout {
        reference: reference.to_string(),
        why,
    };
    // The manifest as the registry sent it: the store keeps these bytes, which prove which
    // layer the digest names.
    let manifest_bytes = manifests
        .get(&client, &auth, &parsed, &manifest::IMAGE_MANIFEST_TYPES)
        .await
        .map_err(registry_error(reference, "pulling"))?;
    let manifest_digest = digest_of(&manifest_bytes);
    if parsed
        .digest()
        .is_some_and(|digest| digest != manifest_digest)
    {
        return Err(layout_error(format!(
            "the registry's manifest has digest {manifest_digest}, not the one the reference names"
        )));
    }
    let manifest: OciImageManifest = serde_json::from_slice(&manifest_bytes)
        .map_err(|err| layout_error(format!("the manifest is not an image manifest: {err}")))?;
    let layout = match manifest.config.media_type.as_str() {
        KUBEWARDEN_CONFIG => Layout::Kubewarden,
        CNCF_CONFIG => Layout::Cncf,
        other => {
            return Err(layout_error(format!(
                "the artifact's config is {other:?}, not a Wasm policy's ({KUBEWARDEN_CONFIG} or {CNCF_CONFIG})"
            )))
        }
    };
    // Counted before any layer is fetched: an image of 200 layers costs one request.
    let [layer] = manifest.layers.as_slice() else {
        return Err(layout_error(format!(
            "the artifact has {} layers; a Wasm policy has one",
            manifest.layers.len()
        )));
    };
    if layer.media_type != KUBEWARDEN_LAYER && layer.media_type != CNCF_LAYER {
        return Err(layout_error(format!(
            "the layer is {:?}, not a Wasm module ({KUBEWARDEN_LAYER} or {CNCF_LAYER})",
            layer.media_type
        )));
    }
    let max = nicpolicy_engine::limits::MAX_MODULE_BYTES as u64;
    let bytes = match blob::read(&client, &parsed, layer, max).await {
        Ok(bytes) => bytes,
        Err(blob::BlobError::Digest { expected, actual }) => {
            return Err(OciError::Digest {
                reference: reference.to_string(),
                expected,
                actual,
            })
        }
        Err(err @ blob::BlobError::Registry(_)) | Err(err @ blob::BlobError::Broken { .. }) => {
            return Err(OciError::Registry {
                reference: reference.to_string(),
                what: "pulling the module",
                unreachable: err.unreachable(),
                why: err.to_string(),
            })
        }
        Err(err) => return Err(layout_error(format!("the module layer: {err}"))),
    };
    if !bytes.starts_with(b"\0asm") {
        return Err(layout_error(
            "the layer is not a WebAssembly module (it does not start with \\0asm)".to_string(),
        ));
    }
    let layer_digest = layer.digest.clone();
    let (signatures, verified_by) = if options.verification.is_empty() {
        (Vec::new(), None)
    } else {
        // Read through the same client: its token for the repository is still good.
        let signatures = signature::fetch(&client, &manifests, &auth, &parsed, &manifest_digest)
            .await
            .map_err(registry_error(reference, "reading its signatures"))?;
        let verified_by = options.verification.check(
            reference,
            &repository(&parsed),
            &manifest_digest,
            &signatures,
        )?;
        (signatures, verified_by)
    };
    Ok(Pulled {
        bytes,
        layer_digest,
        manifest: manifest_bytes.to_vec(),
        immutable: immutable(&parsed, &manifest_digest),
        layout,
        signatures,
        verified_by,
    })
}

/// Pushes `module` (checked by `info`, from [`nicpolicy_engine::inspect::inspect`]) to `reference` in
/// Kubewarden's layout; returns the immutable reference of the manifest written.
///
/// # Errors
/// [`OciError`] naming the reference and the step the registry refused.
pub async fn push(
    module: &[u8],
    info: &ModuleInfo,
    reference: &str,
    options: &RegistryOptions,
) -> Result<String, OciError> {
    let parsed = parse_reference(reference)?;
    let (client, auth, _) = client(reference, &parsed, options)?;
    client
        .auth(&parsed, &auth, RegistryOperation::Push)
        .await
        .map_err(registry_error(reference, "signing in"))?;
    let config = b"{}".to_vec();
    let config_digest = digest_of(&config);
    let layer_digest = digest_of(module);
    client
        .push_blob(&parsed, config.clone(), &config_digest)
        .await
        .map_err(registry_error(reference, "pushing the config"))?;
    client
        .push_blob(&parsed, module.to_vec(), &layer_digest)
        .await
        .map_err(registry_error(reference, "pushing the module"))?;
    let manifest = manifest_bytes(module, &config, info)?;
    let manifest_digest = digest_of(&manifest);
    client
        .push_manifest_raw(&parsed, manifest, http::HeaderValue::from_static(MANIFEST))
        .await
        .map_err(registry_error(reference, "pushing the manifest"))?;
    Ok(immutable(&parsed, &manifest_digest))
}

/// The manifest push writes: config and layer descriptors, and annotations from the module's
/// metadata (`org.opencontainers.image.title`, `.version`, `.description`).
fn manifest_bytes(module: &[u8], config: &[u8], info: &ModuleInfo) -> Result<Vec<u8>, OciError> {
    let mut annotations = BTreeMap::new();
    if let Some(metadata) = &info.metadata {
        annotations.insert(
            "org.opencontainers.image.title".to_string(),
            metadata.name.clone(),
        );
        annotations.insert(
            "org.opencontainers.image.version".to_string(),
            metadata.version.clone(),
        );
        if !metadata.description.is_empty() {
            annotations.insert(
                "org.opencontainers.image.description".to_string(),
                metadata.description.clone(),
            );
        }
        annotations.insert(
            "io.nicpolicy.abi-version".to_string(),
            metadata.abi_version.to_string(),
        );
    }
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {
            "mediaType": KUBEWARDEN_CONFIG,
            "digest": digest_of(config),
            "size": config.len(),
        },
        "layers": [{
            "mediaType": KUBEWARDEN_LAYER,
            "digest": digest_of(module),
            "size": module.len(),
        }],
        "annotations": annotations,
    });
    // Checked against the client's own type, so what is written is a manifest it reads back.
    serde_json::from_value::<OciImageManifest>(manifest.clone())
        .map_err(|err| OciError::Config(format!("the manifest would not be valid: {err}")))?;
    serde_json::to_vec(&manifest)
        .map_err(|err| OciError::Config(format!("cannot write the manifest: {err}")))
}

/// The module of `reference` through the store in `cache_dir/oci` (see [`store`]), pulled
/// without one; logs where it came from. Runs on a thread of its own, so it may be called from
/// synchronous code inside or outside an async runtime.
///
/// # Errors
/// As for [`store::Store::fetch`].
pub fn fetch_blocking(
    reference: &str,
    options: &RegistryOptions,
    cache_dir: Option<&std::path::Path>,
) -> Result<store::Module, OciError> {
    let module = blocking(|| async {
        match cache_dir {
            Some(dir) => {
                store::Store::new(dir.join("oci"))
                    .fetch(reference, options)
                    .await
            }
            None => pull(reference, options).await.map(|pulled| store::Module {
                bytes: pulled.bytes,
                immutable: pulled.immutable,
                fetched: store::Fetched::Pulled,
                verified_by: pulled.verified_by,
            }),
        }
    })?;
    let signed_by = module.verified_by.as_deref().unwrap_or("(not verified)");
    match &module.fetched {
        store::Fetched::Pulled => {
            tracing::info!(reference, immutable = %module.immutable, signed_by, "pulled the policy module")
        }
        store::Fetched::Stored => {
            tracing::debug!(reference, signed_by, "the policy module is stored")
        }
        store::Fetched::StoredWhileUnreachable(why) => tracing::warn!(
            reference,
            immutable = %module.immutable,
            signed_by,
            why = %why,
            "the registry cannot be reached: serving the module pulled before"
        ),
    }
    Ok(module)
}

/// Runs the registry operation `make` builds on a runtime of its own, on a thread of its own,
/// so synchronous code calls it inside or outside an async runtime (a runtime cannot be started
/// on a thread that already runs one).
///
/// # Errors
/// The operation's error, or [`OciError::Runtime`] when no runtime could be started.
pub fn blocking<T, F>(make: impl FnOnce() -> F + Send) -> Result<T, OciError>
where
    T: Send,
    F: std::future::Future<Output = Result<T, OciError>>,
{
    let run = || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|err| OciError::Runtime(format!("cannot start the registry client: {err}")))?;
        runtime.block_on(make())
    };
    std::thread::scope(|scope| {
        scope.spawn(run).join().unwrap_or_else(|_| {
            Err(OciError::Runtime(
                "the registry client panicked".to_string(),
            ))
        })
    })
}
