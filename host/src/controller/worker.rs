//! The controller's loop: one worker that, while this replica leads, evaluates the queued
//! namespaces one at a time, writes their reports and Events, and keeps the gauges.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use nicpolicy_plugin::ObjectKind;
use tokio::sync::watch;

use crate::audit::capacity::Capacity;
use crate::audit::{self, live, Chains, Finding, Inputs, Summary};
use crate::served::ServedPolicies;
use crate::PolicyChain;

use super::events::{self, EventGate};
use super::metrics::{self, Metrics};
use super::report;
use super::retry::Retries;
use super::state::{while_leading, Options, ServedChains, Shared, Watched, MANAGER};

/// The evaluation loop and what it remembers between passes.
pub(super) struct Worker {
    client: kube::Client,
    shared: Arc<Shared>,
    watched: Vec<Watched>,
    served: Arc<ServedPolicies>,
    candidate: Option<Arc<ServedPolicies>>,
    options: Options,
    /// Fingerprint of the report last written (or found) in each namespace.
    written: HashMap<String, String>,
    /// Totals of each namespace, for the gauges.
    summaries: BTreeMap<String, Summary>,
    /// The largest rollout's need of each static pool, per namespace, for the gauges.
    pool_needs: BTreeMap<String, BTreeMap<(String, String), u64>>,
    gate: Option<EventGate>,
    recorder: Recorder,
    generations: (u64, u64),
    was_leading: bool,
    /// Namespaces whose report or Events failed, waiting with backoff.
    retries: Retries,
    /// Whether the reports of the other kind (left by a run with the other format) were
    /// removed since this replica took the lead.
    other_kind_removed: bool,
}

impl Worker {
    pub(super) fn new(
        client: kube::Client,
        shared: Arc<Shared>,
        watched: Vec<Watched>,
        served: Arc<ServedPolicies>,
        candidate: Option<Arc<ServedPolicies>>,
        options: Options,
    ) -> Worker {
        // Events are off with a rate of 0.
        let gate = (options.events_per_minute > 0)
            .then(|| EventGate::new(options.events_per_minute, options.events_burst.max(1)));
        Worker {
            recorder: Recorder::new(
                client.clone(),
                Reporter {
                    controller: MANAGER.to_string(),
                    instance: std::env::var("POD_NAME").ok(),
                },
            ),
            client,
            shared,
            watched,
            served,
            candidate,
            options,
            written: HashMap::new(),
            summaries: BTreeMap::new(),
            pool_needs: BTreeMap::new(),
            gate,
            generations: (0, 0),
            was_leading: false,
            retries: Retries::default(),
            other_kind_removed: false,
        }
    }

    pub(super) async fn run(&mut self, mut stop: watch::Receiver<bool>) {
        let mut next_resync = tokio::time::Instant::now() + self.options.resync;
        loop {
            tokio::select! {
                _ = self.shared.wake.notified() => {}
                _ = tokio::time::sleep_until(next_resync) => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = stop.changed() => {}
            }
            if *stop.borrow() {
                tracing::info!("shutting down");
                return;
            }
            let leading = self.shared.leading.is_leading();
            self.shared.metrics.leader.set(i64::from(leading));
            let generations = (
                self.served.get().generation,
                self.candidate.as_ref().map_or(0, |c| c.get().generation),
            );
            self.shared
                .metrics
                .policy_generation
                .set(i64::try_from(generations.0).unwrap_or(i64::MAX));
            let mut everything = false;
            if tokio::time::Instant::now() >= next_resync {
                next_resync = tokio::time::Instant::now() + self.options.resync;
                everything = true;
            }
            if generations != self.generations {
                if self.generations != (0, 0) {
                    tracing::info!(
                        generation = generations.0,
                        "policies changed; evaluating every namespace"
                    );
                }
                self.generations = generations;
                everything = true;
            }
            if leading && !self.was_leading {
                // Another replica may have written since: read the reports again.
                self.written.clear();
                if let Err(err) = self.read_reports().await {
                    // Each namespace's report is then read when it is first evaluated; only
                    // reports of namespaces emptied meanwhile are left until a later start.
                    tracing::warn!(error = %err, kind = %self.options.format, "cannot list the reports written before");
                }
                self.other_kind_removed = false;
                everything = true;
            }
            if leading && !self.other_kind_removed {
                self.other_kind_removed = self.remove_other_kind().await;
            }
            self.was_leading = leading;
            if everything {
                for namespace in self.known_namespaces() {
                    self.shared.enqueue(&namespace);
                }
            }
            for namespace in self.retries.due(tokio::time::Instant::now()) {
                self.shared.enqueue(&namespace);
            }
            if !self.shared.ready() || !leading {
                continue;
            }
            // Gather the burst of changes one edit causes (a Cluster and its machines).
            tokio::time::sleep(self.options.debounce).await;
            let batch = self.shared.take();
            if !batch.is_empty() {
                self.pass(batch, &stop).await;
            }
        }
    }

