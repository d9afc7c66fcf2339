//! Role-based network rules on top of the CAPVCD policy.
//!
//! Control-plane and worker machines often need different networks: control planes stay off the
//! DMZ, workers need the storage network, and so on. This policy runs every CAPVCD rule
//! ([`capvcd::evaluate_with`]) and then, for the machine's role (from the
//! `cluster.x-k8s.io/control-plane` label):
//!
//! - a machine that lists no extra networks gets its role's `defaults` written back into
//!   `extraOvdcNetworks` (and planned as NICs), except on an UPDATE of a provisioned machine whose
//!   stored list is empty too, where that would add NICs to a running VM;
//! - each `required` network missing from the machine is `Required` at
//!   `<spec>.extraOvdcNetworks` (the cluster's primary network counts as present);
//! - each `forbidden` network is `Forbidden` at `<spec>.extraOvdcNetworks[i]`;
//! - when `allowed` is given, any other network (neither allowed nor required) is `NotSupported`
//!   at `<spec>.extraOvdcNetworks[i]`.
//!
//! The primary network is never checked against `allowed` or `forbidden`: it comes from the
//! VCDCluster, not from the machine.
//!
//! Settings (every field optional, unknown fields refused):
//!
//! ```yaml
//! capvcd: {maxNics: 6}     # the CAPVCD policy's settings
//! controlPlane:
//!   required: [mgmt-net]
//!   forbidden: [ext-dmz-net]
//!   allowed: [storage-net, backup-net]
//! worker:
//!   allowed: [storage-net, workload-net, backup-net, ext-dmz-net]
//!   defaults: [storage-net, workload-net]
//! ```

use nicpolicy_plugin::capvcd::{self, Primary};
use nicpolicy_plugin::settings::{self, PolicySettings};
use nicpolicy_plugin::source::{self, Origin, Source};
use nicpolicy_plugin::{
    schema::CONTROL_PLANE_LABEL, Decision, ObjectKind, Operation, Reason, Request, Role, Violation,
};

/// The rule names this policy reports in each violation's and NIC's [`Source`].
pub mod rules {
    /// A role's `defaults` written into a machine that lists no extra networks.
    pub const DEFAULTS: &str = "role-based/defaults";
    /// A network the role requires is missing.
    pub const REQUIRED: &str = "role-based/required";
    /// A network the role forbids is listed.
    pub const FORBIDDEN: &str = "role-based/forbidden";
    /// A network outside the role's `allowed` list.
    pub const ALLOWED: &str = "role-based/allowed";
}
use serde::Deserialize;
use serde_json::Value;

/// The policy's settings (every field optional, unknown fields refused).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Settings {
    /// The CAPVCD rules' own settings (`capvcd:`).
    #[serde(default, deserialize_with = "settings::null_as_default")]
    pub capvcd: capvcd::Settings,
    /// Rules for control-plane machines (`controlPlane:`).
    #[serde(default, deserialize_with = "settings::null_as_default")]
    pub control_plane: RoleRules,
    /// Rules for every other machine (`worker:`).
    #[serde(default, deserialize_with = "settings::null_as_default")]
    pub worker: RoleRules,
}

/// The network rules of one role.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(
    rename_all = "camelCase",
    deny_unknown_fields,
    expecting = "a map with required, forbidden, allowed and defaults"
)]
pub struct RoleRules {
    /// Networks every machine of the role must have (as an extra network or as the primary).
    #[serde(default)]
    pub required: Vec<String>,
    /// Networks no machine of the role may list.
    #[serde(default)]
    pub forbidden: Vec<String>,
    /// When given, the only extra networks the role may list (its `required` networks are
    /// allowed too).
    #[serde(default)]
    pub allowed: Option<Vec<String>>,
    /// Extra networks written into a machine of the role that lists none.
    #[serde(default)]
    pub defaults: Vec<String>,
}

impl PolicySettings for Settings {
    fn check(&self) -> Result<(), String> {
        self.capvcd.check_nested("capvcd")?;
        self.control_plane.check("controlPlane", &self.capvcd)?;
        self.worker.check("worker", &self.capvcd)
    }
}

