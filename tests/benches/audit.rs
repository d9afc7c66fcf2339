//! The audit at scale: 10,000 generated machines and templates in 100 clusters (a realistic mix
//! of valid and invalid ones), read from a folder of manifests as `nicpolicy audit` reads it,
//! evaluated with the built-in CAPVCD policy in Wasm and with the same rules native, in one
//! run. Then the controller's view of the same objects: one PolicyReport per namespace, and how
//! many reports one changed machine rewrites. Then static-pool capacity: every cluster also has
//! three MachineDeployments and a KubeadmControlPlane (with its template), and the inventory's
//! networks carry pool counts; what each rollout needs of each pool is counted as `audit`
//! counts it. Prints CPU seconds (user + system, from /proc/self/stat) and the process's peak
//! resident memory.
//!
//! `cargo bench -p nicpolicy-tests --bench audit [-- --clusters N --machines N]`

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use nicpolicy::audit::capacity::Capacity;
use nicpolicy::audit::{evaluate_all, Inputs, Summary};
use nicpolicy::controller::report::{self, Bounds, Format};
use nicpolicy::inventories::Inventories;
use nicpolicy::{PolicyChain, PolicyOptions};
use nicpolicy_plugin::capvcd;

use common::fleet;
use common::procfs;

fn main() {
    // `cargo test --benches` runs this too: keep that quick.
    let quick = !std::env::args().any(|a| a == "--bench");
    let (clusters, per_cluster) = if quick {
        fleet::size(3, 100)
    } else {
        fleet::size(100, 100)
    };
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/bench-audit");
    let (namespaces, mix) = fleet::generate(clusters, per_cluster);
    fleet::write(&dir, &namespaces);
    for namespace in &namespaces {
        std::fs::write(
            dir.join(&namespace.name).join("rollouts.yaml"),
            rollouts(&namespace.name),
        )
        .expect("bench file");
    }
    println!(
        "{} objects in {clusters} clusters ({} per cluster): {mix:?}",
        clusters * per_cluster,
        per_cluster
    );
    let inventory = common::inventory(24);
    let host = common::host("audit");
    let chain = PolicyChain::new(
        host.load(common::capvcd_wasm(), PolicyOptions::default())
            .expect("the CAPVCD policy loads"),
    );

    // Every org VDC has an inventory of its own (the same networks; pools counted apart below),
    // beside the fleet's folder, not in it.
    let inventory_dir = dir.with_extension("inventories");
    std::fs::create_dir_all(&inventory_dir).expect("bench folder");
    let by_vdc: BTreeMap<String, PathBuf> = (0..fleet::VDCS)
        .map(|i| {
            let path = inventory_dir.join(format!("{}.yaml", fleet::vdc(i)));
            let mut written = serde_json::to_value(&inventory).expect("the inventory serialises");
            for network in written["networks"].as_array_mut().expect("networks") {
                // One VDC's storage-net is nearly full.
                let used = if i == 1 && network["name"] == "storage-net" {
                    3990
                } else {
                    1200
                };
                network["totalIpCount"] = 4000.into();
                network["usedIpCount"] = used.into();
            }
            std::fs::write(&path, serde_json::to_string(&written).expect("JSON"))
                .expect("bench file");
            (fleet::vdc(i), path)
        })
        .collect();

    let cpu = procfs::cpu_seconds("self");
    let wall = Instant::now();
    let inventories = Inventories::read(None, &by_vdc, nicpolicy::inventories::Missing::Refused)
        .expect("the inventories read");
    let inputs = Inputs::read(std::slice::from_ref(&dir)).expect("the generated folder reads");
    let subjects = inputs.subjects(&inventories);
    let read_cpu = procfs::cpu_seconds("self") - cpu;
    let read_wall = wall.elapsed();

    let native_subjects = subjects.clone();
    let cpu = procfs::cpu_seconds("self");
    let wall = Instant::now();
    let findings = evaluate_all(subjects, &chain, None);
    let wasm_cpu = procfs::cpu_seconds("self") - cpu;
    let wasm_wall = wall.elapsed();

    let cpu = procfs::cpu_seconds("self");
    let wall = Instant::now();
    let mut native_denied = 0;
    for subject in native_subjects {
        if let Ok(request) = subject.input {
            native_denied += usize::from(!capvcd::evaluate(&request).allowed);
        }
    }
    let native_cpu = procfs::cpu_seconds("self") - cpu;
    let native_wall = wall.elapsed();

    let summary = Summary::of(&findings);
    assert_eq!(
        summary.count(nicpolicy::audit::Verdict::Denied),
        native_denied,
        "Wasm and native must deny the same machines"
    );
    println!("{}", summary.line());
    println!("violations by rule: {:?}", summary.reasons);
    println!(
        "read + match clusters: {read_cpu:.2} s CPU ({:.2} s wall)",
        read_wall.as_secs_f64()
    );
    println!(
        "evaluate, Wasm:   {wasm_cpu:.2} s CPU ({:.2} s wall, {:.1} us per object)",
        wasm_wall.as_secs_f64(),
        wasm_wall.as_secs_f64() * 1e6 / findings.len() as f64
    );
    println!(
        "evaluate, native: {native_cpu:.2} s CPU ({:.2} s wall, {:.1} us per object)",
        native_wall.as_secs_f64(),
        native_wall.as_secs_f64() * 1e6 / findings.len() as f64
    );
    println!(
        "full audit (read + Wasm): {:.2} s CPU; with native rules: {:.2} s CPU; evaluation Wasm / native: {:.1}x",
        read_cpu + wasm_cpu,
        read_cpu + native_cpu,
        wasm_wall.as_secs_f64() / native_wall.as_secs_f64().max(1e-9)
    );

    // The controller's reports: one per namespace; a second pass after one machine changed
    // rewrites one report.
    let by_namespace = |findings: &[nicpolicy::audit::Finding]| {
        let mut groups: BTreeMap<String, Vec<nicpolicy::audit::Finding>> = BTreeMap::new();
        for f in findings {
            groups
                .entry(f.object.namespace.clone())
                .or_default()
                .push(f.clone());
        }
        groups
    };
    let policy = |_: &str| "nicpolicy-capvcd".to_string();
    let cpu = procfs::cpu_seconds("self");
    let first: BTreeMap<String, report::Report> = by_namespace(&findings)
        .into_iter()
        .map(|(ns, fs)| {
            let built = report::build(Format::OpenReports, &ns, &policy, &fs, Bounds::default());
            (ns, built)
        })
        .collect();
    let report_cpu = procfs::cpu_seconds("self") - cpu;
    let largest = first
        .values()
        .map(|r| r.object.to_string().len())
        .max()
        .unwrap_or(0);
    let mut changed = findings.clone();
    if let Some(f) = changed
        .iter_mut()
        .find(|f| f.result == nicpolicy::audit::Verdict::Denied)
    {
        f.result = nicpolicy::audit::Verdict::Allowed;
        if let Some(d) = f.decision.as_mut() {
            d.allowed = true;
            d.violations.clear();
        }
    }
    let rewritten = by_namespace(&changed)
        .into_iter()
        .filter(|(ns, fs)| {
            first.get(ns).map(|r| &r.fingerprint)
                != Some(
                    &report::build(Format::OpenReports, ns, &policy, fs, Bounds::default())
                        .fingerprint,
                )
        })
        .count();
    println!(
        "PolicyReports: {} built in {report_cpu:.2} s CPU, largest {:.0} KiB; after one machine was fixed, {rewritten} of {} would be written again",
        first.len(),
        largest as f64 / 1024.0,
        first.len()
    );
    // Static pools: each VDC's inventory counts its pools; every rollout's need against its
    // VDC's.
    let peak_before = procfs::peak_rss_mib("self");
    let cpu = procfs::cpu_seconds("self");
    let wall = Instant::now();
    let capacity = Capacity::of(
        &inventories.pools,
        &inputs.files,
        &findings,
        chain.builder(),
    )
    .expect("pools");
    let capacity_cpu = procfs::cpu_seconds("self") - cpu;
    let capacity_wall = wall.elapsed();
    let short: Vec<String> = capacity
        .networks
        .iter()
        .filter(|n| n.short())
        .map(|n| format!("{} ({})", n.network, n.vdc.as_deref().unwrap_or("default")))
        .collect();
    assert!(
        short == [format!("storage-net ({})", fleet::vdc(1))],
        "storage-net is short: {:?}",
        capacity
            .networks
            .iter()
            .find(|n| n.network == "storage-net")
    );
    assert_eq!(capacity.rollouts, clusters * 4, "every rollout counted");
    println!(
        "static pools: {} rollouts against {} pools of {} org VDCs in {capacity_cpu:.3} s CPU ({:.3} s wall); short: {short:?}; {} not counted; peak resident memory {:.0} MiB before, {:.0} MiB after",
        capacity.rollouts,
        capacity.networks.len(),
        fleet::VDCS,
        capacity_wall.as_secs_f64(),
        capacity.uncounted.len(),
        peak_before,
        procfs::peak_rss_mib("self")
    );
    println!(
        "peak resident memory: {:.0} MiB",
        procfs::peak_rss_mib("self")
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&inventory_dir);
}

