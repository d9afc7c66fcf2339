//! The webhook's decision holds on every path a tenant with edit rights in a namespace can
//! take: no way around the cluster rules, the ratchet or defaulting, and no request that
//! switches checking off. Each test is one attack, answered by `nicpolicy serve`'s reviewer on
//! the reviews kube-apiserver would send.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use nicpolicy::clusters::StaticClusters;
use nicpolicy::plugin::ObjectKind;
use nicpolicy::served::config::ClusterSourceConfig;
use nicpolicy::served::ServeConfig;
use nicpolicy::webhook::{App, Endpoint};
use nicpolicy::{builtin, Host, HostConfig};
use nicpolicy_tests::Module;
use serde_json::{json, Value};

const M: ObjectKind = ObjectKind::VcdMachine;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("binding")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn host() -> Host {
    Host::new(HostConfig {
        cache_dir: Some(Path::new(env!("CARGO_TARGET_TMPDIR")).join("binding-cache")),
        max_instances: 32,
        ..HostConfig::default()
    })
    .expect("engine starts")
}

/// A second cluster in namespace prod-eu1 beside examples/cluster.yaml's `prod-eu1` (primary
/// mgmt-net): `prod-eu1-dmz`, whose primary is ext-dmz-net, a network workers may otherwise
/// list as an extra.
fn dmz_cluster(dir: &Path) -> PathBuf {
    let example = std::fs::read_to_string(workspace().join("examples/cluster.yaml"))
        .expect("examples/cluster.yaml");
    let text = example
        .replace("name: prod-eu1\n", "name: prod-eu1-dmz\n")
        .replace("ovdcNetwork: mgmt-net", "ovdcNetwork: ext-dmz-net");
    let path = dir.join("cluster-dmz.yaml");
    std::fs::write(&path, text).expect("write cluster file");
    path
}

/// The shipped configuration (config/nicpolicy: role-based rules, worker defaults
/// `[storage-net, workload-net]`) with its module, both clusters, and `edit` applied to the
/// configuration text.
fn shipped(dir: &Path, edit: impl Fn(String) -> String) -> ServeConfig {
    std::fs::copy(
        workspace().join("config/nicpolicy/inventory.yaml"),
        dir.join("inventory.yaml"),
    )
    .expect("copy inventory");
    let text = std::fs::read_to_string(workspace().join("config/nicpolicy/nicpolicy.yaml"))
        .expect("shipped config");
    std::fs::write(dir.join("nicpolicy.yaml"), edit(text)).expect("write config");
    let module = builtin::get("role-based").expect("built in").wasm;
    std::fs::write(dir.join("policy.wasm"), module).expect("write module");
    let mut config = ServeConfig::read(&dir.join("nicpolicy.yaml")).expect("config is valid");
    config.clusters = ClusterSourceConfig::Static {
        files: vec![workspace().join("examples/cluster.yaml"), dmz_cluster(dir)],
    };
    config.tls = None;
    config
}

fn app(config: ServeConfig) -> App {
    let ClusterSourceConfig::Static { files } = &config.clusters else {
        panic!("tests use static clusters");
    };
    let clusters = StaticClusters::read(files).expect("cluster files");
    App::new(host(), config, Arc::new(clusters)).expect("policies load")
}