impl Settings {
    /// Reads and checks settings; JSON `null` means the CAPVCD defaults and no role rules.
    ///
    /// # Errors
    /// Why the settings cannot be used, starting with the field at fault.
    pub fn parse(value: &Value) -> Result<Settings, String> {
        settings::parse(value)
    }

    /// The rules of `role`.
    pub fn rules(&self, role: Role) -> &RoleRules {
        match role {
            Role::ControlPlane => &self.control_plane,
            Role::Worker => &self.worker,
        }
    }
}

impl RoleRules {
    /// The lists by settings name.
    fn lists(&self) -> [(&'static str, &[String]); 4] {
        [
            ("required", &self.required),
            ("forbidden", &self.forbidden),
            ("allowed", self.allowed.as_deref().unwrap_or_default()),
            ("defaults", &self.defaults),
        ]
    }

    fn check(&self, key: &str, capvcd: &capvcd::Settings) -> Result<(), String> {
        for (list, names) in self.lists() {
            for (i, name) in names.iter().enumerate() {
                capvcd::check_name(name)
                    .map_err(|why| format!("{key}.{list}[{i}]: network name {name:?} {why}"))?;
                if let Some(first) = names[..i].iter().position(|n| n == name) {
                    return Err(format!(
                        "{key}.{list}[{i}]: network {name:?} is already listed at \
                         {key}.{list}[{first}]"
                    ));
                }
            }
        }
        for name in &self.required {
            if self.forbidden.contains(name) {
                return Err(format!(
                    "{key}: network {name:?} is both required and forbidden; no machine could \
                     satisfy both"
                ));
            }
        }
        for name in self.allowed.iter().flatten() {
            if self.forbidden.contains(name) {
                return Err(format!(
                    "{key}: network {name:?} is both allowed and forbidden; list it in one of them"
                ));
            }
        }
        for (i, name) in self.defaults.iter().enumerate() {
            if self.forbidden.contains(name) {
                return Err(format!(
                    "{key}.defaults[{i}]: network {name:?} is forbidden for the same role, so \
                     every defaulted machine would be refused"
                ));
            }
            if !self.is_allowed(name) {
                return Err(format!(
                    "{key}.defaults[{i}]: network {name:?} is not in {key}.allowed (nor in \
                     {key}.required), so every defaulted machine would be refused"
                ));
            }
        }
        let nics = self.defaults.len() + 1;
        if nics > capvcd.max_nics as usize {
            return Err(format!(
                "{key}.defaults: {} networks plus the primary make {nics} NICs, above maxNics {}",
                self.defaults.len(),
                capvcd.max_nics
            ));
        }
        Ok(())
    }

    /// Whether `allowed` lets `name` through (a required network always is).
    fn is_allowed(&self, name: &str) -> bool {
        match &self.allowed {
            None => true,
            Some(allowed) => {
                allowed.iter().any(|n| n == name) || self.required.iter().any(|n| n == name)
            }
        }
    }
}

/// The role's key in the settings.
fn settings_key(role: Role) -> &'static str {
    match role {
        Role::ControlPlane => "controlPlane",
        Role::Worker => "worker",
    }
}

/// The CAPVCD rules with their settings paths under `capvcd:`, where this policy keeps them.
fn capvcd_rules(request: &Request, settings: &Settings) -> Decision {
    let mut decision = capvcd::evaluate_with(request, &settings.capvcd);
    source::nest_settings(&mut decision, "capvcd");
    decision
}

/// The role as messages name it.
fn role_name(role: Role) -> &'static str {
    match role {
        Role::ControlPlane => "control-plane",
        Role::Worker => "worker",
    }
}

/// Whether a machine of `rules`' role that lists no extra networks gets the defaults.
fn takes_defaults(request: &Request, rules: &RoleRules) -> bool {
    if rules.defaults.is_empty() || !request.machine.extra_ovdc_networks.is_empty() {
        return false;
    }
    // Defaults on a running VM that has no extra NICs would hot-add NICs to it.
    let running_without_extras = request.operation == Operation::Update
        && request
            .old_machine
            .as_ref()
            .is_some_and(|old| old.is_provisioned() && old.extra_ovdc_networks.is_empty());
    !running_without_extras
}

