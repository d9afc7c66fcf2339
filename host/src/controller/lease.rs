//! Leader election through a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does
//! it, so that two replicas never write at once whatever their clocks say:
//!
//! - the holder renews every retry period (a fifth of the Lease's duration), each API call under
//!   that same deadline: a stalled API server cannot hold the loop (kube's own request timeout is
//!   295 s);
//! - the holder leads only until the **renew deadline** (two thirds of the duration) has passed
//!   since the start of its last successful renewal, measured on its own monotonic clock
//!   ([`Leadership`]): it stops writing before any other replica may take over;
//! - another replica takes over only when the record it **observes** (holder, renew time,
//!   resource version) has not changed for a whole duration on *its own* clock. The Lease's
//!   timestamps, written with the holder's clock, are never compared with this replica's clock.
//!   A Lease handed back (no holder) is taken at once.
//!
//! The holder's renewal is accepted at `t`; a standby sees that record at `t` or later and waits
//! a whole duration from then, while the holder stopped writing at most two thirds of a duration
//! after it sent the renewal (before `t`). On shutdown the leader hands the Lease back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;

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

impl LeaseConfig {
    /// How long the holder leads after the start of its last successful renewal: two thirds of
    /// the duration (client-go's defaults are 10 s of 15 s).
    pub fn renew_deadline(&self) -> Duration {
        self.duration * 2 / 3
    }

    /// How often the Lease is tried, and the deadline of each API call: a fifth of the duration,
    /// so the holder has three tries before its renew deadline.
    pub fn retry_period(&self) -> Duration {
        self.duration / 5
    }
}

/// Whether this replica leads now. Cheap to read on every step of the controller's work.
#[derive(Debug)]
pub struct Leadership {
    /// The instant offsets are counted from.
    base: Instant,
    /// Leads while `now - base` is below this many nanoseconds (0: not leading); `u64::MAX`
    /// leads always (no election).
    until: AtomicU64,
}

impl Leadership {
    /// Leading for good: a single replica without leader election.
    pub fn always() -> Leadership {
        Leadership {
            base: Instant::now(),
            until: AtomicU64::new(u64::MAX),
        }
    }

    /// Not leading until [`run`] renews the Lease.
    pub fn elected() -> Leadership {
        Leadership {
            base: Instant::now(),
            until: AtomicU64::new(0),
        }
    }

    /// Whether this replica leads at this instant.
    pub fn is_leading(&self) -> bool {
        self.leads_at(Instant::now())
    }

    /// How long this replica still leads: `None` when it leads for good, zero when it does not
    /// lead.
    pub fn remaining(&self) -> Option<Duration> {
        let until = self.until.load(Ordering::Acquire);
        if until == u64::MAX {
            return None;
        }
        let now = self.offset(Instant::now());
        Some(Duration::from_nanos(until.saturating_sub(now)))
    }

    fn leads_at(&self, now: Instant) -> bool {
        self.offset(now) < self.until.load(Ordering::Acquire)
    }

    /// Leads until `until`.
    fn hold_until(&self, until: Instant) {
        // Never 0 (not leading) nor `u64::MAX` (leading for good).
        let offset = self.offset(until).clamp(1, u64::MAX - 1);
        self.until.store(offset, Ordering::Release);
    }

    /// Nanoseconds from `base` to `at` (0 before it, `u64::MAX` past what a u64 holds).
    fn offset(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Stops leading now.
    fn step_down(&self) {
        self.until.store(0, Ordering::Release);
    }
}

/// The part of a Lease that changes when its holder renews it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Record {
    holder: String,
    renew_time: Option<String>,
    resource_version: Option<String>,
}

impl Record {
    fn of(lease: &Lease) -> Record {
        let spec = lease.spec.as_ref();
        Record {
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .unwrap_or_default(),
            renew_time: spec
                .and_then(|s| s.renew_time.as_ref())
                .map(|MicroTime(t)| t.to_string()),
            resource_version: lease.metadata.resource_version.clone(),
        }
    }
}

