//! Auditing what is already there: every VCDMachine and VCDMachineTemplate of a set of manifests
//! (files, folders, or the objects of a live cluster) evaluated against its own cluster, with
//! an optional candidate chain beside the served one (shadow mode).
//!
//! - [`capacity`]: the static IP pools of the org VDC networks against what rollouts need.
//! - [`inputs`]: reading manifests into [`Subject`]s, each machine with the request its policy
//!   sees (its cluster found as the webhook finds it) or the reason it cannot be evaluated.
//! - [`findings`]: evaluating subjects into [`Finding`]s (allowed, denied, skipped, error).
//! - [`live`]: the same inputs listed from a live cluster.
//! - [`shadow`]: what a candidate chain would decide differently.
//! - [`summary`]: totals by result and by rule, grouped by cluster.
//!
//! `nicpolicy eval` (several machines), `nicpolicy audit` and `nicpolicy controller` all go
//! through these modules, so a machine gets the same answer from each.

pub mod capacity;
pub mod findings;
pub mod inputs;
// The live reader is the one part of the audit that talks to the Kubernetes API.
#[cfg(feature = "kubernetes")]
pub mod live;
pub mod shadow;
pub mod summary;

pub use findings::{evaluate_all, Chains, Finding, Verdict};
pub use inputs::{Inputs, ObjectId, Problem, Subject};
pub use shadow::{Change, Shadow};
pub use summary::Summary;