/// The CAPVCD rules, the role's defaults, then the role's rules.
pub fn evaluate_with(request: &Request, settings: &Settings) -> Decision {
    if !role_known(request) {
        return evaluate_either_role(request, settings);
    }
    let role = request.machine.role;
    let rules = settings.rules(role);
    let spec = request.kind.spec_path();

    let defaulted;
    let mut warnings = Vec::new();
    let takes_defaults = takes_defaults(request, rules);
    let request = if takes_defaults {
        let mut with_defaults = request.clone();
        with_defaults.machine.extra_ovdc_networks = rules.defaults.clone();
        warnings.push(format!(
            "{spec}.extraOvdcNetworks was empty: set to the {} defaults [{}]",
            role_name(role),
            rules.defaults.join(", ")
        ));
        defaulted = with_defaults;
        &defaulted
    } else {
        request
    };

    let mut decision = capvcd_rules(request, settings);
    if takes_defaults && source::nic_sources_wanted() {
        // The extra NICs are the role's defaults, not the machine's own list.
        let key = settings_key(role);
        for nic in decision.nics.iter_mut().filter(|nic| nic.index > 0) {
            let i = nic.index - 1;
            nic.source = Some(Box::new(
                Source::nic(
                    Origin::RoleDefaults,
                    format!("{spec}.extraOvdcNetworks[{i}]"),
                    self::rules::DEFAULTS,
                )
                .with_setting(format!("{key}.defaults[{i}]")),
            ));
        }
    }
    decision.violations.extend(check_role(request, rules));
    decision.warnings.extend(warnings);
    decision.finish()
}

/// Whether the machine's role is certain. A VCDMachine's is: Cluster API labels every machine
/// of a control plane. A VCDMachineTemplate's is only when the template carries the label
/// itself, which stock CAPVCD manifests do not (the `<cluster>-control-plane` template a
/// KubeadmControlPlane clones has no labels). Read as a worker template, it would get the
/// worker defaults, and every control-plane machine cloned from it would then break the
/// control-plane rules: the cluster could not be created.
fn role_known(request: &Request) -> bool {
    request.kind == ObjectKind::VcdMachine || request.machine.role == Role::ControlPlane
}

/// A template that may serve either role: nothing is defaulted (each VCDMachine cloned from
/// it gets its own role's defaults when it is created), a network wrong for both roles is a
/// violation, and one wrong for a single role is a warning naming that role.
fn evaluate_either_role(request: &Request, settings: &Settings) -> Decision {
    let mut decision = capvcd_rules(request, settings);
    let findings = |role: Role| {
        let mut as_role = request.clone();
        as_role.machine.role = role;
        role_findings(&as_role, settings.rules(role))
    };
    let (worker, control_plane) = (findings(Role::Worker), findings(Role::ControlPlane));
    let in_both = |finding: &Finding, others: &[Finding]| {
        others.iter().any(|other| other.network == finding.network)
    };
    for finding in &worker {
        if in_both(finding, &control_plane) {
            let mut violation = finding.violation.clone();
            violation
                .message
                .push_str(" (the same holds for control-plane machines)");
            decision.violations.push(violation);
        }
    }
    let single_role = worker
        .iter()
        .filter(|f| !in_both(f, &control_plane))
        .chain(control_plane.iter().filter(|f| !in_both(f, &worker)));
    let mut any_single_role = false;
    for finding in single_role {
        any_single_role = true;
        decision.warnings.push(format!(
            "{}: if this template is for {} machines: {}",
            finding.violation.field, finding.role, finding.violation.message
        ));
    }
    let defaults_left = request.machine.extra_ovdc_networks.is_empty()
        && !(settings.worker.defaults.is_empty() && settings.control_plane.defaults.is_empty());
    if any_single_role || defaults_left {
        decision.warnings.push(format!(
            "metadata.labels: no {CONTROL_PLANE_LABEL} label, so this template may serve \
             control-plane or worker machines: role defaults go into each VCDMachine created \
             from it, and a role rule broken for one role only is a warning here (label a \
             control-plane template in spec.template.metadata.labels to check it as one)"
        ));
    }
    decision.finish()
}

