//! The decision as `nicpolicy eval` prints it in table form, in the spirit of `kubectl describe`:
//! the text of [`nicpolicy::plugin::render`], which the playground shows too.

use nicpolicy::plugin::provisioner::Unapplied;
use nicpolicy::plugin::render::{decision_text, Described};
use nicpolicy::plugin::{Decision, Request};
use nicpolicy::PolicyChain;

pub use nicpolicy::plugin::render::table;

/// Human-readable decision, in the spirit of `kubectl describe`; with `explain`, where each
/// NIC and violation comes from.
pub fn render_decision(
    request: &Request,
    chain: &PolicyChain,
    decision: &Decision,
    unapplied: &[Unapplied],
    explain: bool,
) -> String {
    let policies: Vec<String> = chain
        .policies()
        .iter()
        .map(|policy| {
            let version = policy
                .info()
                .metadata
                .as_ref()
                .map(|m| format!(" {}", m.version))
                .unwrap_or_default();
            format!("{}{version}", policy.name())
        })
        .collect();
    decision_text(
        &Described {
            request,
            policies: &policies,
            unapplied,
            explain,
        },
        decision,
    )
}
