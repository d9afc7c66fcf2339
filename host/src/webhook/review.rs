//! One AdmissionReview in, one out: the request is mapped to a policy [`Request`], the served
//! chain evaluates it, and the decision becomes a JSON patch (mutate) or an allow / deny with
//! Kubernetes field causes (validate).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, ReplaceOperation};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::response::{StatusCause, StatusDetails, StatusSummary};
use kube::core::{DynamicObject, Status};
use nicpolicy_plugin::{Decision, ObjectKind, Operation as PolicyOperation, Request};
use serde::Serialize;
use serde_json::Value;

use super::clusters::{cluster_name_of, ClusterSource, LookupError};
use super::config::{FailureMode, KindKey, UnknownClusterMode};
use super::metrics::{FailureLabels, Metrics, PolicyLabels, ReviewLabels};
use super::policies::{Served, ServedPolicies};
use crate::lifecycle::{self, reason_words};
use crate::manifest::{self, ManifestFile, CAPVCD_GROUP};
use crate::{ChainError, ChainEvaluation};

/// Annotation that carries the NIC plan, written by the mutating endpoint.
pub const NIC_PLAN_ANNOTATION: &str = "nicpolicy.io/nic-plan";

/// The two webhook endpoints of a kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// Defaulting: answers with a JSON patch.
    Mutate,
    /// Validation: answers allowed or denied.
    Validate,
}

impl Endpoint {
    /// `mutate` or `validate`.
    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Mutate => "mutate",
            Endpoint::Validate => "validate",
        }
    }

    /// The Cluster API style path of this endpoint for `kind`, like
    /// `/validate-infrastructure-cluster-x-k8s-io-v1beta3-vcdmachine`.
    pub fn path(self, kind: KindKey) -> String {
        format!(
            "/{}-infrastructure-cluster-x-k8s-io-v1beta3-{}",
            self.as_str(),
            kind.path_segment()
        )
    }
}

/// The NIC plan as the annotation holds it (JSON).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NicPlan<'a> {
    /// The policy chain that planned it.
    pub policy: &'a str,
    /// Every NIC, NIC 0 first.
    pub nics: &'a [nicpolicy_plugin::Nic],
    /// The vApp networks the machine needs.
    pub vapp_networks: &'a [String],
}

/// An HTTP answer: status code and a JSON AdmissionReview body.
#[derive(Clone, Debug)]
pub struct Answer {
    /// 200 for every answered review; 400 when the body is not a readable AdmissionReview.
    pub http_status: u16,
    /// The AdmissionReview (or, for HTTP 400, an AdmissionReview without uid) as JSON.
    pub body: Vec<u8>,
    /// Whether the object was admitted.
    pub allowed: bool,
    /// What the review came to, as `nicpolicy_reviews_total` counts it.
    pub result: &'static str,
    /// Generation of the configuration that answered.
    pub generation: u64,
    /// Why the request could not be read (HTTP 400); empty otherwise.
    pub message: String,
}

/// What a review needs to reach a decision after it is read.
struct Job {
    request: AdmissionRequest<DynamicObject>,
    object: Value,
    kind: KindKey,
    endpoint: Endpoint,
    served: Arc<Served>,
    policy: Request,
    display: String,
    /// Warnings of the host's own (the cluster is not known yet), given with the answer.
    warnings: Vec<String>,
}

/// Native code standing in for the served policies; see [`Reviewer::with_native_evaluator`].
pub type NativeEvaluator = Arc<dyn Fn(&Request) -> Decision + Send + Sync>;

/// Answers AdmissionReviews with the served policies.
pub struct Reviewer {
    policies: Arc<ServedPolicies>,
    clusters: Arc<dyn ClusterSource>,
    metrics: Arc<Metrics>,
    native: Option<NativeEvaluator>,
}