/// The rollouts of the generated cluster in `namespace`, each to a template of its own (the next
/// version of a node pool's template, as an upgrade rolls it out): MachineDeployments md-0..md-2
/// (md-0 the 94 workers the fleet has, autoscaled to 120; md-1 and md-2 30 replicas, none there
/// yet; maxSurge 1) on mgmt-net, storage-net and workload-net, and a KubeadmControlPlane of
/// three on mgmt-net and storage-net.
fn rollouts(namespace: &str) -> String {
    let name = format!("{namespace}-prod");
    let mut out = format!(
        "apiVersion: infrastructure.cluster.x-k8s.io/v1beta3\nkind: VCDMachineTemplate\nmetadata:\n  name: {name}-control-plane\n  namespace: {namespace}\n  labels: {{cluster.x-k8s.io/cluster-name: {name}}}\nspec:\n  template:\n    spec:\n      catalog: cse-templates\n      template: ubuntu-2204-kube-v1.31.4\n      extraOvdcNetworks: [storage-net]\n---\napiVersion: controlplane.cluster.x-k8s.io/v1beta1\nkind: KubeadmControlPlane\nmetadata: {{name: {name}-control-plane, namespace: {namespace}}}\nspec:\n  replicas: 3\n  machineTemplate:\n    infrastructureRef: {{apiVersion: infrastructure.cluster.x-k8s.io/v1beta3, kind: VCDMachineTemplate, name: {name}-control-plane}}\n"
    );
    for t in 0..3 {
        let annotations = if t == 0 {
            "\n  annotations: {cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size: '120'}"
        } else {
            ""
        };
        let replicas = if t == 0 { 94 } else { 30 };
        out.push_str(&format!(
            "---\napiVersion: infrastructure.cluster.x-k8s.io/v1beta3\nkind: VCDMachineTemplate\nmetadata:\n  name: {name}-md-{t}-v2\n  namespace: {namespace}\n  labels: {{cluster.x-k8s.io/cluster-name: {name}}}\nspec:\n  template:\n    spec:\n      catalog: cse-templates\n      template: ubuntu-2204-kube-v1.32.1\n      extraOvdcNetworks: [storage-net, workload-net]\n"
        ));
        out.push_str(&format!(
            "---\napiVersion: cluster.x-k8s.io/v1beta1\nkind: MachineDeployment\nmetadata:\n  name: {name}-md-{t}\n  namespace: {namespace}{annotations}\nspec:\n  clusterName: {name}\n  replicas: {replicas}\n  strategy: {{type: RollingUpdate, rollingUpdate: {{maxSurge: 1}}}}\n  template:\n    spec:\n      clusterName: {name}\n      infrastructureRef: {{apiVersion: infrastructure.cluster.x-k8s.io/v1beta3, kind: VCDMachineTemplate, name: {name}-md-{t}-v2}}\n"
        ));
    }
    out
}
