//! What an operator installs, applied to a real API server (with cert-manager's and the
//! Prometheus Operator's CRDs written for the test; nothing runs the pods): config/ from a fresh
//! clone as docs/deploy.md says (`kubectl apply --server-side -k config/`, then
//! config/controller/), a site's own module through the overlay of examples/kustomize/, and the
//! Helm chart in each certificate mode with every option on, in a namespace of its own. config/
//! is what the chart renders (config/generate.sh --check).

use std::path::Path;
use std::process::Command;

use base64::Engine as _;
use nicpolicy_e2e::kubectl::Kubectl;
use nicpolicy_e2e::{binaries, shared, workspace};
use serde_json::{json, Value};

/// Copies `from` (relative to the workspace) to `to`, as a fresh clone has it: files git tracks
/// only, so nothing generated in this checkout (a module, say) comes along.
fn copy_tracked(from: &str, to: &Path) {
    let listed = Command::new("git")
        .args(["ls-files", "-z", "--", from])
        .current_dir(workspace())
        .output()
        .expect("git runs");
    assert!(listed.status.success(), "git ls-files {from} failed");
    let files: Vec<&[u8]> = listed
        .stdout
        .split(|byte| *byte == 0)
        .filter(|name| !name.is_empty())
        .collect();
    assert!(!files.is_empty(), "git tracks nothing under {from}");
    for name in files {
        let name = String::from_utf8_lossy(name).into_owned();
        let target = to.join(&name);
        std::fs::create_dir_all(target.parent().expect("a file has a parent")).expect("mkdir");
        std::fs::copy(workspace().join(&name), &target).expect("copy");
    }
}

fn export(policy: &str, to: &Path) -> Vec<u8> {
    let status = Command::new(&binaries().nicpolicy)
        .args(["export", policy, "-o"])
        .arg(to)
        .status()
        .expect("nicpolicy export runs");
    assert!(status.success());
    std::fs::read(to).expect("exported module")
}

fn install_crds(kubectl: &Kubectl, fixture: &str, crds: &[&str]) {
    let file = workspace().join("tests/e2e/fixtures").join(fixture);
    kubectl.ok(&["apply", "-f", &file.to_string_lossy()]);
    let mut args = vec!["wait", "--for=condition=Established", "--timeout=60s"];
    args.extend(crds);
    kubectl.ok(&args);
}

/// cert-manager's Issuer and Certificate CRDs, written for the tests.
fn install_cert_manager_crds(kubectl: &Kubectl) {
    install_crds(
        kubectl,
        "cert-manager-crds.yaml",
        &[
            "crd/issuers.cert-manager.io",
            "crd/certificates.cert-manager.io",
        ],
    );
}

fn get_json(kubectl: &Kubectl, args: &[&str]) -> Value {
    let mut all = vec!["get"];
    all.extend(args);
    all.extend(["-o", "json"]);
    serde_json::from_str(&kubectl.ok(&all)).expect("kubectl prints JSON")
}

/// `helm ARGS` in the workspace: (success, stdout, stderr).
fn helm(args: &[&str]) -> (bool, String, String) {
    let output = Command::new(&binaries().helm)
        .args(args)
        .current_dir(workspace())
        .output()
        .expect("helm runs");
    let out = String::from_utf8_lossy(&output.stdout).into_owned();
    let err = String::from_utf8_lossy(&output.stderr).into_owned();
    eprintln!(
        "$ helm {}   [{}]\n  {}",
        args.join(" "),
        output.status,
        err.trim()
    );
    (output.status.success(), out, err)
}