impl Reviewer {
    /// A reviewer over the served snapshot, a cluster source and the metrics to count in.
    pub fn new(
        policies: Arc<ServedPolicies>,
        clusters: Arc<dyn ClusterSource>,
        metrics: Arc<Metrics>,
    ) -> Reviewer {
        Reviewer {
            policies,
            clusters,
            metrics,
            native: None,
        }
    }

    /// For benchmarks only: decide with `native` (the same rules compiled into the host)
    /// instead of the served Wasm chain, so a load test can measure what Wasm adds. Everything
    /// else (parsing, cluster lookup, patches, metrics) stays the same.
    pub fn with_native_evaluator(mut self, native: NativeEvaluator) -> Reviewer {
        self.native = Some(native);
        self
    }

    /// The served snapshot.
    pub fn policies(&self) -> &Arc<ServedPolicies> {
        &self.policies
    }

    /// The cluster source.
    pub fn clusters(&self) -> &Arc<dyn ClusterSource> {
        &self.clusters
    }

    /// The metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Answers one review posted to `endpoint` of `kind`. Blocking: it runs the policies.
    pub fn review(&self, endpoint: Endpoint, kind: KindKey, body: &[u8]) -> Answer {
        let answer = match self.prepare(endpoint, kind, body) {
            Ok(job) => self.evaluate(job),
            Err(answer) => answer,
        };
        self.metrics
            .reviews
            .get_or_create(&ReviewLabels {
                kind: kind.as_str().to_string(),
                endpoint: endpoint.as_str().to_string(),
                result: answer.result.to_string(),
            })
            .inc();
        answer
    }

    /// The answer for a review that found every evaluation slot busy for `waited`.
    pub fn busy(&self, endpoint: Endpoint, kind: KindKey, body: &[u8], waited: Duration) -> Answer {
        self.metrics.reject("busy");
        let served = self.policies.get();
        let message = format!(
            "every evaluation slot ({}) stayed busy for {}ms; try again",
            served.config.workers,
            waited.as_millis()
        );
        let answer = match read_review(body, served.generation) {
            Ok(request) => failure_answer(
                &request,
                // An object being deleted is never denied, not even unchecked.
                if deleting(&request) {
                    FailureMode::Allow
                } else {
                    served.on_policy_failure()
                },
                503,
                "ServiceUnavailable",
                &message,
                &served,
            ),
            Err(answer) => answer,
        };
        self.metrics
            .reviews
            .get_or_create(&ReviewLabels {
                kind: kind.as_str().to_string(),
                endpoint: endpoint.as_str().to_string(),
                result: answer.result.to_string(),
            })
            .inc();
        answer
    }

    /// Counts a request answered without evaluation and logs why (info: the API server sent
    /// something this webhook cannot check, which its operator should be able to see).
    pub fn reject(&self, reason: &'static str, message: &str) {
        self.metrics.reject(reason);
        tracing::info!(reason, "review rejected: {message}");
    }

    fn prepare(&self, endpoint: Endpoint, kind: KindKey, body: &[u8]) -> Result<Job, Answer> {
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
        // The objects are moved out, not copied: `read_machine` reads them (with field paths
        // in its errors) and the rest of the review is small.
        let object = raw.pointer_mut("/request/object").map(Value::take);
        let old_object = raw.pointer_mut("/request/oldObject").map(Value::take);
        let request = review_request(&raw, generation).map_err(malformed)?;
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
            return Err(deny(&request, 400, "BadRequest", message, &served));
        }
        // Status updates and deletions carry no network choice to check.
        if request
            .sub_resource
            .as_deref()
            .is_some_and(|s| !s.is_empty())
            || !matches!(request.operation, Operation::Create | Operation::Update)
        {
            return Err(allow(&request, None, Vec::new(), &served));
        }
        if !served.chains.contains_key(&kind) {
            let config = served
                .config
                .path
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            let message = format!("no policy is configured for {} in {config}", kind.as_str());
            self.reject("not_served", &message);
            return Err(failure_answer(
                &request,
                served.on_policy_failure(),
                500,
                "InternalError",
                &message,
                &served,
            ));
        }

