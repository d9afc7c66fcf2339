//! How a chain of policies makes one decision of theirs, step by step: the host's
//! `PolicyChain` and the playground page (through wasm-bindgen) both feed their policies'
//! decisions to a [`Combiner`], so the page decides exactly as `nicpolicy eval` and the webhook
//! do. Pure data in and out: no engine, no I/O.
//!
//! - **Mutation flows forward.** A decision that writes back `extraOvdcNetworks` gives the
//!   next policy that list ([`Combiner::add`] returns it).
//! - **`allowed`** only if every policy allows; **`strict`** if any decision is.
//! - **Violations and warnings**: every policy's; warnings in chain order, violations in field
//!   order ([`Decision::sort_violations`]). In a chain of two or more each message is prefixed
//!   with `[name] `; fields and reasons are never changed.
//! - **NICs and vApp networks**: the last policy's; **`extraOvdcNetworks`**: the last list any
//!   policy wrote back.
//! - **Sources**: every violation's names the policy that made it, every NIC's the policy that
//!   planned it, or, for an extra NIC whose network an earlier policy wrote into the list, that
//!   earlier policy (with the source of its own plan for that network). A decision without
//!   sources still gets the policy's name.

use crate::schema::{Decision, Nic, Request, Violation};
use crate::source::{Origin, Source};

/// A policy's message as a chain attributes it: `[name] text`.
pub fn attributed(policy: &str, text: &str) -> String {
    format!("[{policy}] {text}")
}

/// The decisions of a chain's enforced policies, combined as they come (see the
/// [module documentation](self)).
#[derive(Clone, Debug)]
pub struct Combiner {
    /// Whether messages carry their policy's name (a chain of two or more).
    several: bool,
    combined: Decision,
    /// The extra networks the next policy sees.
    current: Vec<String>,
    /// The last list a policy wrote back.
    written: Option<Vec<String>>,
    /// Who put each entry of `current` there: `None` for the machine's own, else the source of
    /// the policy that wrote it.
    writers: Vec<Option<Box<Source>>>,
    /// Whether NICs get sources ([`Combiner::without_nic_sources`]).
    nic_sources: bool,
}

impl Combiner {
    /// A combiner for `request` in a chain of `len` policies.
    pub fn new(request: &Request, len: usize) -> Combiner {
        let current = request.machine.extra_ovdc_networks.clone();
        Combiner {
            several: len > 1,
            combined: Decision {
                allowed: true,
                ..Decision::default()
            },
            writers: vec![None; current.len()],
            current,
            written: None,
            nic_sources: true,
        }
    }

    /// This combiner for a caller that reads no NIC sources: the combined NICs have none (the
    /// violations keep theirs, with their policy's name).
    pub fn without_nic_sources(mut self) -> Combiner {
        self.nic_sources = false;
        self
    }

    /// `text` as the chain words it: prefixed with `[policy] ` in a chain of two or more.
    pub fn label(&self, policy: &str, text: &str) -> String {
        if self.several {
            attributed(policy, text)
        } else {
            text.to_string()
        }
    }

    /// Adds the decision of `policy`, the next enforced policy of the chain. Returns the extra
    /// networks the next policy is to see when this decision rewrote them.
    pub fn add(&mut self, policy: &str, decision: &Decision) -> Option<&[String]> {
        self.add_owned(policy, decision.clone())
    }

    /// [`Combiner::add`] for a decision the caller does not keep: its parts are moved into the
    /// combined one instead of copied.
    pub fn add_owned(&mut self, policy: &str, decision: Decision) -> Option<&[String]> {
        let Decision {
            allowed,
            nics,
            extra_ovdc_networks,
            vapp_networks,
            violations,
            warnings,
            strict,
        } = decision;
        let combined = &mut self.combined;
        combined.allowed &= allowed;
        combined.strict |= strict;
        let several = self.several;
        let label = |text: String| {
            if several {
                attributed(policy, &text)
            } else {
                text
            }
        };
        combined
            .violations
            .extend(violations.into_iter().map(|v| Violation {
                message: label(v.message),
                source: Some(stamped(v.source, policy)),
                ..v
            }));
        combined.warnings.extend(warnings.into_iter().map(label));
        // With sources, the policy's own plan names the writers of a rewritten list below.
        let own_plan = if self.nic_sources {
            combined.nics = nics
                .iter()
                .map(|nic| attributed_nic(nic, policy, &self.writers))
                .collect();
            nics
        } else {
            combined.nics = nics
                .into_iter()
                .map(|nic| Nic {
                    source: None,
                    ..nic
                })
                .collect();
            Vec::new()
        };
        combined.vapp_networks = vapp_networks;
        let list = extra_ovdc_networks?;
        if list == self.current {
            self.written = Some(list);
            return None;
        }
        if self.nic_sources {
            self.writers = rewritten_by(&list, &self.current, &self.writers, &own_plan, policy);
        }
        self.current = list.clone();
        self.written = Some(list);
        Some(&self.current)
    }

