//! The `nicpolicy` binary, run as a user runs it.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::assert_exit_saying;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn nicpolicy(args: &[&str]) -> Output {
    common::nicpolicy_command()
        .args(args)
        .env(
            "NICPOLICY_CACHE_DIR",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-cache"),
        )
        .output()
        .expect("nicpolicy runs")
}

/// `nicpolicy eval` of `machine` in the example cluster.
fn eval_machine(machine: &str) -> Output {
    nicpolicy(&[
        "eval",
        "--cluster",
        "examples/cluster.yaml",
        "--machine",
        machine,
    ])
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs `nicpolicy ARGS`, expecting bad usage (exit code 2) with `expected` in its error.
fn refused(args: &[&str], expected: &str) {
    let out = nicpolicy(args);
    // Shown with the failure: which command line it was.
    eprintln!("nicpolicy {args:?}");
    assert_exit_saying(&out, 2, &[expected]);
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
    assert_exit_saying(&out, 0, &[]);
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
    assert_exit_saying(&out, 0, &[]);
    let decision: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(decision["nics"][1]["network"], "storage-net");
    assert_eq!(decision["nics"][1]["ipAllocationMode"], "DHCP");
    assert_eq!(decision["nics"][2]["ipAllocationMode"], "POOL");
}

#[test]
fn eval_says_which_plan_fields_capvcd_will_not_apply() {
    // examples/settings.yaml puts storage-net on DHCP; stock CAPVCD builds every NIC as POOL.
    let mut args = EXAMPLE.to_vec();
    args.extend(["--settings", "examples/settings.yaml"]);
    let out = nicpolicy(&args);
    assert_exit_saying(&out, 0, &[]);
    let text = stdout(&out);
    let row = text
        .lines()
        .find(|l| l.starts_with("1 "))
        .expect("NIC 1 row");
    assert!(row.contains("DHCP*") && !row.contains("VMXNET3*"), "{text}");
    assert!(
        text.contains("* not built as planned: CAPVCD builds it otherwise")
            && text.contains(
                "nicpolicy: not built as planned: NIC 1 (storage-net): ipAllocationMode DHCP \
                 is not applied: CAPVCD builds POOL"
            ),
        "{text}"
    );

    let mut json = args.clone();
    json.extend(["-o", "json"]);
    let out = nicpolicy(&json);
    let decision: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(decision["unapplied"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        decision["unapplied"][0]["objectField"],
        "spec.extraOvdcNetworks[0]"
    );
    assert_eq!(decision["unapplied"][0]["field"], "ipAllocationMode");

    // A denial when the site asks for one, on the field that made the NIC.
    let mut deny = json.clone();
    deny.extend(["--on-unapplied", "deny"]);
    let out = nicpolicy(&deny);
    assert_exit_saying(&out, 1, &[]);
    let decision: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        decision["violations"][0]["field"],
        "spec.extraOvdcNetworks[0]"
    );
    assert_eq!(decision["violations"][0]["reason"], "NotSupported");

    // A provisioner that applies IP modes: nothing to report.
    let mut site = json.clone();
    site.extend([
        "--provisioner-name",
        "capvcd-eu1",
        "--provisioner-applies",
        "ipAllocationMode",
    ]);
    let out = nicpolicy(&site);
    let decision: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(decision.get("unapplied").is_none(), "{decision}");
    assert_eq!(decision["warnings"], serde_json::json!([]));

    // Without the settings the plan is what CAPVCD builds.
    let out = nicpolicy(&EXAMPLE);
    assert!(!stdout(&out).contains("not built as planned"));

    let bad = nicpolicy(&[&args[..], &["--provisioner-applies", "macAddress"]].concat());
    assert_exit_saying(&bad, 2, &["\"macAddress\" is not a plan field"]);
    // A site's own name where a profile goes; a named build told what it applies.
    let unknown = nicpolicy(&[&args[..], &["--provisioner", "capvcd-eu1"]].concat());
    assert_exit_saying(
        &unknown,
        2,
        &["\"capvcd-eu1\" is not a provisioner profile (capvcd-1.3, capvcd-main, deckhouse, custom)"],
    );
    let named = nicpolicy(
        &[
            &args[..],
            &[
                "--provisioner",
                "deckhouse",
                "--provisioner-applies",
                "ipAddress",
            ],
        ]
        .concat(),
    );
    assert_exit_saying(&named, 2, &["the deckhouse profile states what it applies"]);
    let builds = nicpolicy(
        &[
            &args[..],
            &["--provisioner-builds", "ipAllocationMode=MANUAL"],
        ]
        .concat(),
    );
    assert_exit_saying(
        &builds,
        2,
        &["--provisioner-builds ipAllocationMode=MANUAL: MANUAL needs"],
    );
}

/// The worked example on a Deckhouse site: the stock policy plans POOL, Deckhouse's build makes
/// every NIC DHCP. The plan's markers, the section it PUTs, the guest config and the drift
/// check of a VM with and without its leases all follow the build.
#[test]
fn the_deckhouse_profile_is_what_a_deckhouse_site_builds() {
    let deckhouse = ["--provisioner", "deckhouse"];
    let eval = nicpolicy(&[&["eval"][..], &WORKED, &deckhouse, &["-o", "json"]].concat());
    assert_exit_saying(&eval, 0, &[]);
    let decision: serde_json::Value = serde_json::from_slice(&eval.stdout).expect("JSON");
    let unapplied: Vec<(u64, &str, &str)> = decision["unapplied"]
        .as_array()
        .expect("unapplied")
        .iter()
        .map(|u| {
            (
                u["index"].as_u64().unwrap(),
                u["planned"].as_str().unwrap(),
                u["built"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        unapplied,
        [
            (0, "POOL", "DHCP"),
            (1, "POOL", "DHCP"),
            (2, "POOL", "DHCP")
        ]
    );
    assert_eq!(
        decision["unapplied"][0]["provisioner"],
        "Deckhouse's CAPVCD"
    );
    // The same plan with DHCP planned (a Deckhouse site's settings): nothing to report.
    let dhcp_settings = scratch(
        "deckhouse-settings.yaml",
        b"defaultIpAllocationMode: DHCP\n",
    );
    let planned_dhcp = nicpolicy(
        &[
            &["eval"][..],
            &WORKED,
            &deckhouse,
            &["--settings", dhcp_settings.as_str(), "-o", "json"],
        ]
        .concat(),
    );
    let decision: serde_json::Value = serde_json::from_slice(&planned_dhcp.stdout).expect("JSON");
    assert!(decision.get("unapplied").is_none(), "{decision}");

    // What it PUTs: DHCP everywhere.
    let built = nicpolicy(&[&["render", "vcd", "--built"][..], &WORKED, &deckhouse].concat());
    assert_exit_saying(&built, 0, &[]);
    let xml = stdout(&built);
    assert_eq!(
        xml.matches("<IpAddressAllocationMode>DHCP</IpAddressAllocationMode>")
            .count(),
        3,
        "{xml}"
    );
    assert!(!xml.contains("POOL"), "{xml}");

    // The guest config of its VM: DHCP on every NIC, the default route from the primary's.
    let leased = ["--nics", "tests/fixtures/vcd/vm-deckhouse-leased.xml"];
    let guest = render_network_config(&[&deckhouse[..], &leased].concat());
    assert_exit_saying(&guest, 0, &[]);
    let config: serde_json::Value = serde_yaml_ng::from_str(&stdout(&guest)).expect("YAML");
    let ethernets = config["ethernets"].as_object().expect("ethernets");
    assert!(ethernets.values().all(|e| e["dhcp4"] == true), "{config}");
    assert!(
        ethernets["nic0"].get("dhcp4-overrides").is_none(),
        "{config}"
    );
    assert_eq!(ethernets["nic1"]["dhcp4-overrides"]["use-routes"], false);
    assert!(
        stderr(&guest).contains("Deckhouse's CAPVCD writes guestinfo.metadata itself")
            && stderr(&guest).contains("no kubelet node-ip"),
        "{}",
        stderr(&guest)
    );
    // The same VM under the default profile is not a VM CAPVCD built.
    let stock = render_network_config(&leased);
    assert_exit_saying(
        &stock,
        2,
        &["the VM's NIC 0 is DHCP, built to the plan it is POOL"],
    );

    // The drift check: the VM with its leases matches, without them it is pending, not drift.
    let audit = |profile: &[&str], section: &str| audit_vm(section, profile);
    let with_leases = audit(&deckhouse, "tests/fixtures/vcd/vm-deckhouse-leased.xml");
    assert_exit_saying(&with_leases, 0, &[]);
    assert!(
        !stdout(&with_leases).contains("drift") && !stdout(&with_leases).contains("pending"),
        "{}",
        stdout(&with_leases)
    );
    let booting = audit(&deckhouse, "tests/fixtures/vcd/vm-deckhouse-booting.xml");
    assert_exit_saying(&booting, 0, &[]);
    let text = stdout(&booting);
    assert!(!text.contains("drift"), "{text}");
    assert!(
        text.contains(
            "pending: NIC 0 (mgmt-net): DHCP, no address leased yet (the machine is not ready \
             until it is)"
        ) && text.contains("pending: NIC 2 (workload-net): DHCP, no address leased yet"),
        "{text}"
    );
    // On a stock site the same VMs drifted, leased or not; a POOL VM drifted on Deckhouse's.
    for section in [
        "tests/fixtures/vcd/vm-deckhouse-leased.xml",
        "tests/fixtures/vcd/vm-deckhouse-booting.xml",
    ] {
        let stock = audit(&[], section);
        assert_exit_saying(&stock, 1, &[]);
        assert_eq!(
            stdout(&stock)
                .matches("ipAllocationMode is DHCP on the VM, POOL as built from the plan")
                .count(),
            3,
            "{}",
            stdout(&stock)
        );
        assert!(!stdout(&stock).contains("pending"));
    }
    let pool_vm = audit(&deckhouse, "examples/vm-network-connection-section.xml");
    assert_exit_saying(&pool_vm, 1, &[]);
    let json = audit(
        &[&deckhouse[..], &["-o", "json"]].concat(),
        "tests/fixtures/vcd/vm-deckhouse-booting.xml",
    );
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    let pending = &report["clusters"][0]["objects"][0]["pending"];
    assert_eq!(pending.as_array().map(Vec::len), Some(3), "{report}");
    assert_eq!(pending[0]["primary"], true);
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
    assert_exit_saying(&out, 1, &[]);
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
    assert_exit_saying(&out, 1, &[]);
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
    let out = eval_machine(&bad);
    assert_exit_saying(&out, 2, &[]);
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
    let out = eval_machine(&bad);
    assert_exit_saying(&out, 2, &["spec.extraOvdcNetworks"]);
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
    assert_exit_saying(&out, 2, &["examples/nope.yaml"]);

    let mut args = EXAMPLE.to_vec();
    args.extend(["--policy", "examples/cluster.yaml"]);
    let out = nicpolicy(&args);
    assert_exit_saying(&out, 2, &[]);
    let err = stderr(&out);
    assert!(
        err.contains("examples/cluster.yaml") && err.contains("not a WebAssembly module"),
        "{err}"
    );
}

#[test]
fn looping_policy_is_stopped_and_reported() {
    let wasm = common::abi_module("(loop $spin (br $spin)) unreachable");
    let policy = scratch("spin.wasm", &wasm);
    let mut args = EXAMPLE.to_vec();
    args.extend(["--policy", &policy, "--timeout", "100ms", "--no-cache"]);
    let out = nicpolicy(&args);
    assert_exit_saying(&out, 3, &["time limit of 100ms"]);
}

#[test]
fn pinned_sha256_mismatch_is_refused_with_both_digests() {
    let mut args = EXAMPLE.to_vec();
    let wrong = "ab".repeat(32);
    args.extend(["--sha256", &wrong]);
    let out = nicpolicy(&args);
    assert_exit_saying(&out, 2, &[]);
    let err = stderr(&out);
    assert!(
        err.contains(&wrong) && err.contains("the module is"),
        "{err}"
    );
}

#[test]
fn inspect_shows_metadata_exports_and_digest() {
    let out = nicpolicy(&["inspect"]);
    assert_exit_saying(&out, 0, &[]);
    let text = stdout(&out);
    assert!(text.contains("Name:         nicpolicy-capvcd"), "{text}");
    assert!(
        text.contains("nicpolicy_evaluate             func (i32, i32) -> i64"),
        "{text}"
    );
    assert!(text.contains("ABI v1 check: ok"), "{text}");
    assert!(
        text.contains("Requests:     JSON, binary v1, binary v2"),
        "{text}"
    );

    let wasi = wat::parse_str(
        r#"(module (import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32))))"#,
    )
    .expect("valid wat");
    let path = scratch("wasi.wasm", &wasi);
    let out = nicpolicy(&["inspect", &path, "-o", "json"]);
    assert_exit_saying(&out, 2, &[]);
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
    assert_exit_saying(&out, 0, &[]);
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
    assert_exit_saying(&out, 1, &[]);
    assert!(
        text.contains("nics[0].network: expected \"storage-net\", got \"mgmt-net\""),
        "{text}"
    );
    assert!(text.trim_end().ends_with("0 passed, 1 failed"), "{text}");
}

/// `policies/nic-limit-wat` compiled to a scratch `.wasm` file.
fn nic_limit_wasm() -> String {
    let wasm = wat::parse_file(workspace().join("policies/nic-limit-wat/nic-limit.wat"))
        .expect("nic-limit.wat compiles");
    scratch("nic-limit.wasm", &wasm)
}

#[test]
fn eval_chains_policies_each_with_its_settings() {
    let nic_limit = nic_limit_wasm();
    let max_two = scratch("nic-limit-max-2.yaml", b"maxNics: 2\n");
    let mut args = EXAMPLE.to_vec();
    args.extend([
        "--policy",
        &nic_limit,
        "--settings",
        &max_two,
        "--policy",
        "builtin:capvcd",
        "--settings",
        "examples/settings.yaml",
        "-o",
        "json",
    ]);
    let out = nicpolicy(&args);
    assert_exit_saying(&out, 1, &[]);
    let decision: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    // nic-limit (maxNics 2) denies the example's three NICs; its violation keeps its field.
    assert_eq!(decision["allowed"], false);
    let violations = decision["violations"].as_array().expect("violations");
    assert_eq!(violations.len(), 1, "{decision}");
    assert_eq!(violations[0]["field"], "spec.extraOvdcNetworks");
    assert!(
        violations[0]["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("[nic-limit] 3 NICs requested"),
        "{decision}"
    );
    // The plan is CAPVCD's, made with examples/settings.yaml (storage-net on DHCP).
    assert_eq!(decision["nics"][1]["network"], "storage-net");
    assert_eq!(decision["nics"][1]["ipAllocationMode"], "DHCP");

    // The table names both policies.
    let table = nicpolicy(&args[..args.len() - 2]);
    assert!(
        stdout(&table).contains("Policies:  nic-limit 1.0.0 -> nicpolicy-capvcd 0.1.0"),
        "{}",
        stdout(&table)
    );
}

#[test]
fn policy_options_are_checked() {
    let mut args = EXAMPLE.to_vec();
    args.extend(["--policy", "builtin:storage-only"]);
    let out = nicpolicy(&args);
    assert_exit_saying(&out, 2, &[]);
    assert!(
        stderr(&out).contains("no built-in policy named `storage-only`; built-in policies: ")
            && stderr(&out).contains("capvcd"),
        "{}",
        stderr(&out)
    );

    // --settings before every --policy belongs to the first one, so this is two for it.
    let mut args = EXAMPLE.to_vec();
    args.extend([
        "--settings",
        "examples/settings.yaml",
        "--policy",
        "builtin:capvcd",
        "--settings",
        "examples/settings.yaml",
    ]);
    let out = nicpolicy(&args);
    assert_exit_saying(&out, 2, &["two --settings for builtin:capvcd"]);

    let out = nicpolicy(&[
        "test",
        "--settings",
        "examples/settings.yaml",
        "tests/cases/capvcd",
    ]);
    assert_exit_saying(
        &out,
        2,
        &["each case file sets the first policy's settings"],
    );
}

#[test]
fn test_command_gives_case_settings_to_the_first_policy_of_a_chain() {
    let nic_limit = nic_limit_wasm();
    let out = nicpolicy(&[
        "test",
        "--policy",
        &nic_limit,
        "--policy",
        "builtin:capvcd",
        "--settings",
        "examples/settings.yaml",
        "tests/cases/nic-limit/04-template-over-limit.yaml",
        "tests/cases/nic-limit/17-settings-rejected-unknown-key.yaml",
    ]);
    let text = stdout(&out);
    assert_exit_saying(&out, 0, &[]);
    assert!(
        text.starts_with("running 2 cases against nic-limit -> nicpolicy-capvcd"),
        "{text}"
    );
    assert!(text.trim_end().ends_with("2 passed, 0 failed"), "{text}");
}

#[test]
fn test_command_writes_a_junit_report() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("junit/dmz & \"edge\" <eu1>");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("case dir");
    let root = workspace().display().to_string();
    let case = |name: &str, expect: &str| {
        let text = format!(
            "description: {name}\ncluster: {root}/examples/cluster.yaml\nmachine: {root}/examples/machine.yaml\nexpect:\n{expect}"
        );
        std::fs::write(dir.join(name), text).expect("case file");
    };
    case("a-worker's plan.yaml", "  allowed: true\n");
    case(
        "b-wrong-primary.yaml",
        "  nics:\n    - {index: 0, network: storage-net}\n    - {}\n    - {}\n",
    );
    // The unknown key holds a control character, which the loader's error message repeats.
    case("c-unknown-key.yaml", "  \"allowed\\x01\": true\n");
    let report = Path::new(env!("CARGO_TARGET_TMPDIR")).join("junit/report.xml");
    let out = nicpolicy(&[
        "test",
        "--junit",
        &report.display().to_string(),
        &dir.display().to_string(),
    ]);
    let text = stdout(&out);
    assert_exit_saying(&out, 1, &[]);
    assert!(text.trim_end().ends_with("1 passed, 2 failed"), "{text}");

    let xml = std::fs::read_to_string(&report).expect("report written");
    assert!(
        xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>"),
        "{xml}"
    );
    assert!(
        xml.contains("<testsuite name=\"nicpolicy-capvcd\" tests=\"3\" failures=\"2\""),
        "{xml}"
    );
    assert_eq!(xml.matches("<testcase ").count(), 3, "{xml}");
    assert_eq!(xml.matches("<failure ").count(), 2, "{xml}");
    assert_eq!(xml.matches("</failure>").count(), 2, "{xml}");
    // classname is the directory, name the file stem, both escaped.
    let classname = "dmz &amp; &quot;edge&quot; &lt;eu1&gt;\"";
    assert_eq!(xml.matches(classname).count(), 3, "{xml}");
    assert!(xml.contains("name=\"a-worker&apos;s plan\""), "{xml}");
    // The mismatch is the failure's message, quotes escaped; the actual decision is its text.
    assert!(
        xml.contains(
            "message=\"nics[0].network: expected &quot;storage-net&quot;, got &quot;mgmt-net&quot;\""
        ),
        "{xml}"
    );
    assert!(
        xml.contains("actual:\nallowed: true\nnics:\n- index: 0"),
        "{xml}"
    );
    // No raw control character (XML 1.0 cannot hold one); it is spelled out instead.
    assert!(!xml.contains('\u{1}'), "{xml}");
    assert!(xml.contains("allowed\\u0001"), "{xml}");
    // Every & starts an entity or a character reference.
    for (at, _) in xml.match_indices('&') {
        let rest = &xml[at..];
        assert!(
            ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;", "&#10;", "&#13;", "&#9;"]
                .iter()
                .any(|entity| rest.starts_with(entity)),
            "bare & at {at}: {}",
            &rest[..rest.len().min(20)]
        );
    }
    // No markup inside attribute values: every quote-delimited value is free of < and >.
    for tag in xml.split('<').skip(1) {
        let inside = tag.split('>').next().unwrap_or_default();
        for value in inside.split('"').skip(1).step_by(2) {
            assert!(!value.contains('<'), "{value}");
        }
    }
}

#[test]
fn review_answers_an_admission_review_from_a_file() {
    let output = nicpolicy(&[
        "review",
        "--request",
        "tests/fixtures/admission/vcdmachine-create-invalid.json",
        "--clusters",
        "examples/cluster.yaml",
        "--inventory",
        "examples/inventory.yaml",
    ]);
    assert_exit_saying(&output, 1, &[]);
    let response: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("JSON");
    assert_eq!(response["kind"], "AdmissionReview");
    assert_eq!(response["response"]["allowed"], false);
    assert_eq!(response["response"]["status"]["reason"], "Invalid");
    let fields: Vec<&str> = response["response"]["status"]["details"]["causes"]
        .as_array()
        .expect("causes")
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        [
            "spec.extraOvdcNetworks[2]",
            "spec.extraOvdcNetworks[3]",
            "spec.extraOvdcNetworks[4]"
        ]
    );

    // The mutating endpoint of an allowed machine: the plan annotation, decoded on stderr.
    let output = nicpolicy(&[
        "review",
        "--request",
        "tests/fixtures/admission/vcdmachine-create-worker.json",
        "--clusters",
        "examples/cluster.yaml",
        "--endpoint",
        "mutate",
    ]);
    assert_exit_saying(&output, 0, &["/metadata/annotations"]);
}

#[test]
fn review_honours_warn_mode_from_the_config() {
    let config = scratch(
        "warn-serve-config.yaml",
        b"policies:\n  VCDMachine:\n    - {builtin: capvcd, mode: warn}\n",
    );
    let output = nicpolicy(&[
        "review",
        "--config",
        &config,
        "--request",
        "tests/fixtures/admission/vcdmachine-create-invalid.json",
        "--clusters",
        "examples/cluster.yaml",
    ]);
    // Admitted: exit code 0, the would-be denials among the warnings.
    assert_exit_saying(&output, 0, &[]);
    let response: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("JSON");
    assert_eq!(response["response"]["allowed"], true);
    let warnings = response["response"]["warnings"].to_string();
    assert!(
        warnings.contains(
            "nicpolicy (mode: warn): would be denied: spec.extraOvdcNetworks[2]: Duplicate value: [nicpolicy-capvcd]"
        ),
        "{warnings}"
    );
}

#[test]
fn review_refuses_bad_input_clearly() {
    let output = nicpolicy(&[
        "review",
        "--request",
        "tests/fixtures/admission/vcdmachine-create-worker.json",
    ]);
    assert_exit_saying(&output, 2, &["--clusters"]);

    let config = scratch(
        "bad-serve-config.yaml",
        b"policies:\n  VCDMachine:\n    - {builtin: capvcd, timeout: soon}\n",
    );
    let output = nicpolicy(&[
        "review",
        "--config",
        &config,
        "--clusters",
        "examples/cluster.yaml",
        "--request",
        "tests/fixtures/admission/vcdmachine-create-worker.json",
    ]);
    assert_exit_saying(&output, 2, &["policies.VCDMachine[0].timeout"]);

    let output = nicpolicy(&["serve", "--clusters", "examples/cluster.yaml"]);
    assert_exit_saying(&output, 2, &["--tls-self-signed"]);
}

#[test]
fn export_writes_the_builtin_module() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-files");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("role-based.wasm");
    let output = nicpolicy(&["export", "role-based", "-o", path.to_str().unwrap()]);
    assert_exit_saying(&output, 0, &[]);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(&bytes[..4], b"\0asm");
    let output = nicpolicy(&["inspect", path.to_str().unwrap()]);
    assert!(
        stdout(&output).contains("nicpolicy-role-based"),
        "{}",
        stdout(&output)
    );
    let output = nicpolicy(&["export", "capvd"]);
    assert_exit_saying(&output, 2, &["capvcd"]);
}

#[test]
fn export_backstop_writes_a_policy_and_binding_per_kind_with_the_settings_as_parameters() {
    let output = nicpolicy(&[
        "export",
        "backstop",
        "--config",
        "config/nicpolicy/nicpolicy.yaml",
        "--namespace",
        "nicpolicy-system",
        "--namespace-opt-out",
    ]);
    assert_exit_saying(&output, 0, &[]);
    let text = stdout(&output);
    // What it leaves to the webhook comes first, per kind.
    assert!(
        text.starts_with("# nicpolicy backstop of config/nicpolicy/nicpolicy.yaml"),
        "{text}"
    );
    assert!(
        text.contains("# VCDMachine: the rules of nicpolicy-role-based. Left to the webhook:"),
        "{text}"
    );
    let objects: Vec<serde_json::Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("YAML"))
        .collect();
    let kinds: Vec<&str> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "ConfigMap",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding"
        ]
    );
    // The shipped settings (maxNics 6) and inventory are parameters.
    assert_eq!(objects[0]["metadata"]["namespace"], "nicpolicy-system");
    assert_eq!(objects[0]["data"]["VCDMachine.0.maxNics"], "6");
    assert!(objects[0]["data"]["inventory.networks"]
        .as_str()
        .unwrap()
        .contains("\nstorage-net\n"));
    let binding = &objects[2]["spec"];
    assert_eq!(binding["validationActions"][0], "Deny");
    assert_eq!(binding["paramRef"]["parameterNotFoundAction"], "Deny");
    assert_eq!(
        binding["matchResources"]["namespaceSelector"]["matchExpressions"][0]["key"],
        "nicpolicy.io/enforce"
    );

    // A chain whose policy has no backstop gets no policy object (kube-apiserver refuses one
    // without validations), and says so.
    let module = scratch("no-backstop.wasm", &common::abi_module("unreachable"));
    let config_text = format!(
            "apiVersion: nicpolicy.io/v1alpha1\nkind: ServeConfig\npolicies:\n  VCDMachine:\n    - path: {module}\n  VCDMachineTemplate:\n    - builtin: capvcd\n"
    );
    let config = scratch("no-backstop.yaml", config_text.as_bytes());
    let output = nicpolicy(&["export", "backstop", "--config", &config]);
    assert_exit_saying(
        &output,
        0,
        &["VCDMachine: no policy of the chain has a backstop"],
    );
    let text = stdout(&output);
    assert!(
        text.contains("#   - policies.VCDMachine[0] (sha256:"),
        "{text}"
    );
    assert!(
        text.contains("# VCDMachine: no policy written. Left to the webhook:"),
        "{text}"
    );
    assert!(
        text.contains("no backstop (the module does not export nicpolicy_backstop)"),
        "{text}"
    );
    assert!(
        !text.contains("name: nicpolicy-backstop-vcdmachine\n"),
        "{text}"
    );
    assert!(
        text.contains("name: nicpolicy-backstop-vcdmachinetemplate\n"),
        "{text}"
    );

    // A configuration that cannot be read is bad input, named.
    let output = nicpolicy(&["export", "backstop", "--config", "no-such.yaml"]);
    assert_exit_saying(&output, 2, &["no-such.yaml"]);
    // A module name is still a module.
    let output = nicpolicy(&["export", "capvcd"]);
    assert_exit_saying(&output, 0, &[]);
}

