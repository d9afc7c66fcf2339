//! Reading a review: the AdmissionReview and its objects, the kind checked against the
//! endpoint, the machine's cluster found (or the reason it is not known), and the policy
//! request built ([`nicpolicy_plugin::objects::policy_request`]) into the [`Job`] the
//! reviewer evaluates; or the answer right away when the review cannot be judged.

use kube::core::admission::{AdmissionRequest, Operation};
use kube::core::DynamicObject;
use nicpolicy_plugin::lifecycle::{
    is_topology_dry_run, stays_provisioned, unknown_cluster_warning,
};
use nicpolicy_plugin::objects::{
    machine_from_object, policy_request, same_cluster, Stored, CAPVCD_GROUP,
};
use nicpolicy_plugin::{Cluster, Machine, ObjectKind};
use serde_json::Value;

use super::admission::{
    allow, deleting, deny, failure_answer, fill_metadata, invalid, review_request, Answer,
};
use super::review::{Endpoint, Job, Reviewer};
use crate::clusters::{as_capvcd_reads, cluster_name_of, LookupError, Owner};
use crate::served::config::{FailureMode, UnknownClusterMode};
use crate::served::Served;
use nicpolicy_engine::stages::{self, Stage};

/// Cluster API's annotation that pauses one object's reconciliation (`annotations.IsPaused`).
const PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";

/// The objects of a review, read.
struct Objects {
    /// `request.object`, with the name and namespace filled in from the request.
    object: Value,
    kind: ObjectKind,
    machine: Machine,
    /// The stored version, on an UPDATE.
    stored: Option<Stored>,
    /// The Cluster API cluster it belongs to as CAPVCD reads it (the owner Machine's, where
    /// known; [`as_capvcd_reads`]).
    cluster_name: Option<String>,
    /// What the owner Machine changed or could not tell, for the answer's warnings.
    owner_warnings: Vec<String>,
}

impl Reviewer {
    /// Reads the review and everything the policies need, or answers it right away.
    pub(super) fn prepare(
        &self,
        endpoint: Endpoint,
        kind: ObjectKind,
        body: &[u8],
    ) -> Result<Job, Answer> {
        let served = self.policies.get();
        let generation = served.generation;
        let malformed = |answer: Answer| {
            self.reject("malformed", &answer.message);
            answer
        };
        let mut raw: Value = serde_json::from_slice(body).map_err(|err| {
            malformed(invalid(
                format!("the request body is not JSON: {err}"),
                generation,
            ))
        })?;
        stages::mark(Stage::BodyParse);
        // The objects are moved out, not copied: `read_machine` reads them (with field paths
        // in its errors) and the rest of the review is small.
        let object = raw.pointer_mut("/request/object").map(Value::take);
        let old_object = raw.pointer_mut("/request/oldObject").map(Value::take);
        let request = review_request(&raw, generation).map_err(malformed)?;
        self.check_kind(endpoint, kind, &request, &served)?;
        stages::mark(Stage::ReviewDecode);
        let mut objects = self.read_objects(&request, object, old_object, &served)?;
        let machine = &objects.machine;
        let display = format!("{} {}/{}", kind.as_str(), machine.namespace, machine.name);
        stages::mark(Stage::ObjectMapping);
        // Defaulting an object that is being deleted helps nobody: leave it alone. Only an
        // UPDATE can be one: kube-apiserver clears the field of a CREATE after defaulting, so
        // a CREATE carrying it is defaulted like any other.
        let being_deleted = request.operation == Operation::Update && machine.is_deleting();
        if endpoint == Endpoint::Mutate && being_deleted {
            return Err(allow(&request, None, Vec::new(), &served));
        }
        let mut warnings = std::mem::take(&mut objects.owner_warnings);
        let cluster = match self.find_cluster(kind, &request, &objects, &display, &served)? {
            Ok(cluster) => Ok(cluster),
            Err(warning) => {
                warnings.push(warning);
                Err(objects.cluster_name.clone().unwrap_or_default())
            }
        };
        stages::mark(Stage::ClusterLookup);
        let machine = &objects.machine;
        // Created already built: a provider ID on a CREATE while the cluster is paused, as
        // `clusterctl move` and restores create machines whose VM exists. Anywhere else a
        // provider ID on a CREATE proves nothing (CAPVCD v1.3.2 builds a VM for a VCDMachine
        // whose status has no provider ID), so the machine is judged in full. The cluster is
        // looked up only for such a CREATE.
        let created_provisioned =
            request.operation == Operation::Create && machine.is_provisioned();
        let already_built = created_provisioned
            && kind == ObjectKind::VcdMachine
            && (machine.annotations.contains_key(PAUSED_ANNOTATION)
                || objects
                    .cluster_name
                    .as_deref()
                    .is_some_and(|name| self.clusters.cluster_paused(&machine.namespace, name)));
        if created_provisioned && !already_built {
            warnings.push(format!(
                "nicpolicy: {display} is created with spec.providerID outside a paused cluster: \
                 judged in full (a move or restore pauses the Cluster first)"
            ));
        }
        let topology_dry_run = is_topology_dry_run(request.dry_run, &machine.annotations);
        // The inventory of the machine's org VDC (its cluster's, or its zone's).
        let inventory = served
            .inventories
            .for_machine(cluster.as_ref().ok(), machine);
        let policy = policy_request(
            objects.kind,
            objects.machine,
            objects.stored,
            cluster,
            inventory,
        );
        let keeps_plan = stays_provisioned(&policy);
        stages::mark(Stage::RequestBuild);
        Ok(Job {
            request,
            object: objects.object,
            kind,
            endpoint,
            served,
            policy,
            display,
            warnings,
            already_built,
            topology_dry_run,
            keeps_plan,
        })
    }

