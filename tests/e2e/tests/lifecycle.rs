//! Admission that never blocks a cluster's lifecycle, against a real kube-apiserver: a stock
//! clusterctl manifest in one `kubectl apply` (templates before their cluster, without cluster
//! labels), machines of a cluster not known yet, a stored machine that breaks the policy being
//! relabelled and deleted, requests too large for the policy under both failure modes, and the
//! paths a tenant could take around the decision (a cluster label added or changed later, a
//! made-up `deletionTimestamp` on CREATE).

use nicpolicy_e2e::fixtures::{
    self, cluster_namespace, create, get, namespace, plan_networks, refusal, worker,
};
use nicpolicy_e2e::webhook::{edit_config, shipped_config};
use nicpolicy_e2e::{shared, workspace, Webhook};
use serde_json::json;

#[tokio::test]
async fn a_rendered_clusterctl_manifest_applies_in_one_go() {
    let plane = shared();
    let kubectl = plane.kubectl();
    // Cluster API's own CRDs (KubeadmControlPlane, KubeadmConfigTemplate, MachineDeployment)
    // are installed with the control plane, from Cluster API's module.
    let fixtures = workspace().join("tests/e2e/fixtures");
    namespace(&kubectl, "prod-eu1");
    let _webhook = Webhook::registered(&plane, "clusterctl").await;

    let manifest = fixtures.join("clusterctl-prod-eu1.yaml");
    let applied = kubectl.run(&["apply", "-f", &manifest.to_string_lossy()]);
    assert!(
        applied.success,
        "the rendered manifest was refused:\n{}",
        applied.stderr
    );
    for object in [
        "vcdmachinetemplate.infrastructure.cluster.x-k8s.io/prod-eu1-control-plane created",
        "vcdmachinetemplate.infrastructure.cluster.x-k8s.io/prod-eu1-md-0 created",
        "cluster.cluster.x-k8s.io/prod-eu1 created",
        "vcdcluster.infrastructure.cluster.x-k8s.io/prod-eu1 created",
        "machinedeployment.cluster.x-k8s.io/prod-eu1-md-0 created",
    ] {
        assert!(
            applied.stdout.contains(object),
            "{object} missing from:\n{}",
            applied.stdout
        );
    }
    // The templates were admitted without their cluster: kubectl shows why they were not fully
    // checked.
    assert!(
        applied.stderr.contains("Warning:"),
        "no warning for the templates:\n{}",
        applied.stderr
    );

    // Applying the same manifest again changes nothing and is admitted again.
    let again = kubectl.run(&["apply", "-f", &manifest.to_string_lossy()]);
    assert!(again.success, "{}", again.stderr);

    // The machines Cluster API creates from the templates carry the cluster label: fully checked
    // and planned on the cluster's network.
    let client = plane.client().await;
    let template = get(&client, "prod-eu1", "VCDMachineTemplate", "prod-eu1-md-0")
        .await
        .expect("stored");
    let mut machine = worker("prod-eu1", "prod-eu1-md-0-7d9fk", Some("prod-eu1"), None);
    machine["spec"] = template["spec"]["template"]["spec"].clone();
    let stored = create(&client, &machine, false)
        .await
        .expect("a machine of the applied cluster");
    assert_eq!(
        plan_networks(&stored),
        ["mgmt-net", "storage-net", "workload-net"]
    );

    // A template that breaks a rule needing no cluster is still refused, naming the field.
    let mut broken = fixtures::template(
        "prod-eu1",
        "prod-eu1-md-1",
        None,
        Some(&["storage-net", "storage-net"]),
    );
    broken["metadata"]["labels"] = json!({});
    let refused = kubectl.run_with(&["apply", "-f", "-"], Some(&broken.to_string()));
    assert!(
        !refused.success,
        "a template with a duplicate network was admitted"
    );
    assert!(
        refused
            .stderr
            .contains("spec.template.spec.extraOvdcNetworks[1]"),
        "{}",
        refused.stderr
    );
}

