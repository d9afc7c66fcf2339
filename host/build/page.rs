//! The playground page of `nicpolicy playground`: built into `OUT_DIR/playground` and listed in
//! `OUT_DIR/playground_files.rs` for `include_bytes!`.
//!
//! One nested cargo build (profile `policy-js`, target directory `target/js`, the one `test.sh`
//! uses for the JS build) compiles every policy crate with its `js` feature and the page's Rust
//! half (`host/playground`); wasm-bindgen's library then writes the `--target web` packages.
//! The library rather than the `wasm-bindgen` command, so that building nicpolicy needs nothing
//! beyond cargo.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{run_wasm_build, wasm_build, wasm_target_dir, PolicyCrate, WASM_TARGET};

/// The page's Rust half.
const PLAYGROUND_PACKAGE: &str = "nicpolicy-playground";
/// The profile of the JS builds (kept unstripped: wasm-bindgen reads their custom sections).
const JS_PROFILE: &str = "policy-js";

/// Files served under `examples/`: (name in the page, file in the repository).
const EXAMPLES: &[(&str, &str)] = &[
    ("cluster.yaml", "examples/cluster.yaml"),
    ("machine.yaml", "examples/machine.yaml"),
    ("invalid-machine.yaml", "examples/invalid-machine.yaml"),
    ("inventory.yaml", "examples/inventory.yaml"),
    ("settings.yaml", "examples/settings.yaml"),
    ("cluster-multizone.yaml", "examples/cluster-multizone.yaml"),
    (
        "inventory-multizone.yaml",
        "tests/fixtures/inventory-zones.yaml",
    ),
];

/// Builds the page (or takes `NICPOLICY_PLAYGROUND_DIR`) and writes the list of its files.
pub fn embed(workspace: &Path, crates: &[PolicyCrate], out_dir: &Path) {
    println!("cargo:rerun-if-env-changed=NICPOLICY_PLAYGROUND_DIR");
    // The page's crate, and the host's manifest reader it compiles (see its lib.rs).
    for watched in ["host/playground", "host/inputs"] {
        println!(
            "cargo:rerun-if-changed={}",
            workspace.join(watched).display()
        );
    }
    for (_, file) in EXAMPLES {
        println!("cargo:rerun-if-changed={}", workspace.join(file).display());
    }
    let page = match std::env::var_os("NICPOLICY_PLAYGROUND_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let page = out_dir.join("playground");
            build(workspace, crates, &page);
            page
        }
    };
    let mut files = Vec::new();
    list_files(&page, &page, &mut files);
    files.sort();
    let mut generated = String::from(
        "/// Every file of the playground page: (path relative to the page, content).\n\
         pub const FILES: &[(&str, &[u8])] = &[\n",
    );
    for (name, path) in &files {
        let _ = writeln!(
            generated,
            "    ({name:?}, include_bytes!({:?})),",
            path.display().to_string()
        );
    }
    generated.push_str("];\n");
    std::fs::write(out_dir.join("playground_files.rs"), generated)
        .expect("write the playground's file list");
}

fn build(workspace: &Path, crates: &[PolicyCrate], page: &Path) {
    // A fresh directory: a file left from an earlier build must not be served.
    let _ = std::fs::remove_dir_all(page);
    let pkg = page.join("pkg");
    std::fs::create_dir_all(&pkg).unwrap_or_else(|err| panic!("{}: {err}", pkg.display()));

    let target_dir = wasm_target_dir(workspace, "js");
    let mut command = wasm_build(workspace, &target_dir, JS_PROFILE);
    command.args(["--package", PLAYGROUND_PACKAGE]);
    let mut features = Vec::new();
    for policy in crates {
        command.args(["--package", &policy.package]);
        features.push(format!("{}/js", policy.package));
    }
    command.arg("--features").arg(features.join(","));
    run_wasm_build(
        command,
        "the playground page (every policy crate needs a `js` feature: see docs/abi.md)",
    );

    let built = target_dir.join(WASM_TARGET).join(JS_PROFILE);
    let mut index = String::from("[");
    for package in std::iter::once(PLAYGROUND_PACKAGE).chain(crates.iter().map(|c| &*c.package)) {
        bindgen(
            &built.join(format!("{}.wasm", package.replace('-', "_"))),
            &pkg,
        );
    }
    for (i, policy) in crates.iter().enumerate() {
        let separator = if i == 0 { "" } else { "," };
        let _ = write!(
            index,
            "{separator}\n  {{\"name\": {:?}, \"module\": {:?}}}",
            policy.name,
            policy.package.replace('-', "_")
        );
    }
    index.push_str("\n]\n");
    write(&pkg.join("policies.json"), index.as_bytes());

    let www = workspace.join("host/playground/www");
    let mut files = Vec::new();
    list_files(&www, &www, &mut files);
    for (name, path) in files {
        copy(&path, &page.join(name));
    }
    for (name, file) in EXAMPLES {
        copy(&workspace.join(file), &page.join("examples").join(name));
    }
}

/// `wasm-bindgen --target web --no-typescript --remove-name-section
/// --remove-producers-section --out-dir OUT MODULE`.
fn bindgen(module: &Path, out: &Path) {
    let mut bindgen = wasm_bindgen_cli_support::Bindgen::new();
    bindgen
        .input_path(module)
        .typescript(false)
        // Smaller files, and no toolchain paths or versions in what the binary embeds.
        .remove_name_section(true)
        .remove_producers_section(true);
    bindgen
        .web(true)
        .and_then(|bindgen| bindgen.generate(out))
        .unwrap_or_else(|err| panic!("wasm-bindgen {}: {err:#}", module.display()));
}

/// Every file under `dir`, as (path relative to `root` with `/`, path).
fn list_files(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|err| panic!("{}: {err}", dir.display()));
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        if path.is_dir() {
            list_files(root, &path, out);
        } else if let Ok(relative) = path.strip_prefix(root) {
            let name = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            out.push((name, path));
        }
    }
}

fn copy(from: &Path, to: &Path) {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).unwrap_or_else(|err| panic!("{}: {err}", parent.display()));
    }
    std::fs::copy(from, to).unwrap_or_else(|err| panic!("{}: {err}", from.display()));
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
}
