//! A policy served from an OCI registry through the real kube-apiserver: the site's chain is
//! published to a loopback registry (Debian's docker-registry), signed, and named by digest in
//! the webhook's configuration with a `verification:` rule. Admission decides with the pulled
//! module; a webhook restarted while the registry is down serves it from its store, signature
//! checked again; a reload to an unsigned module is refused while the signed one keeps serving.
//! Its own control plane and registry.

use std::time::Duration;

use nicpolicy_e2e::controller::eventually;
use nicpolicy_e2e::fixtures::{
    cluster_namespace, control_plane, create, extras, refusal, worker, WORKER_DEFAULTS,
};
use nicpolicy_e2e::registry::Registry;
use nicpolicy_e2e::webhook::{edit_config, shipped_config};
use nicpolicy_e2e::{ControlPlane, Crds, Webhook};

const PASSWORD: &str = "e2e-signing";

#[tokio::test]
async fn a_signed_policy_from_a_registry_decides_admission_through_outages_and_reloads() {
    let plane = ControlPlane::start("registry", Crds::Release).expect("the control plane starts");
    let kubectl = plane.kubectl();
    cluster_namespace(&kubectl, "prod-eu1");
    let mut registry = Registry::new(&plane, "policies");
    let role_based = registry.publish("role-based", "1.0.0");
    registry.nicpolicy(
        &["generate-key-pair", "--output-key-prefix", "platform"],
        &[("COSIGN_PASSWORD", PASSWORD)],
    );
    registry.nicpolicy(
        &["sign", &role_based, "--key", "platform.key", "--plain-http"],
        &[("COSIGN_PASSWORD", PASSWORD)],
    );

    // The shipped configuration with its built-in chain replaced by the published module.
    let dir = shipped_config(&plane, "registry");
    std::fs::copy(
        registry.dir().join("platform.pub"),
        dir.join("platform.pub"),
    )
    .expect("the public key beside the configuration");
    edit_config(
        &dir,
        "nicpolicy.yaml",
        "- builtin: role-based",
        &format!("- oci: {role_based}"),
    );
    edit_config(
        &dir,
        "nicpolicy.yaml",
        "registry:\n",
        &format!(
            "verification:\n  - references: [\"{}/platform/*\"]\n    keys: [platform.pub]\n\
             registry:\n  plainHttp: true\n",
            registry.host()
        ),
    );
    let mut webhook = Webhook::start(&plane, &dir).await;
    webhook.register().await;
    assert!(
        webhook.log().contains("pulled the policy module") && webhook.log().contains(&role_based),
        "the pull is logged with its digest:\n{}",
        webhook.log_tail(40)
    );

    // Admission decides with the pulled module: defaults for a worker, a refusal for a
    // control-plane machine on a forbidden network.
    let client = plane.client().await;
    admitted_worker(
        &client,
        &webhook,
        "prod-eu1-md-0-r1",
        "with the pulled module",
    )
    .await;
    let refused = |err: kube::Error| {
        let (code, _, message, _) = refusal(&err);
        assert_eq!(code, 422, "{message}");
        assert!(message.contains("ext-dmz-net"), "{message}");
    };
    refused(
        create(
            &client,
            &control_plane("prod-eu1", "prod-eu1-cp-r1", "prod-eu1", &["ext-dmz-net"]),
            false,
        )
        .await
        .expect_err("a control plane on ext-dmz-net is refused"),
    );

    // The registry is down and the webhook restarts: the module comes from the store, its
    // stored signature checked with the configured key, and admission goes on.
    registry.stop();
    webhook.restart().await;
    admitted_worker(&client, &webhook, "prod-eu1-md-0-r2", "from the store").await;

    // The registry is back with an unsigned module; the configuration is changed to it. The
    // reload is refused (logged, counted) and the signed module keeps deciding.
    registry.start();
    let capvcd = registry.publish("capvcd", "1.0.0");
    edit_config(&dir, "nicpolicy.yaml", &role_based, &capvcd);
    eventually(
        Duration::from_secs(30),
        "the unsigned module refused",
        || {
            let log = webhook.log();
            async move { log.contains("not signed") }
        },
    )
    .await;
    let failures = webhook
        .metric_sum("nicpolicy_policy_load_failures_total")
        .await;
    assert!(failures >= 1.0, "{}", webhook.log_tail(20));
    admitted_worker(
        &client,
        &webhook,
        "prod-eu1-md-0-r3",
        "after the refused reload",
    )
    .await;
    refused(
        create(
            &client,
            &control_plane("prod-eu1", "prod-eu1-cp-r2", "prod-eu1", &["ext-dmz-net"]),
            false,
        )
        .await
        .expect_err("still refused by the signed module"),
    );
}

/// Creates the worker `name` of prod-eu1 and checks it was admitted with the workers'
/// defaults; a refusal fails naming `when`, with the webhook's log.
async fn admitted_worker(client: &kube::Client, webhook: &Webhook, name: &str, when: &str) {
    let stored = create(
        client,
        &worker("prod-eu1", name, Some("prod-eu1"), None),
        false,
    )
    .await
    .unwrap_or_else(|err| {
        panic!(
            "{name} not admitted {when}: {err}\n{}",
            webhook.log_tail(30)
        )
    });
    assert_eq!(extras(&stored), WORKER_DEFAULTS, "{name} {when}");
}
