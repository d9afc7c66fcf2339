//! The `nicpolicy` binary, run as a user runs it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn nicpolicy(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nicpolicy"))
        .args(args)
        .current_dir(workspace())
        .env(
            "NICPOLICY_CACHE_DIR",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-cache"),
        )
        .output()
        .expect("nicpolicy runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn scratch(name: &str, bytes: &[u8]) -> String {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-files");
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("scratch file");
    path.display().to_string()
}

const EXAMPLE: [&str; 7] = [
    "eval",
    "--cluster",
    "examples/cluster.yaml",
    "--machine",
    "examples/machine.yaml",
    "--inventory",
    "examples/inventory.yaml",
];

#[test]
fn eval_prints_the_nic_plan_of_the_example() {
    let out = nicpolicy(&EXAMPLE);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("Decision:  allowed"), "{text}");
    let rows: Vec<&str> = text.lines().filter(|l| l.contains("VMXNET3")).collect();
    assert_eq!(rows.len(), 3, "{text}");
    assert!(
        rows[0].starts_with("0") && rows[0].contains("mgmt-net"),
        "{text}"
    );
    assert!(
        rows[1].contains("storage-net") && rows[2].contains("workload-net"),
        "{text}"
    );
}

#[test]
fn eval_json_output_is_the_decision() {
    let mut args = EXAMPLE.to_vec();
    args.extend(["--settings", "examples/settings.yaml", "-o", "json"]);
    let out = nicpolicy(&args);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let decision: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(decision["nics"][1]["network"], "storage-net");
    assert_eq!(decision["nics"][1]["ipAllocationMode"], "DHCP");
    assert_eq!(decision["nics"][2]["ipAllocationMode"], "POOL");
}

#[test]
fn invalid_machine_is_denied_with_each_field_named() {
    let out = nicpolicy(&[
        "eval",
        "--cluster",
        "examples/cluster.yaml",
        "--machine",
        "examples/invalid-machine.yaml",
        "--inventory",
        "examples/inventory.yaml",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    for field in [
        "spec.extraOvdcNetworks[2] (Duplicate)",
        "spec.extraOvdcNetworks[3] (Duplicate)",
        "spec.extraOvdcNetworks[4] (NotFound)",
    ] {
        assert!(text.contains(field), "{field} missing in:\n{text}");
    }
}

#[test]
fn update_of_provisioned_machine_with_new_network_is_denied() {
    let old = scratch(
        "old-machine.yaml",
        std::fs::read_to_string(workspace().join("examples/machine.yaml"))
            .expect("example")
            .replace(
                "spec:\n",
                "spec:\n  providerID: vmware-cloud-director://urn:vcloud:vm:4a7f\n",
            )
            .replace("    - workload-net\n", "")
            .as_bytes(),
    );
    let mut args = EXAMPLE.to_vec();
    args.extend(["--old", &old]);
    let out = nicpolicy(&args);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("spec.extraOvdcNetworks (Forbidden)"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn malformed_yaml_names_file_and_line() {
    let bad = scratch(
        "broken.yaml",
        b"kind: VCDMachine\nspec:\n  extraOvdcNetworks: [storage-net\n",
    );
    let out = nicpolicy(&[
        "eval",
        "--cluster",
        "examples/cluster.yaml",
        "--machine",
        &bad,
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("{bad}:")) && err.contains("error:"),
        "{err}"
    );
    let line = err.split(&format!("{bad}:")).nth(1).unwrap_or_default();
    assert!(
        line.starts_with(|c: char| c.is_ascii_digit()),
        "no line number in {err}"
    );
}

#[test]
fn wrong_field_type_names_the_field() {
    let bad = scratch(
        "typed.yaml",
        b"apiVersion: infrastructure.cluster.x-k8s.io/v1beta3\nkind: VCDMachine\nmetadata: {name: prod-eu1-md-0}\nspec:\n  extraOvdcNetworks: storage-net\n",
    );
    let out = nicpolicy(&[
        "eval",
        "--cluster",
        "examples/cluster.yaml",
        "--machine",
        &bad,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("spec.extraOvdcNetworks"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn missing_file_and_non_wasm_policy_are_usage_errors() {
    let out = nicpolicy(&[
        "eval",
        "--cluster",
        "examples/nope.yaml",
        "--machine",
        "examples/machine.yaml",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("examples/nope.yaml"),
        "{}",
        stderr(&out)
    );

    let mut args = EXAMPLE.to_vec();
    args.extend(["--policy", "examples/cluster.yaml"]);
    let out = nicpolicy(&args);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("examples/cluster.yaml") && err.contains("not a WebAssembly module"),
        "{err}"
    );
}

#[test]
fn looping_policy_is_stopped_and_reported() {
    let wasm = wat::parse_str(
        r#"(module
          (memory (export "memory") 1)
          (data (i32.const 16) "{\"valid\":true}")
          (func (export "nicpolicy_abi_version") (result i32) i32.const 1)
          (func (export "nicpolicy_alloc") (param i32) (result i32) i32.const 1024)
          (func (export "nicpolicy_validate_settings") (param i32 i32) (result i64)
            i64.const 68719476750)
          (func (export "nicpolicy_evaluate") (param i32 i32) (result i64)
            (loop $spin (br $spin)) unreachable))"#,
    )
    .expect("valid wat");
    let policy = scratch("spin.wasm", &wasm);
    let mut args = EXAMPLE.to_vec();
    args.extend(["--policy", &policy, "--timeout", "100ms", "--no-cache"]);
    let out = nicpolicy(&args);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("time limit of 100ms"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn pinned_sha256_mismatch_is_refused_with_both_digests() {
    let mut args = EXAMPLE.to_vec();
    let wrong = "ab".repeat(32);
    args.extend(["--sha256", &wrong]);
    let out = nicpolicy(&args);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains(&wrong) && err.contains("the module is"),
        "{err}"
    );
}

#[test]
fn inspect_shows_metadata_exports_and_digest() {
    let out = nicpolicy(&["inspect"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("Name:         nicpolicy-capvcd"), "{text}");
    assert!(
        text.contains("nicpolicy_evaluate             func (i32, i32) -> i64"),
        "{text}"
    );
    assert!(text.contains("ABI v1 check: ok"), "{text}");

    let wasi = wat::parse_str(
        r#"(module (import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32))))"#,
    )
    .expect("valid wat");
    let path = scratch("wasi.wasm", &wasi);
    let out = nicpolicy(&["inspect", &path, "-o", "json"]);
    assert_eq!(out.status.code(), Some(2));
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        info["imports"][0]["name"],
        "wasi_snapshot_preview1.fd_write"
    );
    assert!(
        stderr(&out).contains("forbidden import"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn test_command_runs_the_capvcd_cases() {
    let out = nicpolicy(&["test", "tests/cases/capvcd"]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let last = text.lines().last().unwrap_or_default();
    assert!(last.ends_with("passed, 0 failed"), "{last}");
}

#[test]
fn test_command_reports_a_failing_case() {
    let case = scratch(
        "wrong-expectation.yaml",
        format!(
            "description: expects the wrong primary\ncluster: {root}/examples/cluster.yaml\nmachine: {root}/examples/machine.yaml\nexpect:\n  allowed: true\n  nics:\n    - {{index: 0, network: storage-net}}\n    - {{}}\n    - {{}}\n",
            root = workspace().display()
        )
        .as_bytes(),
    );
    let out = nicpolicy(&["test", &case]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("nics[0].network: expected \"storage-net\", got \"mgmt-net\""),
        "{text}"
    );
    assert!(text.trim_end().ends_with("0 passed, 1 failed"), "{text}");
}
