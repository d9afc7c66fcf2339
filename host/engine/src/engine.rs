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
    pub fn new(mut config: HostConfig) -> Result<Host, HostError> {
        // Resetting only the pages an instance dirtied (PAGEMAP_SCAN) misses a dirty page the
        // kernel swapped out (wasmtime#14357): the next instance in the slot could read it.
        // Where this process may be swapped, every freed page is given back instead.
        if config.pooling && config.reset_dirty_pages_only {
            if let Some(why) = swap_possible() {
                tracing::warn!(
                    why,
                    "this process may be swapped: freed instance memory is given back whole \
                     (no dirty-page reset), which costs 15-25 us per evaluation (docs/benchmarks.md)"
                );
                config.reset_dirty_pages_only = false;
                config.keep_resident_bytes = 0;
            }
        }
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

/// Whether this process's memory may be swapped out, and why: the machine has swap
/// (`/proc/meminfo` `SwapTotal`) and the process's cgroup does not forbid it (cgroup v2
/// `memory.swap.max` other than `0`; Kubernetes sets `0` for Guaranteed pods and under
/// `NoSwap`). `None` on machines without swap and where it cannot be read.
pub fn swap_possible() -> Option<String> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let swap_max = std::fs::read_to_string("/sys/fs/cgroup/memory.swap.max").ok();
    swap_possible_from(&meminfo, swap_max.as_deref())
}

/// [`swap_possible`] from the text of `/proc/meminfo` and of the cgroup's `memory.swap.max`.
fn swap_possible_from(meminfo: &str, cgroup_swap_max: Option<&str>) -> Option<String> {
    let total_kib: u64 = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("SwapTotal:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())?;
    if total_kib == 0 {
        return None;
    }
    match cgroup_swap_max.map(str::trim) {
        Some("0") => None,
        Some(max) => Some(format!(
            "{total_kib} KiB of swap, and the cgroup's memory.swap.max is {max}"
        )),
        None => Some(format!(
            "{total_kib} KiB of swap, and no cgroup v2 limit on it"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::swap_possible_from;

    const WITH_SWAP: &str =
        "MemTotal:       16384000 kB\nSwapTotal:       4194300 kB\nSwapFree:        4194300 kB\n";
    const WITHOUT_SWAP: &str = "MemTotal:       16384000 kB\nSwapTotal:             0 kB\n";

    #[test]
    fn swap_counts_where_the_machine_has_it_and_the_cgroup_allows_it() {
        // No swap on the machine: whatever the cgroup says.
        assert_eq!(swap_possible_from(WITHOUT_SWAP, Some("max\n")), None);
        // Swap, and a Burstable pod under LimitedSwap (a byte limit) or no cgroup v2 file.
        let limited = swap_possible_from(WITH_SWAP, Some("134217728\n")).expect("swappable");
        assert!(
            limited.contains("4194300 KiB") && limited.contains("134217728"),
            "{limited}"
        );
        assert!(swap_possible_from(WITH_SWAP, Some("max")).is_some());
        assert!(swap_possible_from(WITH_SWAP, None).is_some());
        // Swap on the machine, none for this cgroup (Guaranteed pods, NoSwap).
        assert_eq!(swap_possible_from(WITH_SWAP, Some("0\n")), None);
        // Unreadable: not claimed.
        assert_eq!(swap_possible_from("garbage", None), None);
    }
}