/// What to do with the Lease as it was read.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// There is none: create it, holding it.
    Create,
    /// Ours: renew it.
    Renew,
    /// Free or expired: take it over.
    TakeOver,
    /// Another replica holds it.
    Wait(String),
}

/// What this replica has seen of the Lease, on its own clock.
struct Elector {
    config: LeaseConfig,
    /// The record last read, and when this replica first saw it.
    observed: Option<(Record, Instant)>,
}

impl Elector {
    fn new(config: LeaseConfig) -> Elector {
        Elector {
            config,
            observed: None,
        }
    }

    /// The step for `lease` as read at `now`.
    fn step(&mut self, lease: Option<&Lease>, now: Instant) -> Step {
        let Some(lease) = lease else {
            self.observed = None;
            return Step::Create;
        };
        let record = Record::of(lease);
        let since = match &self.observed {
            Some((seen, since)) if *seen == record => *since,
            _ => now,
        };
        self.observed = Some((record.clone(), since));
        if record.holder == self.config.identity {
            Step::Renew
        } else if record.holder.is_empty()
            || now.saturating_duration_since(since) >= self.config.duration
        {
            Step::TakeOver
        } else {
            Step::Wait(record.holder)
        }
    }
}

/// What one attempt found.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    /// We hold the Lease.
    Held,
    /// Someone else does.
    Other(String),
}

/// Keeps `leadership` up to date while this replica holds the Lease, until `shutdown` turns
/// true; then releases the Lease if held.
pub async fn run(
    client: kube::Client,
    config: LeaseConfig,
    leadership: Arc<Leadership>,
    mut shutdown: watch::Receiver<bool>,
) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let retry = config.retry_period();
    let mut elector = Elector::new(config.clone());
    let mut was_leading = false;
    loop {
        let started = Instant::now();
        match tokio::time::timeout(retry, attempt(&api, &mut elector, started)).await {
            Ok(Ok(Attempt::Held)) => leadership.hold_until(started + config.renew_deadline()),
            Ok(Ok(Attempt::Other(holder))) => {
                leadership.step_down();
                if was_leading {
                    tracing::warn!(lease = %config.name, %holder, "lost the lease");
                }
            }
            Ok(Err(err)) => {
                tracing::warn!(lease = %config.name, error = %err, "cannot renew the lease")
            }
            Err(_) => tracing::warn!(
                lease = %config.name,
                deadline_ms = retry.as_millis(),
                "the lease call did not finish within its deadline"
            ),
        }
        let leading = leadership.is_leading();
        if leading && !was_leading {
            tracing::info!(lease = %config.name, identity = %config.identity, "leading");
        } else if !leading && was_leading {
            tracing::warn!(
                lease = %config.name,
                renew_deadline_ms = config.renew_deadline().as_millis(),
                "stopped leading: the lease was not renewed within the renew deadline"
            );
        }
        was_leading = leading;
        tokio::select! {
            _ = tokio::time::sleep_until(started + retry) => {}
            _ = shutdown.changed() => {}
        }
        if *shutdown.borrow() {
            break;
        }
    }
    if leadership.is_leading() {
        leadership.step_down();
        match tokio::time::timeout(retry, release(&api, &config)).await {
            Ok(Ok(())) => tracing::info!(lease = %config.name, "lease released"),
            Ok(Err(err)) => {
                tracing::warn!(lease = %config.name, error = %err, "cannot release the lease")
            }
            Err(_) => tracing::warn!(lease = %config.name, "the lease release timed out"),
        }
    }
}

fn seconds(duration: Duration) -> i32 {
    i32::try_from(duration.as_secs().max(1)).unwrap_or(i32::MAX)
}

