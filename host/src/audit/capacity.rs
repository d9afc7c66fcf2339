//! Static-pool capacity: what the org VDC networks' static IP pools can still give, against the
//! NICs the machines a rollout creates take from them.
//!
//! Cloud Director counts each network's pool (`totalIpCount`, `usedIpCount`; `nicpolicy
//! inventory import` writes them into the inventory file). Every NIC a provisioner creates as
//! `POOL` takes one address from its network's pool, so a rollout that adds machines needs, per
//! network, the machines it adds times the `POOL` NICs of their template's plan as the
//! provisioner builds it ([`crate::vcd::built_nics`]). A machine that exists already holds its
//! addresses: they are in `usedIpCount`.
//!
//! The rollouts counted, each at its peak:
//!
//! | object | machines at the peak |
//! |---|---|
//! | MachineDeployment | `max(spec.replicas, autoscaler max size) + maxSurge` (`RollingUpdate`, the default: `maxSurge` 1, a percentage rounded up; `OnDelete`: 0) |
//! | KubeadmControlPlane | `spec.replicas + maxSurge` (`rolloutStrategy.rollingUpdate.maxSurge`, default 1) |
//!
//! The autoscaler's maximum is the annotation
//! `cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size`. The machines that exist are the
//! VCDMachines labelled `cluster.x-k8s.io/deployment-name` (or `.../control-plane-name`) with the
//! object's name, in its namespace: a rollout adds the peak minus those.

use std::collections::BTreeMap;

use nicpolicy_inputs::manifest::{namespace_or_default, ManifestFile, Object};

use crate::inventories::Inventories;
pub use crate::pools::{Pool, Pools};
use nicpolicy_plugin::provisioner::Provisioner;
use nicpolicy_plugin::IpAllocationMode;
use serde::Serialize;
use serde_json::Value;

use super::findings::{Finding, Verdict};

/// The annotation Cluster API's autoscaler provider reads a node group's maximum from.
pub const AUTOSCALER_MAX: &str = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size";
/// The label Cluster API gives a MachineDeployment's machines.
pub const DEPLOYMENT_LABEL: &str = "cluster.x-k8s.io/deployment-name";
/// The label Cluster API gives a KubeadmControlPlane's machines.
pub const CONTROL_PLANE_LABEL: &str = "cluster.x-k8s.io/control-plane-name";

/// An object whose rollout creates machines.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    /// `MachineDeployment` or `KubeadmControlPlane`.
    pub kind: String,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The VCDMachineTemplate its machines are made from.
    pub template: String,
    /// Machines at the peak of a rollout (see the module documentation).
    pub peak: u64,
    /// How the peak was counted (`4 replicas + maxSurge 1`).
    pub counted: String,
    /// Its machines that exist.
    pub existing: u64,
}

impl Rollout {
    /// The machines a rollout adds to those that exist.
    pub fn adds(&self) -> u64 {
        self.peak.saturating_sub(self.existing)
    }
}

/// Every MachineDeployment and KubeadmControlPlane of `files` made from a VCDMachineTemplate,
/// with its peak and its existing machines; and, one line each, the objects that could not be
/// counted (a replica count or surge that does not read), with why.
pub fn rollouts(files: &[ManifestFile]) -> (Vec<Rollout>, Vec<String>) {
    let mut existing: BTreeMap<(&str, &str, &str), u64> = BTreeMap::new();
    for file in files {
        for machine in file.of_kinds(&["VCDMachine"]) {
            let namespace = namespace_or_default(&machine.value);
            for label in [DEPLOYMENT_LABEL, CONTROL_PLANE_LABEL] {
                if let Some(owner) = machine
                    .value
                    .pointer(&format!("/metadata/labels/{}", label.replace('/', "~1")))
                    .and_then(Value::as_str)
                {
                    *existing.entry((label, namespace, owner)).or_default() += 1;
                }
            }
        }
    }
    let mut found = Vec::new();
    let mut problems = Vec::new();
    for file in files {
        for object in file.of_kinds(&["MachineDeployment", "KubeadmControlPlane"]) {
            match rollout(object) {
                Ok(Some(mut rollout)) => {
                    let label = if rollout.kind == "MachineDeployment" {
                        DEPLOYMENT_LABEL
                    } else {
                        CONTROL_PLANE_LABEL
                    };
                    rollout.existing = existing
                        .get(&(label, rollout.namespace.as_str(), rollout.name.as_str()))
                        .copied()
                        .unwrap_or(0);
                    found.push(rollout);
                }
                Ok(None) => {}
                Err(why) => problems.push(format!(
                    "{} {}/{} ({}): not counted: {why}",
                    object.kind(),
                    namespace_or_default(&object.value),
                    object.name(),
                    file.path.display()
                )),
            }
        }
    }
    found.sort_by(|a, b| (&a.namespace, &a.name, &a.kind).cmp(&(&b.namespace, &b.name, &b.kind)));
    (found, problems)
}

