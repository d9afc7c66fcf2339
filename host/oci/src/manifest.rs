//! Reading manifests within bounds. oci-client reads a manifest's answer (and any error body)
//! whole before anything can look at it, so a registry that streams gigabytes as a manifest
//! would be held in memory; here the same request is made with the client's credentials and
//! TLS settings and read a chunk at a time, cut at [`MAX_MANIFEST_BYTES`] (error bodies at
//! [`MAX_ERROR_BODY_BYTES`]).

use oci_client::errors::{OciDistributionError, OciEnvelope};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};

use super::Timeouts;

/// The most a manifest may take. A Wasm policy's is under 1 KiB, and a cosign signature image's
/// about 1.5 KiB per signature: 512 KiB leaves room for hundreds of signatures, and bounds
/// what a registry can make the process hold.
pub const MAX_MANIFEST_BYTES: usize = 512 * 1024;

/// The media types of an image manifest (OCI's and Docker's), as a module's and a signature
/// image's manifest are asked for.
pub const IMAGE_MANIFEST_TYPES: [&str; 2] = [
    oci_client::manifest::OCI_IMAGE_MEDIA_TYPE,
    oci_client::manifest::IMAGE_MANIFEST_MEDIA_TYPE,
];

/// What is kept of an error answer's body: the start of its message.
pub const MAX_ERROR_BODY_BYTES: usize = 16 * 1024;

/// Reads manifests of one registry.
pub struct Manifests {
    http: reqwest::Client,
    scheme: &'static str,
}

impl Manifests {
    /// A reader trusting `roots` beside the system's (as the registry client does), over HTTPS,
    /// or plain HTTP when `plain` (a loopback registry only: the registry client checks).
    pub fn new(
        roots: &[oci_client::client::Certificate],
        plain: bool,
        timeouts: &Timeouts,
    ) -> Result<Manifests, OciDistributionError> {
        let roots = roots
            .iter()
            .map(reqwest::Certificate::try_from)
            .collect::<Result<Vec<_>, _>>()?;
        let http = reqwest::Client::builder()
            .tls_certs_merge(roots)
            .connect_timeout(timeouts.connect)
            .read_timeout(timeouts.read)
            .user_agent(concat!("nicpolicy/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Manifests {
            http,
            scheme: if plain { "http" } else { "https" },
        })
    }

    /// The manifest `at` names (its digest, else its tag), as the registry sent its bytes,
    /// asking for `accept` media types, with the credentials `client` holds for the repository
    /// (a bearer token it gets, or `auth`'s user and password for a registry that asks for
    /// them).
    ///
    /// # Errors
    /// The errors oci-client gives for the same answers (so callers tell a missing manifest
    /// from an unreachable registry alike), and [`OciDistributionError::ManifestParsingError`]
    /// for a manifest over [`MAX_MANIFEST_BYTES`], cut off there.
    pub async fn get(
        &self,
        client: &Client,
        auth: &RegistryAuth,
        at: &Reference,
        accept: &[&str],
    ) -> Result<Vec<u8>, OciDistributionError> {
        let registry = at.resolve_registry();
        let url = format!(
            "{}://{registry}/v2/{}/manifests/{}",
            self.scheme,
            at.repository(),
            at.digest().or(at.tag()).unwrap_or("latest")
        );
        // The client's own authentication: a token for the repository when the registry
        // issues them (kept for its later blob reads), else nothing or basic credentials.
        let token = client.auth(at, auth, RegistryOperation::Pull).await?;
        let mut request = self.http.get(&url).header("Accept", accept.join(", "));
        request = match (token, auth) {
            (Some(token), _) => request.bearer_auth(token),
            (None, RegistryAuth::Basic(user, password)) => request.basic_auth(user, Some(password)),
            (None, _) => request,
        };
        let mut response = request.send().await?;
        let status = response.status();
        let bound = if status.is_success() {
            MAX_MANIFEST_BYTES
        } else {
            MAX_ERROR_BODY_BYTES
        };
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            if body.len() + chunk.len() > bound {
                if status.is_success() {
                    return Err(OciDistributionError::ManifestParsingError(format!(
                        "the manifest at {url} is over {MAX_MANIFEST_BYTES} bytes; refused \
                         without reading the rest"
                    )));
                }
                body.extend_from_slice(&chunk[..bound - body.len()]);
                break;
            }
            body.extend_from_slice(&chunk);
        }
        match status.as_u16() {
            200 => Ok(body),
            401 => Err(OciDistributionError::UnauthorizedError { url }),
            code if status.is_client_error() => {
                match serde_json::from_slice::<OciEnvelope>(&body) {
                    Ok(envelope) => Err(OciDistributionError::RegistryError { envelope, url }),
                    Err(_) => Err(OciDistributionError::ServerError {
                        code,
                        url,
                        message: String::from_utf8_lossy(&body).into_owned(),
                    }),
                }
            }
            code => Err(OciDistributionError::ServerError {
                code,
                url,
                message: String::from_utf8_lossy(&body).into_owned(),
            }),
        }
    }
}
