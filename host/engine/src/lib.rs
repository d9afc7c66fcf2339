//! The nicpolicy engine: loads network policies compiled to WebAssembly (ABI v1) under
//! Wasmtime and evaluates them for CAPVCD machines, with time and memory limits, chains,
//! case files and the lifecycle rules that keep a decision from blocking a cluster's lifecycle.
//!
//! It knows no registry, no HTTP and no Kubernetes client, and has no features: modules named
//! by a reference (`builtin:capvcd`, `oci://...`) come from the [`fetch::ModuleFetcher`]s its
//! caller hands a [`ChainLoader`]. The `nicpolicy` crate adds those (built-in policies, OCI
//! registries), the webhook, the controller and the CLI, and re-exports this crate's modules
//! under its own name (`nicpolicy::Host` is [`Host`]).
//!
//! ```no_run
//! use nicpolicy_engine::{Host, HostConfig, PolicySource, PolicySpec};
//! use nicpolicy_inputs::request::RequestFiles;
//! use std::path::Path;
//!
//! # fn main() -> anyhow::Result<()> {
//! // One host per process: it owns the Wasmtime engine, the epoch ticker and the module cache.
//! let host = Host::new(HostConfig::default())?;
//! // Compiled (or read from the cache) once, ABI-checked, settings validated.
//! let chain = host.load_chain(&[PolicySpec::new(PolicySource::File(
//!     "policies/capvcd.wasm".into(),
//! ))])?;
//! let request = RequestFiles {
//!     cluster: Some(Path::new("examples/cluster.yaml")),
//!     machine: Some(Path::new("examples/machine.yaml")),
//!     inventory: Some(Path::new("examples/inventory.yaml")),
//!     ..RequestFiles::default()
//! }
//! .build()?;
//! // A fresh instance per call, under the policy's time and memory limits.
//! let evaluation = chain.evaluate(&request)?;
//! for nic in &evaluation.decision.nics {
//!     println!("NIC {} -> {}", nic.index, nic.network);
//! }
//! # Ok(())
//! # }
//! ```

#![doc(test(attr(deny(warnings))))]

pub mod cache;
pub mod cases;
pub mod chain;
pub mod compiler;
pub mod engine;
pub mod error;
pub mod fetch;
pub mod inspect;
pub mod junit;
pub mod kubewarden;
pub mod lifecycle;
pub mod limits;
pub mod mode;
pub mod policy;
pub mod spec;
pub mod stages;
pub mod wasm_config;

pub use chain::{ChainError, ChainEvaluation, PolicyChain};
pub use engine::{Host, HostConfig, HostError};
pub use error::{EvalError, LoadError};
pub use limits::{Budget, Limits, LARGE_INPUT_SHARE};
pub use mode::Mode;
pub use nicpolicy_plugin as plugin;
pub use policy::{Evaluation, LogLine, Policy, PolicyOptions, RequestFormat};
pub use spec::{ChainLoadError, ChainLoader, PolicySource, PolicySpec, SettingsSource};

#[cfg(test)]
mod tests {
    #[test]
    fn policy_and_host_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<super::Policy>();
        check::<super::Host>();
    }
}
