//! The Rust half of the playground page (`nicpolicy playground`): turns the manifests a user
//! pastes into policy requests with the host's own mapping, compiled to WebAssembly through
//! wasm-bindgen. The page (`www/`) evaluates the requests with the built-in policies' JS builds
//! and draws the decisions.
//!
//! The same code as the host: the manifest files are read, and each machine's cluster found, by
//! the `nicpolicy-inputs` crate the `nicpolicy` binary uses (YAML or JSON text, several
//! documents, `kind: List`, errors with line, column and field path), and a chain's decisions
//! are combined by `nicpolicy_plugin::combine`. The page and `nicpolicy eval` read the same
//! objects, report the same errors, build the same requests and combine alike. The host crate
//! itself cannot be a dependency (it links Wasmtime, which does not build for wasm32).
//!
//! From JavaScript (`wasm-bindgen --target web`), every function takes and returns JSON text:
//!
//! ```js
//! import init, { readManifests } from "./pkg/nicpolicy_playground.js";
//! await init();
//! const { machines, errors } = JSON.parse(readManifests(clusterYaml, machinesYaml, inventoryYaml));
//! ```

pub mod requests;

use wasm_bindgen::prelude::wasm_bindgen;

/// Reads the cluster, machines and inventory inputs (YAML or JSON text; the cluster input may be
/// a whole `clusterctl generate cluster` output) into one request per machine; see
/// [`requests::read`]. Returns a [`requests::Outcome`] as JSON.
#[wasm_bindgen(js_name = readManifests)]
pub fn read_manifests(cluster: &str, machines: &str, inventory: &str) -> String {
    let outcome = requests::read(&requests::Inputs {
        cluster,
        machines,
        inventory,
    });
    to_json(&outcome)
}

/// Reads one policy's settings (YAML or JSON; empty means none), as `nicpolicy eval --settings`
/// does. Returns `{"settings": ...}` or `{"error": InputError}`; `label` names the input in
/// errors.
#[wasm_bindgen(js_name = readSettings)]
pub fn read_settings(label: &str, text: &str) -> String {
    to_json(&requests::settings(label, text))
}

/// The fields of a decision's NIC plan stock CAPVCD will not apply, reported as `nicpolicy eval`
/// and the webhook report them (`nicpolicy_plugin::provisioner::report`, as warnings):
/// `{"unapplied": [Unapplied with its message], "warnings": [the warnings it adds]}`, or
/// `{"error": ...}` for inputs that are not a request and a decision.
#[wasm_bindgen(js_name = notBuiltAsPlanned)]
pub fn not_built_as_planned(request: &str, decision: &str) -> String {
    use nicpolicy_plugin::provisioner::{report, OnUnapplied, Provisioner};
    let parsed = serde_json::from_str::<nicpolicy_plugin::Request>(request).and_then(|request| {
        Ok((
            request,
            serde_json::from_str::<nicpolicy_plugin::Decision>(decision)?,
        ))
    });
    match parsed {
        Ok((request, mut decision)) => {
            let before = decision.warnings.len();
            let found: Vec<serde_json::Value> = report(
                &Provisioner::capvcd(),
                OnUnapplied::Warn,
                &request,
                &mut decision,
            )
            .into_iter()
            .map(|item| {
                let message = item.message();
                let mut value = serde_json::to_value(item).unwrap_or_default();
                value["message"] = message.into();
                value
            })
            .collect();
            let warnings = decision.warnings.split_off(before);
            to_json(&serde_json::json!({"unapplied": found, "warnings": warnings}))
        }
        Err(err) => to_json(&serde_json::json!({"error": err.to_string()})),
    }
}

/// A NIC's or violation's source (JSON, as a decision carries it) in the words `nicpolicy eval
/// --explain` uses (`nicpolicy_plugin::Source::describe`); `not reported` for `null` or
/// anything that is not a source.
#[wasm_bindgen(js_name = describeSource)]
pub fn describe_source(source: &str) -> String {
    serde_json::from_str::<Option<nicpolicy_plugin::Source>>(source)
        .ok()
        .flatten()
        .unwrap_or_default()
        .describe()
}

