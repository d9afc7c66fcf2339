//! Builds every policy crate under `policies/` for wasm32 and embeds the modules, so `nicpolicy`
//! has its policies built in (the CAPVCD one is the default) and they still run through Wasm.
//! Set `NICPOLICY_POLICY_DIR` to a directory of prebuilt `<crate_name>.wasm` files to skip the
//! build.
//!
//! Crates with a `kubewarden` feature are built a second time with it, into their own target
//! directory: the Kubewarden (waPC) variant of the same policy, embedded beside the ABI v1 module
//! for `nicpolicy export NAME --format kubewarden`. With `NICPOLICY_POLICY_DIR`, the variant is
//! read from `<crate_name>.kubewarden.wasm` there.
//!
//! Each module then goes through Binaryen's `wasm-opt -Os` when it is installed (`$WASM_OPT`,
//! else `wasm-opt` on `PATH`; `WASM_OPT=none` skips it): the `policy` profile optimises for
//! speed, wasm-opt takes the size back down (CAPVCD: 245 KB to 218 KB, see docs/benchmarks.md).
//!
//! It also builds the playground page that `nicpolicy playground` serves: the same policy
//! crates through wasm-bindgen (their `js` feature), the manifest reader of `host/playground`,
//! and the static files of `host/playground/www`, embedded with the example manifests. Set
//! `NICPOLICY_PLAYGROUND_DIR` to a directory holding a page built before to skip that build.

use std::env;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

const WASM_TARGET: &str = "wasm32-unknown-unknown";

/// A policy crate: its directory name and package name.
struct PolicyCrate {
    name: String,
    package: String,
    /// Whether it has a `kubewarden` feature (a waPC build for Kubewarden).
    kubewarden: bool,
}

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let workspace = manifest_dir
        .parent()
        .expect("host/ sits in the workspace")
        .to_path_buf();
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("set by cargo"));
    // Without the `builtin` feature nothing is embedded: an embedder of the library does not
    // build policy crates inside its own build.
    if env::var_os("CARGO_FEATURE_BUILTIN").is_none() {
        return;
    }
    println!("cargo:rerun-if-env-changed=NICPOLICY_POLICY_DIR");
    println!("cargo:rerun-if-env-changed=WASM_OPT");
    for watched in ["plugin/src", "plugin/Cargo.toml", "policies", "Cargo.lock"] {
        println!(
            "cargo:rerun-if-changed={}",
            workspace.join(watched).display()
        );
    }

    let crates = policy_crates(&workspace.join("policies"));
    // Prebuilt modules are embedded as they are; freshly built ones are shrunk when possible.
    let (modules, wasm_opt) = match env::var_os("NICPOLICY_POLICY_DIR") {
        Some(dir) => (Modules::Prebuilt(PathBuf::from(dir)), None),
        None => (
            Modules::Built {
                abi: build(&workspace, &crates, Variant::Abi),
                kubewarden: build(&workspace, &crates, Variant::Kubewarden),
            },
            wasm_opt(),
        ),
    };

    let mut generated = String::from(
        "/// Every policy built into the binary.\npub const POLICIES: &[BuiltinPolicy] = &[\n",
    );
    for policy in &crates {
        let stem = policy.package.replace('-', "_");
        let embed = |variant: Variant| {
            let built = modules.path(&stem, variant);
            let embedded = out_dir.join(variant.file(&stem));
            match &wasm_opt {
                Some(tool) => shrink(tool, &built, &embedded),
                None => {
                    std::fs::copy(&built, &embedded)
                        .unwrap_or_else(|err| panic!("{}: {err}", built.display()));
                }
            }
            format!("include_bytes!({:?})", embedded.display().to_string())
        };
        let wasm = embed(Variant::Abi);
        let kubewarden = match policy.kubewarden {
            true => format!("Some({})", embed(Variant::Kubewarden)),
            false => "None".to_string(),
        };
        let _ = writeln!(
            generated,
            "    BuiltinPolicy {{ name: {:?}, package: {:?}, wasm: {wasm}, kubewarden: {kubewarden} }},",
            policy.name,
            policy.package,
        );
    }
    generated.push_str("];\n");
    std::fs::write(out_dir.join("builtin_policies.rs"), generated).expect("write generated code");

    #[cfg(feature = "playground")]
    page::embed(&workspace, &crates, &out_dir);
}

/// The playground page's build, in a file of its own.
#[cfg(feature = "playground")]
#[path = "build/page.rs"]
mod page;

/// Crates under `policies/`, each a directory with a Cargo.toml, sorted by name.
fn policy_crates(dir: &Path) -> Vec<PolicyCrate> {
    let mut crates: Vec<PolicyCrate> = std::fs::read_dir(dir)
        .unwrap_or_else(|err| panic!("{}: {err}", dir.display()))
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let manifest = std::fs::read_to_string(entry.path().join("Cargo.toml")).ok()?;
            let package = manifest
                .lines()
                .find_map(|line| line.trim().strip_prefix("name = \"")?.strip_suffix('"'))?
                .to_string();
            Some(PolicyCrate {
                name: entry.file_name().to_string_lossy().into_owned(),
                package,
                kubewarden: manifest
                    .lines()
                    .any(|line| line.trim_start().starts_with("kubewarden = [")),
            })
        })
        .collect();
    crates.sort_by(|a, b| a.name.cmp(&b.name));
    crates
}