        let request_ref = &request;
        let bad_request = |message: String| {
            self.reject("malformed", &message);
            deny(request_ref, 400, "BadRequest", message, &served)
        };
        let mut object = object.filter(Value::is_object).ok_or_else(|| {
            bad_request(format!(
                "request.object is missing: a {:?} review must carry the object",
                request.operation
            ))
        })?;
        fill_metadata(&mut object, &request);
        let (object_kind, machine) =
            read_machine(&object, "request.object").map_err(bad_request)?;
        let old_machine = match request.operation {
            Operation::Update => {
                let mut old = old_object.filter(Value::is_object).ok_or_else(|| {
                        bad_request("request.oldObject is missing: an UPDATE review must carry the stored object".to_string())
                    })?;
                fill_metadata(&mut old, &request);
                Some(
                    read_machine(&old, "request.oldObject")
                        .map_err(bad_request)?
                        .1,
                )
            }
            _ => None,
        };
        let display = format!("{} {}/{}", kind.as_str(), machine.namespace, machine.name);
        // Defaulting an object that is being deleted helps nobody: leave it alone.
        if endpoint == Endpoint::Mutate && machine.is_deleting() {
            return Err(allow(&request, None, Vec::new(), &served));
        }

        let named = cluster_name_of(&object);
        let cluster = named
            .clone()
            .ok_or(LookupError::Unnamed {
                kind: kind.as_str(),
                owner: if kind == KindKey::VcdMachineTemplate {
                    " and no Cluster owner reference"
                } else {
                    ""
                },
            })
            .and_then(|name| self.clusters.vcd_cluster(&machine.namespace, &name));
        let mut warnings = Vec::new();
        let (cluster, cluster_unknown) = match cluster {
            Ok(cluster) => (cluster, false),
            Err(err) => {
                let message = format!("cannot check the networks of {display}: {err}");
                // An object being deleted is never denied: checked as far as possible instead.
                let mode = if machine.is_deleting() {
                    UnknownClusterMode::CheckWithoutCluster
                } else {
                    served.on_unknown_cluster()
                };
                if mode == UnknownClusterMode::CheckWithoutCluster {
                    self.metrics.reject("unknown_cluster");
                    let machine_name = display.as_str();
                    tracing::info!(
                        machine = machine_name,
                        "cluster not known: checked without it: {err}"
                    );
                } else {
                    self.reject("unknown_cluster", &message);
                }
                match mode {
                    UnknownClusterMode::Deny => {
                        return Err(deny(&request, 400, "BadRequest", message, &served))
                    }
                    UnknownClusterMode::Allow => {
                        return Err(allow(
                            &request,
                            None,
                            vec![format!("nicpolicy: networks not checked: {message}")],
                            &served,
                        ))
                    }
                    UnknownClusterMode::CheckWithoutCluster => {
                        warnings.push(self.unknown_cluster_warning(&display, &machine, &err));
                        let name = named.unwrap_or_default();
                        (manifest::unknown_cluster(&name, &machine.namespace), true)
                    }
                }
            }
        };
        let policy = Request {
            operation: match request.operation {
                Operation::Update => PolicyOperation::Update,
                _ => PolicyOperation::Create,
            },
            kind: object_kind,
            machine,
            old_machine,
            cluster,
            inventory: served.inventory.clone(),
            settings: Value::Null,
            cluster_unknown,
            baseline: false,
        };
        Ok(Job {
            request,
            object,
            kind,
            endpoint,
            served,
            policy,
            display,
            warnings,
        })
    }

    /// The warning for a machine checked without its cluster: why the cluster is unknown, what
    /// was left unchecked, and whether the namespace's only VCDCluster was used (it is not:
    /// nothing ties the machine to it yet).
    fn unknown_cluster_warning(
        &self,
        display: &str,
        machine: &nicpolicy_plugin::Machine,
        err: &LookupError,
    ) -> String {
        let lone = match self.clusters.vcd_clusters_in(&machine.namespace).as_slice() {
            [one] => format!(
                " VCDCluster {one} is the only one in namespace {} but was not used: nothing ties                  this object to it yet.",
                machine.namespace
            ),
            _ => String::new(),
        };
        format!(
            "nicpolicy: {display} was checked without its cluster ({err}): the rules that need              the VCDCluster (NIC 0, the primary network listed again, zones) run when a              VCDMachine is created with its cluster.x-k8s.io/cluster-name label.{lone}"
        )
    }

    fn evaluate(&self, job: Job) -> Answer {
        let Some(chain) = job.served.chains.get(&job.kind) else {
            // `prepare` checked the kind against this very snapshot.
            return invalid(
                "no policy chain for this kind".to_string(),
                job.served.generation,
            );
        };
        self.metrics.in_flight.inc();
        let evaluate = |request: &Request| match &self.native {
            Some(native) => {
                let started = std::time::Instant::now();
                let decision = native(request);
                Ok(ChainEvaluation {
                    decision,
                    logs: Vec::new(),
                    steps: Vec::new(),
                    elapsed: started.elapsed(),
                })
            }
            None => chain.evaluate(request),
        };
        // Deletions, request faults, unknown clusters and ratcheted updates, as everywhere.
        let result = lifecycle::judge(&job.policy, evaluate);
        self.metrics.in_flight.dec();
        let evaluation = match result {
            Ok(evaluation) => evaluation,
            Err(err) => return self.policy_failed(&job, err),
        };
        for step in &evaluation.steps {
            self.metrics
                .evaluation_seconds
                .get_or_create(&PolicyLabels {
                    kind: job.kind.as_str().to_string(),
                    policy: step.policy.clone(),
                })
                .observe(step.evaluation.elapsed.as_secs_f64());
        }
        for line in &evaluation.logs {
            tracing::debug!(machine = %job.display, level = ?line.level, "policy: {}", line.message);
        }
        match job.endpoint {
            Endpoint::Validate => self.validated(&job, &evaluation),
            Endpoint::Mutate => self.mutated(&job, &evaluation, &chain.name()),
        }
    }

    fn policy_failed(&self, job: &Job, err: ChainError) -> Answer {
        self.metrics
            .policy_failures
            .get_or_create(&FailureLabels {
                policy: err.policy.clone(),
                error: err.error.kind().to_string(),
            })
            .inc();
        tracing::warn!(machine = %job.display, uid = %job.request.uid, error = %err, "policy failed");
        failure_answer(
            &job.request,
            job.served.on_policy_failure(),
            500,
            "InternalError",
            &format!("cannot decide on {}: {err}", job.display),
            &job.served,
        )
    }

    fn validated(&self, job: &Job, evaluation: &ChainEvaluation) -> Answer {
        let decision = &evaluation.decision;
        let mut warnings = job.warnings.clone();
        warnings.extend(decision.warnings.iter().cloned());
        if decision.allowed {
            return allow(&job.request, None, warnings, &job.served);
        }
        tracing::info!(machine = %job.display, uid = %job.request.uid, violations = decision.violations.len(), "denied");
        let mut response = AdmissionResponse::from(&job.request);
        response.allowed = false;
        response.result = invalid_status(job, decision);
        if !warnings.is_empty() {
            response.warnings = Some(warnings);
        }
        finish(response, false, "denied", &job.served)
    }

    fn mutated(&self, job: &Job, evaluation: &ChainEvaluation, chain_name: &str) -> Answer {
        let decision = &evaluation.decision;
        // A denied machine is the validating endpoint's to report; nothing to default.
        if !decision.allowed {
            return allow(&job.request, None, Vec::new(), &job.served);
        }
        // Without the cluster NIC 0 is unknown: no plan to write yet.
        let annotate = job.served.config.nic_plan_annotation && !job.policy.cluster_unknown;
        let plan = annotate.then(|| NicPlan {
            policy: chain_name,
            nics: &decision.nics,
            vapp_networks: &decision.vapp_networks,
        });
        let operations =
            patch_operations(job.kind.object_kind(), &job.object, decision, plan.as_ref());
        let patch = (!operations.is_empty()).then_some(Patch(operations));
        allow(&job.request, patch, Vec::new(), &job.served)
    }
}