/// A role rule broken by one network.
struct Finding {
    network: String,
    role: &'static str,
    violation: Violation,
}

/// The role's required, forbidden and allowed networks, against the machine's extra networks
/// (after defaulting).
pub fn check_role(request: &Request, rules: &RoleRules) -> Vec<Violation> {
    role_findings(request, rules)
        .into_iter()
        .map(|finding| finding.violation)
        .collect()
}

fn role_findings(request: &Request, rules: &RoleRules) -> Vec<Finding> {
    let key = settings_key(request.machine.role);
    let role = role_name(request.machine.role);
    let spec = request.kind.spec_path();
    let extras = &request.machine.extra_ovdc_networks;
    let primary = capvcd::resolve_primary(request, &request.machine).unwrap_or(Primary::Unresolved);
    let candidates: Vec<&str> = primary.candidates().into_iter().map(|(n, _)| n).collect();
    let mut findings = Vec::new();
    let mut found = |network: &str, violation| {
        findings.push(Finding {
            network: network.to_string(),
            role,
            violation,
        })
    };

    for (i, name) in extras.iter().enumerate() {
        // Malformed names and the primary listed again are CAPVCD violations already.
        if capvcd::check_name(name).is_err() || candidates.contains(&name.as_str()) {
            continue;
        }
        let field = format!("{spec}.extraOvdcNetworks[{i}]");
        if let Some(k) = rules.forbidden.iter().position(|n| n == name) {
            found(
                name,
                Violation::new(
                    field,
                    Reason::Forbidden,
                    format!(
                        "network {name:?} is forbidden for {role} machines by the site policy; \
                         remove it"
                    ),
                )
                .with_source(
                    Source::rule(self::rules::FORBIDDEN)
                        .with_setting(format!("{key}.forbidden[{k}]")),
                ),
            );
        } else if !rules.is_allowed(name) {
            let mut allowed: Vec<&str> = rules.required.iter().map(String::as_str).collect();
            allowed.extend(rules.allowed.iter().flatten().map(String::as_str));
            allowed.retain(|n| !candidates.contains(n));
            let allowed = if allowed.is_empty() {
                "none".to_string()
            } else {
                allowed.join(", ")
            };
            found(
                name,
                Violation::new(
                    field,
                    Reason::NotSupported,
                    format!(
                        "network {name:?} is not allowed for {role} machines; the extra \
                         networks they may list: {allowed}"
                    ),
                )
                .with_source(
                    Source::rule(self::rules::ALLOWED).with_setting(format!("{key}.allowed")),
                ),
            );
        }
    }

    // Without a known primary (no cluster yet, or one that cannot be resolved), a required
    // network may be the primary: checked once the machine's cluster is known and fixed.
    if !matches!(primary, Primary::Unresolved | Primary::ClusterUnknown) {
        for (k, name) in rules.required.iter().enumerate() {
            if extras.contains(name) || primary.name() == Some(name.as_str()) {
                continue;
            }
            let hint = if candidates.contains(&name.as_str()) {
                " (it is the primary network of only some zones; set failureDomain to such a zone)"
            } else {
                ""
            };
            found(
                name,
                Violation::new(
                    format!("{spec}.extraOvdcNetworks"),
                    Reason::Required,
                    format!(
                        "{role} machines need network {name:?}; add it to the extra \
                         networks{hint}"
                    ),
                )
                .with_source(
                    Source::rule(self::rules::REQUIRED)
                        .with_setting(format!("{key}.required[{k}]")),
                ),
            );
        }
    }
    findings
}

nicpolicy_plugin::export_policy!(evaluate_with, settings: Settings);

