//! nicpolicy serve behind a real kube-apiserver: the shipped webhook configurations and RBAC,
//! defaulting and validation as kube-apiserver applies them, kubectl's printed denials, the
//! watch-fed cluster caches, hot reload under load and the failure policy.
//!
//! Every case here holds whatever a machine without a known cluster or a stored bad spec gets;
//! those cases are in lifecycle.rs.

use std::time::{Duration, Instant};

use nicpolicy_e2e::fixtures::{
    self, api, cluster, cluster_namespace, create, extras, get, plan, plan_networks, planned_on,
    refusal, worker, CACHE_DEADLINE, WORKER_DEFAULTS,
};
use nicpolicy_e2e::webhook::{edit_config, shipped_config};
use nicpolicy_e2e::{shared, Webhook};
use serde_json::{json, Value};

#[tokio::test]
async fn the_shipped_service_account_reads_clusters_machines_and_crds_and_nothing_else() {
    let plane = shared();
    let dir = shipped_config(&plane, "rbac");
    // Readiness means both watches listed their kinds with the shipped ClusterRole.
    let _webhook = Webhook::start(&plane, &dir).await;
    let kubectl = plane.kubectl();
    let who = "--as=system:serviceaccount:nicpolicy-system:nicpolicy-webhook";
    for (verb, resource, expected) in [
        ("watch", "clusters.cluster.x-k8s.io", "yes"),
        // A VCDMachine's cluster and role are its owner Machine's.
        ("watch", "machines.cluster.x-k8s.io", "yes"),
        ("update", "machines.cluster.x-k8s.io", "no"),
        ("list", "vcdclusters.infrastructure.cluster.x-k8s.io", "yes"),
        ("get", "vcdclusters.infrastructure.cluster.x-k8s.io", "yes"),
        // The CAPVCD CRDs' served versions: is any write sent to nicpolicy at all?
        (
            "watch",
            "customresourcedefinitions.apiextensions.k8s.io",
            "yes",
        ),
        (
            "update",
            "customresourcedefinitions.apiextensions.k8s.io",
            "no",
        ),
        ("list", "vcdmachines.infrastructure.cluster.x-k8s.io", "no"),
        ("update", "clusters.cluster.x-k8s.io", "no"),
        ("get", "secrets", "no"),
    ] {
        let output = kubectl.run(&["auth", "can-i", verb, resource, "--all-namespaces", who]);
        assert_eq!(output.stdout.trim(), expected, "can-i {verb} {resource}");
    }
}

