//! The process-wide [`Host`]: one Wasmtime engine, its epoch ticker and the module cache.

use std::path::PathBuf;
use std::time::Duration;

use wasmtime::{Config, Engine};

use crate::cache::{self, CacheStatus, ModuleCache};
use crate::compiler::{self, CompilerProcess};
use crate::error::LoadError;
use crate::limits::{CompileBounds, Limits};
use crate::wasm_config::{self, EngineShape};

/// How the host's engine is set up. The defaults fit a webhook and the CLI alike.
#[derive(Clone, Debug)]
pub struct HostConfig {
    /// Largest memory cap any policy may be given; sizes the pooling allocator's slots.
    pub max_memory_bytes: usize,
    /// Most instances alive at once (concurrent evaluations); sizes the pool.
    pub max_instances: u32,
    /// Epoch tick: the granularity of time limits.
    pub epoch_tick: Duration,
    /// Where compiled modules are cached; `None` compiles every time.
    pub cache_dir: Option<PathBuf>,
    /// Use the pooling allocator (fast instantiation); off allocates on demand.
    pub pooling: bool,
    /// Longest a module may take to compile (a cache hit does not compile); slower modules
    /// are refused with [`LoadError::CompileTimeout`].
    pub compile_timeout: Duration,
    /// Bytes at the start of each freed memory slot kept resident for the next instance
    /// (pooling only). Pages above it are given back to the kernel and fault in again.
    pub keep_resident_bytes: usize,
    /// Bounds on a module's code, checked before compiling so that a compile stays within the
    /// process's memory.
    pub compile_bounds: CompileBounds,
    /// Reset a freed slot by scanning for the pages the instance dirtied and restoring only
    /// those (Linux 6.7+ `PAGEMAP_SCAN`; ignored elsewhere). Off: `memset` all of
    /// [`HostConfig::keep_resident_bytes`].
    pub reset_dirty_pages_only: bool,
    /// Compile in a child process bounded in time and memory ([`crate::compiler`]); `None`
    /// compiles on a thread of this process, bounded in time only (the compile is abandoned,
    /// not stopped, at the limit).
    pub compiler: Option<CompilerProcess>,
    /// Count the Wasm fuel each evaluation consumes ([`crate::Evaluation::fuel`]): a cost that
    /// does not flap with the machine's load, for benchmarks and CI gates. Off by default: the
    /// counting slows every evaluation.
    pub count_fuel: bool,
}

impl HostConfig {
    /// Default [`HostConfig::compile_timeout`]: the CAPVCD policy compiles in about 0.5 s.
    pub const DEFAULT_COMPILE_TIMEOUT: Duration = Duration::from_secs(10);
    /// Default [`HostConfig::keep_resident_bytes`]: a Rust policy starts at just over 1 MiB
    /// (a 1 MiB stack, then its data) and grows its heap from there; 4 MiB covers the heap of
    /// large inventories too. Only pages an instance touched are resident.
    pub const DEFAULT_KEEP_RESIDENT_BYTES: usize = 4 << 20;
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            max_memory_bytes: Limits::DEFAULT_MEMORY_BYTES,
            max_instances: 128,
            epoch_tick: Duration::from_millis(5),
            cache_dir: ModuleCache::default_dir(),
            pooling: true,
            compile_timeout: Self::DEFAULT_COMPILE_TIMEOUT,
            keep_resident_bytes: Self::DEFAULT_KEEP_RESIDENT_BYTES,
            reset_dirty_pages_only: true,
            compile_bounds: CompileBounds::default(),
            compiler: None,
            count_fuel: false,
        }
    }
}

/// Why the host could not start.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// Wasmtime refused the configuration (for example, not enough address space for the pool).
    #[error("cannot create the Wasm engine: {0}")]
    Engine(String),
    /// The epoch ticker thread could not start.
    #[error("cannot start the epoch ticker: {0}")]
    Ticker(std::io::Error),
}

/// Loads and runs policies. Create one per process and share it (it is cheap to clone).
#[derive(Clone)]
pub struct Host {
    engine: Engine,
    config: HostConfig,
    cache: Option<ModuleCache>,
}

impl Host {
    /// Creates the engine and starts the epoch ticker. Expensive (it reserves the pool's
    /// address space): create one per process and clone it.
    ///
    /// # Errors
    /// [`HostError::Engine`] when Wasmtime refuses the configuration (for example, not enough
    /// address space for the pool), [`HostError::Ticker`] when the ticker thread cannot start.
    pub fn new(config: HostConfig) -> Result<Host, HostError> {
        let engine = Engine::new(&engine_config(&config))
            .map_err(|err| HostError::Engine(format!("{err:#}")))?;
        spawn_ticker(&engine, config.epoch_tick)?;
        let cache = config.cache_dir.clone().map(ModuleCache::new);
        Ok(Host {
            engine,
            config,
            cache,
        })
    }

    /// The Wasmtime engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The configuration the host runs with.
    pub fn config(&self) -> &HostConfig {
        &self.config
    }

    /// The module cache, when enabled.
    pub fn cache(&self) -> Option<&ModuleCache> {
        self.cache.as_ref()
    }

    /// Compiles a module, through the cache when there is one.
    ///
    /// # Errors
    /// [`LoadError::Compile`] or [`LoadError::CompileTimeout`].
    pub fn compile(
        &self,
        bytes: &[u8],
        sha256: &str,
    ) -> Result<(wasmtime::Module, CacheStatus), LoadError> {
        let compile = || self.compile_uncached(bytes);
        match &self.cache {
            Some(cache) => cache.load_or_compile(&self.engine, sha256, compile),
            None => Ok((compile()?, CacheStatus::Disabled)),
        }
    }

    /// Compiles a module without the cache: in the compiler process when there is one, else
    /// on a thread of its own ([`cache::compile_within`]).
    fn compile_uncached(&self, bytes: &[u8]) -> Result<wasmtime::Module, LoadError> {
        let limit = self.config.compile_timeout;
        match &self.config.compiler {
            Some(process) => compiler::compile_in_child(
                process,
                &self.engine,
                &self.config.shape(),
                bytes,
                limit,
            ),
            None => cache::compile_within(&self.engine, bytes, limit),
        }
    }
}

/// The Wasmtime configuration of a host set up as `config` says ([`wasm_config`]). A compiler
/// child process ([`crate::compiler`]) builds its engine from the same shape, so what it
/// compiles loads here.
pub fn engine_config(config: &HostConfig) -> Config {
    wasm_config::wasmtime_config(&config.shape())
}

impl HostConfig {
    /// The part of this configuration that shapes the Wasmtime engine.
    pub fn shape(&self) -> EngineShape {
        EngineShape {
            max_memory_bytes: self.max_memory_bytes,
            max_instances: self.max_instances,
            pooling: self.pooling,
            keep_resident_bytes: self.keep_resident_bytes,
            reset_dirty_pages_only: self.reset_dirty_pages_only,
            count_fuel: self.count_fuel,
        }
    }
}

/// Advances the engine's epoch every `tick` while the engine lives.
fn spawn_ticker(engine: &Engine, tick: Duration) -> Result<(), HostError> {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("nicpolicy-epoch".into())
        .spawn(move || loop {
            std::thread::sleep(tick);
            match weak.upgrade() {
                Some(engine) => engine.increment_epoch(),
                None => break,
            }
        })
        .map(drop)
        .map_err(HostError::Ticker)
}
