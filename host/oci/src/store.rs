//! Modules pulled from registries, kept by digest so that a restart works while the registry
//! is down.
//!
//! The store is a private directory (created `0700`): `blobs/sha256/<hex>` holds each module
//! under its own sha256 (the layer digest), and `refs/<sha256 of the reference>.json` says which
//! layer a reference gave when it was last pulled. A reference by digest
//! (`host/repo@sha256:...`) never changes what it names, so a stored one is used without asking
//! the registry; a reference by tag is pulled every time (tags move) and the stored copy serves
//! only when the registry cannot be reached (no connection, a timeout, a 5xx or 429 answer), with
//! a warning naming the digest it serves; a registry that answers no (a tag withdrawn, 404;
//! credentials refused, 401 or 403) is believed, and nothing stored is used. Every
//! blob is checked against its name when it is read: a changed file is pulled again, never used.
//! Each entry keeps the manifest it was pulled with, and the store proves itself on every read:
//! its directories and files are the user's own and private (the compiled-module cache's
//! checks), the manifest hashes to the digest of the reference (and of the immutable reference
//! recorded), and its one layer is the stored module. A digest never pulled is never served.
//! When signatures are verified, the signatures read with a module are kept in its entry and
//! checked again, with the keys configured now, every time the stored copy is used: a store
//! cannot vouch for a module, and a key taken out of the configuration stops its modules even
//! while the registry is down.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::signature::Signature;
use super::{digest_of, pull, OciError, Pulled, RegistryOptions};

/// What the store remembers of a reference.
#[derive(Serialize, Deserialize)]
struct Entry {
    reference: String,
    /// The immutable reference (`host/repo@sha256:<manifest>`) last pulled for it.
    immutable: String,
    /// The manifest's bytes (JSON), whose digest is the immutable reference's and whose one
    /// layer is the module: what ties the stored bytes to what was signed. Empty in entries of
    /// stores written before it was kept, which are then pulled again.
    #[serde(default)]
    manifest: String,
    /// `sha256:<hex>` of the module.
    layer: String,
    /// The signatures read with it (when signatures were verified).
    #[serde(default)]
    signatures: Vec<Signature>,
}

impl Entry {
    /// The entry in `path`, read to at most 1 MiB (a manifest and a few signatures).
    fn read(path: &Path) -> Result<Entry, String> {
        let text = nicpolicy_inputs::files::read_at_most(path, 1 << 20)
            .map_err(|err| format!("{}: {err}", path.display()))?;
        serde_json::from_slice(&text).map_err(|err| format!("{}: {err}", path.display()))
    }

    /// Checks the stored signatures with the keys of `options`; answers the key that verified.
    fn verify(&self, options: &RegistryOptions) -> Result<Option<String>, OciError> {
        let (repository, digest) = self
            .immutable
            .split_once('@')
            .unwrap_or((self.immutable.as_str(), ""));
        options
            .verification
            .check(&self.reference, repository, digest, &self.signatures)
    }
}

/// Where a module came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fetched {
    /// Pulled from the registry just now.
    Pulled,
    /// Read from the store: the reference names a digest, which was stored before.
    Stored,
    /// Read from the store because the registry could not be reached (`why`).
    StoredWhileUnreachable(String),
}

/// A module from a registry or the store.
#[derive(Clone, Debug)]
pub struct Module {
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// The immutable reference it was pulled as.
    pub immutable: String,
    /// How it was got.
    pub fetched: Fetched,
    /// The key that verified its signature, when signatures are verified.
    pub verified_by: Option<String>,
}