#[test]
fn export_writes_the_kubewarden_build_and_inspect_names_its_abi() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-files");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("capvcd.kubewarden.wasm");
    let file = path.to_str().unwrap();
    let output = nicpolicy(&["export", "capvcd", "--format", "kubewarden", "-o", file]);
    assert_exit_saying(&output, 0, &[]);
    let output = nicpolicy(&["inspect", file]);
    let text = stdout(&output);
    assert_exit_saying(&output, 0, &[]);
    assert!(
        text.contains("ABI:          Kubewarden waPC (protocol v1)"),
        "{text}"
    );
    assert!(
        text.contains("Reads:        cluster.x-k8s.io/v1beta1 Cluster"),
        "{text}"
    );
    assert!(text.contains("waPC check: ok"), "{text}");
    let output = nicpolicy(&["inspect", "-o", "json", file]);
    let info: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(info["kubewarden"]["protocolVersion"], "v1");
    assert_eq!(info["abiCheck"], "ok");
    // nicpolicy's own commands refuse it, saying what it is.
    let mut eval = EXAMPLE.to_vec();
    eval.extend(["--policy", file]);
    let output = nicpolicy(&eval);
    assert_exit_saying(&output, 2, &["Kubewarden (waPC)"]);
}

/// `examples/machine.yaml` with its extra networks replaced by `extras` (YAML list items) and
/// `metadata` lines added.
fn example_machine(name: &str, extras: &[&str], metadata: &str) -> String {
    let text = std::fs::read_to_string(workspace().join("examples/machine.yaml"))
        .expect("example")
        .replace(
            "  extraOvdcNetworks:\n    - storage-net\n    - workload-net\n",
            &format!("  extraOvdcNetworks: [{}]\n", extras.join(", ")),
        )
        .replace("metadata:\n", &format!("metadata:\n{metadata}"));
    scratch(name, text.as_bytes())
}

