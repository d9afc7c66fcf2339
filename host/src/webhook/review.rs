//! One AdmissionReview in, one out: the request is mapped to a policy [`Request`]
//! (the `prepare` module), the served chain evaluates it, and the decision becomes a JSON patch (mutate, [`super::patch`]) or an
//! allow / deny with Kubernetes field causes (validate); [`super::admission`] holds the wire
//! format.

use std::sync::Arc;
use std::time::Duration;

use json_patch::Patch;
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use kube::core::DynamicObject;
use nicpolicy_plugin::lifecycle as lifecycle_rules;
use nicpolicy_plugin::{Decision, ObjectKind, Request};

use nicpolicy_engine::lifecycle;
use nicpolicy_engine::stages::{self, Stage};
use serde_json::Value;

use super::admission::{
    allow, deleting, failure_answer, finish, invalid, invalid_status, read_review, Answer,
};
use super::inline::InlineGate;
use super::metrics::{Metrics, PolicyLabels, ReviewLabels};
use super::patch::{patch_operations, restore_annotation, NicPlan, NIC_PLAN_ANNOTATION};
use super::warned;
use crate::clusters::ClusterSource;
use crate::served::config::FailureMode;
use crate::served::{Served, ServedPolicies};
use crate::{Budget, ChainError, ChainEvaluation, PolicyChain};

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

    /// The path the shipped webhook configurations name for `kind`, in Cluster API's style:
    /// `/validate-infrastructure-cluster-x-k8s-io-v1beta2-vcdmachine`. v1beta2 is the storage
    /// version of CAPVCD's last release (v1.3.2); one registration per kind lists every version
    /// in [`SERVED_VERSIONS`], so a request of either version reaches this one path.
    pub fn path(self, kind: ObjectKind) -> String {
        self.path_at(kind, SERVED_VERSIONS[0])
    }

    /// The path of this endpoint for `kind` at `version`.
    pub fn path_at(self, kind: ObjectKind, version: &str) -> String {
        format!(
            "/{}-infrastructure-cluster-x-k8s-io-{version}-{}",
            self.as_str(),
            path_segment(kind)
        )
    }

    /// Every path this endpoint answers for `kind`: one per version in [`SERVED_VERSIONS`]
    /// (a hand-written registration may name the version it registers; all are the same
    /// handler, which reads the version from the request).
    pub fn paths(self, kind: ObjectKind) -> Vec<String> {
        SERVED_VERSIONS
            .iter()
            .map(|version| self.path_at(kind, version))
            .collect()
    }
}

/// The CAPVCD versions the webhook serves and the shipped registrations name, the release's
/// storage version first: v1beta2 (CAPVCD v1.3.2, the last release) and v1beta3 (CAPVCD's
/// unreleased main, with zones). v1beta1 writes reach the webhook converted to v1beta2 by
/// CAPVCD's conversion webhook (`matchPolicy: Equivalent`); v1beta1 has no
/// `extraOvdcNetworks`.
pub const SERVED_VERSIONS: [&str; 2] = nicpolicy_plugin::objects::SUPPORTED_VERSIONS;
/// The kind in lower case, as webhook paths spell it.
pub fn path_segment(kind: ObjectKind) -> &'static str {
    match kind {
        ObjectKind::VcdMachine => "vcdmachine",
        ObjectKind::VcdMachineTemplate => "vcdmachinetemplate",
    }
}

/// What a review needs to reach a decision after it is read.
pub(super) struct Job {
    pub(super) request: AdmissionRequest<DynamicObject>,
    pub(super) object: Value,
    pub(super) kind: ObjectKind,
    pub(super) endpoint: Endpoint,
    pub(super) served: Arc<Served>,
    pub(super) policy: Request,
    pub(super) display: String,
    /// Warnings of the host's own (the cluster is not known yet), given with the answer.
    pub(super) warnings: Vec<String>,
    /// A VCDMachine created already built (`clusterctl move`, a restore): not defaulted, its
    /// plan annotation kept, violations warned ([`lifecycle_rules::already_built`]).
    pub(super) already_built: bool,
    /// Cluster API's topology dry run ([`lifecycle_rules::is_topology_dry_run`]).
    pub(super) topology_dry_run: bool,
    /// An UPDATE of a provisioned machine that stays provisioned (the same provider ID): its
    /// plan annotation is the record of what its VM was built with, and is kept.
    pub(super) keeps_plan: bool,
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
    pub(super) policies: Arc<ServedPolicies>,
    pub(super) clusters: Arc<dyn ClusterSource>,
    pub(super) metrics: Arc<Metrics>,
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
        let mut result = lifecycle::judge(&job.policy, evaluate);
        if let Ok(evaluation) = result.as_mut() {
            if job.already_built {
                lifecycle_rules::already_built(&mut evaluation.decision);
            }
            if job.topology_dry_run {
                lifecycle_rules::topology_dry_run(&mut evaluation.decision);
            }
        }
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
        // Not a machine created already built: nothing defaults it (its VM has these NICs).
        let undefaulted = (!job.already_built)
            .then(|| lifecycle_rules::undefaulted(&job.policy, &evaluation.decision))
            .flatten()
            .or_else(|| lifecycle_rules::rewritten_plan_violation(&job.policy));
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
        // A denied machine is the validating endpoint's to report; nothing to default. A
        // machine created already built keeps its spec and plan annotation as written.
        if !decision.allowed || job.already_built {
            return allow(&job.request, None, Vec::new(), &job.served);
        }
        // Without the cluster NIC 0 is unknown: no plan to write yet. Nor when only warn-mode
        // policies planned: they change nothing, and an empty plan would mislead.
        let annotate = job.served.config.nic_plan_annotation
            && !job.keeps_plan
            && !job.policy.cluster_unknown
            && (!decision.nics.is_empty() || evaluation.warned.is_empty());
        let plan = annotate.then(|| NicPlan {
            policy: chain_name,
            nics: &decision.nics,
            vapp_networks: &decision.vapp_networks,
        });
        let mut operations = patch_operations(job.kind, &job.object, decision, plan.as_ref());
        // A provisioned machine's plan is the record of what its VM was built with: an UPDATE
        // that rewrites it gets the stored one back.
        if let Some(stored) = lifecycle_rules::rewritten_plan(&job.policy) {
            operations.extend(restore_annotation(&job.object, NIC_PLAN_ANNOTATION, stored));
        }
        let patch = (!operations.is_empty()).then_some(Patch(operations));
        let warnings = warned::mutation_warnings(job.kind, evaluation);
        stages::mark(Stage::Patch);
        allow(&job.request, patch, warnings, &job.served)
    }
}
