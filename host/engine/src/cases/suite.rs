//! Running case files against a policy chain: one [`Outcome`] per case and a [`Report`] for the
//! whole run, which `nicpolicy test`, the workspace's suite tests and the JUnit writer all read.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{Case, Outcome};
use crate::chain::PolicyChain;

/// Runs `case` against `chain`: the case's settings go to the first policy, the others keep
/// theirs, and the combined decision is compared with the expectation.
pub fn run(case: &Case, chain: &PolicyChain) -> Outcome {
    let configured = match chain.with_first_settings(case.settings.clone()) {
        Ok(chain) if case.expect.settings_rejected.is_none() => chain,
        // The settings concern the first policy alone, so its own run reports the refusal (or
        // the unexpected acceptance) exactly as for a single policy. A policy has no source of
        // nondeterminism, so checking the settings again gives the same verdict.
        _ => return case.run(chain.first()),
    };
    let configured = match case.max_input_bytes {
        Some(bytes) => configured.with_max_input_bytes(bytes),
        None => configured,
    };
    // Judged as the webhook judges a review: deletions, ratcheted updates, request faults.
    match crate::lifecycle::judge(&case.request, |request| configured.evaluate(request)) {
        Ok(evaluation) => case.check(&Ok(evaluation.into_evaluation())),
        Err(failure) => {
            let attribution = failure.to_string();
            match case.check(&Err(failure.error)) {
                Outcome::Passed => Outcome::Passed,
                // Say which policy failed: the error alone does not.
                Outcome::Failed { mismatches, .. } => Outcome::Failed {
                    mismatches,
                    actual: attribution,
                },
            }
        }
    }
}

/// One case file's result.
#[derive(Debug)]
pub struct CaseReport {
    /// The case file.
    pub path: PathBuf,
    /// Passed, or what differed (a case file that cannot be loaded fails).
    pub outcome: Outcome,
    /// How long loading and running it took.
    pub elapsed: Duration,
}

impl CaseReport {
    /// The case file's name without extension.
    pub fn name(&self) -> String {
        self.path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// The case file's directory, as given (`.` for a bare file name).
    pub fn directory(&self) -> String {
        match self.path.parent() {
            Some(dir) if dir != Path::new("") => dir.display().to_string(),
            _ => ".".to_string(),
        }
    }

    /// Whether the case passed.
    pub fn passed(&self) -> bool {
        matches!(self.outcome, Outcome::Passed)
    }
}

/// The result of running case files against one chain.
#[derive(Debug)]
pub struct Report {
    /// The chain's name (see [`PolicyChain::name`]).
    pub suite: String,
    /// Every case, in the order run.
    pub cases: Vec<CaseReport>,
    /// Wall-clock time of the whole run.
    pub elapsed: Duration,
}

impl Report {
    /// The cases that failed.
    pub fn failures(&self) -> impl Iterator<Item = &CaseReport> {
        self.cases.iter().filter(|case| !case.passed())
    }

    /// Runs every case file in `paths` against `chain`, in order; `each` sees every case's
    /// report as soon as it is known (for progress output).
    pub fn run(
        paths: &[PathBuf],
        chain: &PolicyChain,
        mut each: impl FnMut(&CaseReport),
    ) -> Report {
        let started = Instant::now();
        let mut cases = Vec::with_capacity(paths.len());
        for path in paths {
            let case_started = Instant::now();
            let outcome = match Case::load(path) {
                Ok(case) => run(&case, chain),
                Err(err) => Outcome::Failed {
                    mismatches: vec!["the case could not be loaded".to_string()],
                    actual: err.to_string(),
                },
            };
            let report = CaseReport {
                path: path.clone(),
                outcome,
                elapsed: case_started.elapsed(),
            };
            each(&report);
            cases.push(report);
        }
        Report {
            suite: chain.name(),
            cases,
            elapsed: started.elapsed(),
        }
    }
}
