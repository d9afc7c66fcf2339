//! CAPVCD v1.3.2's own cluster templates (`templates/` of its Go module, taken by
//! tests/e2e/kube/build.sh), rendered as `clusterctl generate cluster` renders them (variables
//! substituted, `${VAR:=default}` defaults applied) for a multi-homed site: each file evaluated
//! whole by `nicpolicy eval` and `nicpolicy audit`, and one applied through kube-apiserver with
//! nicpolicy registered on the release's CRDs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use nicpolicy_e2e::fixtures::namespace;
use nicpolicy_e2e::{binaries, shared, workspace, Webhook};
use serde_json::Value;

/// The values a platform team gives clusterctl for cluster `prod-eu5` (clusterctl.yaml and the
/// environment).
fn values() -> BTreeMap<&'static str, String> {
    let b64 = |s: &str| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(s)
    };
    BTreeMap::from([
        ("CLUSTER_NAME", "prod-eu5".to_string()),
        ("TARGET_NAMESPACE", "prod-eu5".to_string()),
        ("VCD_SITE", "https://vcd.eu1.example.net".to_string()),
        ("VCD_ORGANIZATION", "platform".to_string()),
        ("VCD_ORGANIZATION_VDC", "eu1-ovdc-prod".to_string()),
        ("VCD_ORGANIZATION_VDC_NETWORK", "mgmt-net".to_string()),
        ("VCD_USERNAME_B64", b64("svc-capvcd")),
        ("VCD_PASSWORD_B64", b64("not-a-real-password")),
        ("VCD_REFRESH_TOKEN_B64", String::new()),
        ("VCD_CATALOG", "k8s-templates".to_string()),
        ("VCD_TEMPLATE_NAME", "ubuntu-2204-kube-v1.30.2".to_string()),
        (
            "SSH_PUBLIC_KEY",
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHx0aWdodGx5LWtlcHQta2V5LWZvci10ZXN0cw platform@example.net"
                .to_string(),
        ),
        ("DISK_SIZE", "40Gi".to_string()),
        ("WORKER_MACHINE_COUNT", "3".to_string()),
        ("CONTROL_PLANE_MACHINE_COUNT", "3".to_string()),
        ("VCD_CONTROL_PLANE_SIZING_POLICY", "control-plane-4c8g".to_string()),
        ("VCD_CONTROL_PLANE_PLACEMENT_POLICY", String::new()),
        ("VCD_CONTROL_PLANE_STORAGE_PROFILE", "ssd-tier1".to_string()),
        ("VCD_WORKER_SIZING_POLICY", "worker-4c16g".to_string()),
        ("VCD_WORKER_PLACEMENT_POLICY", String::new()),
        ("VCD_WORKER_STORAGE_PROFILE", "ssd-tier1".to_string()),
        ("POD_CIDR", "100.96.0.0/11".to_string()),
        ("SERVICE_CIDR", "100.64.0.0/13".to_string()),
        ("CLUSTER_CLASS_NAME", "capvcd-class".to_string()),
        ("WORKER_POOL_NAME", "md-0".to_string()),
        ("KUBERNETES_VERSION", "v1.30.2".to_string()),
        ("VCD_VIP_CIDR", "10.10.0.0/24".to_string()),
        ("VCD_RDE_ID", String::new()),
        ("HTTP_PROXY", String::new()),
        ("HTTPS_PROXY", String::new()),
        ("NO_PROXY", String::new()),
        ("ETCD_VERSION", "v3.5.12".to_string()),
        ("DNS_VERSION", "v1.11.1".to_string()),
    ])
}