/// The store in `dir` (created on first write).
#[derive(Clone, Debug)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// A store kept in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Store {
        Store { dir: dir.into() }
    }

    fn ref_path(&self, reference: &str) -> PathBuf {
        let key = digest_of(reference.as_bytes());
        self.dir
            .join("refs")
            .join(format!("{}.json", key.trim_start_matches("sha256:")))
    }

    fn blob_path(&self, layer: &str) -> PathBuf {
        self.dir
            .join("blobs/sha256")
            .join(layer.trim_start_matches("sha256:"))
    }

    /// The stored module of `reference`, if the store proves it: the store's directory and
    /// files private to this user (as the compiled-module cache requires), the entry's manifest
    /// hashing to the immutable reference's digest (and to the reference's own, when it names
    /// one), that manifest's one layer being the stored bytes. Anything else is not used, and
    /// said in the log: a store cannot vouch for itself.
    fn stored(&self, reference: &str) -> Option<(Entry, Vec<u8>)> {
        match self.proven(reference) {
            Ok(stored) => stored,
            Err(why) => {
                tracing::warn!(reference, dir = %self.dir.display(), why, "the stored module is not used");
                None
            }
        }
    }

    /// [`Store::stored`]: `Ok(None)` when nothing is stored, `Err` when what is stored is not
    /// proven.
    fn proven(&self, reference: &str) -> Result<Option<(Entry, Vec<u8>)>, String> {
        use nicpolicy_engine::cache::{check_private, Entry as Kind};
        let path = self.ref_path(reference);
        if !path.exists() {
            return Ok(None);
        }
        for (dir, kind) in [
            (&self.dir, Kind::Directory),
            (&self.dir.join("refs"), Kind::Directory),
            (&path, Kind::File),
        ] {
            check_private(dir, kind)?;
        }
        let entry = Entry::read(&path)?;
        if entry.reference != reference {
            return Err(format!(
                "{} is the entry of another reference",
                path.display()
            ));
        }
        let manifest_digest = digest_of(entry.manifest.as_bytes());
        let named = entry.immutable.split_once('@').map(|(_, digest)| digest);
        if named != Some(manifest_digest.as_str()) {
            return Err(format!(
                "the stored manifest has digest {manifest_digest}, not {}'s",
                entry.immutable
            ));
        }
        if let Some((_, digest)) = reference.split_once('@') {
            if digest != manifest_digest {
                return Err(format!("the stored manifest is not {reference}'s"));
            }
        }
        let manifest: oci_client::manifest::OciImageManifest =
            serde_json::from_str(&entry.manifest)
                .map_err(|err| format!("the stored manifest: {err}"))?;
        match manifest.layers.as_slice() {
            [layer] if layer.digest == entry.layer => {}
            _ => {
                return Err(format!(
                    "the stored manifest's layer is not the stored module {}",
                    entry.layer
                ))
            }
        }
        let blob = self.blob_path(&entry.layer);
        for dir in [self.dir.join("blobs"), self.dir.join("blobs/sha256")] {
            check_private(&dir, Kind::Directory)?;
        }
        check_private(&blob, Kind::File)?;
        let bytes = nicpolicy_inputs::files::read_at_most(
            &blob,
            nicpolicy_engine::limits::MAX_MODULE_BYTES as u64,
        )
        .map_err(|err| format!("{}: {err}", blob.display()))?;
        if digest_of(&bytes) != entry.layer {
            return Err(format!("{} has changed", blob.display()));
        }
        Ok(Some((entry, bytes)))
    }

    fn remember(&self, reference: &str, pulled: &Pulled) -> std::io::Result<()> {
        // Every directory and file private, as the reader requires.
        for dir in [
            self.dir.clone(),
            self.dir.join("blobs"),
            self.dir.join("blobs/sha256"),
            self.dir.join("refs"),
        ] {
            private_dir(&dir)?;
        }
        let blob = self.blob_path(&pulled.layer_digest);
        write_atomically(&blob, &pulled.bytes)?;
        let entry = Entry {
            reference: reference.to_string(),
            immutable: pulled.immutable.clone(),
            manifest: String::from_utf8_lossy(&pulled.manifest).into_owned(),
            layer: pulled.layer_digest.clone(),
            signatures: pulled.signatures.clone(),
        };
        let path = self.ref_path(reference);
        let text = serde_json::to_vec(&entry).map_err(std::io::Error::other)?;
        write_atomically(&path, &text)
    }

    /// Removes the entries of references not in `keep`, then the modules no entry left names,
    /// and answers how many of each went. A server calls this after a reload, so that the store
    /// holds what its configuration names (the stored copies an outage needs) and not every
    /// module it ever pulled.
    pub fn prune(&self, keep: &std::collections::BTreeSet<String>) -> (usize, usize) {
        let mut named = std::collections::BTreeSet::new();
        let mut entries_removed = 0;
        if let Ok(refs) = std::fs::read_dir(self.dir.join("refs")) {
            for file in refs.flatten() {
                let path = file.path();
                let entry = Entry::read(&path).ok();
                match entry {
                    Some(entry)
                        if !keep.contains(&entry.reference)
                            && std::fs::remove_file(&path).is_ok() =>
                    {
                        entries_removed += 1;
                    }
                    // Kept (or not removable): its module stays.
                    Some(entry) => {
                        named.insert(entry.layer.trim_start_matches("sha256:").to_string());
                    }
                    // Unreadable: nothing to keep for it.
                    None => {}
                }
            }
        }
        let mut blobs_removed = 0;
        if let Ok(blobs) = std::fs::read_dir(self.dir.join("blobs/sha256")) {
            for file in blobs.flatten() {
                let name = file.file_name().to_string_lossy().into_owned();
                let is_digest = name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit());
                if is_digest && !named.contains(&name) && std::fs::remove_file(file.path()).is_ok()
                {
                    blobs_removed += 1;
                }
            }
        }
        (entries_removed, blobs_removed)
    }

    /// The module of `reference`: stored (a digest reference), pulled (and stored), or, when
    /// the registry cannot be reached, stored from an earlier pull.
    ///
    /// # Errors
    /// The pull's error when nothing usable is stored.
    pub async fn fetch(
        &self,
        reference: &str,
        options: &RegistryOptions,
    ) -> Result<Module, OciError> {
        if reference.contains("@sha256:") {
            if let Some((entry, bytes)) = self.stored(reference) {
                // Stored signatures that no longer check (keys changed, or stored before
                // verification was configured): ask the registry, which may hold new ones.
                if let Ok(verified_by) = entry.verify(options) {
                    return Ok(Module {
                        bytes,
                        immutable: entry.immutable,
                        fetched: Fetched::Stored,
                        verified_by,
                    });
                }
            }
        }
        match pull(reference, options).await {
            Ok(pulled) => {
                if let Err(err) = self.remember(reference, &pulled) {
                    // The module is good; only a later outage would miss the copy.
                    tracing::warn!(
                        reference,
                        dir = %self.dir.display(),
                        error = %err,
                        "cannot store the pulled module"
                    );
                }
                Ok(Module {
                    bytes: pulled.bytes,
                    immutable: pulled.immutable,
                    fetched: Fetched::Pulled,
                    verified_by: pulled.verified_by,
                })
            }
            // Only an outage lets a stored copy stand in: a registry that answers no (a tag
            // withdrawn, credentials refused) is believed.
            Err(
                error @ OciError::Registry {
                    unreachable: true, ..
                },
            ) => match self.stored(reference) {
                Some((entry, bytes)) => {
                    let verified_by =
                        entry
                            .verify(options)
                            .map_err(|refused| OciError::Signature {
                                reference: reference.to_string(),
                                why: format!(
                                "the registry cannot be reached ({error}), and the stored copy's \
                                 signatures do not check: {}",
                                match &refused {
                                    OciError::Signature { why, .. } => why.clone(),
                                    other => other.to_string(),
                                }
                            ),
                            })?;
                    Ok(Module {
                        bytes,
                        immutable: entry.immutable,
                        fetched: Fetched::StoredWhileUnreachable(error.to_string()),
                        verified_by,
                    })
                }
                None => Err(error),
            },
            Err(error) => Err(error),
        }
    }
}

/// Creates `dir` readable by its owner only (modules are code the host runs).
fn private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Writes `bytes` to `path` through a temporary file and a rename: a reader sees the old file
/// or the new one, never half of one.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let temporary = path.with_extension(format!("tmp-{}", std::process::id()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    // Readable and writable by the owner only, whatever the umask.
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&temporary)?;
    std::io::Write::write_all(&mut file, bytes)?;
    drop(file);
    std::fs::rename(&temporary, path)
}
