//! Case files: input manifests and settings plus the expected outcome, run against a policy.
//!
//! The format is documented in `docs/testing.md`. A case names its manifests by path (relative
//! to the case file) or inlines them, and states what the decision must contain; fields it
//! leaves out are not checked. [`suite`] runs case files against a chain, [`junit`] writes the
//! report CI systems read.

pub mod junit;
pub mod suite;

use std::path::{Path, PathBuf};

use nicpolicy_plugin::{Decision, Reason, Request};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::{EvalError, LoadError};
use crate::policy::{Evaluation, Policy};
use nicpolicy_inputs::manifest::{ManifestError, ManifestFile};
use nicpolicy_inputs::request::build_request;

pub use suite::{run, CaseReport, Report};

/// Why a case file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    /// The case file itself, or a manifest it names, is not readable or valid.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// A directory could not be listed.
    #[error("{}: cannot list: {error}", path.display())]
    List {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },
}

/// A manifest named by path or given inline.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
enum Source {
    Path(String),
    Inline(Value),
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CaseFile {
    description: String,
    #[serde(default)]
    cluster: Option<Source>,
    machine: Source,
    #[serde(default)]
    machine_name: Option<String>,
    #[serde(default)]
    old: Option<Source>,
    #[serde(default)]
    inventory: Option<Source>,
    #[serde(default)]
    settings: Option<Value>,
    #[serde(default)]
    max_input_bytes: Option<usize>,
    expect: Expect,
}

/// What a case expects. Absent fields are not checked.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Expect {
    /// Whether the machine is admitted.
    #[serde(default)]
    pub allowed: Option<bool>,
    /// The NICs: same count, and each listed field equal (a map, such as `source`, by the keys
    /// it lists).
    #[serde(default)]
    pub nics: Option<Vec<Map<String, Value>>>,
    /// The exact set of violations (field and reason equal, message contains the text).
    #[serde(default)]
    pub violations: Option<Vec<ExpectedViolation>>,
    /// Warnings: same count, each containing the text at the same position.
    #[serde(default)]
    pub warnings: Option<Vec<String>>,
    /// The list written back to `extraOvdcNetworks`.
    #[serde(default)]
    pub extra_ovdc_networks: Option<Vec<String>>,
    /// The vApp networks.
    #[serde(default)]
    pub vapp_networks: Option<Vec<String>>,
    /// The policy refuses the case's settings; its reason contains this text.
    #[serde(default)]
    pub settings_rejected: Option<String>,
    /// The evaluation fails with this kind of error (`timeout`, `memory`, `trap`, ...).
    #[serde(default)]
    pub error: Option<String>,
}

/// One expected violation.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedViolation {
    /// Field path, exactly.
    pub field: String,
    /// Reason, exactly.
    pub reason: Reason,
    /// Text the message contains.
    #[serde(default)]
    pub message: Option<String>,
    /// The rule its source names, exactly.
    #[serde(default)]
    pub rule: Option<String>,
    /// The setting its source names, exactly.
    #[serde(default)]
    pub setting: Option<String>,
}

impl ExpectedViolation {
    /// Whether `v` is this violation.
    fn matches(&self, v: &nicpolicy_plugin::Violation) -> bool {
        let source = v.source.as_ref();
        v.field == self.field
            && v.reason == self.reason
            && self
                .message
                .as_ref()
                .is_none_or(|m| v.message.contains(m.as_str()))
            && self
                .rule
                .as_ref()
                .is_none_or(|r| source.and_then(|s| s.rule.as_ref()) == Some(r))
            && self
                .setting
                .as_ref()
                .is_none_or(|r| source.and_then(|s| s.setting.as_ref()) == Some(r))
    }

    fn describe(&self) -> String {
        let mut text = format!("{:?} at {}", self.reason, self.field);
        if let Some(m) = &self.message {
            text.push_str(&format!(" containing {m:?}"));
        }
        if let Some(r) = &self.rule {
            text.push_str(&format!(" from rule {r}"));
        }
        if let Some(setting) = &self.setting {
            text.push_str(&format!(" with setting {setting}"));
        }
        text
    }
}