/// Reads the request out of an AdmissionReview, or says what is wrong with it.
fn review_request(raw: &Value, generation: u64) -> Result<AdmissionRequest<DynamicObject>, Answer> {
    let api_version = raw.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = raw.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind != "AdmissionReview" || api_version != "admission.k8s.io/v1" {
        return Err(invalid(format!(
            "expected an AdmissionReview of admission.k8s.io/v1, got kind {kind:?} apiVersion {api_version:?}"
        ), generation));
    }
    let review: AdmissionReview<DynamicObject> =
        serde_path_to_error::deserialize(raw).map_err(|err| {
            invalid(
                format!(
                    "malformed AdmissionReview at {}: {}",
                    err.path(),
                    err.inner()
                ),
                generation,
            )
        })?;
    review
        .try_into()
        .map_err(|_| invalid("the AdmissionReview has no request".to_string(), generation))
}

/// [`review_request`] from bytes.
fn read_review(body: &[u8], generation: u64) -> Result<AdmissionRequest<DynamicObject>, Answer> {
    let raw: Value = serde_json::from_slice(body)
        .map_err(|err| invalid(format!("the request body is not JSON: {err}"), generation))?;
    review_request(&raw, generation)
}

/// Whether the review's object is being deleted (`metadata.deletionTimestamp` set).
fn deleting(request: &AdmissionRequest<DynamicObject>) -> bool {
    request
        .object
        .as_ref()
        .is_some_and(|o| o.metadata.deletion_timestamp.is_some())
}

