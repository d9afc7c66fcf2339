//! Whether a review is evaluated on the connection's async worker or on a blocking thread.
//!
//! A CAPVCD evaluation takes tens of microseconds; handing it to a blocking thread and back
//! costs more than that in thread switches (docs/benchmarks.md, "Where a review's time goes").
//! So the webhook evaluates on the async worker, under a short [`Budget`]
//! (`evaluation.inlineBudget`): an evaluation still running when it is spent is cut and run
//! again on a blocking thread under the policies' own limits, so a slow or looping policy holds
//! a worker, and the other connections it serves, for one budget at most. After a cut, reviews
//! go straight to blocking threads for [`PAUSE`]: a policy that is slow every time then costs
//! one budget per pause, not one per review.
//!
//! Only a cut pauses, not a merely slow evaluation: the time is wall-clock, and on a busy
//! machine a thread descheduled mid-evaluation makes a fast policy look slow. Pausing on every
//! evaluation over half the budget sent most reviews of a saturated two-core server to
//! blocking threads (docs/benchmarks.md, "Where evaluations run"). The pause is short for the
//! same reason: a cut caused by the machine, not the policy, costs a second of hand-offs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::Budget;

/// How long reviews skip the async worker after a cut there.
pub const PAUSE: Duration = Duration::from_secs(1);

/// Decides where each review is evaluated; shared by all workers.
pub(crate) struct InlineGate {
    started: Instant,
    /// Reviews are evaluated on blocking threads until this many milliseconds after `started`.
    paused_until_ms: AtomicU64,
}

impl Default for InlineGate {
    fn default() -> Self {
        InlineGate {
            started: Instant::now(),
            paused_until_ms: AtomicU64::new(0),
        }
    }
}

impl InlineGate {
    /// The budget for a review evaluated on the worker now; `None` when it is to go to a
    /// blocking thread (`configured` is `None`, or the gate is paused).
    pub fn budget(&self, configured: Option<Duration>) -> Option<Budget> {
        let time = configured?;
        (self.now_ms() >= self.paused_until_ms.load(Ordering::Relaxed)).then(|| Budget::new(time))
    }

    /// Notes how an evaluation on the worker went: pauses the gate when it was cut.
    pub fn record(&self, budget: &Budget) {
        if budget.overran() {
            let until = self
                .now_ms()
                .saturating_add(u64::try_from(PAUSE.as_millis()).unwrap_or(u64::MAX));
            self.paused_until_ms.fetch_max(until, Ordering::Relaxed);
            tracing::debug!(
                budget_ms = u64::try_from(budget.time().as_millis()).unwrap_or(u64::MAX),
                "evaluation cut at the inline budget: reviews go to blocking threads for {}ms",
                PAUSE.as_millis()
            );
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_when_not_configured() {
        assert!(InlineGate::default().budget(None).is_none());
    }

    const FIVE_MS: Option<Duration> = Some(Duration::from_millis(5));

    #[test]
    fn an_evaluation_within_the_budget_keeps_the_worker() {
        let gate = InlineGate::default();
        let budget = gate.budget(FIVE_MS).expect("open");
        gate.record(&budget);
        assert!(gate.budget(FIVE_MS).is_some());
    }

    #[test]
    fn a_cut_sends_reviews_to_blocking_threads_for_the_pause() {
        let gate = InlineGate::default();
        let budget = gate.budget(FIVE_MS).expect("open");
        budget.cut();
        gate.record(&budget);
        assert!(gate.budget(FIVE_MS).is_none());
        std::thread::sleep(PAUSE + Duration::from_millis(20));
        assert!(gate.budget(FIVE_MS).is_some(), "open again after the pause");
    }
}
