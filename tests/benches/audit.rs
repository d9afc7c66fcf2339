//! The audit at scale: 10,000 generated machines and templates in 100 clusters (a realistic mix
//! of valid and invalid ones), read from a folder of manifests as `nicpolicy audit` reads it,
//! evaluated with the built-in CAPVCD policy in Wasm and with the same rules native, in one
//! run. Then the controller's view of the same objects: one PolicyReport per namespace, and how
//! many reports one changed machine rewrites. Prints CPU seconds (user + system, from
//! /proc/self/stat) and the process's peak resident memory.
//!
//! `cargo bench -p nicpolicy-tests --bench audit [-- --clusters N --machines N]`

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use nicpolicy::audit::{evaluate_all, Inputs, Summary};
use nicpolicy::controller::report::{self, Bounds};
use nicpolicy::{PolicyChain, PolicyOptions};
use nicpolicy_plugin::capvcd;

/// CPU seconds (user + system) this process has used.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces): state is field 3; utime and stime
    // are fields 14 and 15, in clock ticks (100 per second on Linux).
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// Peak resident memory of this process (VmHWM), in MiB.
fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Which kind of machine the `i`-th one is: most are fine, some carry one of the mistakes the
/// policy exists for.
fn extras(i: usize, primary: &str) -> (Vec<String>, &'static str) {
    let fine = |list: &[&str]| list.iter().map(|s| s.to_string()).collect();
    match i % 100 {
        0..=4 => (
            fine(&["storage-net", "workload-net", "storage-net"]),
            "duplicate",
        ),
        5..=8 => (
            vec![primary.to_string(), "storage-net".to_string()],
            "primary again",
        ),
        9..=11 => (fine(&["storag-net", "workload-net"]), "typo"),
        12..=13 => (
            common::EXTRAS
                .iter()
                .chain(["tenant-0011-net", "tenant-0012-net"].iter())
                .map(|s| s.to_string())
                .collect(),
            "too many NICs",
        ),
        14 => (fine(&["storage-net"]), "v1beta1"),
        15..=54 => (fine(&["storage-net", "workload-net"]), "fine"),
        55..=84 => (fine(&["storage-net", "workload-net", "backup-net"]), "fine"),
        _ => (fine(&["workload-net"]), "fine"),
    }
}