#[tokio::test]
async fn a_machine_of_an_unknown_cluster_is_checked_with_what_needs_no_cluster() {
    let plane = shared();
    let kubectl = plane.kubectl();
    namespace(&kubectl, "prod-ap1");
    let _webhook = Webhook::registered(&plane, "unknown").await;

    let machine = worker(
        "prod-ap1",
        "prod-ap1-md-0-z3x8c",
        Some("prod-ap1"),
        Some(&["storage-net"]),
    );
    let applied = kubectl.run_with(&["apply", "-f", "-"], Some(&machine.to_string()));
    assert!(applied.success, "{}", applied.stderr);
    assert!(
        applied.stderr.contains("Warning:"),
        "admitted without saying the cluster is unknown:\n{}",
        applied.stderr
    );
    assert!(applied.stderr.contains("prod-ap1"), "{}", applied.stderr);

    let duplicate = worker(
        "prod-ap1",
        "prod-ap1-md-0-d4u9p",
        Some("prod-ap1"),
        Some(&["storage-net", "storage-net"]),
    );
    let refused = kubectl.run_with(&["apply", "-f", "-"], Some(&duplicate.to_string()));
    assert!(
        !refused.success,
        "a duplicate network was admitted for an unknown cluster"
    );
    assert!(
        refused.stderr.contains("spec.extraOvdcNetworks[1]"),
        "{}",
        refused.stderr
    );
}

#[tokio::test]
async fn a_stored_machine_that_breaks_the_policy_can_be_relabelled_and_deleted() {
    let plane = shared();
    let kubectl = plane.kubectl();
    cluster_namespace(&kubectl, "prod-eu6");
    let mut webhook = Webhook::start(&plane, &shipped_config(&plane, "stored-bad")).await;

    // Stored before the webhook was installed.
    let mut machine = worker(
        "prod-eu6",
        "prod-eu6-md-0-l2k5j",
        Some("prod-eu6"),
        Some(&["storage-net", "mgmt-net", "storage-net"]),
    );
    machine["metadata"]["finalizers"] = json!(["vcdmachine.infrastructure.cluster.x-k8s.io"]);
    machine["spec"]["providerID"] =
        json!("vmware-cloud-director://urn:vcloud:vm:7c2e1b4a-3f9d-4e8b-b1a6-5d0c9e2f8a17");
    kubectl.apply(&machine.to_string());
    webhook.register().await;

    // Relabelling leaves the NICs alone: admitted, with the stored problems as warnings.
    let relabelled = kubectl.run(&[
        "label",
        "vcdmachine",
        "-n",
        "prod-eu6",
        "prod-eu6-md-0-l2k5j",
        "topology.example.net/rack=r07",
    ]);
    assert!(
        relabelled.success,
        "relabelling a stored bad machine was refused:\n{}",
        relabelled.stderr
    );
    assert!(
        relabelled.stderr.contains("Warning:"),
        "{}",
        relabelled.stderr
    );

    // A change to its NICs is still judged.
    let changed = kubectl.run(&[
        "patch",
        "vcdmachine",
        "-n",
        "prod-eu6",
        "prod-eu6-md-0-l2k5j",
        "--type=merge",
        "-p",
        r#"{"spec":{"extraOvdcNetworks":["storage-net","mgmt-net","storage-net","backup-net"]}}"#,
    ]);
    assert!(
        !changed.success,
        "a NIC change on a provisioned machine was admitted"
    );

    // Deletion finishes: the finalizer is removed by an UPDATE nicpolicy never blocks, even
    // while the webhook is down (the shipped configurations do not send it).
    kubectl.ok(&[
        "delete",
        "vcdmachine",
        "-n",
        "prod-eu6",
        "prod-eu6-md-0-l2k5j",
        "--wait=false",
    ]);
    webhook.stop();
    let removed = kubectl.run(&[
        "patch",
        "vcdmachine",
        "-n",
        "prod-eu6",
        "prod-eu6-md-0-l2k5j",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ]);
    assert!(
        removed.success,
        "the finalizer of a deleting machine could not be removed:\n{}",
        removed.stderr
    );
    let client = plane.client().await;
    assert!(
        get(&client, "prod-eu6", "VCDMachine", "prod-eu6-md-0-l2k5j")
            .await
            .is_none()
    );
}

