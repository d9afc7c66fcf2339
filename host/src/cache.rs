//! Compiled-module cache, keyed by the module's sha256 and the engine's compatibility hash, so
//! a restarted host loads a policy in well under a millisecond instead of compiling it again.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use wasmtime::{Engine, Module};

use crate::error::LoadError;

/// What the cache did for one load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheStatus {
    /// Loaded the precompiled module.
    Hit,
    /// Compiled and stored the result.
    Stored,
    /// Compiled; the cache is turned off.
    Disabled,
    /// Compiled; storing the result failed (the load itself worked).
    StoreFailed(String),
    /// The cached file could not be loaded; compiled again and replaced it.
    Replaced(String),
    /// Compiled without the cache: the directory or the cached file is not private to this
    /// user (see [`check_private`]), so neither was read nor written. Says why.
    Untrusted(String),
}

/// A directory of precompiled modules. Loading one runs native code, so a file is loaded only
/// when it and its directory are private to the user this process runs as ([`check_private`]);
/// otherwise the cache is bypassed for that load and the module compiled. The directory is
/// created private (mode 0700).
#[derive(Clone, Debug)]
pub struct ModuleCache {
    dir: PathBuf,
}

impl ModuleCache {
    /// A cache in `dir` (created on first store).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        ModuleCache { dir: dir.into() }
    }

    /// `$NICPOLICY_CACHE_DIR`, else `$XDG_CACHE_HOME/nicpolicy`, else `~/.cache/nicpolicy`.
    pub fn default_dir() -> Option<PathBuf> {
        if let Some(dir) = std::env::var_os("NICPOLICY_CACHE_DIR").filter(|d| !d.is_empty()) {
            return Some(PathBuf::from(dir));
        }
        if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
            return Some(PathBuf::from(dir).join("nicpolicy"));
        }
        std::env::var_os("HOME")
            .filter(|d| !d.is_empty())
            .map(|home| PathBuf::from(home).join(".cache").join("nicpolicy"))
    }

    /// The cache's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file a module with digest `sha256` is cached in for `engine`.
    pub fn path_for(&self, engine: &Engine, sha256: &str) -> PathBuf {
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        self.dir
            .join(format!("{sha256}-{:016x}.cwasm", hasher.finish()))
    }

    /// Loads the precompiled module for `bytes`, or compiles it (giving up after
    /// `compile_timeout`, see [`compile_within`]) and stores it.
    ///
    /// # Errors
    /// Compilation failed or took too long ([`LoadError::Compile`],
    /// [`LoadError::CompileTimeout`]); a cache that cannot be read or written is not an error.
    // Deserialising a precompiled module is `unsafe` in Wasmtime: see the SAFETY note below.
    #[allow(unsafe_code)]
    pub fn load_or_compile(
        &self,
        engine: &Engine,
        bytes: &[u8],
        sha256: &str,
        compile_timeout: Duration,
    ) -> Result<(Module, CacheStatus), LoadError> {
        let path = self.path_for(engine, sha256);
        // A directory someone else can write into may hold a file planted there: never load
        // from it, and do not leave compiled code in it either.
        if let Err(why) = check_private(&self.dir, Entry::Directory) {
            tracing::warn!(reason = %why, "compiled-module cache bypassed");
            let module = compile_within(engine, bytes, compile_timeout)?;
            return Ok((module, CacheStatus::Untrusted(why)));
        }
        let mut replaced = None;
        if path.is_file() {
            if let Err(why) = check_private(&path, Entry::File) {
                tracing::warn!(reason = %why, "compiled-module cache bypassed");
                let module = compile_within(engine, bytes, compile_timeout)?;
                return Ok((module, CacheStatus::Untrusted(why)));
            }
            // SAFETY: the file and its directory belong to this user and nobody else can write
            // them (checked just above), it is named by the digest of the module and the
            // engine's compatibility hash, and only `store` writes such files.
            match unsafe { Module::deserialize_file(engine, &path) } {
                Ok(module) => return Ok((module, CacheStatus::Hit)),
                Err(err) => replaced = Some(format!("{}: {err}", path.display())),
            }
        }
        let module = compile_within(engine, bytes, compile_timeout)?;
        let status = match (self.store(&module, &path), replaced) {
            (Ok(()), Some(why)) => CacheStatus::Replaced(why),
            (Ok(()), None) => CacheStatus::Stored,
            (Err(err), _) => CacheStatus::StoreFailed(format!("{}: {err}", path.display())),
        };
        Ok((module, status))
    }

    fn store(&self, module: &Module, path: &Path) -> std::io::Result<()> {
        create_private_dir(&self.dir)?;
        let bytes = module
            .serialize()
            .map_err(|err| std::io::Error::other(err.to_string()))?;
        // Write to a temporary name, then rename: readers never see half a file.
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    }
}

/// What [`check_private`] looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// The cache directory; it need not exist yet (it is then created private).
    Directory,
    /// A cached module.
    File,
}

