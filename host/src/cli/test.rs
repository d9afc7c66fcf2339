//! `nicpolicy test`: runs case files against a policy chain, with an optional JUnit report.

use std::path::PathBuf;

use anyhow::Context;
use nicpolicy::cases::{self, junit, CaseReport, Outcome, Report};
use nicpolicy::SettingsSource;

use super::policy_args::{load_chain, policy_specs, PolicyArgs, Positions};
use super::{out, usage, Failure};
use crate::exit;

#[derive(clap::Args)]
pub struct TestArgs {
    /// Case files, or directories searched for .yaml/.yml/.json case files.
    #[arg(value_name = "PATH", required = true)]
    paths: Vec<PathBuf>,
    /// Also write a JUnit XML report to FILE: one testcase per case file (classname: its
    /// directory, name: its file name without extension), for CI systems.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Settings of a later policy of the chain (YAML or JSON), placed after its --policy as with
    /// `nicpolicy eval`. The first policy's settings come from each case file.
    #[arg(long = "settings", value_name = "FILE")]
    settings: Vec<PathBuf>,
    #[command(flatten)]
    policy: PolicyArgs,
}

/// Runs `nicpolicy test`.
pub fn run(args: TestArgs, positions: &Positions) -> Result<u8, Failure> {
    let paths = cases::discover(&args.paths).map_err(usage)?;
    if paths.is_empty() {
        return Err(usage(anyhow::anyhow!(
            "no case files (.yaml, .yml, .json) under {}",
            args.paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let specs = policy_specs(&args.policy, &args.settings, positions)?;
    if let Some(SettingsSource::File(path)) = specs.first().map(|spec| &spec.settings) {
        return Err(usage(anyhow::anyhow!(
            "--settings {}: each case file sets the first policy's settings; \
             --settings can only apply to a later policy of the chain",
            path.display()
        )));
    }
    let chain = load_chain(&args.policy, &specs, false)?;
    out::println(&format!(
        "running {} cases against {}",
        paths.len(),
        chain.name()
    ))?;
    // Progress streams case by case; a write failure stops further output and is returned
    // after the run.
    let mut write_failure = None;
    let report = Report::run(&paths, &chain, |case| {
        let verdict = if case.passed() { "ok" } else { "FAILED" };
        if let Err(failure) = out::println(&format!("case {} ... {verdict}", case.name())) {
            write_failure.get_or_insert(failure);
        }
    });
    if let Some(failure) = write_failure {
        return Err(failure);
    }
    let failures: Vec<&CaseReport> = report.failures().collect();
    let mut text = String::new();
    if !failures.is_empty() {
        text.push_str("\nfailures:\n");
        for case in &failures {
            if let Outcome::Failed { mismatches, actual } = &case.outcome {
                text.push_str(&format!("\n---- {} ----\n", case.path.display()));
                for m in mismatches {
                    text.push_str(&format!("  - {m}\n"));
                }
                text.push_str("  actual:\n");
                for line in actual.lines() {
                    text.push_str(&format!("    {line}\n"));
                }
            }
        }
        text.push('\n');
    }
    text.push_str(&format!(
        "{} passed, {} failed\n",
        report.cases.len() - failures.len(),
        failures.len()
    ));
    out::print(&text)?;
    if let Some(junit) = &args.junit {
        std::fs::write(junit, junit::report(&report))
            .with_context(|| format!("{}: cannot write the JUnit report", junit.display()))
            .map_err(usage)?;
    }
    Ok(if failures.is_empty() { 0 } else { exit::DENIED })
}
