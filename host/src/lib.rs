//! The nicpolicy host: loads network policies compiled to WebAssembly and evaluates them for
//! CAPVCD machines.
//!
//! ```no_run
//! use nicpolicy::{builtin, Host, HostConfig, PolicyOptions, RequestFiles};
//! use std::path::Path;
//!
//! # fn main() -> anyhow::Result<()> {
//! // One host per process: it owns the Wasmtime engine, the epoch ticker and the module cache.
//! let host = Host::new(HostConfig::default())?;
//! // Compiled (or loaded from the cache) once, ABI-checked, settings validated.
//! let policy = host.load(builtin::CAPVCD_WASM, PolicyOptions::default())?;
//!
//! let request = RequestFiles {
//!     cluster: Some(Path::new("examples/cluster.yaml")),
//!     machine: Some(Path::new("examples/machine.yaml")),
//!     inventory: Some(Path::new("examples/inventory.yaml")),
//!     ..RequestFiles::default()
//! }
//! .build()?;
//! // A fresh instance per call, under the policy's time and memory limits.
//! let evaluation = policy.evaluate(&request)?;
//! for nic in &evaluation.decision.nics {
//!     println!("NIC {} -> {}", nic.index, nic.network);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Modules: [`engine`] (the [`Host`]), [`policy`] (a loaded [`Policy`]), [`chain`] (several
//! policies evaluated in order as one), [`inspect`] (reading a module without running it),
//! [`limits`], [`cache`], [`manifest`] (Kubernetes objects to a request), [`cases`] (case
//! files), [`error`], [`lifecycle`] (the rules that keep admission from blocking a cluster's
//! lifecycle: deletion, ratcheted updates, request faults, unknown clusters), [`webhook`] (the
//! admission webhook of `nicpolicy serve`).

pub mod builtin;
pub mod cache;
pub mod cases;
pub mod chain;
pub mod engine;
pub mod error;
pub mod inspect;
pub mod lifecycle;
pub mod limits;
pub mod manifest;
pub mod policy;
pub mod webhook;

pub use chain::{ChainError, ChainEvaluation, PolicyChain};
pub use engine::{Host, HostConfig, HostError};
pub use error::{EvalError, LoadError};
pub use limits::Limits;
pub use manifest::{ManifestError, RequestFiles};
pub use nicpolicy_plugin as plugin;
pub use policy::{Evaluation, LogLine, Policy, PolicyOptions};

#[cfg(test)]
mod tests {
    #[test]
    fn policy_and_host_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<super::Policy>();
        check::<super::Host>();
    }
}
