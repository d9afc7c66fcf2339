//! The backstop never refuses what the policy allows: every case of every built-in suite, and
//! generated machines, evaluated by the Wasm policy and by the backstop's CEL (the `cel`
//! crate, offline; the end-to-end suite does the same in kube-apiserver). When the backstop
//! refuses, the policy refuses too, on the same field.
#![cfg(feature = "builtin")]

mod common;

use std::path::{Path, PathBuf};

use nicpolicy::backstop::{self, KindBackstop};
use nicpolicy::cases::Case;
use nicpolicy::chain::PolicyChain;
use nicpolicy::manifest::ManifestFile;
use nicpolicy::plugin::backstop::{variables, Validation, INVENTORY_PARAM};
use nicpolicy::plugin::{Decision, Inventory, ObjectKind, Request};
use nicpolicy::request::build_request;
use nicpolicy::{builtin, Policy, PolicyOptions};
use serde_json::{json, Value};

use common::host;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A refusal of the backstop: the validation's rule and field, and its message.
#[derive(Debug)]
struct Refusal {
    rule: String,
    field: String,
    message: String,
}

fn cel(expression: &str, context: &cel::Context) -> Result<cel::Value, String> {
    // Each expression is parsed once: the generated machines evaluate the same few thousands
    // of times.
    thread_local! {
        static PROGRAMS: std::cell::RefCell<std::collections::HashMap<String, std::rc::Rc<cel::Program>>> =
            Default::default();
    }
    let program = PROGRAMS.with(|programs| {
        if let Some(program) = programs.borrow().get(expression) {
            return Ok(program.clone());
        }
        let program = std::rc::Rc::new(
            cel::Program::compile(expression).map_err(|err| format!("{expression}: {err}"))?,
        );
        programs
            .borrow_mut()
            .insert(expression.to_string(), program.clone());
        Ok::<_, String>(program)
    })?;
    program
        .execute(context)
        .map_err(|err| format!("{expression}: {err}"))
}

/// The backstop's answer for `object` (and `old` on an UPDATE) with `params` (the ConfigMap's
/// data), as kube-apiserver computes it: the match condition, the variables, then each
/// validation; an expression that fails is an error of the test (kube-apiserver would refuse).
fn backstop_refusals(
    kind: ObjectKind,
    validations: &[Validation],
    object: &Value,
    old: Option<&Value>,
    params: &serde_json::Map<String, Value>,
) -> Vec<Refusal> {
    let mut context = cel::Context::default();
    let add = |context: &mut cel::Context, name: &str, value: &Value| {
        context.add_variable_from_value(name, cel::to_value(value).expect("a CEL value"));
    };
    add(&mut context, "object", object);
    add(&mut context, "oldObject", old.unwrap_or(&Value::Null));
    add(&mut context, "params", &json!({"data": params}));
    let being_deleted = cel(
        "object == null || oldObject == null || !has(object.metadata.deletionTimestamp)",
        &context,
    )
    .expect("the match condition evaluates");
    if being_deleted != cel::Value::Bool(true) {
        return Vec::new();
    }
    let mut defined = serde_json::Map::new();
    for (name, expression) in variables(kind) {
        let mut scope = cel::Context::default();
        add(&mut scope, "object", object);
        add(&mut scope, "oldObject", old.unwrap_or(&Value::Null));
        let value = cel(&expression, &scope).expect("a variable evaluates");
        let json = value.json().expect("a variable is JSON");
        defined.insert(name.to_string(), json);
    }
    add(&mut context, "variables", &Value::Object(defined));
    let mut refusals = Vec::new();
    for v in validations {
        match cel(&v.expression, &context) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => {
                let message = match &v.message_expression {
                    Some(expression) => match cel(expression, &context) {
                        Ok(cel::Value::String(text)) => text.to_string(),
                        other => panic!("{}: messageExpression gave {other:?}", v.rule),
                    },
                    None => v.message.clone(),
                };
                refusals.push(Refusal {
                    rule: v.rule.clone(),
                    field: v.field.clone(),
                    message,
                });
            }
            other => panic!("{}: the expression gave {other:?} for {object}", v.rule),
        }
    }
    refusals
}

