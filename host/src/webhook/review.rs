//! One AdmissionReview in, one out: the request is mapped to a policy [`Request`], the served
//! chain evaluates it, and the decision becomes a JSON patch (mutate, [`super::patch`]) or an
//! allow / deny with Kubernetes field causes (validate); [`super::admission`] holds the wire
//! format.

use std::sync::Arc;
use std::time::Duration;

use json_patch::Patch;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use kube::core::DynamicObject;
use nicpolicy_plugin::lifecycle::{self as lifecycle_rules, unknown_cluster_warning};
use nicpolicy_plugin::{Cluster, Decision, Machine, ObjectKind, Request};

use crate::lifecycle;
use crate::stages::{self, Stage};
use serde_json::Value;

use super::admission::{
    allow, deleting, deny, failure_answer, fill_metadata, finish, invalid, invalid_status,
    read_review, review_request, Answer,
};
use super::inline::InlineGate;
use super::metrics::{Metrics, PolicyLabels, ReviewLabels};
use super::patch::{patch_operations, NicPlan};
use super::warned;
use crate::clusters::{cluster_name_of, ClusterSource, LookupError};
use crate::served::config::{FailureMode, UnknownClusterMode};
use crate::served::{Served, ServedPolicies};
use crate::{Budget, ChainError, ChainEvaluation, PolicyChain};
use nicpolicy_plugin::objects::{
    machine_from_object, policy_request, same_cluster, Stored, CAPVCD_GROUP,
};

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
    pub fn path(self, kind: ObjectKind) -> String {
        format!(
            "/{}-infrastructure-cluster-x-k8s-io-v1beta3-{}",
            self.as_str(),
            path_segment(kind)
        )
    }
}
/// The kind in lower case, as webhook paths spell it.
pub fn path_segment(kind: ObjectKind) -> &'static str {
    match kind {
        ObjectKind::VcdMachine => "vcdmachine",
        ObjectKind::VcdMachineTemplate => "vcdmachinetemplate",
    }
}

/// What a review needs to reach a decision after it is read.
struct Job {
    request: AdmissionRequest<DynamicObject>,
    object: Value,
    kind: ObjectKind,
    endpoint: Endpoint,
    served: Arc<Served>,
    policy: Request,
    display: String,
    /// Warnings of the host's own (the cluster is not known yet), given with the answer.
    warnings: Vec<String>,
}

/// The objects of a review, read.
struct Objects {
    /// `request.object`, with the name and namespace filled in from the request.
    object: Value,
    kind: ObjectKind,
    machine: Machine,
    /// The stored version, on an UPDATE.
    stored: Option<Stored>,
}

/// What [`Reviewer::judge`] found.
struct Judged<'a> {
    /// The chain's result.
    result: Result<ChainEvaluation, ChainError>,
    /// The chain that judged.
    chain: &'a PolicyChain,
}

/// A review read on an async worker whose evaluation is left to a blocking thread (see
/// [`Reviewer::review_on_worker`]). Boxed: it travels to the blocking pool, rarely.
pub struct Deferred(Box<Job>);

/// What [`Reviewer::review_on_worker`] did with a review.
pub enum OnWorker {
    /// Answered on the worker.
    Answered(Answer),
    /// Read; evaluate it on a blocking thread with [`Reviewer::finish`].
    Deferred(Deferred),
}

/// Native code standing in for the served policies; see [`Reviewer::with_native_evaluator`].
pub type NativeEvaluator = Arc<dyn Fn(&Request) -> Decision + Send + Sync>;

/// Answers AdmissionReviews with the served policies.
pub struct Reviewer {
    policies: Arc<ServedPolicies>,
    clusters: Arc<dyn ClusterSource>,
    metrics: Arc<Metrics>,
    native: Option<NativeEvaluator>,
    inline: InlineGate,
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
            inline: InlineGate::default(),
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
    pub fn review(&self, endpoint: Endpoint, kind: ObjectKind, body: &[u8]) -> Answer {
        let answer = match self.prepare(endpoint, kind, body) {
            Ok(job) => self.evaluate(&job),
            Err(answer) => answer,
        };
        self.counted(endpoint, kind, answer)
    }

    /// Answers one review on the calling async worker when its evaluation fits in the
    /// configured `evaluation.inlineBudget`; otherwise leaves the evaluation to
    /// [`Reviewer::finish`] on a blocking thread. An evaluation cut by the budget has no
    /// effect (no metric, no log line): it is run again from the start, under the policies'
    /// own limits. After a cut, reviews go to blocking threads for a while
    /// (`webhook::inline`), so a slow policy does not hold up the worker's other connections
    /// review after review.
    pub fn review_on_worker(&self, endpoint: Endpoint, kind: ObjectKind, body: &[u8]) -> OnWorker {
        let job = match self.prepare(endpoint, kind, body) {
            Ok(job) => job,
            Err(answer) => return OnWorker::Answered(self.counted(endpoint, kind, answer)),
        };
        let Some(budget) = self.inline.budget(job.served.config.inline_budget) else {
            return OnWorker::Deferred(Deferred(Box::new(job)));
        };
        let result = self.judge(&job, Some(&budget));
        self.inline.record(&budget);
        if budget.overran() {
            self.metrics.inline_overruns.inc();
            return OnWorker::Deferred(Deferred(Box::new(job)));
        }
        let answer = self.answer(&job, result);
        OnWorker::Answered(self.counted(endpoint, kind, answer))
    }