/// Whether `got` holds `want`: a map by the keys `want` lists, anything else equal.
fn holds(want: &Value, got: &Value) -> bool {
    match (want, got) {
        (Value::Object(want), Value::Object(got)) => want
            .iter()
            .all(|(key, value)| holds(value, got.get(key).unwrap_or(&Value::Null))),
        _ => want == got,
    }
}

/// A loaded case.
#[derive(Clone, Debug)]
pub struct Case {
    /// The case file.
    pub path: PathBuf,
    /// What the case proves.
    pub description: String,
    /// The request built from its manifests.
    pub request: Request,
    /// Settings for the policy (JSON `null` for the policy's defaults).
    pub settings: Value,
    /// The policies' input cap for this case, in place of their own (to test an oversized
    /// request without writing a megabyte of YAML).
    pub max_input_bytes: Option<usize>,
    /// The expected outcome.
    pub expect: Expect,
    /// The Kubernetes objects the request was built from, for hosts that take whole objects
    /// (an AdmissionReview, a Kubewarden ValidationRequest).
    pub objects: CaseObjects,
}

/// The objects of a case as its files hold them.
#[derive(Clone, Debug)]
pub struct CaseObjects {
    /// The machine (VCDMachine or VCDMachineTemplate) the case checks.
    pub machine: Value,
    /// The stored version, for an UPDATE.
    pub old: Option<Value>,
    /// Every object of the cluster file (Cluster and VCDCluster objects among them); empty when
    /// the case has no cluster (its machine's cluster is not known yet).
    pub cluster: Vec<Value>,
}

/// The outcome of running one case.
#[derive(Debug)]
pub enum Outcome {
    /// Everything expected was found.
    Passed,
    /// Mismatches, one line each, and the actual outcome as YAML-ish text.
    Failed {
        /// What differs.
        mismatches: Vec<String>,
        /// The actual decision or error.
        actual: String,
    },
}

impl Case {
    /// Reads a case file and the manifests it names.
    pub fn load(path: &Path) -> Result<Case, CaseError> {
        let file = ManifestFile::read(path)?;
        let object = match file.objects.as_slice() {
            [one] => one.clone(),
            _ => {
                return Err(ManifestError::Field {
                    path: path.to_path_buf(),
                    field: String::new(),
                    message: "a case file holds exactly one document".to_string(),
                }
                .into())
            }
        };
        let case: CaseFile = serde_path_to_error::deserialize(&object.value).map_err(|err| {
            ManifestError::Field {
                path: path.to_path_buf(),
                field: err.path().to_string(),
                message: err.inner().to_string(),
            }
        })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let source = |source: &Source, name: &str| -> Result<ManifestFile, ManifestError> {
            match source {
                Source::Path(relative) => ManifestFile::read(&dir.join(relative)),
                Source::Inline(value) => ManifestFile::from_documents(
                    &PathBuf::from(format!("{}#{name}", path.display())),
                    vec![value.clone()],
                ),
            }
        };
        let machine = source(&case.machine, "machine")?;
        let cluster = case
            .cluster
            .as_ref()
            .map(|s| source(s, "cluster"))
            .transpose()?;
        let old = case.old.as_ref().map(|s| source(s, "old")).transpose()?;
        let inventory = case
            .inventory
            .as_ref()
            .map(|s| source(s, "inventory").and_then(|f| f.inventory()))
            .transpose()?;
        let request = build_request(
            &machine,
            case.machine_name.as_deref(),
            cluster.as_ref(),
            old.as_ref(),
            inventory,
        )?;
        let machine_name = case.machine_name.as_deref();
        let objects = CaseObjects {
            machine: machine.find_machine(machine_name)?.value.clone(),
            old: old
                .as_ref()
                .map(|file| file.find_machine(machine_name).map(|o| o.value.clone()))
                .transpose()?,
            cluster: cluster
                .iter()
                .flat_map(|file| file.objects.iter().map(|o| o.value.clone()))
                .collect(),
        };
        Ok(Case {
            path: path.to_path_buf(),
            description: case.description,
            request,
            settings: case.settings.unwrap_or(Value::Null),
            max_input_bytes: case.max_input_bytes,
            expect: case.expect,
            objects,
        })
    }