/// The two builds of a policy crate.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// ABI v1, for nicpolicy's own host.
    Abi,
    /// The `kubewarden` feature: a waPC module for Kubewarden.
    Kubewarden,
}

impl Variant {
    /// The module's file name, as embedded and as `NICPOLICY_POLICY_DIR` holds it.
    fn file(self, stem: &str) -> String {
        match self {
            Variant::Abi => format!("{stem}.wasm"),
            Variant::Kubewarden => format!("{stem}.kubewarden.wasm"),
        }
    }
}

/// Where the modules to embed are.
enum Modules {
    /// `NICPOLICY_POLICY_DIR`: both variants side by side, named by [`Variant::file`].
    Prebuilt(PathBuf),
    /// Fresh builds: one directory per variant, each holding `<crate_name>.wasm`.
    Built { abi: PathBuf, kubewarden: PathBuf },
}

impl Modules {
    fn path(&self, stem: &str, variant: Variant) -> PathBuf {
        match (self, variant) {
            (Modules::Prebuilt(dir), _) => dir.join(variant.file(stem)),
            (Modules::Built { abi, .. }, Variant::Abi) => abi.join(format!("{stem}.wasm")),
            (Modules::Built { kubewarden, .. }, Variant::Kubewarden) => {
                kubewarden.join(format!("{stem}.wasm"))
            }
        }
    }
}

/// Builds the crates with the `policy` profile; returns where the modules are. Each variant has
/// its own target directory: both produce `<crate_name>.wasm`, and a feature change would
/// otherwise rebuild the other's artifacts every time.
fn build(workspace: &Path, crates: &[PolicyCrate], variant: Variant) -> PathBuf {
    let target_dir = wasm_target_dir(
        workspace,
        match variant {
            Variant::Abi => "wasm-policies",
            Variant::Kubewarden => "wasm-kubewarden",
        },
    );
    let mut command = wasm_build(workspace, &target_dir, "policy");
    let selected = crates
        .iter()
        .filter(|policy| variant == Variant::Abi || policy.kubewarden);
    for policy in selected {
        command.args(["--package", &policy.package]);
        if variant == Variant::Kubewarden {
            command.args(["--features", &format!("{}/kubewarden", policy.package)]);
        }
    }
    let what = match variant {
        Variant::Abi => "the policies",
        Variant::Kubewarden => "the policies' Kubewarden builds",
    };
    run_wasm_build(command, what);
    target_dir.join(WASM_TARGET).join("policy")
}

/// A target directory of its own for a nested wasm32 build: the outer cargo holds the lock on
/// its own.
fn wasm_target_dir(workspace: &Path, name: &str) -> PathBuf {
    env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"))
        .join(name)
}

/// `cargo build --profile PROFILE --target wasm32-unknown-unknown`, packages to be added.
fn wasm_build(workspace: &Path, target_dir: &Path, profile: &str) -> Command {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(workspace)
        .args(["build", "--profile", profile, "--target", WASM_TARGET])
        .arg("--target-dir")
        .arg(target_dir)
        // Flags meant for the host build must not leak into the wasm build.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET");
    command
}

fn run_wasm_build(mut command: Command, what: &str) {
    let status = command
        .status()
        .unwrap_or_else(|err| panic!("cannot run cargo to build {what}: {err}"));
    if !status.success() {
        panic!(
            "building {what} for {WASM_TARGET} failed (see above); \
             is the target installed? `rustup target add {WASM_TARGET}`"
        );
    }
}

/// The wasm-opt to run, or `None` (with a warning when it is missing rather than turned off).
fn wasm_opt() -> Option<PathBuf> {
    let tool = match env::var_os("WASM_OPT") {
        Some(value) if value == "none" => return None,
        Some(value) => PathBuf::from(value),
        None => PathBuf::from("wasm-opt"),
    };
    match Command::new(&tool).arg("--version").output() {
        Ok(output) if output.status.success() => Some(tool),
        _ => {
            println!(
                "cargo:warning=`{}` not found: the built-in policies are embedded without \
                 wasm-opt (about 10% larger; install Binaryen, or set WASM_OPT=none to silence this)",
                tool.display()
            );
            None
        }
    }
}

/// Features the policies' wasm32 build uses (Rust's defaults); wasm-opt refuses anything else.
const WASM_FEATURES: &[&str] = &[
    "--enable-bulk-memory",
    "--enable-sign-ext",
    "--enable-nontrapping-float-to-int",
    "--enable-mutable-globals",
    "--enable-multivalue",
    "--enable-reference-types",
];

/// `wasm-opt -Os` from `input` to `output`; custom sections (the metadata) are kept.
fn shrink(tool: &Path, input: &Path, output: &Path) {
    let status = Command::new(tool)
        .arg("-Os")
        .args(WASM_FEATURES)
        .arg(input)
        .arg("-o")
        .arg(output)
        .status()
        .unwrap_or_else(|err| panic!("cannot run {}: {err}", tool.display()));
    if !status.success() {
        panic!(
            "{} -Os {} failed (see above); set WASM_OPT=none to embed the module as built",
            tool.display(),
            input.display()
        );
    }
}