/// Objects being created may lack the namespace (it is in the request) or the name
/// (generateName): take them from the request.
fn fill_metadata(object: &mut Value, request: &AdmissionRequest<DynamicObject>) {
    let Some(map) = object.as_object_mut() else {
        return;
    };
    let metadata = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Default::default()));
    let Some(metadata) = metadata.as_object_mut() else {
        return;
    };
    if let Some(namespace) = request.namespace.as_deref().filter(|n| !n.is_empty()) {
        metadata
            .entry("namespace")
            .or_insert_with(|| Value::String(namespace.to_string()));
    }
    if !request.name.is_empty() {
        metadata
            .entry("name")
            .or_insert_with(|| Value::String(request.name.clone()));
    }
}

fn read_machine(
    object: &Value,
    label: &str,
) -> Result<(ObjectKind, nicpolicy_plugin::Machine), String> {
    ManifestFile::from_documents(Path::new(label), vec![object.clone()])
        .and_then(|file| file.machine(None))
        .map_err(|err| err.to_string())
}

/// The JSON patch that writes what the policy decided: `extraOvdcNetworks` when it changed
/// the list, and the NIC plan annotation when it differs from the stored one. Empty when the
/// object already says all of it.
pub fn patch_operations(
    kind: ObjectKind,
    object: &Value,
    decision: &Decision,
    plan: Option<&NicPlan<'_>>,
) -> Vec<PatchOperation> {
    let mut operations = Vec::new();
    if let Some(extras) = &decision.extra_ovdc_networks {
        let spec: Vec<&str> = kind.spec_path().split('.').collect();
        let spec_pointer = PointerBuf::from_tokens(spec.iter().copied());
        let spec_value = object.pointer(spec_pointer.as_str());
        let current = spec_value.and_then(|spec| spec.get("extraOvdcNetworks"));
        let wanted = Value::from(extras.clone());
        let unchanged = match current {
            Some(current) => *current == wanted,
            None => extras.is_empty(),
        };
        if !unchanged {
            let mut field = spec_pointer.clone();
            field.push_back("extraOvdcNetworks");
            let spec_exists = spec_value.is_some_and(Value::is_object);
            operations.push(match (current, spec_exists) {
                (Some(_), _) => PatchOperation::Replace(ReplaceOperation {
                    path: field,
                    value: wanted,
                }),
                (None, true) => PatchOperation::Add(AddOperation {
                    path: field,
                    value: wanted,
                }),
                // `spec.template` always exists (the object was read); only the last level may not.
                (None, false) => PatchOperation::Add(AddOperation {
                    path: spec_pointer,
                    value: serde_json::json!({ "extraOvdcNetworks": wanted }),
                }),
            });
        }
    }
    if let Some(plan) = plan {
        // Serialising plain data cannot fail; an empty plan would only be skipped.
        let text = serde_json::to_string(plan).unwrap_or_default();
        let annotations = object.pointer("/metadata/annotations");
        let current = annotations
            .and_then(|a| a.get(NIC_PLAN_ANNOTATION))
            .and_then(Value::as_str);
        if !text.is_empty() && current != Some(text.as_str()) {
            operations.push(match annotations {
                Some(Value::Object(_)) => PatchOperation::Add(AddOperation {
                    path: PointerBuf::from_tokens(["metadata", "annotations", NIC_PLAN_ANNOTATION]),
                    value: Value::String(text),
                }),
                _ => PatchOperation::Add(AddOperation {
                    path: PointerBuf::from_tokens(["metadata", "annotations"]),
                    value: serde_json::json!({ NIC_PLAN_ANNOTATION: text }),
                }),
            });
        }
    }
    operations
}

