//! The inventories refreshed from Cloud Director: on an interval, the leader reads the org
//! VDC networks of every VDC the configuration's `inventories` names, with a read-only API
//! token of its own (a Secret named in `cloudDirector`, never CAPVCD's), and writes them into
//! one ConfigMap, a file per VDC ([`crate::clouddirector::file`]), only when they changed. The
//! webhook and the controller read those files where the ConfigMap is mounted, and reload them
//! when they change.
//!
//! Cloud Director out of reach (or refusing) keeps the last ConfigMap as it is, and says so:
//! `nicpolicy_controller_inventory_refreshes_total{result="failed"}`, the success timestamp
//! standing still, a Warning Event `InventoryRefreshFailed` on the ConfigMap, and a log line.
//! Readiness does not follow it: admission never waits on Cloud Director.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference, Secret};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::watch;

use crate::clouddirector::{file, import, Bounds, Client, Owner};
use crate::served::config::CloudDirectorConfig;
use crate::served::ServedPolicies;

use super::metrics::Metrics;
use super::state::{Shared, MANAGER};

/// How often a configuration without `cloudDirector` is looked at again.
const UNCONFIGURED_CHECK: std::time::Duration = std::time::Duration::from_secs(5);

/// Why a refresh did not happen.
#[derive(Debug, thiserror::Error)]
pub enum RefreshError {
    /// The token's Secret could not be read, or holds no token.
    #[error("Secret {namespace}/{name}: {why}")]
    Token {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// What is wrong.
        why: String,
    },
    /// Cloud Director did not answer as it should.
    #[error("{0}")]
    CloudDirector(String),
    /// The ConfigMap could not be read or written.
    #[error("ConfigMap {namespace}/{name}: {error}")]
    ConfigMap {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The API's answer.
        error: kube::Error,
    },
}

/// What a refresh did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refreshed {
    /// The ConfigMap was written.
    Written,
    /// Cloud Director said what the ConfigMap holds already.
    Unchanged,
}

/// Refreshes the inventories every `cloudDirector.refreshInterval` while this replica leads,
/// the first time at once, until `stop`. The configuration is read at every round: a reload
/// that adds `cloudDirector` starts the refreshes, one that removes it pauses them.
pub(super) async fn run(
    client: kube::Client,
    shared: Arc<Shared>,
    served: Arc<ServedPolicies>,
    mut stop: watch::Receiver<bool>,
) {
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: MANAGER.to_string(),
            instance: std::env::var("POD_NAME").ok(),
        },
    );
    loop {
        let snapshot = served.get();
        let Some(config) = snapshot.config.cloud_director.clone() else {
            drop(snapshot);
            tokio::select! {
                _ = tokio::time::sleep(UNCONFIGURED_CHECK) => {}
                _ = stop.changed() => return,
            }
            continue;
        };
        let vdcs: Vec<String> = snapshot.config.inventories.keys().cloned().collect();
        drop(snapshot);
        if shared.leading.is_leading() {
            let outcome = refresh(&client, &config, &vdcs).await;
            let metrics = &shared.metrics;
            match outcome {
                Ok(done) => {
                    Metrics::count(
                        &metrics.inventory_refreshes,
                        match done {
                            Refreshed::Written => "written",
                            Refreshed::Unchanged => "unchanged",
                        },
                    );
                    metrics.inventory_refreshed.set(now_seconds());
                    tracing::info!(configmap = %config.config_map, vdcs = vdcs.len(), outcome = ?done, "inventories refreshed from Cloud Director");
                }
                Err(err) => {
                    Metrics::count(&metrics.inventory_refreshes, "failed");
                    tracing::warn!(error = %err, "inventories not refreshed; the last ones stay");
                    let event = Event {
                        type_: EventType::Warning,
                        reason: "InventoryRefreshFailed".to_string(),
                        note: Some(super::report::cut(&format!(
                            "the inventories of {} were not refreshed from {}; the last ones stay: {err}",
                            vdcs.join(", "),
                            config.site
                        ))),
                        action: "Refresh".to_string(),
                        secondary: None,
                    };
                    let reference = ObjectReference {
                        api_version: Some("v1".to_string()),
                        kind: Some("ConfigMap".to_string()),
                        namespace: Some(config.namespace.clone()),
                        name: Some(config.config_map.clone()),
                        ..ObjectReference::default()
                    };
                    if let Err(err) = recorder.publish(&event, &reference).await {
                        tracing::warn!(error = %err, "cannot publish the refresh Event");
                    }
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(config.refresh_interval) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
    }
}

/// One refresh: the token from its Secret, each VDC's networks from Cloud Director, the
/// ConfigMap written if they differ from what it holds.
///
/// # Errors
/// The first step that failed; nothing is written then.
pub async fn refresh(
    client: &kube::Client,
    config: &CloudDirectorConfig,
    vdcs: &[String],
) -> Result<Refreshed, RefreshError> {
    let token = token(client, config).await?;
    let mut director = Client::new(
        &config.site,
        &config.org,
        token,
        config.ca_file.as_deref(),
        Bounds::default(),
    )
    .map_err(|err| RefreshError::CloudDirector(err.to_string()))?;
    let mut data = BTreeMap::new();
    for vdc in vdcs {
        let imported = import(&mut director, &[Owner::Vdc(vdc.clone())])
            .await
            .map_err(|err| RefreshError::CloudDirector(err.to_string()))?;
        for warning in &imported.warnings {
            tracing::info!(vdc = %vdc, %warning, "imported with a warning");
        }
        let text = file::render(&config.site, &config.org, &imported)
            .map_err(|err| RefreshError::CloudDirector(err.to_string()))?;
        data.insert(file::file_name(vdc), text);
    }
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &config.namespace);
    let failed = |error| RefreshError::ConfigMap {
        namespace: config.namespace.clone(),
        name: config.config_map.clone(),
        error,
    };
    let existing = api.get_opt(&config.config_map).await.map_err(failed)?;
    if existing.and_then(|cm| cm.data) == Some(data.clone()) {
        return Ok(Refreshed::Unchanged);
    }
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": config.config_map,
            "namespace": config.namespace,
            "labels": {"app.kubernetes.io/managed-by": "nicpolicy"},
        },
        "data": data,
    });
    api.patch(
        &config.config_map,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await
    .map_err(failed)?;
    Ok(Refreshed::Written)
}

/// The API token, from `cloudDirector.tokenSecret`.
async fn token(
    client: &kube::Client,
    config: &CloudDirectorConfig,
) -> Result<String, RefreshError> {
    let failed = |why: String| RefreshError::Token {
        namespace: config.namespace.clone(),
        name: config.token_secret.clone(),
        why,
    };
    let api: Api<Secret> = Api::namespaced(client.clone(), &config.namespace);
    let secret = api
        .get(&config.token_secret)
        .await
        .map_err(|err| failed(err.to_string()))?;
    let bytes = secret
        .data
        .and_then(|mut data| data.remove(&config.token_key))
        .ok_or_else(|| failed(format!("has no key {:?}", config.token_key)))?;
    let token = String::from_utf8(bytes.0)
        .map_err(|_| failed(format!("{:?} is not text", config.token_key)))?;
    let token = token.trim().to_string();
    if token.is_empty() {
        return Err(failed(format!("{:?} is empty", config.token_key)));
    }
    Ok(token)
}

fn now_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}
