//! The controller's reports: one per namespace, built from the namespace's findings, bounded in
//! size, with a fingerprint so it is written only when its results change. Two kinds hold the
//! same results ([`Format`]): OpenReports' `Report` (`openreports.io/v1alpha1`, the default,
//! what Kubewarden and Kyverno write today and Policy Reporter reads) and the Policy Working
//! Group's `PolicyReport` (`wgpolicyk8s.io/v1alpha2`, what they wrote before).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::audit::capacity::Capacity;
use crate::audit::{Finding, Verdict};

/// Name of the report in each namespace.
pub const REPORT_NAME: &str = "nicpolicy";
/// Annotation holding the digest of the results, to skip writes that change nothing.
pub const FINGERPRINT_ANNOTATION: &str = "nicpolicy.io/results-sha256";
/// Annotation saying how many results were left out to keep the report bounded.
pub const TRUNCATED_ANNOTATION: &str = "nicpolicy.io/results-left-out";
/// Label selector of the reports this controller writes.
pub const SELECTOR: &str = "app.kubernetes.io/managed-by=nicpolicy";
/// Messages longer than this are cut: a report stays far below etcd's 1.5 MiB object limit.
const MAX_MESSAGE: usize = 1024;

/// How large a report may grow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// Results per report. Failures and errors are kept first; the summary always counts
    /// every object.
    pub max_results: usize,
    /// Bytes of results (as JSON) per report: what does not fit is left out like results over
    /// `max_results`, so a report stays under 1 MiB however long its messages and properties
    /// (etcd refuses objects over 1.5 MiB).
    pub max_bytes: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            max_results: 1000,
            max_bytes: 900 << 10,
        }
    }
}

/// The kind of report the controller writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Format {
    /// `openreports.io/v1alpha1` `Report`.
    #[default]
    OpenReports,
    /// `wgpolicyk8s.io/v1alpha2` `PolicyReport`.
    PolicyReport,
}

impl Format {
    /// Both, the default first.
    pub const ALL: [Format; 2] = [Format::OpenReports, Format::PolicyReport];

    /// The name the command line and the chart use: `openreports` or `wgpolicyk8s`.
    pub fn name(self) -> &'static str {
        match self {
            Format::OpenReports => "openreports",
            Format::PolicyReport => "wgpolicyk8s",
        }
    }

    /// `group/version`.
    pub fn api_version(self) -> &'static str {
        match self {
            Format::OpenReports => "openreports.io/v1alpha1",
            Format::PolicyReport => "wgpolicyk8s.io/v1alpha2",
        }
    }

    /// The kind.
    pub fn kind(self) -> &'static str {
        match self {
            Format::OpenReports => "Report",
            Format::PolicyReport => "PolicyReport",
        }
    }

    /// The CRD that serves the kind.
    pub fn crd(self) -> &'static str {
        match self {
            Format::OpenReports => "reports.openreports.io",
            Format::PolicyReport => "policyreports.wgpolicyk8s.io",
        }
    }

    /// The other kind: the one whose reports a switch leaves behind.
    pub fn other(self) -> Format {
        match self {
            Format::OpenReports => Format::PolicyReport,
            Format::PolicyReport => Format::OpenReports,
        }
    }

    /// The resource.
    pub fn resource(self) -> ApiResource {
        let (group, version) = self
            .api_version()
            .split_once('/')
            .unwrap_or((self.api_version(), ""));
        let plural = match self {
            Format::OpenReports => "reports",
            Format::PolicyReport => "policyreports",
        };
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group, version, self.kind()),
            plural,
        )
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.kind(), self.api_version())
    }
}

/// A report format name that is neither `openreports` nor `wgpolicyk8s`.
#[derive(Debug, thiserror::Error)]
#[error("unknown report format `{0}`: use openreports (openreports.io/v1alpha1 Reports) or wgpolicyk8s (wgpolicyk8s.io/v1alpha2 PolicyReports)")]
pub struct UnknownFormat(String);

