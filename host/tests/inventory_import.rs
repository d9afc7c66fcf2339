//! `nicpolicy inventory import` against a Cloud Director test double: an HTTP server on
//! 127.0.0.1 answering the OpenAPI calls the import makes, in the shapes of Cloud Director's API
//! reference (`/oauth/tenant/{org}/token`, `/cloudapi/1.0.0/vdcs`, `vdcGroups`,
//! `orgVdcNetworks` with `page`/`pageSize`/`pageCount` and FIQL filters), with faults injected:
//! an expired session, 429 with Retry-After, 503, a slow page, a body cut short, a page over
//! the size bound, a page that fails half way.
#![cfg(feature = "cli")]

mod common;
#[path = "vcd_double/mod.rs"]
mod vcd_double;

use std::path::{Path, PathBuf};
use std::time::Duration;

use nicpolicy::clouddirector::client::ClientError;
use nicpolicy::clouddirector::import::ImportError;
use nicpolicy::clouddirector::{import, Bounds, Client, Owner};
use nicpolicy::pools::Pool;
use serde_json::Value;
use vcd_double::{owners, Faults, Site, API_TOKEN};

fn run(
    site: &Site,
    owners: &[Owner],
    bounds: Bounds,
) -> Result<nicpolicy::clouddirector::Imported, ImportError> {
    let mut client =
        Client::new(&site.url(), "eu1-platform", API_TOKEN.into(), None, bounds).expect("a client");
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(import(&mut client, owners))
}

fn quick() -> Bounds {
    Bounds {
        call: Duration::from_secs(1),
        max_body_bytes: 256 << 10,
        max_wait: Duration::from_secs(1),
        ..Bounds::default()
    }
}

#[test]
fn an_org_vdcs_networks_are_read_page_by_page_and_sorted() {
    let site = Site::start(Faults::default());
    let imported = run(&site, &[Owner::Vdc("eu1-ovdc-prod".into())], quick()).expect("imported");
    let names: Vec<&str> = imported
        .inventory
        .networks
        .iter()
        .map(|n| n.name.as_str())
        .collect();
    assert_eq!(names.len(), 306, "three pages of 128");
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);
    let storage = imported
        .inventory
        .networks
        .iter()
        .find(|n| n.name == "storage-net")
        .expect("storage-net");
    assert_eq!(storage.gateway.as_deref(), Some("10.20.0.1"));
    assert_eq!(storage.prefix_length, Some(24));
    assert_eq!(
        storage.dns,
        ["10.10.0.10"],
        "an empty second DNS server is left out"
    );
    assert_eq!(storage.static_ip_ranges[0].start, "10.20.0.20");
    assert_eq!(
        imported.pools.get("storage-net"),
        Some(&Pool {
            total: 181,
            used: 178
        })
    );
    assert_eq!(imported.pools.len(), 306, "every network's counts");
    assert_eq!(
        imported
            .inventory
            .networks
            .iter()
            .find(|n| n.name == "ext-dmz-net")
            .and_then(|n| n.network_type)
            .map(|t| t.as_str()),
        Some("direct")
    );
    assert_eq!(imported.warnings.len(), 1, "{:?}", imported.warnings);
    assert!(
        imported.warnings[0].starts_with("dual-stack-net: 2 subnets"),
        "{:?}",
        imported.warnings
    );
    assert!(
        imported.sources[0].contains("org VDC \"eu1-ovdc-prod\" (urn:vcloud:vdc:5f1c2a9e"),
        "{:?}",
        imported.sources
    );

    // A VDC group and a URN; the org's every network when none is named.
    let imported = run(
        &site,
        &[
            Owner::VdcGroup("eu1-dc-group".into()),
            Owner::Id(owners()[1].0.into()),
        ],
        quick(),
    )
    .expect("imported");
    let names: Vec<&str> = imported
        .inventory
        .networks
        .iter()
        .map(|n| n.name.as_str())
        .collect();
    assert_eq!(names, ["replication-net", "stage-mgmt-net"]);
    assert_eq!(
        run(&site, &[], quick())
            .expect("imported")
            .inventory
            .networks
            .len(),
        308
    );
}

