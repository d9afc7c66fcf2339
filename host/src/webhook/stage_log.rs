//! Where a served review's time goes, for benchmarks: with `nicpolicy serve --bench-stages`
//! the server times the stages of every review it answers on an async worker (the stage clock
//! of [`nicpolicy_engine::stages`]) and shows them at `/bench/stages`, so a load test can hold them
//! against the CPU the whole server spends per review, in the same run.

use std::sync::Mutex;

use serde_json::{json, Value};

use nicpolicy_engine::stages::{Spent, Stage};

/// Reviews kept at most between two reads: a 20-second load run at 20,000 reviews/s fits, and
/// memory stays bounded (about 320 bytes a review, so at most about 170 MB).
const CAPACITY: usize = 1 << 19;

/// Share of the slowest reviews left out of the means: on a loaded machine a review preempted
/// in the middle of a stage shows milliseconds that no stage costs.
const TRIM: f64 = 0.05;

/// The stage times of the reviews answered so far.
#[derive(Default)]
pub struct StageLog {
    reviews: Mutex<Vec<Spent>>,
}

impl StageLog {
    /// Keeps one review's stage times (none past the first 2^19 since the last read).
    pub fn push(&self, spent: Spent) {
        if let Ok(mut reviews) = self.reviews.lock() {
            if reviews.len() < CAPACITY {
                reviews.push(spent);
            }
        }
    }

    /// The mean time of each stage over the reviews kept, in nanoseconds, the slowest
    /// 5 % of them by total left out; means, unlike medians, add up to the mean total.
    /// Then forgets them, so the next call covers the reviews since this one.
    pub fn take_summary(&self) -> Value {
        let mut reviews = match self.reviews.lock() {
            Ok(mut reviews) => std::mem::take(&mut *reviews),
            Err(_) => Vec::new(),
        };
        reviews.sort_by_key(Spent::total);
        let kept = &reviews[..reviews.len() - (reviews.len() as f64 * TRIM) as usize];
        let mean = |time: &dyn Fn(&Spent) -> std::time::Duration| {
            if kept.is_empty() {
                return 0.0;
            }
            kept.iter().map(|s| time(s).as_nanos() as f64).sum::<f64>() / kept.len() as f64
        };
        let stages: Vec<Value> = Stage::ALL
            .iter()
            .map(|stage| json!({"stage": stage.describe(), "meanNs": mean(&|s| s.get(*stage))}))
            .collect();
        json!({
            "reviews": reviews.len(),
            "kept": kept.len(),
            "stages": stages,
            "unmarkedMeanNs": mean(&|s| s.unmarked),
            "totalMeanNs": mean(&Spent::total),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nicpolicy_engine::stages;
    use std::time::Duration;

    #[test]
    fn means_add_up_and_the_slowest_reviews_are_left_out() {
        let log = StageLog::default();
        for pause in [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 50] {
            let ((), spent) = stages::record(|| {
                std::thread::sleep(Duration::from_millis(pause));
                stages::mark(Stage::BodyParse);
            });
            log.push(spent);
        }
        let summary = log.take_summary();
        assert_eq!(summary["reviews"], 20);
        assert_eq!(summary["kept"], 19);
        let body = summary["stages"][0]["meanNs"].as_f64().expect("a mean");
        assert!(
            (1e6..20e6).contains(&body),
            "the 50 ms review is left out: {body}"
        );
        let sum: f64 = summary["stages"]
            .as_array()
            .expect("stages")
            .iter()
            .map(|s| s["meanNs"].as_f64().unwrap_or_default())
            .sum::<f64>()
            + summary["unmarkedMeanNs"].as_f64().unwrap_or_default();
        let total = summary["totalMeanNs"].as_f64().expect("a total");
        assert!((sum - total).abs() < 1.0, "{sum} vs {total}");
        assert_eq!(log.take_summary()["reviews"], 0, "forgotten once taken");
    }
}
