//! The JUnit XML report of `nicpolicy test --junit`, for CI systems, written by
//! [`crate::junit`].

use std::fmt::Write as _;

use super::suite::Report;
use super::Outcome;
use crate::junit::{CaseResult, Suite, Suites, TestCase};

/// A JUnit XML report: one testsuite (named after the chain) with one testcase per case file
/// (classname: its directory, name: its file name without extension).
pub fn report(report: &Report) -> String {
    let cases = report
        .cases
        .iter()
        .map(|case| TestCase {
            classname: case.directory(),
            name: case.name(),
            time: case.elapsed,
            result: match &case.outcome {
                Outcome::Passed => CaseResult::Passed,
                Outcome::Failed { mismatches, actual } => {
                    let mut body = String::new();
                    for m in mismatches {
                        let _ = writeln!(body, "- {m}");
                    }
                    let _ = write!(body, "actual:\n{actual}");
                    CaseResult::Failure {
                        message: mismatches.join("; "),
                        body,
                    }
                }
            },
        })
        .collect();
    Suites {
        name: "nicpolicy test".to_string(),
        time: report.elapsed,
        suites: vec![Suite {
            name: report.suite.clone(),
            time: Some(report.elapsed),
            cases,
        }],
    }
    .write()
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use super::*;
    use crate::cases::suite::CaseReport;

    #[test]
    fn a_report_has_one_testcase_per_case_and_counts_failures() {
        let report = Report {
            suite: "nicpolicy-capvcd".to_string(),
            cases: vec![
                CaseReport {
                    path: PathBuf::from("tests/cases/capvcd/01-worker.yaml"),
                    outcome: Outcome::Passed,
                    elapsed: Duration::from_millis(2),
                },
                CaseReport {
                    path: PathBuf::from("02-dmz.yaml"),
                    outcome: Outcome::Failed {
                        mismatches: vec!["allowed: expected false, got true".to_string()],
                        actual: "allowed: true".to_string(),
                    },
                    elapsed: Duration::from_millis(3),
                },
            ],
            elapsed: Duration::from_millis(5),
        };
        let xml = super::report(&report);
        assert!(
            xml.contains(r#"<testsuite name="nicpolicy-capvcd" tests="2" failures="1""#),
            "{xml}"
        );
        assert!(
            xml.contains(
                r#"<testcase classname="tests/cases/capvcd" name="01-worker" time="0.002"/>"#
            ),
            "{xml}"
        );
        assert!(
            xml.contains(r#"<testcase classname="." name="02-dmz""#),
            "{xml}"
        );
        assert!(
            xml.contains(r#"<failure message="allowed: expected false, got true">- allowed: expected false, got true"#),
            "{xml}"
        );
    }
}