#[tokio::test]
async fn a_request_whose_size_makes_the_policy_fail_is_denied_under_both_failure_modes() {
    let plane = shared();
    let kubectl = plane.kubectl();
    cluster_namespace(&kubectl, "prod-eu7");
    let client = plane.client().await;
    // 50,000 network names, about 1.2 MB: within kube-apiserver's and etcd's limits, but more
    // than a policy is built for (over its input limit, or past its time limit). A failure the
    // request causes is the request's fault: onPolicyFailure: Allow must not admit it unchecked.
    let names: Vec<String> = (0..50_000)
        .map(|i| format!("ext-workload-net-{i:06}"))
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();

    for mode in ["Deny", "Allow"] {
        let dir = shipped_config(&plane, &format!("too-large-{mode}"));
        edit_config(
            &dir,
            "nicpolicy.yaml",
            "onPolicyFailure: Deny",
            &format!("onPolicyFailure: {mode}"),
        );
        let mut webhook = Webhook::start(&plane, &dir).await;
        webhook.register().await;
        let name = format!("prod-eu7-md-0-big-{}", mode.to_lowercase());
        let machine = worker("prod-eu7", &name, Some("prod-eu7"), Some(&names));
        let Err(err) = create(&client, &machine, false).await else {
            panic!("an oversized machine was admitted under onPolicyFailure: {mode}");
        };
        let (code, _, message, _) = refusal(&err);
        eprintln!("e2e: onPolicyFailure {mode}: refused with {code}: {message}");
        assert!(message.contains("nicpolicy.io"), "{message}");
        assert!(get(&client, "prod-eu7", "VCDMachine", &name)
            .await
            .is_none());
    }
}

const PROVIDER_ID: &str =
    "vmware-cloud-director://urn:vcloud:vm:9d3e2a7c-1b5f-4c8e-a2d6-7f0b3c9e1a54";

/// `kubectl label` of VCDMachine `name` in `namespace` (`--overwrite` for an existing key).
fn label(
    kubectl: &nicpolicy_e2e::Kubectl,
    namespace: &str,
    name: &str,
    label: &str,
) -> nicpolicy_e2e::kubectl::Output {
    kubectl.run(&[
        "label",
        "--overwrite",
        "vcdmachine",
        "-n",
        namespace,
        name,
        label,
    ])
}

#[tokio::test]
async fn a_cluster_label_added_or_changed_later_is_judged_in_full() {
    let plane = shared();
    let kubectl = plane.kubectl();
    namespace(&kubectl, "prod-eu9");
    // Two clusters in one namespace: prod-eu9 (primary mgmt-net) and prod-eu9-dmz, whose
    // primary is ext-dmz-net, a network workers may list as an extra elsewhere.
    kubectl.apply(&fixtures::cluster("prod-eu9", "prod-eu9", "mgmt-net"));
    kubectl.apply(&fixtures::cluster(
        "prod-eu9",
        "prod-eu9-dmz",
        "ext-dmz-net",
    ));
    let _webhook = Webhook::registered(&plane, "binding").await;

    // Created without its cluster label (provisioned, as a tenant may write it): checked
    // without the cluster, admitted with a warning.
    let mut machine = worker(
        "prod-eu9",
        "prod-eu9-md-0-n4v7c",
        None,
        Some(&["ext-dmz-net"]),
    );
    machine["spec"]["providerID"] = json!(PROVIDER_ID);
    let created = kubectl.run_with(&["create", "-f", "-"], Some(&machine.to_string()));
    assert!(created.success, "{}", created.stderr);
    assert!(
        created.stderr.contains("checked without its cluster"),
        "{}",
        created.stderr
    );
    // The UPDATE that names the cluster is the first judged against it: the primary listed
    // again is denied, not excused as pre-existing.
    let named = label(
        &kubectl,
        "prod-eu9",
        "prod-eu9-md-0-n4v7c",
        "cluster.x-k8s.io/cluster-name=prod-eu9-dmz",
    );
    eprintln!("kubectl printed:\n{}", named.stderr.trim());
    assert!(
        !named.success,
        "the label naming a stricter cluster was admitted"
    );
    assert!(
        named.stderr.contains("spec.extraOvdcNetworks[0]"),
        "{}",
        named.stderr
    );
    assert!(!named.stderr.contains("pre-existing"), "{}", named.stderr);

    // A machine of prod-eu9, where the list is fine, moved to prod-eu9-dmz: denied too.
    let mut machine = worker(
        "prod-eu9",
        "prod-eu9-md-0-h6r2m",
        Some("prod-eu9"),
        Some(&["ext-dmz-net"]),
    );
    machine["spec"]["providerID"] = json!(PROVIDER_ID);
    kubectl.apply(&machine.to_string());
    let moved = label(
        &kubectl,
        "prod-eu9",
        "prod-eu9-md-0-h6r2m",
        "cluster.x-k8s.io/cluster-name=prod-eu9-dmz",
    );
    assert!(
        !moved.success,
        "moving the machine to a stricter cluster was admitted"
    );
    assert!(
        moved.stderr.contains("spec.extraOvdcNetworks[0]"),
        "{}",
        moved.stderr
    );
    // Relabelling it without touching its cluster stays fine.
    let relabelled = label(
        &kubectl,
        "prod-eu9",
        "prod-eu9-md-0-h6r2m",
        "topology.example.net/rack=r07",
    );
    assert!(relabelled.success, "{}", relabelled.stderr);
}