/// The backstop: the CAPVCD rules' structural part with the `capvcd` settings. The role's own
/// rules are the webhook's (a VCDMachine's role comes from its owner Machine), and a machine
/// that lists no extra networks is judged with its role's defaults, which only the webhook
/// writes: the provisioned-machine rule leaves an empty list to it when a role has defaults,
/// and policies after this one in a chain are left to the webhook (they judge the defaulted
/// list), whatever the settings, so a settings change never changes the policy objects.
fn backstop(settings: &Settings, builder: &mut nicpolicy_plugin::backstop::Builder) {
    use nicpolicy_plugin::capvcd::cel;
    let defaults =
        !settings.control_plane.defaults.is_empty() || !settings.worker.defaults.is_empty();
    cel::names(builder);
    cel::duplicates(builder);
    cel::max_nics(&settings.capvcd, builder);
    cel::inventory(builder);
    cel::provisioned(&settings.capvcd, builder, Some(defaults));
    cel::not_covered(builder);
    builder.not_covered(
        "the role's rules (required, forbidden and allowed networks, defaults): the role comes from the owner Machine",
    );
    builder.rewrites_networks();
}

nicpolicy_plugin::export_backstop!(backstop, settings: Settings);

#[cfg(test)]
mod tests {
    use super::*;
    use nicpolicy_plugin::testing::{self, violation_fields as fields};
    use nicpolicy_plugin::ObjectKind;
    use serde_json::json;

    fn settings() -> Value {
        json!({
            "controlPlane": {
                "required": ["mgmt-net"],
                "forbidden": ["ext-dmz-net"],
                "allowed": ["storage-net", "backup-net"],
                "defaults": []
            },
            "worker": {
                "required": [],
                "forbidden": [],
                "allowed": ["storage-net", "workload-net", "backup-net", "ext-dmz-net"],
                "defaults": ["storage-net", "workload-net"]
            }
        })
    }

    fn request(role: Role, extras: &[&str]) -> Request {
        let mut request = testing::worker(extras);
        if role == Role::ControlPlane {
            request
                .machine
                .labels
                .insert("cluster.x-k8s.io/control-plane".to_string(), String::new());
        }
        request.machine.role = role;
        request.settings = settings();
        request
    }

    #[test]
    fn worker_without_extras_gets_defaults() {
        let d = evaluate_request(&request(Role::Worker, &[]));
        assert!(d.allowed, "{d:?}");
        assert_eq!(
            d.extra_ovdc_networks.as_deref(),
            Some(&["storage-net".to_string(), "workload-net".to_string()][..])
        );
        let nics: Vec<&str> = d.nics.iter().map(|n| n.network.as_str()).collect();
        assert_eq!(nics, ["mgmt-net", "storage-net", "workload-net"]);
        assert_eq!(d.vapp_networks, ["mgmt-net", "storage-net", "workload-net"]);
        assert_eq!(d.warnings.len(), 1);
    }

    #[test]
    fn worker_with_extras_keeps_them() {
        let d = evaluate_request(&request(Role::Worker, &["backup-net"]));
        assert!(d.allowed, "{d:?}");
        assert_eq!(
            d.extra_ovdc_networks.as_deref(),
            Some(&["backup-net".to_string()][..])
        );
        assert!(d.warnings.is_empty());
    }

    #[test]
    fn provisioned_machine_without_extras_is_not_defaulted() {
        let mut r = request(Role::Worker, &[]);
        r.operation = Operation::Update;
        r.machine.provider_id = Some("vmware-cloud-director://urn:vcloud:vm:1".into());
        r.old_machine = Some(r.machine.clone());
        let d = evaluate_request(&r);
        assert!(d.allowed, "{d:?}");
        assert_eq!(d.nics.len(), 1);

        // A stored machine that already got the defaults is defaulted again: no change.
        let mut old = r.machine.clone();
        old.extra_ovdc_networks = vec!["storage-net".into(), "workload-net".into()];
        r.old_machine = Some(old);
        let d = evaluate_request(&r);
        assert!(d.allowed, "{d:?}");
        assert_eq!(d.nics.len(), 3);
    }