#[tokio::test]
async fn config_applies_from_a_fresh_clone_and_takes_a_site_module_through_the_overlay() {
    let plane = shared();
    let kubectl = plane.kubectl();
    install_cert_manager_crds(&kubectl);
    let clone = plane.dir.join("clone");
    copy_tracked("config", &clone);
    copy_tracked("examples/kustomize", &clone);
    let config = clone.join("config").to_string_lossy().into_owned();

    // As written: nothing generated first.
    let applied = kubectl.run(&["apply", "--server-side", "-k", &config]);
    assert!(
        applied.success,
        "kubectl apply --server-side -k config/ failed on a fresh clone:\n{}",
        applied.stderr
    );
    for object in [
        "namespace/nicpolicy-system",
        "serviceaccount/nicpolicy-webhook",
        "clusterrole.rbac.authorization.k8s.io/nicpolicy-webhook",
        "clusterrolebinding.rbac.authorization.k8s.io/nicpolicy-webhook",
        "configmap/nicpolicy-config",
        "service/nicpolicy-webhook",
        "deployment.apps/nicpolicy-webhook",
        "poddisruptionbudget.policy/nicpolicy-webhook",
        "issuer.cert-manager.io/nicpolicy-selfsigned",
        "certificate.cert-manager.io/nicpolicy-ca",
        "issuer.cert-manager.io/nicpolicy-ca",
        "certificate.cert-manager.io/nicpolicy-webhook-cert",
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/nicpolicy",
        "validatingwebhookconfiguration.admissionregistration.k8s.io/nicpolicy",
    ] {
        assert!(
            applied
                .stdout
                .contains(&format!("{object} serverside-applied")),
            "{object} missing from:\n{}",
            applied.stdout
        );
    }
    let ns = ["-n", "nicpolicy-system"];
    let map = get_json(&kubectl, &["configmap", ns[0], ns[1], "nicpolicy-config"]);
    assert!(
        map.get("binaryData").is_none(),
        "no module in the ConfigMap"
    );
    assert!(map["data"]["nicpolicy.yaml"]
        .as_str()
        .is_some_and(|c| c.contains("builtin: role-based")));
    let deployment = get_json(&kubectl, &["deployment", ns[0], ns[1], "nicpolicy-webhook"]);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "nicpolicy-webhook");
    assert_eq!(
        pod["containers"][0]["image"],
        "registry.example.net/platform/nicpolicy:0.1.0"
    );
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    // The serving certificate is signed by the CA whose Secret the webhooks trust: renewals
    // keep the caBundle.
    let serving = get_json(
        &kubectl,
        &["certificate", ns[0], ns[1], "nicpolicy-webhook-cert"],
    );
    assert_eq!(serving["spec"]["issuerRef"]["name"], "nicpolicy-ca");
    let ca = get_json(&kubectl, &["certificate", ns[0], ns[1], "nicpolicy-ca"]);
    assert_eq!(ca["spec"]["isCA"], true);
    let validating = get_json(&kubectl, &["validatingwebhookconfiguration", "nicpolicy"]);
    assert_eq!(
        validating["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        "nicpolicy-system/nicpolicy-webhook-cert"
    );

    // Then the controller, as docs/audit.md says.
    let controller = clone
        .join("config/controller")
        .to_string_lossy()
        .into_owned();
    let audit = kubectl.run(&["apply", "--server-side", "-k", &controller]);
    assert!(audit.success, "config/controller/: {}", audit.stderr);
    for object in [
        "configmap/nicpolicy-candidate",
        "deployment.apps/nicpolicy-controller",
        "service/nicpolicy-controller",
        "customresourcedefinition.apiextensions.k8s.io/reports.openreports.io",
    ] {
        assert!(audit.stdout.contains(object), "{object}: {}", audit.stdout);
    }

    // A site's own module: written into the overlay and applied; the ConfigMap is updated in
    // place (what the running pods hot-reload).
    let overlay = clone.join("examples/kustomize/site-module");
    let overlay_arg = overlay.to_string_lossy().into_owned();
    let missing = kubectl.run(&[
        "apply",
        "--server-side",
        "--dry-run=server",
        "-k",
        &overlay_arg,
    ]);
    assert!(!missing.success, "the overlay applied without its module");
    assert!(missing.stderr.contains("policy.wasm"), "{}", missing.stderr);
    let module = export("capvcd", &overlay.join("policy.wasm"));
    let applied = kubectl.run(&["apply", "--server-side", "-k", &overlay_arg]);
    assert!(applied.success, "{}", applied.stderr);
    let map = get_json(&kubectl, &["configmap", ns[0], ns[1], "nicpolicy-config"]);
    let stored = base64::engine::general_purpose::STANDARD
        .decode(map["binaryData"]["policy.wasm"].as_str().expect("module"))
        .expect("base64");
    assert!(stored == module, "the ConfigMap does not carry the module");
    assert!(map["data"]["nicpolicy.yaml"]
        .as_str()
        .is_some_and(|c| c.contains("path: policy.wasm")));
    assert!(map["data"]["inventory.yaml"].is_string());
    // A module from a registry: the overlay mounts the docker-registry Secret where its
    // configuration's registry.config says, and the API server takes it.
    let registry_overlay = clone.join("examples/kustomize/registry-module");
    let registry_arg = registry_overlay.to_string_lossy().into_owned();
    let rendered = kubectl.run(&["kustomize", &registry_arg]);
    assert!(rendered.success, "{}", rendered.stderr);
    let objects: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&rendered.stdout)
        .filter_map(|document| serde::Deserialize::deserialize(document).ok())
        .collect();
    let config: Value = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "nicpolicy-config")
        .and_then(|o| o["data"]["nicpolicy.yaml"].as_str())
        .and_then(|text| serde_yaml_ng::from_str(text).ok())
        .expect("the overlay's configuration");
    let webhook = objects
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "nicpolicy-webhook")
        .expect("the webhook's Deployment");
    let pod = &webhook["spec"]["template"]["spec"];
    let mount = pod["containers"][0]["volumeMounts"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["name"] == "registry-credentials"))
        .expect("the credentials mount");
    let volume = pod["volumes"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == "registry-credentials"))
        .expect("the credentials volume");
    assert_eq!(volume["secret"]["items"][0]["key"], ".dockerconfigjson");
    assert_eq!(
        format!(
            "{}/{}",
            mount["mountPath"].as_str().unwrap_or(""),
            volume["secret"]["items"][0]["path"].as_str().unwrap_or("")
        ),
        config["registry"]["config"].as_str().unwrap_or("")
    );
    let dry_run = kubectl.run(&[
        "apply",
        "--server-side",
        "--dry-run=server",
        "-k",
        &registry_arg,
    ]);
    assert!(dry_run.success, "{}", dry_run.stderr);
    // The component mounts the credentials in the controller's pod too, when an overlay has both.
    let both = clone.join("registry-both");
    std::fs::create_dir_all(&both).expect("overlay directory");
    std::fs::write(
        both.join("kustomization.yaml"),
        "resources: [../config, ../config/controller]\ncomponents: [../config/registry]\n",
    )
    .expect("overlay");
    let both_arg = both.to_string_lossy().into_owned();
    let rendered = kubectl.run(&["kustomize", &both_arg]);
    assert!(rendered.success, "{}", rendered.stderr);
    let mut mounted: Vec<String> = serde_yaml_ng::Deserializer::from_str(&rendered.stdout)
        .filter_map(|document| serde::Deserialize::deserialize(document).ok())
        .filter(|o: &Value| o["kind"] == "Deployment")
        .filter(|o| {
            o["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
                .as_array()
                .is_some_and(|m| {
                    m.iter().any(|m| {
                        m["name"] == "registry-credentials"
                            && m["mountPath"] == "/etc/nicpolicy-registry"
                    })
                })
        })
        .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    mounted.sort();
    assert_eq!(mounted, ["nicpolicy-controller", "nicpolicy-webhook"]);
    // The verification key is a file of the same ConfigMap, beside the configuration.
    let keys = config["verification"][0]["keys"][0].as_str().unwrap_or("");
    assert!(
        objects.iter().any(|o| o["kind"] == "ConfigMap"
            && o["metadata"]["name"] == "nicpolicy-config"
            && o["data"][keys].is_string()),
        "{keys} is not in the configuration's ConfigMap"
    );
    // Client-side apply would store the whole ConfigMap again in its last-applied annotation,
    // over the API server's 256 KiB limit for annotations: why the guide says --server-side.
    let client_side = kubectl.run(&["apply", "--dry-run=server", "-k", &overlay_arg]);
    assert!(
        !client_side.success,
        "client-side apply of the module went through"
    );
    assert!(
        client_side.stderr.contains("Too long"),
        "{}",
        client_side.stderr
    );
}

