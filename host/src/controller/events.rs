//! Which findings become Kubernetes Events: an object that newly fails (or fails for new
//! reasons) gets one Warning; the same failure seen again gets none, and a token bucket caps
//! the rate so a policy change that fails thousands of machines cannot flood the API server.

use std::collections::HashMap;
use std::time::Instant;

use crate::audit::{Finding, Verdict};

/// What the gate remembers of an object: the digest of its last failure (none when it passed).
#[derive(Debug, Default)]
pub struct EventGate {
    last: HashMap<String, Option<u64>>,
    bucket: TokenBucket,
    /// Events withheld by the rate limit since start.
    pub dropped: u64,
}

impl EventGate {
    /// A gate allowing `per_minute` events a minute on average, `burst` at once.
    pub fn new(per_minute: u32, burst: u32) -> EventGate {
        EventGate {
            last: HashMap::new(),
            bucket: TokenBucket::new(per_minute, burst),
            dropped: 0,
        }
    }

    /// Whether `finding` deserves an Event now. `key` identifies the object ([`key`]).
    pub fn admit(&mut self, key: &str, finding: &Finding, now: Instant) -> bool {
        let failure = (finding.result == Verdict::Denied).then(|| failure_digest(finding));
        let before = self.last.insert(key.to_string(), failure);
        let newly = failure.is_some() && before.flatten() != failure;
        if !newly {
            return false;
        }
        if self.bucket.take(now) {
            true
        } else {
            // Forget it, so the failure is announced once the rate allows.
            self.last.insert(key.to_string(), None);
            self.dropped += 1;
            false
        }
    }

    /// Remembers that `key` was already announced failing with `violations` (field path and
    /// reason of each), as a PolicyReport written before this process started lists them: a
    /// restarted controller or a new leader does not announce them again.
    pub fn seed<'a>(
        &mut self,
        key: &str,
        violations: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) {
        if !self.last.contains_key(key) {
            self.last
                .insert(key.to_string(), Some(digest(violations.into_iter())));
        }
    }

    /// Forgets that `key` was announced failing (its Event could not be published): the
    /// failure is announced again when it is seen next.
    pub fn forget(&mut self, key: &str) {
        self.last.insert(key.to_string(), None);
    }

    /// Forgets objects that no longer exist.
    pub fn retain(&mut self, mut exists: impl FnMut(&str) -> bool) {
        self.last.retain(|key, _| exists(key));
    }
}

/// How the gate names an object: `namespace/kind/name`, the same for an object audited now and
/// for one a PolicyReport written before lists.
pub fn key(namespace: &str, kind: &str, name: &str) -> String {
    format!("{namespace}/{kind}/{name}")
}

/// The violations' fields and reasons: the same failure gives the same digest.
fn failure_digest(finding: &Finding) -> u64 {
    digest(
        finding
            .decision
            .iter()
            .flat_map(|d| &d.violations)
            .map(|v| (v.field.as_str(), v.reason.as_str())),
    )
}

/// Digest of `(field, reason)` pairs, in any order (a PolicyReport lists them sorted).
fn digest<'a>(violations: impl Iterator<Item = (&'a str, &'a str)>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut pairs: Vec<(&str, &str)> = violations.collect();
    pairs.sort_unstable();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    pairs.hash(&mut hasher);
    hasher.finish()
}

/// A token bucket: `burst` tokens, refilled at `per_minute`.
#[derive(Debug)]
struct TokenBucket {
    tokens: f64,
    burst: f64,
    per_second: f64,
    at: Option<Instant>,
}

impl Default for TokenBucket {
    fn default() -> Self {
        TokenBucket::new(60, 30)
    }
}

impl TokenBucket {
    fn new(per_minute: u32, burst: u32) -> TokenBucket {
        TokenBucket {
            tokens: f64::from(burst),
            burst: f64::from(burst),
            per_second: f64::from(per_minute) / 60.0,
            at: None,
        }
    }

    fn take(&mut self, now: Instant) -> bool {
        if let Some(at) = self.at {
            let elapsed = now.saturating_duration_since(at).as_secs_f64();
            self.tokens = (self.tokens + elapsed * self.per_second).min(self.burst);
        }
        self.at = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::audit::ObjectId;
    use nicpolicy_plugin::{Decision, Reason, Violation};

    fn finding(violations: &[(&str, Reason)]) -> Finding {
        let decision = Decision::from_violations(
            violations
                .iter()
                .map(|(field, reason)| Violation::new(*field, *reason, "bad"))
                .collect(),
        );
        Finding {
            object: ObjectId::worker_for_tests("prod-eu1-md-0-x7k2p"),
            ..Finding::decided_for_tests("prod-eu1-md-0-x7k2p", decision)
        }
    }

    #[test]
    fn one_event_per_new_failure() {
        let mut gate = EventGate::new(60, 10);
        let now = Instant::now();
        let bad = finding(&[("spec.extraOvdcNetworks[1]", Reason::Duplicate)]);
        assert!(gate.admit("uid-1", &bad, now));
        // Seen again (a resync): no second event.
        assert!(!gate.admit("uid-1", &bad, now));
        // Another reason: a new failure.
        let worse = finding(&[
            ("spec.extraOvdcNetworks[1]", Reason::Duplicate),
            ("spec.extraOvdcNetworks[2]", Reason::NotFound),
        ]);
        assert!(gate.admit("uid-1", &worse, now));
        // Fixed, then broken again: announced again.
        assert!(!gate.admit("uid-1", &finding(&[]), now));
        assert!(gate.admit("uid-1", &worse, now));
    }

    #[test]
    fn failures_a_report_already_lists_are_not_announced_again() {
        let mut gate = EventGate::new(60, 10);
        let now = Instant::now();
        let bad = finding(&[
            ("spec.extraOvdcNetworks[2]", Reason::NotFound),
            ("spec.extraOvdcNetworks[1]", Reason::Duplicate),
        ]);
        // As the report lists them: sorted, reasons as words.
        gate.seed(
            "uid-1",
            [
                ("spec.extraOvdcNetworks[1]", "Duplicate"),
                ("spec.extraOvdcNetworks[2]", "NotFound"),
            ],
        );
        assert!(!gate.admit("uid-1", &bad, now));
        // A failure the report did not list is new.
        gate.seed("uid-2", [("spec.extraOvdcNetworks[1]", "Duplicate")]);
        assert!(gate.admit("uid-2", &bad, now));
        // What this process saw itself wins over an older report.
        gate.seed("uid-2", [("spec.extraOvdcNetworks[0]", "NotFound")]);
        assert!(!gate.admit("uid-2", &bad, now));
    }

    #[test]
    fn the_rate_is_capped_and_withheld_failures_come_later() {
        let mut gate = EventGate::new(60, 5);
        let start = Instant::now();
        let bad = finding(&[("spec.extraOvdcNetworks[0]", Reason::NotFound)]);
        let sent = (0..100)
            .filter(|i| gate.admit(&format!("uid-{i}"), &bad, start))
            .count();
        assert_eq!(sent, 5);
        assert_eq!(gate.dropped, 95);
        // A second later one token is back, and a withheld object is announced.
        let later = start + Duration::from_secs(1);
        assert!(gate.admit("uid-50", &bad, later));
        assert!(!gate.admit("uid-51", &bad, later));
    }
}
