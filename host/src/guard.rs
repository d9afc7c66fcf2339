//! Whether nicpolicy is asked at all: the versions the VCDMachine and VCDMachineTemplate CRDs
//! serve against the versions the shipped webhook configurations name.
//!
//! kube-apiserver sends a review only for a version a registration names, or one it can convert
//! to such a version (`matchPolicy: Equivalent`), and it converts only to versions the CRD
//! serves. A CRD that serves none of the registered versions (CAPVCD v1.3.2's CRDs against a
//! registration of v1beta3 alone, or a CAPVCD upgrade that drops a version) leaves every write
//! of that kind unchecked while the webhook stays healthy and quiet. The webhook and the
//! controller watch both CRDs (metadata and `spec.versions` only are read) and say so: a log
//! line naming the versions, the gauge `nicpolicy_unguarded_kinds` (`nicpolicy_controller_…`
//! in the controller), and a Warning Event. Readiness is left alone: under `failurePolicy:
//! Fail`, an unready webhook would refuse the writes that do reach it.

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::{watcher, WatchStreamExt};
use nicpolicy_plugin::objects::{CAPVCD_GROUP, SUPPORTED_VERSIONS};
use nicpolicy_plugin::ObjectKind;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

/// The versions the shipped webhook configurations register for both kinds
/// (charts/nicpolicy/templates/webhooks.yaml), which are the versions the webhook serves.
pub const REGISTERED_VERSIONS: [&str; 2] = SUPPORTED_VERSIONS;

/// The gauge's label: the kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// `VCDMachine` or `VCDMachineTemplate`.
    pub kind: String,
}

/// `unguarded_kinds`: 1 for a kind whose writes reach no nicpolicy webhook, 0 otherwise.
pub type UnguardedGauge = Family<KindLabel, Gauge>;

/// Registers the gauge in `registry` (prefixed by the registry: `nicpolicy_unguarded_kinds`
/// in the webhook, `nicpolicy_controller_unguarded_kinds` in the controller).
pub fn register(registry: &mut prometheus_client::registry::Registry, gauge: &UnguardedGauge) {
    registry.register(
        "unguarded_kinds",
        "1 for a CAPVCD kind whose CRD is missing or serves none of the versions nicpolicy's webhook configurations name (its writes are not checked)",
        gauge.clone(),
    );
}

/// What a kind's CRD says about whether its writes reach nicpolicy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Coverage {
    /// The CRD serves at least one registered version.
    Guarded {
        /// The registered versions it serves.
        versions: Vec<String>,
    },
    /// The CRD is not installed; why it matters, in a sentence.
    Missing(String),
    /// The CRD serves none of the registered versions: no write of this kind reaches
    /// nicpolicy; why, in a sentence.
    Unserved(String),
}

/// The name of `kind`'s CRD.
pub fn crd_name(kind: ObjectKind) -> String {
    format!("{}s.{CAPVCD_GROUP}", kind.as_str().to_lowercase())
}

/// Whether writes of `kind` reach nicpolicy, given its CRD (None: not installed).
pub fn coverage(kind: ObjectKind, crd: Option<&CustomResourceDefinition>) -> Coverage {
    let registered = REGISTERED_VERSIONS.join(", ");
    let Some(crd) = crd else {
        return Coverage::Missing(format!(
            "CRD {} is not installed; nicpolicy's webhook configurations name {} at {registered}",
            crd_name(kind),
            kind.as_str()
        ));
    };
    let served: Vec<String> = crd
        .spec
        .versions
        .iter()
        .filter(|v| v.served)
        .map(|v| v.name.clone())
        .collect();
    let guarded: Vec<String> = served
        .iter()
        .filter(|v| REGISTERED_VERSIONS.contains(&v.as_str()))
        .cloned()
        .collect();
    if guarded.is_empty() {
        let served = if served.is_empty() {
            "no version".to_string()
        } else {
            served.join(", ")
        };
        Coverage::Unserved(format!(
            "CRD {} serves {served}; nicpolicy's webhook configurations name {registered}, so no {} write is checked",
            crd_name(kind),
            kind.as_str()
        ))
    } else {
        Coverage::Guarded { versions: guarded }
    }
}

/// Where the Warning Events go: about this pod when `POD_NAME` and `POD_NAMESPACE` are set (the
/// chart sets both through the downward API), else about the CRD itself.
fn regarding(kind: ObjectKind) -> ObjectReference {
    match (
        std::env::var("POD_NAME").ok(),
        std::env::var("POD_NAMESPACE").ok(),
    ) {
        (Some(name), Some(namespace)) => ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(name),
            namespace: Some(namespace),
            ..ObjectReference::default()
        },
        _ => crd_reference(kind),
    }
}

/// A reference to `kind`'s CRD.
fn crd_reference(kind: ObjectKind) -> ObjectReference {
    ObjectReference {
        api_version: Some("apiextensions.k8s.io/v1".into()),
        kind: Some("CustomResourceDefinition".into()),
        name: Some(crd_name(kind)),
        ..ObjectReference::default()
    }
}

