//! `nicpolicy controller` against a real API server, with the identity the shipped RBAC
//! (config/controller/install.yaml) gives it and no webhook registered, so the machines it audits
//! were written unchecked, as before nicpolicy was installed: their reports (OpenReports, and
//! PolicyReports on request, with a switch between the two), the candidate
//! chain's differences, Events, a VCDCluster change, leader hand-over and an API server restart.

use std::time::{Duration, Instant};

use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use nicpolicy_e2e::controller::{
    eventually, report, report_of, report_of_until, report_until, reports, results_of, ReportKind,
    Settings, NAMESPACE,
};
use nicpolicy_e2e::fixtures::{api, cluster_namespace, create, worker};
use nicpolicy_e2e::webhook::edit_config;
use nicpolicy_e2e::{shared, ControlPlane, Controller, Crds, Webhook};
use serde_json::{json, Value};

#[path = "../../../host/tests/vcd_double/mod.rs"]
mod vcd_double;

/// How long a change may take to reach a report: a watch event, the debounce (200 ms), one
/// evaluation and one write; generous for two shared cores.
const REPORT_DEADLINE: Duration = Duration::from_secs(30);
/// The Lease duration of the leader tests.
const LEASE: Duration = Duration::from_secs(4);
/// How long the watches may take to be current again once kube-apiserver is back (they back
/// off up to 30 s while it is down, as client-go's reflectors do).
const RECOVERY_DEADLINE: Duration = Duration::from_secs(60);

const WRITTEN: &str = r#"nicpolicy_controller_report_writes_total{result="written"}"#;
const LEADER: &str = "nicpolicy_controller_leader";

/// Creates `name` in `namespace` as a worker of `cluster` listing `extras`.
async fn machine(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    cluster: &str,
    extras: &[&str],
) {
    create(
        client,
        &worker(namespace, name, Some(cluster), Some(extras)),
        false,
    )
    .await
    .unwrap_or_else(|err| panic!("cannot create {namespace}/{name}: {err}"));
}

/// Sets a machine's extra networks.
async fn set_extras(client: &kube::Client, namespace: &str, name: &str, extras: &[&str]) {
    api(client, namespace, "VCDMachine")
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"extraOvdcNetworks": extras}})),
        )
        .await
        .unwrap_or_else(|err| panic!("cannot patch {namespace}/{name}: {err}"));
}

/// The one result of a report for machine `name` (one per violation when denied: takes the
/// first).
fn result<'a>(report: &'a Value, name: &str) -> Option<&'a Value> {
    results_of(report, name).into_iter().next()
}

fn verdict(report: &Value, name: &str) -> Option<String> {
    result(report, name).and_then(|r| r["result"].as_str().map(str::to_string))
}

/// The Events about `name` in `namespace`.
/// Waits until `namespace`'s report gives `name` the result `want` (`pass`, `fail`), and
/// returns the report.
async fn verdict_until(
    client: &kube::Client,
    namespace: &str,
    controller: &Controller,
    name: &str,
    want: &str,
) -> Value {
    report_until(
        client,
        namespace,
        REPORT_DEADLINE,
        controller,
        &format!("{name}: {want}"),
        |r| verdict(r, name).as_deref() == Some(want),
    )
    .await
    .0
}

async fn events_about(client: &kube::Client, namespace: &str, name: &str) -> Vec<Event> {
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    events
        .list(&ListParams::default())
        .await
        .expect("events list")
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .collect()
}

