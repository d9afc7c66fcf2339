//! `nicpolicy inspect`: a module's metadata, imports, exports, the ABI it speaks (nicpolicy ABI
//! v1 or Kubewarden waPC) with its check, and sha256.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use nicpolicy::builtin;
use nicpolicy::inspect::{inspect, ModuleAbi, ModuleInfo};
use nicpolicy::kubewarden;

use super::{usage, Failure, Format};

#[derive(clap::Args)]
pub struct InspectArgs {
    /// Policy module: a file, or oci://host/repo:tag or oci://host/repo@sha256:... in a
    /// registry; the built-in CAPVCD policy when omitted.
    #[arg(value_name = "FILE.wasm|oci://REF")]
    file: Option<PathBuf>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    output: Format,
    #[command(flatten)]
    registry: super::registry_args::RegistryArgs,
}

/// Runs `nicpolicy inspect`.
pub fn run(args: InspectArgs) -> Result<u8, Failure> {
    let reference = args
        .file
        .as_ref()
        .and_then(|path| path.to_str())
        .and_then(nicpolicy::oci::fetcher::reference_of);
    let (label, bytes) = match &args.file {
        Some(_) if reference.is_some() => {
            let reference = reference.unwrap_or_default();
            let module = nicpolicy::oci::fetch_blocking(
                reference,
                &args.registry.options()?,
                nicpolicy::cache::ModuleCache::default_dir().as_deref(),
            )
            .map_err(super::registry_args::failure)?;
            (module.immutable, module.bytes)
        }
        Some(path) => (
            path.display().to_string(),
            nicpolicy::inspect::read_module(path)
                .with_context(|| format!("{}: cannot read", path.display()))
                .map_err(usage)?,
        ),
        None => (
            "(built-in CAPVCD policy)".to_string(),
            builtin::CAPVCD_WASM.to_vec(),
        ),
    };
    let info = inspect(&bytes)
        .with_context(|| format!("{label}: cannot inspect"))
        .map_err(usage)?;
    let abi = info.abi();
    let abi_check = match abi {
        ModuleAbi::NicpolicyV1 => info.check_abi().map_err(anyhow::Error::new),
        ModuleAbi::KubewardenWapc => kubewarden::check(&info)
            .map(|_| ())
            .map_err(anyhow::Error::new),
    };
    let problem = abi_check.as_ref().err().map(|err| err.to_string());
    let text = match args.output {
        Format::Table => render_info(&label, &info, problem.as_deref()),
        Format::Json | Format::Yaml => {
            let value = info_json(&info, problem.as_deref());
            if args.output == Format::Json {
                serde_json::to_string_pretty(&value).map_err(usage)? + "\n"
            } else {
                serde_yaml_ng::to_string(&value).map_err(usage)?
            }
        }
    };
    super::out::print(&text)?;
    match abi_check {
        Ok(()) => Ok(0),
        Err(err) => Err(usage(
            err.context(format!("{label}: not a valid {abi} policy")),
        )),
    }
}

/// An import as `module.name`, an export as its name.
fn item_name(item: &nicpolicy::inspect::Item) -> String {
    if item.module.is_empty() {
        item.name.clone()
    } else {
        format!("{}.{}", item.module, item.name)
    }
}

fn info_json(info: &ModuleInfo, problem: Option<&str>) -> serde_json::Value {
    let items = |items: &[nicpolicy::inspect::Item]| -> Vec<serde_json::Value> {
        items
            .iter()
            .map(|i| serde_json::json!({"name": item_name(i), "type": i.ty.to_string()}))
            .collect()
    };
    serde_json::json!({
        "sha256": info.sha256,
        "size": info.size,
        "abi": info.abi().to_string(),
        "metadata": info.metadata,
        "kubewarden": kubewarden::metadata(info)
            .and_then(Result::ok)
            .as_ref()
            .map(kubewarden::metadata_json),
        "imports": items(&info.imports),
        "exports": items(&info.exports),
        "requestFormats": request_formats(info),
        "abiCheck": problem.unwrap_or("ok"),
    })
}

/// The request formats an ABI v1 module takes; none for a waPC module.
fn request_formats(info: &ModuleInfo) -> Vec<String> {
    match info.abi() {
        ModuleAbi::NicpolicyV1 => info
            .request_formats()
            .iter()
            .map(ToString::to_string)
            .collect(),
        ModuleAbi::KubewardenWapc => Vec::new(),
    }
}

fn render_info(label: &str, info: &ModuleInfo, problem: Option<&str>) -> String {
    let mut out = String::new();
    let abi = info.abi();
    let _ = writeln!(out, "File:         {label}");
    let _ = writeln!(out, "sha256:       {}", info.sha256);
    let _ = writeln!(out, "Size:         {} bytes", info.size);
    let _ = writeln!(out, "ABI:          {abi}");
    if abi == ModuleAbi::NicpolicyV1 {
        let _ = writeln!(out, "Requests:     {}", request_formats(info).join(", "));
    }
    match (&info.metadata, &kubewarden::metadata(info)) {
        (_, Some(Ok(meta))) => render_kubewarden(&mut out, meta),
        (_, Some(Err(err))) => {
            let _ = writeln!(out, "Metadata:     {err}");
        }
        (Some(meta), None) => {
            let _ = writeln!(out, "Name:         {}", meta.name);
            let _ = writeln!(out, "Version:      {}", meta.version);
            let _ = writeln!(out, "ABI version:  {}", meta.abi_version);
            let _ = writeln!(out, "Description:  {}", meta.description);
        }
        (None, None) => {
            let _ = writeln!(out, "Metadata:     (no nicpolicy.metadata section)");
        }
    }
    let list = |out: &mut String, title: &str, items: &[nicpolicy::inspect::Item]| {
        let _ = writeln!(out, "{title}:");
        if items.is_empty() {
            let _ = writeln!(out, "  (none)");
        }
        for i in items {
            let _ = writeln!(out, "  {:<30} {}", item_name(i), i.ty);
        }
    };
    list(&mut out, "Imports", &info.imports);
    list(&mut out, "Exports", &info.exports);
    let check = match abi {
        ModuleAbi::NicpolicyV1 => "ABI v1 check",
        ModuleAbi::KubewardenWapc => "waPC check",
    };
    let _ = writeln!(out, "{check}: {}", problem.unwrap_or("ok"));
    let _ = writeln!(out, "Pin with:     --sha256 {}", info.sha256);
    out
}

/// The Kubewarden metadata: title, version, protocol, what it is registered for and reads.
fn render_kubewarden(out: &mut String, meta: &kubewarden::Metadata) {
    let annotation = |key: &str| {
        meta.annotations
            .get(&format!("io.kubewarden.policy.{key}"))
            .map_or("", String::as_str)
            .to_string()
    };
    let _ = writeln!(out, "Title:        {}", annotation("title"));
    let _ = writeln!(out, "Version:      {}", annotation("version"));
    let _ = writeln!(out, "Description:  {}", annotation("description"));
    let _ = writeln!(
        out,
        "Protocol:     {}",
        meta.protocol_version.as_deref().unwrap_or("(missing)")
    );
    let _ = writeln!(out, "Mutating:     {}", meta.mutating);
    for rule in &meta.rules {
        let _ = writeln!(
            out,
            "Rule:         {} {}/{} {}",
            rule.operations.join(","),
            rule.api_groups.join(","),
            rule.api_versions.join(","),
            rule.resources.join(",")
        );
    }
    for resource in &meta.context_aware_resources {
        let _ = writeln!(
            out,
            "Reads:        {} {}",
            resource.api_version, resource.kind
        );
    }
}