    /// Whether this review is one the endpoint decides: the right kind, a create or update of
    /// the object itself, and a kind the configuration serves.
    fn check_kind(
        &self,
        endpoint: Endpoint,
        kind: ObjectKind,
        request: &AdmissionRequest<DynamicObject>,
        served: &Served,
    ) -> Result<(), Answer> {
        let object_kind = &request.kind;
        if object_kind.group != CAPVCD_GROUP || object_kind.kind != kind.as_str() {
            let got = if object_kind.group.is_empty() {
                format!("{} (core)", object_kind.kind)
            } else {
                format!("{}.{}", object_kind.kind, object_kind.group)
            };
            let message = format!(
                "{} serves {}.{CAPVCD_GROUP} objects, not {got}; check the webhook configuration's rules",
                endpoint.path(kind),
                kind.as_str()
            );
            self.reject("wrong_kind", &message);
            return Err(deny(request, 400, "BadRequest", message, served));
        }
        // Status updates and deletions carry no network choice to check.
        if request
            .sub_resource
            .as_deref()
            .is_some_and(|s| !s.is_empty())
            || !matches!(request.operation, Operation::Create | Operation::Update)
        {
            return Err(allow(request, None, Vec::new(), served));
        }
        let unserved = match served.unavailable.get(&kind) {
            Some(why) => Some((
                "unavailable",
                503,
                "ServiceUnavailable",
                format!(
                    "the policy for {} could not be had at start, and is tried again at every \
                     reload interval: {why}",
                    kind.as_str()
                ),
            )),
            None if !served.chains.contains_key(&kind) => {
                let config = served
                    .config
                    .path
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default();
                Some((
                    "not_served",
                    500,
                    "InternalError",
                    format!("no policy is configured for {} in {config}", kind.as_str()),
                ))
            }
            None => None,
        };
        if let Some((reason, code, status, message)) = unserved {
            self.reject(reason, &message);
            // A kind the webhook is registered for but has no chain for (none configured, or
            // its module could not be had) is never admitted unchecked; a deletion still
            // finishes.
            return Err(failure_answer(
                request,
                if deleting(request) {
                    FailureMode::Allow
                } else {
                    FailureMode::Deny
                },
                code,
                status,
                &message,
                served,
            ));
        }
        Ok(())
    }

