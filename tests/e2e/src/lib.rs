//! The end-to-end harness: a real kube-apiserver and etcd on loopback (built by
//! tests/e2e/kube/build.sh), kubectl, and `nicpolicy serve` registered through the shipped
//! configurations or `nicpolicy controller` run with them. The suites in tests/ drive them as a controller (kube-rs) and a person
//! (kubectl) would.

pub mod binaries;
pub mod capi;
pub mod control_plane;
pub mod controller;
pub mod fixtures;
pub mod kubectl;
pub mod pki;
pub mod process;
pub mod registry;
pub mod webhook;

pub use binaries::{binaries, workspace};
pub use control_plane::{shared, shared_on, ControlPlane, Crds};
pub use controller::Controller;
pub use kubectl::Kubectl;
pub use webhook::Webhook;