/// [`example_machine`] provisioned: `spec.providerID` set, as CAPVCD sets it once the VM exists.
fn provisioned_machine(name: &str, extras: &[&str], metadata: &str) -> String {
    let path = example_machine(name, extras, metadata);
    let text = std::fs::read_to_string(&path).expect("machine file").replace(
        "spec:\n",
        "spec:\n  providerID: vmware-cloud-director://urn:vcloud:vm:4a7f3c1e-9b2d-4e8a-a6f1-3d5c7b9e2f10\n",
    );
    scratch(name, text.as_bytes())
}

#[test]
fn eval_old_judges_an_update_by_what_it_changes() {
    let old = provisioned_machine("stored-dup-old.yaml", &["storage-net", "storage-net"], "");
    let relabelled = provisioned_machine(
        "stored-dup-new.yaml",
        &["storage-net", "storage-net"],
        "  annotations: {platform.example.net/drain: \"true\"}\n",
    );
    let eval = |machine: &str, old: &str| {
        nicpolicy(&[
            "eval",
            "--cluster",
            "examples/cluster.yaml",
            "--machine",
            machine,
            "--old",
            old,
        ])
    };
    // The stored duplicate is a warning; the UPDATE is allowed.
    let out = eval(&relabelled, &old);
    assert_exit_saying(&out, 0, &[]);
    assert!(
        stdout(&out).contains(
            "pre-existing violation, not enforced on this update: spec.extraOvdcNetworks[1]: Duplicate value"
        ),
        "{}",
        stdout(&out)
    );
    // A CREATE of the same machine is denied.
    let out = eval_machine(&relabelled);
    assert_exit_saying(&out, 1, &[]);
    // An UPDATE adding a violation is denied for it.
    let worse = provisioned_machine(
        "stored-dup-worse.yaml",
        &["storage-net", "storage-net", "mgmt-net"],
        "",
    );
    let out = eval(&worse, &old);
    assert_exit_saying(&out, 1, &[]);
    assert!(stdout(&out).contains("spec.extraOvdcNetworks[2] (Duplicate)"));
    assert!(!stdout(&out).contains("spec.extraOvdcNetworks[1] (Duplicate)"));
    // Being deleted: never denied.
    let deleting = example_machine(
        "stored-dup-deleting.yaml",
        &["storage-net", "storage-net", "mgmt-net"],
        "  deletionTimestamp: \"2026-12-03T16:20:00Z\"\n",
    );
    let out = eval(&deleting, &old);
    assert_exit_saying(&out, 0, &[]);
    assert!(stdout(&out).contains("not enforced, the object is being deleted"));
    // A machine not built yet has no VM to keep: judged in full, the stored duplicate too.
    let unbuilt_old = example_machine("unbuilt-old.yaml", &["storage-net", "storage-net"], "");
    let unbuilt = example_machine(
        "unbuilt-new.yaml",
        &["storage-net", "storage-net"],
        "  annotations: {platform.example.net/drain: \"true\"}\n",
    );
    let out = eval(&unbuilt, &unbuilt_old);
    assert_exit_saying(&out, 1, &[]);
    assert!(stdout(&out).contains("spec.extraOvdcNetworks[1] (Duplicate)"));
}