    /// The combined decision, violations in field order.
    pub fn finish(self) -> Decision {
        let mut decision = self.combined;
        decision.extra_ovdc_networks = self.written;
        decision.sort_violations();
        decision
    }
}

/// `source` (or an empty one) naming `policy` as the chain entry that carried it.
pub fn stamped(source: Option<Box<Source>>, policy: &str) -> Box<Source> {
    let mut source = source.unwrap_or_default();
    source.policy = Some(policy.to_string());
    source
}

/// `nic` of `policy`'s plan with its source: the policy's own, or, for an extra NIC it took
/// from the machine's list where an earlier policy wrote that entry, the earlier policy's.
fn attributed_nic(nic: &Nic, policy: &str, writers: &[Option<Box<Source>>]) -> Nic {
    let from_list = nic
        .source
        .as_ref()
        .is_none_or(|s| matches!(s.origin, None | Some(Origin::Machine)));
    let writer = (nic.index > 0 && from_list)
        .then(|| writers.get(nic.index as usize - 1).cloned().flatten())
        .flatten();
    let source = match writer {
        Some(mut source) => {
            // The writer's plan told where the network came from; this NIC's field is where
            // the entry sits now.
            source.field = nic.source.as_ref().and_then(|s| s.field.clone());
            source
        }
        None => stamped(nic.source.clone(), policy),
    };
    Nic {
        source: Some(source),
        ..nic.clone()
    }
}

/// The writers of `list`, which `policy` wrote over `before`: an entry kept from `before` keeps
/// its writer, a new one is `policy`'s, with the source of its own plan for that network.
fn rewritten_by(
    list: &[String],
    before: &[String],
    writers: &[Option<Box<Source>>],
    plan: &[Nic],
    policy: &str,
) -> Vec<Option<Box<Source>>> {
    list.iter()
        .map(|network| match before.iter().position(|n| n == network) {
            Some(j) => writers.get(j).cloned().flatten(),
            None => {
                let planned = plan
                    .iter()
                    .find(|nic| nic.index > 0 && nic.network == *network)
                    .and_then(|nic| nic.source.clone());
                Some(stamped(planned, policy))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;
    use crate::Reason;

    #[test]
    fn a_rewrite_flows_forward_and_its_networks_keep_their_writer() {
        let request = testing::worker(&["storage-net"]);
        let mut combiner = Combiner::new(&request, 2);
        let mut defaults = Decision::from_violations(vec![Violation::new(
            "spec.failureDomain",
            Reason::Invalid,
            "zone",
        )]);
        defaults.extra_ovdc_networks = Some(vec!["storage-net".into(), "backup-net".into()]);
        let mut backup = Nic::capvcd(2, "backup-net");
        backup.source = Some(Box::new(Source::nic(
            Origin::RoleDefaults,
            "spec.extraOvdcNetworks[1]",
            "site/defaults",
        )));
        defaults.nics = vec![backup];
        let next = combiner.add("site", &defaults).map(<[String]>::to_vec);
        assert_eq!(next, Some(vec!["storage-net".into(), "backup-net".into()]));

        let mut plan = Decision::from_violations(Vec::new());
        plan.nics = vec![
            Nic::capvcd(0, "mgmt-net"),
            Nic::capvcd(1, "storage-net"),
            Nic::capvcd(2, "backup-net"),
        ];
        assert_eq!(combiner.add("capvcd", &plan), None, "no rewrite");
        let decision = combiner.finish();
        assert!(!decision.allowed);
        assert_eq!(decision.violations[0].message, "[site] zone");
        let policy = |i: usize| {
            decision.nics[i]
                .source
                .as_ref()
                .and_then(|s| s.policy.clone())
        };
        assert_eq!(policy(0).as_deref(), Some("capvcd"));
        assert_eq!(
            policy(1).as_deref(),
            Some("capvcd"),
            "the machine's own entry"
        );
        assert_eq!(policy(2).as_deref(), Some("site"), "written by site");
        assert_eq!(
            decision.nics[2].source.as_ref().and_then(|s| s.origin),
            Some(Origin::RoleDefaults)
        );
        assert_eq!(
            decision.extra_ovdc_networks,
            Some(vec!["storage-net".into(), "backup-net".into()])
        );
    }
}
