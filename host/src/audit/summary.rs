//! Totals of an audit: objects by result, violations by reason and by rule, candidate differences,
//! and the findings grouped by cluster.

use std::collections::BTreeMap;

use serde::Serialize;

use super::findings::{Finding, Verdict};
use super::shadow::Change;
use crate::clusters::ClusterGroup;

/// Totals over a set of findings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Machines and machine templates seen.
    pub objects: usize,
    /// Clusters they belong to (machines without a known cluster not counted).
    pub clusters: usize,
    /// Objects by result (`allowed`, `denied`, ...); results no object has are left out.
    pub results: BTreeMap<Verdict, usize>,
    /// Violations by reason (`Duplicate`, `NotFound`, ...), over every denied object.
    pub reasons: BTreeMap<String, usize>,
    /// Violations by the rule that found them (`capvcd/inventory`, from each violation's
    /// source; `(not reported)` for a policy that names no rules), over every denied object.
    pub rules: BTreeMap<String, usize>,
    /// Objects by candidate difference, in shadow mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub candidate: Option<BTreeMap<Change, usize>>,
}

impl Summary {
    /// The totals of `findings`.
    pub fn of<'a>(findings: impl IntoIterator<Item = &'a Finding>) -> Summary {
        let mut summary = Summary::default();
        let mut clusters = std::collections::BTreeSet::new();
        for finding in findings {
            summary.objects += 1;
            *summary.results.entry(finding.result).or_default() += 1;
            for reason in finding.reasons() {
                *summary.reasons.entry(reason.to_string()).or_default() += 1;
            }
            for rule in finding.rules() {
                *summary.rules.entry(rule.to_string()).or_default() += 1;
            }
            if let Some(group) = &finding.cluster {
                clusters.insert(group);
            }
            if let Some(shadow) = &finding.shadow {
                *summary
                    .candidate
                    .get_or_insert_with(BTreeMap::new)
                    .entry(shadow.change)
                    .or_default() += 1;
            }
        }
        summary.clusters = clusters.len();
        summary
    }

    /// How many objects came to `verdict`.
    pub fn count(&self, verdict: Verdict) -> usize {
        self.results.get(&verdict).copied().unwrap_or(0)
    }

    /// One line: `12 machines in 3 clusters: 9 allowed, 2 denied, 1 skipped`.
    pub fn line(&self) -> String {
        let results: Vec<String> = self
            .results
            .iter()
            .map(|(verdict, n)| {
                let word = match verdict {
                    Verdict::Error => "not evaluated",
                    Verdict::Failed => "policy failed",
                    other => other.as_str(),
                };
                format!("{n} {word}")
            })
            .collect();
        let mut line = format!(
            "{} machine{} in {} cluster{}",
            self.objects,
            plural(self.objects),
            self.clusters,
            plural(self.clusters)
        );
        if !results.is_empty() {
            line.push_str(": ");
            line.push_str(&results.join(", "));
        }
        line
    }

    /// The process exit code: 1 when any object is denied, else 3 when a policy failed, else 2
    /// when an object could not be evaluated, else 0. Skipped objects do not count.
    pub fn exit_code(&self) -> u8 {
        if self.count(Verdict::Denied) > 0 {
            1
        } else if self.count(Verdict::Failed) > 0 {
            3
        } else if self.count(Verdict::Error) > 0 {
            2
        } else {
            0
        }
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// Findings grouped by cluster (clusters by namespace and name; machines without a known
/// cluster last), each group in input order.
pub fn by_cluster(findings: &[Finding]) -> Vec<(Option<&ClusterGroup>, Vec<&Finding>)> {
    let mut groups: BTreeMap<(bool, Option<&ClusterGroup>), Vec<&Finding>> = BTreeMap::new();
    for finding in findings {
        let group = finding.cluster.as_ref();
        groups
            .entry((group.is_none(), group))
            .or_default()
            .push(finding);
    }
    groups
        .into_iter()
        .map(|((_, group), findings)| (group, findings))
        .collect()
}