    /// Namespaces holding audited objects, and those that still have a report.
    fn known_namespaces(&self) -> BTreeSet<String> {
        let mut namespaces: BTreeSet<String> = self.written.keys().cloned().collect();
        for watched in &self.watched {
            for object in watched.store.state() {
                namespaces.insert(
                    object
                        .metadata
                        .namespace
                        .clone()
                        .unwrap_or_else(|| "default".into()),
                );
            }
        }
        namespaces
    }

    /// Evaluates and reports the namespaces of `batch`, one at a time: only one namespace's
    /// objects are copied out of the caches and evaluated at once, however many are queued.
    async fn pass(&mut self, batch: BTreeSet<String>, stop: &watch::Receiver<bool>) {
        let started = Instant::now();
        // The caches' own objects (shared, not copied), by namespace and watched resource.
        let mut objects: BTreeMap<String, Vec<(usize, Arc<DynamicObject>)>> =
            batch.iter().map(|ns| (ns.clone(), Vec::new())).collect();
        for (index, watched) in self.watched.iter().enumerate() {
            for object in watched.store.state() {
                let namespace = object.metadata.namespace.as_deref().unwrap_or("default");
                if let Some(list) = objects.get_mut(namespace) {
                    list.push((index, object));
                }
            }
        }
        let mut evaluated = 0;
        // A namespace waiting out a failed write is left to its retry, however often its
        // objects change meanwhile.
        let now = tokio::time::Instant::now();
        objects.retain(|namespace, _| !self.retries.holding(namespace, now));
        let mut pending = objects.into_iter();
        while let Some((namespace, list)) = pending.next() {
            // A first pass over a large cluster takes a while: stop between namespaces when
            // shutting down or when another replica took over, and leave the rest queued.
            if *stop.borrow() || !self.shared.leading.is_leading() {
                self.shared.enqueue(&namespace);
                for (namespace, _) in pending.by_ref() {
                    self.shared.enqueue(&namespace);
                }
                break;
            }
            let values: Vec<serde_json::Value> = list
                .iter()
                .map(|(index, object)| live::object_value(object, &self.watched[*index].resource))
                .collect();
            drop(list);
            let Some((findings, capacity)) = self.evaluate(values).await else {
                self.shared.enqueue(&namespace);
                continue;
            };
            self.pool_needs.insert(
                namespace.clone(),
                capacity
                    .networks
                    .iter()
                    .filter(|n| n.largest > 0)
                    .map(|n| {
                        (
                            (n.vdc.clone().unwrap_or_default(), n.network.clone()),
                            n.largest,
                        )
                    })
                    .collect(),
            );
            evaluated += findings.len();
            for finding in &findings {
                self.shared
                    .metrics
                    .evaluation_seconds
                    .observe(finding.elapsed.as_secs_f64());
            }
            self.summaries
                .insert(namespace.clone(), Summary::of(&findings));
            // Before the report is written: whoever reads a report then finds the metrics
            // counting it.
            self.gauges();
            // Evaluating took a while: the Lease may have lapsed meanwhile.
            if !self.shared.leading.is_leading() {
                self.shared.enqueue(&namespace);
                continue;
            }
            let leading = self.shared.leading.clone();
            let format = self.options.format;
            let write = async {
                self.report(&namespace, &findings, &capacity)
                    .await
                    .map_err(|err| write_error(format, &err))
            };
            let written = match while_leading(&leading, write).await {
                Ok(()) => true,
                Err(err) => {
                    Metrics::count(&self.shared.metrics.report_writes, "failed");
                    let wait = self.retries.failed(&namespace, tokio::time::Instant::now());
                    tracing::warn!(%namespace, error = %err, retry_in_ms = wait.as_millis(), "cannot write the report");
                    false
                }
            };
            let announced = self.events(&namespace, &findings).await;
            if written && announced {
                self.retries.succeeded(&namespace);
            } else if written {
                let wait = self.retries.failed(&namespace, tokio::time::Instant::now());
                tracing::info!(%namespace, retry_in_ms = wait.as_millis(), "Events not published; trying them again");
            }
            self.shared
                .metrics
                .retries_waiting
                .set(i64::try_from(self.retries.len()).unwrap_or(i64::MAX));
        }
        tracing::debug!(
            objects = evaluated,
            elapsed_ms = started.elapsed().as_millis(),
            "pass done"
        );
    }