    /// Evaluates and answers a review [`Reviewer::review_on_worker`] deferred. Blocking.
    pub fn finish(&self, deferred: Deferred) -> Answer {
        let job = *deferred.0;
        let answer = self.evaluate(&job);
        self.counted(job.endpoint, job.kind, answer)
    }

    /// The answer for a review that found every evaluation slot busy for `waited`.
    pub fn busy(
        &self,
        endpoint: Endpoint,
        kind: ObjectKind,
        body: &[u8],
        waited: Duration,
    ) -> Answer {
        self.metrics.reject("busy");
        let served = self.policies.get();
        let message = format!(
            "every evaluation slot ({}) stayed busy for {}ms; try again",
            served.config.workers,
            waited.as_millis()
        );
        // Never admitted unchecked, whatever onPolicyFailure says: a request can make the slots
        // busy (by sending many). An object being deleted is never denied, not even unchecked.
        let answer = match read_review(body, served.generation) {
            Ok(request) => failure_answer(
                &request,
                if deleting(&request) {
                    FailureMode::Allow
                } else {
                    FailureMode::Deny
                },
                503,
                "ServiceUnavailable",
                &message,
                &served,
            ),
            Err(answer) => answer,
        };
        self.counted(endpoint, kind, answer)
    }

    /// `answer`, counted in `nicpolicy_reviews_total`.
    fn counted(&self, endpoint: Endpoint, kind: ObjectKind, answer: Answer) -> Answer {
        self.metrics
            .reviews
            .get_or_create(&ReviewLabels {
                kind: kind.as_str().to_string(),
                endpoint: endpoint.as_str().to_string(),
                result: answer.result.to_string(),
            })
            .inc();
        stages::mark(Stage::Metrics);
        answer
    }

    /// Counts a request answered without evaluation and logs why (info: the API server sent
    /// something this webhook cannot check, which its operator should be able to see).
    pub fn reject(&self, reason: &'static str, message: &str) {
        self.metrics.reject(reason);
        tracing::info!(reason, "review rejected: {message}");
    }

