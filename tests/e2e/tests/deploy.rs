//! config/ applied the way docs/deploy.md tells an operator to: `kubectl apply --server-side -k
//! config/` after writing the policy module into config/nicpolicy/policy.wasm, then
//! config/controller/ as docs/audit.md says, against a real API server (with cert-manager's CRDs
//! written for the test; nothing runs the pods).

use std::path::Path;

use base64::Engine as _;
use nicpolicy_e2e::{binaries, shared, workspace};
use serde_json::Value;

/// Copies config/ as a user's clone has it (without any module written into it yet).
fn copy_config(to: &Path) {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).expect("mkdir");
        for entry in std::fs::read_dir(from).expect("read config/") {
            let entry = entry.expect("entry");
            let target = to.join(entry.file_name());
            if entry.file_type().expect("type").is_dir() {
                copy(&entry.path(), &target);
            } else if entry.path().extension().is_none_or(|ext| ext != "wasm") {
                std::fs::copy(entry.path(), target).expect("copy");
            }
        }
    }
    copy(&workspace().join("config"), to);
}

fn export(policy: &str, to: &Path) -> Vec<u8> {
    let status = std::process::Command::new(&binaries().nicpolicy)
        .args(["export", policy, "-o"])
        .arg(to)
        .status()
        .expect("nicpolicy export runs");
    assert!(status.success());
    std::fs::read(to).expect("exported module")
}

#[tokio::test]
async fn the_kustomization_applies_as_the_deploy_guide_says() {
    let plane = shared();
    let kubectl = plane.kubectl();
    let crds = workspace().join("tests/e2e/fixtures/cert-manager-crds.yaml");
    kubectl.ok(&["apply", "-f", &crds.to_string_lossy()]);
    kubectl.ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/issuers.cert-manager.io",
        "crd/certificates.cert-manager.io",
    ]);

    let config = plane.dir.join("config");
    copy_config(&config);
    let config_arg = config.to_string_lossy().into_owned();
    // Step 2: the module beside the configuration, under the name the kustomization carries.
    let module = export("role-based", &config.join("nicpolicy/policy.wasm"));

    // Step 4, as written.
    let applied = kubectl.run(&["apply", "--server-side", "-k", &config_arg]);
    assert!(
        applied.success,
        "kubectl apply --server-side -k config/ failed:\n{}",
        applied.stderr
    );
    for object in [
        "namespace/nicpolicy-system serverside-applied",
        "serviceaccount/nicpolicy-webhook serverside-applied",
        "clusterrole.rbac.authorization.k8s.io/nicpolicy-webhook serverside-applied",
        "clusterrolebinding.rbac.authorization.k8s.io/nicpolicy-webhook serverside-applied",
        "configmap/nicpolicy-config serverside-applied",
        "service/nicpolicy-webhook serverside-applied",
        "deployment.apps/nicpolicy-webhook serverside-applied",
        "poddisruptionbudget.policy/nicpolicy-webhook serverside-applied",
        "certificate.cert-manager.io/nicpolicy-webhook-cert serverside-applied",
        "issuer.cert-manager.io/nicpolicy-selfsigned serverside-applied",
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/nicpolicy serverside-applied",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/nicpolicy serverside-applied",
    ] {
        assert!(
            applied.stdout.contains(object),
            "{object} missing from:\n{}",
            applied.stdout
        );
    }
    // Client-side apply (over the installed objects) would store the whole ConfigMap again in its last-applied annotation,
    // over the API server's 256 KiB limit for annotations: why the guide says --server-side.
    let client_side = kubectl.run(&["apply", "--dry-run=server", "-k", &config_arg]);
    assert!(
        !client_side.success,
        "client-side apply of the module's ConfigMap went through"
    );
    assert!(
        client_side.stderr.contains("Too long"),
        "{}",
        client_side.stderr
    );

    let stored_module = || {
        let map: Value = serde_json::from_str(&kubectl.ok(&[
            "get",
            "configmap",
            "-n",
            "nicpolicy-system",
            "nicpolicy-config",
            "-o",
            "json",
        ]))
        .expect("JSON");
        let text = map["binaryData"]["policy.wasm"]
            .as_str()
            .expect("the module is in binaryData");
        assert!(map["data"]["nicpolicy.yaml"]
            .as_str()
            .is_some_and(|c| c.contains("path: policy.wasm")));
        assert!(map["data"]["inventory.yaml"].is_string());
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .expect("base64")
    };
    assert!(
        stored_module() == module,
        "the ConfigMap does not carry the exported module"
    );
    let deployment: Value = serde_json::from_str(&kubectl.ok(&[
        "get",
        "deployment",
        "-n",
        "nicpolicy-system",
        "nicpolicy-webhook",
        "-o",
        "json",
    ]))
    .expect("JSON");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["serviceAccountName"],
        "nicpolicy-webhook"
    );

    // Then the controller, as docs/audit.md says: its PolicyReport CRD, RBAC and Deployment
    // beside the webhook's objects.
    let controller = config.join("controller").to_string_lossy().into_owned();
    let audit = kubectl.run(&["apply", "-k", &controller]);
    assert!(
        audit.success,
        "kubectl apply -k config/controller/ failed:\n{}",
        audit.stderr
    );
    assert!(
        audit.stdout.contains("configmap/nicpolicy-candidate"),
        "{}",
        audit.stdout
    );

    // A site's own module: copied over policy.wasm and applied again, no other edit; the
    // ConfigMap is updated in place (what the running pods hot-reload).
    let own = export("zone-aware", &plane.dir.join("site-policy.wasm"));
    assert!(own != module);
    std::fs::copy(
        plane.dir.join("site-policy.wasm"),
        config.join("nicpolicy/policy.wasm"),
    )
    .expect("copy");
    let reapplied = kubectl.run(&["apply", "--server-side", "-k", &config_arg]);
    assert!(reapplied.success, "{}", reapplied.stderr);
    assert!(
        stored_module() == own,
        "the ConfigMap was not updated with the site's module"
    );

    // Without a module, kustomize names the missing file.
    std::fs::remove_file(config.join("nicpolicy/policy.wasm")).expect("remove");
    let missing = kubectl.run(&[
        "apply",
        "--server-side",
        "--dry-run=server",
        "-k",
        &config_arg,
    ]);
    assert!(!missing.success);
    assert!(missing.stderr.contains("policy.wasm"), "{}", missing.stderr);
}
