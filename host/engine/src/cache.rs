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

impl std::fmt::Display for CacheStatus {
    /// One word, then the reason where there is one: what logs and `-v` print.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CacheStatus::Hit => f.write_str("hit"),
            CacheStatus::Stored => f.write_str("stored"),
            CacheStatus::Disabled => f.write_str("disabled"),
            CacheStatus::StoreFailed(why) => write!(f, "store failed: {why}"),
            CacheStatus::Replaced(why) => write!(f, "replaced: {why}"),
            CacheStatus::Untrusted(why) => write!(f, "bypassed: {why}"),
        }
    }
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

    /// Removes the modules compiled for `engine` whose digest is not in `keep` (sha256, hex),
    /// and answers how many went. Files of other engines (another Wasmtime build or shape,
    /// perhaps another process's) and anything that is not a compiled module are left alone; a
    /// file that cannot be removed is skipped. A server calls this after a reload, so that the
    /// cache does not grow with every module version it ever served.
    pub fn prune(&self, engine: &Engine, keep: &std::collections::BTreeSet<String>) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let suffix = format!("-{:016x}.cwasm", hasher.finish());
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(sha256) = name.to_str().and_then(|n| n.strip_suffix(&suffix)) else {
                continue;
            };
            let is_digest = sha256.len() == 64 && sha256.bytes().all(|b| b.is_ascii_hexdigit());
            if is_digest && !keep.contains(sha256) && std::fs::remove_file(entry.path()).is_ok() {
                removed += 1;
            }
        }
        removed
    }

    /// Loads the precompiled module of the module whose digest is `sha256`, or compiles it with
    /// `compile` (see [`compile_within`] and [`crate::compiler`]) and stores it.
    ///
    /// The directory is opened once and checked through that handle; the cached
    /// file is opened relative to it without following links and checked through its own
    /// handle, and that very file is loaded: nothing re-walks a path between a check and the
    /// use, so swapping a directory or file in the path after the check changes nothing.
    ///
    /// # Errors
    /// The error of `compile` ([`LoadError::Compile`], [`LoadError::CompileTimeout`]); a
    /// cache that cannot be read or written is not an error.
    // Deserialising a precompiled module is `unsafe` in Wasmtime: see the SAFETY note below.
    #[allow(unsafe_code)]
    pub fn load_or_compile(
        &self,
        engine: &Engine,
        sha256: &str,
        compile: impl FnOnce() -> Result<Module, LoadError>,
    ) -> Result<(Module, CacheStatus), LoadError> {
        let path = self.path_for(engine, sha256);
        let name = file_name(&path);
        // A directory someone else can write into may hold a file planted there: never load
        // from it, and do not leave compiled code in it either.
        let dir = match CacheDir::open(&self.dir) {
            Ok(dir) => dir,
            Err(why) => {
                tracing::warn!(reason = %why, "compiled-module cache bypassed");
                let module = compile()?;
                return Ok((module, CacheStatus::Untrusted(why)));
            }
        };
        let mut replaced = None;
        match dir.as_ref().map(|d| d.open_file(&name)).transpose() {
            Err(why) => {
                tracing::warn!(reason = %why, "compiled-module cache bypassed");
                let module = compile()?;
                return Ok((module, CacheStatus::Untrusted(why)));
            }
            Ok(Some(Some(file))) => {
                // SAFETY: this open file is a regular file that belongs to this user and that
                // nobody else can write, in a directory that is likewise private (both checked
                // through their handles just above, not by path); it is named by the digest of
                // the module and the engine's compatibility hash, and only `store` writes such
                // files.
                match unsafe { Module::deserialize_open_file(engine, file) } {
                    Ok(module) => return Ok((module, CacheStatus::Hit)),
                    Err(err) => replaced = Some(format!("{}: {err}", path.display())),
                }
            }
            Ok(_) => {}
        }
        let module = compile()?;
        let stored = match dir {
            Some(dir) => dir.store(&module, &name),
            None => create_private_dir(&self.dir)
                .map_err(|err| err.to_string())
                .and_then(|()| CacheDir::open(&self.dir))
                .and_then(|dir| {
                    dir.ok_or_else(|| format!("{}: vanished once created", self.dir.display()))
                })
                .and_then(|dir| dir.store(&module, &name)),
        };
        let status = match (stored, replaced) {
            (Ok(()), Some(why)) => CacheStatus::Replaced(why),
            (Ok(()), None) => CacheStatus::Stored,
            (Err(err), _) => CacheStatus::StoreFailed(format!("{}: {err}", path.display())),
        };
        Ok((module, status))
    }
}