    /// The object (and, for an UPDATE, the stored one) mapped to the schema.
    fn read_objects(
        &self,
        request: &AdmissionRequest<DynamicObject>,
        object: Option<Value>,
        old_object: Option<Value>,
        served: &Served,
    ) -> Result<Objects, Answer> {
        let bad_request = |message: String| {
            self.reject("malformed", &message);
            deny(request, 400, "BadRequest", message, served)
        };
        let mut object = object.filter(Value::is_object).ok_or_else(|| {
            bad_request(format!(
                "request.object is missing: a {:?} review must carry the object",
                request.operation
            ))
        })?;
        fill_metadata(&mut object, request);
        let mut owner_warnings = Vec::new();
        // Judged as CAPVCD will read it: the owner Machine's cluster and role, where known.
        // The patch is still written against the object as sent.
        let display = |object: &Value| {
            format!(
                "VCDMachine {}/{}",
                request.namespace.as_deref().unwrap_or_default(),
                object
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            )
        };
        let read = as_capvcd_reads(self.clusters.as_ref(), &object, &display(&object));
        let relabelled = match read {
            Owner::Relabelled(relabelled, warning) => {
                owner_warnings.push(format!("nicpolicy: {warning}"));
                Some(relabelled)
            }
            Owner::Missing(warning) => {
                owner_warnings.push(format!("nicpolicy: {warning}"));
                None
            }
            Owner::None | Owner::Agrees => None,
        };
        let effective = relabelled.as_ref().unwrap_or(&object);
        let (kind, machine) = read_machine(effective, "request.object").map_err(bad_request)?;
        let cluster_name = cluster_name_of(effective);
        let stored = match request.operation {
            Operation::Update => {
                let mut old = old_object.filter(Value::is_object).ok_or_else(|| {
                        bad_request("request.oldObject is missing: an UPDATE review must carry the stored object".to_string())
                    })?;
                fill_metadata(&mut old, request);
                let old = match as_capvcd_reads(self.clusters.as_ref(), &old, &display(&old)) {
                    Owner::Relabelled(relabelled, _) => relabelled,
                    _ => old,
                };
                let (old_kind, old_machine) =
                    read_machine(&old, "request.oldObject").map_err(bad_request)?;
                if old_kind != kind {
                    return Err(bad_request(format!(
                        "request.oldObject is a {}, but request.object a {}",
                        old_kind.as_str(),
                        kind.as_str()
                    )));
                }
                Some(Stored {
                    machine: old_machine,
                    same_cluster: same_cluster(effective, &old),
                })
            }
            _ => None,
        };
        Ok(Objects {
            object,
            kind,
            machine,
            stored,
            cluster_name,
            owner_warnings,
        })
    }

    /// The machine's VCDCluster; `Ok(Err(warning))` when it is not known and the machine is
    /// to be checked without it ([`UnknownClusterMode::CheckWithoutCluster`], and always for
    /// an object being deleted, which is never denied); `Err` answers the review right away.
    fn find_cluster(
        &self,
        kind: ObjectKind,
        request: &AdmissionRequest<DynamicObject>,
        objects: &Objects,
        display: &str,
        served: &Served,
    ) -> Result<Result<Cluster, String>, Answer> {
        let namespace = &objects.machine.namespace;
        let found = objects
            .cluster_name
            .clone()
            .ok_or(LookupError::Unnamed {
                kind: kind.as_str(),
                owner: if kind == ObjectKind::VcdMachineTemplate {
                    " and no Cluster owner reference"
                } else {
                    ""
                },
            })
            .and_then(|name| self.clusters.vcd_cluster(namespace, &name));
        let err = match found {
            Ok(cluster) => return Ok(Ok(cluster)),
            Err(err) => err,
        };
        let message = format!("cannot check the networks of {display}: {err}");
        let deleting = request.operation == Operation::Update && objects.machine.is_deleting();
        let mode = if deleting {
            UnknownClusterMode::CheckWithoutCluster
        } else {
            served.on_unknown_cluster()
        };
        match mode {
            UnknownClusterMode::Deny => {
                self.reject("unknown_cluster", &message);
                Err(deny(request, 400, "BadRequest", message, served))
            }
            UnknownClusterMode::Allow => {
                self.reject("unknown_cluster", &message);
                Err(allow(
                    request,
                    None,
                    vec![format!("nicpolicy: networks not checked: {message}")],
                    served,
                ))
            }
            UnknownClusterMode::CheckWithoutCluster => {
                self.metrics.reject("unknown_cluster");
                let machine = display;
                tracing::info!(machine, "cluster not known: checked without it: {err}");
                Ok(Err(self.unknown_cluster_warning(display, namespace, &err)))
            }
        }
    }