#[tokio::test]
async fn config_is_what_the_chart_renders() {
    let status = Command::new(workspace().join("config/generate.sh"))
        .arg("--check")
        .env("HELM", &binaries().helm)
        .status()
        .expect("config/generate.sh runs");
    assert!(
        status.success(),
        "config/ drifted from charts/nicpolicy (the difference is above): run config/generate.sh"
    );
}

#[test]
fn the_shipped_openreports_crd_is_the_one_the_openreports_project_publishes() {
    let read = |path: &Path| -> Value {
        let text =
            std::fs::read_to_string(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        let document = serde_yaml_ng::Deserializer::from_str(&text)
            .map(|doc| serde::Deserialize::deserialize(doc).expect("YAML"))
            .find(|doc: &Value| doc.is_object());
        document.unwrap_or_else(|| panic!("{}: no document", path.display()))
    };
    let published = read(
        &binaries()
            .crds
            .join("openreports/openreports.io_reports.yaml"),
    );
    let shipped = read(&workspace().join("config/openreports/reports.yaml"));
    assert_eq!(shipped["metadata"]["name"], "reports.openreports.io");
    assert_eq!(shipped["metadata"]["name"], published["metadata"]["name"]);
    assert_eq!(
        shipped["spec"], published["spec"],
        "charts/nicpolicy/templates/openreports-crd.yaml is not the module's CRD"
    );
}

#[tokio::test]
async fn the_chart_installs_in_any_namespace_in_each_certificate_mode() {
    let plane = shared();
    let kubectl = plane.kubectl();
    install_cert_manager_crds(&kubectl);
    install_crds(
        &kubectl,
        "prometheus-operator-crds.yaml",
        &[
            "crd/servicemonitors.monitoring.coreos.com",
            "crd/prometheusrules.monitoring.coreos.com",
        ],
    );
    let (linted, out, _) = helm(&[
        "lint",
        "--strict",
        "charts/nicpolicy",
        "--set",
        "image.repository=registry.example.net/platform/nicpolicy",
    ]);
    assert!(linted, "helm lint: {out}");

    // Without an image, the chart says where to get one instead of pulling a stranger's.
    let (ok, _, err) = helm(&["template", "nicpolicy", "charts/nicpolicy"]);
    assert!(!ok);
    assert!(err.contains("image.repository"), "{err}");
    // The NetworkPolicy is on by default, and without the API server's addresses it would let
    // anyone in: the defaults alone are refused, naming the value to set.
    let (ok, _, err) = helm(&[
        "template",
        "nicpolicy",
        "charts/nicpolicy",
        "--set",
        "image.repository=registry.example.net/platform/nicpolicy",
    ]);
    assert!(!ok, "rendered a NetworkPolicy open to any source");
    assert!(err.contains("networkPolicy.apiServerCIDRs"), "{err}");
    // With them, the webhook's port admits those sources only.
    let (ok, rendered, err) = helm(&[
        "template",
        "nicpolicy",
        "charts/nicpolicy",
        "--set",
        "image.repository=registry.example.net/platform/nicpolicy",
        "--set",
        "networkPolicy.apiServerCIDRs={10.0.10.0/24}",
        "--show-only",
        "templates/networkpolicy.yaml",
    ]);
    assert!(ok, "helm template: {err}");
    let policy = nicpolicy_e2e::fixtures::yaml_objects(&rendered)
        .into_iter()
        .next()
        .expect("the webhook's NetworkPolicy");
    assert_eq!(
        policy["spec"]["ingress"][0]["from"],
        json!([{"ipBlock": {"cidr": "10.0.10.0/24"}}]),
        "{rendered}"
    );

    let ca_pem = std::fs::read_to_string(&plane.pki.ca_file).expect("a CA to name");
    let every_option = [
        "image.repository=registry.example.net/platform/nicpolicy",
        "image.digest=sha256:4006b3818b3ef1b5dc8abb988b2d7c1b8cf222958b4ab57288a66bd8e4d7b86d",
        "controller.enabled=true",
        "metrics.serviceMonitor.enabled=true",
        "metrics.prometheusRule.enabled=true",
        "networkPolicy.enabled=true",
        "networkPolicy.apiServerCIDRs={10.96.0.0/12}",
        "webhook.namespaceOptOut=true",
        "webhook.failurePolicy=Ignore",
        "webhook.timeoutSeconds=3",
        "registry.credentialsSecret=registry-pull",
        "registry.caConfigMap=registry-ca",
        "verification.keysConfigMap=policy-keys",
        "verification.rules[0].references[0]=registry.example.net/platform/*",
        "verification.rules[0].keys[0]=platform.pub",
        "webhook.clientAuth.caConfigMap=kube-apiserver-webhook-client-ca",
    ];
    for (mode, namespace, extra) in [
        ("certManager", "platform-nicpolicy", vec![]),
        (
            "existingSecret",
            "platform-nicpolicy-byo",
            vec![
                "certificates.existingSecret.name=webhook-serving",
                // The other report kind, and its CRD.
                "controller.reports.format=wgpolicyk8s",
                // The backstop off (on by default: the other mode checks it).
                "backstop.enabled=false",
            ],
        ),
    ] {
        kubectl.ok(&["create", "namespace", namespace]);
        let release = format!("np-{}", mode.to_lowercase());
        let mut args = vec![
            "template".to_string(),
            release.clone(),
            "charts/nicpolicy".to_string(),
            "--namespace".to_string(),
            namespace.to_string(),
            "--set".to_string(),
            format!("certificates.mode={mode}"),
        ];
        for set in every_option.iter().copied().chain(extra) {
            args.extend(["--set".to_string(), set.to_string()]);
        }
        if mode == "existingSecret" {
            // Without the CA, the chart refuses to render a webhook nobody can trust.
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let (ok, _, err) = helm(&refs);
            assert!(!ok, "rendered without a caBundle");
            assert!(
                err.contains("certificates.existingSecret.caBundle"),
                "{err}"
            );
            args.extend([
                "--set-string".to_string(),
                format!("certificates.existingSecret.caBundle={ca_pem}"),
            ]);
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, rendered, err) = helm(&refs);
        assert!(ok, "helm template ({mode}): {err}");
        let applied = kubectl.run_with(
            &[
                "apply",
                "--server-side",
                "--dry-run=server",
                "-n",
                namespace,
                "-f",
                "-",
            ],
            Some(&rendered),
        );
        assert!(
            applied.success,
            "the API server refused the chart ({mode}):\n{}",
            applied.stderr
        );
        for object in [
            format!("deployment.apps/{release}-webhook"),
            format!("deployment.apps/{release}-controller"),
            format!("poddisruptionbudget.policy/{release}-webhook"),
            format!("servicemonitor.monitoring.coreos.com/{release}"),
            format!("prometheusrule.monitoring.coreos.com/{release}"),
            format!("networkpolicy.networking.k8s.io/{release}-webhook"),
            format!("mutatingwebhookconfiguration.admissionregistration.k8s.io/{release}"),
            format!("validatingwebhookconfiguration.admissionregistration.k8s.io/{release}"),
        ] {
            assert!(
                applied.stdout.contains(&object),
                "{object} missing ({mode}):\n{}",
                applied.stdout
            );
        }
        // The backstop: on by default, off when asked.
        for object in [
            format!("validatingadmissionpolicy.admissionregistration.k8s.io/{release}-backstop-vcdmachine"),
            format!("validatingadmissionpolicybinding.admissionregistration.k8s.io/{release}-backstop-vcdmachinetemplate"),
            format!("configmap/{release}-backstop"),
        ] {
            assert_eq!(
                applied.stdout.contains(&object),
                mode == "certManager",
                "{object} ({mode}):\n{}",
                applied.stdout
            );
        }
        // The CRD of the report kind chosen, and not the other's.
        let (crd, other) = if mode == "certManager" {
            ("reports.openreports.io", "policyreports.wgpolicyk8s.io")
        } else {
            ("policyreports.wgpolicyk8s.io", "reports.openreports.io")
        };
        let crd_kind = "customresourcedefinition.apiextensions.k8s.io";
        assert!(
            applied.stdout.contains(&format!("{crd_kind}/{crd}")),
            "{crd} missing ({mode}):\n{}",
            applied.stdout
        );
        assert!(
            !applied.stdout.contains(&format!("{crd_kind}/{other}")),
            "{other} rendered ({mode})"
        );
        // The namespace follows the release: the certificate's names, the CA injection and
        // the webhooks' Service.
        let objects: Vec<Value> = nicpolicy_e2e::fixtures::yaml_objects(&rendered);
        let find = |kind: &str| {
            objects
                .iter()
                .find(|o| o["kind"] == kind)
                .unwrap_or_else(|| panic!("no {kind} rendered ({mode})"))
        };
        let validating = find("ValidatingWebhookConfiguration");
        let hook = &validating["webhooks"][0];
        assert_eq!(hook["clientConfig"]["service"]["namespace"], namespace);
        assert_eq!(hook["failurePolicy"], "Ignore");
        assert_eq!(hook["timeoutSeconds"], 3);
        assert_eq!(
            hook["namespaceSelector"]["matchExpressions"][0]["key"],
            "nicpolicy.io/enforce"
        );
        let image = &find("Deployment")["spec"]["template"]["spec"]["containers"][0]["image"];
        assert!(
            image.as_str().is_some_and(|i| i.contains("@sha256:")),
            "{image}"
        );
        // The registry credentials are where the configuration says: the Secret's
        // .dockerconfigjson as config.json in the mounted directory, in both pods.
        let config: Value = objects
            .iter()
            .find(|o| {
                o["kind"] == "ConfigMap" && o["metadata"]["name"] == format!("{release}-config")
            })
            .and_then(|o| o["data"]["nicpolicy.yaml"].as_str())
            .and_then(|text| serde_yaml_ng::from_str(text).ok())
            .expect("the serve configuration");
        assert_eq!(config["registry"]["requireDigest"], true);
        let credentials = config["registry"]["config"]
            .as_str()
            .expect("registry.config");
        let ca = config["registry"]["caFiles"][0]
            .as_str()
            .expect("registry.caFiles");
        for deployment in objects.iter().filter(|o| o["kind"] == "Deployment") {
            let pod = &deployment["spec"]["template"]["spec"];
            // Where the volume `volume` is mounted in the container, and its source.
            let mount = |volume: &str| {
                let path = pod["containers"][0]["volumeMounts"]
                    .as_array()
                    .and_then(|m| m.iter().find(|m| m["name"] == volume))
                    .and_then(|m| m["mountPath"].as_str())
                    .unwrap_or_else(|| panic!("{volume} not mounted ({mode})"));
                let source = pod["volumes"]
                    .as_array()
                    .and_then(|v| v.iter().find(|v| v["name"] == volume))
                    .unwrap_or_else(|| panic!("no volume {volume} ({mode})"));
                (path, source)
            };
            let mounted = |volume: &str, file: &str| {
                let (path, source) = mount(volume);
                let items = source["secret"]["items"]
                    .as_array()
                    .or(source["configMap"]["items"].as_array())
                    .expect("items");
                format!("{path}/{}", items[0]["path"].as_str().unwrap_or("")) == file
            };
            assert!(mounted("registry-credentials", credentials), "{deployment}");
            assert!(mounted("registry-ca", ca), "{deployment}");
            // The verification keys: the rule's key is a file of the mounted keys ConfigMap.
            let key = config["verification"][0]["keys"][0]
                .as_str()
                .expect("verification[0].keys[0]");
            let (path, keys) = mount("verification-keys");
            assert_eq!(format!("{path}/platform.pub"), key);
            assert_eq!(keys["configMap"]["name"], "policy-keys", "{keys}");
        }
        assert_eq!(
            config["verification"][0]["references"][0],
            "registry.example.net/platform/*"
        );
        // The client CA, in the webhook's pod, where clientAuth.caFile names it.
        let webhook = objects
            .iter()
            .find(|o| {
                o["kind"] == "Deployment" && o["metadata"]["name"] == format!("{release}-webhook")
            })
            .expect("the webhook's Deployment");
        let pod = &webhook["spec"]["template"]["spec"];
        let mount = pod["containers"][0]["volumeMounts"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["name"] == "client-ca"))
            .expect("the client CA mounted");
        let volume = pod["volumes"]
            .as_array()
            .and_then(|v| v.iter().find(|v| v["name"] == "client-ca"))
            .expect("the client CA's volume");
        assert_eq!(
            volume["configMap"]["name"],
            "kube-apiserver-webhook-client-ca"
        );
        assert_eq!(
            format!(
                "{}/{}",
                mount["mountPath"].as_str().unwrap_or(""),
                volume["configMap"]["items"][0]["path"]
                    .as_str()
                    .unwrap_or("")
            ),
            config["clientAuth"]["caFile"]
                .as_str()
                .unwrap_or("no clientAuth.caFile")
        );
        let secret = objects
            .iter()
            .find(|o| o["kind"] == "Deployment")
            .map(|d| d["spec"]["template"]["spec"]["volumes"].to_string())
            .unwrap_or_default();
        assert!(
            secret.contains("registry-pull") && secret.contains(".dockerconfigjson"),
            "{secret}"
        );
        if mode == "certManager" {
            assert_eq!(
                validating["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
                format!("{namespace}/{release}-webhook-cert")
            );
            let serving = objects
                .iter()
                .find(|o| o["kind"] == "Certificate" && o["spec"]["isCA"] != true)
                .expect("a serving certificate");
            assert_eq!(
                serving["spec"]["dnsNames"][0],
                format!("{release}-webhook.{namespace}.svc")
            );
        } else {
            let bundle = hook["clientConfig"]["caBundle"].as_str().expect("caBundle");
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(bundle)
                .expect("base64");
            assert_eq!(String::from_utf8_lossy(&decoded), ca_pem);
            assert!(!objects.iter().any(|o| o["kind"] == "Certificate"));
            let webhook = objects
                .iter()
                .find(|o| {
                    o["kind"] == "Deployment"
                        && o["metadata"]["name"] == format!("{release}-webhook")
                })
                .expect("the webhook's Deployment");
            let volumes = &webhook["spec"]["template"]["spec"]["volumes"];
            assert!(volumes.to_string().contains("webhook-serving"), "{volumes}");
        }
    }
}

/// The chart's backstop objects for the chains and settings of `values` (YAML), and those
/// `nicpolicy export backstop` writes for the configuration the chart renders: (chart, export),
/// each the ConfigMap's data and, per kind, the policy's spec and the binding's spec.
fn backstops(values: &str, dir: &Path) -> (Value, Value) {
    std::fs::create_dir_all(dir).expect("a directory");
    let values_file = dir.join("values.yaml");
    std::fs::write(&values_file, values).expect("write the values");
    let (ok, rendered, err) = helm(&[
        "template",
        "nicpolicy",
        "charts/nicpolicy",
        "--namespace",
        "nicpolicy-system",
        "--set",
        "image.repository=registry.example.net/platform/nicpolicy",
        "--set",
        "networkPolicy.apiServerCIDRs={10.0.10.0/24}",
        "-f",
        values_file.to_str().expect("a UTF-8 path"),
    ]);
    assert!(ok, "helm template: {err}");
    let objects: Vec<Value> = nicpolicy_e2e::fixtures::yaml_objects(&rendered);
    let config = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "nicpolicy-config")
        .expect("the configuration");
    // The configuration and every inventory (the default, each org VDC's).
    for (file, text) in config["data"].as_object().expect("the files") {
        let text = text.as_str().expect("a file");
        std::fs::write(dir.join(file), text).expect("write the configuration");
    }
    // The settings file a value set may name (mounted into the pods, never read by the chart).
    std::fs::write(
        dir.join("site-capvcd.yaml"),
        "maxNics: 4\nallowNicChangesOnProvisioned: true\n",
    )
    .expect("write the settings file");
    let output = Command::new(&binaries().nicpolicy)
        .args([
            "export",
            "backstop",
            "--namespace",
            "nicpolicy-system",
            "--config",
        ])
        .arg(dir.join("nicpolicy.yaml"))
        .output()
        .expect("nicpolicy export backstop runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let exported: Vec<Value> =
        nicpolicy_e2e::fixtures::yaml_objects(std::str::from_utf8(&output.stdout).expect("UTF-8"));
    let summary = |objects: &[Value]| {
        let mut out = serde_json::Map::new();
        for o in objects {
            let name = o["metadata"]["name"].as_str().unwrap_or_default();
            if !name.starts_with("nicpolicy-backstop") {
                continue;
            }
            let content = match o["kind"].as_str() {
                Some("ConfigMap") => o["data"].clone(),
                Some("ValidatingAdmissionPolicy" | "ValidatingAdmissionPolicyBinding") => {
                    o["spec"].clone()
                }
                _ => continue,
            };
            out.insert(
                format!("{} {name}", o["kind"].as_str().unwrap_or_default()),
                content,
            );
        }
        Value::Object(out)
    };
    (summary(&objects), summary(&exported))
}

#[test]
fn the_charts_backstop_is_what_nicpolicy_export_backstop_writes() {
    let dir = std::env::temp_dir().join(format!("nicpolicy-backstop-chart-{}", std::process::id()));
    let inventory = "inventory:\n  kind: NetworkInventory\n  networks:\n    - {name: mgmt-net}\n    - {name: storage-net}\n    - {name: workload-net}\n    - {name: backup-net}\n";
    for (what, values, kinds) in [
        ("the chart's defaults", String::new(), 2),
        ("the defaults with an inventory", inventory.to_string(), 2),
        (
            "inventories refreshed from Cloud Director",
            format!(
                "{inventory}cloudDirector:\n  enabled: true\n  site: https://vcd.eu1.example.net\n  org: platform\n  vdcs: [eu1-ovdc-prod]\n"
            ),
            2,
        ),
        (
            "inventories per org VDC",
            format!(
                "{inventory}inventories:\n  eu1-ovdc-prod:\n    networks:\n      - {{name: mgmt-net}}\n      - {{name: replication-net}}\n  eu1 ovdc stage:\n    networks:\n      - {{name: stage-net}}\n"
            ),
            2,
        ),
        (
            "capvcd with its own settings",
            format!(
                "{inventory}policies:\n  VCDMachine:\n    - builtin: capvcd\n      settings: {{maxNics: 4, allowNicChangesOnProvisioned: true}}\n  VCDMachineTemplate:\n    - builtin: capvcd\n"
            ),
            2,
        ),
        (
            "role-based without defaults, zone-aware",
            format!(
                "{inventory}policies:\n  VCDMachine:\n    - builtin: role-based\n      settings: {{capvcd: {{maxNics: 5}}, worker: {{allowed: [storage-net]}}}}\n  VCDMachineTemplate:\n    - builtin: zone-aware\n      settings: {{default: {{storage: storage-net}}, capvcd: {{maxNics: 3}}}}\n"
            ),
            2,
        ),
        (
            "settings from a file the pods read",
            format!(
                "{inventory}policies:\n  VCDMachine:\n    - builtin: capvcd\n      settingsFile: site-capvcd.yaml\n  VCDMachineTemplate:\n    - builtin: capvcd\n"
            ),
            1,
        ),
        (
            "a warn-mode first entry",
            format!(
                "{inventory}policies:\n  VCDMachine:\n    - builtin: static-ip\n      mode: warn\n    - builtin: capvcd\n  VCDMachineTemplate:\n    - builtin: static-ip\n      settings: {{capvcd: {{maxNics: 7}}}}\n"
            ),
            1,
        ),
    ] {
        let (chart, exported) = backstops(&values, &dir.join(what.replace(|c: char| !c.is_ascii_alphanumeric(), "-")));
        let policies = chart
            .as_object()
            .expect("objects")
            .keys()
            .filter(|k| k.starts_with("ValidatingAdmissionPolicy "))
            .count();
        assert_eq!(policies, kinds, "{what}: {chart}");
        if kinds == 2 {
            assert_eq!(chart, exported, "{what}");
        } else {
            // A chain the chart cannot read the backstop of (a warn-mode entry first) gets none
            // from the chart; what it renders is what the export writes for the other kind.
            for (key, value) in chart.as_object().expect("objects") {
                if key.starts_with("ConfigMap") {
                    continue;
                }
                assert_eq!(Some(value), exported.get(key), "{what}: {key}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
