//! `nicpolicy audit`: every machine and machine template of a folder of manifests or of a live
//! cluster, with its decision, grouped by cluster, with totals by rule and, with
//! `--candidate`, what a candidate chain would change. Also `nicpolicy eval` of a file with
//! several machines.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use nicpolicy::audit::capacity::Capacity;
use nicpolicy::audit::summary::by_cluster;
use nicpolicy::audit::{evaluate_all, Finding, Inputs, Summary, Verdict};
use nicpolicy::inventories::{Inventories, Missing};
use nicpolicy::manifest::ManifestFile;
use nicpolicy::PolicyChain;

use nicpolicy::junit::{CaseResult, Suite, Suites, TestCase};
use nicpolicy::PolicySource;

use super::policy_args::{
    load_chain, parse_policy_source, policy_specs, PolicyArgs, Positions, ProvisionerArgs,
};
use super::render::table;
use super::{usage, Failure, Format};

#[derive(clap::Args)]
pub struct AuditArgs {
    /// Manifest files, or folders searched recursively for .yaml, .yml and .json files (a
    /// GitOps repository, `clusterctl generate cluster` outputs). Without any, the live cluster
    /// of the current kubeconfig context (or the in-cluster credentials) is audited.
    #[arg(value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Kubeconfig file for a live cluster (default: $KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long, value_name = "FILE", conflicts_with = "paths")]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use.
    #[arg(long, value_name = "NAME", conflicts_with = "paths")]
    context: Option<String>,
    /// Only this namespace (repeatable); every namespace when omitted.
    #[arg(short = 'n', long = "namespace", value_name = "NAMESPACE")]
    namespaces: Vec<String>,
    /// The Cluster API version Clusters and ClusterClasses are read at, in a live cluster
    /// [default: the newest the API server serves of v1beta2, v1beta1].
    #[arg(long, value_name = "VERSION")]
    cluster_api_version: Option<String>,
    /// The org VDC's networks (see docs/schema.md); with it, unknown networks are denied. With
    /// --vdc-inventory, the inventory of every org VDC without one of its own.
    #[arg(long, value_name = "FILE")]
    inventory: Option<PathBuf>,
    /// An org VDC's own inventory, OVDC=FILE (repeatable): machines of a cluster in that VDC
    /// (VCDCluster spec.ovdc, or their zone's ovdc) are judged against it (docs/schema.md,
    /// "Inventories per org VDC").
    #[arg(long = "vdc-inventory", value_name = "OVDC=FILE", value_parser = parse_vdc_inventory)]
    vdc_inventories: Vec<(String, PathBuf)>,
    /// A policy's settings, after its --policy (as with `nicpolicy eval`).
    #[arg(long = "settings", value_name = "FILE")]
    settings: Vec<PathBuf>,
    #[command(flatten)]
    policy: PolicyArgs,
    #[command(flatten)]
    provisioner: ProvisionerArgs,
    #[command(flatten)]
    candidate: CandidateArgs,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    output: Format,
    /// A VCDMachine's VM as Cloud Director returns its NetworkConnectionSection (GET
    /// <vm>/networkConnectionSection/, saved to FILE): it is compared with what the provisioner
    /// (--provisioner) builds for the machine's plan and each difference reported as drift (a
    /// NIC missing, another network or order, another mode or adapter); a DHCP NIC still
    /// without its address is pending. Repeatable; exit code 1 when a VM drifted.
    #[arg(long = "vm-nics", value_name = "[NAMESPACE/]NAME=FILE", value_parser = parse_vm_nics)]
    vm_nics: Vec<(String, PathBuf)>,
    /// Also write a JUnit XML report to FILE: one testsuite per cluster, one testcase per
    /// machine (denied: a failure; not evaluated: an error; skipped: skipped).
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Also print the time taken (stderr).
    #[arg(short, long)]
    verbose: bool,
}