/// Writes `clusters` cluster folders of `per_cluster` objects (3 templates, the rest
/// VCDMachines) into `dir`; returns how many objects of each mix kind were written.
fn generate(dir: &Path, clusters: usize, per_cluster: usize) -> BTreeMap<&'static str, usize> {
    let _ = std::fs::remove_dir_all(dir);
    let mut mix = BTreeMap::new();
    for c in 0..clusters {
        let ns = format!("tenant-{c:03}");
        let name = format!("{ns}-prod");
        let multi_zone = c % 5 == 0;
        let folder = dir.join(&ns);
        std::fs::create_dir_all(&folder).expect("bench folder");
        let mut cluster = format!(
            "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  clusterNetwork: {{pods: {{cidrBlocks: [100.96.0.0/11]}}}}\n  controlPlaneRef: {{apiVersion: controlplane.cluster.x-k8s.io/v1beta1, kind: KubeadmControlPlane, name: {name}-control-plane}}\n  infrastructureRef: {{apiVersion: infrastructure.cluster.x-k8s.io/v1beta3, kind: VCDCluster, name: {name}}}\n---\napiVersion: infrastructure.cluster.x-k8s.io/v1beta3\nkind: VCDCluster\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  site: https://vcd.example.net\n  org: {ns}\n"
        );
        if multi_zone {
            cluster.push_str("  multiZoneSpec:\n    zoneTopology: DCGroup\n    zones:\n");
            for z in 1..=3 {
                let _ = writeln!(
                    cluster,
                    "      - {{name: az{z}, ovdc: {ns}-az{z}, ovdcNetworkName: mgmt-net, controlPlaneZone: true}}"
                );
            }
        } else {
            let _ = writeln!(cluster, "  ovdc: {ns}-ovdc\n  ovdcNetwork: mgmt-net");
        }
        for t in 0..3 {
            let (list, kind) = extras(c * per_cluster + t, "mgmt-net");
            *mix.entry(kind).or_default() += 1;
            let version = if kind == "v1beta1" {
                "v1beta1"
            } else {
                "v1beta3"
            };
            let zone = if multi_zone {
                "      failureDomain: az1\n"
            } else {
                ""
            };
            let _ = write!(
                cluster,
                "---\napiVersion: infrastructure.cluster.x-k8s.io/{version}\nkind: VCDMachineTemplate\nmetadata:\n  name: {name}-md-{t}\n  namespace: {ns}\n  labels: {{cluster.x-k8s.io/cluster-name: {name}}}\nspec:\n  template:\n    spec:\n      catalog: cse-templates\n      template: ubuntu-2204-kube-v1.31.4\n      sizingPolicy: TKG medium\n{zone}      extraOvdcNetworks: [{}]\n",
                list.join(", ")
            );
        }
        std::fs::write(folder.join("cluster.yaml"), cluster).expect("bench file");
        let mut machines = String::from("apiVersion: v1\nkind: List\nitems:\n");
        for m in 3..per_cluster {
            let (list, kind) = extras(c * per_cluster + m, "mgmt-net");
            *mix.entry(kind).or_default() += 1;
            let version = if kind == "v1beta1" {
                "v1beta1"
            } else {
                "v1beta3"
            };
            let control_plane = m < 6;
            let labels = if control_plane {
                format!(
                    "{{cluster.x-k8s.io/cluster-name: {name}, cluster.x-k8s.io/control-plane: ''}}"
                )
            } else {
                format!("{{cluster.x-k8s.io/cluster-name: {name}, cluster.x-k8s.io/deployment-name: {name}-md-0}}")
            };
            let zone = if multi_zone {
                format!("    failureDomain: az{}\n", 1 + m % 3)
            } else {
                String::new()
            };
            let provider = if m % 5 != 0 {
                format!("    providerID: vmware-cloud-director://urn:vcloud:vm:{c:04}{m:04}-8f1e-4b52-9b7e-3f2b5a9d0e11\n")
            } else {
                String::new()
            };
            let _ = write!(
                machines,
                "- apiVersion: infrastructure.cluster.x-k8s.io/{version}\n  kind: VCDMachine\n  metadata:\n    name: {name}-md-0-{m:05}\n    namespace: {ns}\n    uid: 7f3c{c:04}-{m:04}-4b52-9b7e-3f2b5a9d0e11\n    labels: {labels}\n    managedFields:\n    - {{manager: manager, operation: Update, apiVersion: infrastructure.cluster.x-k8s.io/v1beta3}}\n  spec:\n{provider}    catalog: cse-templates\n    template: ubuntu-2204-kube-v1.31.4\n    sizingPolicy: TKG medium\n    diskSize: 40Gi\n{zone}    extraOvdcNetworks: [{}]\n  status:\n    ready: true\n    bootstrapped: true\n",
                list.join(", ")
            );
        }
        std::fs::write(folder.join("machines.yaml"), machines).expect("bench file");
    }
    mix
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo test --benches` runs this too: keep that quick.
    let quick = !std::env::args().any(|a| a == "--bench");
    let clusters = arg("--clusters", if quick { 3 } else { 100 });
    let per_cluster = arg("--machines", 100);
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/bench-audit");
    let mix = generate(&dir, clusters, per_cluster);
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

    let cpu = cpu_seconds();
    let wall = Instant::now();
    let inputs = Inputs::read(std::slice::from_ref(&dir)).expect("the generated folder reads");
    let subjects = inputs.subjects(Some(&inventory));
    let read_cpu = cpu_seconds() - cpu;
    let read_wall = wall.elapsed();

    let native_subjects = subjects.clone();
    let cpu = cpu_seconds();
    let wall = Instant::now();
    let findings = evaluate_all(subjects, &chain, None);
    let wasm_cpu = cpu_seconds() - cpu;
    let wasm_wall = wall.elapsed();

    let cpu = cpu_seconds();
    let wall = Instant::now();
    let mut native_denied = 0;
    for subject in native_subjects {
        if let Ok(request) = subject.input {
            native_denied += usize::from(!capvcd::evaluate(&request).allowed);
        }
    }
    let native_cpu = cpu_seconds() - cpu;
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
    let cpu = cpu_seconds();
    let first: BTreeMap<String, report::Report> = by_namespace(&findings)
        .into_iter()
        .map(|(ns, fs)| {
            let built = report::build(&ns, &policy, &fs, Bounds::default());
            (ns, built)
        })
        .collect();
    let report_cpu = cpu_seconds() - cpu;
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
                != Some(&report::build(ns, &policy, fs, Bounds::default()).fingerprint)
        })
        .count();
    println!(
        "PolicyReports: {} built in {report_cpu:.2} s CPU, largest {:.0} KiB; after one machine was fixed, {rewritten} of {} would be written again",
        first.len(),
        largest as f64 / 1024.0,
        first.len()
    );
    println!("peak resident memory: {:.0} MiB", peak_rss_mib());
    let _ = std::fs::remove_dir_all(&dir);
}
