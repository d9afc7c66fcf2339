//! nicpolicy serve on the CRDs of CAPVCD's unreleased main (the project's config/crd/: CAPVCD
//! kinds at v1beta3 only, Cluster at v1beta1 and v1beta2): what only main has, the versions
//! found through discovery, and the check that a CRD serves a registered version at all (the
//! other suites run on CAPVCD v1.3.2's own CRDs).

use std::time::{Duration, Instant};

use nicpolicy_e2e::fixtures::{
    cluster_namespace, cluster_v1beta2, create, namespace, plan_networks, planned_on, refusal,
    worker, CACHE_DEADLINE,
};
use nicpolicy_e2e::{shared_on, workspace, Crds, Webhook};
use serde_json::{json, Value};

/// How long a CRD change may take to reach the log, the gauge and the Events.
const GUARD_DEADLINE: Duration = Duration::from_secs(20);

#[tokio::test]
async fn v1beta3_machines_are_judged_on_mains_crds() {
    let plane = shared_on(Crds::Main);
    let kubectl = plane.kubectl();
    cluster_namespace(&kubectl, "prod-eu7");
    let webhook = Webhook::registered(&plane, "main").await;
    let client = plane.client().await;

    let valid = worker("prod-eu7", "prod-eu7-md-0-a", Some("prod-eu7"), None);
    assert_eq!(
        valid["apiVersion"],
        "infrastructure.cluster.x-k8s.io/v1beta3"
    );
    let stored = create(&client, &valid, false).await.expect("admitted");
    assert_eq!(
        plan_networks(&stored),
        ["mgmt-net", "storage-net", "workload-net"]
    );
    let twice = worker(
        "prod-eu7",
        "prod-eu7-md-0-b",
        Some("prod-eu7"),
        Some(&["storage-net", "storage-net"]),
    );
    let err = create(&client, &twice, false).await.expect_err("refused");
    let (code, _, message, causes) = refusal(&err);
    assert_eq!(code, 422, "{message}");
    assert!(
        causes
            .iter()
            .any(|(field, _)| field == "spec.extraOvdcNetworks[1]"),
        "{causes:?}"
    );
    assert!(webhook.reviews_answered().await >= 2);
}