#[tokio::test]
async fn pre_existing_machines_are_reported_and_fixes_and_new_failures_follow() {
    let plane = shared();
    let kubectl = plane.kubectl();
    let client = plane.client().await;
    let ns = "audit-eu1";
    cluster_namespace(&kubectl, ns);
    machine(
        &client,
        ns,
        "audit-eu1-md-0-good",
        ns,
        &["storage-net", "workload-net"],
    )
    .await;
    machine(
        &client,
        ns,
        "audit-eu1-md-0-dup",
        ns,
        &["storage-net", "storage-net"],
    )
    .await;
    machine(&client, ns, "audit-eu1-md-0-typo", ns, &["storag-net"]).await;
    // Five NICs: within the NIC limit in force (6), over the candidate's (4).
    let wide = ["storage-net", "workload-net", "backup-net", "ext-dmz-net"];
    machine(&client, ns, "audit-eu1-md-0-wide", ns, &wide).await;
    // Its cluster does not exist: checked without it, as the webhook checks it.
    machine(
        &client,
        ns,
        "audit-eu1-gone-md-0-a",
        "audit-eu1-gone",
        &["backup-net", "backup-net"],
    )
    .await;

    let controller = Controller::start(&plane, &Settings::single("audit")).await;
    let (report, took) = report_until(
        &client,
        ns,
        REPORT_DEADLINE,
        &controller,
        "every machine",
        |r| {
            results_of(r, "audit-eu1-gone-md-0-a").len() == 1
                && result(r, "audit-eu1-md-0-wide").is_some()
        },
    )
    .await;
    eprintln!("e2e: first report in {:.1} s", took.as_secs_f64());
    assert_eq!(report["summary"]["fail"], 3, "{report:#}");
    assert_eq!(report["summary"]["pass"], 2, "{report:#}");

    let dup = result(&report, "audit-eu1-md-0-dup").expect("dup reported");
    assert_eq!(dup["result"], "fail");
    // The rule that found it; the reason beside the field.
    assert_eq!(dup["rule"], "capvcd/duplicate", "{dup}");
    assert_eq!(dup["properties"]["reason"], "Duplicate");
    assert_eq!(dup["properties"]["field"], "spec.extraOvdcNetworks[1]");
    assert_eq!(dup["properties"]["cluster"], "Cluster/audit-eu1");
    assert!(dup["message"]
        .as_str()
        .unwrap()
        .starts_with("spec.extraOvdcNetworks[1]: "));
    assert_eq!(dup["resources"][0]["kind"], "VCDMachine");
    assert!(dup["resources"][0]["uid"].is_string());

    let typo = result(&report, "audit-eu1-md-0-typo").expect("typo reported");
    assert_eq!(typo["rule"], "capvcd/inventory", "{typo}");
    assert_eq!(typo["properties"]["reason"], "NotFound");
    assert_eq!(typo["properties"]["field"], "spec.extraOvdcNetworks[0]");
    assert!(
        typo["message"].as_str().unwrap().contains("storage-net"),
        "{typo}"
    );

    let good = result(&report, "audit-eu1-md-0-good").expect("good reported");
    assert_eq!(good["result"], "pass");
    assert_eq!(good["rule"], "nic-plan");
    assert!(good["message"]
        .as_str()
        .unwrap()
        .starts_with("NIC plan: mgmt-net, storage-net"));

    // The candidate chain (config/controller/candidate/): at most 4 NICs, DHCP on storage-net
    // and workload-net.
    let wide = result(&report, "audit-eu1-md-0-wide").expect("wide reported");
    assert_eq!(wide["result"], "pass");
    assert_eq!(wide["properties"]["candidate"], "newly denied", "{wide}");
    assert!(
        wide["properties"]["candidateChanges"]
            .as_str()
            .unwrap()
            .contains("4"),
        "{wide}"
    );
    assert_eq!(good["properties"]["candidate"], "NIC plan", "{good}");
    assert!(
        good["properties"]["candidateChanges"]
            .as_str()
            .unwrap()
            .contains("workload-net"),
        "{good}"
    );
    let metrics = controller.metrics().await;
    assert!(metrics[r#"nicpolicy_controller_candidate_differences{change="newlyDenied"}"#] >= 1.0);
    assert!(metrics[r#"nicpolicy_controller_candidate_differences{change="nicPlan"}"#] >= 1.0);
    assert!(metrics[r#"nicpolicy_controller_violations{reason="Duplicate"}"#] >= 2.0);

    // A machine of a cluster that does not exist: the rules that need no cluster still deny.
    let gone = result(&report, "audit-eu1-gone-md-0-a").expect("reported");
    assert_eq!(gone["result"], "fail", "{gone}");
    assert_eq!(gone["rule"], "capvcd/duplicate", "{gone}");
    assert!(
        gone["properties"]["clusterUnknown"]
            .as_str()
            .unwrap()
            .contains("audit-eu1-gone"),
        "{gone}"
    );
    assert!(gone["properties"].get("cluster").is_some());

    // The failures found at start each got a Warning Event naming the field. The controller
    // publishes Events after it writes the report, so they may trail it.
    for name in ["audit-eu1-md-0-dup", "audit-eu1-md-0-typo"] {
        eventually(REPORT_DEADLINE, &format!("an Event on {name}"), || async {
            events_about(&client, ns, name)
                .await
                .iter()
                .any(|e| e.reason.as_deref() == Some("NetworkPolicyViolation"))
        })
        .await;
        let events = events_about(&client, ns, name).await;
        let event = events
            .iter()
            .find(|e| e.reason.as_deref() == Some("NetworkPolicyViolation"))
            .unwrap_or_else(|| panic!("no Event on {name}: {events:?}"));
        assert_eq!(event.type_.as_deref(), Some("Warning"));
        assert!(event
            .note
            .as_deref()
            .unwrap_or("")
            .contains("spec.extraOvdcNetworks["));
        assert_eq!(
            event.reporting_controller.as_deref(),
            Some("nicpolicy-controller")
        );
    }
    assert!(events_about(&client, ns, "audit-eu1-md-0-good")
        .await
        .is_empty());

    // A fix clears the machine's failure; only this namespace's report is written again.
    let written = controller.metric(WRITTEN).await;
    set_extras(&client, ns, "audit-eu1-md-0-dup", &["storage-net"]).await;
    let (report, took) = report_until(&client, ns, REPORT_DEADLINE, &controller, "the fix", |r| {
        verdict(r, "audit-eu1-md-0-dup").as_deref() == Some("pass")
    })
    .await;
    eprintln!("e2e: fix reported in {:.1} s", took.as_secs_f64());
    assert_eq!(report["summary"]["fail"], 2);
    assert_eq!(results_of(&report, "audit-eu1-md-0-dup").len(), 1);
    assert_eq!(controller.metric(WRITTEN).await - written, 1.0);

    // A machine that newly fails gets its Event.
    set_extras(
        &client,
        ns,
        "audit-eu1-md-0-good",
        &["workload-net", "workload-net"],
    )
    .await;
    report_until(
        &client,
        ns,
        REPORT_DEADLINE,
        &controller,
        "the new failure",
        |r| verdict(r, "audit-eu1-md-0-good").as_deref() == Some("fail"),
    )
    .await;
    eventually(
        REPORT_DEADLINE,
        "an Event on the newly failing machine",
        || async {
            !events_about(&client, ns, "audit-eu1-md-0-good")
                .await
                .is_empty()
        },
    )
    .await;
    // Nothing audited was written by the controller.
    let stored = api(&client, ns, "VCDMachine")
        .get("audit-eu1-md-0-typo")
        .await
        .expect("stored");
    let managers: Vec<String> = stored
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(managers, ["nicpolicy-e2e"]);
}

/// Namespace `ns` with its cluster on mgmt-net and machine `<ns>-md-0-a` listing backup-net
/// (beside `others`), reported passing by a controller; then `change` moves NIC 0 to
/// backup-net before anything was built. Returns the report in which machine a fails, after
/// checking its field and message: the controller judged it again against the cluster as it
/// now is.
async fn nic0_moved_to_backup_net(
    plane: &ControlPlane,
    ns: &str,
    others: &[(&str, &[&str])],
    change: impl FnOnce(&nicpolicy_e2e::Kubectl),
) -> Value {
    let kubectl = plane.kubectl();
    let client = plane.client().await;
    cluster_namespace(&kubectl, ns);
    let a = format!("{ns}-md-0-a");
    machine(&client, ns, &a, ns, &["backup-net"]).await;
    for (name, extras) in others {
        machine(&client, ns, name, ns, extras).await;
    }
    let controller = Controller::start(plane, &Settings::single(ns)).await;
    let machines = 1 + others.len();
    report_until(
        &client,
        ns,
        REPORT_DEADLINE,
        &controller,
        "every machine passing",
        |r| r["summary"]["pass"] == machines,
    )
    .await;
    change(&kubectl);
    let (report, took) = report_until(
        &client,
        ns,
        REPORT_DEADLINE,
        &controller,
        "the new primary network",
        |r| verdict(r, &a).as_deref() == Some("fail"),
    )
    .await;
    eprintln!("e2e: NIC 0 moved, reported in {:.1} s", took.as_secs_f64());
    let failed = result(&report, &a).expect("machine a");
    assert_eq!(failed["properties"]["field"], "spec.extraOvdcNetworks[0]");
    assert!(
        failed["message"].as_str().unwrap().contains("backup-net"),
        "{failed}"
    );
    report
}

#[tokio::test]
async fn a_vcdcluster_change_re_evaluates_its_machines() {
    let plane = shared();
    // The cluster's primary network moves to backup-net: machine a now lists it twice.
    let report = nic0_moved_to_backup_net(
        &plane,
        "audit-us1",
        &[("audit-us1-md-0-b", &["storage-net"])],
        |kubectl| {
            kubectl.ok(&[
                "patch",
                "vcdcluster",
                "-n",
                "audit-us1",
                "audit-us1",
                "--type=merge",
                "-p",
                r#"{"spec":{"ovdcNetwork":"backup-net"}}"#,
            ]);
        },
    )
    .await;
    let b = result(&report, "audit-us1-md-0-b").expect("b");
    assert!(
        b["message"]
            .as_str()
            .unwrap()
            .starts_with("NIC plan: backup-net"),
        "{b}"
    );
}

#[tokio::test]
async fn a_cluster_pointed_at_another_vcdcluster_re_evaluates_its_machines() {
    let plane = shared();
    // Before CAPVCD builds the machine, the Cluster is pointed at a VCDCluster whose primary
    // network is backup-net: NIC 0 would change under an admitted machine.
    let ns = "audit-us2";
    nic0_moved_to_backup_net(&plane, ns, &[], |kubectl| {
        let other = nicpolicy_e2e::fixtures::cluster(ns, "audit-us2-dr", "backup-net");
        let vcd_only = other
            .split("---\n")
            .find(|doc| doc.contains("kind: VCDCluster\nmetadata"))
            .expect("the VCDCluster document");
        kubectl.apply(vcd_only);
        kubectl.ok(&[
            "patch",
            "cluster",
            "-n",
            ns,
            ns,
            "--type=merge",
            "-p",
            r#"{"spec":{"infrastructureRef":{"name":"audit-us2-dr"}}}"#,
        ]);
    })
    .await;
}

#[tokio::test]
async fn the_standby_takes_over_within_the_lease_when_the_leader_dies() {
    let plane = shared();
    let kubectl = plane.kubectl();
    let client = plane.client().await;
    let ns = "audit-ha";
    cluster_namespace(&kubectl, ns);
    machine(&client, ns, "audit-ha-md-0-a", ns, &["storage-net"]).await;
    machine(
        &client,
        ns,
        "audit-ha-md-0-b",
        ns,
        &["backup-net", "backup-net"],
    )
    .await;
    let settings = |identity: &str| Settings {
        lease: Some(("e2e-handover".to_string(), LEASE)),
        ..Settings::single(identity)
    };
    let first = Controller::start(&plane, &settings("replica-a")).await;
    let second = Controller::start(&plane, &settings("replica-b")).await;
    let mut replicas = [first, second];
    report_until(
        &client,
        ns,
        REPORT_DEADLINE,
        &replicas[0],
        "both machines",
        |r| r["summary"]["pass"] == 1 && r["summary"]["fail"] == 1,
    )
    .await;
    eventually(
        REPORT_DEADLINE,
        "an Event on the failing machine",
        || async { events_about(&client, ns, "audit-ha-md-0-b").await.len() == 1 },
    )
    .await;

    // Exactly one leads, and only it writes.
    let mut leaders = Vec::new();
    for (i, replica) in replicas.iter().enumerate() {
        if replica.metric(LEADER).await == 1.0 {
            leaders.push(i);
        }
    }
    assert_eq!(leaders.len(), 1, "one leader, not {leaders:?}");
    let leader = leaders[0];
    let standby = 1 - leader;
    assert!(replicas[leader].metric(WRITTEN).await >= 1.0);
    assert_eq!(replicas[standby].metric(WRITTEN).await, 0.0);
    assert_eq!(replicas[standby].metric(LEADER).await, 0.0);

    // The leader dies without handing the Lease back; a change made meanwhile is reported by
    // the standby once the Lease has expired.
    replicas[leader].kill();
    let killed = Instant::now();
    set_extras(
        &client,
        ns,
        "audit-ha-md-0-a",
        &["storage-net", "storage-net"],
    )
    .await;
    report_until(
        &client,
        ns,
        LEASE * 5,
        &replicas[standby],
        "the change, from the standby",
        |r| verdict(r, "audit-ha-md-0-a").as_deref() == Some("fail"),
    )
    .await;
    let took = killed.elapsed();
    eprintln!(
        "e2e: standby reported {:.1} s after the leader died (lease {} s)",
        took.as_secs_f64(),
        LEASE.as_secs()
    );
    // Expiry (one duration) plus at most one renewal period and one pass.
    assert!(took < LEASE * 2 + Duration::from_secs(3), "took {took:?}");
    assert_eq!(replicas[standby].metric(LEADER).await, 1.0);
    assert!(replicas[standby].metric(WRITTEN).await >= 1.0);
    assert!(replicas[standby].log().contains("leading"));
    // The new leader announces the new failure, not the one its predecessor announced (read
    // back from the report).
    eventually(
        REPORT_DEADLINE,
        "an Event on the newly failing machine",
        || async {
            !events_about(&client, ns, "audit-ha-md-0-a")
                .await
                .is_empty()
        },
    )
    .await;
    assert_eq!(events_about(&client, ns, "audit-ha-md-0-b").await.len(), 1);
}

#[tokio::test]
async fn the_controller_keeps_reporting_across_an_api_server_restart() {
    // Its own control plane: the restart would disturb the other tests.
    let mut plane =
        ControlPlane::start("controller-restart", Crds::Release).expect("the control plane starts");
    let kubectl = plane.kubectl();
    let ns = "audit-restart";
    cluster_namespace(&kubectl, ns);
    let client = plane.client().await;
    machine(
        &client,
        ns,
        "audit-restart-md-0-a",
        ns,
        &["storage-net", "storage-net"],
    )
    .await;
    let settings = Settings {
        lease: Some(("e2e-restart".to_string(), LEASE)),
        ..Settings::single("restart")
    };
    let mut controller = Controller::start(&plane, &settings).await;
    report_until(
        &client,
        ns,
        REPORT_DEADLINE,
        &controller,
        "the failure",
        |r| r["summary"]["fail"] == 1,
    )
    .await;

    plane
        .restart_apiserver(Duration::from_secs(3))
        .expect("kube-apiserver comes back");
    assert!(
        controller.running(),
        "nicpolicy controller exited while the API server was down:\n{}",
        controller.log_tail(30)
    );
    let client = plane.client().await;
    machine(
        &client,
        ns,
        "audit-restart-md-0-b",
        ns,
        &["backup-net", "backup-net"],
    )
    .await;
    set_extras(&client, ns, "audit-restart-md-0-a", &["storage-net"]).await;
    let (report, took) = report_until(
        &client,
        ns,
        RECOVERY_DEADLINE,
        &controller,
        "the changes made after the restart",
        |r| {
            verdict(r, "audit-restart-md-0-b").as_deref() == Some("fail")
                && verdict(r, "audit-restart-md-0-a").as_deref() == Some("pass")
        },
    )
    .await;
    eprintln!(
        "e2e: changes after the restart reported in {:.1} s",
        took.as_secs_f64()
    );
    assert_eq!(report["summary"]["fail"], 1);
    assert!(controller.running());
    assert_eq!(controller.metric(LEADER).await, 1.0);
    let log = controller.log();
    assert!(
        log.contains("watch error; retrying"),
        "the outage was noticed and retried:\n{}",
        controller.log_tail(30)
    );
}

#[tokio::test]
async fn the_report_of_a_namespace_emptied_while_stopped_is_deleted() {
    let plane = shared();
    let kubectl = plane.kubectl();
    let client = plane.client().await;
    let ns = "audit-emptied";
    cluster_namespace(&kubectl, ns);
    machine(
        &client,
        ns,
        "audit-emptied-md-0-a",
        ns,
        &["storage-net", "storage-net"],
    )
    .await;
    let mut first = Controller::start(&plane, &Settings::single("emptied-a")).await;
    report_until(&client, ns, REPORT_DEADLINE, &first, "the failure", |r| {
        r["summary"]["fail"] == 1
    })
    .await;
    first.stop();

    // The last machine goes while no controller runs; the next one finds the report and
    // removes it rather than leave a failure that no longer exists.
    api(&client, ns, "VCDMachine")
        .delete("audit-emptied-md-0-a", &Default::default())
        .await
        .expect("machine deleted");
    let second = Controller::start(&plane, &Settings::single("emptied-b")).await;
    let took = eventually(REPORT_DEADLINE, "the report deleted", || async {
        report(&client, ns).await.is_none()
    })
    .await;
    eprintln!(
        "e2e: stale report deleted {:.1} s after start",
        took.as_secs_f64()
    );
    assert!(
        second
            .metric(r#"nicpolicy_controller_report_writes_total{result="deleted"}"#)
            .await
            >= 1.0
    );
}

#[tokio::test]
async fn policyreports_on_request_and_a_switch_of_format_leaves_one_report() {
    let plane = shared();
    let kubectl = plane.kubectl();
    let client = plane.client().await;
    let ns = "audit-formats";
    cluster_namespace(&kubectl, ns);
    machine(&client, ns, "audit-formats-md-0-good", ns, &["storage-net"]).await;
    machine(
        &client,
        ns,
        "audit-formats-md-0-dup",
        ns,
        &["storage-net", "storage-net"],
    )
    .await;
    // Another tool's PolicyReport in the same namespace: never nicpolicy's to remove.
    let theirs: kube::core::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "wgpolicyk8s.io/v1alpha2",
        "kind": "PolicyReport",
        "metadata": {
            "name": "cpol-require-team-label",
            "namespace": ns,
            "labels": {"app.kubernetes.io/managed-by": "kyverno"},
        },
        "summary": {"pass": 1},
        "results": [],
    }))
    .expect("a PolicyReport");
    reports(&client, ns, ReportKind::PolicyReport)
        .create(&Default::default(), &theirs)
        .await
        .expect("the other tool's report created");
    let settled = |r: &Value| r["summary"]["fail"] == 1 && r["summary"]["pass"] == 1;

    let mut settings = Settings::single("formats-wg");
    settings.args.push(ReportKind::PolicyReport.flag().into());
    let mut wg = Controller::start(&plane, &settings).await;
    let (policy_report, _) = report_of_until(
        &client,
        ns,
        ReportKind::PolicyReport,
        REPORT_DEADLINE,
        &wg,
        "both machines",
        settled,
    )
    .await;
    assert_eq!(policy_report["kind"], "PolicyReport");
    assert_eq!(
        verdict(&policy_report, "audit-formats-md-0-dup").as_deref(),
        Some("fail")
    );
    assert!(
        report(&client, ns).await.is_none(),
        "an OpenReports Report too"
    );
    wg.stop();

    // The default kind: the same results in a Report, and the PolicyReport removed.
    let mut open = Controller::start(&plane, &Settings::single("formats-open")).await;
    let (open_report, _) = report_until(
        &client,
        ns,
        REPORT_DEADLINE,
        &open,
        "both machines",
        settled,
    )
    .await;
    assert_eq!(open_report["apiVersion"], "openreports.io/v1alpha1");
    assert_eq!(open_report["source"], "nicpolicy");
    assert_eq!(open_report["results"], policy_report["results"]);
    assert_eq!(open_report["summary"], policy_report["summary"]);
    eventually(
        REPORT_DEADLINE,
        "nicpolicy's PolicyReport removed",
        || async {
            report_of(&client, ns, ReportKind::PolicyReport)
                .await
                .is_none()
        },
    )
    .await;
    assert!(
        open.metric(r#"nicpolicy_controller_report_writes_total{result="deleted"}"#)
            .await
            >= 1.0
    );
    assert!(
        open.log()
            .contains("removed the reports of the format used before"),
        "{}",
        open.log_tail(20)
    );
    open.stop();

    // And back: the Report goes, the PolicyReport returns.
    let mut settings = Settings::single("formats-wg-again");
    settings.args.push(ReportKind::PolicyReport.flag().into());
    let back = Controller::start(&plane, &settings).await;
    report_of_until(
        &client,
        ns,
        ReportKind::PolicyReport,
        REPORT_DEADLINE,
        &back,
        "both machines",
        settled,
    )
    .await;
    eventually(REPORT_DEADLINE, "nicpolicy's Report removed", || async {
        report(&client, ns).await.is_none()
    })
    .await;
    assert!(
        reports(&client, ns, ReportKind::PolicyReport)
            .get_opt("cpol-require-team-label")
            .await
            .expect("read")
            .is_some(),
        "the other tool's PolicyReport was removed"
    );
}

#[tokio::test]
async fn a_policy_change_re_evaluates_every_namespace() {
    let plane = shared();
    let kubectl = plane.kubectl();
    let client = plane.client().await;
    let ns = "audit-reload";
    cluster_namespace(&kubectl, ns);
    let wide = ["storage-net", "workload-net", "backup-net"];
    machine(&client, ns, "audit-reload-md-0-a", ns, &wide).await;
    let controller = Controller::start(&plane, &Settings::single("reload")).await;
    report_until(
        &client,
        ns,
        REPORT_DEADLINE,
        &controller,
        "the machine passing",
        |r| verdict(r, "audit-reload-md-0-a").as_deref() == Some("pass"),
    )
    .await;
    let generation = controller
        .metric("nicpolicy_controller_policy_generation")
        .await;

    // The site lowers its NIC limit in the configuration the controller shares with the
    // webhook (hot-reloaded, as `serve` reloads it): the four-NIC machine now fails, with no
    // change to any object.
    edit_config(
        &controller.dir,
        "nicpolicy.yaml",
        "maxNics: 6",
        "maxNics: 3",
    );
    let (report, took) = report_until(
        &client,
        ns,
        REPORT_DEADLINE,
        &controller,
        "the lower limit",
        |r| verdict(r, "audit-reload-md-0-a").as_deref() == Some("fail"),
    )
    .await;
    eprintln!("e2e: policy change reported in {:.1} s", took.as_secs_f64());
    let a = result(&report, "audit-reload-md-0-a").expect("a");
    assert_eq!(a["rule"], "capvcd/max-nics", "{a}");
    assert_eq!(a["properties"]["reason"], "TooMany", "{a}");
    assert!(
        controller
            .metric("nicpolicy_controller_policy_generation")
            .await
            > generation
    );
}

#[tokio::test]
async fn a_rollout_the_static_pool_cannot_take_is_reported_on_its_machinedeployment() {
    let plane = shared();
    let kubectl = plane.kubectl();
    let client = plane.client().await;
    let ns = "audit-pools";
    cluster_namespace(&kubectl, ns);
    // A worker template on storage-net and workload-net, and a MachineDeployment of four
    // (maxSurge 1) made from it, as Cluster API's CRDs serve them.
    let infrastructure = nicpolicy_e2e::fixtures::infrastructure();
    kubectl.apply(&format!(
        "apiVersion: {infrastructure}
kind: VCDMachineTemplate
metadata:
  name: {ns}-md-0
  namespace: {ns}
  labels: {{cluster.x-k8s.io/cluster-name: {ns}}}
spec:
  template:
    spec:
      catalog: kubernetes
      template: ubuntu-2204-kube-v1.31.4
      extraOvdcNetworks: [storage-net, workload-net]
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineDeployment
metadata:
  name: {ns}-md-0
  namespace: {ns}
spec:
  clusterName: {ns}
  replicas: 4
  strategy: {{type: RollingUpdate, rollingUpdate: {{maxSurge: 1, maxUnavailable: 0}}}}
  selector:
    matchLabels: {{cluster.x-k8s.io/deployment-name: {ns}-md-0}}
  template:
    metadata:
      labels: {{cluster.x-k8s.io/deployment-name: {ns}-md-0}}
    spec:
      clusterName: {ns}
      version: v1.31.4
      bootstrap:
        dataSecretName: {ns}-md-0-bootstrap
      infrastructureRef:
        apiVersion: {infrastructure}
        kind: VCDMachineTemplate
        name: {ns}-md-0
"
    ));
    let controller = Controller::start(&plane, &Settings::single("pools")).await;
    verdict_until(&client, ns, &controller, &format!("{ns}-md-0"), "pass").await;
    // Cloud Director's counts arrive in the inventory (as `nicpolicy inventory import` writes
    // them): storage-net has 3 addresses free, the rollout needs 5.
    edit_config(
        &controller.dir,
        "inventory.yaml",
        "      - {start: 10.20.0.20, end: 10.20.0.250}\n",
        "      - {start: 10.20.0.20, end: 10.20.0.250}\n    totalIpCount: 231\n    usedIpCount: 228\n",
    );
    let (report, took) = report_until(
        &client,
        ns,
        REPORT_DEADLINE,
        &controller,
        "the short pool",
        |r| {
            r["results"]
                .as_array()
                .is_some_and(|all| all.iter().any(|x| x["rule"] == "static-pool"))
        },
    )
    .await;
    eprintln!("e2e: short pool reported in {:.1} s", took.as_secs_f64());
    let short: Vec<&Value> = report["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter(|r| r["rule"] == "static-pool")
        .collect();
    assert_eq!(short.len(), 1, "{report:#}");
    assert_eq!(short[0]["result"], "warn");
    assert_eq!(short[0]["resources"][0]["kind"], "MachineDeployment");
    assert_eq!(short[0]["resources"][0]["name"], format!("{ns}-md-0"));
    assert_eq!(short[0]["properties"]["network"], "storage-net");
    assert!(
        short[0]["message"].as_str().is_some_and(|m| m.starts_with(
            "storage-net: 3 addresses free, a rollout of audit-pools/audit-pools-md-0 needs 5"
        )),
        "{}",
        short[0]
    );
    let metrics = controller.metrics().await;
    let gauge = |name: &str| {
        metrics
            .get(&format!(
                "nicpolicy_controller_{name}{{ovdc=\"\",network=\"storage-net\"}}"
            ))
            .copied()
    };
    assert_eq!(
        gauge("static_pool_free_addresses"),
        Some(3.0),
        "{metrics:?}"
    );
    assert_eq!(
        gauge("static_pool_rollout_addresses"),
        Some(5.0),
        "{metrics:?}"
    );

    // The MachineDeployment scaled down to 1: 2 addresses, which fit; the warning goes.
    kubectl.run(&[
        "scale",
        "machinedeployment",
        &format!("{ns}-md-0"),
        "-n",
        ns,
        "--replicas=1",
    ]);
    report_until(
        &client,
        ns,
        REPORT_DEADLINE,
        &controller,
        "the pool fitting",
        |r| {
            r["results"]
                .as_array()
                .is_some_and(|all| all.iter().all(|x| x["rule"] != "static-pool"))
        },
    )
    .await;
}

/// The chart's Role for the refresh (the token's Secret, the inventories' ConfigMap), rendered
/// with the refresh on, applied in nicpolicy-system.
fn apply_refresh_rbac(kubectl: &nicpolicy_e2e::Kubectl) {
    let output = std::process::Command::new(&nicpolicy_e2e::binaries().helm)
        .args([
            "template",
            "nicpolicy",
            "charts/nicpolicy",
            "--namespace",
            NAMESPACE,
            "--set",
            "image.repository=registry.example.net/platform/nicpolicy",
            "--set",
            "networkPolicy.apiServerCIDRs={10.0.10.0/24},controller.enabled=true,cloudDirector.enabled=true,cloudDirector.site=https://vcd.eu1.example.net,cloudDirector.org=eu1-platform,cloudDirector.vdcs={eu1-ovdc-prod}",
            "--show-only",
            "templates/controller.yaml",
        ])
        .current_dir(nicpolicy_e2e::workspace())
        .output()
        .expect("helm runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let objects =
        nicpolicy_e2e::fixtures::yaml_objects(std::str::from_utf8(&output.stdout).expect("UTF-8"));
    // helm template leaves the release namespace out of the objects' metadata.
    let rbac: Vec<String> = objects
        .into_iter()
        .filter(|o| o["metadata"]["name"] == "nicpolicy-controller-cloud-director")
        .map(|mut o| {
            o["metadata"]["namespace"] = NAMESPACE.into();
            serde_json::to_string(&o).expect("JSON")
        })
        .collect();
    assert_eq!(rbac.len(), 2, "the Role and its binding");
    for object in rbac {
        kubectl.apply(&object);
    }
}

#[tokio::test]
async fn the_controller_refreshes_the_inventories_from_cloud_director() {
    use vcd_double::{Faults, Site, API_TOKEN};
    let plane = shared();
    let kubectl = plane.kubectl();
    let client = plane.client().await;
    let site = Site::start(Faults::default());
    // prod-eu1's clusters are in eu1-ovdc-prod, the double's production VDC.
    let ns = "audit-refresh";
    cluster_namespace(&kubectl, ns);
    machine(&client, ns, "audit-refresh-md-0-a", ns, &["storage-net"]).await;
    let controller_dir = |c: &Controller| c.dir.clone();
    // Controller::start installs the controller's RBAC and namespace; the refresh's own comes
    // from the chart, the token from a Secret of its own.
    let settings = Settings {
        config: format!(
            "inventories:\n  eu1-ovdc-prod: cloud-director/eu1-ovdc-prod.yaml\ncloudDirector:\n  \
             site: {}\n  org: eu1-platform\n  tokenSecret: {{name: nicpolicy-vcd-token}}\n  \
             namespace: {NAMESPACE}\n  refreshInterval: 1s\n  configMap: nicpolicy-inventories\n",
            site.url()
        ),
        ..Settings::single("refresh")
    };
    nicpolicy_e2e::controller::controller_kubeconfig(&plane);
    apply_refresh_rbac(&kubectl);
    kubectl.run(&[
        "delete",
        "secret",
        "nicpolicy-vcd-token",
        "-n",
        NAMESPACE,
        "--ignore-not-found",
    ]);
    kubectl.ok(&[
        "create",
        "secret",
        "generic",
        "nicpolicy-vcd-token",
        "-n",
        NAMESPACE,
        &format!("--from-literal=token={API_TOKEN}"),
    ]);
    let controller = Controller::start(&plane, &settings).await;
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), NAMESPACE);
    let refreshes = |result: &'static str| {
        let controller = &controller;
        async move {
            controller
                .metric(&format!(
                    "nicpolicy_controller_inventory_refreshes_total{{result=\"{result}\"}}"
                ))
                .await
        }
    };
    let until = |what: &str, deadline: Duration| {
        let what = what.to_string();
        let start = Instant::now();
        move |done: bool| {
            assert!(
                done || start.elapsed() < deadline,
                "{what} did not happen within {deadline:?}"
            );
            done
        }
    };
    // The first refresh writes the ConfigMap: a file per VDC, as `inventory import` writes it.
    let check = until("the first refresh", Duration::from_secs(30));
    while !check(refreshes("written").await >= 1.0) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let written = configmaps
        .get("nicpolicy-inventories")
        .await
        .expect("written");
    let data = written.data.clone().expect("data");
    let prod = data
        .get("eu1-ovdc-prod.yaml")
        .expect("eu1-ovdc-prod's file");
    assert!(prod.contains("- name: storage-net\n"), "{prod}");
    assert!(prod.contains("usedIpCount: 178"), "{prod}");
    // Refreshes that read the same networks write nothing.
    let check = until("an unchanged refresh", Duration::from_secs(30));
    while !check(refreshes("unchanged").await >= 2.0) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let again = configmaps
        .get("nicpolicy-inventories")
        .await
        .expect("there");
    assert_eq!(
        again.metadata.resource_version,
        written.metadata.resource_version
    );
    // The webhook, with the same configuration (its own directory, as its own pod's mounts).
    let webhook_dir = plane.dir.join("webhook-refresh");
    std::fs::create_dir_all(&webhook_dir).expect("the webhook's directory");
    for file in ["nicpolicy.yaml", "inventory.yaml"] {
        std::fs::copy(
            controller_dir(&controller).join(file),
            webhook_dir.join(file),
        )
        .expect("the configuration");
    }
    let mut webhook = Webhook::start(&plane, &webhook_dir).await;
    webhook.register().await;
    // What the kubelet does with both pods' ConfigMap volume: the files appear beside the
    // configuration, and the controller and the webhook reload them.
    let project = |data: &std::collections::BTreeMap<String, String>| {
        for base in [controller_dir(&controller), webhook_dir.clone()] {
            let dir = base.join("cloud-director");
            std::fs::create_dir_all(&dir).expect("the mount");
            for (key, text) in data {
                std::fs::write(dir.join(key), text).expect("a projected file");
            }
        }
    };
    project(&data);
    verdict_until(&client, ns, &controller, "audit-refresh-md-0-a", "pass").await;
    let probe = worker(ns, "audit-refresh-md-0-b", Some(ns), Some(&["storage-net"]));
    create(&client, &probe, true)
        .await
        .expect("storage-net is a network of eu1-ovdc-prod");

    // storage-net is deleted in Cloud Director: the next refresh drops it, and every machine
    // that uses it is reported.
    site.set_faults(Faults {
        withdrawn: vec!["storage-net".to_string()],
        ..Faults::default()
    });
    let check = until("the refresh without storage-net", Duration::from_secs(30));
    loop {
        let now = configmaps
            .get("nicpolicy-inventories")
            .await
            .expect("there");
        let text = now
            .data
            .as_ref()
            .and_then(|d| d.get("eu1-ovdc-prod.yaml"))
            .cloned()
            .unwrap_or_default();
        if check(!text.contains("- name: storage-net\n")) {
            project(now.data.as_ref().expect("data"));
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let report = verdict_until(&client, ns, &controller, "audit-refresh-md-0-a", "fail").await;
    let gone = result(&report, "audit-refresh-md-0-a").expect("reported");
    assert_eq!(gone["properties"]["reason"], "NotFound", "{gone}");
    // The webhook judges with the refreshed inventory too: a new machine on storage-net is
    // denied once it reloaded the files (checked every 2 s).
    let check = until("the webhook's denial", Duration::from_secs(30));
    loop {
        let denied = create(&client, &probe, true)
            .await
            .err()
            .map(|e| e.to_string());
        if check(denied.as_deref().is_some_and(|e| e.contains("storage-net"))) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    drop(webhook);

    // Cloud Director out of reach: the last inventories stay, the failure shows in the metric
    // and an Event, and readiness does not follow it.
    let before = configmaps
        .get("nicpolicy-inventories")
        .await
        .expect("there");
    site.set_faults(Faults {
        unavailable: usize::MAX,
        ..Faults::default()
    });
    let check = until("a failed refresh", Duration::from_secs(60));
    while !check(refreshes("failed").await >= 1.0) {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let after = configmaps.get("nicpolicy-inventories").await.expect("kept");
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
    assert_eq!(after.data, before.data);
    let events = events_about(&client, NAMESPACE, "nicpolicy-inventories").await;
    assert!(
        events
            .iter()
            .any(|e| e.reason.as_deref() == Some("InventoryRefreshFailed")),
        "{events:?}"
    );
    assert!(
        controller.ready().await,
        "readiness does not follow Cloud Director"
    );
    kubectl.run(&["delete", "secret", "nicpolicy-vcd-token", "-n", NAMESPACE]);
}

#[tokio::test]
async fn two_replicas_never_lead_at_once_while_the_api_server_stalls() {
    // Its own control plane: the API server is frozen (SIGSTOP) under a leading replica. Its
    // renewals time out, so it must stop leading within the renew deadline, before the standby
    // could take over; the standby cannot reach the Lease either. Both replicas' leader gauges
    // (served by the replicas themselves) are sampled throughout: never both at 1.
    let plane =
        ControlPlane::start("controller-stall", Crds::Release).expect("the control plane starts");
    let kubectl = plane.kubectl();
    let ns = "audit-stall";
    cluster_namespace(&kubectl, ns);
    let client = plane.client().await;
    machine(&client, ns, "audit-stall-md-0-a", ns, &["storage-net"]).await;
    let settings = |identity: &str| Settings {
        lease: Some(("e2e-stall".to_string(), LEASE)),
        ..Settings::single(identity)
    };
    let replicas = std::sync::Arc::new([
        Controller::start(&plane, &settings("replica-a")).await,
        Controller::start(&plane, &settings("replica-b")).await,
    ]);
    report_until(
        &client,
        ns,
        REPORT_DEADLINE,
        &replicas[0],
        "the machine",
        |r| r["summary"]["pass"] == 1,
    )
    .await;
    let leaders = || {
        let replicas = replicas.clone();
        async move {
            let mut leading = Vec::new();
            for (i, replica) in replicas.iter().enumerate() {
                if replica.metric(LEADER).await == 1.0 {
                    leading.push(i);
                }
            }
            leading
        }
    };
    eventually(REPORT_DEADLINE, "one leader", || async {
        leaders().await.len() == 1
    })
    .await;
    let leader = leaders().await[0];

    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let sampling = sampling.clone();
        let replicas = replicas.clone();
        tokio::spawn(async move {
            let mut samples = Vec::new();
            while sampling.load(std::sync::atomic::Ordering::Acquire) {
                let a = replicas[0].metric(LEADER).await;
                let b = replicas[1].metric(LEADER).await;
                samples.push((Instant::now(), a, b));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            samples
        })
    };
    plane.pause_apiserver().expect("SIGSTOP");
    let paused = Instant::now();
    // Its watches hang without an error; the probes find the API server silent.
    let unready_after = eventually(
        LEASE * 4,
        "not ready while the API server is frozen",
        || {
            let replicas = replicas.clone();
            async move { !replicas[0].ready().await && !replicas[1].ready().await }
        },
    )
    .await;
    tokio::time::sleep((LEASE * 2).saturating_sub(paused.elapsed())).await;
    // The frozen leader stopped leading: its renewals could not finish.
    let during = leaders().await;
    plane.resume_apiserver().expect("SIGCONT");
    let resumed = Instant::now();
    eventually(RECOVERY_DEADLINE, "one leader again", || async {
        leaders().await.len() == 1
    })
    .await;
    let recovered = resumed.elapsed();
    eventually(RECOVERY_DEADLINE, "ready again", || {
        let replicas = replicas.clone();
        async move { replicas[0].ready().await && replicas[1].ready().await }
    })
    .await;
    tokio::time::sleep(LEASE).await;
    sampling.store(false, std::sync::atomic::Ordering::Release);
    let samples = sampler.await.expect("sampler");
    let both: Vec<f64> = samples
        .iter()
        .filter(|(_, a, b)| *a == 1.0 && *b == 1.0)
        .map(|(at, _, _)| at.duration_since(paused).as_secs_f64())
        .collect();
    let stepped_down = samples
        .iter()
        .find(|(at, a, b)| *at > paused && [*a, *b][leader] == 0.0)
        .map(|(at, _, _)| at.duration_since(paused));
    eprintln!(
        "e2e: API server frozen {:.1} s: {} samples, leader stepped down after {:?}, not ready \
         after {:.1} s, one leader again {:.1} s after resuming",
        (resumed - paused).as_secs_f64(),
        samples.len(),
        stepped_down,
        unready_after.as_secs_f64(),
        recovered.as_secs_f64()
    );
    assert!(
        both.is_empty(),
        "both replicas led at {both:?} s after the freeze"
    );
    assert!(samples.len() >= 50, "only {} samples", samples.len());
    assert!(
        during.is_empty(),
        "{during:?} still led with the API server frozen"
    );
    let stepped_down = stepped_down.expect("the leader stepped down during the freeze");
    // Within the renew deadline (two thirds of the Lease) plus one retry and a sample.
    assert!(stepped_down < LEASE, "stepped down after {stepped_down:?}");
    // Reporting goes on.
    set_extras(
        &client,
        ns,
        "audit-stall-md-0-a",
        &["storage-net", "storage-net"],
    )
    .await;
    let now_leading = leaders().await[0];
    report_until(
        &client,
        ns,
        RECOVERY_DEADLINE,
        &replicas[now_leading],
        "a change after the freeze",
        |r| verdict(r, "audit-stall-md-0-a").as_deref() == Some("fail"),
    )
    .await;
    let log = replicas[leader].log();
    assert!(
        log.contains("stopped leading: the lease was not renewed within the renew deadline"),
        "{}",
        replicas[leader].log_tail(30)
    );
}

#[tokio::test]
async fn a_watch_that_keeps_failing_makes_the_controller_not_ready_until_it_recovers() {
    // Its own control plane: the controller's right to list and watch is taken away and the API
    // server restarted, so every watch starts over and is refused (403) again and again. New
    // clusters would then be unknown to it: /readyz says so, and recovers once the right is back.
    let mut plane =
        ControlPlane::start("controller-watch", Crds::Release).expect("the control plane starts");
    let kubectl = plane.kubectl();
    let controller = Controller::start(&plane, &Settings::single("watch")).await;
    assert!(controller.ready().await, "{}", controller.log_tail(20));
    let binding = kubectl.ok(&[
        "get",
        "clusterrolebinding",
        "nicpolicy-controller",
        "-o",
        "json",
    ]);
    kubectl.ok(&["delete", "clusterrolebinding", "nicpolicy-controller"]);
    plane
        .restart_apiserver(Duration::from_secs(1))
        .expect("kube-apiserver comes back");
    let failing_for = eventually(RECOVERY_DEADLINE, "not ready", || async {
        !controller.ready().await
    })
    .await;
    // Not a blip of the restart: with the API server back, it stays not ready.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!controller.ready().await, "{}", controller.log_tail(20));
    assert!(
        controller.log().contains("watch keeps failing"),
        "{}",
        controller.log_tail(20)
    );
    let mut binding: Value = serde_json::from_str(&binding).expect("JSON");
    if let Some(metadata) = binding["metadata"].as_object_mut() {
        for field in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "managedFields",
        ] {
            metadata.remove(field);
        }
    }
    let restored = kubectl.run_with(&["create", "-f", "-"], Some(&binding.to_string()));
    assert!(restored.success, "{}", restored.stderr);
    let recovered_in = eventually(RECOVERY_DEADLINE, "ready again", || async {
        controller.ready().await
    })
    .await;
    eprintln!(
        "e2e: not ready {:.1} s after the restart without RBAC, ready {:.1} s after it was restored",
        failing_for.as_secs_f64(),
        recovered_in.as_secs_f64()
    );
    assert!(
        controller.log().contains("watch recovered"),
        "{}",
        controller.log_tail(20)
    );
}
