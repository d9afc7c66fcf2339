//! `nicpolicy new`: writes a site policy crate to start from, outside any workspace: typed
//! settings, one rule on top of every CAPVCD rule, unit tests, case files with the cluster they
//! run against, a README and a CI workflow. The files are templates built into the binary.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context};

use super::{usage, Failure};

#[derive(clap::Args)]
pub struct NewArgs {
    /// The policy's crate name: lowercase letters, digits and dashes, starting with a letter
    /// (the module is NAME with dashes as underscores, .wasm).
    #[arg(value_name = "NAME")]
    name: String,
    /// Where to write it: DIR/NAME (default: ./NAME).
    #[arg(long, value_name = "DIR")]
    path: Option<PathBuf>,
    /// The nicpolicy-plugin SDK to build against: a clone's `plugin/` directory. Default: the
    /// SDK this nicpolicy was built from, when it is still there; otherwise a version
    /// dependency on nicpolicy-plugin.
    #[arg(long, value_name = "DIR")]
    sdk_path: Option<PathBuf>,
}

/// The SDK this binary was built from (the workspace's `plugin/`), if it is still there.
fn built_from_sdk() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugin");
    dir.join("Cargo.toml")
        .is_file()
        .then(|| dir.canonicalize().ok())
        .flatten()
}

fn check_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !first_ok || !rest_ok || name.ends_with('-') || name.len() > 64 {
        return Err(format!(
            "{name:?} is not a policy name: lowercase letters, digits and dashes, starting with a letter, at most 64 characters (like dmz-guard)"
        ));
    }
    Ok(())
}

/// The dependency line of the SDK in the new Cargo.toml.
fn sdk_dependency(sdk_path: Option<&Path>) -> Result<String, Failure> {
    let path = match sdk_path {
        Some(path) => {
            if !path.join("Cargo.toml").is_file() {
                return Err(usage(anyhow!(
                    "--sdk-path {}: no Cargo.toml there (give the plugin/ directory of a nicpolicy clone)",
                    path.display()
                )));
            }
            Some(path.canonicalize().map_err(usage)?)
        }
        None => built_from_sdk(),
    };
    Ok(match path {
        Some(path) => format!(
            "nicpolicy-plugin = {{ path = {:?} }}",
            path.display().to_string()
        ),
        None => format!(
            "# The SDK of nicpolicy {version}; with a clone instead: {{ path = \"/path/to/nicpolicy/plugin\" }}\nnicpolicy-plugin = \"{version}\"",
            version = env!("CARGO_PKG_VERSION")
        ),
    })
}

pub fn run(args: NewArgs) -> Result<u8, Failure> {
    check_name(&args.name).map_err(|why| usage(anyhow!(why)))?;
    let dir = args
        .path
        .clone()
        .unwrap_or_else(|| PathBuf::from("."))
        .join(&args.name);
    if dir.exists()
        && std::fs::read_dir(&dir)
            .map(|mut entries| entries.next().is_some())
            .unwrap_or(true)
    {
        return Err(usage(anyhow!(
            "{} already exists and is not empty: nothing written",
            dir.display()
        )));
    }
    let lib = args.name.replace('-', "_");
    let sdk = sdk_dependency(args.sdk_path.as_deref())?;
    let fill = |template: &str| {
        template
            .replace("{{name}}", &args.name)
            .replace("{{lib}}", &lib)
            .replace("{{sdk}}", &sdk)
    };
    let files: [(&str, String); 9] = [
        ("Cargo.toml", fill(include_str!("new/Cargo.toml.tmpl"))),
        ("src/lib.rs", fill(include_str!("new/lib.rs.tmpl"))),
        (
            "cases/01-worker-may-use-the-dmz.yaml",
            fill(include_str!("new/case-01.yaml.tmpl")),
        ),
        (
            "cases/02-control-plane-off-the-dmz.yaml",
            fill(include_str!("new/case-02.yaml.tmpl")),
        ),
        (
            "cases/03-settings-name-another-network.yaml",
            fill(include_str!("new/case-03.yaml.tmpl")),
        ),
        (
            "fixtures/cluster.yaml",
            include_str!("../../../examples/cluster.yaml").to_string(),
        ),
        ("README.md", fill(include_str!("new/README.md.tmpl"))),
        (".gitignore", "/target\n".to_string()),
        (
            ".github/workflows/policy.yml",
            fill(include_str!("new/workflow.yml.tmpl")),
        ),
    ];
    for (name, text) in &files {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))
                .map_err(usage)?;
        }
        std::fs::write(&path, text)
            .with_context(|| format!("cannot write {}", path.display()))
            .map_err(usage)?;
    }
    println!("created {} ({} files)", dir.display(), files.len());
    println!();
    println!("  cd {}", dir.display());
    println!("  cargo test");
    println!("  cargo build --release --target wasm32-unknown-unknown");
    println!("  nicpolicy test --policy target/wasm32-unknown-unknown/release/{lib}.wasm cases/");
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_crate_names() {
        for good in ["dmz-guard", "site2", "a"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "DMZ", "2fast", "dmz_guard", "dmz-", "dmz guard", "../x"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }
}