#[tokio::test]
async fn a_create_with_a_made_up_deletion_timestamp_is_stored_defaulted() {
    let plane = shared();
    let kubectl = plane.kubectl();
    cluster_namespace(&kubectl, "prod-eu10");
    let _webhook = Webhook::registered(&plane, "fake-deletion").await;

    // A worker listing nothing, created with a deletionTimestamp of its own making.
    let mut machine = worker(
        "prod-eu10",
        "prod-eu10-md-0-f8d2k",
        Some("prod-eu10"),
        Some(&[]),
    );
    machine["metadata"]["deletionTimestamp"] = json!("2026-12-04T09:00:00Z");
    let created = kubectl.run_with(&["create", "-f", "-"], Some(&machine.to_string()));
    assert!(created.success, "{}", created.stderr);
    // kube-apiserver cleared the field on CREATE; the mutating webhook was called all the
    // same (matchConditions: oldObject == null) and defaulted the list.
    let client = plane.client().await;
    let stored = get(&client, "prod-eu10", "VCDMachine", "prod-eu10-md-0-f8d2k")
        .await
        .expect("created");
    assert!(
        stored["metadata"].get("deletionTimestamp").is_none(),
        "{stored}"
    );
    assert_eq!(
        fixtures::extras(&stored),
        ["storage-net", "workload-net"],
        "stored undefaulted: {stored}"
    );
    assert_eq!(
        plan_networks(&stored),
        ["mgmt-net", "storage-net", "workload-net"]
    );
    // And a rule it breaks denies it: the field does not make a CREATE a deletion.
    let mut duplicate = worker(
        "prod-eu10",
        "prod-eu10-md-0-d2q5w",
        Some("prod-eu10"),
        Some(&["storage-net", "storage-net"]),
    );
    duplicate["metadata"]["deletionTimestamp"] = json!("2026-12-04T09:00:00Z");
    let refused = kubectl.run_with(&["create", "-f", "-"], Some(&duplicate.to_string()));
    assert!(!refused.success, "a duplicate network was admitted");
    assert!(
        refused.stderr.contains("spec.extraOvdcNetworks[1]"),
        "{}",
        refused.stderr
    );
}

/// A Cluster API Machine of `cluster` (a control plane's when `control_plane`), inert here (no
/// Cluster API controller runs in this suite); returns its uid.
fn machine_object(
    kubectl: &nicpolicy_e2e::Kubectl,
    ns: &str,
    name: &str,
    cluster: &str,
    control_plane: bool,
) -> String {
    let mut labels = json!({"cluster.x-k8s.io/cluster-name": cluster});
    if control_plane {
        labels["cluster.x-k8s.io/control-plane"] = json!("");
    }
    let machine = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "Machine",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "clusterName": cluster,
            "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
            "infrastructureRef": {
                "apiVersion": fixtures::infrastructure(), "kind": "VCDMachine",
                "name": name, "namespace": ns
            }
        }
    });
    kubectl.apply(&machine.to_string());
    kubectl
        .ok(&[
            "get",
            "machine.cluster.x-k8s.io",
            "-n",
            ns,
            name,
            "-o",
            "jsonpath={.metadata.uid}",
        ])
        .trim()
        .to_string()
}

/// Pauses (or unpauses) Cluster `name` in its namespace of the same name, as `clusterctl move`
/// does around a move.
fn set_paused(kubectl: &nicpolicy_e2e::Kubectl, name: &str, paused: bool) {
    kubectl.ok(&[
        "patch",
        "cluster",
        "-n",
        name,
        name,
        "--type=merge",
        "-p",
        &json!({"spec": {"paused": paused}}).to_string(),
    ]);
}

/// `machine` owned by Machine `name` (uid `uid`), as Cluster API's Machine controller sets it.
fn owned_by(mut machine: serde_json::Value, name: &str, uid: &str) -> serde_json::Value {
    machine["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine", "name": name, "uid": uid,
        "controller": true, "blockOwnerDeletion": true
    }]);
    machine
}