/// The candidate chain of shadow mode: the same options as the chain in force, prefixed.
#[derive(clap::Args)]
pub struct CandidateArgs {
    /// A policy of the candidate chain (shadow mode): same syntax as --policy, repeat to chain.
    /// Every machine is also evaluated with it and the differences are shown: newly denied,
    /// newly allowed, another NIC plan.
    #[arg(
        long = "candidate",
        value_name = "FILE.wasm|builtin:NAME",
        value_parser = parse_policy_source
    )]
    candidates: Vec<PolicySource>,
    /// Settings of the --candidate before it.
    #[arg(long = "candidate-settings", value_name = "FILE")]
    candidate_settings: Vec<PathBuf>,
    /// Refuse the --candidate before it unless its sha256 is this.
    #[arg(long = "candidate-sha256", value_name = "HEX")]
    candidate_sha256: Vec<String>,
}

/// Runs `nicpolicy audit`.
pub fn run(
    args: AuditArgs,
    positions: &Positions,
    candidate_positions: &Positions,
) -> Result<u8, Failure> {
    let started = Instant::now();
    let by_vdc: BTreeMap<String, PathBuf> = args.vdc_inventories.iter().cloned().collect();
    if by_vdc.len() < args.vdc_inventories.len() {
        return Err(usage(anyhow::anyhow!(
            "--vdc-inventory names an org VDC twice"
        )));
    }
    let inventories =
        Inventories::read(args.inventory.as_deref(), &by_vdc, Missing::Refused).map_err(usage)?;
    let specs = policy_specs(&args.policy, &args.settings, positions)?;
    let chain = args
        .provisioner
        .apply(load_chain(&args.policy, &specs, args.verbose)?)?;
    let candidate = candidate_chain(
        &args.policy,
        &args.candidate,
        candidate_positions,
        args.verbose,
    )?
    .map(|candidate| args.provisioner.apply(candidate))
    .transpose()?;

    let (inputs, notes) = if args.paths.is_empty() {
        let (files, notes) = live_files(&args).map_err(usage)?;
        (Inputs::from_files(files), notes)
    } else {
        (Inputs::read(&args.paths).map_err(usage)?, Vec::new())
    };
    for note in &notes {
        eprintln!("note: {note}");
    }
    let mut subjects = inputs.subjects(&inventories);
    if !args.namespaces.is_empty() {
        subjects.retain(|s| args.namespaces.contains(&s.object.namespace));
    }
    let read = started.elapsed();
    let mut findings = evaluate_all(
        subjects,
        &chain,
        candidate
            .as_ref()
            .map(|c| c as &dyn nicpolicy::audit::Chains),
    );
    let drifted = compare_vms(&chain, &mut findings, &args.vm_nics)?;
    let capacity = Capacity::of(
        &inventories.pools,
        &inputs.files,
        &findings,
        chain.builder(),
    );
    let summary = Summary::of(&findings);
    if args.verbose {
        eprintln!(
            "read {} files in {:.1} ms, evaluated {} machines in {:.1} ms",
            inputs.files.len(),
            read.as_secs_f64() * 1e3,
            findings.len(),
            (started.elapsed() - read).as_secs_f64() * 1e3
        );
    }
    let unreadable: Vec<String> = inputs.unreadable.iter().map(|e| e.to_string()).collect();
    let text = match args.output {
        Format::Table => render_audit(
            &chain,
            candidate.as_ref(),
            &findings,
            &summary,
            capacity.as_ref(),
            &unreadable,
        ),
        Format::Json | Format::Yaml => {
            let mut report =
                report_value(&chain, candidate.as_ref(), &findings, &summary, &unreadable);
            if let Some(capacity) = &capacity {
                report["capacity"] = serde_json::to_value(capacity).map_err(usage)?;
            }
            if args.output == Format::Json {
                serde_json::to_string_pretty(&report).map_err(usage)? + "\n"
            } else {
                serde_yaml_ng::to_string(&report).map_err(usage)?
            }
        }
    };
    super::out::print(&text)?;
    if let Some(path) = &args.junit {
        std::fs::write(path, junit_report(&findings, started.elapsed()))
            .with_context(|| format!("{}: cannot write the JUnit report", path.display()))
            .map_err(usage)?;
    }
    let short = capacity.as_ref().is_some_and(Capacity::short);
    let code = match summary.exit_code() {
        0 if drifted || short => crate::exit::DENIED,
        code => code,
    };
    // A file that could not be read is bad input, unless a denial already says more.
    Ok(if code == 0 && !unreadable.is_empty() {
        crate::exit::USAGE
    } else {
        code
    })
}

