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
//! The engine (load, limits, evaluate, chains, case files) is the crate `nicpolicy-engine`,
//! whose modules this crate re-exports under its own name; it knows no registry, HTTP or
//! Kubernetes client. This crate adds where modules come from ([`sources`]), what serves them
//! and the commands.
//!
//! - [`Host`] ([`engine`]): the Wasmtime engine, its epoch ticker and the compiled-module cache.
//!   Expensive to create (it reserves the instance pool); one per process, cheap to clone.
//! - [`Policy`] ([`policy`]): a loaded module with its settings and limits. Loading compiles
//!   (or reads the cache), checks the ABI and the settings; evaluating instantiates afresh for
//!   every call, so nothing survives between machines. `Send + Sync`, cheap to clone.
//! - [`PolicySpec`] and [`sources::Sources::loader`] ([`spec`], [`sources`]): where a policy
//!   comes from (a file, a built-in, a registry, bytes), its settings, digest pin and limits;
//!   a list of them loads into a [`PolicyChain`] ([`chain`]) with errors naming the entry that
//!   failed. The CLI and the
//!   webhook both load their policies this way.
//! - [`RequestFiles`] ([`request`], [`manifest`]): Kubernetes manifests to a policy
//!   [`plugin::Request`].
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
//!   ([`clusters::StaticClusters`]) or, with feature `kubernetes`, in watch-fed caches of the API
//!   server ([`clusters::live::KubeClusters`]).
//! - `guard` (feature `kubernetes`): whether the VCDMachine and VCDMachineTemplate CRDs serve a
//!   version the webhook configurations name, watched by the webhook and the controller.
//! - [`served`]: the served policy set of `serve`, `controller` and `review`: the configuration
//!   file, the snapshot of policies and inventory it loads, its hot reload.
//! - [`audit`]: every machine of a set of manifests evaluated against its own cluster, with a
//!   candidate chain beside (shadow mode) and the static pools its rollouts take from
//!   ([`audit::capacity`], the counts in [`pools`]); with feature `kubernetes`, of a live
//!   cluster too (`audit::live`), and [`controller`], the continuous `nicpolicy controller`.
//!
//! `host/examples/` has one runnable program per idea: `evaluate`, `chain`, `limits`.
//!
//! # Features
//!
//! - `builtin` (default): the policies under `policies/`, built to wasm32 by `build.rs` and
//!   embedded (`builtin`, `builtin:NAME` sources). Off, nothing is built inside your build.
//! - `kubernetes` (default): what talks to the Kubernetes API or serves it: the admission
//!   webhook of `nicpolicy serve` ([`webhook`]), the controller, live cluster lookups: axum, kube,
//!   rustls, tokio.
//! - `playground` (default): the page of `nicpolicy playground` ([`playground`]), built by
//!   `build.rs` (the policies' JS builds and the manifest reader of `host/playground`) and
//!   embedded.
//! - `oci` (default): policies in OCI registries (`oci`, `oci://` sources, `nicpolicy push` and
//!   `pull`): oci-client and sigstore.
//! - `clouddirector` (default): Cloud Director's OpenAPI ([`clouddirector`], `nicpolicy
//!   inventory import`): reqwest, tokio.
//! - `cli` (default): the `nicpolicy` binary.
//!
//! `default-features = false` leaves the engine ([`nicpolicy_engine`], re-exported here), the
//! served configuration, the audit and the manifests.

#![doc(test(attr(deny(warnings))))]

pub mod audit;
pub mod backstop;
#[cfg(feature = "builtin")]
pub mod builtin;
#[cfg(feature = "clouddirector")]
pub mod clouddirector;
pub mod clusters;
#[cfg(feature = "kubernetes")]
pub mod controller;
#[cfg(feature = "kubernetes")]
pub mod guard;
pub mod inventories;
pub mod network_config;
#[cfg(feature = "playground")]
pub mod playground;
pub mod pools;
#[cfg(feature = "kubernetes")]
pub mod probes;
pub mod served;
pub mod sources;
pub mod vcd;
#[cfg(feature = "kubernetes")]
pub mod webhook;

// The engine's modules, under this crate's name as before they were a crate of their own.
pub use nicpolicy_engine::{
    cache, cases, chain, compiler, engine, error, fetch, inspect, junit, kubewarden, lifecycle,
    limits, mode, policy, spec, stages, wasm_config,
};
pub use nicpolicy_engine::{
    Budget, ChainError, ChainEvaluation, ChainLoadError, ChainLoader, EvalError, Evaluation, Host,
    HostConfig, HostError, Limits, LoadError, LogLine, Mode, Policy, PolicyChain, PolicyOptions,
    PolicySource, PolicySpec, RequestFormat, SettingsSource, LARGE_INPUT_SHARE,
};
pub use nicpolicy_inputs::manifest::ManifestError;
pub use nicpolicy_inputs::request::RequestFiles;
pub use nicpolicy_inputs::{files, manifest, request};
/// Policies in OCI registries: the `nicpolicy-oci` crate (feature `oci`).
#[cfg(feature = "oci")]
pub use nicpolicy_oci as oci;
pub use nicpolicy_plugin as plugin;
