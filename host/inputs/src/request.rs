//! The request of a machine read from files: the machine, its cluster found among the objects
//! of the files by the one rule of [`crate::clusters`], the stored version for an UPDATE, the
//! inventory. `nicpolicy eval`, the case files and the fuzzers build requests here.

use std::path::{Path, PathBuf};

use nicpolicy_plugin::objects;
use nicpolicy_plugin::{Inventory, Request};

use crate::clusters::StaticClusters;
use crate::manifest::{
    mark_control_plane, namespace_or_default, read_inventory, ManifestError, ManifestFile,
};

/// The files `nicpolicy eval` reads, turned into one request.
#[derive(Clone, Debug, Default)]
pub struct RequestFiles<'a> {
    /// File with the VCDCluster (a whole `clusterctl generate` output works); `None` when the
    /// machine's cluster is not known yet ([`Request::cluster_unknown`]).
    pub cluster: Option<&'a Path>,
    /// File with the VCDMachine or VCDMachineTemplate.
    pub machine: Option<&'a Path>,
    /// Name of the machine, when the machine file holds several.
    pub machine_name: Option<&'a str>,
    /// File with the stored version, for an UPDATE.
    pub old: Option<&'a Path>,
    /// Inventory file.
    pub inventory: Option<&'a Path>,
}

impl RequestFiles<'_> {
    /// Reads every file and builds the request (settings come from the policy).
    pub fn build(&self) -> Result<Request, ManifestError> {
        let missing = |what: &str| ManifestError::Missing {
            path: PathBuf::from("(command line)"),
            expected: what.to_string(),
            found: "no file given".to_string(),
        };
        let machine = ManifestFile::read(self.machine.ok_or_else(|| missing("machine file"))?)?;
        let cluster = self.cluster.map(ManifestFile::read).transpose()?;
        let old = self.old.map(ManifestFile::read).transpose()?;
        let inventory = self.inventory.map(read_inventory).transpose()?;
        build_request(
            &machine,
            self.machine_name,
            cluster.as_ref(),
            old.as_ref(),
            inventory,
        )
    }
}

/// Builds a request from parsed files: UPDATE when `old` is given, CREATE otherwise. The
/// machine's cluster is found among the objects of the machine file and the cluster file by
/// the one rule of [`StaticClusters::find`] (its `cluster.x-k8s.io/cluster-name` label names a
/// Cluster of its namespace, whose `infrastructureRef` names the VCDCluster; without a Cluster
/// object, the VCDCluster of that name; without the label, the only VCDCluster of the machine's
/// file, else of the files), as the webhook, `audit` and the playground find it. Without a
/// cluster file the cluster is not known yet ([`Request::cluster_unknown`]), as for a template
/// applied before its cluster.
pub fn build_request(
    machine_file: &ManifestFile,
    machine_name: Option<&str>,
    cluster_file: Option<&ManifestFile>,
    old_file: Option<&ManifestFile>,
    inventory: Option<Inventory>,
) -> Result<Request, ManifestError> {
    let (kind, mut machine) = machine_file.machine(machine_name)?;
    let files: Vec<&ManifestFile> = std::iter::once(machine_file).chain(cluster_file).collect();
    mark_control_plane(&mut machine, kind, &files);
    let cluster_name = machine
        .labels
        .get(nicpolicy_plugin::schema::CLUSTER_NAME_LABEL)
        .map(String::as_str);
    let cluster = match cluster_file {
        Some(file) => {
            let mut clusters = StaticClusters::default();
            clusters.add(machine_file);
            if !std::ptr::eq(file, machine_file) {
                clusters.add(file);
            }
            let object = machine_file.find_machine(machine_name)?;
            let found = clusters
                .find(&object.value, &machine_file.path)
                .map_err(|err| ManifestError::Cluster {
                    path: file.path.clone(),
                    machine: format!(
                        "{} {}/{}",
                        kind.as_str(),
                        namespace_or_default(&object.value),
                        object.name()
                    ),
                    message: err.to_string(),
                })?;
            if found.control_plane {
                machine.role = nicpolicy_plugin::Role::ControlPlane;
            }
            Ok(found.cluster)
        }
        None => Err(cluster_name.unwrap_or_default().to_string()),
    };
    let stored = match old_file {
        Some(file) => {
            let stored = file.find_machine(machine_name)?;
            let (old_kind, old) = file.machine_object(stored)?;
            let same_cluster = objects::same_cluster(
                &machine_file.find_machine(machine_name)?.value,
                &stored.value,
            );
            if old_kind != kind {
                return Err(ManifestError::Field {
                    path: file.path.clone(),
                    field: "kind".to_string(),
                    message: format!(
                        "the old object is a {}, the new one a {}",
                        old_kind.as_str(),
                        kind.as_str()
                    ),
                });
            }
            Some(objects::Stored {
                machine: old,
                same_cluster,
            })
        }
        None => None,
    };
    Ok(objects::policy_request(
        kind, machine, stored, cluster, inventory,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::tests::MACHINE;

    fn parse(text: &str) -> ManifestFile {
        ManifestFile::parse(Path::new("machine.yaml"), text).expect("parses")
    }

    #[test]
    fn a_machines_cluster_is_found_by_the_one_rule() {
        let vcd = |name: &str, network: &str| {
            format!(
                "apiVersion: infrastructure.cluster.x-k8s.io/v1beta3\nkind: VCDCluster\n\
                 metadata: {{name: {name}, namespace: prod-eu1}}\n\
                 spec: {{ovdc: eu1-ovdc-prod, ovdcNetwork: {network}}}\n"
            )
        };
        let machine = parse(MACHINE);
        // The label is never ignored: a file's only VCDCluster of another cluster is not used.
        let other = ManifestFile::parse(Path::new("cluster.yaml"), &vcd("prod-us1", "mgmt-net"))
            .expect("parses");
        let err = build_request(&machine, None, Some(&other), None, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cluster.yaml: VCDMachine prod-eu1/prod-eu1-md-0-x7k2p: no Cluster or VCDCluster \
             named prod-eu1 in namespace prod-eu1 in the cluster files"
        );
        // The Cluster's infrastructureRef wins over a VCDCluster merely named like the label.
        let text = format!(
            "apiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\n\
             metadata: {{name: prod-eu1, namespace: prod-eu1}}\n\
             spec: {{infrastructureRef: {{apiVersion: infrastructure.cluster.x-k8s.io/v1beta3, \
             kind: VCDCluster, name: prod-eu1-vcd}}}}\n---\n{}---\n{}",
            vcd("prod-eu1-vcd", "mgmt-net"),
            vcd("prod-eu1", "ext-dmz-net")
        );
        let clusters = ManifestFile::parse(Path::new("cluster.yaml"), &text).expect("parses");
        let request = build_request(&machine, None, Some(&clusters), None, None).expect("builds");
        assert_eq!(request.cluster.name, "prod-eu1-vcd");
        assert_eq!(request.cluster.ovdc_network, "mgmt-net");
    }
}