fn params_of(
    backstop: &KindBackstop,
    inventory: Option<&Inventory>,
) -> serde_json::Map<String, Value> {
    let mut params: serde_json::Map<String, Value> = backstop
        .params
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    if let Some(inventory) = inventory {
        params.insert(
            INVENTORY_PARAM.into(),
            Value::String(backstop::inventory_param(inventory)),
        );
    }
    params
}

/// Checks the promise for one machine; returns whether the backstop refused it.
fn check(
    what: &str,
    chain: &PolicyChain,
    request: &Request,
    object: &Value,
    old: Option<&Value>,
) -> bool {
    let decision: Decision = chain
        .evaluate(request)
        .unwrap_or_else(|err| panic!("{what}: {err}"))
        .decision;
    let backstop = of_chain(request.kind, chain);
    assert!(!backstop.validations.is_empty(), "{what}: no validations");
    let params = params_of(&backstop, request.inventory.as_ref());
    let refusals = backstop_refusals(request.kind, &backstop.validations, object, old, &params);
    if decision.allowed {
        assert!(
            refusals.is_empty(),
            "{what}: the policy allows it, the backstop refuses: {refusals:?}"
        );
    }
    for refusal in &refusals {
        let same_field = decision.violations.iter().any(|v| {
            v.field == refusal.field || v.field.starts_with(&format!("{}[", refusal.field))
        });
        assert!(
            same_field,
            "{what}: the backstop refuses on {} ({}: {}), the policy does not: {:?}",
            refusal.field, refusal.rule, refusal.message, decision.violations
        );
        assert!(
            refusal.message.starts_with(&refusal.field),
            "{what}: the message names the field: {}",
            refusal.message
        );
    }
    !refusals.is_empty()
}

/// The chain's backstop for `kind`, asked once per chain and kind.
fn of_chain(kind: ObjectKind, chain: &PolicyChain) -> KindBackstop {
    thread_local! {
        static ASKED: std::cell::RefCell<Vec<(String, ObjectKind, KindBackstop)>> = Default::default();
    }
    let key = format!("{} {}", chain.name(), chain.first().settings());
    ASKED.with(|asked| {
        if let Some((_, _, backstop)) = asked
            .borrow()
            .iter()
            .find(|(k, c, _)| *k == key && *c == kind)
        {
            return backstop.clone();
        }
        let backstop = backstop::of_chain(kind, chain, &[]).expect("a backstop");
        asked.borrow_mut().push((key, kind, backstop.clone()));
        backstop
    })
}

/// The built-in `policy` with `settings` (None when it refuses them), compiled once.
fn load(policy: &str, settings: Value) -> Option<Policy> {
    static LOADED: std::sync::Mutex<Vec<(String, Policy)>> = std::sync::Mutex::new(Vec::new());
    let mut loaded = LOADED.lock().expect("not poisoned");
    let base = match loaded.iter().find(|(name, _)| name == policy) {
        Some((_, base)) => base.clone(),
        None => {
            let wasm = builtin::get(policy).expect("a built-in policy").wasm;
            let base = host()
                .load(wasm, PolicyOptions::default())
                .expect("the built-in policy loads");
            loaded.push((policy.to_string(), base.clone()));
            base
        }
    };
    base.with_settings(settings).ok()
}