/// The response `app` gives to `review` at `endpoint`.
fn answer(app: &App, endpoint: Endpoint, review: &Value) -> Value {
    let body = serde_json::to_vec(review).expect("JSON");
    let answer = app.reviewer().review(endpoint, M, &body);
    assert_eq!(
        answer.http_status,
        200,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    let body: Value = serde_json::from_slice(&answer.body).expect("JSON answer");
    body["response"].clone()
}

fn fixture(name: &str) -> Value {
    let path = workspace().join(format!("tests/fixtures/admission/{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture")).expect("fixture JSON")
}

/// An UPDATE of the provisioned worker fixture: `old` and `new` extra networks, and the cluster
/// each version names (`None`: no cluster label).
fn update(old: (&[&str], Option<&str>), new: (&[&str], Option<&str>)) -> Value {
    let mut review = fixture("vcdmachine-update-provisioned");
    for (object, (extras, cluster)) in [("oldObject", old), ("object", new)] {
        let object = &mut review["request"][object];
        object["spec"]["extraOvdcNetworks"] = json!(extras);
        let labels = object["metadata"]["labels"]
            .as_object_mut()
            .expect("labels");
        match cluster {
            Some(name) => labels.insert("cluster.x-k8s.io/cluster-name".into(), json!(name)),
            None => labels.remove("cluster.x-k8s.io/cluster-name"),
        };
    }
    review
}

fn causes(response: &Value) -> Vec<String> {
    response["status"]["details"]["causes"]
        .as_array()
        .map(|causes| {
            causes
                .iter()
                .map(|c| c["field"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn message(response: &Value) -> String {
    response["status"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn warnings(response: &Value) -> String {
    response["warnings"]
        .as_array()
        .map(|w| {
            w.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

#[test]
fn a_machine_stored_without_its_cluster_is_judged_in_full_once_the_label_names_it() {
    let dir = scratch("first-known-cluster");
    let app = app(shipped(&dir, |text| text));
    let dmz: &[&str] = &["ext-dmz-net"];

    // Created without the label: checked without its cluster (NIC 0 unknown), admitted.
    let mut create = fixture("vcdmachine-create-worker");
    let object = &mut create["request"]["object"];
    object["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove("cluster.x-k8s.io/cluster-name");
    object["spec"]["extraOvdcNetworks"] = json!(dmz);
    let response = answer(&app, Endpoint::Validate, &create);
    assert_eq!(response["allowed"], true, "{response}");
    assert!(warnings(&response).contains("checked without its cluster"));

    // The UPDATE that adds the label (CAPI's Machine controller does): the stored object was
    // never judged against this cluster, so nothing is excused.
    let response = answer(
        &app,
        Endpoint::Validate,
        &update((dmz, None), (dmz, Some("prod-eu1-dmz"))),
    );
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(causes(&response), ["spec.extraOvdcNetworks[0]"]);
    assert!(
        !warnings(&response).contains("pre-existing violation"),
        "{response}"
    );
}

#[test]
fn changing_the_cluster_label_to_a_stricter_cluster_is_judged_in_full() {
    for unknown in ["CheckWithoutCluster", "Deny"] {
        let dir = scratch(&format!("cluster-change-{unknown}"));
        let app = app(shipped(&dir, |text| {
            text.replace(
                "onUnknownCluster: CheckWithoutCluster",
                &format!("onUnknownCluster: {unknown}"),
            )
        }));
        let dmz: &[&str] = &["ext-dmz-net"];
        // In prod-eu1 (primary mgmt-net) the list is fine.
        let stays = update((dmz, Some("prod-eu1")), (dmz, Some("prod-eu1")));
        let response = answer(&app, Endpoint::Validate, &stays);
        assert_eq!(response["allowed"], true, "{unknown}: {response}");
        // Moved to prod-eu1-dmz, whose primary it repeats: denied, not excused.
        let moved = update((dmz, Some("prod-eu1")), (dmz, Some("prod-eu1-dmz")));
        let response = answer(&app, Endpoint::Validate, &moved);
        assert_eq!(response["allowed"], false, "{unknown}: {response}");
        assert_eq!(
            causes(&response),
            ["spec.extraOvdcNetworks[0]"],
            "{unknown}"
        );
    }
}

#[test]
fn the_ratchet_excuses_the_stored_value_only() {
    let dir = scratch("same-value");
    let app = app(shipped(&dir, |text| text));
    // Stored with a network the org VDC does not have at [1]: relabelling keeps it, allowed.
    let stored: &[&str] = &["storage-net", "legacy-net"];
    let mut relabel = update((stored, Some("prod-eu1")), (stored, Some("prod-eu1")));
    relabel["request"]["object"]["metadata"]["labels"]["topology.example.net/rack"] = json!("r07");
    let response = answer(&app, Endpoint::Validate, &relabel);
    assert_eq!(response["allowed"], true, "{response}");
    assert!(warnings(&response).contains("pre-existing violation"));
    // Another unknown network put in its place: denied.
    let other: &[&str] = &["storage-net", "legacy-net-2"];
    let response = answer(
        &app,
        Endpoint::Validate,
        &update((stored, Some("prod-eu1")), (other, Some("prod-eu1"))),
    );
    assert_eq!(response["allowed"], false, "{response}");
    assert!(
        causes(&response).contains(&"spec.extraOvdcNetworks[1]".to_string()),
        "{response}"
    );
}

#[test]
fn a_list_stored_too_long_cannot_grow() {
    let dir = scratch("count");
    let text = format!(
        "policies:\n  VCDMachine:\n    - builtin: capvcd\nclusters: {{source: Static, files: [{}]}}\n",
        workspace().join("examples/cluster.yaml").display()
    );
    std::fs::write(dir.join("nicpolicy.yaml"), text).expect("write config");
    let app = app(ServeConfig::read(&dir.join("nicpolicy.yaml")).expect("config"));
    let names: Vec<String> = (0..14).map(|i| format!("ext-net-{i:02}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let cluster = Some("prod-eu1");
    let kept = update((&names[..11], cluster), (&names[..11], cluster));
    let response = answer(&app, Endpoint::Validate, &kept);
    assert_eq!(response["allowed"], true, "{response}");
    let grown = update((&names[..11], cluster), (&names, cluster));
    let response = answer(&app, Endpoint::Validate, &grown);
    assert_eq!(response["allowed"], false, "{response}");
    // The count, and the CAPVCD rule on a provisioned machine's changed list.
    assert!(
        causes(&response)
            .iter()
            .all(|f| f == "spec.extraOvdcNetworks"),
        "{response}"
    );
    assert!(
        message(&response).contains("15 NICs requested"),
        "{response}"
    );
}

#[test]
fn validation_denies_a_machine_that_skipped_defaulting() {
    let dir = scratch("undefaulted");
    let app = app(shipped(&dir, |text| text));
    // A worker with an empty list: defaulting writes [storage-net, workload-net].
    let mut create = fixture("vcdmachine-create-worker");
    create["request"]["object"]["spec"]["extraOvdcNetworks"] = json!([]);
    let response = answer(&app, Endpoint::Validate, &create);
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(causes(&response), ["spec.extraOvdcNetworks"]);
    assert!(message(&response).contains("not defaulted"), "{response}");
    // Through the mutating webhook first, it is admitted.
    let mutated = answer(&app, Endpoint::Mutate, &create);
    assert!(mutated["patch"].is_string(), "{mutated}");
    let mut defaulted = create.clone();
    defaulted["request"]["object"]["spec"]["extraOvdcNetworks"] =
        json!(["storage-net", "workload-net"]);
    let response = answer(&app, Endpoint::Validate, &defaulted);
    assert_eq!(response["allowed"], true, "{response}");

    // A machine stored before defaulting existed is not blocked on a metadata-only UPDATE...
    let none: &[&str] = &[];
    let cluster = Some("prod-eu1");
    let mut relabel = update((none, cluster), (none, cluster));
    relabel["request"]["object"]["metadata"]["labels"]["topology.example.net/rack"] = json!("r07");
    let response = answer(&app, Endpoint::Validate, &relabel);
    assert_eq!(response["allowed"], true, "{response}");
    // ... but an UPDATE that changes its NIC inputs is judged as it is.
    let changed = update((&["backup-net"], cluster), (none, cluster));
    let response = answer(&app, Endpoint::Validate, &changed);
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(causes(&response), ["spec.extraOvdcNetworks"]);
}

#[test]
fn a_create_with_a_made_up_deletion_timestamp_is_defaulted_and_judged() {
    let dir = scratch("fake-deletion");
    let app = app(shipped(&dir, |text| text));
    let mut create = fixture("vcdmachine-create-worker");
    let object = &mut create["request"]["object"];
    object["metadata"]["deletionTimestamp"] = json!("2026-12-04T09:00:00Z");
    object["spec"]["extraOvdcNetworks"] = json!([]);
    // Defaulted, as any CREATE.
    let mutated = answer(&app, Endpoint::Mutate, &create);
    assert!(mutated["patch"].is_string(), "{mutated}");
    // And a rule it breaks still denies.
    create["request"]["object"]["spec"]["extraOvdcNetworks"] =
        json!(["storage-net", "storage-net"]);
    let response = answer(&app, Endpoint::Validate, &create);
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(causes(&response), ["spec.extraOvdcNetworks[1]"]);
    assert!(!warnings(&response).contains("being deleted"), "{response}");
}

/// A configuration serving `module` for VCDMachines under `onPolicyFailure: Allow`, with a
/// 3 MiB input cap.
fn fail_open(dir: &Path, module: &[u8], extra: &str) -> ServeConfig {
    std::fs::write(dir.join("policy.wasm"), module).expect("write module");
    let text = format!(
        "onPolicyFailure: Allow\nmaxRequestBytes: 4Mi\n{extra}\npolicies:\n  VCDMachine:\n    - {{path: policy.wasm, memory: 8Mi, maxInputBytes: 3Mi}}\nclusters: {{source: Static, files: [{}]}}\n",
        workspace().join("examples/cluster.yaml").display()
    );
    std::fs::write(dir.join("nicpolicy.yaml"), text).expect("write config");
    ServeConfig::read(&dir.join("nicpolicy.yaml")).expect("config is valid")
}

#[test]
fn labels_that_make_the_policy_hit_its_memory_limit_are_denied_under_allow() {
    let dir = scratch("memory-on-labels");
    // A policy that hits its memory limit on every request.
    let mut greedy = Module::evaluating("(drop (memory.grow (i32.const 4096))) unreachable");
    greedy.pages = 64; // room for the input: the limit is hit by the evaluation itself
    let greedy = greedy.wasm();
    let app = app(fail_open(&dir, &greedy, ""));
    // An ordinary machine: the policy's own fault, admitted unchecked as configured.
    let response = answer(
        &app,
        Endpoint::Validate,
        &fixture("vcdmachine-create-worker"),
    );
    assert_eq!(response["allowed"], true, "{response}");
    assert!(warnings(&response).contains("memory limit"), "{response}");
    // The same machine carrying 2.5 MiB of labels (valid labels: 63-character values):
    // the request's fault, denied naming the part.
    let mut review = fixture("vcdmachine-create-worker");
    let labels = review["request"]["object"]["metadata"]["labels"]
        .as_object_mut()
        .unwrap();
    for i in 0..28_000 {
        labels.insert(
            format!("inventory.example.net/k{i:05}"),
            json!("x".repeat(63)),
        );
    }
    let response = answer(&app, Endpoint::Validate, &review);
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(causes(&response), ["metadata.labels"]);
    assert!(message(&response).contains("memory limit"), "{response}");
}

#[test]
fn a_kind_with_no_chain_is_never_admitted_unchecked() {
    let dir = scratch("not-served");
    let config = fail_open(&dir, &Module::allowing().wasm(), "");
    let app = app(config);
    let review = fixture("vcdmachinetemplate-create-worker");
    let body = serde_json::to_vec(&review).expect("JSON");
    let answer = app
        .reviewer()
        .review(Endpoint::Validate, ObjectKind::VcdMachineTemplate, &body);
    let body: Value = serde_json::from_slice(&answer.body).expect("JSON answer");
    assert_eq!(body["response"]["allowed"], false, "{body}");
    assert!(
        message(&body["response"]).contains("no policy is configured for VCDMachineTemplate"),
        "{body}"
    );
}

#[test]
fn a_review_that_found_every_slot_busy_is_never_admitted_unchecked() {
    let dir = scratch("busy");
    let app = app(fail_open(&dir, &Module::allowing().wasm(), ""));
    let review = fixture("vcdmachine-create-worker");
    let body = serde_json::to_vec(&review).expect("JSON");
    let answer = app.reviewer().busy(
        Endpoint::Validate,
        M,
        &body,
        std::time::Duration::from_millis(2000),
    );
    let answered: Value = serde_json::from_slice(&answer.body).expect("JSON answer");
    let response = &answered["response"];
    assert_eq!(response["allowed"], false, "{answered}");
    assert_eq!(response["status"]["code"], 503);
    // An object being deleted still finishes.
    let mut deleting = fixture("vcdmachine-update-provisioned");
    deleting["request"]["object"]["metadata"]["deletionTimestamp"] = json!("2026-12-04T09:00:00Z");
    let body = serde_json::to_vec(&deleting).expect("JSON");
    let answer = app.reviewer().busy(
        Endpoint::Validate,
        M,
        &body,
        std::time::Duration::from_millis(2000),
    );
    let answered: Value = serde_json::from_slice(&answer.body).expect("JSON answer");
    assert_eq!(answered["response"]["allowed"], true, "{answered}");
}