#[tokio::test]
async fn the_machine_capvcd_builds_is_the_one_judged() {
    let plane = shared();
    let kubectl = plane.kubectl();
    cluster_namespace(&kubectl, "prod-eu11");
    let _webhook = Webhook::registered(&plane, "owner-machine").await;
    let client = plane.client().await;

    // A control-plane Machine of prod-eu11: CAPVCD builds its VCDMachine as a control plane of
    // prod-eu11, whatever the VCDMachine's own labels say, and control planes may not sit on
    // ext-dmz-net (the shipped role-based settings).
    let cp = "prod-eu11-control-plane-b7x2k";
    let uid = machine_object(&kubectl, "prod-eu11", cp, "prod-eu11", true);
    let dressed = |cluster: Option<&str>| {
        owned_by(
            worker(
                "prod-eu11",
                cp,
                cluster,
                Some(&["storage-net", "ext-dmz-net"]),
            ),
            cp,
            &uid,
        )
    };
    // The Machine reaches the webhook's cache by a watch: wait until it is the one judged.
    let start = std::time::Instant::now();
    loop {
        match create(&client, &dressed(None), true).await {
            Err(err) if refusal(&err).0 == 422 => break,
            other => assert!(
                start.elapsed() < fixtures::CACHE_DEADLINE,
                "the owner Machine was not used: {:?}",
                other.map(|o| o["metadata"]["name"].clone())
            ),
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // No label, another cluster's label, a worker's labels: each refused on the DMZ network.
    for cluster in [None, Some("prod-us1"), Some("prod-eu11")] {
        let err = create(&client, &dressed(cluster), false)
            .await
            .expect_err("a control plane on the DMZ is refused");
        let (code, _, message, causes) = refusal(&err);
        assert_eq!(code, 422, "{cluster:?}: {message}");
        assert!(
            causes
                .iter()
                .any(|(field, _)| field == "spec.extraOvdcNetworks[1]"),
            "{cluster:?}: {causes:?}"
        );
    }

    // A machine moved into a paused cluster (`clusterctl move`: the Cluster paused, objects
    // created with their spec and owner references): built already, so a stored violation is
    // a warning and nothing is defaulted or planned anew.
    set_paused(&kubectl, "prod-eu11", true);
    let wk = "prod-eu11-md-0-m4v8n";
    let wuid = machine_object(&kubectl, "prod-eu11", wk, "prod-eu11", false);
    let mut moved = owned_by(
        worker(
            "prod-eu11",
            wk,
            Some("prod-eu11"),
            Some(&["storage-net", "storage-net"]),
        ),
        wk,
        &wuid,
    );
    let provider_id = "vmware-cloud-director://urn:vcloud:vm:5e2d7c41-0a9b-4c3d-8e6f-1a2b3c4d5e6f";
    moved["spec"]["providerID"] = json!(provider_id);
    moved["metadata"]["annotations"] =
        json!({"nicpolicy.io/nic-plan": "{\"policy\":\"as built\",\"nics\":[]}"});
    let start = std::time::Instant::now();
    let stored = loop {
        // The paused Cluster reaches the webhook's cache by a watch too.
        match create(&client, &moved, false).await {
            Ok(stored) => break stored,
            Err(err) => assert!(
                start.elapsed() < fixtures::CACHE_DEADLINE,
                "the moved machine was refused: {}",
                refusal(&err).2
            ),
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(fixtures::extras(&stored), ["storage-net", "storage-net"]);
    assert_eq!(
        stored["metadata"]["annotations"]["nicpolicy.io/nic-plan"],
        "{\"policy\":\"as built\",\"nics\":[]}"
    );
    set_paused(&kubectl, "prod-eu11", false);

    // Clearing its provider ID (CAPVCD would build from the list again) is judged in full and
    // refused; an update that keeps it is not.
    let cleared = kubectl.run(&[
        "patch",
        "vcdmachine",
        "-n",
        "prod-eu11",
        wk,
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/spec/providerID"}]"#,
    ]);
    assert!(!cleared.success, "clearing the provider ID was admitted");
    assert!(
        cleared.stderr.contains("spec.extraOvdcNetworks[1]"),
        "{}",
        cleared.stderr
    );
    kubectl.ok(&[
        "label",
        "vcdmachine",
        "-n",
        "prod-eu11",
        wk,
        "platform.example.net/drain=true",
    ]);
}
