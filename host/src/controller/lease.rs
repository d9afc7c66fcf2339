//! Leader election through a `coordination.k8s.io/v1` Lease, as kube-controller-manager does:
//! the holder renews the Lease every third of its duration; another replica takes it over only
//! once it has not been renewed for a whole duration. Only the leader writes reports and Events,
//! so two replicas are safe; on shutdown the leader hands the Lease back at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, PostParams};
use tokio::sync::watch;

/// Which Lease, and who we are.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    /// The Lease's name.
    pub name: String,
    /// Its namespace (the controller's own).
    pub namespace: String,
    /// This replica's identity (its pod name).
    pub identity: String,
    /// How long a Lease holds without renewal.
    pub duration: Duration,
}

/// What one attempt found.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    /// We hold the Lease.
    Held,
    /// Someone else does.
    Other(String),
}

/// Keeps `leading` true while this replica holds the Lease, until `shutdown` turns true; then
/// releases the Lease if held.
pub async fn run(
    client: kube::Client,
    config: LeaseConfig,
    leading: Arc<AtomicBool>,
    mut shutdown: watch::Receiver<bool>,
) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let renew_every = config.duration / 3;
    let mut last_renewal: Option<tokio::time::Instant> = None;
    loop {
        match attempt(&api, &config).await {
            Ok(Attempt::Held) => {
                if !leading.swap(true, Ordering::AcqRel) {
                    tracing::info!(lease = %config.name, identity = %config.identity, "leading");
                }
                last_renewal = Some(tokio::time::Instant::now());
            }
            Ok(Attempt::Other(holder)) => {
                if leading.swap(false, Ordering::AcqRel) {
                    tracing::warn!(lease = %config.name, %holder, "lost the lease");
                }
                last_renewal = None;
            }
            Err(err) => {
                tracing::warn!(lease = %config.name, error = %err, "cannot renew the lease");
                // Past the duration another replica may have taken over: stop writing.
                if last_renewal.is_none_or(|at| at.elapsed() >= config.duration)
                    && leading.swap(false, Ordering::AcqRel)
                {
                    tracing::warn!(lease = %config.name, "lease expired without renewal; standing by");
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(renew_every) => {}
            _ = shutdown.changed() => {}
        }
        if *shutdown.borrow() {
            break;
        }
    }
    if leading.swap(false, Ordering::AcqRel) {
        match release(&api, &config).await {
            Ok(()) => tracing::info!(lease = %config.name, "lease released"),
            Err(err) => {
                tracing::warn!(lease = %config.name, error = %err, "cannot release the lease")
            }
        }
    }
}

fn seconds(duration: Duration) -> i32 {
    i32::try_from(duration.as_secs().max(1)).unwrap_or(i32::MAX)
}

async fn attempt(api: &Api<Lease>, config: &LeaseConfig) -> Result<Attempt, kube::Error> {
    let now = Timestamp::now();
    let existing = api.get_opt(&config.name).await?;
    let Some(mut lease) = existing else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(config.name.clone()),
                namespace: Some(config.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(config.identity.clone()),
                lease_duration_seconds: Some(seconds(config.duration)),
                acquire_time: Some(MicroTime(now)),
                renew_time: Some(MicroTime(now)),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(Attempt::Held),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                Ok(Attempt::Other("(just created)".to_string()))
            }
            Err(err) => Err(err),
        };
    };
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    let holder = spec.holder_identity.clone().unwrap_or_default();
    let duration = spec.lease_duration_seconds.map_or(config.duration, |s| {
        Duration::from_secs(u64::try_from(s).unwrap_or(0))
    });
    let expired = spec.renew_time.as_ref().is_none_or(|MicroTime(at)| {
        now.duration_since(*at) >= SignedDuration::try_from(duration).unwrap_or(SignedDuration::MAX)
    });
    if holder != config.identity {
        if !holder.is_empty() && !expired {
            return Ok(Attempt::Other(holder));
        }
        spec.holder_identity = Some(config.identity.clone());
        spec.acquire_time = Some(MicroTime(now));
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    spec.renew_time = Some(MicroTime(now));
    spec.lease_duration_seconds = Some(seconds(config.duration));
    // The resourceVersion read above makes this a compare-and-swap: of two replicas taking over
    // an expired Lease, one gets a conflict.
    match api
        .replace(&config.name, &PostParams::default(), &lease)
        .await
    {
        Ok(_) => Ok(Attempt::Held),
        Err(kube::Error::Api(status)) if status.code == 409 => {
            Ok(Attempt::Other("(taken concurrently)".to_string()))
        }
        Err(err) => Err(err),
    }
}

async fn release(api: &Api<Lease>, config: &LeaseConfig) -> Result<(), kube::Error> {
    let Some(mut lease) = api.get_opt(&config.name).await? else {
        return Ok(());
    };
    let Some(spec) = lease.spec.as_mut() else {
        return Ok(());
    };
    if spec.holder_identity.as_deref() != Some(config.identity.as_str()) {
        return Ok(());
    }
    // Empty holder: the next replica takes over on its next attempt instead of waiting out
    // the duration.
    spec.holder_identity = None;
    spec.renew_time = None;
    api.replace(&config.name, &PostParams::default(), &lease)
        .await
        .map(drop)
}
