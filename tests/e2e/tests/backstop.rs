//! The backstop in kube-apiserver: the ValidatingAdmissionPolicies `nicpolicy export backstop`
//! writes, evaluated by kube-apiserver's own CEL (its cost limits included) on CAPVCD v1.3.2's
//! CRDs.
//!
//! - Every case of every built-in suite: kube-apiserver never refuses what the Wasm policy
//!   allows, and refuses only on a field the policy refuses.
//! - An outage: with the webhook registered under `failurePolicy: Ignore` and stopped, the
//!   backstop refuses a duplicate network, eleven NICs and a changed list on a provisioned
//!   machine, and lets valid machines, Cluster API's updates, finalizer removal and deletion
//!   through; when the webhook is back, defaulting resumes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use nicpolicy::backstop::{self, KindBackstop, Options};
use nicpolicy::cases::Case;
use nicpolicy::chain::PolicyChain;
use nicpolicy::plugin::backstop::INVENTORY_PARAM;
use nicpolicy::plugin::ObjectKind;
use nicpolicy::{builtin, Host, HostConfig, Policy, PolicyOptions};
use nicpolicy_e2e::binaries::{binaries, workspace};
use nicpolicy_e2e::fixtures::{
    api, capvcd_version, cluster_namespace, create, extras, get, namespace, refusal, worker,
    WORKER_DEFAULTS,
};
use nicpolicy_e2e::kubectl::Kubectl;
use nicpolicy_e2e::shared;
use nicpolicy_e2e::Webhook;
use serde_json::{json, Value};

/// How long a new binding may take to be enforced.
const BINDING_DEADLINE: Duration = Duration::from_secs(30);

fn host() -> &'static Host {
    static HOST: OnceLock<Host> = OnceLock::new();
    HOST.get_or_init(|| {
        Host::new(HostConfig {
            cache_dir: None,
            max_instances: 8,
            ..HostConfig::default()
        })
        .expect("engine starts")
    })
}

/// The built-in `policy`, compiled once per test.
fn built_in(policy: &str) -> Policy {
    host()
        .load(
            builtin::get(policy).expect("a built-in policy").wasm,
            PolicyOptions::default(),
        )
        .expect("the built-in policy loads")
}

/// The cases of one policy that share settings and inventory: one namespace, one ConfigMap.
struct Group {
    policy: &'static str,
    chain: PolicyChain,
    namespace: String,
    backstops: BTreeMap<ObjectKind, KindBackstop>,
    params: BTreeMap<String, String>,
    cases: Vec<Case>,
}

/// `object` as the case's machine in `namespace`, named `name`, at the served version.
fn placed(object: &Value, namespace: &str, name: &str) -> Value {
    let mut object = object.clone();
    object["apiVersion"] = format!("infrastructure.cluster.x-k8s.io/{}", capvcd_version()).into();
    object["metadata"]["namespace"] = namespace.into();
    object["metadata"]["name"] = name.into();
    if let Some(meta) = object["metadata"].as_object_mut() {
        for field in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "managedFields",
            "generation",
        ] {
            meta.remove(field);
        }
    }
    object
}

/// The binding of `policy` for `kind`, scoped to `namespace`, with the parameters of
/// ConfigMap `params` there.
fn scoped_binding(kind: ObjectKind, options: &Options, namespace: &str, name: &str) -> Value {
    let mut binding = backstop::binding_object(kind, options);
    binding["metadata"]["name"] = name.into();
    binding["spec"]["paramRef"]["namespace"] = namespace.into();
    binding["spec"]["matchResources"] = json!({
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
    });
    binding
}

/// Whether `err` is a refusal of a ValidatingAdmissionPolicy, and its message.
fn policy_refusal(err: &kube::Error) -> Option<String> {
    let (_, _, message, _) = refusal(err);
    message
        .contains("ValidatingAdmissionPolicy")
        .then_some(message)
}