#[test]
fn each_fault_ends_as_the_issue_says() {
    // An expired session: logged in again once, the import goes on.
    let site = Site::start(Faults {
        session_calls: Some(2),
        ..Faults::default()
    });
    let imported = run(&site, &[Owner::Vdc("eu1-ovdc-prod".into())], quick())
        .expect("imported after a new login");
    assert_eq!(imported.inventory.networks.len(), 306);
    assert!(site.logins() >= 2, "logged in again");

    // 429 with Retry-After and 503: retried, then read.
    for faults in [
        Faults {
            throttled: 2,
            ..Faults::default()
        },
        Faults {
            unavailable: 2,
            ..Faults::default()
        },
    ] {
        let site = Site::start(faults.clone());
        let imported = run(&site, &[Owner::Id(owners()[0].0.into())], quick())
            .unwrap_or_else(|err| panic!("{faults:?}: {err}"));
        assert_eq!(imported.inventory.networks.len(), 306);
    }
    // ... but not for ever.
    let site = Site::start(Faults {
        unavailable: 100,
        ..Faults::default()
    });
    let err = run(&site, &[Owner::Id(owners()[0].0.into())], quick()).expect_err("busy");
    assert!(
        matches!(
            err,
            ImportError::Client(ClientError::Busy {
                status: 503,
                attempts: 4,
                ..
            })
        ),
        "{err}"
    );

    // A slow page, a body cut short, a page over the bound, a page that fails half way.
    let cases: [(Faults, &str); 4] = [
        (
            Faults {
                slow_page: Some(2),
                ..Faults::default()
            },
            "no answer within 1s",
        ),
        (
            Faults {
                truncated_page: Some(2),
                ..Faults::default()
            },
            "cut short",
        ),
        (
            Faults {
                oversized_page: Some(1),
                ..Faults::default()
            },
            "larger than 262144 bytes",
        ),
        (
            Faults {
                failing_page: Some(3),
                ..Faults::default()
            },
            "HTTP 500 from Cloud Director: [ 6f0e9c1a",
        ),
    ];
    for (faults, expected) in cases {
        let site = Site::start(faults.clone());
        let err =
            run(&site, &[Owner::Id(owners()[0].0.into())], quick()).expect_err("the fault ends it");
        assert!(err.to_string().contains(expected), "{faults:?}: {err}");
        assert!(
            err.to_string()
                .starts_with("list the networks of owner urn:vcloud:vdc:5f1c2a9e"),
            "{err}"
        );
    }

    // A wrong token, a forbidden list, an org VDC that is not there.
    let site = Site::start(Faults::default());
    let mut client = Client::new(
        &site.url(),
        "eu1-platform",
        "revoked-token".into(),
        None,
        quick(),
    )
    .expect("a client");
    let err = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
        .block_on(import(&mut client, &[]))
        .expect_err("401");
    assert!(err.to_string().contains("401 Unauthorized"), "{err}");
    assert!(
        err.to_string().contains("not valid for org eu1-platform"),
        "{err}"
    );
    let site = Site::start(Faults {
        forbidden: true,
        ..Faults::default()
    });
    let err = run(&site, &[], quick()).expect_err("403");
    assert!(err.to_string().contains("403 Forbidden"), "{err}");
    let site = Site::start(Faults::default());
    let err = run(&site, &[Owner::Vdc("eu1-ovdc-prd".into())], quick()).expect_err("no such VDC");
    assert_eq!(
        err.to_string(),
        "org VDC \"eu1-ovdc-prd\" is not in org eu1-platform (or the token's user cannot see it)"
    );
}

fn nicpolicy(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut command = common::nicpolicy_command();
    command.args(args).env_remove("NICPOLICY_VCD_API_TOKEN");
    for (k, v) in env {
        command.env(k, v);
    }
    command.output().expect("nicpolicy runs")
}

fn dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("inventory-import")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a directory");
    dir
}