#[test]
fn the_backstop_never_refuses_what_a_built_in_case_allows() {
    let mut checked = 0;
    let mut refused = 0;
    let mut denied = 0;
    for policy in ["capvcd", "role-based", "static-ip", "zone-aware"] {
        let dir = repo().join("tests/cases").join(policy);
        let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
            .expect("the suite")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        paths.sort();
        assert!(paths.len() > 5, "{}: read the suite", dir.display());
        for path in paths {
            let case = Case::load(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
            if case.expect.settings_rejected.is_some() || case.expect.error.is_some() {
                continue;
            }
            let Some(loaded) = load(policy, case.settings.clone()) else {
                continue;
            };
            let chain = PolicyChain::new(loaded);
            let what = format!("{policy}/{}", case.name());
            if check(
                &what,
                &chain,
                &case.request,
                &case.objects.machine,
                case.objects.old.as_ref(),
            ) {
                refused += 1;
            }
            if case.expect.allowed == Some(false) {
                denied += 1;
            }
            checked += 1;
        }
    }
    // Every case was judged both ways, and the backstop refused a fair share of the denied
    // ones (those whose violations are structural).
    eprintln!("{checked} cases: {denied} denied, {refused} of them refused by the backstop");
    assert!(checked > 140, "{checked} cases");
    assert!(
        refused > 20,
        "the backstop refused {refused} of {denied} denied cases"
    );
}

/// A small deterministic generator (xorshift), so a failure repeats.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Names a machine may list: the inventory's, near misses, and malformed ones.
fn names() -> Vec<String> {
    let mut names: Vec<String> = [
        "mgmt-net",
        "storage-net",
        "workload-net",
        "backup-net",
        "ext-dmz-net",
        "Storage-net",
        "replication-net",
        "",
        " storage-net",
        "storage-net ",
        "storage\u{7}net",
        "storage-net\u{a0}",
        "\u{2003}workload-net",
        "st\u{f6}rage-net",
    ]
    .map(String::from)
    .to_vec();
    names.push("n".repeat(128));
    names.push("n".repeat(129));
    names.push("\u{e9}".repeat(128));
    names
}

fn machine(
    kind: ObjectKind,
    extras: &[String],
    provider_id: Option<&str>,
    control_plane: bool,
) -> Value {
    let mut labels = json!({"cluster.x-k8s.io/cluster-name": "prod-eu1"});
    if control_plane {
        labels["cluster.x-k8s.io/control-plane"] = "".into();
    }
    let mut spec = json!({"catalog": "kubernetes", "template": "ubuntu-2204-kube-v1.31.4"});
    if !extras.is_empty() {
        spec["extraOvdcNetworks"] = json!(extras);
    }
    if let Some(id) = provider_id {
        spec["providerID"] = id.into();
    }
    match kind {
        ObjectKind::VcdMachine => json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "VCDMachine",
            "metadata": {"name": "prod-eu1-md-0-x7k2p", "namespace": "prod-eu1", "labels": labels},
            "spec": spec,
        }),
        ObjectKind::VcdMachineTemplate => json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2",
            "kind": "VCDMachineTemplate",
            "metadata": {"name": "prod-eu1-md-0", "namespace": "prod-eu1", "labels": labels},
            "spec": {"template": {"spec": spec}},
        }),
    }
}

#[test]
fn the_backstop_never_refuses_what_the_policy_allows_on_generated_machines() {
    let fixtures = repo().join("tests/fixtures");
    let cluster = ManifestFile::read(&fixtures.join("cluster-single.yaml")).expect("cluster");
    let inventory = ManifestFile::read(&fixtures.join("inventory.yaml"))
        .expect("inventory")
        .inventory()
        .expect("an inventory");
    let settings = [
        ("capvcd", json!(null)),
        ("capvcd", json!({"maxNics": 4})),
        (
            "capvcd",
            json!({"maxNics": 6, "allowNicChangesOnProvisioned": true}),
        ),
        (
            "role-based",
            json!({
                "capvcd": {"maxNics": 6},
                "controlPlane": {"required": ["mgmt-net"], "forbidden": ["ext-dmz-net"], "allowed": ["storage-net", "backup-net"]},
                "worker": {"allowed": ["storage-net", "workload-net", "backup-net", "ext-dmz-net"], "defaults": ["storage-net", "workload-net"]},
            }),
        ),
        ("static-ip", json!({"capvcd": {"maxNics": 5}})),
        (
            "zone-aware",
            json!({"default": {"storage": "storage-net", "workload": "workload-net"}, "capvcd": {"maxNics": 5}}),
        ),
    ];
    let names = names();
    let mut random = Random(0x9e37_79b9_7f4a_7c15);
    let (mut checked, mut refused) = (0, 0);
    for (policy, settings) in settings {
        let chain = PolicyChain::new(load(policy, settings.clone()).expect("settings load"));
        for round in 0..300 {
            let kind = if round % 4 == 3 {
                ObjectKind::VcdMachineTemplate
            } else {
                ObjectKind::VcdMachine
            };
            let pick = |random: &mut Random| -> Vec<String> {
                // Mostly short lists of good names, sometimes long ones or odd names.
                let len = [0, 1, 2, 3, 4, 5, 6, 9, 10, 11, 12][random.below(11)];
                (0..len)
                    .map(|_| {
                        if random.below(8) == 0 {
                            names[random.below(names.len())].clone()
                        } else {
                            names[random.below(5)].clone()
                        }
                    })
                    .collect()
            };
            let extras = pick(&mut random);
            let control_plane = random.below(4) == 0;
            let update = kind == ObjectKind::VcdMachine && random.below(2) == 0;
            let (old, provider_id) = if update {
                let old_extras = if random.below(2) == 0 {
                    extras.clone()
                } else {
                    pick(&mut random)
                };
                let id = ["vmware-cloud-director://urn:vcloud:vm:4b0c", ""][random.below(2)];
                let old = machine(
                    kind,
                    &old_extras,
                    Some(id).filter(|id| !id.is_empty()),
                    control_plane,
                );
                let new_id = if random.below(5) == 0 {
                    None
                } else {
                    Some(id).filter(|id| !id.is_empty())
                };
                (Some(old), new_id)
            } else {
                (None, None)
            };
            let object = machine(kind, &extras, provider_id, control_plane);
            let file = |value: &Value, name: &str| {
                ManifestFile::from_documents(Path::new(name), vec![value.clone()])
                    .expect("a manifest")
            };
            let machine_file = file(&object, "machine.yaml");
            let old_file = old.as_ref().map(|o| file(o, "old.yaml"));
            let request = build_request(
                &machine_file,
                None,
                Some(&cluster),
                old_file.as_ref(),
                Some(inventory.clone()),
            )
            .expect("a request");
            let what = format!("{policy} {settings} round {round}: {object}, old {old:?}");
            if check(&what, &chain, &request, &object, old.as_ref()) {
                refused += 1;
            }
            checked += 1;
        }
    }
    eprintln!("{checked} machines, {refused} refused by the backstop");
    assert_eq!(checked, 1800);
    assert!(refused > 300, "the backstop refused {refused} of {checked}");
}