    /// The findings of one namespace's objects, and what its rollouts take from the static
    /// pools; `None` when the evaluation task failed.
    async fn evaluate(&self, values: Vec<serde_json::Value>) -> Option<(Vec<Finding>, Capacity)> {
        let served = self.served.get();
        let candidate = self.candidate.as_ref().map(|c| c.get());
        // Evaluation is CPU work: off the async threads.
        let evaluated = tokio::task::spawn_blocking(move || {
            let inputs = Inputs::from_files(live::files_by_namespace(values));
            let subjects = inputs.subjects(&served.inventories);
            let candidate_chains = candidate.as_deref().map(ServedChains);
            let findings = audit::evaluate_all(
                subjects,
                &ServedChains(&served),
                candidate_chains.as_ref().map(|c| c as &dyn Chains),
            );
            // Rollouts and their templates live in one namespace: each namespace's are
            // counted with it, against pools every namespace shares.
            let capacity = Capacity::of(
                &served.inventories.pools,
                &inputs.files,
                &findings,
                &served.config.provisioner,
            )
            .unwrap_or_default();
            (findings, capacity)
        })
        .await;
        match evaluated {
            Ok(findings) => Some(findings),
            Err(err) => {
                tracing::error!(error = %err, "evaluation task failed; retrying the namespace");
                None
            }
        }
    }

    /// Whether `namespace` is one this controller audits (`--namespace`; every one without).
    fn watches(&self, namespace: &str) -> bool {
        self.options.namespaces.is_empty() || self.options.namespaces.iter().any(|n| n == namespace)
    }