/// `object` as a rollout; `None` when its machines are not made from a VCDMachineTemplate.
fn rollout(object: &Object) -> Result<Option<Rollout>, String> {
    let value = &object.value;
    let deployment = object.kind() == "MachineDeployment";
    // Cluster API v1beta1's paths, then v1beta2's (a KubeadmControlPlane's reference moved
    // under machineTemplate.spec, both kinds' strategies under rollout).
    let first = |paths: &[&str]| paths.iter().find_map(|p| value.pointer(p));
    let reference = if deployment {
        first(&["/spec/template/spec/infrastructureRef"])
    } else {
        first(&[
            "/spec/machineTemplate/infrastructureRef",
            "/spec/machineTemplate/spec/infrastructureRef",
        ])
    };
    let Some(reference) = reference else {
        return Ok(None);
    };
    if reference.get("kind").and_then(Value::as_str) != Some("VCDMachineTemplate") {
        return Ok(None);
    }
    let template = reference
        .get("name")
        .and_then(Value::as_str)
        .ok_or("its infrastructureRef names no template")?
        .to_string();
    let replicas = match value.pointer("/spec/replicas") {
        None | Some(Value::Null) => 1,
        Some(n) => n
            .as_u64()
            .ok_or_else(|| format!("spec.replicas {n} is not a count"))?,
    };
    let (peak, counted) = if deployment {
        let max_size =
            match value
                .pointer(&format!(
                    "/metadata/annotations/{}",
                    AUTOSCALER_MAX.replace('/', "~1")
                ))
                .and_then(Value::as_str)
            {
                Some(text) => Some(text.trim().parse::<u64>().map_err(|_| {
                    format!("annotation {AUTOSCALER_MAX}: {text:?} is not a count")
                })?),
                None => None,
            };
        let on_delete = first(&["/spec/strategy/type", "/spec/rollout/strategy/type"])
            .and_then(Value::as_str)
            == Some("OnDelete");
        let base = max_size.map_or(replicas, |max| max.max(replicas));
        let surge = if on_delete {
            0
        } else {
            surge(
                first(&[
                    "/spec/strategy/rollingUpdate/maxSurge",
                    "/spec/rollout/strategy/rollingUpdate/maxSurge",
                ]),
                base,
                "the rolling update's maxSurge",
            )?
        };
        let counted = match max_size {
            Some(max) if max > replicas => {
                format!("autoscaler max {max} (replicas {replicas}) + maxSurge {surge}")
            }
            _ => format!("{replicas} replicas + maxSurge {surge}"),
        };
        (base + surge, counted)
    } else {
        let surge = surge(
            first(&[
                "/spec/rolloutStrategy/rollingUpdate/maxSurge",
                "/spec/rollout/strategy/rollingUpdate/maxSurge",
            ]),
            replicas,
            "the rolling update's maxSurge",
        )?;
        (
            replicas + surge,
            format!("{replicas} replicas + maxSurge {surge}"),
        )
    };
    Ok(Some(Rollout {
        kind: object.kind().to_string(),
        namespace: namespace_or_default(value).to_string(),
        name: object.name().to_string(),
        template,
        peak,
        counted,
        existing: 0,
    }))
}