/// `OVDC=FILE` of `--vdc-inventory`.
fn parse_vdc_inventory(text: &str) -> Result<(String, PathBuf), String> {
    match text.split_once('=') {
        Some((vdc, file)) if !vdc.trim().is_empty() && !file.is_empty() => {
            Ok((vdc.to_string(), PathBuf::from(file)))
        }
        _ => Err(format!(
            "{text:?} is not OVDC=FILE (the org VDC as a VCDCluster names it, then its inventory)"
        )),
    }
}

/// `[NAMESPACE/]NAME=FILE` of `--vm-nics`.
fn parse_vm_nics(text: &str) -> Result<(String, PathBuf), String> {
    match text.split_once('=') {
        Some((name, file)) if !name.is_empty() && !file.is_empty() => {
            Ok((name.to_string(), PathBuf::from(file)))
        }
        _ => Err(format!(
            "{text:?} is not [NAMESPACE/]NAME=FILE (the VCDMachine, then its saved \
             NetworkConnectionSection)"
        )),
    }
}

/// Compares each `--vm-nics` section with what the chain's provisioner builds for the plan of
/// its VCDMachine's finding; whether any VM drifted.
fn compare_vms(
    chain: &PolicyChain,
    findings: &mut [Finding],
    vms: &[(String, PathBuf)],
) -> Result<bool, Failure> {
    let provisioner = chain.builder();
    let mut drifted = false;
    for (name, path) in vms {
        let vm = nicpolicy::vcd::read_section(path)
            .with_context(|| format!("--vm-nics {}", path.display()))
            .map_err(usage)?;
        let (namespace, machine) = match name.split_once('/') {
            Some((namespace, machine)) => (Some(namespace), machine),
            None => (None, name.as_str()),
        };
        let finding = findings
            .iter_mut()
            .find(|f| {
                f.object.kind == "VCDMachine"
                    && f.object.name == machine
                    && namespace.is_none_or(|ns| f.object.namespace == ns)
            })
            .ok_or_else(|| {
                usage(anyhow::anyhow!(
                    "--vm-nics {name}: no VCDMachine of that name among the audited machines"
                ))
            })?;
        let built = finding.built_nics(provisioner);
        finding.drift = nicpolicy::vcd::drift(&built, &vm);
        finding.pending = nicpolicy::vcd::pending(&built, &vm);
        drifted |= !finding.drift.is_empty();
    }
    Ok(drifted)
}

/// The candidate chain, when `--candidate` is given.
fn candidate_chain(
    policy: &PolicyArgs,
    args: &CandidateArgs,
    positions: &Positions,
    verbose: bool,
) -> Result<Option<PolicyChain>, Failure> {
    if args.candidates.is_empty() {
        if let Some(path) = args.candidate_settings.first() {
            return Err(usage(anyhow::anyhow!(
                "--candidate-settings {} needs a --candidate before it",
                path.display()
            )));
        }
        return Ok(None);
    }
    // The candidate runs under the same limits and cache use as the chain in force.
    let candidate = policy.with_sources(args.candidates.clone(), args.candidate_sha256.clone());
    let specs = policy_specs(&candidate, &args.candidate_settings, positions)?;
    load_chain(&candidate, &specs, verbose).map(Some)
}

/// Lists the audited objects of the live cluster.
fn live_files(args: &AuditArgs) -> anyhow::Result<(Vec<ManifestFile>, Vec<String>)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the I/O runtime")?;
    runtime.block_on(async {
        let config = match (&args.kubeconfig, &args.context) {
            (None, None) => kube::Config::infer()
                .await
                .context("no cluster to audit: give manifest PATHs, or a kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config) or in-cluster credentials")?,
            (path, context) => {
                let options = kube::config::KubeConfigOptions {
                    context: context.clone(),
                    ..Default::default()
                };
                let kubeconfig = match path {
                    Some(path) => kube::config::Kubeconfig::read_from(path)
                        .with_context(|| format!("{}: cannot read the kubeconfig", path.display()))?,
                    None => kube::config::Kubeconfig::read()
                        .context("cannot read the kubeconfig")?,
                };
                kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .context("cannot use the kubeconfig")?
            }
        };
        let server = config.cluster_url.to_string();
        let client = kube::Client::try_from(config).context("cannot create the API client")?;
        nicpolicy::audit::live::list(client, &args.namespaces, args.cluster_api_version.as_deref())
            .await
            .with_context(|| format!("cannot list the machines of {server}"))
    })
}