/// The gauge's value for `kind`, once it is reported.
async fn unguarded(webhook: &Webhook, kind: &str) -> Option<f64> {
    let metrics = webhook.metrics().await;
    let prefix = format!("nicpolicy_unguarded_kinds{{kind=\"{kind}\"}} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&prefix)?.parse().ok())
}

/// Waits until the gauge of `kind` is `value` and the log has `line`.
async fn wait_guard(webhook: &Webhook, kind: &str, value: f64, line: &str) {
    let start = Instant::now();
    loop {
        let gauge = unguarded(webhook, kind).await;
        if gauge == Some(value) && webhook.log().contains(line) {
            return;
        }
        assert!(
            start.elapsed() < GUARD_DEADLINE,
            "{kind}: gauge {gauge:?}, not {value}, or no {line:?} in the log:\n{}",
            webhook.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The notes of the Warning Events about the webhook's pod with reason `reason`.
fn events(plane: &nicpolicy_e2e::ControlPlane, reason: &str) -> Vec<String> {
    let listed: Value = serde_json::from_str(&plane.kubectl().ok(&[
        "get",
        "events.events.k8s.io",
        "-n",
        "nicpolicy-system",
        "-o",
        "json",
    ]))
    .expect("JSON");
    listed["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|e| e["reason"] == reason && e["type"] == "Warning")
        .filter(|e| e["regarding"]["name"] == "nicpolicy-serve-e2e")
        .filter_map(|e| e["note"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn a_crd_that_serves_no_registered_version_is_reported_not_silent() {
    let plane = shared_on(Crds::Main);
    let kubectl = plane.kubectl();
    let webhook = Webhook::registered(&plane, "guard").await;
    for kind in ["VCDMachine", "VCDMachineTemplate"] {
        wait_guard(
            &webhook,
            kind,
            0.0,
            "writes reach nicpolicy at the versions its webhook configurations name",
        )
        .await;
    }

    // The CRD removed: nothing can be written, and nothing would be checked either.
    let crd = "vcdmachinetemplates.infrastructure.cluster.x-k8s.io";
    kubectl.ok(&["delete", "crd", crd, "--wait=true"]);
    let missing = format!("CRD {crd} is not installed");
    wait_guard(&webhook, "VCDMachineTemplate", 1.0, &missing).await;

    // A CRD that serves only a version no registration names: writes are stored unchecked.
    let project =
        workspace().join("config/crd/infrastructure.cluster.x-k8s.io_vcdmachinetemplates.yaml");
    let text = std::fs::read_to_string(&project).expect("the project's CRD");
    let mut old: Value = serde_yaml_ng::from_str(&text).expect("YAML");
    old["spec"]["versions"][0]["name"] = json!("v1beta1");
    kubectl.apply(&old.to_string());
    kubectl.ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        &format!("crd/{crd}"),
    ]);
    let unserved = format!(
        "CRD {crd} serves v1beta1; nicpolicy's webhook configurations name v1beta2, v1beta3, so no VCDMachineTemplate write is checked"
    );
    wait_guard(&webhook, "VCDMachineTemplate", 1.0, &unserved).await;
    // The other kind is unaffected.
    assert_eq!(unguarded(&webhook, "VCDMachine").await, Some(0.0));

    let start = Instant::now();
    loop {
        let notes = events(&plane, "KindNotGuarded");
        if notes.iter().any(|n| n.contains(&missing)) && notes.iter().any(|n| n.contains(&unserved))
        {
            break;
        }
        assert!(start.elapsed() < GUARD_DEADLINE, "Events: {notes:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Not a readiness failure: under failurePolicy Fail that would refuse the writes that do
    // reach nicpolicy.
    assert!(webhook.ready().await, "the webhook stopped being ready");

    // Restored: guarded again.
    kubectl.ok(&["delete", "crd", crd, "--wait=true"]);
    kubectl.ok(&["apply", "-f", &project.to_string_lossy()]);
    kubectl.ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        &format!("crd/{crd}"),
    ]);
    let start = Instant::now();
    while unguarded(&webhook, "VCDMachineTemplate").await != Some(0.0) {
        assert!(start.elapsed() < GUARD_DEADLINE, "{}", webhook.log_tail(20));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn cluster_api_v1beta2_clusters_are_followed_by_their_api_group_reference() {
    let plane = shared_on(Crds::Main);
    let kubectl = plane.kubectl();
    // The shipped configuration, which names no version: Clusters are watched at v1beta2, the
    // newest these CRDs serve (as Cluster API v1.11 serves them), found through discovery.
    let webhook = Webhook::registered(&plane, "v1beta2").await;
    assert!(
        webhook.log().contains("cluster.x-k8s.io/v1beta2"),
        "discovery did not choose v1beta2:\n{}",
        webhook.log_tail(20)
    );
    let client = plane.client().await;

    namespace(&kubectl, "prod-eu9");
    kubectl.apply(&cluster_v1beta2("prod-eu9", "prod-eu9", "backup-net"));
    let stored: Value = serde_json::from_str(&kubectl.ok(&[
        "get",
        "clusters.v1beta2.cluster.x-k8s.io",
        "-n",
        "prod-eu9",
        "prod-eu9",
        "-o",
        "json",
    ]))
    .expect("JSON");
    assert_eq!(
        stored["spec"]["infrastructureRef"]["apiGroup"],
        "infrastructure.cluster.x-k8s.io"
    );
    // NIC 0 on the VCDCluster's network: the Cluster was found and followed.
    planned_on(
        &client,
        "prod-eu9",
        "prod-eu9",
        "backup-net",
        CACHE_DEADLINE,
    )
    .await;

    // A Cluster whose VCDCluster is of another group is not CAPVCD's: not followed (the
    // shipped onUnknownCluster checks the machine without it), and the log says why.
    kubectl.apply(
        &cluster_v1beta2("prod-eu9", "prod-eu9-lab", "mgmt-net").replace(
            "apiGroup: infrastructure.cluster.x-k8s.io",
            "apiGroup: infrastructure.example.net",
        ),
    );
    let why = "spec.infrastructureRef.apiGroup names the group \"infrastructure.example.net\"";
    let start = Instant::now();
    while !webhook.log().contains(why) {
        assert!(
            start.elapsed() < CACHE_DEADLINE,
            "a VCDCluster of another group was not refused; log:\n{}",
            webhook.log_tail(20)
        );
        let machine = worker(
            "prod-eu9",
            "prod-eu9-lab-md-0-x",
            Some("prod-eu9-lab"),
            None,
        );
        if let Ok(object) = create(&client, &machine, true).await {
            assert!(
                plan_networks(&object).is_empty(),
                "planned on a foreign VCDCluster"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