/// The chart renders the backstop of a chain that starts with a built-in policy from
/// `charts/nicpolicy/files/backstop.yaml`: each built-in policy's validations per kind (their
/// expressions do not depend on the settings), the parameters they read and what they leave to
/// the webhook. This test writes it with `NICPOLICY_UPDATE_CHART=1` and otherwise checks it is
/// what the policies export.
#[test]
fn the_charts_backstop_file_is_what_the_built_in_policies_export() {
    let options = backstop::Options::default();
    let mut policies = serde_json::Map::new();
    for policy in ["capvcd", "role-based", "static-ip", "zone-aware"] {
        let chain = PolicyChain::new(load(policy, Value::Null).expect("default settings load"));
        let mut kinds = serde_json::Map::new();
        for kind in ObjectKind::ALL {
            let backstop = backstop::of_chain(kind, &chain, &[]).expect("a backstop");
            let object = backstop::policy_object(kind, &backstop.validations, &options);
            let prefix = format!("{}.0.", kind.as_str());
            let params: Vec<&str> = backstop
                .params
                .keys()
                .map(|key| key.strip_prefix(&prefix).expect("the entry's prefix"))
                .collect();
            let not_covered: Vec<&str> = backstop
                .not_covered
                .iter()
                .map(|line| {
                    line.split_once("): ")
                        .map_or(line.as_str(), |(_, what)| what)
                })
                .collect();
            kinds.insert(
                kind.as_str().into(),
                json!({
                    "params": params,
                    "notCovered": not_covered,
                    "validations": object["spec"]["validations"],
                }),
            );
        }
        policies.insert(policy.into(), Value::Object(kinds));
    }
    let variables: serde_json::Map<String, Value> = ObjectKind::ALL
        .into_iter()
        .map(|kind| {
            let object = backstop::policy_object(kind, &[], &options);
            (
                kind.as_str().to_string(),
                object["spec"]["variables"].clone(),
            )
        })
        .collect();
    let generated = format!(
        "# The built-in policies' backstops, which templates/backstop.yaml renders. Generated by\n\
         # host/tests/backstop.rs from the policies (NICPOLICY_UPDATE_CHART=1 cargo test -p nicpolicy\n\
         # --test backstop), which fails when this file is not what they export: do not edit.\n{}",
        serde_yaml_ng::to_string(&json!({"variables": variables, "policies": policies}))
            .expect("YAML")
    );
    let path = repo().join("charts/nicpolicy/files/backstop.yaml");
    if std::env::var_os("NICPOLICY_UPDATE_CHART").is_some() {
        std::fs::write(&path, &generated).expect("write the chart's file");
    }
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        current == generated,
        "{} is not what the built-in policies export: run NICPOLICY_UPDATE_CHART=1 cargo test -p nicpolicy --test backstop",
        path.display()
    );
}

