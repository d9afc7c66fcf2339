//! nicpolicy under Cluster API's own controllers (its core manager, built from its module), on
//! CAPVCD v1.3.2's CRDs: a MachineDeployment of a multi-homed VCDMachineTemplate is scaled up
//! and down, rolled to a new template (a forbidden one is refused at the template), and the old
//! machines leave through CAPVCD's finalizer; a ClusterClass cluster's topology controller
//! writes its VCDMachineTemplates (dry runs first) without a denial and without rotating them.
//! Every VCDMachine here is created and labelled by Cluster API exactly as on a management
//! cluster; nothing reconciles Cloud Director, so none gets a provider ID.

use std::time::{Duration, Instant};

use nicpolicy_e2e::capi::ClusterApi;
use nicpolicy_e2e::fixtures::{self, extras, namespace, plan_networks, refusal};
use nicpolicy_e2e::{shared, ControlPlane, Kubectl, Webhook};
use serde_json::{json, Value};

/// How long Cluster API's controllers may take to act on a change (2 shared cores).
const SETTLE: Duration = Duration::from_secs(90);
/// CAPVCD's finalizer, which it adds to every VCDMachine before it builds the VM.
const CAPVCD_FINALIZER: &str = "vcdmachine.infrastructure.cluster.x-k8s.io";

/// The cluster of namespace `name` as the management cluster holds it before its control plane
/// exists: a Cluster (no control plane reference, so the MachineSet preflight checks, which
/// need one, do not apply) and its VCDCluster on mgmt-net. References carry their namespace,
/// as Cluster API's defaulting webhooks (not registered here) would write it.
fn cluster(name: &str) -> String {
    let text = fixtures::cluster(name, name, "mgmt-net").replace(
        "  controlPlaneRef:\n    apiVersion: controlplane.cluster.x-k8s.io/v1beta1\n    kind: KubeadmControlPlane\n    name: ",
        "  # controlPlaneRef: none yet\n  # ",
    );
    let infrastructure_ref = format!("    kind: VCDCluster\n    name: {name}\n");
    assert!(text.contains(&infrastructure_ref), "{text}");
    text.replace(
        &infrastructure_ref,
        &format!("{infrastructure_ref}    namespace: {name}\n"),
    )
}

/// A worker VCDMachineTemplate `name` with `extras`.
fn template(namespace: &str, name: &str, extras: &[&str]) -> Value {
    fixtures::template(namespace, name, None, Some(extras))
}

/// MachineDeployment `name` of cluster `cluster`: `replicas` machines of VCDMachineTemplate
/// `template`, bootstrap data from a Secret (no bootstrap provider runs here), and a rolling
/// update that does not wait for machines to become available (none ever does here).
fn machine_deployment(cluster: &str, name: &str, replicas: u32, template: &str) -> Value {
    let labels = json!({
        "cluster.x-k8s.io/cluster-name": cluster,
        "cluster.x-k8s.io/deployment-name": name,
    });
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "MachineDeployment",
        "metadata": {"name": name, "namespace": cluster, "labels": {"cluster.x-k8s.io/cluster-name": cluster}},
        "spec": {
            "clusterName": cluster,
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 10}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "clusterName": cluster,
                    "version": "v1.30.2",
                    "bootstrap": {"dataSecretName": format!("{name}-bootstrap")},
                    "infrastructureRef": {
                        "apiVersion": fixtures::infrastructure(),
                        "kind": "VCDMachineTemplate",
                        "name": template,
                        "namespace": cluster,
                    }
                }
            }
        }
    })
}

/// The VCDMachines of `namespace` as stored.
fn vcd_machines(kubectl: &Kubectl, namespace: &str) -> Vec<Value> {
    let listed: Value = serde_json::from_str(&kubectl.ok(&[
        "get",
        "vcdmachines.infrastructure.cluster.x-k8s.io",
        "-n",
        namespace,
        "-o",
        "json",
    ]))
    .expect("JSON");
    listed["items"].as_array().cloned().unwrap_or_default()
}