    /// Reads the review and everything the policies need, or answers it right away.
    fn prepare(&self, endpoint: Endpoint, kind: ObjectKind, body: &[u8]) -> Result<Job, Answer> {
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
        let objects = self.read_objects(&request, object, old_object, &served)?;
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
        let mut warnings = Vec::new();
        let cluster = match self.find_cluster(kind, &request, &objects, &display, &served)? {
            Ok(cluster) => Ok(cluster),
            Err(warning) => {
                warnings.push(warning);
                Err(cluster_name_of(&objects.object).unwrap_or_default())
            }
        };
        stages::mark(Stage::ClusterLookup);
        let policy = policy_request(
            objects.kind,
            objects.machine,
            objects.stored,
            cluster,
            served.inventory.clone(),
        );
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
        if !served.chains.contains_key(&kind) {
            let config = served
                .config
                .path
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            let message = format!("no policy is configured for {} in {config}", kind.as_str());
            self.reject("not_served", &message);
            // A kind the webhook is registered for but serves no chain is never admitted
            // unchecked (the configuration is at fault, not the policy); a deletion still
            // finishes.
            return Err(failure_answer(
                request,
                if deleting(request) {
                    FailureMode::Allow
                } else {
                    FailureMode::Deny
                },
                500,
                "InternalError",
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
        let (kind, machine) = read_machine(&object, "request.object").map_err(bad_request)?;
        let stored = match request.operation {
            Operation::Update => {
                let mut old = old_object.filter(Value::is_object).ok_or_else(|| {
                        bad_request("request.oldObject is missing: an UPDATE review must carry the stored object".to_string())
                    })?;
                fill_metadata(&mut old, request);
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
                    same_cluster: same_cluster(&object, &old),
                })
            }
            _ => None,
        };
        Ok(Objects {
            object,
            kind,
            machine,
            stored,
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
        let found = cluster_name_of(&objects.object)
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

    /// The answer to a job, evaluated under the policies' own limits. Blocking.
    fn evaluate(&self, job: &Job) -> Answer {
        let judged = self.judge(job, None);
        self.answer(job, judged)
    }

    /// The served chain's verdict on a job, with the lifecycle rules applied; no metric or log
    /// line yet (an evaluation cut by `budget` is discarded). `None` when no chain serves the
    /// job's kind (`prepare` checked the kind against this very snapshot, so not expected).
    fn judge<'a>(&self, job: &'a Job, budget: Option<&Budget>) -> Option<Judged<'a>> {
        let chain = job.served.chains.get(&job.kind)?;
        self.metrics.in_flight.inc();
        stages::mark(Stage::Metrics);
        let evaluate = |request: &Request| match &self.native {
            Some(native) => {
                let started = std::time::Instant::now();
                let decision = native(request);
                stages::mark(Stage::Rules);
                Ok(ChainEvaluation {
                    decision,
                    warned: Vec::new(),
                    logs: Vec::new(),
                    steps: Vec::new(),
                    elapsed: started.elapsed(),
                    unapplied: Vec::new(),
                })
            }
            None => chain.evaluate_within(request, budget),
        };
        // Deletions, request faults, unknown clusters and ratcheted updates, as everywhere.
        let result = lifecycle::judge(&job.policy, evaluate);
        stages::mark(Stage::Combine);
        self.metrics.in_flight.dec();
        Some(Judged { result, chain })
    }

    /// The answer to a judged job, with its metrics and log lines.
    fn answer(&self, job: &Job, judged: Option<Judged<'_>>) -> Answer {
        let Some(Judged { result, chain }) = judged else {
            return invalid(
                "no policy chain for this kind".to_string(),
                job.served.generation,
            );
        };
        let evaluation = match result {
            Ok(evaluation) => evaluation,
            Err(err) => return self.policy_failed(job, err),
        };
        let timed = evaluation.steps.iter().map(|s| (&s.policy, &s.evaluation));
        let warned_timed = evaluation
            .warned
            .iter()
            .filter_map(|w| Some((&w.policy, w.evaluation.as_ref().ok()?)));
        for (policy, step) in timed.chain(warned_timed) {
            self.metrics
                .evaluation_seconds
                .get_or_create(&PolicyLabels {
                    kind: job.kind.as_str().to_string(),
                    policy: policy.clone(),
                })
                .observe(step.elapsed.as_secs_f64());
        }
        warned::count_failures(&evaluation, &self.metrics, &job.display);
        stages::mark(Stage::Metrics);
        for line in &evaluation.logs {
            tracing::debug!(machine = %job.display, level = ?line.level, "policy: {}", line.message);
        }
        stages::mark(Stage::Logging);
        match job.endpoint {
            Endpoint::Validate => self.validated(job, &evaluation),
            Endpoint::Mutate => self.mutated(job, &evaluation, &chain.enforced_name()),
        }
    }

    fn policy_failed(&self, job: &Job, err: ChainError) -> Answer {
        self.metrics
            .policy_failed(&err.policy, &err.error, crate::Mode::Enforce);
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
        // The object is judged as it is: a list the chain's defaulting would change was not
        // defaulted (the mutating webhook skipped or undone), and is denied.
        let undefaulted = lifecycle_rules::undefaulted(&job.policy, &evaluation.decision);
        let with_violation;
        let decision = match undefaulted {
            Some(violation) => {
                let mut denied = evaluation.decision.clone();
                denied.violations.push(violation);
                denied.allowed = false;
                with_violation = denied;
                &with_violation
            }
            None => &evaluation.decision,
        };
        let mut warnings = job.warnings.clone();
        warnings.extend(decision.warnings.iter().cloned());
        warnings.extend(warned::validation_warnings(
            job.kind,
            &job.display,
            evaluation,
            &self.metrics,
        ));
        if decision.allowed {
            stages::mark(Stage::Patch);
            return allow(&job.request, None, warnings, &job.served);
        }
        tracing::info!(machine = %job.display, uid = %job.request.uid, violations = decision.violations.len(), "denied");
        stages::mark(Stage::Logging);
        let mut response = AdmissionResponse::from(&job.request);
        response.allowed = false;
        response.result = invalid_status(job.kind, &job.policy.machine.name, decision);
        if !warnings.is_empty() {
            response.warnings = Some(warnings);
        }
        stages::mark(Stage::Patch);
        finish(response, false, "denied", &job.served)
    }

    fn mutated(&self, job: &Job, evaluation: &ChainEvaluation, chain_name: &str) -> Answer {
        let decision = &evaluation.decision;
        // A denied machine is the validating endpoint's to report; nothing to default.
        if !decision.allowed {
            return allow(&job.request, None, Vec::new(), &job.served);
        }
        // Without the cluster NIC 0 is unknown: no plan to write yet. Nor when only warn-mode
        // policies planned: they change nothing, and an empty plan would mislead.
        let annotate = job.served.config.nic_plan_annotation
            && !job.policy.cluster_unknown
            && (!decision.nics.is_empty() || evaluation.warned.is_empty());
        let plan = annotate.then(|| NicPlan {
            policy: chain_name,
            nics: &decision.nics,
            vapp_networks: &decision.vapp_networks,
        });
        let operations = patch_operations(job.kind, &job.object, decision, plan.as_ref());
        let patch = (!operations.is_empty()).then_some(Patch(operations));
        let warnings = warned::mutation_warnings(job.kind, evaluation);
        stages::mark(Stage::Patch);
        allow(&job.request, patch, warnings, &job.served)
    }
}

/// Maps a machine object; errors start with `label`, such as `request.object`.
fn read_machine(object: &Value, label: &str) -> Result<(ObjectKind, Machine), String> {
    machine_from_object(object).map_err(|err| format!("{label}: {err}"))
}