async fn attempt(
    api: &Api<Lease>,
    elector: &mut Elector,
    now: Instant,
) -> Result<Attempt, kube::Error> {
    let config = elector.config.clone();
    let existing = api.get_opt(&config.name).await?;
    let written = Timestamp::now();
    let mut lease = match (elector.step(existing.as_ref(), now), existing) {
        (Step::Wait(holder), _) => return Ok(Attempt::Other(holder)),
        (Step::Create, _) | (_, None) => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(config.name.clone()),
                    namespace: Some(config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(config.identity.clone()),
                    lease_duration_seconds: Some(seconds(config.duration)),
                    acquire_time: Some(MicroTime(written)),
                    renew_time: Some(MicroTime(written)),
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
        }
        (step, Some(lease)) => {
            let mut lease = lease;
            let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
            if step == Step::TakeOver {
                spec.holder_identity = Some(config.identity.clone());
                spec.acquire_time = Some(MicroTime(written));
                spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            }
            lease
        }
    };
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.renew_time = Some(MicroTime(written));
    spec.lease_duration_seconds = Some(seconds(config.duration));
    // The resourceVersion read above makes this a compare-and-swap: of two replicas taking over
    // a free Lease, one gets a conflict.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn config(identity: &str) -> LeaseConfig {
        LeaseConfig {
            name: "nicpolicy-controller".into(),
            namespace: "nicpolicy-system".into(),
            identity: identity.into(),
            duration: Duration::from_secs(15),
        }
    }

    fn lease(holder: &str, renew: &str, version: &str) -> Lease {
        Lease {
            metadata: ObjectMeta {
                resource_version: Some(version.into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: (!holder.is_empty()).then(|| holder.to_string()),
                renew_time: Some(MicroTime(renew.parse().unwrap())),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn a_standby_takes_over_only_after_a_whole_duration_of_an_unchanged_record() {
        let mut standby = Elector::new(config("replica-b"));
        let t0 = Instant::now();
        // The holder's clock runs an hour behind: its renew time looks long expired, which
        // must not matter.
        let held = lease("replica-a", "2026-12-05T10:00:00Z", "100");
        assert_eq!(
            standby.step(Some(&held), t0),
            Step::Wait("replica-a".into())
        );
        assert_eq!(
            standby.step(Some(&held), t0 + Duration::from_secs(14)),
            Step::Wait("replica-a".into())
        );
        // A renewal (new resource version) starts the wait again.
        let renewed = lease("replica-a", "2026-12-05T10:00:05Z", "101");
        assert_eq!(
            standby.step(Some(&renewed), t0 + Duration::from_secs(14)),
            Step::Wait("replica-a".into())
        );
        assert_eq!(
            standby.step(Some(&renewed), t0 + Duration::from_secs(28)),
            Step::Wait("replica-a".into())
        );
        assert_eq!(
            standby.step(Some(&renewed), t0 + Duration::from_secs(29)),
            Step::TakeOver
        );
    }

    #[test]
    fn a_free_lease_is_taken_at_once_and_our_own_is_renewed() {
        let mut elector = Elector::new(config("replica-b"));
        let now = Instant::now();
        assert_eq!(elector.step(None, now), Step::Create);
        assert_eq!(
            elector.step(Some(&lease("", "2026-12-05T10:00:00Z", "7")), now),
            Step::TakeOver
        );
        assert_eq!(
            elector.step(Some(&lease("replica-b", "2026-12-05T10:00:00Z", "8")), now),
            Step::Renew
        );
    }

    #[test]
    fn the_holder_stops_leading_at_the_renew_deadline_before_a_standby_may_take_over() {
        let config = config("replica-a");
        let leadership = Leadership::elected();
        assert!(!leadership.is_leading());
        let sent = Instant::now();
        leadership.hold_until(sent + config.renew_deadline());
        assert!(leadership.leads_at(sent + Duration::from_secs(9)));
        assert!(!leadership.leads_at(sent + config.renew_deadline()));
        // A standby that saw this renewal no earlier than it was sent waits a whole duration.
        assert!(config.renew_deadline() < config.duration);
        assert!(config.retry_period() * 3 <= config.renew_deadline());
        leadership.step_down();
        assert!(!leadership.is_leading());
        assert!(Leadership::always().is_leading());
    }
}
