//! `nicpolicy review`: one AdmissionReview from a file answered as the webhook would.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use clap::ValueEnum;
use nicpolicy::clusters::StaticClusters;
use nicpolicy::plugin::ObjectKind;
use nicpolicy::served::config::{ClusterSourceConfig, ServeConfig};
use nicpolicy::webhook::{App, Endpoint};
use serde_json::Value;

use super::common::{host_for, read_config};
use super::{runtime, usage, Failure};
use crate::exit;

#[derive(clap::Args)]
pub struct ReviewArgs {
    /// The AdmissionReview (JSON or YAML) kube-apiserver would send.
    #[arg(long, value_name = "FILE")]
    request: PathBuf,
    /// Configuration file, as for `serve`; the built-in CAPVCD policy when omitted.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Files with the Cluster and VCDCluster objects (required unless the configuration reads
    /// clusters from files).
    #[arg(long, value_name = "FILE", num_args = 1..)]
    clusters: Vec<PathBuf>,
    /// The org VDC network inventory, overriding the configuration's.
    #[arg(long, value_name = "FILE")]
    inventory: Option<PathBuf>,
    /// Which endpoint answers: validate (allow or deny) or mutate (JSON patch).
    #[arg(long, value_enum, default_value_t = EndpointArg::Validate)]
    endpoint: EndpointArg,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum EndpointArg {
    Validate,
    Mutate,
}

/// `nicpolicy review`: prints the AdmissionReview response. Exit code 0 when the object is
/// admitted, 1 when the policy denies it, 2 for bad usage or input (the configuration, the
/// request or cluster files, a review the webhook would refuse as malformed or about an unknown
/// cluster), 3 when the policy (or the engine) failed at run time.
pub fn run(args: ReviewArgs) -> Result<u8, Failure> {
    let (config, clusters, kind, value) = read_inputs(&args).map_err(usage)?;
    let host = host_for(&config)?;
    let app = App::new(host, config, Arc::new(clusters))
        .context("cannot load the policies")
        .map_err(usage)?;
    let endpoint = match args.endpoint {
        EndpointArg::Validate => Endpoint::Validate,
        EndpointArg::Mutate => Endpoint::Mutate,
    };
    let body = serde_json::to_vec(&value).map_err(usage)?;
    let answer = app.reviewer().review(endpoint, kind, &body);
    let response: serde_json::Value = serde_json::from_slice(&answer.body).map_err(runtime)?;
    super::out::println(&serde_json::to_string_pretty(&response).map_err(runtime)?)?;
    let status = |field: &str| {
        response
            .pointer(&format!("/response/status/{field}"))
            .cloned()
    };
    let message = status("message")
        .and_then(|m| m.as_str().map(str::to_string))
        .unwrap_or_else(|| "malformed request".to_string());
    if answer.http_status != 200 {
        return Err(usage(anyhow!("the review was not answered: {message}")));
    }
    if let Some(patch) = response.pointer("/response/patch").and_then(|p| p.as_str()) {
        use base64::Engine as _;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .map_err(runtime)?;
        eprintln!("patch: {}", String::from_utf8_lossy(&decoded));
    }
    match (answer.allowed, answer.result) {
        (true, _) => Ok(0),
        (false, "denied") => Ok(exit::DENIED),
        // Not the policy's decision: the status says whose fault it is (5xx: the policy or the
        // host failed; 4xx: the review itself).
        (false, _) => match status("code").and_then(|c| c.as_u64()) {
            Some(code) if code >= 500 => Err(runtime(anyhow!("the review failed: {message}"))),
            _ => Err(usage(anyhow!("the review was refused: {message}"))),
        },
    }
}

/// The configuration, the clusters, and the review with its kind, read from the files named.
fn read_inputs(args: &ReviewArgs) -> Result<(ServeConfig, StaticClusters, ObjectKind, Value)> {
    let mut config = read_config(args.config.as_ref())?;
    if args.inventory.is_some() {
        config.inventory = args.inventory.clone();
    }
    config.reload_interval = None;
    let files = match (&args.clusters, &config.clusters) {
        (given, _) if !given.is_empty() => given.clone(),
        (_, ClusterSourceConfig::Static { files }) => files.clone(),
        _ => bail!("review runs without a Kubernetes API: pass --clusters FILE with the machine's Cluster and VCDCluster"),
    };
    let clusters = StaticClusters::read(&files)?;
    let text = nicpolicy::manifest::read_text(&args.request)?;
    // YAML is accepted for hand-written requests; the server itself only takes JSON.
    let value = nicpolicy::manifest::ManifestFile::parse(&args.request, &text)?
        .objects
        .into_iter()
        .next()
        .map(|o| o.value)
        .ok_or_else(|| anyhow!("{}: the file is empty", args.request.display()))?;
    let kind_name = value
        .pointer("/request/kind/kind")
        .and_then(|k| k.as_str())
        .unwrap_or_default()
        .to_string();
    let kind = ObjectKind::from_kind(&kind_name).ok_or_else(|| {
        anyhow!(
            "{}: request.kind.kind is {kind_name:?}; nicpolicy reviews VCDMachine and VCDMachineTemplate",
            args.request.display()
        )
    })?;
    Ok((config, clusters, kind, value))
}