#[tokio::test]
async fn valid_machines_and_templates_are_stored_defaulted_with_their_nic_plan() {
    let plane = shared();
    let kubectl = plane.kubectl();
    cluster_namespace(&kubectl, "prod-eu1");
    let webhook = Webhook::registered(&plane, "valid").await;
    let client = plane.client().await;
    let reviews_before = webhook.reviews_answered().await;

    // A worker listing no extra networks gets the site's defaults, as a controller creates it.
    let stored = create(
        &client,
        &worker("prod-eu1", "prod-eu1-md-0-x7k2p", Some("prod-eu1"), None),
        false,
    )
    .await
    .expect("a valid worker is admitted");
    assert_eq!(extras(&stored), WORKER_DEFAULTS);
    assert_eq!(
        plan_networks(&stored),
        ["mgmt-net", "storage-net", "workload-net"]
    );
    let plan = plan(&stored).expect("NIC plan annotation");
    assert_eq!(plan["policy"], "nicpolicy-role-based");
    assert_eq!(plan["nics"][0]["primary"], true);
    // The shipped settings plan what stock CAPVCD builds.
    assert_eq!(plan["nics"][1]["ipAllocationMode"], "POOL");
    // What a later read sees is what was stored.
    let read = get(&client, "prod-eu1", "VCDMachine", "prod-eu1-md-0-x7k2p")
        .await
        .expect("stored");
    assert_eq!(extras(&read), WORKER_DEFAULTS);

    // A control-plane machine keeps its own list.
    let cp = fixtures::control_plane(
        "prod-eu1",
        "prod-eu1-control-plane-9zqtd",
        "prod-eu1",
        &["storage-net"],
    );
    let stored = create(&client, &cp, false)
        .await
        .expect("a valid control-plane machine");
    assert_eq!(extras(&stored), ["storage-net"]);
    assert_eq!(plan_networks(&stored), ["mgmt-net", "storage-net"]);

    // A template without the control-plane label, as clusterctl writes both kinds: it may serve
    // either role, so it is not defaulted (each VCDMachine cloned from it is, by its own role);
    // the plan sits on the template's own metadata.
    let stored = create(
        &client,
        &fixtures::template("prod-eu1", "prod-eu1-md-0", Some("prod-eu1"), None),
        false,
    )
    .await
    .expect("a valid template");
    assert_eq!(extras(&stored), Vec::<String>::new());
    assert_eq!(plan_networks(&stored), ["mgmt-net"]);

    // kubectl, as a person applies a file: the same defaults.
    let machine = worker(
        "prod-eu1",
        "prod-eu1-md-0-k2m9w",
        Some("prod-eu1"),
        Some(&["workload-net"]),
    );
    kubectl.apply(&machine.to_string());
    let stored = kubectl.ok(&[
        "get",
        "vcdmachine",
        "-n",
        "prod-eu1",
        "prod-eu1-md-0-k2m9w",
        "-o",
        "json",
    ]);
    let stored: Value = serde_json::from_str(&stored).expect("JSON");
    assert_eq!(extras(&stored), ["workload-net"]);
    assert_eq!(plan_networks(&stored), ["mgmt-net", "workload-net"]);

    // Server-side dry run: the same answer, nothing stored.
    let dry = create(
        &client,
        &worker("prod-eu1", "prod-eu1-md-0-dryrun", Some("prod-eu1"), None),
        true,
    )
    .await
    .expect("admitted in a dry run");
    assert_eq!(extras(&dry), WORKER_DEFAULTS);
    assert_eq!(
        plan_networks(&dry),
        ["mgmt-net", "storage-net", "workload-net"]
    );
    assert!(
        get(&client, "prod-eu1", "VCDMachine", "prod-eu1-md-0-dryrun")
            .await
            .is_none()
    );

    // CAPVCD v1.3.2's CRDs serve v1beta1 too: a v1beta1 write reaches the webhook converted to
    // v1beta2 (matchPolicy: Equivalent) and is defaulted and planned like any other.
    let mut older = worker("prod-eu1", "prod-eu1-md-0-v1b1", Some("prod-eu1"), None);
    older["apiVersion"] = json!("infrastructure.cluster.x-k8s.io/v1beta1");
    kubectl.apply(&older.to_string());
    let stored = get(&client, "prod-eu1", "VCDMachine", "prod-eu1-md-0-v1b1")
        .await
        .expect("stored");
    assert_eq!(extras(&stored), WORKER_DEFAULTS);
    assert_eq!(
        plan_networks(&stored),
        ["mgmt-net", "storage-net", "workload-net"]
    );

    // Every write above was a review, on the CRDs sites run, and both kinds are guarded.
    let reviewed = webhook.reviews_answered().await - reviews_before;
    assert!(reviewed >= 12, "only {reviewed} reviews answered");
    let metrics = webhook.metrics().await;
    for kind in ["VCDMachine", "VCDMachineTemplate"] {
        let line = format!("nicpolicy_unguarded_kinds{{kind=\"{kind}\"}} 0");
        assert!(metrics.contains(&line), "no {line:?} in:\n{metrics}");
    }
}

/// The invalid machine of examples/invalid-machine.yaml: a repeated network, the primary listed
/// again, a misspelt network.
fn invalid_machine(namespace: &str, name: &str) -> Value {
    worker(
        namespace,
        name,
        Some(namespace),
        Some(&[
            "storage-net",
            "workload-net",
            "storage-net",
            "mgmt-net",
            "storag-net",
        ]),
    )
}

const INVALID_FIELDS: [&str; 3] = [
    "spec.extraOvdcNetworks[2]",
    "spec.extraOvdcNetworks[3]",
    "spec.extraOvdcNetworks[4]",
];

