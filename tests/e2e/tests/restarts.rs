//! kube-apiserver restarted under a running nicpolicy: the watches recover and reviews keep
//! working without restarting nicpolicy. Its own control plane, since it stops the API server.

use std::time::Duration;

use nicpolicy_e2e::fixtures::{
    cluster, cluster_namespace, create, extras, plan_networks, planned_on, worker, WORKER_DEFAULTS,
};
use nicpolicy_e2e::{ControlPlane, Crds, Webhook};

/// How long the webhook's watches may take to be current again once kube-apiserver is back:
/// they back off like client-go's reflectors (0.8 s doubling up to 30 s, with jitter) while
/// the API server is down, and re-list once after it (their resource version is too old for
/// the new process's watch cache).
const RECOVERY_DEADLINE: Duration = Duration::from_secs(45);

#[tokio::test]
async fn reviews_and_watches_survive_an_api_server_restart() {
    let mut plane =
        ControlPlane::start("restarts", Crds::Release).expect("the control plane starts");
    let kubectl = plane.kubectl();
    cluster_namespace(&kubectl, "prod-eu1");
    let mut webhook = Webhook::registered(&plane, "restarts").await;
    let client = plane.client().await;
    create(
        &client,
        &worker("prod-eu1", "prod-eu1-md-0-a1", Some("prod-eu1"), None),
        false,
    )
    .await
    .expect("admitted before the restart");

    for round in 1..=2 {
        plane
            .restart_apiserver(Duration::from_secs(3))
            .expect("kube-apiserver comes back");
        assert!(
            webhook.running(),
            "nicpolicy exited while the API server was down:\n{}",
            webhook.log_tail(30)
        );
        // A new client: the old connections went with the old process.
        let client = plane.client().await;

        // Reviews work again, from the caches nicpolicy kept.
        let name = format!("prod-eu1-md-0-after-{round}");
        let stored = create(
            &client,
            &worker("prod-eu1", &name, Some("prod-eu1"), None),
            false,
        )
        .await
        .unwrap_or_else(|err| {
            panic!(
                "no review after restart {round}: {err}\n{}",
                webhook.log_tail(30)
            )
        });
        assert_eq!(extras(&stored), WORKER_DEFAULTS);

        // The watches are live again: a cluster created and one changed after the restart are
        // seen.
        let new = format!("prod-eu1-r{round}");
        kubectl.apply(&cluster("prod-eu1", &new, "mgmt-net"));
        let took = planned_on(&client, "prod-eu1", &new, "mgmt-net", RECOVERY_DEADLINE).await;
        let network = if round == 1 { "backup-net" } else { "mgmt-net" };
        kubectl.ok(&[
            "patch",
            "vcdcluster",
            "-n",
            "prod-eu1",
            "prod-eu1",
            "--type=merge",
            "-p",
            &format!(r#"{{"spec":{{"ovdcNetwork":"{network}"}}}}"#),
        ]);
        let changed = planned_on(&client, "prod-eu1", "prod-eu1", network, RECOVERY_DEADLINE).await;
        eprintln!(
            "e2e: after restart {round}: new cluster seen in {:.2} s, changed network in {:.2} s",
            took.as_secs_f64(),
            changed.as_secs_f64()
        );
        let stored = create(
            &client,
            &worker("prod-eu1", &format!("{name}-b"), Some("prod-eu1"), None),
            false,
        )
        .await
        .expect("admitted");
        assert_eq!(plan_networks(&stored)[0], network);
    }
    assert!(plane.etcd_running());
    let log = webhook.log();
    assert!(
        log.contains("watch error; retrying"),
        "the outage was noticed and retried:\n{}",
        webhook.log_tail(30)
    );
}
