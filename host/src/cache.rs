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
}

/// A directory of precompiled modules. Only files this host wrote are loaded from it: the
/// directory is created private to the user.
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
        let mut replaced = None;
        if path.is_file() {
            // SAFETY: the file is in a directory only this user writes, named by the digest of
            // the module and the engine's compatibility hash, and was written by `store`.
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
