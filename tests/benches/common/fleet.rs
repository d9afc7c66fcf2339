//! A generated fleet: `clusters` CAPVCD clusters, one per namespace, of `per_cluster` objects
//! each (three VCDMachineTemplates, the rest VCDMachines as `kubectl get -o yaml` prints them,
//! with `managedFields` and `status`; one cluster in five multi-zone), with a realistic mix of
//! valid machines and the mistakes the policies exist for.
//!
//! Standard library only: the audit benchmark writes it into files and the controller's scale
//! benchmark (tests/e2e/benches/) loads it into an API server.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// Extra networks of a multi-homed worker, in the order a site lists them (9 extras: 10 NICs,
/// Cloud Director's limit).
pub const EXTRAS: [&str; 9] = [
    "storage-net",
    "workload-net",
    "backup-net",
    "ext-dmz-net",
    "monitoring-net",
    "replication-net",
    "vmotion-net",
    "ingress-net",
    "egress-net",
];

/// One namespace of the fleet: its cluster and templates, and its machines (a `kind: List`).
pub struct Namespace {
    /// The namespace, `tenant-NNN`; the cluster is `tenant-NNN-prod`.
    pub name: String,
    /// The Cluster, the VCDCluster and three VCDMachineTemplates, as YAML documents.
    pub cluster: String,
    /// The VCDMachines, as a YAML `kind: List`.
    pub machines: String,
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
            EXTRAS
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

/// `clusters` namespaces of `per_cluster` objects (3 templates, the rest VCDMachines), and how
/// many objects of each mix kind they hold.
pub fn generate(
    clusters: usize,
    per_cluster: usize,
) -> (Vec<Namespace>, BTreeMap<&'static str, usize>) {
    let mut namespaces = Vec::with_capacity(clusters);
    let mut mix = BTreeMap::new();
    for c in 0..clusters {
        let ns = format!("tenant-{c:03}");
        let name = format!("{ns}-prod");
        let multi_zone = c % 5 == 0;
        let mut cluster = format!(
            "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  clusterNetwork: {{pods: {{cidrBlocks: [100.96.0.0/11]}}}}\n  controlPlaneRef: {{apiVersion: controlplane.cluster.x-k8s.io/v1beta1, kind: KubeadmControlPlane, name: {name}-control-plane}}\n  infrastructureRef: {{apiVersion: infrastructure.cluster.x-k8s.io/v1beta3, kind: VCDCluster, name: {name}}}\n---\napiVersion: infrastructure.cluster.x-k8s.io/v1beta3\nkind: VCDCluster\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  site: https://vcd.example.net\n  org: {ns}\n"
        );
        if multi_zone {
            cluster.push_str("  multiZoneSpec:\n    zoneTopology: DCGroup\n    zones:\n");
            for z in 1..=3 {
                let _ = writeln!(
                    cluster,
                    "      - {{name: az{z}, ovdc: {}, ovdcNetworkName: mgmt-net, controlPlaneZone: true}}",
                    vdc(c + z)
                );
            }
        } else {
            let _ = writeln!(cluster, "  ovdc: {}\n  ovdcNetwork: mgmt-net", vdc(c));
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
        namespaces.push(Namespace {
            name: ns,
            cluster,
            machines,
        });
    }
    (namespaces, mix)
}

/// The org VDCs the fleet's clusters are spread over.
pub const VDCS: usize = 20;

/// The name of org VDC `i` of [`VDCS`] (`eu1-vdc-07`): a single-zone cluster `c` is in
/// `vdc(c)`, the zones of a multi-zone one in the next VDCs.
pub fn vdc(i: usize) -> String {
    format!("eu1-vdc-{:02}", i % VDCS)
}

/// Writes each namespace into `dir/NAMESPACE/{cluster,machines}.yaml` (emptied first).
pub fn write(dir: &Path, namespaces: &[Namespace]) {
    let _ = std::fs::remove_dir_all(dir);
    for namespace in namespaces {
        let folder = dir.join(&namespace.name);
        std::fs::create_dir_all(&folder).expect("bench folder");
        std::fs::write(folder.join("cluster.yaml"), &namespace.cluster).expect("bench file");
        std::fs::write(folder.join("machines.yaml"), &namespace.machines).expect("bench file");
    }
}

/// The fleet's size: `--clusters N` and `--machines N` (objects per cluster) from the command
/// line, else the defaults given.
pub fn size(clusters: usize, per_cluster: usize) -> (usize, usize) {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: usize| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    (arg("--clusters", clusters), arg("--machines", per_cluster))
}