/// A `maxSurge` (a count, or a percentage of `replicas` rounded up, as Kubernetes rounds a
/// surge); 1 when unset.
fn surge(value: Option<&Value>, replicas: u64, field: &str) -> Result<u64, String> {
    match value {
        None | Some(Value::Null) => Ok(1),
        Some(Value::Number(n)) => n
            .as_u64()
            .ok_or_else(|| format!("{field} {n} is not a count")),
        Some(Value::String(text)) => {
            let percent = text
                .strip_suffix('%')
                .and_then(|p| p.trim().parse::<u64>().ok())
                .ok_or_else(|| format!("{field} {text:?} is not a count or a percentage"))?;
            Ok((replicas * percent).div_ceil(100))
        }
        Some(other) => Err(format!("{field} {other} is not a count or a percentage")),
    }
}

/// What one rollout takes from one network's pool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Need {
    /// `MachineDeployment` or `KubeadmControlPlane`.
    pub kind: String,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The machines it adds.
    pub machines: u64,
    /// `POOL` NICs on this network per machine.
    pub nics_per_machine: u64,
    /// Addresses: machines × NICs.
    pub addresses: u64,
    /// How the machines were counted.
    pub counted: String,
}

/// One network's pool against the rollouts that take from it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkCapacity {
    /// The org VDC whose inventory counts the pool; none for the default inventory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vdc: Option<String>,
    /// The network.
    pub network: String,
    /// Its pool.
    #[serde(flatten)]
    pub pool: Pool,
    /// Free addresses.
    pub free: u64,
    /// The most one rollout needs.
    pub largest: u64,
    /// What every rollout needs, all at once.
    pub all: u64,
    /// Each rollout that takes addresses, the largest first.
    pub needs: Vec<Need>,
}

impl NetworkCapacity {
    /// One rollout alone needs more than is free: it will fail part way.
    pub fn short(&self) -> bool {
        self.largest > self.free
    }

    /// The report's sentence for `need`: `storage-net: 3 addresses free, a rollout of
    /// prod-eu1/prod-eu1-md-0 needs 5`.
    pub fn sentence(&self, need: &Need) -> String {
        let free = match self.free {
            1 => "1 address free".to_string(),
            n => format!("{n} addresses free"),
        };
        let network = match &self.vdc {
            Some(vdc) => format!("{} ({vdc})", self.network),
            None => self.network.clone(),
        };
        format!(
            "{network}: {free}, a rollout of {}/{} needs {} ({} machines × {} POOL NIC{}; {})",
            need.namespace,
            need.name,
            need.addresses,
            need.machines,
            need.nics_per_machine,
            if need.nics_per_machine == 1 { "" } else { "s" },
            need.counted
        )
    }
}

/// The pools of an audit against its rollouts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Capacity {
    /// Each network with counts, by name.
    pub networks: Vec<NetworkCapacity>,
    /// The rollouts that could not be counted, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub uncounted: Vec<String>,
    /// How many rollouts were found among the inputs.
    pub rollouts: usize,
}

impl Capacity {
    /// `pools` (`None` when there are none) against the rollouts of `files`, each template's
    /// plan taken from `findings` and built by `provisioner`.
    pub fn of(
        pools: &Pools,
        files: &[ManifestFile],
        findings: &[Finding],
        provisioner: &Provisioner,
    ) -> Option<Capacity> {
        if pools.is_empty() {
            return None;
        }
        let (found, mut uncounted) = rollouts(files);
        let (networks, more) = capacity(pools, &found, findings, provisioner);
        uncounted.extend(more);
        Some(Capacity {
            networks,
            uncounted,
            rollouts: found.len(),
        })
    }

    /// Whether one rollout alone needs more of a pool than is free.
    pub fn short(&self) -> bool {
        self.networks.iter().any(NetworkCapacity::short)
    }
}

