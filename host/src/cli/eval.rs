//! `nicpolicy eval`: evaluates one machine and prints the decision.

use std::fmt::Write as _;

use nicpolicy::audit::{evaluate_all, Finding, Inputs, Summary, Verdict};
use nicpolicy::manifest::{self, ManifestFile};
use nicpolicy::plugin::Inventory;
use nicpolicy::PolicyChain;

use super::machine::{Judged, MachineArgs};
use super::policy_args::Positions;
use super::render::render_decision;
use super::{usage, Failure, Format};
use crate::exit;

#[derive(clap::Args)]
pub struct EvalArgs {
    #[command(flatten)]
    machine: MachineArgs,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    output: Format,
    /// Also print load and evaluation times, cache use and the policy's log lines (stderr).
    #[arg(short, long)]
    verbose: bool,
    /// Say where each NIC and violation comes from: the cluster's ovdcNetwork, a zone, role
    /// defaults, the machine's own list or a setting; the rule, the setting and the policy of
    /// the chain behind it. With -o json|yaml, each NIC and violation keeps its `source`.
    #[arg(long)]
    explain: bool,
}

/// Runs `nicpolicy eval`.
pub fn run(args: EvalArgs, positions: &Positions) -> Result<u8, Failure> {
    let machines = args.machine.machines()?;
    if args.machine.machine_name.is_none() && machines.machines().count() > 1 {
        return eval_many(args, machines, positions);
    }
    let Judged {
        request,
        chain,
        evaluation,
    } = args.machine.judge_in(&machines, positions, args.verbose)?;
    if args.verbose {
        for line in &evaluation.logs {
            eprintln!("policy log [{:?}]: {}", line.level, line.message);
        }
        eprintln!(
            "evaluated in {:.3} ms",
            evaluation.elapsed.as_secs_f64() * 1e3
        );
    }
    // Warn-mode policies (--mode warn) said as the webhook says them: what enforcing would
    // deny, and what they would have changed.
    let mut decision = evaluation.decision.clone();
    if !args.explain {
        nicpolicy::plugin::source::strip(&mut decision);
    }
    decision.warnings.extend(evaluation.warn_mode_warnings());
    decision
        .warnings
        .extend(evaluation.warn_mode_changes(request.kind));
    let decision = &decision;
    let unapplied = &evaluation.unapplied;
    let output = Output {
        decision,
        unapplied,
    };
    let text = match args.output {
        Format::Table => render_decision(&request, &chain, decision, unapplied, args.explain),
        Format::Json => serde_json::to_string_pretty(&output).map_err(usage)? + "\n",
        Format::Yaml => serde_yaml_ng::to_string(&output).map_err(usage)?,
    };
    super::out::print(&text)?;
    Ok(if decision.allowed { 0 } else { exit::DENIED })
}

/// A machine file with several machines: each against its own cluster, through the audit.
fn eval_many(
    args: EvalArgs,
    machines: manifest::ManifestFile,
    positions: &Positions,
) -> Result<u8, Failure> {
    let inputs = &args.machine;
    if let Some(old) = &inputs.old {
        return Err(usage(anyhow::anyhow!(
            "--old {}: an UPDATE is of one machine; choose it with --machine-name",
            old.display()
        )));
    }
    let clusters = inputs
        .cluster
        .as_deref()
        .map(manifest::ManifestFile::read)
        .transpose()
        .map_err(usage)?;
    let inventory = inputs.inventory()?;
    let chain = inputs.chain(positions, args.verbose)?;
    evaluate_each(
        machines,
        clusters,
        inventory,
        &chain,
        args.output,
        args.explain,
    )
}

/// The decision as `-o json|yaml` prints it: its fields, then `unapplied`, the plan fields the
/// provisioner will not apply (left out when there are none).
#[derive(serde::Serialize)]
struct Output<'a> {
    #[serde(flatten)]
    decision: &'a nicpolicy::plugin::Decision,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    unapplied: &'a [nicpolicy::plugin::provisioner::Unapplied],
}

/// `nicpolicy eval` of a file with several machines: each against its own cluster in `files`,
/// one block each (or one list item each) and a summary line.
fn evaluate_each(
    machine_file: ManifestFile,
    cluster_file: Option<ManifestFile>,
    inventory: Option<Inventory>,
    chain: &PolicyChain,
    output: Format,
    explain: bool,
) -> Result<u8, Failure> {
    let machines = machine_file.path.clone();
    let mut inputs = Inputs::from_files(vec![machine_file]);
    if let Some(file) = cluster_file {
        if file.path != machines {
            inputs.add(file);
        }
    }
    let subjects: Vec<_> = inputs
        .subjects(&nicpolicy::inventories::Inventories::single(inventory))
        .into_iter()
        .filter(|s| {
            s.object
                .source
                .as_deref()
                .is_some_and(|src| src.starts_with(&machines.display().to_string()))
        })
        .collect();
    let mut findings = evaluate_all(subjects, chain, None);
    if !explain {
        for decision in findings.iter_mut().filter_map(|f| f.decision.as_mut()) {
            nicpolicy::plugin::source::strip(decision);
        }
    }
    let summary = Summary::of(&findings);
    let text = match output {
        Format::Table => {
            let blocks: Vec<String> = findings
                .iter()
                .map(|finding| finding_block(chain, finding, explain))
                .collect();
            format!("{}\n{}\n", blocks.join("\n"), summary.line())
        }
        Format::Json => serde_json::to_string_pretty(&findings).map_err(usage)? + "\n",
        Format::Yaml => serde_yaml_ng::to_string(&findings).map_err(usage)?,
    };
    super::out::print(&text)?;
    Ok(summary.exit_code())
}

/// One machine as `nicpolicy eval` prints it; machines without a decision say why.
fn finding_block(chain: &PolicyChain, finding: &Finding, explain: bool) -> String {
    if let (Some(request), Some(decision)) = (&finding.request, &finding.decision) {
        return render_decision(request, chain, decision, &finding.unapplied, explain);
    }
    let mut out = String::new();
    let _ = writeln!(out, "Machine:   {}", finding.object);
    if let Some(cluster) = &finding.cluster {
        let _ = writeln!(out, "Cluster:   {}", cluster.name);
    }
    let message = finding.message.as_deref().unwrap_or("");
    let _ = match finding.result {
        // The message says "not checked: why".
        Verdict::Skipped => writeln!(out, "Decision:  {message}"),
        Verdict::Failed => writeln!(out, "Decision:  policy failed: {message}"),
        _ => writeln!(out, "Decision:  not evaluated: {message}"),
    };
    out
}