/// Waits until an eleven-NIC VCDMachine in `namespace` is refused by a policy.
async fn wait_enforced(client: &kube::Client, namespace: &str) {
    let start = Instant::now();
    let eleven: Vec<String> = (0..11).map(|i| format!("net-{i}")).collect();
    let probe = json!({
        "apiVersion": format!("infrastructure.cluster.x-k8s.io/{}", capvcd_version()),
        "kind": "VCDMachine",
        "metadata": {"name": "backstop-probe", "namespace": namespace},
        "spec": {"extraOvdcNetworks": eleven},
    });
    loop {
        match create(client, &probe, true).await {
            Err(err) if policy_refusal(&err).is_some() => return,
            _ if start.elapsed() > BINDING_DEADLINE => {
                panic!("the backstop is not enforced in {namespace} after {BINDING_DEADLINE:?}")
            }
            _ => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

fn apply(kubectl: &Kubectl, objects: &[Value]) {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    let output = kubectl.apply(&list.to_string());
    assert!(output.success, "kubectl apply: {}", output.stderr);
}

#[tokio::test]
async fn kube_apiserver_never_refuses_with_the_backstop_what_a_built_in_case_allows() {
    let plane = shared();
    let kubectl = plane.kubectl();
    let client = plane.client().await;
    let mut groups: Vec<Group> = Vec::new();
    for policy in ["capvcd", "role-based", "static-ip", "zone-aware"] {
        let base = built_in(policy);
        let dir = workspace().join("tests/cases").join(policy);
        let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
            .expect("the suite")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        paths.sort();
        for path in paths {
            let case = Case::load(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
            if case.expect.settings_rejected.is_some() || case.expect.error.is_some() {
                continue;
            }
            let inventory = case
                .request
                .inventory
                .as_ref()
                .map(backstop::inventory_param);
            let found = groups.iter_mut().find(|g| {
                g.policy == policy
                    && g.chain.first().settings() == &case.settings
                    && g.params.get(INVENTORY_PARAM) == inventory.as_ref()
            });
            if let Some(group) = found {
                group.cases.push(case);
                continue;
            }
            let Ok(loaded) = base.with_settings(case.settings.clone()) else {
                continue;
            };
            let chain = PolicyChain::new(loaded);
            let mut backstops = BTreeMap::new();
            let mut params = BTreeMap::new();
            for kind in ObjectKind::ALL {
                let backstop = backstop::of_chain(kind, &chain, &[]).expect("a backstop");
                params.extend(backstop.params.clone());
                backstops.insert(kind, backstop);
            }
            if let Some(inventory) = inventory {
                params.insert(INVENTORY_PARAM.to_string(), inventory);
            }
            groups.push(Group {
                policy,
                chain,
                namespace: format!("backstop-{policy}-{}", groups.len()),
                backstops,
                params,
                cases: vec![case],
            });
        }
    }
    assert!(groups.len() > 10, "{} groups", groups.len());

    // One policy object per built-in policy and kind (its expressions do not depend on the
    // settings: they read them from the ConfigMap), a binding and a ConfigMap per group.
    let mut policies = BTreeMap::new();
    for group in &groups {
        let options = Options {
            name: format!("e2e-{}", group.policy),
            ..Options::default()
        };
        for (kind, backstop) in &group.backstops {
            let object = backstop::policy_object(*kind, &backstop.validations, &options);
            let name = backstop::policy_name(*kind, &options);
            if let Some(existing) = policies.insert(name.clone(), object.clone()) {
                assert_eq!(
                    existing, object,
                    "{name}: the same expressions for every setting"
                );
            }
        }
    }
    apply(&kubectl, &policies.values().cloned().collect::<Vec<_>>());

    // The stored objects of the UPDATE cases, created before any binding judges them.
    for group in &groups {
        namespace(&kubectl, &group.namespace);
        for (i, case) in group.cases.iter().enumerate() {
            if let Some(old) = &case.objects.old {
                create(
                    &client,
                    &placed(old, &group.namespace, &format!("case-{i}")),
                    false,
                )
                .await
                .unwrap_or_else(|err| panic!("{}: the stored object: {err}", case.path.display()));
            }
        }
    }
    for group in &groups {
        let options = Options {
            name: format!("e2e-{}", group.policy),
            namespace: group.namespace.clone(),
            ..Options::default()
        };
        let mut objects = vec![backstop::params_config_map(&group.params, &options)];
        for kind in ObjectKind::ALL {
            let name = format!(
                "{}-{}",
                backstop::policy_name(kind, &options),
                group.namespace
            );
            objects.push(scoped_binding(kind, &options, &group.namespace, &name));
        }
        apply(&kubectl, &objects);
    }
    for group in &groups {
        wait_enforced(&client, &group.namespace).await;
    }

    let (mut checked, mut refused, mut schema) = (0, 0, 0);
    for group in &groups {
        for (i, case) in group.cases.iter().enumerate() {
            let what = format!("{}/{}", group.policy, case.name());
            let decision = group
                .chain
                .evaluate(&case.request)
                .unwrap_or_else(|err| panic!("{what}: {err}"))
                .decision;
            let name = format!("case-{i}");
            let object = placed(&case.objects.machine, &group.namespace, &name);
            let result = if case.objects.old.is_some() {
                let kind = object["kind"].as_str().expect("kind");
                let api = api(&client, &group.namespace, kind);
                let stored = api.get(&name).await.expect("the stored object");
                let mut object = object.clone();
                object["metadata"]["resourceVersion"] =
                    stored.metadata.resource_version.clone().into();
                let typed: DynamicObject = serde_json::from_value(object).expect("an object");
                let params = PostParams {
                    dry_run: true,
                    field_manager: Some("nicpolicy-e2e".into()),
                };
                api.replace(&name, &params, &typed).await.map(|_| ())
            } else {
                create(&client, &object, true).await.map(|_| ())
            };
            let refusal_message = match &result {
                Ok(()) => None,
                Err(err) => match policy_refusal(err) {
                    Some(message) => Some(message),
                    None => {
                        // CAPVCD's schema refused it before any validating admission.
                        let (code, _, message, _) = refusal(err);
                        assert_eq!(code, 422, "{what}: {message}");
                        schema += 1;
                        continue;
                    }
                },
            };
            checked += 1;
            let Some(message) = refusal_message else {
                continue;
            };
            refused += 1;
            assert!(
                !decision.allowed,
                "{what}: the policy allows it, kube-apiserver's backstop refuses: {message}"
            );
            let on_a_refused_field = decision.violations.iter().any(|v| {
                let list = v.field.split('[').next().unwrap_or(&v.field);
                message.contains(&format!(": {list}: "))
            });
            assert!(
                on_a_refused_field,
                "{what}: refused on a field the policy does not refuse: {message} (policy: {:?})",
                decision.violations
            );
        }
    }
    eprintln!(
        "e2e: {checked} cases judged by kube-apiserver's backstop, {refused} refused; {schema} refused by CAPVCD's schema first"
    );
    assert!(checked > 120, "{checked} cases");
    assert!(refused > 20, "{refused} refused");

    // The largest machine the CAPVCD policy allows (nine extra networks of 128 characters, all
    // in the inventory), through every validation: kube-apiserver's own time for the policy.
    let group = groups
        .iter()
        .find(|g| {
            g.policy == "capvcd"
                && g.chain.first().settings().is_null()
                && g.params.contains_key(INVENTORY_PARAM)
        })
        .expect("the CAPVCD policy with its defaults and an inventory");
    let names: Vec<String> = (0..9).map(|i| format!("{i}{}", "n".repeat(127))).collect();
    let mut params = group.params.clone();
    params.insert(INVENTORY_PARAM.into(), format!("\n{}\n", names.join("\n")));
    let options = Options {
        name: "e2e-capvcd".into(),
        namespace: group.namespace.clone(),
        ..Options::default()
    };
    apply(&kubectl, &[backstop::params_config_map(&params, &options)]);
    let largest = json!({
        "apiVersion": format!("infrastructure.cluster.x-k8s.io/{}", capvcd_version()),
        "kind": "VCDMachine",
        "metadata": {"name": "largest", "namespace": group.namespace},
        "spec": {"extraOvdcNetworks": names},
    });
    let start = Instant::now();
    while let Err(err) = create(&client, &largest, true).await {
        // The new parameters reach the policy's informer within moments.
        assert!(
            start.elapsed() < BINDING_DEADLINE,
            "the largest machine is refused: {err}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // kube-apiserver records a policy's own time only when it refuses: the validating step's
    // time (apiserver_admission_step_admission_duration_seconds) here and in a namespace no
    // binding selects, alternating, tells what the backstop adds.
    namespace(&kubectl, "backstop-unbound");
    let unbound = {
        let mut object = largest.clone();
        object["metadata"]["namespace"] = "backstop-unbound".into();
        object
    };
    let labels = [
        "operation=\"CREATE\"",
        "rejected=\"false\"",
        "type=\"validate\"",
    ];
    let metric = "apiserver_admission_step_admission_duration_seconds";
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for round in 0..10 {
        for (object, into) in [(&largest, &mut with), (&unbound, &mut without)] {
            let (sum, count) = histogram(&kubectl, metric, &labels);
            for _ in 0..10 {
                create(&client, object, true)
                    .await
                    .expect("the largest machine is admitted");
            }
            let (sum_after, count_after) = histogram(&kubectl, metric, &labels);
            assert!(
                count_after - count >= 10.0,
                "round {round}: {metric} counted the creates"
            );
            into.push((sum_after - sum) / (count_after - count) * 1e6);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    eprintln!(
        "e2e: the largest machine the CAPVCD policy allows (9 extra networks of 128 characters): kube-apiserver's validating step {:.0} us with the backstop, {:.0} us without (median of 10 rounds of 10 dry-run creates each)",
        median(&mut with),
        median(&mut without)
    );

    // Clean up: the policies are cluster-wide.
    for name in policies.keys() {
        kubectl.run(&[
            "delete",
            "validatingadmissionpolicy",
            name,
            "--ignore-not-found",
        ]);
    }
    kubectl.run(&[
        "delete",
        "validatingadmissionpolicybinding",
        "-l",
        "app.kubernetes.io/component=backstop",
        "--ignore-not-found",
    ]);
}

/// Sum and count of kube-apiserver's histogram `name` over the series whose labels contain
/// every one of `labels`.
fn histogram(kubectl: &Kubectl, name: &str, labels: &[&str]) -> (f64, f64) {
    let text = kubectl.ok(&["get", "--raw", "/metrics"]);
    let read = |suffix: &str| -> f64 {
        text.lines()
            .filter(|line| line.starts_with(&format!("{name}{suffix}{{")))
            .filter(|line| labels.iter().all(|l| line.contains(l)))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    (read("_sum"), read("_count"))
}

/// kube-apiserver's validating admission step (its own sum and count) over server-side dry-run
/// creates of a valid worker: the median of 5 rounds of `creates` each, in milliseconds.
async fn validating_step_ms(
    kubectl: &Kubectl,
    client: &kube::Client,
    ns: &str,
    creates: usize,
) -> f64 {
    let labels = [
        "operation=\"CREATE\"",
        "rejected=\"false\"",
        "type=\"validate\"",
    ];
    let metric = "apiserver_admission_step_admission_duration_seconds";
    let mut rounds = Vec::new();
    for _ in 0..5 {
        let (sum, count) = histogram(kubectl, metric, &labels);
        for i in 0..creates {
            let machine = worker(
                ns,
                &format!("timing-{i}"),
                Some(ns),
                Some(&["storage-net", "workload-net"]),
            );
            create(client, &machine, true)
                .await
                .expect("a valid worker is admitted");
        }
        let (sum_after, count_after) = histogram(kubectl, metric, &labels);
        assert!(
            count_after - count >= creates as f64,
            "the metric counted the creates"
        );
        rounds.push((sum_after - sum) / (count_after - count) * 1000.0);
    }
    rounds.sort_by(f64::total_cmp);
    rounds[rounds.len() / 2]
}

fn patch_webhooks_failure_policy(kubectl: &Kubectl, policy: &str) {
    for kind in [
        "mutatingwebhookconfiguration",
        "validatingwebhookconfiguration",
    ] {
        let patch = json!([
            {"op": "replace", "path": "/webhooks/0/failurePolicy", "value": policy},
            {"op": "replace", "path": "/webhooks/1/failurePolicy", "value": policy},
        ]);
        kubectl.ok(&[
            "patch",
            kind,
            "nicpolicy",
            "--type=json",
            "-p",
            &patch.to_string(),
        ]);
    }
}

#[tokio::test]
async fn while_the_webhook_is_down_the_backstop_refuses_what_it_catches_and_nothing_else() {
    let plane = shared();
    let kubectl = plane.kubectl();
    let client = plane.client().await;
    let ns = "backstop-outage";
    cluster_namespace(&kubectl, ns);
    let mut webhook = Webhook::registered(&plane, "outage").await;
    // The pairing docs/deploy.md describes: the webhook may fail open, the backstop holds.
    patch_webhooks_failure_policy(&kubectl, "Ignore");

    let webhook_alone_ms = validating_step_ms(&kubectl, &client, ns, 10).await;
    // The backstop of the shipped configuration, as `nicpolicy export backstop` writes it.
    // Only its bindings are scoped to this test's namespace (the suites share the API server).
    // nicpolicy-system exists: the webhook's ServiceAccount is there.
    let manifest = webhook.config_dir.join("backstop.yaml");
    let output = std::process::Command::new(&binaries().nicpolicy)
        .args([
            "export",
            "backstop",
            "--namespace",
            "nicpolicy-system",
            "--config",
        ])
        .arg(webhook.config_dir.join("nicpolicy.yaml"))
        .arg("-o")
        .arg(&manifest)
        .output()
        .expect("nicpolicy export backstop runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(&manifest).expect("the manifest");
    assert!(text.contains("Left to the webhook:"), "{text}");
    let mut objects = nicpolicy_e2e::fixtures::yaml_objects(&text);
    assert_eq!(
        objects.len(),
        5,
        "a ConfigMap, and a policy and a binding per kind"
    );
    for object in &mut objects {
        if object["kind"] == "ValidatingAdmissionPolicyBinding" {
            object["spec"]["matchResources"] = json!({
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            });
        }
    }
    apply(&kubectl, &objects);
    wait_enforced(&client, ns).await;
    let with_webhook_ms = validating_step_ms(&kubectl, &client, ns, 10).await;
    // Before the outage: the webhook defaults, as always.
    let stored = create(
        &client,
        &worker(ns, "prod-md-0-before", Some(ns), None),
        false,
    )
    .await
    .expect("a worker is admitted");
    assert_eq!(extras(&stored), WORKER_DEFAULTS);

    webhook.stop();
    let outage_ms = validating_step_ms(&kubectl, &client, ns, 10).await;

    let refused = |err: kube::Error, field: &str, what: &str| {
        let message =
            policy_refusal(&err).unwrap_or_else(|| panic!("{what}: not the backstop: {err}"));
        assert!(message.contains(field), "{what}: {message}");
        message
    };
    // A duplicate network.
    let duplicate = worker(
        ns,
        "prod-md-0-dup",
        Some(ns),
        Some(&["storage-net", "workload-net", "storage-net"]),
    );
    let err = create(&client, &duplicate, false)
        .await
        .expect_err("a duplicate is refused");
    let message = refused(err, "spec.extraOvdcNetworks", "duplicate");
    assert!(message.contains("storage-net"), "{message}");
    // Eleven NICs.
    let ten: Vec<String> = (0..10).map(|i| format!("net-{i}")).collect();
    let ten: Vec<&str> = ten.iter().map(String::as_str).collect();
    let err = create(
        &client,
        &worker(ns, "prod-md-0-eleven", Some(ns), Some(&ten)),
        false,
    )
    .await
    .expect_err("eleven NICs are refused");
    refused(err, "11 NICs requested", "eleven NICs");
    // A network the org VDC does not have.
    let err = create(
        &client,
        &worker(ns, "prod-md-0-typo", Some(ns), Some(&["storage-nett"])),
        false,
    )
    .await
    .expect_err("an unknown network is refused");
    refused(err, "storage-nett", "unknown network");

    // Valid machines go in (undefaulted: defaulting is the webhook's).
    let valid = worker(
        ns,
        "prod-md-0-during",
        Some(ns),
        Some(&["storage-net", "backup-net"]),
    );
    create(&client, &valid, false)
        .await
        .expect("a valid worker is admitted");
    let empty = worker(ns, "prod-md-0-empty", Some(ns), None);
    create(&client, &empty, false)
        .await
        .expect("a worker without extras is admitted");

    // CAPVCD's provider ID, Cluster API's labels and owner, a finalizer: all admitted.
    let machines = api(&client, ns, "VCDMachine");
    let params = PatchParams::default();
    let merge = |value: Value| Patch::Merge(value);
    machines
        .patch("prod-md-0-before", &params, &merge(json!({
            "metadata": {"finalizers": ["vcdmachine.infrastructure.cluster.x-k8s.io"]},
            "spec": {"providerID": "vmware-cloud-director://urn:vcloud:vm:0c4e7a52-6b4d-4a43-9d2e-1f1e2b3c4d5e"},
        })))
        .await
        .expect("CAPVCD's provider ID and finalizer are admitted");
    machines
        .patch(
            "prod-md-0-before",
            &params,
            &merge(json!({
                "metadata": {
                    "labels": {"cluster.x-k8s.io/set-name": "prod-md-0-6f5d8"},
                    "ownerReferences": [{
                        "apiVersion": "cluster.x-k8s.io/v1beta1",
                        "kind": "Machine",
                        "name": "prod-md-0-6f5d8-x7k2p",
                        "uid": "0d2f3c4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f",
                    }],
                },
            })),
        )
        .await
        .expect("Cluster API's label and owner updates are admitted");
    // A changed list on the provisioned machine is refused.
    let err = machines
        .patch(
            "prod-md-0-before",
            &params,
            &merge(json!({"spec": {"extraOvdcNetworks": ["storage-net"]}})),
        )
        .await
        .expect_err("a changed list on a provisioned machine is refused");
    refused(err, "provisioned machine", "changed list");
    // Deletion, and the finalizer's removal on the way out.
    machines
        .delete("prod-md-0-before", &DeleteParams::default())
        .await
        .expect("the deletion is admitted");
    machines
        .patch(
            "prod-md-0-before",
            &params,
            &merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("the finalizer's removal is admitted");
    let start = Instant::now();
    while get(&client, ns, "VCDMachine", "prod-md-0-before")
        .await
        .is_some()
    {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the machine is gone"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The webhook is back: defaulting and the full rules resume.
    webhook.restart().await;
    let stored = create(
        &client,
        &worker(ns, "prod-md-0-after", Some(ns), None),
        false,
    )
    .await
    .expect("a worker is admitted");
    assert_eq!(extras(&stored), WORKER_DEFAULTS, "defaulted again");
    let forbidden = worker(ns, "prod-md-0-cp", Some(ns), Some(&["ext-dmz-net"]));
    let mut forbidden = forbidden;
    forbidden["metadata"]["labels"]["cluster.x-k8s.io/control-plane"] = "".into();
    let err = create(&client, &forbidden, true)
        .await
        .expect_err("the role rules are back");
    assert!(
        policy_refusal(&err).is_none(),
        "refused by the webhook: {err}"
    );

    webhook.unregister();
    let backstop_alone_ms = validating_step_ms(&kubectl, &client, ns, 10).await;
    for kind in ["vcdmachine", "vcdmachinetemplate"] {
        kubectl.run(&[
            "delete",
            &format!("validatingadmissionpolicybinding/nicpolicy-backstop-{kind}"),
            "--ignore-not-found",
        ]);
        kubectl.run(&[
            "delete",
            &format!("validatingadmissionpolicy/nicpolicy-backstop-{kind}"),
            "--ignore-not-found",
        ]);
    }
    let neither_ms = validating_step_ms(&kubectl, &client, ns, 10).await;
    eprintln!(
        "e2e: kube-apiserver's validating admission step (apiserver_admission_step_admission_duration_seconds, type validate), median of 5 rounds of 10 dry-run creates of a valid worker: neither {neither_ms:.2} ms, backstop alone {backstop_alone_ms:.2} ms, webhook alone {webhook_alone_ms:.2} ms, webhook and backstop {with_webhook_ms:.2} ms, webhook down under failurePolicy Ignore with the backstop {outage_ms:.2} ms"
    );
}