/// The capacity of every pool in `pools` against `rollouts`, each template's plan (its finding
/// among `findings`) built by `provisioner` and counted against the pools of its org VDC (its
/// cluster's or zone's, as [`Inventories`] chooses; every zone's for a multi-zone template
/// without a failure domain, since any zone may get all its machines; the default
/// inventory's when its VDC has none); and, one line each, the rollouts whose template has no
/// plan to count (missing, denied, not evaluated).
pub fn capacity(
    pools: &Pools,
    rollouts: &[Rollout],
    findings: &[Finding],
    provisioner: &Provisioner,
) -> (Vec<NetworkCapacity>, Vec<String>) {
    let templates: BTreeMap<(&str, &str), &Finding> = findings
        .iter()
        .filter(|f| f.object.kind == "VCDMachineTemplate")
        .map(|f| ((f.object.namespace.as_str(), f.object.name.as_str()), f))
        .collect();
    let mut by_network: BTreeMap<(Option<&str>, &str), Vec<Need>> = BTreeMap::new();
    let mut uncounted = Vec::new();
    for rollout in rollouts {
        let machines = rollout.adds();
        let template = templates.get(&(rollout.namespace.as_str(), rollout.template.as_str()));
        let finding = match template {
            Some(finding) if finding.result == Verdict::Allowed => *finding,
            Some(finding) => {
                uncounted.push(format!(
                    "{} {}/{}: not counted: its VCDMachineTemplate {} is {}",
                    rollout.kind,
                    rollout.namespace,
                    rollout.name,
                    rollout.template,
                    finding.result.as_str()
                ));
                continue;
            }
            None => {
                uncounted.push(format!(
                    "{} {}/{}: not counted: its VCDMachineTemplate {} is not among the inputs",
                    rollout.kind, rollout.namespace, rollout.name, rollout.template
                ));
                continue;
            }
        };
        let Some(decision) = &finding.decision else {
            continue;
        };
        if machines == 0 {
            continue;
        }
        let built = if decision.nics.iter().any(|nic| nic.index == 0) {
            finding.built_nics(provisioner)
        } else {
            // The primary is not known (the template's cluster is not among the inputs): the
            // NICs that are, counted, and the gap said.
            uncounted.push(format!(
                "{} {}/{}: NIC 0 not counted: the primary network of VCDMachineTemplate {} is \
                 not known (its cluster is not among the inputs)",
                rollout.kind, rollout.namespace, rollout.name, rollout.template
            ));
            decision
                .nics
                .iter()
                .map(|nic| provisioner.build(nic))
                .collect()
        };
        // The pool sets the machines may take from: their VDC's (each zone's), else the
        // default's.
        let request = finding.request.as_ref();
        let cluster = request.filter(|r| !r.cluster_unknown).map(|r| &r.cluster);
        let vdcs: Vec<&str> = request
            .map(|r| Inventories::vdcs_of(cluster, &r.machine))
            .unwrap_or_default()
            .into_iter()
            .filter(|vdc| pools.by_vdc.contains_key(*vdc))
            .collect();
        let sets: Vec<(Option<&str>, &BTreeMap<String, Pool>)> = if vdcs.is_empty() {
            vec![(None, &pools.default)]
        } else {
            vdcs.iter()
                .filter_map(|vdc| {
                    pools
                        .by_vdc
                        .get_key_value(*vdc)
                        .map(|(name, set)| (Some(name.as_str()), set))
                })
                .collect()
        };
        let mut per_network: BTreeMap<(Option<&str>, &str), u64> = BTreeMap::new();
        for nic in &built {
            if nic.ip_allocation_mode != IpAllocationMode::Pool {
                continue;
            }
            for (vdc, set) in &sets {
                // Keyed by the pool's own name, which outlives this plan.
                if let Some((network, _)) = set.get_key_value(nic.network.as_str()) {
                    *per_network.entry((*vdc, network.as_str())).or_default() += 1;
                }
            }
        }
        for (network, nics) in per_network {
            by_network.entry(network).or_default().push(Need {
                kind: rollout.kind.clone(),
                namespace: rollout.namespace.clone(),
                name: rollout.name.clone(),
                machines,
                nics_per_machine: nics,
                addresses: machines * nics,
                counted: format!("{}, {} existing", rollout.counted, rollout.existing),
            });
        }
    }
    let report = pools
        .iter()
        .map(|(vdc, network, pool)| {
            let mut needs = by_network.remove(&(vdc, network)).unwrap_or_default();
            needs.sort_by(|a, b| {
                b.addresses
                    .cmp(&a.addresses)
                    .then_with(|| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)))
            });
            NetworkCapacity {
                vdc: vdc.map(str::to_string),
                network: network.to_string(),
                pool: *pool,
                free: pool.free(),
                largest: needs.first().map_or(0, |n| n.addresses),
                all: needs.iter().map(|n| n.addresses).sum(),
                needs,
            }
        })
        .collect();
    (report, uncounted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nicpolicy_plugin::provisioner::Profile;
    use nicpolicy_plugin::{Decision, Nic};

    fn file(yaml: &str) -> ManifestFile {
        let path = std::env::temp_dir().join(format!(
            "nicpolicy-capacity-{}-{}.yaml",
            std::process::id(),
            yaml.len()
        ));
        std::fs::write(&path, yaml).unwrap();
        let read = ManifestFile::read(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        read
    }

    const FLEET: &str = "\
apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineDeployment
metadata:
  name: prod-eu1-md-0
  namespace: prod-eu1
  annotations: {cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size: '6'}
spec:
  clusterName: prod-eu1
  replicas: 4
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 25%}}
  template:
    spec:
      clusterName: prod-eu1
      infrastructureRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1beta2, kind: VCDMachineTemplate, name: prod-eu1-md-0}
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta1
kind: KubeadmControlPlane
metadata: {name: prod-eu1-control-plane, namespace: prod-eu1}
spec:
  replicas: 3
  machineTemplate:
    infrastructureRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1beta2, kind: VCDMachineTemplate, name: prod-eu1-control-plane}
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineDeployment
metadata: {name: prod-eu1-md-gpu, namespace: prod-eu1}
spec:
  replicas: 2
  strategy: {type: OnDelete}
  template:
    spec:
      infrastructureRef: {kind: VCDMachineTemplate, name: prod-eu1-md-gpu}
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: MachineDeployment
metadata: {name: other-infra, namespace: prod-eu1}
spec:
  template:
    spec:
      infrastructureRef: {kind: DockerMachineTemplate, name: other}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: VCDMachine