    fn reports_api(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            namespace,
            &self.options.format.resource(),
        )
    }

    /// Reads the reports written before (by an earlier process or another replica), a few at
    /// a time: their digests, so unchanged ones are not written again; their failures, so
    /// they are not announced again; their namespaces, so the report of a namespace emptied
    /// meanwhile is deleted rather than left behind.
    async fn read_reports(&mut self) -> Result<(), kube::Error> {
        let api: Api<DynamicObject> =
            Api::all_with(self.client.clone(), &self.options.format.resource());
        // Reports are up to a few hundred KiB each: small pages keep the listing small.
        let mut params = ListParams::default().labels(report::SELECTOR).limit(10);
        loop {
            let page = api.list(&params).await?;
            for existing in &page.items {
                let namespace = existing.metadata.namespace.as_deref().unwrap_or("default");
                let watched = self.watches(namespace);
                if existing.metadata.name.as_deref() == Some(report::REPORT_NAME) && watched {
                    self.remember(namespace, existing);
                }
            }
            match page.metadata.continue_.filter(|token| !token.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(()),
            }
        }
    }

    /// Takes in a report found in the cluster: its digest as the one written, its failures as
    /// announced.
    fn remember(&mut self, namespace: &str, existing: &DynamicObject) {
        if let Some(gate) = self.gate.as_mut() {
            seed_from_report(gate, namespace, &existing.data);
        }
        let found = existing
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(report::FINGERPRINT_ANNOTATION))
            .cloned()
            .unwrap_or_default();
        self.written.insert(namespace.to_string(), found);
    }

    /// Deletes the reports of the other kind this controller wrote (a run with the other
    /// format, before a switch) in the namespaces it watches, so a switch leaves one report per
    /// namespace. `true` when done, or when there is nothing to do (the other kind's CRD is not
    /// installed, or its reports may not be listed); `false` to try again on the next pass.
    async fn remove_other_kind(&self) -> bool {
        let other = self.options.format.other();
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &other.resource());
        let mut params = ListParams::default().labels(report::SELECTOR).limit(50);
        let mut removed = 0;
        loop {
            // The names only: the reports are deleted, not read.
            let page = match api.list_metadata(&params).await {
                Ok(page) => page,
                Err(kube::Error::Api(status)) if status.code == 404 => return true,
                Err(kube::Error::Api(status)) if status.code == 403 => {
                    tracing::warn!(kind = %other, reason = %status.message, "cannot list the other kind's reports (forbidden): any left by a run with the other format stay");
                    return true;
                }
                Err(err) => {
                    tracing::warn!(kind = %other, error = %err, "cannot list the other kind's reports; trying again");
                    return false;
                }
            };
            for existing in &page.items {
                let namespace = existing.metadata.namespace.as_deref().unwrap_or("default");
                let watched = self.watches(namespace);
                if existing.metadata.name.as_deref() != Some(report::REPORT_NAME) || !watched {
                    continue;
                }
                let api: Api<DynamicObject> =
                    Api::namespaced_with(self.client.clone(), namespace, &other.resource());
                match api
                    .delete(report::REPORT_NAME, &DeleteParams::default())
                    .await
                {
                    Ok(_) => {
                        removed += 1;
                        Metrics::count(&self.shared.metrics.report_writes, "deleted");
                    }
                    Err(kube::Error::Api(status)) if status.code == 404 => {}
                    Err(err) => {
                        tracing::warn!(%namespace, kind = %other, error = %err, "cannot delete the other kind's report; trying again");
                        return false;
                    }
                }
            }
            // Deleting does not disturb the pages: a continue token lists from where it was.
            match page.metadata.continue_.filter(|token| !token.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
        if removed > 0 {
            tracing::info!(kind = %other, removed, writing = %self.options.format, "removed the reports of the format used before");
        }
        true
    }

    /// Writes the namespace's report when its results changed; deletes it when the
    /// namespace has no audited object left.
    async fn report(
        &mut self,
        namespace: &str,
        findings: &[Finding],
        capacity: &Capacity,
    ) -> Result<(), kube::Error> {
        let api = self.reports_api(namespace);
        if findings.is_empty() {
            self.summaries.remove(namespace);
            self.pool_needs.remove(namespace);
            if self.written.remove(namespace).is_some() {
                match api
                    .delete(report::REPORT_NAME, &DeleteParams::default())
                    .await
                {
                    Ok(_) => Metrics::count(&self.shared.metrics.report_writes, "deleted"),
                    Err(kube::Error::Api(status)) if status.code == 404 => {}
                    Err(err) => return Err(err),
                }
            }
            return Ok(());
        }
        let served = self.served.get();
        let policy = |kind: &str| {
            ObjectKind::from_kind(kind)
                .and_then(|kind| served.chains.get(&kind))
                .map_or_else(|| "nicpolicy".to_string(), PolicyChain::name)
        };
        let pools = report::pool_results(capacity, &policy("VCDMachineTemplate"));
        let built = report::build_with(
            self.options.format,
            namespace,
            &policy,
            findings,
            pools,
            self.options.bounds,
        );
        if !self.written.contains_key(namespace) {
            // First look since start (or since taking the lead): the report may be current.
            if let Some(existing) = api.get_opt(report::REPORT_NAME).await? {
                self.remember(namespace, &existing);
            }
        }
        if self.written.get(namespace) == Some(&built.fingerprint) {
            Metrics::count(&self.shared.metrics.report_writes, "unchanged");
            return Ok(());
        }
        let params = PatchParams::apply(MANAGER).force();
        api.patch(report::REPORT_NAME, &params, &Patch::Apply(&built.object))
            .await?;
        Metrics::count(&self.shared.metrics.report_writes, "written");
        if built.left_out > 0 {
            tracing::info!(%namespace, left_out = built.left_out, "report bounded: results left out");
        }
        self.written
            .insert(namespace.to_string(), built.fingerprint);
        Ok(())
    }

    /// A Warning Event on each object that newly fails; `false` when one could not be
    /// published (it is announced again on the namespace's retry).
    async fn events(&mut self, namespace: &str, findings: &[Finding]) -> bool {
        let Some(gate) = self.gate.as_mut() else {
            return true;
        };
        let prefix = format!("{namespace}/");
        let keys: Vec<String> = findings
            .iter()
            .map(|f| events::key(namespace, &f.object.kind, &f.object.name))
            .collect();
        let current: BTreeSet<&str> = keys.iter().map(String::as_str).collect();
        gate.retain(|key| !key.starts_with(&prefix) || current.contains(key));
        let now = Instant::now();
        let mut to_send = Vec::new();
        for (finding, key) in findings.iter().zip(&keys) {
            let dropped = gate.dropped;
            if gate.admit(key, finding, now) {
                to_send.push(finding);
            } else if gate.dropped > dropped {
                Metrics::count(&self.shared.metrics.events, "dropped");
            }
        }
        let mut published = true;
        for finding in to_send {
            let mut note = finding.violation_lines().join("; ");
            if note.len() > 1000 {
                let mut end = 1000;
                while !note.is_char_boundary(end) {
                    end -= 1;
                }
                note.truncate(end);
                note.push_str("...");
            }
            let reference = ObjectReference {
                api_version: Some(finding.object.api_version()),
                kind: Some(finding.object.kind.clone()),
                name: Some(finding.object.name.clone()),
                namespace: Some(namespace.to_string()),
                uid: finding.object.uid.clone(),
                ..ObjectReference::default()
            };
            let event = Event {
                type_: EventType::Warning,
                reason: "NetworkPolicyViolation".to_string(),
                note: Some(note),
                action: "Audit".to_string(),
                secondary: None,
            };
            let publish = self.recorder.publish(&event, &reference);
            match while_leading(&self.shared.leading, publish).await {
                Ok(()) => Metrics::count(&self.shared.metrics.events, "sent"),
                Err(err) => {
                    Metrics::count(&self.shared.metrics.events, "failed");
                    tracing::warn!(object = %finding.object, error = %err, "cannot publish the Event");
                    // Not announced: the retry of the namespace announces it.
                    if let Some(gate) = self.gate.as_mut() {
                        gate.forget(&events::key(
                            namespace,
                            &finding.object.kind,
                            &finding.object.name,
                        ));
                    }
                    published = false;
                }
            }
        }
        published
    }

    /// Sets the gauges from every namespace's totals.
    fn gauges(&self) {
        let mut results: BTreeMap<&'static str, usize> = BTreeMap::new();
        let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
        let mut changes: BTreeMap<&'static str, usize> = BTreeMap::new();
        for summary in self.summaries.values() {
            for (verdict, n) in &summary.results {
                *results.entry(verdict.as_str()).or_default() += n;
            }
            for (reason, n) in &summary.reasons {
                *reasons.entry(reason).or_default() += n;
            }
            for (change, n) in summary.candidate.iter().flatten() {
                *changes.entry(change.label()).or_default() += n;
            }
        }
        let metrics = &self.shared.metrics;
        set_gauges(&metrics.objects, results, |result| metrics::ResultLabel {
            result: result.to_string(),
        });
        set_gauges(&metrics.violations, reasons, |reason| {
            metrics::ReasonLabel {
                reason: reason.to_string(),
            }
        });
        set_gauges(&metrics.candidate, changes, |change| metrics::ChangeLabel {
            change: change.to_string(),
        });
        // Every counted pool, with the largest need any namespace's rollout has of it.
        let served = self.served.get();
        metrics.pool_free.clear();
        metrics.pool_rollout.clear();
        for (vdc, network, pool) in served.inventories.pools.iter() {
            let labels = metrics::PoolLabels {
                ovdc: vdc.unwrap_or_default().to_string(),
                network: network.to_string(),
            };
            let key = (labels.ovdc.clone(), labels.network.clone());
            let largest = self
                .pool_needs
                .values()
                .filter_map(|needs| needs.get(&key))
                .max()
                .copied()
                .unwrap_or(0);
            metrics
                .pool_free
                .get_or_create(&labels)
                .set(i64::try_from(pool.free()).unwrap_or(i64::MAX));
            metrics
                .pool_rollout
                .get_or_create(&labels)
                .set(i64::try_from(largest).unwrap_or(i64::MAX));
        }
    }
}

