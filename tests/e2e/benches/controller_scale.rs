//! The controller at scale: 10,000 generated machines and templates in 100 clusters (the fleet
//! of the audit benchmark, tests/benches/common/fleet.rs) loaded into a real API server, then
//! `nicpolicy controller` with the shipped configuration and candidate run until its reports
//! settle. Prints its peak resident memory (VmHWM), CPU, and the PolicyReport writes of the
//! first pass, after one machine changed, and over a resync that changed nothing.
//!
//! `cargo bench -p nicpolicy-e2e --features e2e --bench controller_scale [-- --clusters N --machines N]`
//! (after `cargo test --workspace --no-run`, which builds the `nicpolicy` binary it runs).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, ObjectMeta, PostParams};
use nicpolicy_e2e::controller::Settings;
use nicpolicy_e2e::fixtures::api;
use nicpolicy_e2e::{ControlPlane, Controller};
use serde_json::Value;

#[path = "../../benches/common/fleet.rs"]
#[allow(dead_code)]
mod fleet;
#[path = "../../benches/common/procfs.rs"]
#[allow(dead_code)]
mod procfs;

/// Objects created at once.
const IN_FLIGHT: usize = 16;
/// How long the controller may take to settle after start or a change.
const SETTLE_DEADLINE: Duration = Duration::from_secs(600);
/// The resync period: short, to show a pass that changes nothing writes nothing.
const RESYNC: Duration = Duration::from_secs(30);

const WRITTEN: &str = r#"nicpolicy_controller_report_writes_total{result="written"}"#;
const UNCHANGED: &str = r#"nicpolicy_controller_report_writes_total{result="unchanged"}"#;

/// The generated YAML as objects the API server accepts (the project's CRDs of CAPVCD's main,
/// whose v1beta3 keeps the fleet's multi-zone clusters): it stores CAPVCD objects as v1beta3,
/// and sets `uid` and `managedFields` itself.
fn objects(yaml: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(yaml) {
        let value: Value = serde::Deserialize::deserialize(document).expect("generated YAML");
        let items = match value["kind"].as_str() {
            Some("List") => value["items"].as_array().cloned().unwrap_or_default(),
            _ => vec![value],
        };
        for mut item in items {
            if item["apiVersion"] == "infrastructure.cluster.x-k8s.io/v1beta1" {
                item["apiVersion"] = "infrastructure.cluster.x-k8s.io/v1beta3".into();
            }
            if let Some(metadata) = item["metadata"].as_object_mut() {
                metadata.remove("uid");
                metadata.remove("managedFields");
            }
            out.push(item);
        }
    }
    out
}

