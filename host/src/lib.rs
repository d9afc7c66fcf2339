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
//! # Where to start
//!
//! - [`Host`] ([`engine`]): the Wasmtime engine, its epoch ticker and the compiled-module cache.
//!   Expensive to create (it reserves the instance pool); one per process, cheap to clone.
//! - [`Policy`] ([`policy`]): a loaded module with its settings and limits. Loading compiles
//!   (or reads the cache), checks the ABI and the settings; evaluating instantiates afresh for
//!   every call, so nothing survives between machines. `Send + Sync`, cheap to clone.
//! - [`PolicySpec`] and [`Host::load_chain`] ([`spec`]): where a policy comes from (a file, a
//!   built-in, bytes), its settings, digest pin and limits; a list of them loads into a
//!   [`PolicyChain`] ([`chain`]) with errors naming the entry that failed. The CLI and the
//!   webhook both load their policies this way.
//! - [`RequestFiles`] ([`manifest`]): Kubernetes manifests to a policy [`plugin::Request`].
//! - [`lifecycle::judge`]: how a decision becomes an answer that never blocks a cluster's
//!   lifecycle (deletions, ratcheted updates, request faults, unknown clusters); the webhook,
//!   `nicpolicy eval` and the case runner all answer through it.
//! - [`Mode`] ([`mode`]): a chain entry enforced or in warn mode (violations as warnings, no
//!   changes), the step between a candidate in the controller's shadow mode and enforcing it.
//! - [`inspect`] (a module read without running it), [`limits`], [`cache`], [`cases`] (case
//!   files, suites and JUnit reports), [`error`], [`stages`] (where an evaluation's or a
//!   review's time goes, for benchmarks).
//! - [`vcd`] and [`network_config`]: the plan as Cloud Director's `NetworkConnectionSection`
//!   (what a provisioner PUTs, what stock CAPVCD sends, a VM's section read back and compared
//!   with the plan) and as the guest's cloud-init network config (one default route, on the
//!   primary NIC, each NIC found by its MAC).
//! - [`kubewarden`]: the metadata of the policies' Kubewarden (waPC) build and the checks
//!   Kubewarden's policy-server applies before it runs one.
//!
//! - [`clusters`]: finding a machine's VCDCluster as Cluster API does, in manifest files
//!   ([`clusters::StaticClusters`]) or, with feature `webhook`, in watch-fed caches of the API
//!   server ([`clusters::live::KubeClusters`]).
//! - `guard` (feature `webhook`): whether the VCDMachine and VCDMachineTemplate CRDs serve a
//!   version the webhook configurations name, watched by the webhook and the controller.
//! - [`served`]: the served policy set of `serve`, `controller` and `review`: the configuration
//!   file, the snapshot of policies and inventory it loads, its hot reload.
//! - [`audit`]: every machine of a set of manifests evaluated against its own cluster, with a
//!   candidate chain beside (shadow mode); with feature `webhook`, of a live cluster too
//!   (`audit::live`), and [`controller`], the continuous `nicpolicy controller`.
//!
//! `host/examples/` has one runnable program per idea: `evaluate`, `chain`, `limits`.
//!
//! # Features
//!
//! - `builtin` (default): the policies under `policies/`, built to wasm32 by `build.rs` and
//!   embedded (`builtin`, `builtin:NAME` sources). Off, nothing is built inside your build.
//! - `webhook` (default): the admission webhook of `nicpolicy serve` (`webhook`): axum, kube,
//!   rustls, tokio.
//! - `playground` (default): the page of `nicpolicy playground` ([`playground`]), built by
//!   `build.rs` (the policies' JS builds and the manifest reader of `host/playground`) and
//!   embedded.
//! - `cli` (default): the `nicpolicy` binary.
//!
//! `default-features = false` leaves the core: load, limits, evaluate, chains, manifests.

#![doc(test(attr(deny(warnings))))]

pub mod audit;
#[cfg(feature = "builtin")]
pub mod builtin;
pub mod cache;
pub mod cases;
pub mod chain;
pub mod clusters;
pub mod compiler;
#[cfg(feature = "webhook")]
pub mod controller;
pub mod engine;
pub mod error;
pub mod fetch;
#[cfg(feature = "webhook")]
pub mod guard;
pub mod inspect;
pub mod junit;
pub mod kubewarden;
pub mod lifecycle;
pub mod limits;
pub mod mode;
pub mod network_config;
#[cfg(feature = "oci")]
pub mod oci;
#[cfg(feature = "playground")]
pub mod playground;
pub mod policy;
#[cfg(feature = "webhook")]
pub mod probes;
pub mod served;
pub mod sources;
pub mod spec;
pub mod stages;
pub mod vcd;
pub mod wasm_config;
#[cfg(feature = "webhook")]
pub mod webhook;

pub use chain::{ChainError, ChainEvaluation, PolicyChain};
pub use engine::{Host, HostConfig, HostError};
pub use error::{EvalError, LoadError};
pub use limits::{Budget, Limits, LARGE_INPUT_SHARE};
pub use manifest::{ManifestError, RequestFiles};
pub use mode::Mode;
pub use nicpolicy_inputs::{files, manifest};
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