#[test]
fn the_command_writes_the_same_file_twice_and_nothing_on_a_failure() {
    let site = Site::start(Faults::default());
    let dir = dir("same");
    let token_file = dir.join("token");
    std::fs::write(&token_file, format!("{API_TOKEN}\n")).expect("the token");
    let out = dir.join("inventory.yaml");
    let args = [
        "inventory",
        "import",
        "--site",
        &site.url(),
        "--org",
        "eu1-platform",
        "--vdc",
        "eu1-ovdc-prod",
        "--token-file",
        token_file.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ];
    let first = nicpolicy(&args, &[]);
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let text = std::fs::read_to_string(&out).expect("written");
    let second = nicpolicy(&args, &[]);
    assert!(second.status.success());
    assert_eq!(
        std::fs::read_to_string(&out).expect("written"),
        text,
        "the same file twice"
    );
    assert!(String::from_utf8_lossy(&first.stderr).contains("warning: dual-stack-net: 2 subnets"));
    assert!(
        text.contains("- name: storage-net\n")
            && text.contains("  totalIpCount: 181\n  usedIpCount: 178\n"),
        "{text}"
    );
    // Its pool counts are what an audit's capacity reads: md-0's rollout needs more of
    // storage-net than the 3 addresses free.
    let audit = nicpolicy(
        &[
            "audit",
            "examples/cluster.yaml",
            "examples/machine.yaml",
            "examples/rollouts.yaml",
            "--inventory",
            out.to_str().unwrap(),
            "-o",
            "json",
        ],
        &[],
    );
    assert_eq!(audit.status.code(), Some(1), "a short pool fails the audit");
    let report: Value = serde_json::from_slice(&audit.stdout).expect("JSON");
    let storage = report["capacity"]["networks"]
        .as_array()
        .expect("networks")
        .iter()
        .find(|n| n["network"] == "storage-net")
        .expect("storage-net")
        .clone();
    assert_eq!(
        (storage["free"].as_u64(), storage["largest"].as_u64()),
        (Some(3), Some(6))
    );
    // The file is an inventory the rest of nicpolicy reads.
    let eval = nicpolicy(
        &[
            "eval",
            "--cluster",
            "examples/cluster.yaml",
            "--machine",
            "examples/machine.yaml",
            "--inventory",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert!(
        eval.status.success(),
        "{}",
        String::from_utf8_lossy(&eval.stderr)
    );

    // The token from the environment, to stdout.
    let piped = nicpolicy(
        &[
            "inventory",
            "import",
            "--site",
            &site.url(),
            "--org",
            "eu1-platform",
            "--vdc-group",
            "eu1-dc-group",
        ],
        &[("NICPOLICY_VCD_API_TOKEN", API_TOKEN)],
    );
    assert!(
        piped.status.success(),
        "{}",
        String::from_utf8_lossy(&piped.stderr)
    );
    let stdout = String::from_utf8_lossy(&piped.stdout);
    assert!(
        stdout.contains("- name: replication-net\n  type: imported"),
        "{stdout}"
    );

    // No token: named, before anything is sent.
    let none = nicpolicy(
        &[
            "inventory",
            "import",
            "--site",
            &site.url(),
            "--org",
            "eu1-platform",
        ],
        &[],
    );
    assert_eq!(none.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&none.stderr).contains("NICPOLICY_VCD_API_TOKEN"));
    // Plain HTTP to anything but loopback is refused.
    let remote = nicpolicy(
        &[
            "inventory",
            "import",
            "--site",
            "http://vcd.example.net",
            "--org",
            "eu1-platform",
            "--token-file",
            token_file.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(remote.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&remote.stderr).contains("plain http is refused"));

    // A page failing half way: the earlier file stays as it was, and no partial file is left.
    let failing = Site::start(Faults {
        failing_page: Some(2),
        ..Faults::default()
    });
    let args = [
        "inventory",
        "import",
        "--site",
        &failing.url(),
        "--org",
        "eu1-platform",
        "--vdc",
        "eu1-ovdc-prod",
        "--token-file",
        token_file.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ];
    let failed = nicpolicy(&args, &[]);
    assert_eq!(
        failed.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&failed.stderr)
    );
    assert!(String::from_utf8_lossy(&failed.stderr).contains("HTTP 500"));
    assert_eq!(std::fs::read_to_string(&out).expect("kept"), text);
    assert!(!dir.join("inventory.partial").exists());
}

#[test]
fn per_vdc_writes_an_inventory_for_each_vdc_or_none() {
    let site = Site::start(Faults::default());
    let dir = dir("per-vdc");
    let token_file = dir.join("token");
    std::fs::write(&token_file, API_TOKEN).expect("the token");
    let out = dir.join("inventories");
    let run = |site: &Site, vdcs: &[&str]| {
        let mut args = vec![
            "inventory".to_string(),
            "import".into(),
            "--site".into(),
            site.url(),
            "--org".into(),
            "eu1-platform".into(),
            "--token-file".into(),
            token_file.to_string_lossy().into_owned(),
            "--per-vdc".into(),
            out.to_string_lossy().into_owned(),
        ];
        for vdc in vdcs {
            args.extend(["--vdc".to_string(), vdc.to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        nicpolicy(&args, &[])
    };
    let first = run(&site, &["eu1-ovdc-prod", "eu1-ovdc-stage"]);
    let said = String::from_utf8_lossy(&first.stderr).into_owned();
    assert!(first.status.success(), "{said}");
    let prod = std::fs::read_to_string(out.join("eu1-ovdc-prod.yaml")).expect("prod's");
    let stage = std::fs::read_to_string(out.join("eu1-ovdc-stage.yaml")).expect("stage's");
    assert!(prod.contains("- name: storage-net\n") && !prod.contains("stage-mgmt-net"));
    assert!(stage.contains("- name: stage-mgmt-net\n") && !stage.contains("storage-net"));
    // The serve configuration's entries, as it reads them.
    assert!(
        said.contains("inventories:\n  eu1-ovdc-prod: ") && said.contains("  eu1-ovdc-stage: "),
        "{said}"
    );
    // The same site, the same files.
    assert!(run(&site, &["eu1-ovdc-prod", "eu1-ovdc-stage"])
        .status
        .success());
    assert_eq!(
        std::fs::read_to_string(out.join("eu1-ovdc-prod.yaml")).unwrap(),
        prod
    );
    assert_eq!(
        std::fs::read_to_string(out.join("eu1-ovdc-stage.yaml")).unwrap(),
        stage
    );

    // A VDC that is not there: no file is written, the earlier ones stay.
    let _ = std::fs::remove_file(out.join("eu1-ovdc-stage.yaml"));
    let failed = run(&site, &["eu1-ovdc-stage", "eu1-ovdc-gone"]);
    assert_eq!(failed.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&failed.stderr).contains("\"eu1-ovdc-gone\""));
    assert!(!out.join("eu1-ovdc-stage.yaml").exists());
    assert_eq!(
        std::fs::read_to_string(out.join("eu1-ovdc-prod.yaml")).unwrap(),
        prod
    );
    // Two names for one file.
    let clash = run(&site, &["eu1 ovdc", "eu1-ovdc"]);
    assert_eq!(clash.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&clash.stderr).contains("eu1-ovdc.yaml"));
}