/// The file name of `path` (a name [`ModuleCache::path_for`] made).
fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The cache directory, open: checked once through this handle, and every file in it opened,
/// checked and written relative to it.
#[cfg(unix)]
struct CacheDir {
    fd: rustix::fd::OwnedFd,
    path: PathBuf,
}

#[cfg(unix)]
impl CacheDir {
    /// Opens `path` and checks the directory it leads to (through any link): private to this
    /// user ([`check_private`]'s rules, applied to the open handle). `Ok(None)` when it does
    /// not exist yet.
    fn open(path: &Path) -> Result<Option<CacheDir>, String> {
        use rustix::fs::{open, Mode, OFlags};
        let fd = match open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(err) => return Err(format!("{}: cannot open: {err}", path.display())),
        };
        check_handle(&fd, path, Entry::Directory)?;
        Ok(Some(CacheDir {
            fd,
            path: path.to_path_buf(),
        }))
    }

    /// The cached file `name`, opened without following a link and checked through its handle;
    /// `Ok(None)` when there is none.
    fn open_file(&self, name: &str) -> Result<Option<std::fs::File>, String> {
        use rustix::fs::{openat, Mode, OFlags};
        let path = self.path.join(name);
        match openat(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        ) {
            Ok(fd) => {
                check_handle(&fd, &path, Entry::File)?;
                Ok(Some(std::fs::File::from(fd)))
            }
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(rustix::io::Errno::LOOP) => Err(format!(
                "cached module {} is not a plain file (a symbolic link)",
                path.display()
            )),
            Err(err) => Err(format!("{}: cannot open: {err}", path.display())),
        }
    }

    /// Writes `module` as `name`: to a new private file, then renamed over the old one, both
    /// relative to the directory's handle (readers never see half a file).
    fn store(&self, module: &Module, name: &str) -> Result<(), String> {
        use rustix::fs::{openat, renameat, unlinkat, AtFlags, Mode, OFlags};
        let bytes = module.serialize().map_err(|err| err.to_string())?;
        let tmp = format!("{name}.tmp{}", std::process::id());
        let fd = openat(
            &self.fd,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|err| format!("cannot create {tmp}: {err}"))?;
        let mut file = std::fs::File::from(fd);
        let written = file
            .write_all(&bytes)
            .and_then(|()| file.sync_all())
            .map_err(|err| err.to_string())
            .and_then(|()| {
                renameat(&self.fd, tmp.as_str(), &self.fd, name).map_err(|err| err.to_string())
            });
        if written.is_err() {
            let _ = unlinkat(&self.fd, tmp.as_str(), AtFlags::empty());
        }
        written
    }
}

/// Without Unix handles: the directory and file by path, as [`check_private`] allows.
#[cfg(not(unix))]
struct CacheDir {
    path: PathBuf,
}

#[cfg(not(unix))]
impl CacheDir {
    fn open(path: &Path) -> Result<Option<CacheDir>, String> {
        if !path.is_dir() {
            return Ok(None);
        }
        Ok(Some(CacheDir {
            path: path.to_path_buf(),
        }))
    }

    fn open_file(&self, name: &str) -> Result<Option<std::fs::File>, String> {
        match std::fs::File::open(self.path.join(name)) {
            Ok(file) => Ok(Some(file)),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err.to_string()),
        }
    }

    fn store(&self, module: &Module, name: &str) -> Result<(), String> {
        let bytes = module.serialize().map_err(|err| err.to_string())?;
        let path = self.path.join(name);
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let mut file = std::fs::File::create(&tmp).map_err(|err| err.to_string())?;
        file.write_all(&bytes)
            .and_then(|()| file.sync_all())
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|err| err.to_string())
    }
}