#[test]
fn eval_without_cluster_checks_what_needs_none() {
    let template = scratch(
        "template-without-cluster.yaml",
        b"apiVersion: infrastructure.cluster.x-k8s.io/v1beta3
kind: VCDMachineTemplate
metadata: {name: prod-eu1-md-0, namespace: prod-eu1}
spec:
  template:
    spec: {extraOvdcNetworks: [storage-net, workload-net]}
",
    );
    let out = nicpolicy(&["eval", "--machine", &template]);
    assert_exit_saying(&out, 0, &[]);
    let text = stdout(&out);
    assert!(text.contains("Cluster:   (not known yet"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("1 ") && l.contains("storage-net")),
        "{text}"
    );
}

#[test]
fn policy_log_lines_cannot_forge_output() {
    // Logs "ok\nerror: forged\x1b[2J" and allows.
    let wasm = wat::parse_str(
        r#"(module
          (import "nicpolicy" "log" (func $log (param i32 i32 i32)))
          (memory (export "memory") 1)
          (data (i32.const 16) "{\"valid\":true}")
          (data (i32.const 48) "{\"allowed\":true}")
          (data (i32.const 96) "ok\nerror: forged\1b[2J")
          (func (export "nicpolicy_abi_version") (result i32) i32.const 1)
          (func (export "nicpolicy_alloc") (param i32) (result i32) i32.const 1024)
          (func (export "nicpolicy_validate_settings") (param i32 i32) (result i64)
            i64.const 68719476750)
          (func (export "nicpolicy_evaluate") (param i32 i32) (result i64)
            (call $log (i32.const 3) (i32.const 96) (i32.const 20))
            i64.const 206158430224))"#,
    )
    .expect("valid wat");
    let policy = scratch("forging-log.wasm", &wasm);
    let mut args = EXAMPLE.to_vec();
    args.extend(["--policy", &policy, "-v"]);
    let out = nicpolicy(&args);
    assert_exit_saying(&out, 0, &[]);
    let err = stderr(&out);
    assert!(
        err.contains(r"policy log [Error]: ok\nerror: forged\u{1b}[2J"),
        "{err}"
    );
    assert!(!err.lines().any(|l| l.starts_with("error:")), "{err}");
    assert!(!err.contains('\u{1b}'), "{err}");
}