impl FromStr for Format {
    type Err = UnknownFormat;

    fn from_str(name: &str) -> Result<Format, UnknownFormat> {
        Format::ALL
            .into_iter()
            .find(|f| f.name() == name)
            .ok_or_else(|| UnknownFormat(name.to_string()))
    }
}

/// A built report: the object to apply and the digest of its content.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The report object (server-side apply body).
    pub object: Value,
    /// sha256 of the summary and results, as the fingerprint annotation holds it.
    pub fingerprint: String,
    /// Results left out by the bound.
    pub left_out: usize,
}

/// `pass`, `fail`, `skip` or `error`, as both kinds spell results.
fn result_word(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Allowed => "pass",
        Verdict::Denied => "fail",
        Verdict::Skipped => "skip",
        Verdict::Error | Verdict::Failed => "error",
    }
}

/// `text` cut to [`MAX_MESSAGE`] bytes (on a character boundary), `...` marking a cut.
pub(super) fn cut(text: &str) -> String {
    if text.len() <= MAX_MESSAGE {
        return text.to_string();
    }
    let mut end = MAX_MESSAGE;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// The report results of one finding: one per violation of a denied object (with its field
/// path and reason), one otherwise.
fn results_of(finding: &Finding, policy: &str) -> Vec<Value> {
    let resource = {
        let mut r = json!({
            "apiVersion": finding.object.api_version(),
            "kind": finding.object.kind,
            "namespace": finding.object.namespace,
            "name": finding.object.name,
        });
        if let Some(uid) = &finding.object.uid {
            r["uid"] = uid.clone().into();
        }
        r
    };
    let mut properties = BTreeMap::new();
    if let Some(cluster) = &finding.cluster {
        properties.insert(
            "cluster",
            cut(&format!("{}/{}", cluster.kind, cluster.name)),
        );
    }
    if let Some(why) = finding
        .message
        .as_ref()
        .filter(|_| finding.request.as_ref().is_some_and(|r| r.cluster_unknown))
    {
        properties.insert("clusterUnknown", cut(why));
    }
    if let Some(shadow) = &finding.shadow {
        properties.insert("candidate", shadow.change.as_str().to_string());
        if !shadow.details.is_empty() {
            properties.insert("candidateChanges", cut(&shadow.details.join("; ")));
        }
    }
    // `word`: pass, fail, warn, skip or error; failures are of high severity, warnings medium.
    let result = |word: &str, rule: &str, message: String, extra: &[(&'static str, String)]| {
        let mut properties = properties.clone();
        properties.extend(extra.iter().map(|(k, v)| (*k, cut(v))));
        let mut r = json!({
            "source": "nicpolicy",
            "policy": policy,
            "rule": rule,
            "category": "Networks",
            "result": word,
            "scored": true,
            "message": cut(&message),
            "resources": [resource.clone()],
        });
        if !properties.is_empty() {
            r["properties"] = json!(properties);
        }
        match word {
            "fail" => r["severity"] = "high".into(),
            "warn" => r["severity"] = "medium".into(),
            _ => {}
        }
        r
    };
    match (&finding.decision, finding.result) {
        (Some(decision), Verdict::Denied) => decision
            .violations
            .iter()
            .map(|v| {
                // The rule that found it, as its source names it; the reason otherwise (a
                // policy that names no rules).
                let source = v.source.as_ref();
                let rule = source
                    .and_then(|s| s.rule.as_deref())
                    .unwrap_or(v.reason.as_str());
                let mut extra = vec![
                    ("field", v.field.clone()),
                    ("reason", v.reason.as_str().to_string()),
                ];
                if let Some(setting) = source.and_then(|s| s.setting.clone()) {
                    extra.push(("setting", setting));
                }
                if let Some(entry) = source.and_then(|s| s.policy.clone()) {
                    extra.push(("chainPolicy", entry));
                }
                result("fail", rule, format!("{}: {}", v.field, v.message), &extra)
            })
            .collect(),
        (Some(decision), _) => {
            let plan: Vec<&str> = decision.nics.iter().map(|n| n.network.as_str()).collect();
            let mut results = vec![result(
                result_word(finding.result),
                "nic-plan",
                format!("NIC plan: {}", plan.join(", ")),
                &[],
            )];
            // Admitted, but the VM will not be built as planned: a warning each.
            results.extend(finding.unapplied.iter().map(|item| {
                result(
                    "warn",
                    "plan-not-applied",
                    item.message(),
                    &[
                        ("field", item.object_field.clone()),
                        ("planField", item.field.as_str().to_string()),
                    ],
                )
            }));
            results
        }
        (None, verdict) => vec![result(
            result_word(verdict),
            if verdict == Verdict::Skipped {
                "not-checked"
            } else {
                "evaluation"
            },
            finding.message.clone().unwrap_or_default(),
            &[],
        )],
    }
}

/// A `warn` result on each MachineDeployment or KubeadmControlPlane of `capacity` whose rollout
/// alone needs more of a static pool than is free (rule `static-pool`): `storage-net: 3
/// addresses free, a rollout of prod-eu1/prod-eu1-md-0 needs 5 (...)`.
pub fn pool_results(capacity: &Capacity, policy: &str) -> Vec<Value> {
    let mut results = Vec::new();
    for network in &capacity.networks {
        for need in network.needs.iter().filter(|n| n.addresses > network.free) {
            let api_version = if need.kind == "KubeadmControlPlane" {
                "controlplane.cluster.x-k8s.io/v1beta1"
            } else {
                "cluster.x-k8s.io/v1beta1"
            };
            let mut properties = BTreeMap::from([
                ("network", network.network.clone()),
                ("free", network.free.to_string()),
                ("needed", need.addresses.to_string()),
            ]);
            if let Some(vdc) = &network.vdc {
                properties.insert("ovdc", vdc.clone());
            }
            results.push(json!({
                "source": "nicpolicy",
                "policy": policy,
                "rule": "static-pool",
                "category": "Networks",
                "result": "warn",
                "severity": "medium",
                "scored": true,
                "message": cut(&network.sentence(need)),
                "resources": [{
                    "apiVersion": api_version,
                    "kind": need.kind,
                    "namespace": need.namespace,
                    "name": need.name,
                }],
                "properties": properties,
            }));
        }
    }
    results
}

/// Order of results kept under the bound: what needs action first.
fn rank(result: &Value) -> u8 {
    match result.get("result").and_then(Value::as_str) {
        Some("fail") => 0,
        Some("error") => 1,
        Some("warn") => 2,
        Some("skip") => 3,
        _ => 4,
    }
}

/// The report of `namespace` for `findings` (the namespace's machines), of kind `format`;
/// `policy` names the chain that decides each kind. Both kinds hold the same summary and
/// results, so they have the same fingerprint.
pub fn build(
    format: Format,
    namespace: &str,
    policy: &dyn Fn(&str) -> String,
    findings: &[Finding],
    bounds: Bounds,
) -> Report {
    build_with(format, namespace, policy, findings, Vec::new(), bounds)
}

/// [`build`], with `extra` results on other objects ([`pool_results`]), each counted in the
/// summary by its result.
pub fn build_with(
    format: Format,
    namespace: &str,
    policy: &dyn Fn(&str) -> String,
    findings: &[Finding],
    extra: Vec<Value>,
    bounds: Bounds,
) -> Report {
    let mut summary: BTreeMap<&str, usize> = ["pass", "fail", "warn", "error", "skip"]
        .map(|k| (k, 0))
        .into();
    let mut results: Vec<Value> = Vec::new();
    for finding in findings {
        *summary.entry(result_word(finding.result)).or_default() += 1;
        results.extend(results_of(finding, &policy(&finding.object.kind)));
    }
    for result in extra {
        if let Some(word) = ["pass", "fail", "warn", "error", "skip"]
            .into_iter()
            .find(|w| result["result"] == *w)
        {
            *summary.entry(word).or_default() += 1;
        }
        results.push(result);
    }
    // Stable order (so equal results give equal digests), failures first.
    results.sort_by(|a, b| {
        rank(a)
            .cmp(&rank(b))
            .then_with(|| {
                a["resources"][0]["name"]
                    .as_str()
                    .cmp(&b["resources"][0]["name"].as_str())
            })
            .then_with(|| {
                a["resources"][0]["kind"]
                    .as_str()
                    .cmp(&b["resources"][0]["kind"].as_str())
            })
            .then_with(|| a["message"].as_str().cmp(&b["message"].as_str()))
    });
    // Whole results, in rank order, while they fit both bounds.
    let mut bytes = 0;
    let kept = results
        .iter()
        .take(bounds.max_results)
        .take_while(|r| {
            bytes += r.to_string().len() + 1;
            bytes <= bounds.max_bytes
        })
        .count();
    let left_out = results.len() - kept;
    results.truncate(kept);
    let content = json!({"summary": summary, "results": results});
    let fingerprint = format!("{:x}", Sha256::digest(content.to_string().as_bytes()));
    let mut annotations = BTreeMap::from([(FINGERPRINT_ANNOTATION, fingerprint.clone())]);
    if left_out > 0 {
        annotations.insert(TRUNCATED_ANNOTATION, left_out.to_string());
    }
    let mut object = json!({
        "apiVersion": format.api_version(),
        "kind": format.kind(),
        "metadata": {
            "name": REPORT_NAME,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "nicpolicy"},
            "annotations": annotations,
        },
        "summary": content["summary"],
        "results": content["results"],
    });
    if format == Format::OpenReports {
        // One engine wrote every result: OpenReports says so once, on the report.
        object["source"] = "nicpolicy".into();
    }
    Report {
        object,
        fingerprint,
        left_out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nicpolicy_plugin::{Decision, Reason, Violation};

    fn finding(name: &str, violations: usize) -> Finding {
        let decision = if violations == 0 {
            Decision {
                allowed: true,
                ..Decision::default()
            }
        } else {
            Decision::from_violations(
                (0..violations)
                    .map(|i| {
                        let v = Violation::new(
                            format!("spec.extraOvdcNetworks[{i}]"),
                            Reason::NotFound,
                            "x".repeat(5000),
                        );
                        // The first names its rule and setting; the others come from a policy
                        // that names none.
                        if i == 0 {
                            let mut source = nicpolicy_plugin::Source::rule("capvcd/inventory")
                                .with_setting("capvcd.networks");
                            source.policy = Some("site".into());
                            v.with_source(source)
                        } else {
                            v
                        }
                    })
                    .collect(),
            )
        };
        Finding::decided_for_tests(name, decision)
    }

    #[test]
    fn reports_are_bounded_and_keep_failures_first() {
        let findings: Vec<Finding> = (0..3000)
            .map(|i| {
                finding(
                    &format!("prod-eu1-md-0-{i:05}"),
                    usize::from(i % 10 == 0) * 2,
                )
            })
            .collect();
        // The count bound alone (the byte bound has a test of its own).
        let count_only = Bounds {
            max_bytes: usize::MAX,
            ..Bounds::default()
        };
        let report = build(
            Format::OpenReports,
            "prod-eu1",
            &|_| "nicpolicy-capvcd".into(),
            &findings,
            count_only,
        );
        let results = report.object["results"].as_array().unwrap();
        assert_eq!(results.len(), 1000);
        // 300 denied machines with 2 violations each come first.
        assert!(results[..600].iter().all(|r| r["result"] == "fail"));
        assert_eq!(report.object["summary"]["fail"], 300);
        assert_eq!(report.object["summary"]["pass"], 2700);
        assert_eq!(report.left_out, 3300 - 1000);
        assert_eq!(
            report.object["metadata"]["annotations"][TRUNCATED_ANNOTATION],
            "2300"
        );
        // Long messages are cut: 1000 results of 5000-character messages stay near 1 MB (uncut
        // they would be over 5 MB); the byte bound, tested on its own, holds real reports to
        // 900 KiB.
        let size = report.object.to_string().len();
        assert!(size < 1_100_000, "{size} bytes");
        assert!(results[0]["message"].as_str().unwrap().len() <= MAX_MESSAGE + 40);
        assert_eq!(
            results[0]["properties"]["field"],
            "spec.extraOvdcNetworks[0]"
        );
        assert_eq!(results[0]["rule"], "capvcd/inventory");
        assert_eq!(results[0]["properties"]["reason"], "NotFound");
        assert_eq!(results[0]["properties"]["setting"], "capvcd.networks");
        assert_eq!(results[0]["properties"]["chainPolicy"], "site");
        assert_eq!(results[1]["rule"], "NotFound", "no rule named: the reason");
    }

    #[test]
    fn a_plan_field_capvcd_will_not_apply_is_a_warn_result() {
        let mut admitted = finding("prod-eu1-md-0-a", 0);
        admitted.unapplied = vec![nicpolicy_plugin::provisioner::Unapplied {
            provisioner: "CAPVCD".into(),
            object_field: "spec.extraOvdcNetworks[0]".into(),
            index: 1,
            network: "storage-net".into(),
            field: nicpolicy_plugin::provisioner::PlanField::IpAllocationMode,
            planned: "DHCP".into(),
            built: "POOL".into(),
        }];
        let report = build(
            Format::OpenReports,
            "prod-eu1",
            &|_| "capvcd".into(),
            &[admitted],
            Bounds::default(),
        );
        let results = report.object["results"].as_array().expect("results");
        assert_eq!(results.len(), 2, "{results:?}");
        let warn = results
            .iter()
            .find(|r| r["rule"] == "plan-not-applied")
            .expect("a result for the field");
        assert_eq!(warn["result"], "warn");
        assert_eq!(warn["severity"], "medium");
        assert_eq!(warn["properties"]["field"], "spec.extraOvdcNetworks[0]");
        assert_eq!(warn["properties"]["planField"], "ipAllocationMode");
        assert_eq!(
            warn["message"],
            "NIC 1 (storage-net): ipAllocationMode DHCP is not applied: CAPVCD builds POOL"
        );
        // The object still counts once, as passing.
        assert_eq!(report.object["summary"]["pass"], 1);
    }

    #[test]
    fn a_report_of_a_thousand_worst_case_results_stays_under_a_mebibyte() {
        // Every result as long as it can be: a message at the cut, long names, and every
        // property the controller sets at its longest.
        let long = "x".repeat(4096);
        let findings: Vec<Finding> = (0..1000)
            .map(|i| {
                let mut f = finding(&format!("prod-eu1-md-0-{i:04}-{}", "n".repeat(200)), 1);
                f.cluster = Some(crate::clusters::ClusterGroup {
                    kind: "Cluster",
                    namespace: long.clone(),
                    name: long.clone(),
                });
                f.message = Some(long.clone());
                let mut unknown = nicpolicy_plugin::testing::worker(&[]);
                unknown.cluster_unknown = true;
                f.request = Some(unknown);
                f.shadow = Some(crate::audit::shadow::Shadow {
                    change: crate::audit::shadow::Change::NicPlan,
                    details: vec![long.clone(); 4],
                    decision: None,
                });
                f
            })
            .collect();
        let report = build(
            Format::OpenReports,
            "prod-eu1",
            &|_| "capvcd".into(),
            &findings,
            Bounds::default(),
        );
        let size = report.object.to_string().len();
        assert!(size < 1 << 20, "{size} bytes");
        assert!(report.left_out > 0, "nothing left out at {size} bytes");
        assert_eq!(
            report.object["metadata"]["annotations"][TRUNCATED_ANNOTATION],
            report.left_out.to_string()
        );
        // Failures first, and the summary counts every object.
        assert_eq!(report.object["summary"]["fail"], 1000);
        // The count bound alone would not have kept it under etcd's limit.
        let count_only = Bounds {
            max_bytes: usize::MAX,
            ..Bounds::default()
        };
        let unbounded = build(
            Format::PolicyReport,
            "prod-eu1",
            &|_| "capvcd".into(),
            &findings,
            count_only,
        );
        assert!(
            unbounded.object.to_string().len() > 3 << 19,
            "1.5 MiB or more"
        );
    }

    #[test]
    fn the_fingerprint_changes_with_results_only() {
        let a = vec![finding("prod-eu1-md-0-a", 0), finding("prod-eu1-md-0-b", 1)];
        let b = vec![finding("prod-eu1-md-0-b", 1), finding("prod-eu1-md-0-a", 0)];
        let first = build(
            Format::OpenReports,
            "prod-eu1",
            &|_| "p".into(),
            &a,
            Bounds::default(),
        );
        // Input order does not matter.
        assert_eq!(
            first.fingerprint,
            build(
                Format::OpenReports,
                "prod-eu1",
                &|_| "p".into(),
                &b,
                Bounds::default()
            )
            .fingerprint
        );
        let fixed = vec![finding("prod-eu1-md-0-a", 0), finding("prod-eu1-md-0-b", 0)];
        assert_ne!(
            first.fingerprint,
            build(
                Format::OpenReports,
                "prod-eu1",
                &|_| "p".into(),
                &fixed,
                Bounds::default()
            )
            .fingerprint
        );
    }

    #[test]
    fn both_kinds_hold_the_same_results_and_fingerprint() {
        let findings = vec![finding("prod-eu1-md-0-a", 0), finding("prod-eu1-md-0-b", 2)];
        let open = build(
            Format::OpenReports,
            "prod-eu1",
            &|_| "capvcd".into(),
            &findings,
            Bounds::default(),
        );
        let wg = build(
            Format::PolicyReport,
            "prod-eu1",
            &|_| "capvcd".into(),
            &findings,
            Bounds::default(),
        );
        assert_eq!(open.object["apiVersion"], "openreports.io/v1alpha1");
        assert_eq!(open.object["kind"], "Report");
        assert_eq!(open.object["source"], "nicpolicy");
        assert_eq!(wg.object["apiVersion"], "wgpolicyk8s.io/v1alpha2");
        assert_eq!(wg.object["kind"], "PolicyReport");
        assert!(
            wg.object.get("source").is_none(),
            "not a PolicyReport field"
        );
        assert_eq!(open.object["results"], wg.object["results"]);
        assert_eq!(open.object["summary"], wg.object["summary"]);
        assert_eq!(open.fingerprint, wg.fingerprint);
        // Every result names its policy: OpenReports requires it.
        for result in open.object["results"].as_array().expect("results") {
            assert_eq!(result["policy"], "capvcd");
        }
    }

    #[test]
    fn formats_are_named_as_the_chart_names_them() {
        assert_eq!(
            "openreports".parse::<Format>().ok(),
            Some(Format::OpenReports)
        );
        assert_eq!(
            "wgpolicyk8s".parse::<Format>().ok(),
            Some(Format::PolicyReport)
        );
        let err = "policyreport".parse::<Format>().expect_err("unknown");
        assert!(err.to_string().contains("use openreports"), "{err}");
        assert_eq!(Format::default(), Format::OpenReports);
        assert_eq!(Format::OpenReports.other(), Format::PolicyReport);
        let resource = Format::OpenReports.resource();
        assert_eq!(
            (
                resource.group.as_str(),
                resource.version.as_str(),
                resource.plural.as_str()
            ),
            ("openreports.io", "v1alpha1", "reports")
        );
        assert_eq!(Format::PolicyReport.resource().plural, "policyreports");
    }
}