async fn load(client: &kube::Client, namespaces: &[fleet::Namespace]) -> usize {
    let namespace_api: Api<Namespace> = Api::all(client.clone());
    let mut objects_all = Vec::new();
    for namespace in namespaces {
        let object = Namespace {
            metadata: ObjectMeta {
                name: Some(namespace.name.clone()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        namespace_api
            .create(&PostParams::default(), &object)
            .await
            .expect("namespace created");
        objects_all.extend(objects(&namespace.cluster));
        objects_all.extend(objects(&namespace.machines));
    }
    let total = objects_all.len();
    let mut tasks = tokio::task::JoinSet::new();
    for object in objects_all {
        while tasks.len() >= IN_FLIGHT {
            if let Some(done) = tasks.join_next().await {
                done.expect("create task");
            }
        }
        let client = client.clone();
        tasks.spawn(async move {
            let kind = object["kind"].as_str().expect("kind").to_string();
            let namespace = object["metadata"]["namespace"]
                .as_str()
                .expect("namespace")
                .to_string();
            let typed: DynamicObject = serde_json::from_value(object).expect("an object");
            api(&client, &namespace, &kind)
                .create(&PostParams::default(), &typed)
                .await
                .unwrap_or_else(|err| panic!("cannot create a {kind} in {namespace}: {err}"));
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("create task");
    }
    total
}

/// Waits until the controller's queue is empty and `done` holds for its metrics.
async fn settle(
    controller: &Controller,
    what: &str,
    done: impl Fn(&BTreeMap<String, f64>) -> bool,
) -> Duration {
    let start = Instant::now();
    loop {
        let metrics = controller.metrics().await;
        let queue = metrics
            .get("nicpolicy_controller_queue_depth")
            .copied()
            .unwrap_or(1.0);
        if queue == 0.0 && done(&metrics) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < SETTLE_DEADLINE,
            "{what}: not settled within {SETTLE_DEADLINE:?}\n{}",
            controller.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn objects_counted(metrics: &BTreeMap<String, f64>) -> f64 {
    metrics
        .iter()
        .filter(|(name, _)| name.starts_with("nicpolicy_controller_objects{"))
        .map(|(_, n)| n)
        .sum()
}

fn memory_line(pid: &str) -> String {
    let status = procfs::status_kib(pid);
    let mib = |key: &str| status.get(key).copied().unwrap_or(0) as f64 / 1024.0;
    format!(
        "VmHWM {:.1} MiB (now VmRSS {:.1} MiB: anonymous {:.1}, file {:.1})",
        mib("VmHWM"),
        mib("VmRSS"),
        mib("RssAnon"),
        mib("RssFile")
    )
}

#[tokio::main]
async fn main() {
    // `cargo test --benches` runs this too (without `--bench`): keep that quick.
    let quick = !std::env::args().any(|a| a == "--bench");
    let (clusters, per_cluster) = if quick {
        fleet::size(2, 10)
    } else {
        fleet::size(100, 100)
    };
    let (namespaces, mix) = fleet::generate(clusters, per_cluster);

    let plane = ControlPlane::start("controller-scale", nicpolicy_e2e::Crds::Main)
        .expect("the control plane starts");
    let client = plane.client().await;
    let started = Instant::now();
    let total = load(&client, &namespaces).await;
    println!(
        "loaded {total} objects in {clusters} namespaces in {:.1} s; mix: {mix:?}",
        started.elapsed().as_secs_f64()
    );
    let machines = (clusters * per_cluster) as f64;

    let started = Instant::now();
    let settings = Settings {
        resync: RESYNC,
        ..Settings::single("scale")
    };
    let controller = Controller::start(&plane, &settings).await;
    let pid = controller.pid().expect("running").to_string();
    let ready = started.elapsed();
    println!("caches synced: {}", memory_line(&pid));
    let first = settle(&controller, "first pass", |m| {
        objects_counted(m) >= machines && m.get(WRITTEN).copied().unwrap_or(0.0) >= clusters as f64
    })
    .await;
    let metrics = controller.metrics().await;
    println!(
        "first pass: caches synced in {:.1} s, reports settled {:.1} s later; {:.2} s CPU; {} PolicyReport writes for {} objects in {clusters} namespaces",
        ready.as_secs_f64(),
        first.as_secs_f64(),
        procfs::cpu_seconds(&pid),
        metrics.get(WRITTEN).copied().unwrap_or(0.0),
        objects_counted(&metrics),
    );
    for (name, value) in &metrics {
        if name.starts_with("nicpolicy_controller_objects{")
            || name.starts_with("nicpolicy_controller_candidate_differences{")
        {
            println!("  {name} {value}");
        }
    }
    println!("after the first pass: {}", memory_line(&pid));

    // One machine changes: one report is written.
    let written = metrics.get(WRITTEN).copied().unwrap_or(0.0);
    let cpu = procfs::cpu_seconds(&pid);
    let target = &namespaces[clusters / 2].name;
    // A VCDMachine of the namespace (the first three objects are templates).
    let name = format!("{target}-prod-md-0-{:05}", (per_cluster / 2).max(3));
    let patch = serde_json::json!({"spec": {"extraOvdcNetworks": ["storage-net", "storage-net"]}});
    api(&client, target, "VCDMachine")
        .patch(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
        .expect("machine patched");
    let changed = settle(&controller, "one change", |m| {
        m.get(WRITTEN).copied().unwrap_or(0.0) > written
    })
    .await;
    // Anything else the change would cause has a few passes to show up.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after_change = controller.metric(WRITTEN).await;
    println!(
        "one machine changed ({target}/{name}): {} PolicyReport write(s), reported in {:.1} s, {:.2} s CPU",
        after_change - written,
        changed.as_secs_f64(),
        procfs::cpu_seconds(&pid) - cpu
    );

    // A resync evaluates every namespace again and writes nothing: nothing changed.
    let unchanged = controller.metric(UNCHANGED).await;
    let cpu = procfs::cpu_seconds(&pid);
    let resync = settle(&controller, "resync", |m| {
        m.get(UNCHANGED).copied().unwrap_or(0.0) >= unchanged + clusters as f64
    })
    .await;
    println!(
        "resync of {clusters} namespaces (after {:.1} s): {} written, {} unchanged, {:.2} s CPU",
        resync.as_secs_f64(),
        controller.metric(WRITTEN).await - after_change,
        controller.metric(UNCHANGED).await - unchanged,
        procfs::cpu_seconds(&pid) - cpu
    );
    println!(
        "peak resident memory of the controller: {}",
        memory_line(&pid)
    );
}
