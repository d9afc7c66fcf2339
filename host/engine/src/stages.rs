//! Where the time of a review or an evaluation goes, stage by stage: a clock per thread that
//! the review path and [`crate::Policy`] mark as they go. Off unless [`record`] turns it on for
//! the calling thread (the `review_stages` benchmark does), and then a mark costs one clock read.
//!
//! A mark charges the time since the previous mark to its stage, so the stages of one
//! [`record`] add up to its whole time: nothing is left out, and time between two marks that
//! nobody expected shows up in the stage of the second.
//!
//! The guest's own stages (decoding the request, the rules, encoding the decision) are visible
//! only in a policy built with the plugin's `stage-marks` feature, which logs
//! [`nicpolicy_plugin::guest::STAGE_DECODED`] and [`nicpolicy_plugin::guest::STAGE_DECIDED`]
//! through `nicpolicy.log` at those two points; with any other build, the whole call counts as
//! [`Stage::Guest`].

use std::cell::RefCell;
use std::time::{Duration, Instant};

/// One stage of a review, in the order a review goes through them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The request body parsed as JSON.
    BodyParse,
    /// The AdmissionReview read out of it, kind and operation checked.
    ReviewDecode,
    /// The object (and stored object) mapped to the policy schema.
    ObjectMapping,
    /// The machine's VCDCluster found.
    ClusterLookup,
    /// The policy [`crate::plugin::Request`] assembled.
    RequestBuild,
    /// The request encoded as JSON for the policy.
    RequestEncode,
    /// A store and a fresh instance made, the ABI exports looked up.
    Instantiate,
    /// Input memory reserved in the instance and the request copied in.
    InputCopy,
    /// The guest call as a whole, when the policy does not mark its stages.
    Guest,
    /// The guest decoding the request (policy built with `stage-marks`).
    GuestDecode,
    /// The rules: in the guest (policy built with `stage-marks`) or native.
    Rules,
    /// The guest encoding its decision (policy built with `stage-marks`).
    GuestEncode,
    /// The host decoding and checking the decision.
    OutputDecode,
    /// The instance dropped: its memory slot reset for the next one.
    InstanceDrop,
    /// The chain combining its policies' decisions, and the lifecycle rules.
    Combine,
    /// The JSON patch (mutate) or the field causes (validate).
    Patch,
    /// The AdmissionReview answer encoded.
    ResponseEncode,
    /// Prometheus metrics.
    Metrics,
    /// Log events.
    Logging,
}

impl Stage {
    /// Every stage, in order.
    pub const ALL: [Stage; 19] = [
        Stage::BodyParse,
        Stage::ReviewDecode,
        Stage::ObjectMapping,
        Stage::ClusterLookup,
        Stage::RequestBuild,
        Stage::RequestEncode,
        Stage::Instantiate,
        Stage::InputCopy,
        Stage::Guest,
        Stage::GuestDecode,
        Stage::Rules,
        Stage::GuestEncode,
        Stage::OutputDecode,
        Stage::InstanceDrop,
        Stage::Combine,
        Stage::Patch,
        Stage::ResponseEncode,
        Stage::Metrics,
        Stage::Logging,
    ];

