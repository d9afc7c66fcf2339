//! `nicpolicy audit` and `nicpolicy eval` of several machines, over the multi-cluster folders of
//! `tests/fixtures/audit/`: a GitOps repository of rendered clusterctl outputs and kubectl
//! exports, and a ClusterClass.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn nicpolicy(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nicpolicy"))
        .args(args)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .env(
            "NICPOLICY_CACHE_DIR",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("audit-cache"),
        )
        .output()
        .expect("nicpolicy runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|err| panic!("{err}: {}", stdout(output)))
}

/// `(kind, name) -> result` of every object of a JSON audit report.
fn results(report: &Value) -> Vec<(String, String, String)> {
    let mut all = Vec::new();
    for cluster in report["clusters"].as_array().expect("clusters") {
        for object in cluster["objects"].as_array().expect("objects") {
            all.push((
                object["kind"].as_str().unwrap_or("").to_string(),
                object["name"].as_str().unwrap_or("").to_string(),
                object["result"].as_str().unwrap_or("").to_string(),
            ));
        }
    }
    all.sort();
    all
}

#[test]
fn a_folder_of_clusters_is_audited_machine_by_machine() {
    let output = nicpolicy(&["audit", "tests/fixtures/audit/fleet", "-o", "json"]);
    assert_eq!(output.status.code(), Some(1), "a machine is denied");
    let report = json(&output);
    let expected = [
        ("VCDMachine", "edge-ams1-worker-0", "allowed"),
        ("VCDMachine", "edge-ams1-worker-legacy", "skipped"),
        ("VCDMachine", "prod-us1-md-0-4hx8c", "allowed"),
        ("VCDMachine", "prod-us1-md-0-p2k9z", "denied"),
        ("VCDMachineTemplate", "prod-eu1-control-plane", "allowed"),
        ("VCDMachineTemplate", "prod-eu1-md-0", "allowed"),
        ("VCDMachineTemplate", "prod-us1-md-0", "denied"),
    ]
    .map(|(k, n, r)| (k.to_string(), n.to_string(), r.to_string()));
    assert_eq!(results(&report), expected);
    assert_eq!(report["summary"]["objects"], 7);
    assert_eq!(report["summary"]["clusters"], 3);
    assert_eq!(report["summary"]["reasons"]["Duplicate"], 2);
    assert_eq!(report["summary"]["rules"]["capvcd/primary-repeated"], 1);
    // Grouped by cluster: prod-us1's VCDCluster has another name, found through the Cluster.
    let clusters: Vec<&str> = report["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["cluster"]["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(clusters, ["edge-ams1", "prod-eu1", "prod-us1"]);
}

#[test]
fn the_table_says_why_and_totals_by_rule() {
    let output = nicpolicy(&[
        "audit",
        "tests/fixtures/audit/fleet",
        "--inventory",
        "examples/inventory.yaml",
    ]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(text.contains("Cluster prod-us1/prod-us1"), "{text}");
    assert!(
        text.contains("spec.template.spec.extraOvdcNetworks[2] (Duplicate, capvcd/duplicate)"),
        "{text}"
    );
    // The edge cluster's network is not in the inventory.
    assert!(
        text.contains("cluster.spec.ovdcNetwork (NotFound, capvcd/inventory)"),
        "{text}"
    );
    assert!(
        text.contains("7 machines in 3 clusters: 3 allowed, 3 denied, 1 skipped"),
        "{text}"
    );
    assert!(
        text.contains(
            "Violations by reason:\n  Duplicate     2\n  NotFound      1\nViolations by rule:\n  \
             capvcd/duplicate         1\n  capvcd/inventory         1\n  \
             capvcd/primary-repeated  1\n"
        ),
        "{text}"
    );
}

#[test]
fn a_cluster_class_checks_its_templates_and_a_candidate_shows_its_changes() {
    let output = nicpolicy(&[
        "audit",
        "tests/fixtures/audit/clusterclass",
        "--inventory",
        "examples/inventory.yaml",
        "--candidate",
        "builtin:capvcd",
        "--candidate-settings",
        "tests/fixtures/audit/candidate-settings.yaml",
        "-o",
        "json",
    ]);
    let report = json(&output);
    assert_eq!(output.status.code(), Some(1));
    let cluster = &report["clusters"][0];
    assert_eq!(cluster["cluster"]["kind"], "ClusterClass");
    assert_eq!(cluster["cluster"]["name"], "capvcd-multihomed");
    let objects = cluster["objects"].as_array().unwrap();
    let by_name = |name: &str| {
        objects
            .iter()
            .find(|o| o["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {report}"))
    };
    // The VCDClusterTemplate's network is every template's NIC 0.
    let worker = by_name("capvcd-multihomed-worker");
    assert_eq!(worker["decision"]["nics"][0]["network"], "mgmt-net");
    assert_eq!(worker["shadow"]["change"], "nicPlan");
    assert_eq!(
        worker["shadow"]["details"][0],
        "NIC 1: storage-net POOL VMXNET3 -> storage-net DHCP VMXNET3"
    );
    let typo = by_name("capvcd-multihomed-storage-worker");
    assert_eq!(typo["result"], "denied");
    assert_eq!(typo["shadow"]["change"], "same");
    assert_eq!(report["summary"]["candidate"]["nicPlan"], 1);
}

#[test]
fn a_candidate_with_fewer_nics_newly_denies() {
    let output = nicpolicy(&[
        "audit",
        "tests/fixtures/audit/fleet/prod-eu1",
        "--candidate",
        "builtin:capvcd",
        "--candidate-settings",
        "tests/fixtures/audit/candidate-settings.yaml",
        "--candidate",
        "builtin:capvcd",
    ]);
    let text = stdout(&output);
    // Allowed today (exit 0); the candidate (maxNics 3 and DHCP storage) re-plans md-0.
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(text.contains("CANDIDATE"), "{text}");
    let strict = nicpolicy(&[
        "audit",
        "tests/fixtures/audit/fleet/prod-eu1",
        "--candidate",
        "builtin:capvcd",
        "--candidate-settings",
        &scratch_settings("maxNics: 2\n"),
        "-o",
        "json",
    ]);
    let report = json(&strict);
    let md0 = report["clusters"][0]["objects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["name"] == "prod-eu1-md-0")
        .expect("md-0")
        .clone();
    assert_eq!(md0["result"], "allowed");
    assert_eq!(md0["shadow"]["change"], "newlyDenied");
    assert!(
        md0["shadow"]["details"][0]
            .as_str()
            .unwrap_or("")
            .starts_with("+ spec.template.spec.extraOvdcNetworks (TooMany)"),
        "{md0}"
    );
}

fn scratch_settings(text: &str) -> String {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("audit-files");
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let path = dir.join(format!("settings-{}.yaml", text.len()));
    std::fs::write(&path, text).expect("scratch file");
    path.display().to_string()
}

#[test]
fn junit_has_a_suite_per_cluster_and_a_case_per_machine() {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("audit-junit.xml");
    let output = nicpolicy(&[
        "audit",
        "tests/fixtures/audit/fleet",
        "--junit",
        path.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1));
    let xml = std::fs::read_to_string(&path).expect("junit written");
    assert_eq!(xml.matches("<testsuite ").count(), 3, "{xml}");
    assert_eq!(xml.matches("<testcase ").count(), 7, "{xml}");
    assert_eq!(xml.matches("<failure ").count(), 2, "{xml}");
    assert_eq!(xml.matches("<skipped ").count(), 1, "{xml}");
}

#[test]
fn eval_of_a_clusterctl_output_gives_one_block_per_machine() {
    let output = nicpolicy(&[
        "eval",
        "--machine",
        "tests/fixtures/audit/fleet/prod-eu1/cluster.yaml",
    ]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert_eq!(text.matches("Machine:   ").count(), 2, "{text}");
    // The KubeadmControlPlane's template is checked as a control-plane machine.
    assert!(
        text.contains("VCDMachineTemplate prod-eu1/prod-eu1-control-plane (Create, control plane)"),
        "{text}"
    );
    assert!(
        text.ends_with("2 machines in 1 cluster: 2 allowed\n"),
        "{text}"
    );
    // A list of items naming their object, each with its decision.
    let output = nicpolicy(&[
        "eval",
        "--cluster",
        "tests/fixtures/audit/fleet/prod-us1/cluster.yaml",
        "--machine",
        "tests/fixtures/audit/fleet/prod-us1/machines.yaml",
        "-o",
        "json",
    ]);
    assert_eq!(output.status.code(), Some(1), "one machine is denied");
    let items = json(&output);
    let items = items.as_array().expect("a list");
    assert_eq!(items.len(), 2);
    assert_eq!(items[0]["name"], "prod-us1-md-0-4hx8c");
    assert_eq!(items[0]["decision"]["allowed"], true);
    assert_eq!(items[1]["decision"]["violations"][0]["reason"], "Duplicate");
}

#[test]
fn eval_reads_a_null_spec_and_answers_old_versions_per_object() {
    let output = nicpolicy(&[
        "eval",
        "--machine",
        "tests/fixtures/audit/fleet/edge/samples.yaml",
    ]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(
        text.contains("VCDMachine edge/edge-ams1-worker-0 (Create, worker)"),
        "{text}"
    );
    assert!(
        text.contains(
            "Decision:  not checked: infrastructure.cluster.x-k8s.io/v1beta1 has no network fields"
        ),
        "{text}"
    );
    // --machine-name still picks one, with the single-machine output.
    let one = nicpolicy(&[
        "eval",
        "--machine",
        "tests/fixtures/audit/fleet/edge/samples.yaml",
        "--machine-name",
        "edge-ams1-worker-0",
        "-o",
        "json",
    ]);
    assert_eq!(one.status.code(), Some(0));
    assert_eq!(json(&one)["nics"][0]["network"], "edge-mgmt-net");
}

#[test]
fn unreadable_files_are_named_without_stopping_the_run() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("audit-broken");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        "../tests/fixtures/audit/fleet/prod-eu1/cluster.yaml",
        dir.join("prod-eu1.yaml"),
    )
    .unwrap();
    std::fs::write(dir.join("values.yaml"), "replicas: {{ .Values.replicas }\n").unwrap();
    let output = nicpolicy(&["audit", dir.to_str().unwrap()]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(2), "{text}");
    assert!(
        text.contains("2 machines in 1 cluster: 2 allowed"),
        "{text}"
    );
    assert!(text.contains("Files not read:"), "{text}");
    // The template's `{{` opens a flow mapping that never closes: the parser's own position.
    assert!(text.contains("values.yaml:2:1"), "{text}");
}

#[test]
fn the_shipped_candidate_configuration_loads() {
    // The controller's candidate ConfigMap has the webhook's format: `review` loads it the same
    // way (every policy compiled, settings checked) and decides with it.
    let output = nicpolicy(&[
        "review",
        "--config",
        "config/controller/candidate/nicpolicy.yaml",
        "--request",
        "tests/fixtures/admission/vcdmachine-create-invalid.json",
        "--clusters",
        "examples/cluster.yaml",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    assert_eq!(json(&output)["response"]["allowed"], false);
}

#[test]
fn audit_judges_a_vcdmachine_by_its_owner_machine_in_the_files() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("audit-owner-machine");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let cluster = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/cluster.yaml"),
    )
    .expect("example cluster");
    std::fs::write(dir.join("cluster.yaml"), cluster).expect("write");
    // What `kubectl get machines,vcdmachines -o yaml` shows: a control-plane Machine and its
    // VCDMachine, labelled as a worker, on the DMZ network control planes may not use.
    std::fs::write(
        dir.join("machines.yaml"),
        "apiVersion: cluster.x-k8s.io/v1beta1
kind: Machine
metadata:
  name: prod-eu1-control-plane-7xk2p
  namespace: prod-eu1
  labels: {cluster.x-k8s.io/cluster-name: prod-eu1, cluster.x-k8s.io/control-plane: \"\"}
spec: {clusterName: prod-eu1}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: VCDMachine
metadata:
  name: prod-eu1-control-plane-7xk2p
  namespace: prod-eu1
  labels: {cluster.x-k8s.io/cluster-name: prod-eu1, cluster.x-k8s.io/deployment-name: prod-eu1-md-0}
  ownerReferences:
    - {apiVersion: cluster.x-k8s.io/v1beta1, kind: Machine, name: prod-eu1-control-plane-7xk2p, uid: m-1, controller: true}
spec:
  extraOvdcNetworks: [storage-net, ext-dmz-net]
",
    )
    .expect("write");
    let settings = scratch_settings(
        "controlPlane: {required: [mgmt-net], forbidden: [ext-dmz-net], allowed: [storage-net, backup-net]}\n\
         worker: {allowed: [storage-net, workload-net, backup-net, ext-dmz-net], defaults: [storage-net, workload-net]}\n",
    );
    let path = dir.to_string_lossy().into_owned();
    let output = nicpolicy(&[
        "audit",
        &path,
        "--policy",
        "builtin:role-based",
        "--settings",
        &settings,
        "-o",
        "json",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    let report = json(&output);
    assert_eq!(
        results(&report),
        [(
            "VCDMachine".to_string(),
            "prod-eu1-control-plane-7xk2p".to_string(),
            "denied".to_string()
        )]
    );
    assert!(
        report.to_string().contains("spec.extraOvdcNetworks[1]"),
        "{report}"
    );
}