/// The cache directory's entries, sorted by modification time (oldest first).
fn cache_entries(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(dir)
        .expect("cache dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .map(|p| (std::fs::metadata(&p).unwrap().modified().unwrap(), p))
        .collect();
    entries.sort();
    entries.into_iter().map(|(_, p)| p).collect()
}

#[cfg(unix)]
#[test]
fn a_cache_that_is_not_private_is_never_loaded() {
    use std::os::unix::fs::{chown, PermissionsExt};

    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("shared-cache");
    let _ = std::fs::remove_dir_all(&dir);
    let with_cache = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_nicpolicy"))
            .args(args)
            .current_dir(workspace())
            .env("NICPOLICY_CACHE_DIR", &dir)
            .output()
            .expect("nicpolicy runs")
    };
    let invalid = [
        "eval",
        "--cluster",
        "examples/cluster.yaml",
        "--machine",
        "examples/invalid-machine.yaml",
    ];
    // Fill the cache: the CAPVCD policy first, then a module that allows everything.
    assert_eq!(with_cache(&invalid).status.code(), Some(1));
    let capvcd_entry = cache_entries(&dir).pop().expect("CAPVCD entry");
    let allow_all = scratch(
        "allow-all.wasm",
        &wat::parse_str(
            r#"(module
              (memory (export "memory") 1)
              (data (i32.const 16) "{\"valid\":true}")
              (data (i32.const 48) "{\"allowed\":true}")
              (func (export "nicpolicy_abi_version") (result i32) i32.const 1)
              (func (export "nicpolicy_alloc") (param i32) (result i32) i32.const 1024)
              (func (export "nicpolicy_validate_settings") (param i32 i32) (result i64)
                i64.const 68719476750)
              (func (export "nicpolicy_evaluate") (param i32 i32) (result i64)
                i64.const 206158430224))"#,
        )
        .expect("valid wat"),
    );
    let mut args = invalid.to_vec();
    args.extend(["--policy", &allow_all]);
    assert_eq!(with_cache(&args).status.code(), Some(0));
    let planted = cache_entries(&dir)
        .into_iter()
        .find(|p| *p != capvcd_entry)
        .expect("allow-all entry");

    // Someone who can write the directory puts the allow-all code in the CAPVCD entry.
    std::fs::copy(&planted, &capvcd_entry).expect("plant");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = with_cache(&invalid);
    assert_exit_saying(&out, 1, &[]);
    assert!(
        stderr(&out).contains("compiled-module cache not used")
            && stderr(&out).contains("writable by its group or others (mode 777)"),
        "{}",
        stderr(&out)
    );
    // A private directory, but the file belongs to another user.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    chown(&capvcd_entry, Some(4242), Some(4242)).expect("chown (tests run as root)");
    let out = with_cache(&invalid);
    assert_exit_saying(&out, 1, &["belongs to uid 4242"]);
    // A group-writable file in a private directory.
    chown(&capvcd_entry, Some(own_uid()), None).expect("chown back");
    std::fs::set_permissions(&capvcd_entry, std::fs::Permissions::from_mode(0o664)).unwrap();
    let out = with_cache(&invalid);
    assert_exit_saying(&out, 1, &["mode 664"]);
    // The trust boundary: a private cache is used as it is, planted file and all. (This is
    // what the checks above keep a shared directory from doing.)
    std::fs::set_permissions(&capvcd_entry, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = with_cache(&invalid);
    assert_exit_saying(&out, 0, &[]);
    assert!(!stderr(&out).contains("cache not used"), "{}", stderr(&out));
}

/// This process's uid, read from a file it creates (no `unsafe` needed for `geteuid`).
fn own_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    let probe = scratch("uid-probe", b"");
    std::fs::metadata(probe).expect("probe").uid()
}

#[test]
fn playground_out_writes_the_page_for_a_static_server() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("playground-out");
    let _ = std::fs::remove_dir_all(&dir);
    let output = nicpolicy(&["playground", "--out", dir.to_str().expect("UTF-8 path")]);
    assert!(output.status.success(), "{}", stderr(&output));
    let index = std::fs::read_to_string(dir.join("index.html")).expect("index.html");
    assert!(index.contains("app.js"), "{index}");
    let policies = std::fs::read_to_string(dir.join("pkg/policies.json")).expect("policies.json");
    for name in ["capvcd", "role-based", "zone-aware", "static-ip"] {
        assert!(policies.contains(&format!("\"{name}\"")), "{policies}");
    }
    let wasm = std::fs::read(dir.join("pkg/nicpolicy_capvcd_bg.wasm")).expect("the JS build");
    assert_eq!(&wasm[..4], b"\0asm");
    assert!(dir.join("examples/cluster.yaml").is_file());
}

