//! Rollout modes of a chain's entries: how a policy's decision is used.
//!
//! A new policy goes from "written" to "enforced" in steps: the controller's shadow mode shows
//! what it would change across the objects already stored, then `mode: warn` in the webhook
//! shows each author, as they write, what it would refuse (Gatekeeper's
//! `enforcementAction: warn`, Kubewarden's monitor mode and Kyverno's `Audit` do the same),
//! and `mode: enforce` makes it refuse.
//!
//! A warn-mode entry is evaluated like any other, on the request as the entries before it left
//! it, but ([`crate::chain`] applies this):
//!
//! - its violations do not deny: the webhook turns them into admission warnings starting with
//!   [`WOULD_DENY_PREFIX`];
//! - it changes nothing (Kubewarden's monitor mode): the `extraOvdcNetworks` it would write and
//!   the NICs it would plan are neither passed to the entries after it nor patched into the
//!   object; the mutating endpoint says what they would have been ([`NOT_APPLIED_PREFIX`]).
//!   Applying a warn entry's defaults would change objects before the policy is trusted, which
//!   is what the mode is there to avoid;
//! - its failures (trap, time limit, memory cap, bad output) never deny and never stop the
//!   chain: the entries after it still run, so no request can switch an enforced check off by
//!   making a warn-mode policy fail ([`NOT_CHECKED_PREFIX`]).
//!
//! The host's lifecycle rules ([`crate::lifecycle`]) judge a warn-mode entry as if it were
//! enforced, so a warning says exactly what enforcing it would deny: nothing on deletion, only
//! new violations on an UPDATE, and a request too large for the policy as a would-be denial.

use std::fmt;

use serde::Deserialize;

/// How a chain uses one entry's decision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Its violations deny and its changes are applied. The default.
    #[default]
    #[serde(alias = "Enforce")]
    Enforce,
    /// Its violations become warnings and it changes nothing.
    #[serde(alias = "Warn")]
    Warn,
}

impl Mode {
    /// `enforce` or `warn`, as the configuration file spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Warn => "warn",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Starts the admission warning for a violation a warn-mode policy found: enforced, the object
/// would have been denied for it. Followed by `: FIELD: REASON: [POLICY] MESSAGE`.
pub const WOULD_DENY_PREFIX: &str = "nicpolicy (mode: warn): would be denied";
/// Starts each of a warn-mode policy's own warnings, which may describe what it would have
/// done (`set to the worker defaults`) or how enforcing it would be judged (`pre-existing
/// violation, not enforced on this update`).
pub const IF_ENFORCED_PREFIX: &str = "nicpolicy (mode: warn), if enforced";
/// Starts the admission warning for a change a warn-mode policy would have made.
pub const NOT_APPLIED_PREFIX: &str = "nicpolicy (mode: warn): not applied";
/// Starts the admission warning for a warn-mode policy that failed on the object.
pub const NOT_CHECKED_PREFIX: &str = "nicpolicy (mode: warn): not checked";
/// Starts a warn-mode policy's violation in an audit report: the webhook admits it with a
/// warning.
pub const AUDIT_PREFIX: &str = "mode: warn, admitted with a warning";