    /// The warning for a machine checked without its cluster: why the cluster is unknown, what
    /// was left unchecked, and whether the namespace's only VCDCluster was used (it is not:
    /// nothing ties the machine to it yet).
    fn unknown_cluster_warning(&self, display: &str, namespace: &str, err: &LookupError) -> String {
        let mut warning = unknown_cluster_warning(display, err);
        if let [one] = self.clusters.vcd_clusters_in(namespace).as_slice() {
            warning.push_str(&format!(
                " VCDCluster {one} is the only one in namespace {namespace} but was not used: \
                 nothing ties this object to it yet."
            ));
        }
        warning
    }
}

/// Maps a machine object; errors start with `label`, such as `request.object`.
fn read_machine(object: &Value, label: &str) -> Result<(ObjectKind, Machine), String> {
    machine_from_object(object).map_err(|err| format!("{label}: {err}"))
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use super::*;
    use crate::clusters::StaticClusters;
    use crate::served::ServeConfig;
    use crate::webhook::App;
    use crate::{Host, HostConfig};

    fn workspace(path: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
    }

    /// The built-in CAPVCD policy over the example cluster, as `serve --clusters` runs it.
    fn reviewer() -> Arc<Reviewer> {
        let config = HostConfig {
            max_instances: 4,
            ..HostConfig::default()
        };
        let clusters =
            StaticClusters::read(&[workspace("examples/cluster.yaml")]).expect("cluster");
        let app = App::new(
            Host::new(config).expect("host"),
            ServeConfig::builtin_default(),
            Arc::new(clusters),
        )
        .expect("policies load");
        app.reviewer().clone()
    }

    fn fixture(name: &str) -> serde_json::Value {
        let text = std::fs::read_to_string(workspace("tests/fixtures/admission").join(name))
            .expect("fixture");
        serde_json::from_str(&text).expect("JSON")
    }

    fn prepared(reviewer: &Reviewer, endpoint: Endpoint, body: &[u8]) -> Result<Job, Answer> {
        reviewer.prepare(endpoint, ObjectKind::VcdMachine, body)
    }

    #[test]
    fn a_body_that_is_not_json_is_answered_at_once() {
        let Err(answer) = prepared(&reviewer(), Endpoint::Validate, b"{not json") else {
            panic!("prepared a job from garbage");
        };
        assert_eq!(answer.http_status, 400);
        assert!(answer.message.contains("not JSON"), "{}", answer.message);
    }

    #[test]
    fn a_worker_is_read_into_the_policy_request_with_its_cluster() {
        let body = fixture("vcdmachine-create-worker.json").to_string();
        let Ok(job) = prepared(&reviewer(), Endpoint::Validate, body.as_bytes()) else {
            panic!("no job");
        };
        assert_eq!(job.policy.operation, nicpolicy_plugin::Operation::Create);
        assert!(!job.policy.cluster_unknown);
        assert_eq!(job.policy.cluster.ovdc_network, "mgmt-net");
        assert!(job.warnings.is_empty(), "{:?}", job.warnings);
    }

    #[test]
    fn an_update_without_the_stored_object_is_a_bad_request() {
        let mut review = fixture("vcdmachine-create-worker.json");
        review["request"]["operation"] = "UPDATE".into();
        let body = review.to_string();
        let Err(answer) = prepared(&reviewer(), Endpoint::Validate, body.as_bytes()) else {
            panic!("an UPDATE without oldObject was prepared");
        };
        let text = String::from_utf8_lossy(&answer.body).into_owned();
        assert!(!answer.allowed);
        assert!(text.contains("request.oldObject is missing"), "{text}");
    }

    #[test]
    fn a_machine_of_an_unknown_cluster_is_checked_without_it_with_a_warning() {
        let body = fixture("vcdmachine-create-unknown-cluster.json").to_string();
        let Ok(job) = prepared(&reviewer(), Endpoint::Validate, body.as_bytes()) else {
            panic!("no job");
        };
        assert!(job.policy.cluster_unknown);
        assert_eq!(job.warnings.len(), 1, "{:?}", job.warnings);
    }
}