#[test]
fn playground_serves_the_page_until_stopped() {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpStream;

    let mut server = Command::new(env!("CARGO_BIN_EXE_nicpolicy"))
        .args(["playground", "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("nicpolicy runs");
    let mut line = String::new();
    let stdout_pipe = server.stdout.take().expect("stdout");
    BufReader::new(stdout_pipe)
        .read_line(&mut line)
        .expect("the URL line");
    let address = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_string();
    let get = |path: &str| {
        let mut stream = TcpStream::connect(&address).expect("connects");
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
        )
        .expect("request sent");
        let mut response = Vec::new();
        stream.read_to_end(&mut response).expect("response");
        String::from_utf8_lossy(&response).into_owned()
    };
    let index = get("/");
    let wasm = get("/pkg/nicpolicy_playground_bg.wasm");
    let missing = get("/../Cargo.toml");
    let _ = server.kill();
    let _ = server.wait();
    assert!(index.starts_with("HTTP/1.1 200"), "{index}");
    assert!(index.contains("content-type: text/html"), "{index}");
    assert!(index.contains("wasm-unsafe-eval"), "{index}");
    assert!(wasm.contains("content-type: application/wasm"), "{wasm}");
    assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
}

#[test]
fn playground_refuses_listen_and_out_together() {
    let output = nicpolicy(&["playground", "--listen", "127.0.0.1:0", "--out", "x"]);
    assert_exit_saying(&output, 2, &[]);
}

#[test]
fn a_native_library_given_as_a_policy_says_how_to_build_one() {
    // The start of a Linux shared object, as `cargo build` writes it for the host.
    let library = scratch(
        "libmy_site_policy.so",
        b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0",
    );
    let out = nicpolicy(&["inspect", &library]);
    assert_exit_saying(&out, 2, &[]);
    let err = stderr(&out);
    assert!(
        err.contains("native library") && err.contains("--target wasm32-unknown-unknown"),
        "{err}"
    );
}

#[test]
fn refused_settings_name_the_file_and_the_nested_field() {
    let settings = scratch(
        "capvcd-typo.yaml",
        b"networks:\n  storage-net: {ipAllocationMod: DHCP}\n",
    );
    let mut args = EXAMPLE.to_vec();
    args.extend(["--settings", &settings]);
    let out = nicpolicy(&args);
    assert_exit_saying(&out, 2, &[]);
    let err = stderr(&out);
    assert!(
        err.contains(&format!("settings in {settings} refused by the policy"))
            && err.contains("networks.storage-net: unknown field `ipAllocationMod`"),
        "{err}"
    );
}

/// Runs nicpolicy with its stdout a pipe whose reader is already gone, as in
/// `nicpolicy test ... | head -1` once head has its line.
fn with_closed_stdout(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_nicpolicy"))
        .args(args)
        .current_dir(workspace())
        .env(
            "NICPOLICY_CACHE_DIR",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-cache"),
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("nicpolicy runs");
    // Closed before nicpolicy has loaded its policy, so every write meets a closed pipe.
    drop(child.stdout.take());
    child.wait_with_output().expect("nicpolicy ends")
}

#[test]
fn closed_stdout_ends_quietly_with_the_verdict_as_exit_code() {
    let passed = with_closed_stdout(&["test", "--policy", "builtin:capvcd", "tests/cases/capvcd"]);
    assert_exit_saying(&passed, 0, &[]);
    assert!(!stderr(&passed).contains("panicked"), "{}", stderr(&passed));
    let denied = with_closed_stdout(&[
        "eval",
        "--cluster",
        "examples/cluster.yaml",
        "--machine",
        "examples/invalid-machine.yaml",
        "--inventory",
        "examples/inventory.yaml",
    ]);
    assert_exit_saying(&denied, 1, &[]);
    assert_eq!(stderr(&denied), "");
}

const WORKED: [&str; 6] = [
    "--cluster",
    "examples/cluster.yaml",
    "--machine",
    "examples/machine.yaml",
    "--inventory",
    "examples/inventory.yaml",
];

#[test]
fn render_vcd_writes_the_plan_or_what_capvcd_builds() {
    let plan = nicpolicy(
        &[
            &["render", "vcd"][..],
            &WORKED,
            &["--settings", "examples/settings.yaml"],
        ]
        .concat(),
    );
    assert_exit_saying(&plan, 0, &[]);
    let xml = stdout(&plan);
    assert!(
        xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<NetworkConnectionSection "),
        "{xml}"
    );
    assert_eq!(xml.matches("<NetworkConnection ").count(), 3, "{xml}");
    assert!(
        xml.contains("<IpAddressAllocationMode>DHCP</IpAddressAllocationMode>"),
        "{xml}"
    );
    assert!(
        stderr(&plan).contains("not built as planned: NIC 1 (storage-net)")
            && stderr(&plan).contains("vApp networks to attach"),
        "{}",
        stderr(&plan)
    );
    let built = nicpolicy(
        &[
            &["render", "vcd", "--built"][..],
            &WORKED,
            &["--settings", "examples/settings.yaml"],
        ]
        .concat(),
    );
    assert!(!stdout(&built).contains("DHCP"), "{}", stdout(&built));
    // A denied machine is built by nobody.
    let denied = nicpolicy(&[
        "render",
        "vcd",
        "--cluster",
        "examples/cluster.yaml",
        "--machine",
        "examples/invalid-machine.yaml",
    ]);
    assert_exit_saying(&denied, 1, &[]);
    assert!(stdout(&denied).is_empty());
    assert!(
        stderr(&denied).contains("Duplicate value"),
        "{}",
        stderr(&denied)
    );
}

/// `nicpolicy render network-config` of the worked example with `more` arguments.
fn render_network_config(more: &[&str]) -> Output {
    nicpolicy(&[&["render", "network-config"][..], &WORKED, more].concat())
}

#[test]
fn render_network_config_gives_one_default_route_and_the_kubelet_node_ip() {
    let nics = ["--nics", "examples/vm-network-connection-section.xml"];
    let out = render_network_config(&nics);
    assert_exit_saying(&out, 0, &[]);
    let config: serde_json::Value = serde_yaml_ng::from_str(&stdout(&out)).expect("YAML");
    assert_eq!(config["version"], 2);
    let ethernets = config["ethernets"].as_object().expect("ethernets");
    assert_eq!(ethernets.len(), 3);
    let defaults: Vec<&str> = ethernets
        .values()
        .flat_map(|e| e["routes"].as_array().into_iter().flatten())
        .filter(|r| r["to"] == "0.0.0.0/0")
        .filter_map(|r| r["via"].as_str())
        .collect();
    assert_eq!(defaults, ["10.10.0.1"]);
    assert_eq!(
        ethernets["nic1"]["match"]["macaddress"],
        "00:50:56:01:2a:11"
    );
    assert_eq!(ethernets["nic1"]["mtu"], 9000);
    assert!(
        stderr(&out).contains("node-ip: \"10.10.0.23\""),
        "{}",
        stderr(&out)
    );

    let v2 = render_network_config(&[&nics[..], &["--bootstrap-version", "v1beta2"]].concat());
    assert!(stderr(&v2).contains("- name: node-ip\n"), "{}", stderr(&v2));

    // Without the inventory there is no prefix or gateway; a section of another VM is refused.
    let bare = nicpolicy(&[
        "render",
        "network-config",
        "--cluster",
        "examples/cluster.yaml",
        "--machine",
        "examples/machine.yaml",
        "--nics",
        "examples/vm-network-connection-section.xml",
    ]);
    assert_exit_saying(&bare, 2, &["--inventory is needed"]);
    // A PUT body (no MACs yet) instead of the VM's section, then another VM's section.
    let put = render_network_config(&["--nics", "tests/fixtures/vcd/worker-four-networks.xml"]);
    assert_exit_saying(&put, 2, &["NIC 0: the VM's section gives no MACAddress"]);
    let section =
        std::fs::read_to_string(workspace().join("examples/vm-network-connection-section.xml"))
            .unwrap()
            .replace("network=\"storage-net\"", "network=\"backup-net\"");
    let other_vm = scratch("other-vm.xml", section.as_bytes());
    let other = render_network_config(&["--nics", other_vm.as_str()]);
    assert_exit_saying(&other, 2, &[]);
    assert!(
        stderr(&other)
            .contains("NIC 1: the VM's NIC 1 is on backup-net, the plan's on storage-net"),
        "{}",
        stderr(&other)
    );
    let not_xml = render_network_config(&["--nics", "examples/machine.yaml"]);
    assert_exit_saying(&not_xml, 2, &["--nics examples/machine.yaml"]);
}

/// `nicpolicy audit` of the worked example's worker with its VM's `section`, and `more`.
fn audit_vm(section: &str, more: &[&str]) -> Output {
    let vm = format!("prod-eu1/prod-eu1-md-0-x7k2p={section}");
    nicpolicy(
        &[
            &[
                "audit",
                "examples/cluster.yaml",
                "examples/machine.yaml",
                "--inventory",
                "examples/inventory.yaml",
                "--vm-nics",
                &vm,
            ][..],
            more,
        ]
        .concat(),
    )
}

#[test]
fn audit_reports_a_vm_that_drifted_from_its_plan() {
    let audit = |section: &str| audit_vm(section, &[]);
    let same = audit("examples/vm-network-connection-section.xml");
    assert_exit_saying(&same, 0, &[]);
    assert!(!stdout(&same).contains("drift"));
    let other = audit("tests/fixtures/vcd/worker-four-networks.xml");
    assert_exit_saying(&other, 1, &[]);
    let text = stdout(&other);
    assert!(
        text.contains(
            "drift: NIC 1: network is workload-net on the VM, storage-net as built from the plan"
        ) && text.contains("drift: the VM has NIC 3 (backup-net), which is not to be built"),
        "{text}"
    );
    let unknown = nicpolicy(&[
        "audit",
        "examples/cluster.yaml",
        "examples/machine.yaml",
        "--vm-nics",
        "prod-eu1-md-0-zzzzz=examples/vm-network-connection-section.xml",
    ]);
    assert_exit_saying(&unknown, 2, &["no VCDMachine of that name"]);
}

/// `nicpolicy audit` of prod-eu1's rollouts (examples/rollouts.yaml) with `inventory`.
fn audit_rollouts(inventory: &str, more: &[&str]) -> Output {
    nicpolicy(
        &[
            &[
                "audit",
                "examples/cluster.yaml",
                "examples/machine.yaml",
                "examples/rollouts.yaml",
                "--inventory",
                inventory,
            ][..],
            more,
        ]
        .concat(),
    )
}

#[test]
fn audit_reports_a_rollout_the_static_pool_cannot_take() {
    let out = audit_rollouts("examples/inventory-imported.yaml", &[]);
    assert_exit_saying(&out, 1, &[]);
    let text = stdout(&out);
    let row = |network: &str| -> Vec<String> {
        text.lines()
            .find(|l| l.starts_with(&format!("{network} ")))
            .unwrap_or_else(|| panic!("no {network} row in\n{text}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    // storage-net: 3 free; md-0 adds 6 machines (the autoscaler's 6 + 1 surge, 1 there), the
    // control plane 4 (3 + 1): one address each.
    assert_eq!(
        row("storage-net"),
        ["storage-net", "231", "228", "3", "6", "10"]
    );
    assert_eq!(row("mgmt-net"), ["mgmt-net", "181", "96", "85", "6", "10"]);
    assert_eq!(
        row("workload-net"),
        ["workload-net", "999", "412", "587", "6", "6"]
    );
    assert!(
        text.contains(
            "short: storage-net: 3 addresses free, a rollout of prod-eu1/prod-eu1-md-0 needs 6 \
             (6 machines × 1 POOL NIC; autoscaler max 6 (replicas 4) + maxSurge 1, 1 existing)"
        ) && text.contains("a rollout of prod-eu1/prod-eu1-control-plane needs 4"),
        "{text}"
    );
    assert!(!text.contains("short: mgmt-net"), "{text}");

    let json = audit_rollouts("examples/inventory-imported.yaml", &["-o", "json"]);
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    let storage = &report["capacity"]["networks"][3];
    assert_eq!(storage["network"], "storage-net");
    assert_eq!(storage["needs"][0]["name"], "prod-eu1-md-0");
    assert_eq!(storage["needs"][0]["machines"], 6);

    // On a Deckhouse site every NIC is DHCP: nothing comes from the pools.
    let deckhouse = audit_rollouts(
        "examples/inventory-imported.yaml",
        &["--provisioner", "deckhouse"],
    );
    assert_exit_saying(&deckhouse, 0, &[]);
    assert!(
        !stdout(&deckhouse).contains("short:"),
        "{}",
        stdout(&deckhouse)
    );
    // An inventory without counts has no pools to show.
    let uncounted = audit_rollouts("examples/inventory.yaml", &[]);
    assert_exit_saying(&uncounted, 0, &[]);
    assert!(!stdout(&uncounted).contains("Static pools"));
    // Pools but no rollouts among the inputs: said, not shown as zero needs.
    let none = nicpolicy(&[
        "audit",
        "examples/cluster.yaml",
        "examples/machine.yaml",
        "--inventory",
        "examples/inventory-imported.yaml",
    ]);
    assert_exit_saying(&none, 0, &[]);
    assert!(
        stdout(&none).contains(
            "no MachineDeployment or KubeadmControlPlane among the inputs: no rollout counted"
        ),
        "{}",
        stdout(&none)
    );
    // A count that does not read is named.
    let text = std::fs::read_to_string(workspace().join("examples/inventory-imported.yaml"))
        .unwrap()
        .replace("usedIpCount: 228", "usedIpCount: 240");
    let bad = scratch("over-used.yaml", text.as_bytes());
    let out = audit_rollouts(bad.as_str(), &[]);
    assert_exit_saying(
        &out,
        2,
        &["networks[3].usedIpCount: 240 is more than totalIpCount 231"],
    );
}

#[test]
fn audit_judges_each_machine_against_its_org_vdcs_inventory() {
    // prod-eu1 is in eu1-ovdc-prod; its own inventory lacks workload-net, the default has it.
    let text = std::fs::read_to_string(workspace().join("examples/inventory-imported.yaml"))
        .unwrap()
        .replace("- name: workload-net", "- name: other-net");
    let prod = scratch("eu1-ovdc-prod.yaml", text.as_bytes());
    let vdc = format!("eu1-ovdc-prod={prod}");
    let out = audit_rollouts(
        "examples/inventory-imported.yaml",
        &["--vdc-inventory", &vdc, "-o", "json"],
    );
    assert_exit_saying(&out, 1, &[]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let worker = &report["clusters"][0]["objects"][0];
    assert_eq!(worker["name"], "prod-eu1-md-0-x7k2p");
    assert_eq!(worker["result"], "denied", "{worker}");
    // The pools counted are eu1-ovdc-prod's: the default's take nothing.
    let networks = report["capacity"]["networks"].as_array().expect("networks");
    let needs = |vdc: Option<&str>, network: &str| {
        networks
            .iter()
            .find(|n| n["vdc"].as_str() == vdc && n["network"] == network)
            .map(|n| n["largest"].as_u64())
    };
    // md-0's template asks for workload-net too, so it is denied and not counted: the control
    // plane's rollout is.
    assert_eq!(needs(Some("eu1-ovdc-prod"), "storage-net"), Some(Some(4)));
    assert_eq!(needs(None, "storage-net"), Some(Some(0)));
    assert_eq!(
        report["capacity"]["uncounted"],
        serde_json::json!([
            "MachineDeployment prod-eu1/prod-eu1-md-0: not counted: its VCDMachineTemplate \
             prod-eu1-md-0 is denied"
        ])
    );
    let table = audit_rollouts(
        "examples/inventory-imported.yaml",
        &["--vdc-inventory", &vdc],
    );
    assert!(
        stdout(&table).contains(
            "short: storage-net (eu1-ovdc-prod): 3 addresses free, a rollout of \
             prod-eu1/prod-eu1-control-plane needs 4"
        ),
        "{}",
        stdout(&table)
    );
    // Another VDC's inventory leaves prod-eu1 on the default.
    let other = audit_rollouts(
        "examples/inventory.yaml",
        &["--vdc-inventory", &format!("eu1-ovdc-stage={prod}")],
    );
    assert_exit_saying(&other, 0, &[]);
    let bad = audit_rollouts(
        "examples/inventory.yaml",
        &["--vdc-inventory", "eu1-ovdc-prod"],
    );
    assert_exit_saying(&bad, 2, &["is not OVDC=FILE"]);
}

#[test]
fn version_names_the_abi_and_each_built_in_policy_s_digest() {
    let out = nicpolicy(&["--version"]);
    assert_exit_saying(&out, 0, &[]);
    let text = stdout(&out);
    assert!(text.starts_with("nicpolicy 0."), "{text}");
    assert!(text.contains("ABI: nicpolicy v1"), "{text}");
    for name in ["capvcd", "role-based", "static-ip", "zone-aware"] {
        let path = scratch(&format!("version-{name}.wasm"), b"");
        let exported = nicpolicy(&["export", name, "-o", &path]);
        let said = stderr(&exported) + &stdout(&exported);
        let sha256 = said
            .split("sha256 ")
            .nth(1)
            .and_then(|rest| rest.get(..64))
            .unwrap_or_else(|| panic!("{said}"));
        assert!(
            text.lines()
                .any(|l| l.trim_start().starts_with(name) && l.ends_with(sha256)),
            "{name} {sha256} in:\n{text}"
        );
    }
    // -V stays one line, as tools that parse it expect.
    assert_eq!(stdout(&nicpolicy(&["-V"])).lines().count(), 1);
}

#[test]
fn completion_scripts_cover_the_commands() {
    for shell in ["bash", "zsh", "fish"] {
        let out = nicpolicy(&["completion", shell]);
        assert_exit_saying(&out, 0, &[]);
        let script = stdout(&out);
        for command in [
            "eval",
            "audit",
            "render",
            "network-config",
            "provisioner-applies",
        ] {
            assert!(script.contains(command), "{shell}: no {command}");
        }
        assert!(
            !script.contains("__compile-module"),
            "{shell}: the compiler child shows"
        );
    }
    assert_eq!(nicpolicy(&["completion", "tcsh"]).status.code(), Some(2));
}

#[test]
fn new_writes_a_policy_crate_and_refuses_to_overwrite_or_misname() {
    let dir = std::env::temp_dir().join(format!("nicpolicy-new-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let dir_arg = dir.to_string_lossy().into_owned();
    let sdk = workspace().join("plugin").to_string_lossy().into_owned();
    let out = nicpolicy(&["new", "dmz-guard", "--path", &dir_arg, "--sdk-path", &sdk]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("release/dmz_guard.wasm cases/"),
        "{}",
        stdout(&out)
    );
    let crate_dir = dir.join("dmz-guard");
    let manifest = std::fs::read_to_string(crate_dir.join("Cargo.toml")).expect("Cargo.toml");
    assert!(manifest.contains("name = \"dmz-guard\""), "{manifest}");
    assert!(
        manifest.contains("nicpolicy-plugin = { path = "),
        "{manifest}"
    );
    for file in [
        "src/lib.rs",
        "cases/01-worker-may-use-the-dmz.yaml",
        "fixtures/cluster.yaml",
        "README.md",
        ".github/workflows/policy.yml",
    ] {
        assert!(crate_dir.join(file).is_file(), "{file} missing");
    }
    // The case files load as nicpolicy test reads them (the policy is built in test.sh).
    let loaded =
        nicpolicy::cases::Case::load(&crate_dir.join("cases/02-control-plane-off-the-dmz.yaml"));
    assert!(loaded.is_ok(), "{:?}", loaded.err());

    refused(
        &["new", "dmz-guard", "--path", &dir_arg],
        "already exists and is not empty",
    );
    refused(
        &["new", "DMZ_guard", "--path", &dir_arg],
        "is not a policy name",
    );
    refused(
        &["new", "other", "--path", &dir_arg, "--sdk-path", &dir_arg],
        "no Cargo.toml there",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_compare_fails_a_costlier_policy_and_passes_the_same_one() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-compare");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let cases = workspace().join("tests/cases/capvcd");
    let case = |name: &str| cases.join(name).to_string_lossy().into_owned();
    let (one, two) = (case("01-primary-only.yaml"), case("02-one-extra.yaml"));
    let baseline = dir.join("baseline.json").to_string_lossy().into_owned();
    let bench = |extra: &[&str]| {
        let mut args = vec![
            "bench",
            "--policy",
            "builtin:capvcd",
            "--iterations",
            "2",
            one.as_str(),
            two.as_str(),
        ];
        args.extend_from_slice(extra);
        nicpolicy(&args)
    };
    let saved = bench(&["--save", &baseline]);
    assert!(saved.status.success(), "{}", stderr(&saved));
    let figures: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&baseline).expect("baseline")).expect("JSON");
    assert!(
        figures[0]["cases"][0]["fuel"]
            .as_u64()
            .is_some_and(|f| f > 1000),
        "{figures}"
    );

    // The same policy passes: fuel does not flap.
    let same = bench(&["--compare", &baseline]);
    assert!(same.status.success(), "{}", stderr(&same));
    assert!(
        stderr(&same).contains("no figure grew more than 10%"),
        "{}",
        stderr(&same)
    );

    // The same policy made costlier on purpose (300 network settings to read on every
    // evaluation) fails, naming each case and the figure.
    let heavy = dir.join("heavy.yaml");
    let mut text = String::from("networks:\n");
    for i in 0..300 {
        text.push_str(&format!("  lab-net-{i:03}: {{ipAllocationMode: POOL}}\n"));
    }
    std::fs::write(&heavy, text).expect("settings");
    let costlier = bench(&[
        "--settings",
        &heavy.to_string_lossy(),
        "--compare",
        &baseline,
    ]);
    assert_exit_saying(&costlier, 1, &[]);
    let said = stderr(&costlier);
    for name in ["01-primary-only", "02-one-extra"] {
        assert!(
            said.contains(&format!("regression: nicpolicy-capvcd / {name}: fuel ")),
            "{said}"
        );
    }
    // A threshold above the growth lets it through; a baseline that is not one is refused.
    let lenient = bench(&[
        "--settings",
        &heavy.to_string_lossy(),
        "--compare",
        &baseline,
        "--threshold",
        "1000000",
    ]);
    assert!(lenient.status.success(), "{}", stderr(&lenient));
    std::fs::write(dir.join("bad.json"), "{}").expect("write");
    refused(
        &[
            "bench",
            "--policy",
            "builtin:capvcd",
            &one,
            "--compare",
            &dir.join("bad.json").to_string_lossy(),
        ],
        "not a baseline written by `nicpolicy bench --save`",
    );
}

#[test]
fn bench_times_a_policy_beside_the_built_in_one() {
    let cases = workspace().join("tests/cases/capvcd");
    let one = cases
        .join("02-one-extra.yaml")
        .to_string_lossy()
        .into_owned();
    let two = cases
        .join("03-three-extras-in-order.yaml")
        .to_string_lossy()
        .into_owned();
    let out = nicpolicy(&[
        "bench",
        "--policy",
        "builtin:role-based",
        "--iterations",
        "5",
        "-o",
        "json",
        &one,
        &two,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let benches: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    let benches = benches.as_array().expect("one entry per policy");
    let names: Vec<&str> = benches
        .iter()
        .filter_map(|b| b["policy"].as_str())
        .collect();
    assert_eq!(names, ["nicpolicy-role-based", "nicpolicy-capvcd"]);
    assert_eq!(benches[1]["reference"], true);
    for bench in benches {
        assert!(
            bench["compileMs"].as_f64().is_some_and(|ms| ms > 0.0),
            "{bench}"
        );
        assert!(
            bench["cacheLoadMs"].as_f64().is_some_and(|ms| ms > 0.0),
            "{bench}"
        );
        let cases = bench["cases"].as_array().expect("cases");
        assert_eq!(cases.len(), 2);
        for case in cases {
            assert_eq!(case["iterations"], 5);
            let (p50, p99) = (
                case["p50Us"].as_f64().unwrap(),
                case["p99Us"].as_f64().unwrap(),
            );
            assert!(p50 > 0.0 && p99 >= p50, "{case}");
            // A Rust policy's instance starts with at least its 1 MiB stack.
            assert!(
                case["memoryBytes"].as_u64().is_some_and(|b| b >= 1 << 20),
                "{case}"
            );
        }
    }
    // A case that expects refused settings leaves nothing to time.
    let settings_refused = cases.join("59-settings-max-nics-out-of-range.yaml");
    refused(
        &["bench", &settings_refused.to_string_lossy()],
        "no case to time",
    );
}

#[test]
fn bench_without_nic_sources_costs_less_fuel_than_with_them() {
    // Ten NICs: sources are built per NIC.
    let case = workspace()
        .join("tests/cases/capvcd/12-ten-nics-allowed.yaml")
        .to_string_lossy()
        .into_owned();
    let fuel = |extra: &[&str]| -> u64 {
        let mut args = vec!["bench", "--iterations", "1", "-o", "json", &case];
        args.extend(extra);
        let out = nicpolicy(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        let benches: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
        benches[0]["cases"][0]["fuel"]
            .as_u64()
            .unwrap_or_else(|| panic!("no fuel: {benches}"))
    };
    let served = fuel(&[]);
    let explained = fuel(&["--nic-sources"]);
    // As the webhook evaluates (nicpolicy_evaluate_binary4), the policy builds no NIC source.
    assert!(
        served * 100 < explained * 90,
        "without NIC sources {served} fuel, with them {explained}"
    );
}

#[test]
fn eval_says_what_a_warn_mode_policy_would_deny_as_the_webhook_does() {
    let base = [
        "eval",
        "--cluster",
        "examples/cluster.yaml",
        "--machine",
        "examples/invalid-machine.yaml",
        "--inventory",
        "examples/inventory.yaml",
        "-o",
        "json",
    ];
    let enforced = nicpolicy(&base);
    assert_exit_saying(&enforced, 1, &[]);

    let mut warn = base.to_vec();
    warn.extend(["--policy", "builtin:capvcd", "--mode", "warn"]);
    let out = nicpolicy(&warn);
    assert!(out.status.success(), "{}", stderr(&out));
    let decision: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(decision["allowed"], true);
    let warnings: Vec<&str> = decision["warnings"]
        .as_array()
        .expect("warnings")
        .iter()
        .filter_map(|w| w.as_str())
        .collect();
    for field in ["[2]", "[3]", "[4]"] {
        assert!(
            warnings.iter().any(|w| w.starts_with(&format!(
                "nicpolicy (mode: warn): would be denied: spec.extraOvdcNetworks{field}"
            ))),
            "{field}: {warnings:?}"
        );
    }

    let mut twice = warn.clone();
    twice.extend(["--mode", "enforce"]);
    refused(&twice, "two --mode for builtin:capvcd");
    let mut bad = base.to_vec();
    bad.extend(["--mode", "audit"]);
    refused(&bad, "not a mode: enforce or warn");
}
