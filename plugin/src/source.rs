//! Where a decision's parts come from: the [`Source`] a policy attaches to each planned NIC
//! and each violation, so that a site author can ask why a machine got its NIC list (`nicpolicy
//! eval --explain`, the playground, audit reports).
//!
//! Every field is optional and serialised only when set: a decision without sources (a module
//! built before they existed, or a hand-written one) is read as before, and a host that does not
//! know them ignores them. The host fills [`Source::policy`] with the name of the chain entry
//! whose decision carried the part.

use serde::{Deserialize, Serialize};

use crate::schema::{Decision, Nic, Violation};

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

/// Where a planned NIC's network was taken from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Origin {
    /// The VCDCluster's `spec.ovdcNetwork` (NIC 0 of a single-zone cluster).
    ClusterNetwork,
    /// The `ovdcNetworkName` of the machine's zone (NIC 0 of a multi-zone cluster).
    Zone,
    /// The machine's own `spec.extraOvdcNetworks`.
    Machine,
    /// A policy's defaults for the machine's role, written into a machine that listed none.
    RoleDefaults,
    /// A policy's settings otherwise (a mapping of logical names, a site default).
    Settings,
}

impl Origin {
    /// Every origin, in the order above.
    pub const ALL: [Origin; 5] = [
        Origin::ClusterNetwork,
        Origin::Zone,
        Origin::Machine,
        Origin::RoleDefaults,
        Origin::Settings,
    ];

    /// The name as it is serialised (`clusterNetwork`).
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::ClusterNetwork => "clusterNetwork",
            Origin::Zone => "zone",
            Origin::Machine => "machine",
            Origin::RoleDefaults => "roleDefaults",
            Origin::Settings => "settings",
        }
    }

    /// How a person reads it.
    pub fn text(self) -> &'static str {
        match self {
            Origin::ClusterNetwork => "the cluster's ovdcNetwork",
            Origin::Zone => "the machine's zone",
            Origin::Machine => "the machine's own list",
            Origin::RoleDefaults => "role defaults",
            Origin::Settings => "policy settings",
        }
    }
}

/// Why a NIC or a violation is in a decision.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    /// Where a NIC's network was taken from (NICs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
    /// The object field the value was read from: `cluster.spec.ovdcNetwork`,
    /// `spec.extraOvdcNetworks[1]` (paths that start with `cluster.` point into the VCDCluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// The rule that planned the NIC or found the violation, `policy-kind/rule`
    /// (`capvcd/plan`, `role-based/forbidden`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The setting behind it, as a path into the policy's settings (`worker.defaults[0]`,
    /// `capvcd.maxNics`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setting: Option<String>,
    /// The chain entry whose decision carried it; the host fills it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
}

impl Source {
    /// The source of a part made by `rule`.
    pub fn rule(rule: impl Into<String>) -> Source {
        Source {
            rule: Some(rule.into()),
            ..Source::default()
        }
    }

    /// A NIC taken from `origin` at `field` by `rule`.
    pub fn nic(origin: Origin, field: impl Into<String>, rule: impl Into<String>) -> Source {
        Source {
            origin: Some(origin),
            field: Some(field.into()),
            rule: Some(rule.into()),
            ..Source::default()
        }
    }

    /// This source with `setting` as the setting behind it.
    pub fn with_setting(mut self, setting: impl Into<String>) -> Source {
        self.setting = Some(setting.into());
        self
    }

    /// Whether nothing is known.
    pub fn is_empty(&self) -> bool {
        *self == Source::default()
    }

    /// One line for people: `role defaults (worker.defaults[0]) by role-based/defaults, policy
    /// site`; empty parts are left out.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        match (self.origin, &self.field) {
            (Some(origin), Some(field)) => parts.push(format!("{} ({field})", origin.text())),
            (Some(origin), None) => parts.push(origin.text().to_string()),
            (None, Some(field)) => parts.push(field.clone()),
            (None, None) => {}
        }
        if let Some(setting) = &self.setting {
            parts.push(format!("setting {setting}"));
        }
        if let Some(rule) = &self.rule {
            parts.push(format!("rule {rule}"));
        }
        if let Some(policy) = &self.policy {
            parts.push(format!("policy {policy}"));
        }
        if parts.is_empty() {
            "not reported".to_string()
        } else {
            parts.join(", ")
        }
    }
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