/// The text `nicpolicy eval` prints for a decision (`nicpolicy_plugin::render`), for the page's
/// "nicpolicy eval" view: `request` and `decision` as JSON, `policies` a JSON list of `name
/// version`, `unapplied` the JSON list of plan fields the provisioner will not apply. Input that
/// is not what it should be gives a line saying which.
#[wasm_bindgen(js_name = renderDecision)]
pub fn render_decision(request: &str, policies: &str, decision: &str, unapplied: &str) -> String {
    fn read<T: serde::de::DeserializeOwned>(what: &str, json: &str) -> Result<T, String> {
        serde_json::from_str(json).map_err(|err| format!("cannot show the {what}: {err}\n"))
    }
    let read_all = || -> Result<String, String> {
        let request: nicpolicy_plugin::Request = read("request", request)?;
        let policies: Vec<String> = read("policies", policies)?;
        let decision: nicpolicy_plugin::Decision = read("decision", decision)?;
        let unapplied: Vec<nicpolicy_plugin::provisioner::Unapplied> =
            read("unapplied plan fields", unapplied)?;
        Ok(nicpolicy_plugin::render::decision_text(
            &nicpolicy_plugin::render::Described {
                request: &request,
                policies: &policies,
                unapplied: &unapplied,
                explain: false,
            },
            &decision,
        ))
    };
    read_all().unwrap_or_else(|error| error)
}

/// Where a machine's fields are in an object of `kind`: `spec`, or `spec.template.spec` for a
/// VCDMachineTemplate (`nicpolicy_plugin::ObjectKind::spec_path`).
#[wasm_bindgen(js_name = specPath)]
pub fn spec_path(kind: &str) -> String {
    nicpolicy_plugin::ObjectKind::from_kind(kind)
        .unwrap_or(nicpolicy_plugin::ObjectKind::VcdMachine)
        .spec_path()
        .to_string()
}

/// The host chain's combining (`nicpolicy_plugin::combine::Combiner`), step by step: the page
/// evaluates each policy with its JS build and hands the decision here, so the page combines a
/// chain exactly as `nicpolicy eval` and the webhook do (messages, order, write-backs, sources).
///
/// ```js
/// const combine = new Combine(JSON.stringify(request), chain.length);
/// const step = JSON.parse(combine.add("site", JSON.stringify(decision)));
/// // step.extraOvdcNetworks: the list the next policy sees, when this one rewrote it
/// const { decision } = JSON.parse(combine.finish());
/// ```
#[wasm_bindgen]
pub struct Combine {
    /// `None` once finished, or when the request could not be read (`error` says why).
    combiner: Option<nicpolicy_plugin::combine::Combiner>,
    error: Option<String>,
}

#[wasm_bindgen]
impl Combine {
    /// A combiner for `request` (JSON) in a chain of `policies` policies.
    #[wasm_bindgen(constructor)]
    pub fn new(request: &str, policies: usize) -> Combine {
        match serde_json::from_str::<nicpolicy_plugin::Request>(request) {
            Ok(request) => Combine {
                combiner: Some(nicpolicy_plugin::combine::Combiner::new(&request, policies)),
                error: None,
            },
            Err(err) => Combine {
                combiner: None,
                error: Some(format!("the request is not one: {err}")),
            },
        }
    }

    /// Adds `policy`'s decision (JSON). Returns `{"extraOvdcNetworks": [...]}` when the next
    /// policy is to see this rewritten list, `{}` when not, or `{"error": ...}`.
    pub fn add(&mut self, policy: &str, decision: &str) -> String {
        let decision = match serde_json::from_str::<nicpolicy_plugin::Decision>(decision) {
            Ok(decision) => decision,
            Err(err) => {
                return to_json(&serde_json::json!({
                    "error": format!("policy {policy} answered something that is not a decision: {err}")
                }))
            }
        };
        match self.combiner.as_mut() {
            Some(combiner) => match combiner.add(policy, &decision) {
                Some(list) => to_json(&serde_json::json!({"extraOvdcNetworks": list})),
                None => "{}".to_string(),
            },
            None => self.failure(),
        }
    }

    /// The combined decision: `{"decision": ...}`, or `{"error": ...}`.
    pub fn finish(&mut self) -> String {
        match self.combiner.take() {
            Some(combiner) => to_json(&serde_json::json!({"decision": combiner.finish()})),
            None => self.failure(),
        }
    }

    fn failure(&self) -> String {
        let error = self
            .error
            .as_deref()
            .unwrap_or("the chain is already combined");
        to_json(&serde_json::json!({ "error": error }))
    }
}

fn to_json(value: &impl serde::Serialize) -> String {
    // The outcome types hold strings, numbers and JSON values only: serialising cannot fail,
    // and if it ever did the page shows this error rather than nothing.
    serde_json::to_string(value).unwrap_or_else(|err| {
        serde_json::json!({"errors": [{"input": "", "message": err.to_string()}]}).to_string()
    })
}