#[tokio::test]
async fn invalid_machines_are_refused_with_every_field_as_kubectl_prints_it() {
    let plane = shared();
    let kubectl = plane.kubectl();
    cluster_namespace(&kubectl, "prod-eu2");
    let _webhook = Webhook::registered(&plane, "invalid").await;

    // Eleven NICs (the primary and ten extra networks), more than a Cloud Director VM takes
    // and than the shipped maxNics: refused at v1beta2, the count and each unknown network
    // named.
    let big = worker(
        "prod-eu2",
        "prod-eu2-md-0-w9x2c",
        Some("prod-eu2"),
        Some(&[
            "storage-net",
            "workload-net",
            "backup-net",
            "ext-dmz-net",
            "lab-net-1",
            "lab-net-2",
            "lab-net-3",
            "lab-net-4",
            "lab-net-5",
            "lab-net-6",
        ]),
    );
    assert_eq!(big["apiVersion"], "infrastructure.cluster.x-k8s.io/v1beta2");
    let client = plane.client().await;
    let err = create(&client, &big, false)
        .await
        .expect_err("eleven NICs are refused");
    let (code, _, message, causes) = refusal(&err);
    assert_eq!(code, 422, "{message}");
    let fields: Vec<&str> = causes.iter().map(|(field, _)| field.as_str()).collect();
    assert!(fields.contains(&"spec.extraOvdcNetworks"), "{fields:?}");
    for i in 4..10 {
        let field = format!("spec.extraOvdcNetworks[{i}]");
        assert!(
            fields.contains(&field.as_str()),
            "{field} missing: {fields:?}"
        );
    }

    // kubectl apply, as a person: the denial names every field, like a schema error.
    let machine = invalid_machine("prod-eu2", "prod-eu2-md-0-h3v8r");
    let applied = kubectl.run_with(&["apply", "-f", "-"], Some(&machine.to_string()));
    assert!(!applied.success, "an invalid machine was admitted");
    let printed = applied.stderr.trim();
    eprintln!("kubectl printed this denial:\n{printed}");
    // kubectl lists the causes of an Invalid status one per line, like a schema error.
    assert!(
        printed.starts_with(r#"The VCDMachine "prod-eu2-md-0-h3v8r" is invalid:"#),
        "{printed}"
    );
    for field in INVALID_FIELDS {
        assert!(
            printed.contains(&format!("\n* {field}: network")),
            "{field} missing from: {printed}"
        );
    }
    assert!(
        printed.contains(r#"network "storage-net" is already listed at spec.extraOvdcNetworks[0]"#),
        "{printed}"
    );
    assert!(
        printed.contains(r#"did you mean "storage-net"?"#),
        "{printed}"
    );

    // Server-side dry run: the same denial.
    let dry = kubectl.run_with(
        &["apply", "--dry-run=server", "-f", "-"],
        Some(&machine.to_string()),
    );
    assert!(!dry.success);
    for field in INVALID_FIELDS {
        assert!(
            dry.stderr.contains(field),
            "{field} missing from the dry run: {}",
            dry.stderr
        );
    }

    // kube-rs, as a controller: 422 Invalid with one cause per field.
    for dry_run in [false, true] {
        let err = create(&client, &machine, dry_run)
            .await
            .expect_err("refused");
        let (code, reason, message, causes) = refusal(&err);
        assert_eq!((code, reason.as_str()), (422, "Invalid"), "{message}");
        assert!(
            message.contains(r#"admission webhook "vvcdmachine.nicpolicy.io" denied the request"#),
            "{message}"
        );
        let fields: Vec<&str> = causes.iter().map(|(field, _)| field.as_str()).collect();
        for field in INVALID_FIELDS {
            assert!(
                fields.contains(&field),
                "{field} not among the causes {causes:?}"
            );
        }
    }
    assert!(
        get(&client, "prod-eu2", "VCDMachine", "prod-eu2-md-0-h3v8r")
            .await
            .is_none()
    );

    // A template with the same list: refused by its own webhook.
    let mut template = fixtures::template("prod-eu2", "prod-eu2-md-0", Some("prod-eu2"), None);
    template["spec"]["template"]["spec"] = machine["spec"].clone();
    let applied = kubectl.run_with(&["apply", "-f", "-"], Some(&template.to_string()));
    assert!(!applied.success);
    // After the warnings kubectl prints first (the template has no control-plane label, so the
    // control-plane rules it breaks are warnings).
    assert!(
        applied
            .stderr
            .lines()
            .any(|line| line.starts_with(r#"The VCDMachineTemplate "prod-eu2-md-0" is invalid:"#)),
        "{}",
        applied.stderr
    );
    assert!(
        applied
            .stderr
            .contains("spec.template.spec.extraOvdcNetworks[2]"),
        "{}",
        applied.stderr
    );
}

#[tokio::test]
async fn a_provisioned_machine_keeps_its_nics_and_can_be_relabelled_and_deleted() {
    let plane = shared();
    let kubectl = plane.kubectl();
    cluster_namespace(&kubectl, "prod-eu3");
    let _webhook = Webhook::registered(&plane, "update").await;
    let client = plane.client().await;

    let mut machine = worker(
        "prod-eu3",
        "prod-eu3-md-0-p4n7c",
        Some("prod-eu3"),
        Some(&WORKER_DEFAULTS),
    );
    machine["metadata"]["finalizers"] = json!(["vcdmachine.infrastructure.cluster.x-k8s.io"]);
    create(&client, &machine, false)
        .await
        .expect("a valid worker is admitted");
    // CAPVCD writes the VM's id once it exists.
    kubectl.ok(&[
        "patch", "vcdmachine", "-n", "prod-eu3", "prod-eu3-md-0-p4n7c", "--type=merge", "-p",
        r#"{"spec":{"providerID":"vmware-cloud-director://urn:vcloud:vm:4b1d9f2e-8c3a-4e55-9a61-0c2f7d8e1a93"}}"#,
    ]);

    // Changing the NICs of the running VM is refused: CAPVCD would renumber them.
    let changed = kubectl.run(&[
        "patch",
        "vcdmachine",
        "-n",
        "prod-eu3",
        "prod-eu3-md-0-p4n7c",
        "--type=merge",
        "-p",
        r#"{"spec":{"extraOvdcNetworks":["storage-net","workload-net","backup-net"]}}"#,
    ]);
    assert!(
        !changed.success,
        "a NIC change on a provisioned machine was admitted"
    );
    assert!(
        changed.stderr.starts_with(
            r#"The VCDMachine "prod-eu3-md-0-p4n7c" is invalid: spec.extraOvdcNetworks: "#
        ),
        "{}",
        changed.stderr
    );
    assert!(
        changed.stderr.contains("the machine is provisioned"),
        "{}",
        changed.stderr
    );
    let stored = get(&client, "prod-eu3", "VCDMachine", "prod-eu3-md-0-p4n7c")
        .await
        .expect("stored");
    assert_eq!(extras(&stored), WORKER_DEFAULTS);

    // Relabelling (what Cluster API does all the time) goes through.
    kubectl.ok(&[
        "label",
        "vcdmachine",
        "-n",
        "prod-eu3",
        "prod-eu3-md-0-p4n7c",
        "topology.example.net/rack=r12",
    ]);

    // Deleting: the finalizer holds the object until CAPVCD removes it, with an UPDATE.
    kubectl.ok(&[
        "delete",
        "vcdmachine",
        "-n",
        "prod-eu3",
        "prod-eu3-md-0-p4n7c",
        "--wait=false",
    ]);
    let deleting = get(&client, "prod-eu3", "VCDMachine", "prod-eu3-md-0-p4n7c")
        .await
        .expect("held by its finalizer");
    assert!(deleting["metadata"]["deletionTimestamp"].is_string());
    kubectl.ok(&[
        "patch",
        "vcdmachine",
        "-n",
        "prod-eu3",
        "prod-eu3-md-0-p4n7c",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ]);
    assert!(
        get(&client, "prod-eu3", "VCDMachine", "prod-eu3-md-0-p4n7c")
            .await
            .is_none(),
        "deletion finished"
    );

    // An unprovisioned machine may still change its networks.
    create(
        &client,
        &worker(
            "prod-eu3",
            "prod-eu3-md-0-q8w2e",
            Some("prod-eu3"),
            Some(&["storage-net"]),
        ),
        false,
    )
    .await
    .expect("admitted");
    kubectl.ok(&[
        "patch",
        "vcdmachine",
        "-n",
        "prod-eu3",
        "prod-eu3-md-0-q8w2e",
        "--type=merge",
        "-p",
        r#"{"spec":{"extraOvdcNetworks":["storage-net","backup-net"]}}"#,
    ]);
    let stored = get(&client, "prod-eu3", "VCDMachine", "prod-eu3-md-0-q8w2e")
        .await
        .expect("stored");
    assert_eq!(
        plan_networks(&stored),
        ["mgmt-net", "storage-net", "backup-net"]
    );
}

#[tokio::test]
async fn clusters_created_and_changed_after_start_are_used_within_seconds() {
    let plane = shared();
    let kubectl = plane.kubectl();
    let _webhook = Webhook::registered(&plane, "caches").await;
    let client = plane.client().await;

    // Created after the webhook started: found through the watches.
    cluster_namespace(&kubectl, "prod-us1");
    let took = planned_on(&client, "prod-us1", "prod-us1", "mgmt-net", CACHE_DEADLINE).await;
    eprintln!(
        "e2e: a new cluster was used after {:.2} s",
        took.as_secs_f64()
    );

    // The VCDCluster's primary network changes: the next reviews plan on the new one.
    kubectl.ok(&[
        "patch",
        "vcdcluster",
        "-n",
        "prod-us1",
        "prod-us1",
        "--type=merge",
        "-p",
        r#"{"spec":{"ovdcNetwork":"backup-net"}}"#,
    ]);
    let took = planned_on(
        &client,
        "prod-us1",
        "prod-us1",
        "backup-net",
        CACHE_DEADLINE,
    )
    .await;
    eprintln!(
        "e2e: a changed ovdcNetwork was used after {:.2} s",
        took.as_secs_f64()
    );
    let stored = create(
        &client,
        &worker("prod-us1", "prod-us1-md-0-t5r8y", Some("prod-us1"), None),
        false,
    )
    .await
    .expect("admitted");
    assert_eq!(
        plan_networks(&stored),
        ["backup-net", "storage-net", "workload-net"]
    );

    // A Cluster pointing at another VCDCluster: followed through spec.infrastructureRef.
    kubectl.apply(
        &cluster("prod-us1", "prod-us1-blue", "workload-net")
            .replace("ovdcNetwork: workload-net", "ovdcNetwork: mgmt-net"),
    );
    planned_on(
        &client,
        "prod-us1",
        "prod-us1-blue",
        "mgmt-net",
        CACHE_DEADLINE,
    )
    .await;
}

#[tokio::test]
async fn a_stopped_webhook_makes_kube_apiserver_apply_the_failure_policy() {
    let plane = shared();
    let kubectl = plane.kubectl();
    cluster_namespace(&kubectl, "prod-eu4");
    let mut webhook = Webhook::registered(&plane, "stopped").await;
    let client = plane.client().await;

    webhook.stop();
    // failurePolicy: Fail: nothing is admitted unchecked while no replica answers.
    let machine = worker("prod-eu4", "prod-eu4-md-0-b6v1x", Some("prod-eu4"), None);
    let refused = kubectl.run_with(&["create", "-f", "-"], Some(&machine.to_string()));
    assert!(
        !refused.success,
        "a machine was admitted while the webhook was down"
    );
    assert!(
        refused
            .stderr
            .contains(r#"failed calling webhook "mvcdmachine.nicpolicy.io""#),
        "{}",
        refused.stderr
    );
    assert!(
        get(&client, "prod-eu4", "VCDMachine", "prod-eu4-md-0-b6v1x")
            .await
            .is_none()
    );
    // Objects nicpolicy does not review are not affected.
    kubectl.apply(&cluster("prod-eu4", "prod-eu4-green", "mgmt-net"));

    // Back up: reviews resume.
    webhook.restart().await;
    let stored = create(&client, &machine, false)
        .await
        .expect("admitted once the webhook is back");
    assert_eq!(extras(&stored), WORKER_DEFAULTS);
}

/// A configuration swapped in while machines are being created: every create succeeds and every
/// stored machine is wholly the old policy's or wholly the new one's.
#[tokio::test]
async fn a_policy_replaced_while_machines_are_created_drops_no_create() {
    let plane = shared();
    let kubectl = plane.kubectl();
    cluster_namespace(&kubectl, "prod-eu5");
    let dir = shipped_config(&plane, "reload");
    let mut webhook = Webhook::start(&plane, &dir).await;
    webhook.register().await;

    // The new version: the CAPVCD policy alone (no site defaults), written beside the old files
    // first and then switched to in one rename, as a ConfigMap update swaps its files.
    let exported = std::process::Command::new(&nicpolicy_e2e::binaries().nicpolicy)
        .args(["export", "capvcd", "-o"])
        .arg(dir.join("capvcd.wasm"))
        .status()
        .expect("export runs");
    assert!(exported.success());
    let next = format!(
        "{}\npolicies:\n  VCDMachine:\n    - {{path: capvcd.wasm, timeout: 250ms, memory: 64Mi, settings: {{maxNics: 6}}}}\n  VCDMachineTemplate:\n    - {{path: capvcd.wasm, timeout: 250ms, memory: 64Mi, settings: {{maxNics: 6}}}}\n",
        std::fs::read_to_string(dir.join("nicpolicy.yaml"))
            .expect("config")
            .split("\npolicies:")
            .next()
            .expect("the shipped configuration lists policies last")
    );
    std::fs::write(dir.join("nicpolicy.next"), next).expect("write");

    let client = plane.client().await;
    // Machines are created three at a time, from before the swap until the new version has
    // answered a few times (the files are checked every 2 s), bounded in time.
    const AT_ONCE: usize = 3;
    const NEW_ANSWERS: usize = 9;
    const DEADLINE: Duration = Duration::from_secs(45);
    let start = Instant::now();
    let mut swapped = false;
    let mut results = Vec::new();
    let mut versions = std::collections::BTreeMap::<String, usize>::new();
    while versions.get("nicpolicy-capvcd").copied().unwrap_or(0) < NEW_ANSWERS {
        assert!(
            start.elapsed() < DEADLINE,
            "the new policy answered {versions:?} within {DEADLINE:?}:\n{}",
            webhook.log_tail(20)
        );
        if !swapped && start.elapsed() > Duration::from_millis(700) {
            std::fs::rename(dir.join("nicpolicy.next"), dir.join("nicpolicy.yaml")).expect("swap");
            swapped = true;
        }
        let mut batch = Vec::new();
        for _ in 0..AT_ONCE {
            let client = client.clone();
            let name = format!("prod-eu5-md-0-r{:03}", results.len() + batch.len());
            batch.push(tokio::spawn(async move {
                let machine = worker("prod-eu5", &name, Some("prod-eu5"), None);
                let created = create(&client, &machine, false).await;
                (name, created.map_err(|e| e.to_string()))
            }));
        }
        for handle in batch {
            let (name, result) = handle.await.expect("create task");
            let stored = result
                .unwrap_or_else(|err| panic!("create of {name} failed during the reload: {err}"));
            let policy = plan(&stored)
                .and_then(|p| p["policy"].as_str().map(str::to_string))
                .unwrap_or_default();
            // One answer, one version: the defaults and the plan come from the same policy.
            match policy.as_str() {
                "nicpolicy-role-based" => assert_eq!(extras(&stored), WORKER_DEFAULTS, "{name}"),
                "nicpolicy-capvcd" => assert_eq!(extras(&stored), Vec::<String>::new(), "{name}"),
                other => panic!("{name}: planned by {other:?}"),
            }
            *versions.entry(policy).or_default() += 1;
            results.push(name);
        }
    }
    eprintln!(
        "e2e: {} creates across the reload in {:.1} s, answers per policy version: {versions:?}",
        results.len(),
        start.elapsed().as_secs_f64()
    );
    assert!(
        versions.get("nicpolicy-role-based").copied().unwrap_or(0) >= AT_ONCE,
        "the old policy answered too few creates: {versions:?}"
    );
    assert!(
        webhook.log().contains("configuration reloaded"),
        "the reload is logged"
    );
    let listed = api(&client, "prod-eu5", "VCDMachine")
        .list(&Default::default())
        .await
        .expect("list");
    assert_eq!(listed.items.len(), results.len());
}

#[tokio::test]
async fn a_warn_mode_policy_admits_and_kubectl_prints_what_it_would_deny() {
    let plane = shared();
    let kubectl = plane.kubectl();
    cluster_namespace(&kubectl, "prod-eu8");
    // The shipped configuration with its VCDMachine policy in warn mode.
    let dir = shipped_config(&plane, "warn");
    let entry = "  VCDMachine:\n    - builtin: role-based\n";
    edit_config(
        &dir,
        "nicpolicy.yaml",
        entry,
        &format!("{entry}      mode: warn\n"),
    );
    let mut webhook = Webhook::start(&plane, &dir).await;
    webhook.register().await;

    // kubectl apply, as a person: created, with every would-be denial printed as a warning.
    let machine = invalid_machine("prod-eu8", "prod-eu8-md-0-w7t4n");
    let applied = kubectl.run_with(&["apply", "-f", "-"], Some(&machine.to_string()));
    eprintln!("kubectl printed:\n{}", applied.stderr.trim());
    assert!(applied.success, "{}", applied.stderr);
    assert!(
        applied
            .stdout
            .contains("vcdmachine.infrastructure.cluster.x-k8s.io/prod-eu8-md-0-w7t4n created"),
        "{}",
        applied.stdout
    );
    for field in INVALID_FIELDS {
        assert!(
            applied.stderr.contains(&format!(
                "Warning: nicpolicy (mode: warn): would be denied: {field}: "
            )),
            "{field} missing from: {}",
            applied.stderr
        );
    }
    // Stored as written: a warn-mode policy changes nothing (no defaults, no NIC plan).
    let client = plane.client().await;
    let stored = get(&client, "prod-eu8", "VCDMachine", "prod-eu8-md-0-w7t4n")
        .await
        .expect("created");
    assert_eq!(extras(&stored), extras(&machine));
    assert!(plan(&stored).is_none(), "{stored}");
    // A worker listing nothing keeps its empty list; kubectl says what would have been set.
    let bare = worker("prod-eu8", "prod-eu8-md-0-b2x9q", Some("prod-eu8"), None);
    let applied = kubectl.run_with(&["apply", "-f", "-"], Some(&bare.to_string()));
    assert!(applied.success, "{}", applied.stderr);
    assert!(
        applied.stderr.contains(
            "Warning: nicpolicy (mode: warn): not applied: [nicpolicy-role-based] would set spec.extraOvdcNetworks to [storage-net, workload-net]"
        ),
        "{}",
        applied.stderr
    );
    // The policy's own message about the defaults it applies says they were not applied.
    assert!(
        applied.stderr.contains(
            "Warning: nicpolicy (mode: warn), if enforced: [nicpolicy-role-based] spec.extraOvdcNetworks was empty"
        ),
        "{}",
        applied.stderr
    );
    let metrics = webhook.metrics().await;
    assert!(
        metrics.contains(r#"nicpolicy_warned_violations_total{kind="VCDMachine",policy="nicpolicy-role-based",reason="Duplicate"} 2"#),
        "{metrics}"
    );
    assert!(
        webhook
            .log()
            .contains("would have been denied (mode: warn)"),
        "the would-be denial is logged"
    );

    // Enforced by editing the file: the reload makes the same kind of machine denied.
    edit_config(
        &dir,
        "nicpolicy.yaml",
        "      mode: warn\n",
        "      mode: enforce\n",
    );
    let start = Instant::now();
    loop {
        let again = invalid_machine("prod-eu8", "prod-eu8-md-0-k5d3s");
        let applied = kubectl.run_with(&["apply", "-f", "-"], Some(&again.to_string()));
        if !applied.success {
            assert!(
                applied
                    .stderr
                    .starts_with(r#"The VCDMachine "prod-eu8-md-0-k5d3s" is invalid:"#),
                "{}",
                applied.stderr
            );
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "mode: enforce not picked up:\n{}",
            webhook.log_tail(20)
        );
        kubectl.run(&[
            "delete",
            "vcdmachine",
            "-n",
            "prod-eu8",
            "prod-eu8-md-0-k5d3s",
        ]);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// How much of a 1.5 MB etcd entry a VCDCluster's password may take: `spec.userContext` has no
/// length bound in CAPVCD's CRD.
const BIG_PASSWORD_BYTES: usize = 1_400_000;

/// What a webhook's peak resident memory may reach with 150 such VCDClusters on the API server,
/// whether it saw them created or listed them at start (before the caches kept only what is
/// read, and listed them 500 to a page: past the pod's 256Mi limit).
const BIG_CLUSTERS_PEAK_BYTES: u64 = 160 * 1024 * 1024;

#[tokio::test]
async fn big_vcdclusters_are_cached_by_the_fields_read_and_an_oversized_one_is_named() {
    use futures::StreamExt;

    let plane = shared();
    let kubectl = plane.kubectl();
    let namespace = "prod-ap1";
    fixtures::namespace(&kubectl, namespace);
    let mut running = Webhook::registered(&plane, "big-clusters-running").await;
    let client = plane.client().await;

    // 150 clusters whose VCDClusters each carry a 1.4 MB password, created while one webhook
    // runs (it sees them as watch events).
    let password = "p".repeat(BIG_PASSWORD_BYTES);
    let start = Instant::now();
    let created: Vec<()> = futures::stream::iter(0..150)
        .map(|i| {
            let client = client.clone();
            let password = password.clone();
            async move {
                let name = format!("{namespace}-big-{i:03}");
                for mut object in fixtures::yaml_objects(&cluster(namespace, &name, "backup-net")) {
                    if object["kind"] == "VCDCluster" {
                        object["spec"]["userContext"] =
                            json!({"username": "capvcd", "password": password});
                    }
                    create(&client, &object, false)
                        .await
                        .unwrap_or_else(|err| panic!("{name} created: {err}"));
                }
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    assert_eq!(created.len(), 150);
    eprintln!(
        "e2e: 150 VCDClusters of {BIG_PASSWORD_BYTES} bytes created in {:.1} s",
        start.elapsed().as_secs_f64()
    );
    // The last one is known, by its network.
    planned_on(
        &client,
        namespace,
        &format!("{namespace}-big-149"),
        "backup-net",
        CACHE_DEADLINE,
    )
    .await;
    let watched = running.peak_rss();

    // A webhook started now lists them, a page at a time.
    running.unregister();
    running.stop();
    let mut listed = Webhook::start(&plane, &shipped_config(&plane, "big-clusters-listed")).await;
    let listed_peak = listed.peak_rss();
    listed.register().await;
    planned_on(
        &client,
        namespace,
        &format!("{namespace}-big-000"),
        "backup-net",
        CACHE_DEADLINE,
    )
    .await;
    eprintln!(
        "e2e: peak RSS with 150 big VCDClusters: {:.1} MiB watched, {:.1} MiB listed",
        watched as f64 / 1048576.0,
        listed_peak as f64 / 1048576.0
    );
    for (how, peak) in [("watched", watched), ("listed", listed_peak)] {
        assert!(
            peak < BIG_CLUSTERS_PEAK_BYTES,
            "{how}: peak RSS {peak} bytes, over {BIG_CLUSTERS_PEAK_BYTES}"
        );
    }

    // A VCDCluster whose read fields alone are over the bound is not cached: its machines are
    // checked without it (the shipped onUnknownCluster), with a warning that says why.
    let oversized = format!("{namespace}-oversized");
    let network = format!("backup-{}", "n".repeat(100_000));
    kubectl.apply(&cluster(namespace, &oversized, &network));
    let probe = serde_json::to_string(&worker(
        namespace,
        &format!("{oversized}-md-0-probe"),
        Some(&oversized),
        None,
    ))
    .expect("JSON");
    let deadline = Instant::now() + CACHE_DEADLINE;
    let warning = loop {
        let out = kubectl.run_with(&["create", "--dry-run=server", "-f", "-"], Some(&probe));
        assert!(out.success, "admitted without its cluster: {}", out.stderr);
        if out.stderr.contains("over the 64 KiB") {
            break out.stderr;
        }
        assert!(
            Instant::now() < deadline,
            "no warning naming the bound: {}",
            out.stderr
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        warning.contains(&format!("VCDCluster {namespace}/{oversized}")),
        "{warning}"
    );
    assert!(
        listed.log().contains("over the bound; not cached"),
        "{}",
        listed.log_tail(20)
    );

    listed.unregister();
    // The next webhooks of this suite need not list 200 MB.
    let deleted = kubectl.run(&[
        "delete",
        "vcdclusters,clusters",
        "--all",
        "-n",
        namespace,
        "--wait=false",
    ]);
    assert!(deleted.success, "{}", deleted.stderr);
}

#[tokio::test]
async fn with_client_auth_only_kube_apiserver_sends_reviews() {
    let plane = shared();
    let kubectl = plane.kubectl();
    let namespace = "prod-ap2";
    cluster_namespace(&kubectl, namespace);
    // The shipped configuration, asking for the client certificate kube-apiserver's
    // AdmissionConfiguration gives it (the e2e control plane's is set up as docs/deploy.md says).
    let dir = shipped_config(&plane, "client-auth");
    let file = dir.join("nicpolicy.yaml");
    let mut config = std::fs::read_to_string(&file).expect("the configuration");
    config.push_str(&format!(
        "clientAuth:\n  caFile: {}\n",
        plane.pki.webhook_client_ca_file.display()
    ));
    std::fs::write(&file, config).expect("write the configuration");
    // Probes and metrics answer any client (Webhook::start waits on /readyz without one).
    let mut webhook = Webhook::start(&plane, &dir).await;
    // kube-apiserver's reviews are answered: register() waits until one is.
    webhook.register().await;
    let client = plane.client().await;
    let stored = create(
        &client,
        &worker(namespace, "prod-ap2-md-0-h6w2q", Some(namespace), None),
        false,
    )
    .await
    .expect("admitted through kube-apiserver");
    assert_eq!(
        plan_networks(&stored),
        ["mgmt-net", "storage-net", "workload-net"]
    );
    let refused = create(
        &client,
        &invalid_machine(namespace, "prod-ap2-md-0-x9x9x"),
        false,
    )
    .await
    .expect_err("the policy's denial");
    assert_eq!(refusal(&refused).0, 422, "{refused}");

    // Any other client gets no review answered: without a certificate, 403 before its body is
    // read; with one of another CA (the cluster's own, which signs its users), no connection.
    let review = std::fs::read(
        nicpolicy_e2e::workspace().join("tests/fixtures/admission/vcdmachine-create-worker.json"),
    )
    .expect("a review");
    let path = "/validate-infrastructure-cluster-x-k8s-io-v1beta2-vcdmachine";
    let ca =
        reqwest::Certificate::from_pem(&std::fs::read(&webhook.ca_file).expect("CA")).expect("PEM");
    // The review posted by a client presenting `identity`. No kept-alive connection: it would
    // hold the server's graceful stop (Webhook::stop).
    let post = |identity: Option<reqwest::Identity>| {
        let mut client = reqwest::Client::builder()
            .add_root_certificate(ca.clone())
            .pool_max_idle_per_host(0);
        if let Some(identity) = identity {
            client = client.identity(identity);
        }
        client
            .build()
            .expect("HTTPS client")
            .post(webhook.url(path))
            .header("content-type", "application/json")
            .body(review.clone())
            .send()
    };
    let answer = post(None).await.expect("an answer");
    assert_eq!(answer.status(), 403);
    let text = answer.text().await.expect("a body");
    assert!(text.contains("clientAuth.caFile"), "{text}");
    let stranger = plane
        .pki
        .client("webhook-stranger", "prod-ap2-operator", "platform")
        .expect("a client certificate");
    let mut pem = std::fs::read(&stranger.cert).expect("cert");
    pem.extend(std::fs::read(&stranger.key).expect("key"));
    let identity = reqwest::Identity::from_pem(&pem).expect("an identity");
    let answered = post(Some(identity))
        .await
        .and_then(|r| r.error_for_status());
    assert!(
        answered.is_err(),
        "a certificate of another CA was answered"
    );
    assert!(
        webhook
            .metrics()
            .await
            .contains("nicpolicy_requests_rejected_total{reason=\"client_certificate\"} 1"),
        "{}",
        webhook.metrics().await
    );
    webhook.unregister();
}