metadata:
  name: prod-eu1-md-0-x7k2p
  namespace: prod-eu1
  labels: {cluster.x-k8s.io/deployment-name: prod-eu1-md-0}
spec: {}
";

    #[test]
    fn peaks_follow_replicas_surge_and_the_autoscaler() {
        let (found, problems) = rollouts(&[file(FLEET)]);
        assert_eq!(problems, Vec::<String>::new());
        let summary: Vec<(&str, u64, &str, u64)> = found
            .iter()
            .map(|r| (r.name.as_str(), r.peak, r.counted.as_str(), r.existing))
            .collect();
        assert_eq!(
            summary,
            [
                ("prod-eu1-control-plane", 4, "3 replicas + maxSurge 1", 0),
                (
                    "prod-eu1-md-0",
                    8,
                    "autoscaler max 6 (replicas 4) + maxSurge 2",
                    1
                ),
                ("prod-eu1-md-gpu", 2, "2 replicas + maxSurge 0", 0),
            ]
        );
        assert_eq!(found[1].adds(), 7);
    }

    #[test]
    fn cluster_api_v1beta2_shapes_are_read_too() {
        let (found, problems) = rollouts(&[file(
            "apiVersion: controlplane.cluster.x-k8s.io/v1beta2\nkind: KubeadmControlPlane\nmetadata: {name: cp, namespace: ns}\nspec:\n  replicas: 3\n  rollout: {strategy: {rollingUpdate: {maxSurge: 0}}}\n  machineTemplate:\n    spec:\n      infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: VCDMachineTemplate, name: cp}\n---\napiVersion: cluster.x-k8s.io/v1beta2\nkind: MachineDeployment\nmetadata: {name: md, namespace: ns}\nspec:\n  replicas: 10\n  rollout: {strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 50%}}}\n  template: {spec: {infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: VCDMachineTemplate, name: md}}}\n",
        )]);
        assert!(problems.is_empty(), "{problems:?}");
        let peaks: Vec<(&str, u64)> = found.iter().map(|r| (r.name.as_str(), r.peak)).collect();
        assert_eq!(peaks, [("cp", 3), ("md", 15)]);
    }

    #[test]
    fn a_bad_count_is_named_not_guessed() {
        let (found, problems) = rollouts(&[file(
            "apiVersion: cluster.x-k8s.io/v1beta1\nkind: MachineDeployment\nmetadata: {name: md, namespace: ns}\nspec:\n  replicas: 2\n  strategy: {rollingUpdate: {maxSurge: lots}}\n  template: {spec: {infrastructureRef: {kind: VCDMachineTemplate, name: t}}}\n",
        )]);
        assert!(found.is_empty());
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0]
                .contains("the rolling update's maxSurge \"lots\" is not a count or a percentage"),
            "{problems:?}"
        );
    }

    fn template(name: &str, nics: Vec<Nic>, extras: &[&str]) -> Finding {
        let mut finding = Finding::decided_for_tests(
            name,
            Decision {
                allowed: true,
                nics,
                extra_ovdc_networks: Some(extras.iter().map(|s| s.to_string()).collect()),
                ..Decision::default()
            },
        );
        finding.object.kind = "VCDMachineTemplate".into();
        finding
    }

    #[test]
    fn pool_nics_as_built_are_counted_against_what_is_free() {
        let mut dhcp = Nic::capvcd(1, "storage-net");
        dhcp.ip_allocation_mode = IpAllocationMode::Dhcp;
        let findings = vec![template(
            "prod-eu1-md-0",
            vec![Nic::capvcd(0, "mgmt-net"), dhcp],
            &["storage-net"],
        )];
        let rollout = Rollout {
            kind: "MachineDeployment".into(),
            namespace: "prod-eu1".into(),
            name: "prod-eu1-md-0".into(),
            template: "prod-eu1-md-0".into(),
            peak: 5,
            counted: "4 replicas + maxSurge 1".into(),
            existing: 0,
        };
        let pools = Pools {
            default: BTreeMap::from([
                (
                    "mgmt-net".to_string(),
                    Pool {
                        total: 100,
                        used: 97,
                    },
                ),
                (
                    "storage-net".to_string(),
                    Pool {
                        total: 50,
                        used: 10,
                    },
                ),
            ]),
            by_vdc: BTreeMap::new(),
        };
        // Stock CAPVCD builds both NICs POOL, whatever the plan says.
        let (report, uncounted) = capacity(
            &pools,
            std::slice::from_ref(&rollout),
            &findings,
            &Provisioner::capvcd(),
        );
        assert!(uncounted.is_empty());
        assert_eq!(
            (report[0].free, report[0].largest, report[0].short()),
            (3, 5, true)
        );
        assert_eq!(
            report[0].sentence(&report[0].needs[0]),
            "mgmt-net: 3 addresses free, a rollout of prod-eu1/prod-eu1-md-0 needs 5 (5 \
             machines × 1 POOL NIC; 4 replicas + maxSurge 1, 0 existing)"
        );
        assert_eq!((report[1].largest, report[1].short()), (5, false));
        // A custom build that applies the plan's modes: the DHCP NIC takes nothing.
        let applies = Provisioner {
            applies: vec![nicpolicy_plugin::provisioner::PlanField::IpAllocationMode],
            ..Provisioner::of(Profile::Custom)
        };
        let (report, _) = capacity(&pools, std::slice::from_ref(&rollout), &findings, &applies);
        assert_eq!(report[1].largest, 0);
        // Deckhouse builds every NIC DHCP: nothing from any pool.
        let (report, _) = capacity(
            &pools,
            std::slice::from_ref(&rollout),
            &findings,
            &Provisioner::of(Profile::Deckhouse),
        );
        assert!(report.iter().all(|n| n.needs.is_empty()));
        // A template whose cluster is not known plans no NIC 0: the rest is counted, the gap
        // said.
        let mut unknown = findings.clone();
        if let Some(decision) = unknown[0].decision.as_mut() {
            decision.nics.retain(|nic| nic.index != 0);
        }
        let (report, uncounted) = capacity(
            &pools,
            std::slice::from_ref(&rollout),
            &unknown,
            &Provisioner::capvcd(),
        );
        assert_eq!((report[0].largest, report[1].largest), (0, 5));
        assert_eq!(uncounted.len(), 1);
        assert!(uncounted[0].contains("NIC 0 not counted"), "{uncounted:?}");
        // A template that is not there is said, not counted as zero silently.
        let (_, uncounted) = capacity(&pools, &[rollout], &[], &Provisioner::capvcd());
        assert_eq!(
            uncounted,
            [
                "MachineDeployment prod-eu1/prod-eu1-md-0: not counted: its VCDMachineTemplate \
              prod-eu1-md-0 is not among the inputs"
            ]
        );
    }

    #[test]
    fn a_template_counts_against_its_vdcs_pools() {
        let mut finding = template(
            "prod-eu1-md-0",
            vec![Nic::capvcd(0, "mgmt-net"), Nic::capvcd(1, "storage-net")],
            &["storage-net"],
        );
        let mut request = nicpolicy_plugin::testing::worker(&["storage-net"]);
        request.cluster.ovdc = "eu1-ovdc-prod".into();
        finding.request = Some(request);
        let rollout = Rollout {
            kind: "MachineDeployment".into(),
            namespace: "prod-eu1".into(),
            name: "prod-eu1-md-0".into(),
            template: "prod-eu1-md-0".into(),
            peak: 4,
            counted: "3 replicas + maxSurge 1".into(),
            existing: 0,
        };
        let set = |free: u64| {
            BTreeMap::from([
                (
                    "mgmt-net".to_string(),
                    Pool {
                        total: 100,
                        used: 100 - free,
                    },
                ),
                (
                    "storage-net".to_string(),
                    Pool {
                        total: 100,
                        used: 100 - free,
                    },
                ),
            ])
        };
        let pools = Pools {
            default: set(1),
            by_vdc: BTreeMap::from([
                ("eu1-ovdc-prod".to_string(), set(50)),
                ("eu1-ovdc-stage".to_string(), set(2)),
            ]),
        };
        let (report, uncounted) = capacity(
            &pools,
            std::slice::from_ref(&rollout),
            std::slice::from_ref(&finding),
            &Provisioner::capvcd(),
        );
        assert!(uncounted.is_empty(), "{uncounted:?}");
        let needs: Vec<(Option<&str>, &str, u64)> = report
            .iter()
            .map(|n| (n.vdc.as_deref(), n.network.as_str(), n.largest))
            .collect();
        // Only eu1-ovdc-prod's pools are taken from: not the default's, not another VDC's.
        assert_eq!(
            needs,
            [
                (None, "mgmt-net", 0),
                (None, "storage-net", 0),
                (Some("eu1-ovdc-prod"), "mgmt-net", 4),
                (Some("eu1-ovdc-prod"), "storage-net", 4),
                (Some("eu1-ovdc-stage"), "mgmt-net", 0),
                (Some("eu1-ovdc-stage"), "storage-net", 0),
            ]
        );
        assert!(report.iter().all(|n| !n.short()));
        assert_eq!(
            report[3].sentence(&report[3].needs[0]),
            "storage-net (eu1-ovdc-prod): 50 addresses free, a rollout of prod-eu1/prod-eu1-md-0 \
             needs 4 (4 machines × 1 POOL NIC; 3 replicas + maxSurge 1, 0 existing)"
        );
        // A VDC without pools of its own: the default's.
        if let Some(request) = finding.request.as_mut() {
            request.cluster.ovdc = "eu1-ovdc-dev".into();
        }
        let (report, _) = capacity(&pools, &[rollout], &[finding], &Provisioner::capvcd());
        assert!(report[0].short() && report[0].vdc.is_none());
    }
}
