//! Retries of a namespace's report or Events, with exponential backoff: a report the API
//! server refuses (too large, a webhook of its own, RBAC removed) is tried again after 1 s, 2 s,
//! 4 s, ... up to 5 minutes, not on every pass.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

/// Namespaces waiting for a retry.
#[derive(Debug)]
pub struct Retries {
    waiting: BTreeMap<String, Retry>,
    base: Duration,
    max: Duration,
}

#[derive(Debug)]
struct Retry {
    failures: u32,
    due: Instant,
    /// Handed out by [`Retries::due`] since the last failure.
    queued: bool,
}

impl Default for Retries {
    fn default() -> Self {
        Retries::new(Duration::from_secs(1), Duration::from_secs(300))
    }
}

impl Retries {
    /// Waits of `base`, doubling after each further failure, at most `max`.
    pub fn new(base: Duration, max: Duration) -> Retries {
        Retries {
            waiting: BTreeMap::new(),
            base,
            max,
        }
    }

    /// `namespace` failed at `now`: the wait before it is tried again.
    pub fn failed(&mut self, namespace: &str, now: Instant) -> Duration {
        let failures = self
            .waiting
            .get(namespace)
            .map_or(1, |r| r.failures.saturating_add(1));
        let delay = self
            .base
            .saturating_mul(1u32 << (failures - 1).min(20))
            .min(self.max);
        self.waiting.insert(
            namespace.to_string(),
            Retry {
                failures,
                due: now + delay,
                queued: false,
            },
        );
        delay
    }

    /// `namespace` was written: no more waiting.
    pub fn succeeded(&mut self, namespace: &str) {
        self.waiting.remove(namespace);
    }

    /// Whether `namespace` must not be tried at `now`.
    pub fn holding(&self, namespace: &str, now: Instant) -> bool {
        self.waiting.get(namespace).is_some_and(|r| now < r.due)
    }

    /// The namespaces whose wait is over at `now`, each once per failure.
    pub fn due(&mut self, now: Instant) -> Vec<String> {
        self.waiting
            .iter_mut()
            .filter(|(_, r)| !r.queued && r.due <= now)
            .map(|(namespace, r)| {
                r.queued = true;
                namespace.clone()
            })
            .collect()
    }

    /// Namespaces waiting.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_maximum_and_end_on_success() {
        let mut retries = Retries::new(Duration::from_secs(1), Duration::from_secs(10));
        let t0 = Instant::now();
        let waits: Vec<u64> = (0..6)
            .map(|_| retries.failed("prod-eu1", t0).as_secs())
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 10, 10]);
        assert!(retries.holding("prod-eu1", t0 + Duration::from_secs(9)));
        assert!(retries.due(t0 + Duration::from_secs(9)).is_empty());
        assert_eq!(retries.due(t0 + Duration::from_secs(10)), ["prod-eu1"]);
        // Handed out once per failure.
        assert!(retries.due(t0 + Duration::from_secs(11)).is_empty());
        retries.succeeded("prod-eu1");
        assert!(retries.is_empty());
        assert_eq!(retries.failed("prod-eu1", t0).as_secs(), 1);
    }
}