/// Checks an open directory or file: what it is, its owner and its mode, through the handle.
#[cfg(unix)]
fn check_handle(fd: &rustix::fd::OwnedFd, path: &Path, entry: Entry) -> Result<(), String> {
    let stat =
        rustix::fs::fstat(fd).map_err(|err| format!("{}: cannot check: {err}", path.display()))?;
    let kind = rustix::fs::FileType::from_raw_mode(stat.st_mode);
    let kind_ok = match entry {
        Entry::Directory => kind == rustix::fs::FileType::Directory,
        Entry::File => kind == rustix::fs::FileType::RegularFile,
    };
    owner_and_mode(path, entry, kind_ok, stat.st_uid, stat.st_mode)
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
/// group or others, and (a file) a regular file, not a symbolic link. `Err` says why not. The
/// cache itself checks the same through open handles ([`ModuleCache::load_or_compile`]).
///
/// A directory that does not exist yet passes: [`ModuleCache`] creates it with mode 0700.
#[cfg(unix)]
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
    let kind_ok = match entry {
        Entry::Directory => metadata.is_dir(),
        Entry::File => metadata.file_type().is_file(),
    };
    owner_and_mode(path, entry, kind_ok, metadata.uid(), metadata.mode())
}

/// The rules of [`check_private`] on what was found: the right kind, this user's, and not
/// writable by its group or others.
#[cfg(unix)]
fn owner_and_mode(
    path: &Path,
    entry: Entry,
    kind_ok: bool,
    uid: u32,
    mode: u32,
) -> Result<(), String> {
    let what = match entry {
        Entry::Directory => "cache directory",
        Entry::File => "cached module",
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
    let euid = rustix::process::geteuid().as_raw();
    if uid != euid {
        return Err(format!(
            "{what} {} belongs to uid {uid}, not to this process's uid {euid}",
            path.display()
        ));
    }
    let mode = mode & 0o777;
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

    fn module() -> Vec<u8> {
        wat::parse_str(r#"(module (func (export "answer") (result i32) i32.const 42))"#)
            .expect("wat")
    }

    fn load(cache: &ModuleCache, engine: &Engine) -> CacheStatus {
        let bytes = module();
        cache
            .load_or_compile(engine, "0123abcd", || {
                compile_within(engine, &bytes, Duration::from_secs(30))
            })
            .expect("compiles")
            .1
    }

    #[test]
    fn a_stored_module_is_loaded_back_through_the_handles() {
        let dir = dir("hit");
        let cache = ModuleCache::new(dir.join("modules"));
        let engine = Engine::default();
        assert_eq!(load(&cache, &engine), CacheStatus::Stored);
        assert_eq!(load(&cache, &engine), CacheStatus::Hit);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_link_planted_as_the_cached_file_is_refused_not_followed() {
        let dir = dir("link");
        let cache = ModuleCache::new(&dir);
        let engine = Engine::default();
        assert_eq!(load(&cache, &engine), CacheStatus::Stored);
        let cached = cache.path_for(&engine, "0123abcd");
        let elsewhere = dir.join("elsewhere.cwasm");
        std::fs::rename(&cached, &elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &cached).unwrap();
        match load(&cache, &engine) {
            CacheStatus::Untrusted(why) => assert!(why.contains("symbolic link"), "{why}"),
            other => panic!("{other:?}"),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn another_users_directory_is_refused_through_its_handle() {
        let dir = dir("owner");
        chown(&dir, Some(4242), None).expect("chown");
        let cache = ModuleCache::new(&dir);
        match load(&cache, &Engine::default()) {
            CacheStatus::Untrusted(why) => assert!(why.contains("uid 4242"), "{why}"),
            other => panic!("{other:?}"),
        }
        chown(&dir, Some(0), None).expect("chown back");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_directory_swapped_after_it_was_checked_is_not_read() {
        // The check and every later open go through one handle: replacing the directory at
        // its path afterwards (with one holding a planted file) changes nothing.
        let base = dir("swap");
        let path = base.join("modules");
        create_private_dir(&path).unwrap();
        std::fs::write(path.join("module.cwasm"), b"ours").unwrap();
        mode(&path.join("module.cwasm"), 0o600);
        let opened = CacheDir::open(&path).unwrap().expect("exists");
        std::fs::rename(&path, base.join("moved")).unwrap();
        create_private_dir(&path).unwrap();
        std::fs::write(path.join("module.cwasm"), b"planted").unwrap();
        mode(&path.join("module.cwasm"), 0o600);
        let mut read = String::new();
        use std::io::Read as _;
        opened
            .open_file("module.cwasm")
            .unwrap()
            .expect("there")
            .read_to_string(&mut read)
            .unwrap();
        assert_eq!(read, "ours");
        let _ = std::fs::remove_dir_all(&base);
    }
}