/// An ABI v1 module called `name` that allows everything; with `backstop`, it exports
/// `nicpolicy_backstop` answering that text.
fn module(name: &str, backstop: Option<&str>) -> Policy {
    let escape = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    let export = backstop.map_or(String::new(), |text| {
        format!(
            r#"(data (i32.const 256) "{}")
  (func (export "nicpolicy_backstop") (param i32 i32) (result i64)
i64.const {})"#,
            escape(text),
            nicpolicy::plugin::abi::pack(256, text.len() as u32)
        )
    });
    let allowed = r#"{"allowed":true}"#;
    let wat = format!(
        r#"(module
  (memory (export "memory") 2)
  (data (i32.const 16) "{{\"valid\":true}}")
  (data (i32.const 64) "{allowed}")
  (func (export "nicpolicy_abi_version") (result i32) i32.const 1)
  (func (export "nicpolicy_alloc") (param i32) (result i32) i32.const 65536)
  (func (export "nicpolicy_validate_settings") (param i32 i32) (result i64) i64.const {valid})
  (func (export "nicpolicy_evaluate") (param i32 i32) (result i64) i64.const {evaluated})
  {export}
  (@custom "nicpolicy.metadata" "{{\"name\":\"{name}\",\"version\":\"1.0.0\",\"abiVersion\":1}}")
)"#,
        allowed = escape(allowed),
        valid = nicpolicy::plugin::abi::pack(16, 14),
        evaluated = nicpolicy::plugin::abi::pack(64, allowed.len() as u32),
    );
    let wasm = wat::parse_str(&wat).unwrap_or_else(|err| panic!("{err}\n{wat}"));
    host()
        .load(&wasm, PolicyOptions::default())
        .expect("the test module loads")
}

#[test]
fn a_module_without_a_backstop_has_none_and_what_follows_it_is_left_to_the_webhook() {
    let plain = module("dmz-guard", None);
    assert!(plain
        .backstop(ObjectKind::VcdMachine, "VCDMachine.0.")
        .expect("the call")
        .is_none());
    let chain = PolicyChain::new(plain).then(load("capvcd", Value::Null).expect("capvcd"));
    let backstop = backstop::of_chain(ObjectKind::VcdMachine, &chain, &[]).expect("a backstop");
    assert!(backstop.validations.is_empty(), "{backstop:?}");
    assert!(backstop.covered.is_empty());
    let notes = backstop.not_covered.join("\n");
    assert!(notes.contains("(dmz-guard): no backstop"), "{notes}");
    assert!(
        notes.contains("(nicpolicy-capvcd): it runs after dmz-guard, which has no backstop"),
        "{notes}"
    );
    // The other way round, CAPVCD's rules hold and the module is named as not covered.
    let chain = PolicyChain::new(load("capvcd", Value::Null).expect("capvcd"))
        .then(module("dmz-guard", None));
    let backstop = backstop::of_chain(ObjectKind::VcdMachine, &chain, &[]).expect("a backstop");
    assert_eq!(backstop.covered, ["nicpolicy-capvcd"]);
    assert_eq!(backstop.validations.len(), 5);
}

#[test]
fn a_backstop_that_answers_garbage_is_an_error_naming_the_entry() {
    for (answer, expected) in [
        ("not json", "nicpolicy_backstop must return"),
        (
            r#"{"error":"settings: maxNics is 12"}"#,
            "refused: settings: maxNics is 12",
        ),
        (
            r#"{"backstop":{"version":7,"validations":[]}}"#,
            "version 7",
        ),
    ] {
        let chain = PolicyChain::new(module("site-rules", Some(answer)));
        let fields = ["policies.VCDMachine[0]".to_string()];
        let err = backstop::of_chain(ObjectKind::VcdMachine, &chain, &fields)
            .expect_err("garbage is refused");
        let text = err.to_string();
        assert!(
            text.starts_with("policies.VCDMachine[0] (site-rules): "),
            "{text}"
        );
        assert!(text.contains(expected), "{answer}: {text}");
    }
}