/// Watches both CRDs until the process ends, keeping `gauge` current and reporting every
/// change of coverage (a log line; a Warning Event when a kind becomes unguarded). `component`
/// names the reporter (`nicpolicy-webhook`, `nicpolicy-controller`). Must be called inside a
/// Tokio runtime.
pub fn watch(client: kube::Client, gauge: UnguardedGauge, component: &str) {
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: component.to_string(),
            instance: std::env::var("POD_NAME").ok(),
        },
    );
    for kind in ObjectKind::ALL {
        let api: Api<CustomResourceDefinition> = Api::all(client.clone());
        let config =
            watcher::Config::default().fields(&format!("metadata.name={}", crd_name(kind)));
        let (gauge, recorder) = (gauge.clone(), recorder.clone());
        tokio::spawn(async move {
            let stream = watcher(api, config).default_backoff();
            let mut stream = std::pin::pin!(stream);
            // The field selector names one CRD: each event says all there is of it.
            let mut listing: Option<CustomResourceDefinition> = None;
            let mut last: Option<Coverage> = None;
            while let Some(event) = stream.next().await {
                let current = match event {
                    Ok(watcher::Event::Init) => {
                        listing = None;
                        continue;
                    }
                    Ok(watcher::Event::InitApply(crd)) => {
                        listing = Some(crd);
                        continue;
                    }
                    Ok(watcher::Event::InitDone) => listing.take(),
                    Ok(watcher::Event::Apply(crd)) => Some(crd),
                    Ok(watcher::Event::Delete(_)) => None,
                    Err(err) => {
                        tracing::warn!(kind = kind.as_str(), error = %err, "cannot watch the CRD; retrying");
                        continue;
                    }
                };
                let now = coverage(kind, current.as_ref());
                if last.as_ref() == Some(&now) {
                    continue;
                }
                report(kind, &now, &gauge, &recorder).await;
                last = Some(now);
            }
        });
    }
}

async fn report(kind: ObjectKind, now: &Coverage, gauge: &UnguardedGauge, recorder: &Recorder) {
    let label = KindLabel {
        kind: kind.as_str().to_string(),
    };
    match now {
        Coverage::Guarded { versions } => {
            gauge.get_or_create(&label).set(0);
            tracing::info!(
                kind = kind.as_str(),
                versions = %versions.join(", "),
                "writes reach nicpolicy at the versions its webhook configurations name"
            );
        }
        Coverage::Missing(why) | Coverage::Unserved(why) => {
            gauge.get_or_create(&label).set(1);
            tracing::warn!(
                kind = kind.as_str(),
                "{why}: not checked by nicpolicy (docs/deploy.md, \"Runbook\")"
            );
            // Events are grouped into series by regarding object, reason, action and related
            // object (not by note): the CRD is the related object and the action says which
            // case it is, so each distinct problem gets an Event of its own.
            let action = match now {
                Coverage::Missing(_) => "CRDMissing",
                _ => "NoRegisteredVersionServed",
            };
            let event = Event {
                type_: EventType::Warning,
                reason: "KindNotGuarded".to_string(),
                note: Some(format!("{why} (docs/deploy.md, \"Runbook\")")),
                action: action.to_string(),
                secondary: Some(crd_reference(kind)),
            };
            if let Err(err) = recorder.publish(&event, &regarding(kind)).await {
                tracing::warn!(kind = kind.as_str(), error = %err, "cannot publish the Event");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(versions: &[(&str, bool)]) -> CustomResourceDefinition {
        serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "vcdmachines.infrastructure.cluster.x-k8s.io"},
            "spec": {
                "group": CAPVCD_GROUP,
                "scope": "Namespaced",
                "names": {"kind": "VCDMachine", "plural": "vcdmachines"},
                "versions": versions.iter().map(|(name, served)| json!({
                    "name": name, "served": served, "storage": false
                })).collect::<Vec<_>>()
            }
        }))
        .expect("a CRD")
    }

    #[test]
    fn the_release_and_main_are_guarded() {
        let release = crd(&[("v1beta1", true), ("v1beta2", true)]);
        assert_eq!(
            coverage(ObjectKind::VcdMachine, Some(&release)),
            Coverage::Guarded {
                versions: vec!["v1beta2".into()]
            }
        );
        let main = crd(&[("v1beta1", true), ("v1beta2", true), ("v1beta3", true)]);
        assert_eq!(
            coverage(ObjectKind::VcdMachine, Some(&main)),
            Coverage::Guarded {
                versions: vec!["v1beta2".into(), "v1beta3".into()]
            }
        );
    }

    #[test]
    fn a_crd_serving_no_registered_version_or_none_at_all_is_unguarded() {
        let old = crd(&[("v1beta1", true), ("v1beta2", false)]);
        assert_eq!(
            coverage(ObjectKind::VcdMachine, Some(&old)),
            Coverage::Unserved(
                "CRD vcdmachines.infrastructure.cluster.x-k8s.io serves v1beta1; nicpolicy's \
                 webhook configurations name v1beta2, v1beta3, so no VCDMachine write is checked"
                    .into()
            )
        );
        assert_eq!(
            coverage(ObjectKind::VcdMachineTemplate, None),
            Coverage::Missing(
                "CRD vcdmachinetemplates.infrastructure.cluster.x-k8s.io is not installed; \
                 nicpolicy's webhook configurations name VCDMachineTemplate at v1beta2, v1beta3"
                    .into()
            )
        );
    }
}