/// The Status of an invalid object, as kube-apiserver builds it for schema errors
/// (`reason: Invalid`, code 422, one cause per field), so kubectl prints it the same way.
fn invalid_status(job: &Job, decision: &Decision) -> Status {
    let errors: Vec<String> = decision
        .violations
        .iter()
        .map(|v| format!("{}: {}: {}", v.field, reason_words(v.reason), v.message))
        .collect();
    let list = match errors.as_slice() {
        [one] => one.clone(),
        several => format!("[{}]", several.join(", ")),
    };
    let name = job.policy.machine.name.clone();
    Status {
        status: Some(StatusSummary::Failure),
        code: 422,
        message: format!(
            "{}.{CAPVCD_GROUP} {name:?} is invalid: {list}",
            job.kind.as_str()
        ),
        metadata: None,
        reason: "Invalid".to_string(),
        details: Some(StatusDetails {
            name,
            group: CAPVCD_GROUP.to_string(),
            kind: job.kind.as_str().to_string(),
            uid: String::new(),
            causes: decision
                .violations
                .iter()
                .map(|v| StatusCause {
                    reason: v.reason.kubernetes_cause().to_string(),
                    message: v.message.clone(),
                    field: v.field.clone(),
                })
                .collect(),
            retry_after_seconds: 0,
        }),
    }
}

fn allow(
    request: &AdmissionRequest<DynamicObject>,
    patch: Option<Patch>,
    warnings: Vec<String>,
    served: &Served,
) -> Answer {
    let mut response = AdmissionResponse::from(request);
    let patched = patch.is_some();
    if let Some(patch) = patch {
        response = match response.with_patch(patch) {
            Ok(response) => response,
            Err(err) => {
                AdmissionResponse::from(request).deny(format!("cannot encode the patch: {err}"))
            }
        };
    }
    if !warnings.is_empty() {
        response.warnings = Some(warnings);
    }
    let allowed = response.allowed;
    let result = match (allowed, patched) {
        (true, true) => "patched",
        (true, false) => "allowed",
        (false, _) => "error",
    };
    finish(response, allowed, result, served)
}

fn deny(
    request: &AdmissionRequest<DynamicObject>,
    code: u16,
    reason: &str,
    message: String,
    served: &Served,
) -> Answer {
    let mut response = AdmissionResponse::from(request).deny(&message);
    response.result.code = code;
    response.result.reason = reason.to_string();
    response.result.status = Some(StatusSummary::Failure);
    finish(response, false, "error", served)
}

