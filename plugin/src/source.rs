//! Where a decision's parts come from: the [`Source`] a policy attaches to each planned NIC
//! and each violation, so that a site author can ask why a machine got its NIC list (`nicpolicy
//! eval --explain`, the playground, audit reports).
//!
//! Every field is optional and serialised only when set: a decision without sources (a module
//! built before they existed, or a hand-written one) is read as before, and a host that does not
//! know them ignores them. The host fills [`Source::policy`] with the name of the chain entry
//! whose decision carried the part.

use crate::schema::{Decision, Nic, Violation};
pub use crate::schema::{Origin, Source};

std::thread_local! {
    /// Whether the caller reads NICs' sources; see [`nic_sources_wanted`].
    static NIC_SOURCES: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// Whether the host reads the sources of the NICs a policy plans. `false` while a policy runs
/// for `nicpolicy_evaluate_binary4` (the webhook and the controller show no NIC sources, only
/// the violations'): a policy then skips building them, which is most of what sources cost.
/// Violations' sources are always wanted (rule names in reports and warnings). `true`
/// otherwise, and always outside a module.
pub fn nic_sources_wanted() -> bool {
    NIC_SOURCES.with(std::cell::Cell::get)
}

/// Runs `f` with [`nic_sources_wanted`] false, restoring it after.
pub fn without_nic_sources<T>(f: impl FnOnce() -> T) -> T {
    let before = NIC_SOURCES.with(|wanted| wanted.replace(false));
    let result = f();
    NIC_SOURCES.with(|wanted| wanted.set(before));
    result
}

impl Violation {
    /// This violation with `source` (see [`Source`]).
    pub fn with_source(mut self, source: Source) -> Violation {
        self.source = Some(Box::new(source));
        self
    }
}

/// Gives each of `violations` that has no source yet the source `rule` (with `setting`).
pub fn tag(violations: &mut [Violation], rule: &str, setting: Option<&str>) {
    for violation in violations.iter_mut().filter(|v| v.source.is_none()) {
        let mut source = Source::rule(rule);
        source.setting = setting.map(str::to_string);
        violation.source = Some(Box::new(source));
    }
}

/// [`tag`] on a list that is returned, for chaining after a check.
pub fn tagged(mut violations: Vec<Violation>, rule: &str, setting: Option<&str>) -> Vec<Violation> {
    tag(&mut violations, rule, setting);
    violations
}

/// Prefixes every setting path of `decision` with `key`: rules whose settings sit nested in a
/// site policy's (`capvcd: {maxNics: 6}`) report `capvcd.maxNics`.
pub fn nest_settings(decision: &mut Decision, key: &str) {
    let sources = decision
        .nics
        .iter_mut()
        .filter_map(|nic| nic.source.as_mut())
        .chain(
            decision
                .violations
                .iter_mut()
                .filter_map(|v| v.source.as_mut()),
        );
    for source in sources {
        if let Some(setting) = &mut source.setting {
            *setting = format!("{key}.{setting}");
        }
    }
}

/// Whether two NIC plans are the same, their sources aside.
pub fn same_plan(a: &[Nic], b: &[Nic]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.index == y.index
                && x.network == y.network
                && x.primary == y.primary
                && x.ip_allocation_mode == y.ip_allocation_mode
                && x.ip_address == y.ip_address
                && x.adapter_type == y.adapter_type
                && x.connected == y.connected
        })
}

/// Drops every source of `decision`: what a host that predates them would have seen.
pub fn strip(decision: &mut Decision) {
    for nic in &mut decision.nics {
        nic.source = None;
    }
    for violation in &mut decision.violations {
        violation.source = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Reason;

    #[test]
    fn an_origins_name_is_its_serialised_form() {
        for origin in Origin::ALL {
            let json = serde_json::to_value(origin).expect("serialises");
            assert_eq!(json, origin.as_str(), "{origin:?}");
        }
    }

    #[test]
    fn a_decision_without_sources_reads_and_writes_as_before() {
        let json = r#"{"allowed":false,"nics":[{"index":0,"network":"mgmt-net","primary":true,
            "ipAllocationMode":"POOL","adapterType":"VMXNET3","connected":true}],
            "violations":[{"field":"spec.extraOvdcNetworks","reason":"Required","message":"m"}]}"#;
        let decision: Decision = serde_json::from_str(json).expect("reads");
        assert!(decision.nics[0].source.is_none());
        assert!(decision.violations[0].source.is_none());
        let written = serde_json::to_string(&decision).expect("writes");
        assert!(!written.contains("source"), "{written}");
    }

    #[test]
    fn tags_fill_only_what_is_missing_and_settings_nest() {
        let mut violations = vec![
            Violation::new("spec.a", Reason::Invalid, "x"),
            Violation::new("spec.b", Reason::Invalid, "y").with_source(Source::rule("own/rule")),
        ];
        tag(&mut violations, "capvcd/max-nics", Some("maxNics"));
        assert_eq!(
            violations[0]
                .source
                .as_ref()
                .and_then(|s| s.rule.as_deref()),
            Some("capvcd/max-nics")
        );
        assert_eq!(
            violations[1]
                .source
                .as_ref()
                .and_then(|s| s.rule.as_deref()),
            Some("own/rule")
        );
        let mut decision = Decision::from_violations(violations);
        nest_settings(&mut decision, "capvcd");
        assert_eq!(
            decision.violations[0]
                .source
                .as_ref()
                .and_then(|s| s.setting.as_deref()),
            Some("capvcd.maxNics")
        );
    }

    #[test]
    fn descriptions_name_what_is_known() {
        let source = Source::nic(
            Origin::RoleDefaults,
            "spec.extraOvdcNetworks[0]",
            "role-based/defaults",
        )
        .with_setting("worker.defaults[0]");
        assert_eq!(
            source.describe(),
            "role defaults (spec.extraOvdcNetworks[0]), setting worker.defaults[0], rule \
             role-based/defaults"
        );
        assert_eq!(Source::default().describe(), "not reported");
    }
}