fn cluster_title(group: Option<&nicpolicy::clusters::ClusterGroup>) -> String {
    match group {
        Some(g) => format!("{} {}/{}", g.kind, g.namespace, g.name),
        None => "(no cluster found)".to_string(),
    }
}

/// The table: one section per cluster, one row per machine, the violations and candidate
/// differences under their row; then totals.
fn render_audit(
    chain: &PolicyChain,
    candidate: Option<&PolicyChain>,
    findings: &[Finding],
    summary: &Summary,
    capacity: Option<&Capacity>,
    unreadable: &[String],
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Policy:    {}", chain.name());
    if let Some(candidate) = candidate {
        let _ = writeln!(out, "Candidate: {}", candidate.name());
    }
    for (group, findings) in by_cluster(findings) {
        let _ = writeln!(out, "\n{}", cluster_title(group));
        let mut rows: Vec<[String; 5]> = vec![[
            "KIND".into(),
            "NAME".into(),
            "RESULT".into(),
            if candidate.is_some() { "CANDIDATE" } else { "" }.into(),
            "NICS".into(),
        ]];
        let mut notes: Vec<Vec<String>> = vec![Vec::new()];
        for finding in findings {
            let nics = finding
                .decision
                .as_ref()
                .filter(|d| d.allowed)
                .map(|d| {
                    d.nics
                        .iter()
                        .map(|n| n.network.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_else(|| "-".into());
            rows.push([
                finding.object.kind.clone(),
                if finding.object.namespace == "default" {
                    finding.object.name.clone()
                } else {
                    format!("{}/{}", finding.object.namespace, finding.object.name)
                },
                finding.result.as_str().to_string(),
                finding
                    .shadow
                    .as_ref()
                    .map(|s| s.change.as_str().to_string())
                    .unwrap_or_default(),
                nics,
            ]);
            let mut lines = Vec::new();
            if let Some(message) = &finding.message {
                lines.push(message.clone());
            }
            lines.extend(finding.violation_lines());
            for line in finding.shadow.iter().flat_map(|s| &s.details) {
                lines.push(format!("candidate: {line}"));
            }
            for item in &finding.unapplied {
                lines.push(format!("not built as planned: {}", item.message()));
            }
            for pending in &finding.pending {
                lines.push(format!("pending: {}", pending.message()));
            }
            for drift in &finding.drift {
                lines.push(format!("drift: {}", drift.message()));
            }
            notes.push(lines);
        }
        // Rows and their notes interleaved: the table aligns the rows, the notes follow.
        let rendered = if candidate.is_some() {
            table(&rows)
        } else {
            let rows: Vec<[String; 4]> = rows
                .into_iter()
                .map(|[kind, name, result, _, nics]| [kind, name, result, nics])
                .collect();
            table(&rows)
        };
        for (line, notes) in rendered.lines().zip(&notes) {
            let _ = writeln!(out, "{line}");
            for note in notes {
                let _ = writeln!(out, "    {note}");
            }
        }
    }
    let _ = writeln!(out, "\n{}", summary.line());
    if !summary.reasons.is_empty() {
        let _ = writeln!(out, "Violations by reason:");
        for (reason, n) in &summary.reasons {
            let _ = writeln!(out, "  {reason:<14}{n}");
        }
        let width = summary.rules.keys().map(String::len).max().unwrap_or(0) + 2;
        let _ = writeln!(out, "Violations by rule:");
        for (rule, n) in &summary.rules {
            let _ = writeln!(out, "  {rule:<width$}{n}");
        }
    }
    if let Some(capacity) = capacity {
        render_capacity(&mut out, capacity);
    }
    if let Some(changes) = &summary.candidate {
        let text: Vec<String> = changes
            .iter()
            .map(|(change, n)| format!("{n} {}", change.as_str()))
            .collect();
        let _ = writeln!(out, "Candidate: {}", text.join(", "));
    }
    if !unreadable.is_empty() {
        let _ = writeln!(out, "Files not read:");
        for error in unreadable {
            let _ = writeln!(out, "  {error}");
        }
    }
    out
}

/// The static pools: a row per network, a `short:` line under it for each rollout that needs
/// more than is free, then what could not be counted.
fn render_capacity(out: &mut String, capacity: &Capacity) {
    let _ = writeln!(
        out,
        "\nStatic pools (free = totalIpCount - usedIpCount; needed: the POOL NICs of the machines a \
         rollout adds):"
    );
    let mut rows: Vec<[String; 6]> = vec![[
        "NETWORK".into(),
        "TOTAL".into(),
        "USED".into(),
        "FREE".into(),
        "LARGEST ROLLOUT".into(),
        "ALL ROLLOUTS".into(),
    ]];
    let mut notes: Vec<Vec<String>> = vec![Vec::new()];
    for network in &capacity.networks {
        rows.push([
            match &network.vdc {
                Some(vdc) => format!("{} ({vdc})", network.network),
                None => network.network.clone(),
            },
            network.pool.total.to_string(),
            network.pool.used.to_string(),
            network.free.to_string(),
            network.largest.to_string(),
            network.all.to_string(),
        ]);
        let mut lines: Vec<String> = network
            .needs
            .iter()
            .filter(|need| need.addresses > network.free)
            .map(|need| format!("short: {}", network.sentence(need)))
            .collect();
        if !network.short() && network.all > network.free {
            lines.push(format!(
                "every rollout at once would need {}, more than the {} free",
                network.all, network.free
            ));
        }
        notes.push(lines);
    }
    for (line, notes) in table(&rows).lines().zip(&notes) {
        let _ = writeln!(out, "{line}");
        for note in notes {
            let _ = writeln!(out, "    {note}");
        }
    }
    if capacity.rollouts == 0 {
        let _ = writeln!(
            out,
            "  no MachineDeployment or KubeadmControlPlane among the inputs: no rollout counted"
        );
    }
    for line in &capacity.uncounted {
        let _ = writeln!(out, "  {line}");
    }
}

/// The JSON/YAML report: the chains, the totals, the clusters with their machines, and the files
/// not read.
fn report_value(
    chain: &PolicyChain,
    candidate: Option<&PolicyChain>,
    findings: &[Finding],
    summary: &Summary,
    unreadable: &[String],
) -> serde_json::Value {
    let clusters: Vec<serde_json::Value> = by_cluster(findings)
        .into_iter()
        .map(|(group, findings)| {
            serde_json::json!({
                "cluster": group,
                "summary": Summary::of(findings.iter().copied()),
                "objects": findings,
            })
        })
        .collect();
    let mut report = serde_json::json!({
        "policy": chain.name(),
        "summary": summary,
        "clusters": clusters,
    });
    if let Some(candidate) = candidate {
        report["candidate"] = candidate.name().into();
    }
    if !unreadable.is_empty() {
        report["unreadable"] = unreadable.into();
    }
    report
}

/// JUnit XML: one testsuite per cluster, one testcase per machine.
fn junit_report(findings: &[Finding], elapsed: std::time::Duration) -> String {
    let suites = by_cluster(findings)
        .into_iter()
        .map(|(group, findings)| Suite {
            name: cluster_title(group),
            time: None,
            cases: findings
                .into_iter()
                .map(|finding| {
                    let message = finding.message.clone().unwrap_or_default();
                    TestCase {
                        classname: cluster_title(finding.cluster.as_ref()),
                        name: format!(
                            "{} {}/{}",
                            finding.object.kind, finding.object.namespace, finding.object.name
                        ),
                        time: finding.elapsed,
                        result: match finding.result {
                            Verdict::Allowed => CaseResult::Passed,
                            Verdict::Skipped => CaseResult::Skipped { message },
                            Verdict::Error | Verdict::Failed => CaseResult::Error { message },
                            Verdict::Denied => {
                                let lines = finding.violation_lines();
                                CaseResult::Failure {
                                    message: lines.first().cloned().unwrap_or_default(),
                                    body: lines.join("\n"),
                                }
                            }
                        },
                    }
                })
                .collect(),
        })
        .collect();
    Suites {
        name: "nicpolicy audit".to_string(),
        time: elapsed,
        suites,
    }
    .write()
}