/// A failure that is not the policy's decision, answered the configured way.
fn failure_answer(
    request: &AdmissionRequest<DynamicObject>,
    mode: FailureMode,
    code: u16,
    reason: &str,
    message: &str,
    served: &Served,
) -> Answer {
    match mode {
        FailureMode::Deny => deny(request, code, reason, message.to_string(), served),
        FailureMode::Allow => {
            let mut answer = allow(
                request,
                None,
                vec![format!("nicpolicy: not checked: {message}")],
                served,
            );
            answer.result = "error";
            answer
        }
    }
}

/// The denial of a review too large to read, answered to its `uid` (found in its first bytes):
/// a denial, not an error, so the API server refuses the object whatever the webhook's
/// failurePolicy.
pub fn too_large_answer(uid: &str, message: &str, generation: u64) -> Answer {
    let review = serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {
            "uid": uid,
            "allowed": false,
            "status": {
                "status": "Failure",
                "code": 413,
                "reason": "RequestEntityTooLarge",
                "message": message,
            },
        },
    });
    Answer {
        http_status: 200,
        body: serde_json::to_vec(&review).unwrap_or_default(),
        allowed: false,
        result: "error",
        generation,
        message: message.to_string(),
    }
}

/// HTTP 400 for a body that is no readable AdmissionReview (there is no uid to answer to).
fn invalid(message: String, generation: u64) -> Answer {
    let response = AdmissionResponse::invalid(&message);
    Answer {
        http_status: 400,
        body: encode(response),
        allowed: false,
        result: "error",
        generation,
        message,
    }
}

fn finish(
    response: AdmissionResponse,
    allowed: bool,
    result: &'static str,
    served: &Served,
) -> Answer {
    Answer {
        http_status: 200,
        body: encode(response),
        allowed,
        result,
        generation: served.generation,
        message: String::new(),
    }
}