    /// Short name: the file name without extension.
    pub fn name(&self) -> String {
        self.path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// Runs the case against `policy` (with the case's settings) and compares.
    pub fn run(&self, policy: &Policy) -> Outcome {
        let policy = match policy.with_settings(self.settings.clone()) {
            Ok(policy) => policy,
            Err(LoadError::Settings(reason)) => {
                return self.check_settings_rejection(Some(&reason));
            }
            Err(err) => {
                return Outcome::Failed {
                    mismatches: vec![format!("the policy failed on the settings: {err}")],
                    actual: err.to_string(),
                }
            }
        };
        if self.expect.settings_rejected.is_some() {
            return self.check_settings_rejection(None);
        }
        let policy = match self.max_input_bytes {
            Some(bytes) => policy.with_max_input_bytes(bytes),
            None => policy,
        };
        self.check(&crate::lifecycle::judge(&self.request, |request| {
            policy.evaluate(request)
        }))
    }

    fn check_settings_rejection(&self, reason: Option<&str>) -> Outcome {
        let mismatch = match (&self.expect.settings_rejected, reason) {
            (Some(want), Some(reason)) if reason.contains(want.as_str()) => return Outcome::Passed,
            (Some(want), Some(reason)) => {
                format!("settings were rejected, but the reason does not contain {want:?}")
                    + &format!(": {reason}")
            }
            (Some(want), None) => {
                format!("expected the settings to be rejected ({want:?}), but they were accepted")
            }
            (None, Some(reason)) => format!("the policy rejected the settings: {reason}"),
            (None, None) => return Outcome::Passed,
        };
        Outcome::Failed {
            mismatches: vec![mismatch],
            actual: reason.unwrap_or("settings accepted").to_string(),
        }
    }

    /// Compares an evaluation result with the expectation.
    pub fn check(&self, result: &Result<Evaluation, EvalError>) -> Outcome {
        let expect = &self.expect;
        let decision = match (result, &expect.error) {
            (Err(err), Some(kind)) if err.kind() == kind => return Outcome::Passed,
            (Err(err), want) => {
                let wanted = match want {
                    Some(kind) => format!("expected a {kind} error"),
                    None => "expected a decision".to_string(),
                };
                return Outcome::Failed {
                    mismatches: vec![format!(
                        "{wanted}, but the evaluation failed ({})",
                        err.kind()
                    )],
                    actual: err.to_string(),
                };
            }
            (Ok(evaluation), Some(kind)) => {
                return Outcome::Failed {
                    mismatches: vec![format!("expected a {kind} error, but the policy decided")],
                    actual: render(&evaluation.decision),
                }
            }
            (Ok(evaluation), None) => &evaluation.decision,
        };
        let mismatches = compare(expect, decision);
        if mismatches.is_empty() {
            Outcome::Passed
        } else {
            Outcome::Failed {
                mismatches,
                actual: render(decision),
            }
        }
    }
}

fn render(decision: &Decision) -> String {
    serde_yaml_ng::to_string(decision).unwrap_or_else(|err| format!("(cannot render: {err})"))
}

/// Every way `decision` differs from `expect`.
pub fn compare(expect: &Expect, decision: &Decision) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(allowed) = expect.allowed {
        if allowed != decision.allowed {
            out.push(format!(
                "allowed: expected {allowed}, got {}",
                decision.allowed
            ));
        }
    }
    if let Some(nics) = &expect.nics {
        if nics.len() != decision.nics.len() {
            out.push(format!(
                "nics: expected {} NICs, got {}",
                nics.len(),
                decision.nics.len()
            ));
        }
        for (i, (want, got)) in nics.iter().zip(&decision.nics).enumerate() {
            let got = serde_json::to_value(got).unwrap_or(Value::Null);
            for (key, value) in want {
                let actual = got.get(key).unwrap_or(&Value::Null);
                if !holds(value, actual) {
                    out.push(format!("nics[{i}].{key}: expected {value}, got {actual}"));
                }
            }
        }
    }
    if let Some(violations) = &expect.violations {
        let mut unmatched: Vec<&nicpolicy_plugin::Violation> = decision.violations.iter().collect();
        for want in violations {
            let found = unmatched.iter().position(|v| want.matches(v));
            match found {
                Some(i) => {
                    unmatched.remove(i);
                }
                None => out.push(format!("violations: missing {}", want.describe())),
            }
        }
        for extra in unmatched {
            out.push(format!(
                "violations: unexpected {:?} at {}: {}",
                extra.reason, extra.field, extra.message
            ));
        }
    }
    if let Some(warnings) = &expect.warnings {
        if warnings.len() != decision.warnings.len() {
            out.push(format!(
                "warnings: expected {}, got {}",
                warnings.len(),
                decision.warnings.len()
            ));
        }
        for (i, (want, got)) in warnings.iter().zip(&decision.warnings).enumerate() {
            if !got.contains(want.as_str()) {
                out.push(format!(
                    "warnings[{i}]: expected to contain {want:?}, got {got:?}"
                ));
            }
        }
    }
    if let Some(extras) = &expect.extra_ovdc_networks {
        if decision.extra_ovdc_networks.as_ref() != Some(extras) {
            out.push(format!(
                "extraOvdcNetworks: expected {extras:?}, got {:?}",
                decision.extra_ovdc_networks
            ));
        }
    }
    if let Some(vapp) = &expect.vapp_networks {
        if *vapp != decision.vapp_networks {
            out.push(format!(
                "vappNetworks: expected {vapp:?}, got {:?}",
                decision.vapp_networks
            ));
        }
    }
    out
}