/// Replaces every gauge of `family` with `counts`, labelled by `label`: a value no namespace
/// has any more disappears.
fn set_gauges<L>(
    family: &prometheus_client::metrics::family::Family<
        L,
        prometheus_client::metrics::gauge::Gauge,
    >,
    counts: BTreeMap<&str, usize>,
    label: impl Fn(&str) -> L,
) where
    L: Clone + std::hash::Hash + Eq + prometheus_client::encoding::EncodeLabelSet,
{
    family.clear();
    for (value, n) in counts {
        family
            .get_or_create(&label(value))
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
}

/// A failed write, said so the operator knows what to do when the kind is not served.
fn write_error(format: report::Format, err: &kube::Error) -> String {
    match err {
        kube::Error::Api(status) if status.code == 404 && status.reason == "NotFound" => format!(
            "{err}: is the {} CRD installed? (chart value controller.installReportCRD, or \
             --report-format={} for the other kind)",
            format.crd(),
            format.other().name()
        ),
        _ => err.to_string(),
    }
}

/// Tells `gate` which objects the report found at start (written by an earlier process or
/// another replica) lists as failing, and why, so their failures are not announced twice.
fn seed_from_report(gate: &mut EventGate, namespace: &str, report: &serde_json::Value) {
    let mut failing: BTreeMap<String, Vec<(&str, &str)>> = BTreeMap::new();
    for result in report["results"].as_array().into_iter().flatten() {
        if result["result"] != "fail" {
            continue;
        }
        let resource = &result["resources"][0];
        // The reason is a property of its own; reports written before rules were named held it
        // as the rule.
        let reason = result["properties"]["reason"]
            .as_str()
            .or_else(|| result["rule"].as_str());
        let (Some(kind), Some(name), Some(field), Some(rule)) = (
            resource["kind"].as_str(),
            resource["name"].as_str(),
            result["properties"]["field"].as_str(),
            reason,
        ) else {
            continue;
        };
        failing
            .entry(events::key(namespace, kind, name))
            .or_default()
            .push((field, rule));
    }
    for (key, violations) in failing {
        gate.seed(&key, violations);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use nicpolicy_plugin::{Decision, Reason, Source, Violation};

    use super::*;

    fn denied(name: &str, violations: Vec<Violation>) -> Finding {
        Finding::decided_for_tests(name, Decision::from_violations(violations))
    }

    #[test]
    fn a_restarted_controller_does_not_announce_failures_its_report_lists() {
        // One violation names its rule (so the report's `rule` is the rule, the reason a
        // property), one does not (the report's `rule` is the reason).
        let typo = denied(
            "prod-eu1-md-0-typo",
            vec![
                Violation::new("spec.extraOvdcNetworks[0]", Reason::NotFound, "storag-net")
                    .with_source(Source::rule("capvcd/inventory")),
            ],
        );
        let dup = denied(
            "prod-eu1-md-0-dup",
            vec![Violation::new(
                "spec.extraOvdcNetworks[1]",
                Reason::Duplicate,
                "storage-net twice",
            )],
        );
        let findings = [typo, dup];
        let written = report::build(
            report::Format::OpenReports,
            "prod-eu1",
            &|_| "nicpolicy-capvcd".into(),
            &findings,
            report::Bounds::default(),
        );
        // The new leader reads the report and seeds its gate from it.
        let mut gate = EventGate::new(60, 10);
        seed_from_report(&mut gate, "prod-eu1", &written.object);
        let now = Instant::now();
        for finding in &findings {
            let key = events::key("prod-eu1", "VCDMachine", &finding.object.name);
            assert!(
                !gate.admit(&key, finding, now),
                "{} announced again",
                finding.object.name
            );
        }
        // A new failure of the same object is announced.
        let worse = denied(
            "prod-eu1-md-0-dup",
            vec![Violation::new(
                "spec.extraOvdcNetworks[2]",
                Reason::NotFound,
                "backup-nett",
            )],
        );
        let key = events::key("prod-eu1", "VCDMachine", "prod-eu1-md-0-dup");
        assert!(gate.admit(&key, &worse, now));
    }
}
