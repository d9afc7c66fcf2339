//! Builds the CAPVCD policy for wasm32 and embeds it, so `nicpolicy` has a default policy that
//! still runs through Wasm. Set `NICPOLICY_CAPVCD_WASM` to embed a prebuilt module instead.

use std::env;
use std::path::PathBuf;
use std::process::Command;

const WASM_TARGET: &str = "wasm32-unknown-unknown";

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let workspace = manifest_dir.parent().expect("host/ sits in the workspace").to_path_buf();
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("set by cargo"));
    let embedded = out_dir.join("nicpolicy_capvcd.wasm");
    println!("cargo:rerun-if-env-changed=NICPOLICY_CAPVCD_WASM");

    if let Some(prebuilt) = env::var_os("NICPOLICY_CAPVCD_WASM") {
        std::fs::copy(&prebuilt, &embedded).unwrap_or_else(|err| {
            panic!("NICPOLICY_CAPVCD_WASM={}: {err}", PathBuf::from(&prebuilt).display())
        });
        return;
    }

    for watched in ["plugin/src", "plugin/Cargo.toml", "policies/capvcd", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", workspace.join(watched).display());
    }
    // A separate target directory: the outer cargo holds the lock on its own.
    let target_dir = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"))
        .join("wasm-policies");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(&workspace)
        .args(["build", "--package", "nicpolicy-capvcd", "--profile", "policy"])
        .args(["--target", WASM_TARGET])
        .arg("--target-dir")
        .arg(&target_dir)
        // Flags meant for the host build must not leak into the wasm build.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .status()
        .unwrap_or_else(|err| panic!("cannot run cargo to build the CAPVCD policy: {err}"));
    if !status.success() {
        panic!(
            "building the CAPVCD policy for {WASM_TARGET} failed (see above); \
             is the target installed? `rustup target add {WASM_TARGET}`"
        );
    }
    let built = target_dir
        .join(WASM_TARGET)
        .join("policy")
        .join("nicpolicy_capvcd.wasm");
    std::fs::copy(&built, &embedded)
        .unwrap_or_else(|err| panic!("{}: {err}", built.display()));
}