/// The controller owner of an object: (kind, name).
fn controller_owner(object: &Value) -> Option<(String, String)> {
    object["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|o| o["controller"] == true)
        .map(|o| {
            (
                o["kind"].as_str().unwrap_or_default().to_string(),
                o["name"].as_str().unwrap_or_default().to_string(),
            )
        })
}

/// Polls the VCDMachines of `namespace` until `done` holds; panics with the last list and the
/// manager's log after [`SETTLE`].
fn wait_machines(
    kubectl: &Kubectl,
    namespace: &str,
    capi: &ClusterApi,
    what: &str,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let machines = vcd_machines(kubectl, namespace);
        if done(&machines) {
            eprintln!("e2e: {what} in {:.1} s", start.elapsed().as_secs_f64());
            return machines;
        }
        if start.elapsed() > SETTLE {
            let names: Vec<_> = machines
                .iter()
                .map(|m| (m["metadata"]["name"].clone(), controller_owner(m)))
                .collect();
            panic!(
                "not {what} after {SETTLE:?}; VCDMachines: {names:?}\nCluster API's log:\n{}",
                capi.log_tail(40)
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Denials counted by the webhook so far.
async fn denials(webhook: &Webhook) -> u64 {
    let metrics = webhook.metrics().await;
    metrics
        .lines()
        .filter(|l| l.starts_with("nicpolicy_reviews_total{") && l.contains("result=\"denied\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// The webhook and Cluster API's manager on the shared control plane.
async fn start(plane: &ControlPlane, name: &str) -> (Webhook, ClusterApi) {
    let webhook = Webhook::registered(plane, name).await;
    let capi = ClusterApi::start(plane).expect("Cluster API's manager starts");
    (webhook, capi)
}

#[tokio::test]
async fn a_machine_deployment_is_created_scaled_and_rolled_by_cluster_api() {
    let plane = shared();
    let kubectl = plane.kubectl();
    let (webhook, capi) = start(&plane, "capi-md").await;
    namespace(&kubectl, "prod-eu2");
    kubectl.apply(&cluster("prod-eu2"));
    kubectl.apply(
        &template(
            "prod-eu2",
            "prod-eu2-md-0-a",
            &["storage-net", "workload-net"],
        )
        .to_string(),
    );
    kubectl
        .apply(&machine_deployment("prod-eu2", "prod-eu2-md-0", 2, "prod-eu2-md-0-a").to_string());

    // Cluster API creates each VCDMachine from the template (owned by the MachineSet, labelled
    // with the cluster, set and deployment), then the Machine, then makes the Machine its
    // controller owner: every one of those writes went through nicpolicy.
    let machines = wait_machines(
        &kubectl,
        "prod-eu2",
        &capi,
        "2 VCDMachines owned by their Machines",
        |ms| {
            ms.len() == 2
                && ms
                    .iter()
                    .all(|m| controller_owner(m).is_some_and(|(kind, _)| kind == "Machine"))
        },
    );
    for machine in &machines {
        let name = machine["metadata"]["name"].as_str().unwrap_or_default();
        let labels = &machine["metadata"]["labels"];
        assert_eq!(
            labels["cluster.x-k8s.io/cluster-name"], "prod-eu2",
            "{name}"
        );
        assert_eq!(
            labels["cluster.x-k8s.io/deployment-name"], "prod-eu2-md-0",
            "{name}"
        );
        assert!(labels["cluster.x-k8s.io/set-name"].is_string(), "{name}");
        assert_eq!(
            machine["metadata"]["annotations"]["cluster.x-k8s.io/cloned-from-name"],
            "prod-eu2-md-0-a"
        );
        assert_eq!(extras(machine), ["storage-net", "workload-net"], "{name}");
        assert_eq!(
            plan_networks(machine),
            ["mgmt-net", "storage-net", "workload-net"],
            "{name}: no NIC plan"
        );
        // The Machine of the same name is its owner, as CAPVCD looks it up.
        assert_eq!(
            controller_owner(machine),
            Some(("Machine".to_string(), name.to_string()))
        );
    }
    // CAPVCD adds its finalizer before it builds a VM: an update nicpolicy must let through.
    for machine in &machines {
        let name = machine["metadata"]["name"].as_str().unwrap_or_default();
        kubectl.ok(&[
            "patch",
            "vcdmachine",
            "-n",
            "prod-eu2",
            name,
            "--type=merge",
            "-p",
            &json!({"metadata": {"finalizers": [CAPVCD_FINALIZER]}}).to_string(),
        ]);
    }

    // Scale up and down.
    kubectl.ok(&[
        "scale",
        "machinedeployment",
        "-n",
        "prod-eu2",
        "prod-eu2-md-0",
        "--replicas=3",
    ]);
    wait_machines(&kubectl, "prod-eu2", &capi, "scaled to 3", |ms| {
        ms.len() == 3 && ms.iter().all(|m| plan_networks(m).len() == 3)
    });
    kubectl.ok(&[
        "scale",
        "machinedeployment",
        "-n",
        "prod-eu2",
        "prod-eu2-md-0",
        "--replicas=1",
    ]);
    let machines = wait_machines(
        &kubectl,
        "prod-eu2",
        &capi,
        "scaled down to 1 left running",
        |ms| {
            ms.iter()
                .filter(|m| m["metadata"]["deletionTimestamp"].is_null())
                .count()
                == 1
        },
    );
    // CAPVCD removes its finalizer once the VM is gone.
    release_finalizers(&kubectl, &machines);
    wait_machines(&kubectl, "prod-eu2", &capi, "scaled down to 1", |ms| {
        ms.len() == 1
    });
    let denied_by_then = denials(&webhook).await;
    assert_eq!(
        denied_by_then,
        0,
        "a write of Cluster API or CAPVCD was denied:\n{}",
        webhook.log_tail(30)
    );

    // A rollout to a template with a network the site does not have is refused at the
    // template, before any machine is rolled.
    let client = plane.client().await;
    let bad = template(
        "prod-eu2",
        "prod-eu2-md-0-bad",
        &["storage-net", "corp-lan-net"],
    );
    let err = fixtures::create(&client, &bad, false)
        .await
        .expect_err("a template with an unknown network is refused");
    let (code, _, message, causes) = refusal(&err);
    assert_eq!(code, 422, "{message}");
    assert!(
        causes
            .iter()
            .any(|(field, _)| field == "spec.template.spec.extraOvdcNetworks[1]"),
        "{causes:?}"
    );

    // A valid new template rolls the machines: the new one is cloned from it, the old one is
    // deleted and leaves once CAPVCD's finalizer is removed.
    kubectl.apply(
        &template(
            "prod-eu2",
            "prod-eu2-md-0-b",
            &["storage-net", "backup-net"],
        )
        .to_string(),
    );
    kubectl.ok(&[
        "patch",
        "machinedeployment",
        "-n",
        "prod-eu2",
        "prod-eu2-md-0",
        "--type=merge",
        "-p",
        &json!({"spec": {"template": {"spec": {"infrastructureRef": {"name": "prod-eu2-md-0-b", "namespace": "prod-eu2"}}}}})
            .to_string(),
    ]);
    let cloned_from_b = |m: &Value| {
        m["metadata"]["annotations"]["cluster.x-k8s.io/cloned-from-name"] == "prod-eu2-md-0-b"
    };
    let machines = wait_machines(
        &kubectl,
        "prod-eu2",
        &capi,
        "rolled to the new template",
        |ms| {
            ms.iter().filter(|m| cloned_from_b(m)).count() == 1
                && ms
                    .iter()
                    .filter(|m| !cloned_from_b(m))
                    .all(|m| !m["metadata"]["deletionTimestamp"].is_null())
        },
    );
    let new = machines
        .iter()
        .find(|m| cloned_from_b(m))
        .expect("the new machine");
    assert_eq!(extras(new), ["storage-net", "backup-net"]);
    assert_eq!(
        plan_networks(new),
        ["mgmt-net", "storage-net", "backup-net"]
    );
    release_finalizers(&kubectl, &machines);
    wait_machines(
        &kubectl,
        "prod-eu2",
        &capi,
        "only the new machine left",
        |ms| ms.len() == 1 && cloned_from_b(&ms[0]),
    );
    // The refused template is the only denial.
    assert_eq!(denials(&webhook).await, 1, "{}", webhook.log_tail(30));
}

/// Removes CAPVCD's finalizer from the machines being deleted, as CAPVCD does once their VM is
/// gone (an update of an object being deleted: never sent to nicpolicy).
fn release_finalizers(kubectl: &Kubectl, machines: &[Value]) {
    for machine in machines {
        if machine["metadata"]["deletionTimestamp"].is_null() {
            continue;
        }
        let name = machine["metadata"]["name"].as_str().unwrap_or_default();
        kubectl.ok(&[
            "patch",
            "vcdmachine",
            "-n",
            machine["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default(),
            name,
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ]);
    }
}

/// A ClusterClass of CAPVCD v1.3.2's kinds with its templates, in `namespace`.
fn cluster_class(namespace: &str) -> String {
    let infrastructure = fixtures::infrastructure();
    let vcd_spec =
        serde_yaml_ng::Deserializer::from_str(&fixtures::cluster(namespace, "unused", "mgmt-net"))
            .filter_map(|doc| serde::Deserialize::deserialize(doc).ok())
            .find(|doc: &Value| doc["kind"] == "VCDCluster")
            .map(|mut doc| {
                // The topology controller writes the template's endpoint as it stands; v1beta2
                // requires a host (the load balancer's address in Cloud Director).
                doc["spec"]["controlPlaneEndpoint"]["host"] = json!("10.10.0.5");
                doc["spec"].to_string()
            })
            .expect("the fixture's VCDCluster");
    let cp = serde_json::to_string(&template(
        namespace,
        "prod-class-control-plane",
        &["storage-net"],
    ))
    .expect("JSON");
    let worker = serde_json::to_string(&template(
        namespace,
        "prod-class-md-0",
        &["storage-net", "workload-net"],
    ))
    .expect("JSON");
    format!(
        r#"apiVersion: {infrastructure}
kind: VCDClusterTemplate
metadata: {{name: prod-class, namespace: {namespace}}}
spec:
  template:
    spec: {vcd_spec}
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta1
kind: KubeadmControlPlaneTemplate
metadata: {{name: prod-class, namespace: {namespace}}}
spec:
  template:
    spec:
      kubeadmConfigSpec:
        clusterConfiguration:
          apiServer:
            certSANs: [localhost]
---
apiVersion: bootstrap.cluster.x-k8s.io/v1beta1
kind: KubeadmConfigTemplate
metadata: {{name: prod-class-md-0, namespace: {namespace}}}
spec:
  template:
    spec:
      joinConfiguration:
        nodeRegistration:
          kubeletExtraArgs: {{cloud-provider: external}}
---
{cp}
---
{worker}
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: ClusterClass
metadata: {{name: prod-class, namespace: {namespace}}}
spec:
  controlPlane:
    ref: {{apiVersion: controlplane.cluster.x-k8s.io/v1beta1, kind: KubeadmControlPlaneTemplate, name: prod-class, namespace: {namespace}}}
    machineInfrastructure:
      ref: {{apiVersion: {infrastructure}, kind: VCDMachineTemplate, name: prod-class-control-plane, namespace: {namespace}}}
  infrastructure:
    ref: {{apiVersion: {infrastructure}, kind: VCDClusterTemplate, name: prod-class, namespace: {namespace}}}
  workers:
    machineDeployments:
      - class: md-0
        template:
          bootstrap:
            ref: {{apiVersion: bootstrap.cluster.x-k8s.io/v1beta1, kind: KubeadmConfigTemplate, name: prod-class-md-0, namespace: {namespace}}}
          infrastructure:
            ref: {{apiVersion: {infrastructure}, kind: VCDMachineTemplate, name: prod-class-md-0, namespace: {namespace}}}
"#
    )
}

/// The VCDMachineTemplates the topology controller made for cluster `cluster`: (name, stored).
fn topology_templates(kubectl: &Kubectl, namespace: &str, cluster: &str) -> Vec<(String, Value)> {
    let listed: Value = serde_json::from_str(&kubectl.ok(&[
        "get",
        "vcdmachinetemplates.infrastructure.cluster.x-k8s.io",
        "-n",
        namespace,
        "-l",
        &format!("cluster.x-k8s.io/cluster-name={cluster},topology.cluster.x-k8s.io/owned"),
        "-o",
        "json",
    ]))
    .expect("JSON");
    let mut found: Vec<(String, Value)> = listed["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|t| {
            (
                t["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                t,
            )
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

#[tokio::test]
async fn the_topology_controller_writes_clusterclass_templates_without_denial_or_rotation() {
    let plane = shared();
    let kubectl = plane.kubectl();
    let (webhook, capi) = start(&plane, "capi-topology").await;
    namespace(&kubectl, "prod-eu3");
    kubectl.apply(&cluster_class("prod-eu3"));
    let denied_before = denials(&webhook).await;
    let reviews_before = webhook.reviews_answered().await;
    kubectl.apply(
        r#"apiVersion: cluster.x-k8s.io/v1beta1
kind: Cluster
metadata: {name: prod-eu3, namespace: prod-eu3}
spec:
  clusterNetwork:
    pods: {cidrBlocks: [100.96.0.0/11]}
  topology:
    class: prod-class
    version: v1.30.2
    controlPlane: {replicas: 1}
    workers:
      machineDeployments:
        - {class: md-0, name: md-0, replicas: 1}
"#,
    );

    // The topology controller clones the control plane's and md-0's VCDMachineTemplates from
    // the class (after server-side dry runs of each): both pass nicpolicy. They are written
    // before the topology points the Cluster at its VCDCluster, so nicpolicy checks them
    // without their cluster, as it checks `clusterctl generate cluster` output.
    let start = Instant::now();
    let templates = loop {
        let found = topology_templates(&kubectl, "prod-eu3", "prod-eu3");
        if found.len() == 2 {
            break found;
        }
        assert!(
            start.elapsed() < SETTLE,
            "the topology's two VCDMachineTemplates were not written; found {:?}\nCluster API's log:\n{}",
            found.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            capi.log_tail(40)
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    for (name, stored) in &templates {
        assert!(
            !extras(stored).is_empty(),
            "{name}: the class's extra networks were lost"
        );
    }

    // Two resyncs later the same templates stand: no rotation, no denial, and the topology
    // controller kept writing through nicpolicy (dry runs included).
    std::thread::sleep(Duration::from_secs(35));
    let later = topology_templates(&kubectl, "prod-eu3", "prod-eu3");
    let names = |t: &[(String, Value)]| t.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    for (name, _) in &templates {
        assert!(
            names(&later).contains(name),
            "the topology's template {name} was rotated: {:?}",
            names(&later)
        );
    }
    assert!(
        later.len() <= 2,
        "more templates than the class has (one for the control plane, one for md-0): {:?}",
        names(&later)
    );
    assert_eq!(
        denials(&webhook).await,
        denied_before,
        "the topology controller was denied:\n{}",
        webhook.log_tail(30)
    );
    assert!(webhook.reviews_answered().await > reviews_before);
    assert!(
        !std::fs::read_to_string(capi.log())
            .unwrap_or_default()
            .contains("admission webhook \"vvcdmachinetemplate.nicpolicy.io\" denied"),
        "Cluster API logged a denial"
    );
}
