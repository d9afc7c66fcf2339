//! The Wasmtime configuration an engine is built with: the host's engine and a compiler child's
//! ([`crate::compiler`]) are built from the same [`EngineShape`], so what the child compiles
//! loads in the host (`Module::deserialize` checks it).

use wasmtime::{Config, Enabled, InstanceAllocationStrategy, PoolingAllocationConfig};

/// What shapes an engine: the instance pool and its memories. The host's `HostConfig` says it
/// (`HostConfig::shape`); a compiler child is told it on its command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineShape {
    /// The largest linear memory an instance may have.
    pub max_memory_bytes: usize,
    /// Instance slots of the pool.
    pub max_instances: u32,
    /// Whether instances come from the pooling allocator.
    pub pooling: bool,
    /// Bytes of a freed memory slot kept resident.
    pub keep_resident_bytes: usize,
    /// Whether a freed slot resets only its dirty pages.
    pub reset_dirty_pages_only: bool,
    /// Whether compiled code counts Wasm fuel (`nicpolicy bench`'s deterministic cost; the
    /// counting itself costs time, so serving engines leave it off).
    pub count_fuel: bool,
}

/// The Wasmtime configuration of an engine of this shape.
pub fn wasmtime_config(config: &EngineShape) -> Config {
    let mut wasm = Config::new();
    wasm.epoch_interruption(true)
        .cranelift_opt_level(wasmtime::OptLevel::Speed)
        .memory_init_cow(true)
        // Each compile on its own thread, not on a shared rayon pool: a compile abandoned
        // at the compile limit would otherwise keep the pool busy and starve every later
        // compile until it ends. Costs a cache miss one core instead of all of them.
        .parallel_compilation(false)
        // Deep recursion in a policy becomes a stack-overflow trap well before this.
        .max_wasm_stack(1 << 20)
        .consume_fuel(config.count_fuel);
    if config.pooling {
        let mut pool = PoolingAllocationConfig::new();
        pool.total_core_instances(config.max_instances)
            .total_memories(config.max_instances)
            .total_tables(config.max_instances)
            .max_memory_size(config.max_memory_bytes)
            // A fresh instance per evaluation reuses a warm slot: keeping its pages
            // resident and restoring only the dirty ones costs far less than page faults
            // on every first touch (see docs/benchmarks.md, "What each change gained").
            .linear_memory_keep_resident(config.keep_resident_bytes)
            .table_keep_resident(TABLE_KEEP_RESIDENT)
            .pagemap_scan(if config.reset_dirty_pages_only {
                Enabled::Auto
            } else {
                Enabled::No
            });
        wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    wasm
}

/// Bytes of each freed table slot kept resident: a Rust policy's table of function
/// pointers is a few hundred entries.
const TABLE_KEEP_RESIDENT: usize = 64 << 10;
