//! Building requests in policy unit tests: a realistic multi-homed worker to start from, changed
//! field by field in each test.
//!
//! ```
//! use nicpolicy_plugin::{capvcd, testing};
//!
//! let request = testing::worker(&["storage-net", "storage-net"]);
//! let decision = capvcd::evaluate(&request);
//! assert_eq!(
//!     testing::violation_fields(&decision),
//!     [("spec.extraOvdcNetworks[1]", nicpolicy_plugin::Reason::Duplicate)]
//! );
//! ```

use serde_json::Value;

use crate::schema::{
    Cluster, Decision, Machine, ObjectKind, Operation, Reason, Request, Role, Zone,
};

/// A CREATE of worker `prod-eu1/prod-eu1-md-0-x7k2p` with `extras`, in the single-zone cluster
/// `prod-eu1` whose primary network is `mgmt-net`; no inventory, no settings.
pub fn worker(extras: &[&str]) -> Request {
    Request {
        operation: Operation::Create,
        kind: ObjectKind::VcdMachine,
        machine: Machine {
            name: "prod-eu1-md-0-x7k2p".into(),
            namespace: "prod-eu1".into(),
            labels: Default::default(),
            annotations: Default::default(),
            role: Role::Worker,
            failure_domain: None,
            extra_ovdc_networks: extras.iter().map(|s| s.to_string()).collect(),
            provider_id: None,
            deletion_timestamp: None,
        },
        old_machine: None,
        cluster: Cluster {
            name: "prod-eu1".into(),
            namespace: "prod-eu1".into(),
            ovdc: "eu1-ovdc-prod".into(),
            ovdc_network: "mgmt-net".into(),
            zone_topology: None,
            zones: Vec::new(),
        },
        inventory: None,
        settings: Value::Null,
        cluster_unknown: false,
        baseline: false,
        same_cluster_as_stored: false,
    }
}

/// An UPDATE of the worker of [`worker`] from `old` extras to `new`, as the ratchet applies to
/// it: provisioned (`spec.providerID` set before and after) and named by the same cluster.
pub fn update(old: &[&str], new: &[&str]) -> Request {
    const PROVIDER_ID: &str =
        "vmware-cloud-director://urn:vcloud:vm:4a7f3c1e-9b2d-4e8a-a6f1-3d5c7b9e2f10";
    let mut request = worker(new);
    request.operation = Operation::Update;
    request.machine.provider_id = Some(PROVIDER_ID.into());
    let mut stored = worker(old).machine;
    stored.provider_id = Some(PROVIDER_ID.into());
    request.old_machine = Some(stored);
    request.same_cluster_as_stored = true;
    request
}

/// The same worker as a VCDMachineTemplate `prod-eu1-md-0` that names no cluster yet, as
/// `clusterctl generate cluster` writes it: [`Request::cluster_unknown`] set, the cluster empty.
pub fn template_without_cluster(extras: &[&str]) -> Request {
    let mut request = worker(extras);
    request.kind = ObjectKind::VcdMachineTemplate;
    request.machine.name = "prod-eu1-md-0".into();
    request.cluster = Cluster {
        name: String::new(),
        namespace: "prod-eu1".into(),
        ovdc: String::new(),
        ovdc_network: String::new(),
        zone_topology: None,
        zones: Vec::new(),
    };
    request.cluster_unknown = true;
    request
}

/// Zones `zone-<s>` with org VDC `eu1-ovdc-<s>` and primary network `mgmt-net-<s>`, all open to
/// control-plane machines.
pub fn zones(suffixes: &[&str]) -> Vec<Zone> {
    suffixes
        .iter()
        .map(|z| Zone {
            name: format!("zone-{z}"),
            ovdc: format!("eu1-ovdc-{z}"),
            ovdc_network_name: format!("mgmt-net-{z}"),
            control_plane_zone: true,
        })
        .collect()
}

/// Each violation as `(field, reason)`, for compact assertions.
pub fn violation_fields(decision: &Decision) -> Vec<(&str, Reason)> {
    decision
        .violations
        .iter()
        .map(|v| (v.field.as_str(), v.reason))
        .collect()
}
