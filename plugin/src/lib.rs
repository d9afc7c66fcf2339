//! Guest SDK and shared schema for nicpolicy network policies.
//!
//! A nicpolicy policy decides, for one CAPVCD machine, which NICs it gets and whether it may be
//! admitted. It is compiled to a WebAssembly module that the `nicpolicy` host runs; this crate
//! holds everything both sides share:
//!
//! - [`schema`]: the [`Request`] a policy receives and the [`Decision`] it returns;
//! - [`abi`]: the module's exports, import and metadata section (ABI v1), and
//!   [`export_policy!`] which wires a policy function up to them;
//! - [`binary`]: the binary request and decision formats a host and policy may use instead of
//!   JSON (request version 1, decision versions 1 and 2, 2 carrying sources);
//! - [`source`]: where a decision's NICs and violations come from (rule, setting, field),
//!   which `nicpolicy eval --explain` shows;
//! - [`capvcd`]: the reference CAPVCD rules as plain functions, to reuse rule by rule;
//! - [`mutation`]: what defaulting writes back into a machine object (extra networks, the NIC
//!   plan annotation);
//! - [`settings`]: typed settings ([`settings::PolicySettings`]), read and checked by the SDK
//!   when the host loads the policy; [`testing`]: helpers for unit tests;
//! - `combine` (feature `lifecycle`): how a chain of policies makes one decision, for the host
//!   and the playground alike;
//! - `lifecycle` (feature `lifecycle`): the rules every host applies around a decision so that
//!   no answer blocks a cluster's lifecycle (deletions, unknown clusters, ratcheted updates);
//! - `objects` (feature `objects`): Kubernetes objects mapped to the schema, and the steps from
//!   a machine to its VCDCluster;
//! - `kubewarden` (feature `objects`; its waPC exports with feature `kubewarden`): the
//!   Kubewarden build's settings, messages and entry points.
//!
//! A whole policy is one function of the request and its typed settings; the SDK reads the
//! settings (`null` means the defaults), refuses unreadable ones with the reason when the host
//! loads the policy, and never calls the function without them:
//!
//! ```
//! use nicpolicy_plugin::{capvcd, Decision, Reason, Request, Role, Violation};
//!
//! /// Every CAPVCD rule, and control-plane machines stay off the DMZ network.
//! fn evaluate(request: &Request, settings: &capvcd::Settings) -> Decision {
//!     let mut decision = capvcd::evaluate_with(request, settings);
//!     if request.machine.role == Role::ControlPlane {
//!         let spec = request.kind.spec_path();
//!         for (i, name) in request.machine.extra_ovdc_networks.iter().enumerate() {
//!             if name == "ext-dmz-net" {
//!                 decision.violations.push(Violation::new(
//!                     format!("{spec}.extraOvdcNetworks[{i}]"),
//!                     Reason::Forbidden,
//!                     "control-plane machines stay off ext-dmz-net",
//!                 ));
//!             }
//!         }
//!     }
//!     decision.finish()
//! }
//!
//! nicpolicy_plugin::export_policy!(evaluate, settings: capvcd::Settings);
//! # fn main() {}
//! ```
//!
//! A policy that reads its settings itself gives `export_policy!` a check of the raw JSON
//! instead ([`export_policy!`] shows both forms).
//!
//! Build it with `cargo build --target wasm32-unknown-unknown --profile policy`; the same
//! function runs natively under `cargo test`.

pub mod abi;
pub mod backstop;
pub mod binary;
pub mod capvcd;
#[cfg(feature = "lifecycle")]
pub mod combine;
pub mod guest;
#[cfg(feature = "js")]
pub mod js;
#[cfg(feature = "objects")]
pub mod kubewarden;
#[cfg(feature = "lifecycle")]
pub mod lifecycle;
pub mod mutation;
#[cfg(feature = "objects")]
pub mod objects;
#[cfg(feature = "lifecycle")]
pub mod provisioner;
#[cfg(feature = "lifecycle")]
pub mod render;
pub mod schema;
pub mod settings;
pub mod source;
pub mod testing;

pub use guest::log;
pub use schema::{
    AdapterType, Cluster, Decision, Inventory, IpAllocationMode, Machine, Network, NetworkType,
    Nic, ObjectKind, Operation, Reason, Request, Role, Violation, Zone,
};
pub use source::{Origin, Source};