    #[test]
    fn control_plane_rules() {
        let d = evaluate_request(&request(Role::ControlPlane, &["storage-net"]));
        assert!(d.allowed, "{d:?}");

        let d = evaluate_request(&request(
            Role::ControlPlane,
            &["ext-dmz-net", "workload-net", "mgmt-net"],
        ));
        assert_eq!(
            fields(&d),
            [
                ("spec.extraOvdcNetworks[0]", Reason::Forbidden),
                ("spec.extraOvdcNetworks[1]", Reason::NotSupported),
                ("spec.extraOvdcNetworks[2]", Reason::Duplicate),
            ]
        );
        assert!(d.violations[1].message.contains("storage-net, backup-net"));
    }

    #[test]
    fn required_network_missing() {
        let mut r = request(Role::ControlPlane, &["storage-net"]);
        r.cluster.ovdc_network = "mgmt-net-prod".into();
        let d = evaluate_request(&r);
        assert_eq!(fields(&d), [("spec.extraOvdcNetworks", Reason::Required)]);
        assert!(d.violations[0].message.contains("\"mgmt-net\""));

        r.kind = ObjectKind::VcdMachineTemplate;
        let d = evaluate_request(&r);
        assert_eq!(
            fields(&d),
            [("spec.template.spec.extraOvdcNetworks", Reason::Required)]
        );

        // Unknown primary: no Required, only CAPVCD's violation.
        r.cluster.ovdc_network.clear();
        let d = evaluate_request(&r);
        assert_eq!(fields(&d), [("cluster.spec.ovdcNetwork", Reason::Required)]);
    }

    #[test]
    fn null_settings_are_plain_capvcd() {
        let mut r = request(Role::Worker, &["ext-dmz-net"]);
        r.settings = Value::Null;
        let d = evaluate_request(&r);
        assert_eq!(d, capvcd::evaluate(&r));
    }

    #[test]
    fn settings_are_checked() {
        let err = |v: Value| Settings::parse(&v).unwrap_err();
        assert!(err(json!({"workers": {}})).contains("unknown field `workers`"));
        assert!(err(json!({"worker": {"alowed": []}})).starts_with("worker: unknown field"));
        assert!(
            err(json!({"controlPlane": {"required": ["x"], "forbidden": ["x"]}}))
                .contains("both required and forbidden")
        );
        assert!(
            err(json!({"worker": {"allowed": ["x"], "forbidden": ["x"]}}))
                .contains("both allowed and forbidden")
        );
        assert!(err(
            json!({"worker": {"defaults": ["ext-dmz-net"], "forbidden": ["ext-dmz-net"]}})
        )
        .contains("worker.defaults[0]"));
        assert!(
            err(json!({"worker": {"defaults": ["backup-net"], "allowed": ["storage-net"]}}))
                .contains("not in worker.allowed")
        );
        assert!(err(json!({"worker": {"required": [" storage-net"]}}))
            .starts_with("worker.required[0]: network name"));
        assert!(err(json!({"worker": {"allowed": ["a-net", "a-net"]}}))
            .contains("already listed at worker.allowed[0]"));
        assert!(
            err(json!({"capvcd": {"maxNics": 2}, "worker": {"defaults": ["a-net", "b-net"]}}))
                .contains("above maxNics 2")
        );
        assert!(err(json!({"capvcd": {"maxNics": 11}})).starts_with("capvcd: maxNics"));
        assert!(err(json!(["worker"])).contains("not a list"));
        assert!(Settings::parse(&json!({"capvcd": null, "worker": null})).is_ok());
        assert!(err(json!({"worker": "storage-net"}))
            .contains("worker: invalid type: string \"storage-net\", expected a map"));
        assert!(Settings::parse(&settings()).is_ok());
        assert!(Settings::parse(&json!({})).is_ok());
        // Required networks are allowed without being listed in `allowed`.
        assert!(Settings::parse(&json!({"worker": {
            "required": ["storage-net"], "allowed": [], "defaults": ["storage-net"]
        }}))
        .is_ok());
    }
}
