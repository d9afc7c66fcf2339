//! Reading one blob from a registry within bounds: never more bytes than its descriptor says
//! nor than the caller allows, each checked as it streams rather than after, and the digest
//! checked at the end. A registry that sends more than it declared is cut off at the first byte
//! too many.

use futures::StreamExt as _;
use oci_client::manifest::OciDescriptor;
use oci_client::{Client, Reference};
use sha2::{Digest, Sha256};

/// Why a blob was not read.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// The registry refused the request, or could not be reached.
    #[error(transparent)]
    Registry(#[from] oci_client::errors::OciDistributionError),
    /// The answer broke off.
    #[error("the answer broke off after {read} bytes: {error}")]
    Broken {
        /// Bytes read before.
        read: u64,
        /// Why.
        error: std::io::Error,
    },
    /// The descriptor declares more than the caller allows.
    #[error("the manifest says {declared} bytes, more than the {max} bytes allowed")]
    TooLarge {
        /// The descriptor's size.
        declared: i64,
        /// The bound.
        max: u64,
    },
    /// The registry sent more bytes than the descriptor declares.
    #[error("the registry sent more than the {declared} bytes the manifest says")]
    Longer {
        /// The descriptor's size.
        declared: u64,
    },
    /// The registry sent fewer bytes than the descriptor declares.
    #[error("the registry sent {read} bytes, and the manifest says {declared}")]
    Shorter {
        /// The descriptor's size.
        declared: u64,
        /// What came.
        read: u64,
    },
    /// The bytes are not the ones the descriptor names.
    #[error("the bytes have digest {actual}, but the manifest says {expected}")]
    Digest {
        /// The descriptor's digest.
        expected: String,
        /// The bytes'.
        actual: String,
    },
}

impl BlobError {
    /// Whether the registry could not be reached or broke off (asking again later may work),
    /// rather than answered something that is not the blob.
    pub fn unreachable(&self) -> bool {
        match self {
            BlobError::Registry(err) => super::unreachable(err),
            BlobError::Broken { .. } => true,
            _ => false,
        }
    }
}

/// Whether `error` is the client's digest check failing at the end of a blob's bytes.
fn is_digest_check(error: &std::io::Error) -> bool {
    error
        .get_ref()
        .is_some_and(|inner| inner.is::<oci_client::errors::DigestError>())
}

/// The blob `descriptor` names, of repository `at`, read to at most `max` bytes.
///
/// # Errors
/// [`BlobError`]: a declared size over `max` (before anything is fetched), more or fewer bytes
/// than declared, a digest that is not the declared one, or the registry's error.
pub async fn read(
    client: &Client,
    at: &Reference,
    descriptor: &OciDescriptor,
    max: u64,
) -> Result<Vec<u8>, BlobError> {
    let declared = u64::try_from(descriptor.size)
        .ok()
        .filter(|size| *size <= max)
        .ok_or(BlobError::TooLarge {
            declared: descriptor.size,
            max,
        })?;
    let mut stream = client.pull_blob_stream(at, descriptor).await?.stream;
    // Sized by the bound already checked: at most `max`.
    let mut bytes = Vec::with_capacity(usize::try_from(declared).unwrap_or(0));
    let mut hasher = Sha256::new();
    while let Some(chunk) = stream.next().await {
        let read = bytes.len() as u64;
        let chunk = match chunk {
            Ok(chunk) => chunk,
            // The client's own digest check, at the end of the bytes: the checks below say
            // what was wrong (too few bytes, or which digest came instead).
            Err(error) if is_digest_check(&error) => break,
            Err(error) => return Err(BlobError::Broken { read, error }),
        };
        if read + chunk.len() as u64 > declared {
            return Err(BlobError::Longer { declared });
        }
        hasher.update(&chunk);
        bytes.extend_from_slice(&chunk);
    }
    let read = bytes.len() as u64;
    if read != declared {
        return Err(BlobError::Shorter { declared, read });
    }
    let actual = format!("sha256:{:x}", hasher.finalize());
    if actual != descriptor.digest {
        return Err(BlobError::Digest {
            expected: descriptor.digest.clone(),
            actual,
        });
    }
    Ok(bytes)
}