/// `text` with every `${VAR}` and `${VAR:=default}` substituted as clusterctl's envsubst does;
/// a variable with neither a value nor a default fails the test, naming it.
fn render(file: &str, text: &str, values: &BTreeMap<&str, String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let end = after
            .find('}')
            .unwrap_or_else(|| panic!("{file}: unterminated ${{ at {at}"));
        let expression = &after[..end];
        let (name, default) = match expression.split_once(":=") {
            Some((name, default)) => (name, Some(default)),
            None => (expression, None),
        };
        match (values.get(name), default) {
            (Some(value), _) => out.push_str(value),
            (None, Some(default)) => out.push_str(default),
            (None, None) => panic!("{file}: no value for ${{{name}}}"),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

/// The cluster templates of the release: `cluster-template*.yaml` and
/// `cluster-class-template.yaml` (clusterctl.yaml and infrastructure-components.yaml are the
/// provider's own configuration and install, not clusters).
fn release_templates() -> Vec<PathBuf> {
    let dir = binaries().crds.join("capvcd-templates");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("{}: {err}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            name.starts_with("cluster-template") || name == "cluster-class-template.yaml"
        })
        .collect();
    files.sort();
    assert!(
        files.len() >= 30,
        "only {} templates in {}",
        files.len(),
        dir.display()
    );
    files
}

/// Renders every release template into `into`; returns (file name, rendered path, text).
fn rendered(into: &Path) -> Vec<(String, PathBuf, String)> {
    std::fs::create_dir_all(into).expect("directory");
    let values = values();
    release_templates()
        .into_iter()
        .map(|path| {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_string();
            let text = std::fs::read_to_string(&path).expect("template");
            let text = render(&name, &text, &values);
            assert!(
                text.contains("apiVersion: infrastructure.cluster.x-k8s.io/v1beta2"),
                "{name} writes no v1beta2 object"
            );
            let out = into.join(&name);
            std::fs::write(&out, &text).expect("rendered");
            (name, out, text)
        })
        .collect()
}

/// The names of the VCDMachineTemplates in a rendered manifest.
fn machine_templates(text: &str) -> Vec<String> {
    serde_yaml_ng::Deserializer::from_str(text)
        .filter_map(|doc| {
            let value: Value = serde::Deserialize::deserialize(doc).ok()?;
            (value["kind"] == "VCDMachineTemplate")
                .then(|| value["metadata"]["name"].as_str().map(str::to_string))
                .flatten()
        })
        .collect()
}

fn nicpolicy(args: &[&str]) -> std::process::Output {
    Command::new(&binaries().nicpolicy)
        .args(args)
        .output()
        .expect("nicpolicy runs")
}

#[test]
fn every_release_template_is_evaluated_whole_by_eval_and_audit() {
    let dir = std::env::temp_dir().join(format!("nicpolicy-e2e-templates-{}", std::process::id()));
    let inventory = workspace().join("config/nicpolicy/inventory.yaml");
    let inventory = inventory.to_string_lossy();
    let files = rendered(&dir);
    for (name, path, text) in &files {
        let path = path.to_string_lossy();
        let templates = machine_templates(text);
        assert!(!templates.is_empty(), "{name} has no VCDMachineTemplate");

        let eval = nicpolicy(&[
            "eval",
            "--machine",
            &path,
            "--inventory",
            &inventory,
            "-o",
            "json",
        ]);
        let stdout = String::from_utf8_lossy(&eval.stdout);
        let stderr = String::from_utf8_lossy(&eval.stderr);
        assert!(
            eval.status.success(),
            "eval {name}: {}\n{stdout}\n{stderr}",
            eval.status
        );
        for template in &templates {
            assert!(
                stdout.contains(template.as_str()),
                "eval {name}: {template} not judged:\n{stdout}"
            );
        }

        let audit = nicpolicy(&["audit", &path, "--inventory", &inventory, "-o", "json"]);
        let stdout = String::from_utf8_lossy(&audit.stdout);
        assert!(
            audit.status.success(),
            "audit {name}: {}\n{stdout}\n{}",
            audit.status,
            String::from_utf8_lossy(&audit.stderr)
        );
        let report: Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|err| panic!("audit {name}: {err}\n{stdout}"));
        let text = report.to_string();
        for template in &templates {
            assert!(
                text.contains(template.as_str()),
                "audit {name}: {template} missing"
            );
        }
        // Each template is found with its cluster, through the MachineDeployment or control
        // plane that names it, as the release's own manifests lay them out.
        assert!(
            !text.contains("\"denied\""),
            "audit {name}: a stock template of the release is denied:\n{stdout}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_rendered_release_template_applies_through_nicpolicy() {
    let plane = shared();
    let kubectl = plane.kubectl();
    let dir = plane.dir.join("release-templates");
    let files = rendered(&dir);
    let (_, path, text) = files
        .iter()
        .find(|(name, _, _)| name == "cluster-template-v1.30.2-tkgv2.5.2.yaml")
        .expect("the release's newest Kubernetes template");
    namespace(&kubectl, "prod-eu5");
    let webhook = Webhook::registered(&plane, "release-template").await;
    let before = webhook.reviews_answered().await;
    let applied = kubectl.run(&["apply", "-f", &path.to_string_lossy()]);
    assert!(
        applied.success,
        "the rendered template was refused:\n{}",
        applied.stderr
    );
    assert!(
        webhook.reviews_answered().await > before,
        "nicpolicy reviewed nothing"
    );
    let client = plane.client().await;
    // The release's templates label no cluster: each is checked without it (the cluster rules
    // run on every VCDMachine Cluster API makes from it), and kubectl shows why.
    for template in machine_templates(text) {
        nicpolicy_e2e::fixtures::get(&client, "prod-eu5", "VCDMachineTemplate", &template)
            .await
            .unwrap_or_else(|| panic!("{template} not stored"));
        let warning =
            format!("VCDMachineTemplate prod-eu5/{template} was checked without its cluster");
        assert!(
            applied.stderr.contains(&warning),
            "no {warning:?} in kubectl's output:\n{}",
            applied.stderr
        );
    }
}
