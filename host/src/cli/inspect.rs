//! `nicpolicy inspect`: a module's metadata, imports, exports, ABI check and sha256.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context;
use nicpolicy::builtin;
use nicpolicy::inspect::{inspect, ModuleInfo};

use super::{usage, Failure, Format};

#[derive(clap::Args)]
pub struct InspectArgs {
    /// Policy module; the built-in CAPVCD policy when omitted.
    #[arg(value_name = "FILE.wasm")]
    file: Option<PathBuf>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    output: Format,
}

/// Runs `nicpolicy inspect`.
pub fn run(args: InspectArgs) -> Result<u8, Failure> {
    let (label, bytes) = match &args.file {
        Some(path) => (
            path.display().to_string(),
            std::fs::read(path)
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
    let abi_check = info.check_abi();
    let text = match args.output {
        Format::Table => render_info(&label, &info, abi_check.as_ref().err()),
        Format::Json | Format::Yaml => {
            let value = info_json(&info, abi_check.as_ref().err());
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
            anyhow::Error::new(err).context(format!("{label}: not a valid ABI v1 policy")),
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

fn info_json(info: &ModuleInfo, problem: Option<&nicpolicy::LoadError>) -> serde_json::Value {
    let items = |items: &[nicpolicy::inspect::Item]| -> Vec<serde_json::Value> {
        items
            .iter()
            .map(|i| serde_json::json!({"name": item_name(i), "type": i.ty.to_string()}))
            .collect()
    };
    serde_json::json!({
        "sha256": info.sha256,
        "size": info.size,
        "metadata": info.metadata,
        "imports": items(&info.imports),
        "exports": items(&info.exports),
        "abiCheck": problem.map_or("ok".to_string(), |p| p.to_string()),
    })
}

fn render_info(label: &str, info: &ModuleInfo, problem: Option<&nicpolicy::LoadError>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "File:         {label}");
    let _ = writeln!(out, "sha256:       {}", info.sha256);
    let _ = writeln!(out, "Size:         {} bytes", info.size);
    match &info.metadata {
        Some(meta) => {
            let _ = writeln!(out, "Name:         {}", meta.name);
            let _ = writeln!(out, "Version:      {}", meta.version);
            let _ = writeln!(out, "ABI version:  {}", meta.abi_version);
            let _ = writeln!(out, "Description:  {}", meta.description);
        }
        None => {
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
    let _ = writeln!(
        out,
        "ABI v1 check: {}",
        problem.map_or("ok".to_string(), |p| p.to_string())
    );
    let _ = writeln!(out, "Pin with:     --sha256 {}", info.sha256);
    out
}