/// Whether `path` is private to the user this process runs as: owned by it, not writable by its
/// group or others, and (a file) a regular file, not a symbolic link. `Err` says why not.
///
/// A directory that does not exist yet passes: [`ModuleCache`] creates it with mode 0700.
#[cfg(unix)]
// `geteuid` is a libc call, so `unsafe` in Rust: see the SAFETY note below.
#[allow(unsafe_code)]
pub fn check_private(path: &Path, entry: Entry) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;

    let metadata = match entry {
        // The directory is used through any symbolic link; what counts is where it leads.
        Entry::Directory => std::fs::metadata(path),
        Entry::File => std::fs::symlink_metadata(path),
    };
    let metadata = match metadata {
        Ok(metadata) => metadata,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound && entry == Entry::Directory => {
            return Ok(())
        }
        Err(err) => return Err(format!("{}: cannot check: {err}", path.display())),
    };
    let what = match entry {
        Entry::Directory => "cache directory",
        Entry::File => "cached module",
    };
    let kind_ok = match entry {
        Entry::Directory => metadata.is_dir(),
        Entry::File => metadata.file_type().is_file(),
    };
    if !kind_ok {
        return Err(format!(
            "{what} {} is not a plain {}",
            path.display(),
            if entry == Entry::Directory {
                "directory"
            } else {
                "file"
            }
        ));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    if metadata.uid() != uid {
        return Err(format!(
            "{what} {} belongs to uid {}, not to this process's uid {uid}",
            path.display(),
            metadata.uid()
        ));
    }
    let mode = metadata.mode() & 0o777;
    if mode & 0o022 != 0 {
        return Err(format!(
            "{what} {} is writable by its group or others (mode {mode:03o})",
            path.display()
        ));
    }
    Ok(())
}

/// Whether `path` is private to this user; without Unix ownership, everything passes.
#[cfg(not(unix))]
pub fn check_private(_path: &Path, _entry: Entry) -> Result<(), String> {
    Ok(())
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
    }
    #[cfg(not(unix))]
    std::fs::create_dir_all(dir)
}

/// Compiles `bytes` without the cache.
pub fn compile(engine: &Engine, bytes: &[u8]) -> Result<Module, LoadError> {
    Module::from_binary(engine, bytes).map_err(|err| LoadError::Compile(format!("{err:#}")))
}

/// Compiles `bytes` on a thread of its own and waits at most `limit` for it.
///
/// Cranelift cannot be interrupted, and a module under the size cap can still take tens of
/// seconds to compile (tens of thousands of small functions). Past the limit the load fails with
/// [`LoadError::CompileTimeout`] and the compile is abandoned: it finishes in the background
/// (bounded by [`MAX_MODULE_BYTES`](crate::limits::MAX_MODULE_BYTES)) and its result is dropped,
/// never cached.
pub fn compile_within(engine: &Engine, bytes: &[u8], limit: Duration) -> Result<Module, LoadError> {
    let (sender, receiver) = mpsc::sync_channel(1);
    let (engine, bytes) = (engine.clone(), bytes.to_vec());
    std::thread::Builder::new()
        .name("nicpolicy-compile".into())
        .spawn(move || {
            // The receiver is gone when the caller gave up: nothing to do with the result.
            let _ = sender.send(compile(&engine, &bytes));
        })
        .map_err(|err| LoadError::Compile(format!("cannot start the compiler thread: {err}")))?;
    match receiver.recv_timeout(limit) {
        Ok(result) => result,
        Err(mpsc::RecvTimeoutError::Timeout) => Err(LoadError::CompileTimeout { limit }),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(LoadError::Compile(
            "the compiler thread stopped without a result".into(),
        )),
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::{chown, PermissionsExt};

    fn dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("nicpolicy-cache-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        create_private_dir(&dir).expect("dir");
        dir
    }

    fn mode(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    #[test]
    fn only_a_private_directory_and_file_are_trusted() {
        let dir = dir("private");
        assert_eq!(check_private(&dir, Entry::Directory), Ok(()));
        assert_eq!(check_private(&dir.join("absent"), Entry::Directory), Ok(()));
        let file = dir.join("module.cwasm");
        std::fs::write(&file, b"compiled").unwrap();
        mode(&file, 0o600);
        assert_eq!(check_private(&file, Entry::File), Ok(()));

        mode(&dir, 0o777);
        let why = check_private(&dir, Entry::Directory).unwrap_err();
        assert!(why.contains("mode 777"), "{why}");
        mode(&dir, 0o770);
        assert!(check_private(&dir, Entry::Directory).is_err());
        mode(&dir, 0o755);
        assert_eq!(check_private(&dir, Entry::Directory), Ok(()));

        mode(&file, 0o620);
        assert!(check_private(&file, Entry::File)
            .unwrap_err()
            .contains("mode 620"));
        mode(&file, 0o600);
        // Another user's file, as root can make it.
        chown(&file, Some(4242), None).expect("chown");
        let why = check_private(&file, Entry::File).unwrap_err();
        assert!(why.contains("uid 4242"), "{why}");

        // A link is not a plain file, wherever it points.
        let link = dir.join("link.cwasm");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(check_private(&link, Entry::File)
            .unwrap_err()
            .contains("not a plain file"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