    /// What the stage covers, for tables.
    pub fn describe(self) -> &'static str {
        match self {
            Stage::BodyParse => "body parse (JSON)",
            Stage::ReviewDecode => "AdmissionReview decode, kind checks",
            Stage::ObjectMapping => "object mapping",
            Stage::ClusterLookup => "cluster lookup",
            Stage::RequestBuild => "policy request build",
            Stage::RequestEncode => "request encode",
            Stage::Instantiate => "instantiate (store, instance, exports)",
            Stage::InputCopy => "input copy (alloc, write)",
            Stage::Guest => "guest call (decode, rules, encode)",
            Stage::GuestDecode => "guest decode",
            Stage::Rules => "rules",
            Stage::GuestEncode => "guest encode",
            Stage::OutputDecode => "output decode and checks",
            Stage::InstanceDrop => "instance drop (slot reset)",
            Stage::Combine => "chain combine, lifecycle rules",
            Stage::Patch => "patch / causes building",
            Stage::ResponseEncode => "response encode",
            Stage::Metrics => "metrics",
            Stage::Logging => "logging",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Time spent per stage, indexed like [`Stage::ALL`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Spent {
    stages: [Duration; Stage::ALL.len()],
    /// Time after the last mark, up to the end of the recording.
    pub unmarked: Duration,
}

impl Spent {
    /// Time charged to `stage`.
    pub fn get(&self, stage: Stage) -> Duration {
        self.stages[stage.index()]
    }

    /// The whole recorded time.
    pub fn total(&self) -> Duration {
        self.stages.iter().sum::<Duration>() + self.unmarked
    }
}

/// The clock of a recording thread.
struct Clock {
    last: Instant,
    spent: Spent,
    /// The guest marked a stage during the current call.
    guest_marked: bool,
}

thread_local! {
    static CLOCK: RefCell<Option<Clock>> = const { RefCell::new(None) };
}

/// Runs `f` with the stage clock on for this thread, and returns its result with the time
/// each stage took. Recordings do not nest: an inner one takes over until it ends.
pub fn record<R>(f: impl FnOnce() -> R) -> (R, Spent) {
    let outer = CLOCK.with(|clock| {
        clock.borrow_mut().replace(Clock {
            last: Instant::now(),
            spent: Spent::default(),
            guest_marked: false,
        })
    });
    let result = f();
    let now = Instant::now();
    let spent = CLOCK
        .with(|clock| std::mem::replace(&mut *clock.borrow_mut(), outer))
        .map(|clock| {
            let mut spent = clock.spent;
            spent.unmarked = now.saturating_duration_since(clock.last);
            spent
        })
        .unwrap_or_default();
    (result, spent)
}

/// Charges the time since the previous mark to `stage`, when this thread is recording.
#[inline]
pub fn mark(stage: Stage) {
    CLOCK.with(|clock| {
        if let Some(clock) = clock.borrow_mut().as_mut() {
            let now = Instant::now();
            clock.spent.stages[stage.index()] += now.saturating_duration_since(clock.last);
            clock.last = now;
            if matches!(stage, Stage::GuestDecode | Stage::Rules) {
                clock.guest_marked = true;
            }
        }
    });
}

/// Whether this thread is recording (a guest's stage marks are read only then).
pub fn recording() -> bool {
    CLOCK.with(|clock| clock.borrow().is_some())
}

/// Marks the return from a guest call: [`Stage::GuestEncode`] after the guest marked its own
/// stages, else the whole call as [`Stage::Guest`].
pub fn mark_guest_return() {
    let marked = CLOCK.with(|clock| {
        clock
            .borrow_mut()
            .as_mut()
            .map(|clock| std::mem::take(&mut clock.guest_marked))
    });
    match marked {
        Some(true) => mark(Stage::GuestEncode),
        Some(false) => mark(Stage::Guest),
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_add_up_to_the_recording_and_nothing_is_kept_after_it() {
        let ((), spent) = record(|| {
            std::thread::sleep(Duration::from_millis(2));
            mark(Stage::BodyParse);
            mark_guest_return();
            mark(Stage::Rules);
            mark_guest_return();
        });
        assert!(spent.get(Stage::BodyParse) >= Duration::from_millis(2));
        let sum: Duration = Stage::ALL.iter().map(|s| spent.get(*s)).sum();
        assert_eq!(sum + spent.unmarked, spent.total());
        assert!(!recording());
        // Outside a recording, marks do nothing.
        mark(Stage::BodyParse);
        assert!(!recording());
    }

    #[test]
    fn a_guest_that_marks_nothing_is_one_guest_stage() {
        let ((), spent) = record(|| {
            std::thread::sleep(Duration::from_millis(1));
            mark_guest_return();
        });
        assert!(spent.get(Stage::Guest) >= Duration::from_millis(1));
        assert_eq!(spent.get(Stage::GuestEncode), Duration::ZERO);
    }
}