/// Serialises the response. kube-core writes `patch` as an array of numbers
/// (kube-rs/kube#1781); the API server reads a `[]byte` as base64, so it is written as such.
fn encode(mut response: AdmissionResponse) -> Vec<u8> {
    let patch = response.patch.take();
    let mut review = match serde_json::to_value(response.into_review()) {
        Ok(value) => value,
        Err(err) => serde_json::json!({ "error": err.to_string() }),
    };
    if let (Some(patch), Some(map)) = (
        patch,
        review.get_mut("response").and_then(Value::as_object_mut),
    ) {
        map.insert(
            "patch".to_string(),
            Value::String(base64::engine::general_purpose::STANDARD.encode(patch)),
        );
        map.insert(
            "patchType".to_string(),
            Value::String("JSONPatch".to_string()),
        );
    }
    serde_json::to_vec(&review).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nicpolicy_plugin::{AdapterType, IpAllocationMode, Nic};
    use serde_json::json;

    fn nic(index: u32, network: &str) -> Nic {
        Nic {
            index,
            network: network.to_string(),
            primary: index == 0,
            ip_allocation_mode: IpAllocationMode::Pool,
            ip_address: None,
            adapter_type: AdapterType::Vmxnet3,
            connected: true,
        }
    }

    fn apply(object: &Value, operations: Vec<PatchOperation>) -> Value {
        let mut patched = object.clone();
        json_patch::patch(&mut patched, &operations).expect("the patch applies");
        patched
    }

    #[test]
    fn patch_writes_extras_and_plan_and_applies() {
        let object =
            json!({"metadata": {"name": "prod-eu1-md-0-x7k2p"}, "spec": {"template": "ubuntu"}});
        let decision = Decision {
            allowed: true,
            nics: vec![nic(0, "mgmt-net"), nic(1, "storage-net")],
            extra_ovdc_networks: Some(vec!["storage-net".into()]),
            vapp_networks: vec!["mgmt-net".into(), "storage-net".into()],
            ..Decision::default()
        };
        let plan = NicPlan {
            policy: "nicpolicy-capvcd",
            nics: &decision.nics,
            vapp_networks: &decision.vapp_networks,
        };
        let operations = patch_operations(ObjectKind::VcdMachine, &object, &decision, Some(&plan));
        let patched = apply(&object, operations);
        assert_eq!(patched["spec"]["extraOvdcNetworks"], json!(["storage-net"]));
        let annotation = patched["metadata"]["annotations"][NIC_PLAN_ANNOTATION]
            .as_str()
            .unwrap();
        let plan: Value = serde_json::from_str(annotation).unwrap();
        assert_eq!(plan["nics"][1]["network"], "storage-net");
        // Applying the same decision to the patched object changes nothing.
        let again = patch_operations(
            ObjectKind::VcdMachine,
            &patched,
            &decision,
            Some(&plan_of(&decision)),
        );
        assert!(again.is_empty(), "{again:?}");
    }

    fn plan_of(decision: &Decision) -> NicPlan<'_> {
        NicPlan {
            policy: "nicpolicy-capvcd",
            nics: &decision.nics,
            vapp_networks: &decision.vapp_networks,
        }
    }

    #[test]
    fn template_patch_goes_under_spec_template_spec() {
        let object = json!({"metadata": {"name": "prod-eu1-md-0", "annotations": {"owner": "platform"}},
                            "spec": {"template": {"spec": {"extraOvdcNetworks": ["workload-net"]}}}});
        let decision = Decision {
            allowed: true,
            extra_ovdc_networks: Some(vec!["storage-net".into(), "workload-net".into()]),
            ..Decision::default()
        };
        let patched = apply(
            &object,
            patch_operations(ObjectKind::VcdMachineTemplate, &object, &decision, None),
        );
        assert_eq!(
            patched["spec"]["template"]["spec"]["extraOvdcNetworks"],
            json!(["storage-net", "workload-net"])
        );
        assert_eq!(patched["metadata"]["annotations"]["owner"], "platform");
    }

    #[test]
    fn no_patch_when_the_policy_changes_nothing() {
        let object = json!({"metadata": {}, "spec": {}});
        let decision = Decision {
            allowed: true,
            extra_ovdc_networks: Some(Vec::new()),
            ..Decision::default()
        };
        assert!(patch_operations(ObjectKind::VcdMachine, &object, &decision, None).is_empty());
    }

    #[test]
    fn patches_are_base64_in_the_response() {
        let request: AdmissionRequest<DynamicObject> = serde_json::from_value::<AdmissionReview<DynamicObject>>(json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                        "kind": {"group": CAPVCD_GROUP, "version": "v1beta3", "kind": "VCDMachine"},
                        "resource": {"group": CAPVCD_GROUP, "version": "v1beta3", "resource": "vcdmachines"},
                        "operation": "CREATE", "userInfo": {}, "name": "m", "namespace": "prod-eu1"}
        }))
        .unwrap()
        .try_into()
        .unwrap();
        let patch = Patch(vec![PatchOperation::Add(AddOperation {
            path: PointerBuf::from_tokens(["spec", "extraOvdcNetworks"]),
            value: json!(["storage-net"]),
        })]);
        let response = AdmissionResponse::from(&request).with_patch(patch).unwrap();
        let body: Value = serde_json::from_slice(&encode(response)).unwrap();
        let text = body["response"]["patch"].as_str().expect("a string");
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(text)
            .unwrap();
        let operations: Value = serde_json::from_slice(&decoded).unwrap();
        assert_eq!(operations[0]["path"], "/spec/extraOvdcNetworks");
        assert_eq!(body["response"]["patchType"], "JSONPatch");
        assert_eq!(
            body["response"]["uid"],
            "705ab4f5-6393-11e8-b7cc-42010a800002"
        );
    }
}