/// Case files under `paths`: files as given, directories searched for `.yaml`, `.yml` and
/// `.json` files (recursively), in name order.
pub fn discover(paths: &[PathBuf]) -> Result<Vec<PathBuf>, CaseError> {
    let mut found = Vec::new();
    for path in paths {
        if path.is_dir() {
            walk(path, &mut found)?;
        } else {
            found.push(path.clone());
        }
    }
    Ok(found)
}

fn walk(dir: &Path, found: &mut Vec<PathBuf>) -> Result<(), CaseError> {
    let list = |error| CaseError::List {
        path: dir.to_path_buf(),
        error,
    };
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(list)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(list)?;
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            walk(&entry, found)?;
        } else if entry
            .extension()
            .is_some_and(|ext| ext == "yaml" || ext == "yml" || ext == "json")
        {
            found.push(entry);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use nicpolicy_plugin::{Nic, Reason, Source, Violation};
    use serde_json::json;

    use super::*;

    #[test]
    fn sources_are_compared_by_the_keys_a_case_lists() {
        let mut nic = Nic::capvcd(0, "mgmt-net");
        nic.source = Some(Box::new(
            Source::rule("capvcd/plan").with_setting("networks.mgmt-net"),
        ));
        let violation = Violation::new("spec.extraOvdcNetworks", Reason::TooMany, "6 NICs")
            .with_source(Source::rule("capvcd/max-nics").with_setting("maxNics"));
        let decision = Decision {
            nics: vec![nic],
            ..Decision::from_violations(vec![violation])
        };
        let expect = |nics: Value, violations: Value| -> Expect {
            serde_json::from_value(json!({"nics": nics, "violations": violations}))
                .expect("an expectation")
        };
        let right = expect(
            json!([{"network": "mgmt-net", "source": {"rule": "capvcd/plan"}}]),
            json!([{"field": "spec.extraOvdcNetworks", "reason": "TooMany",
                    "rule": "capvcd/max-nics", "setting": "maxNics"}]),
        );
        assert_eq!(compare(&right, &decision), Vec::<String>::new());
        let wrong = expect(
            json!([{"source": {"rule": "role-based/defaults"}}]),
            json!([{"field": "spec.extraOvdcNetworks", "reason": "TooMany",
                    "rule": "capvcd/max-nics", "setting": "capvcd.maxNics"}]),
        );
        assert_eq!(
            compare(&wrong, &decision),
            [
                r#"nics[0].source: expected {"rule":"role-based/defaults"}, got {"rule":"capvcd/plan","setting":"networks.mgmt-net"}"#,
                "violations: missing TooMany at spec.extraOvdcNetworks from rule capvcd/max-nics \
                 with setting capvcd.maxNics",
                "violations: unexpected TooMany at spec.extraOvdcNetworks: 6 NICs",
            ]
        );
    }
}
