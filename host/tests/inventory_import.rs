//! `nicpolicy inventory import` against a Cloud Director test double: an HTTP server on
//! 127.0.0.1 answering the OpenAPI calls the import makes, in the shapes of Cloud Director's API
//! reference (`/oauth/tenant/{org}/token`, `/cloudapi/1.0.0/vdcs`, `vdcGroups`,
//! `orgVdcNetworks` with `page`/`pageSize`/`pageCount` and FIQL filters), with faults injected:
//! an expired session, 429 with Retry-After, 503, a slow page, a body cut short, a page over
//! the size bound, a page that fails half way.
#![cfg(feature = "cli")]

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::Uri;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use nicpolicy::clouddirector::client::ClientError;
use nicpolicy::clouddirector::import::ImportError;
use nicpolicy::clouddirector::{import, Bounds, Client, Owner};
use nicpolicy::pools::Pool;
use serde_json::{json, Value};

const API_TOKEN: &str = "kX9vQ2mZr7TqL4wN8yB1cD6fH3jP5sA0";

/// What the double does wrong, and when.
#[derive(Clone, Debug, Default)]
struct Faults {
    /// Sessions are refused (401) after this many calls each.
    session_calls: Option<usize>,
    /// The first N list calls get 429 with `Retry-After: 1`.
    throttled: usize,
    /// The first N list calls get 503.
    unavailable: usize,
    /// This page (1-based) is answered after 3 s.
    slow_page: Option<u32>,
    /// This page's body is cut short.
    truncated_page: Option<u32>,
    /// This page is padded past 300 KiB.
    oversized_page: Option<u32>,
    /// This page fails with 500.
    failing_page: Option<u32>,
    /// Every network call is 403.
    forbidden: bool,
}

#[derive(Default)]
struct Double {
    faults: Faults,
    sessions: HashMap<String, usize>,
    issued: usize,
    logins: usize,
    list_calls: usize,
}

type Shared = Arc<Mutex<Double>>;

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = json!({
        "minorErrorCode": code,
        "message": format!("[ 6f0e9c1a-5b7d-4c3e-8a2f-1d9e0b4c7a65 ] {message}"),
        "stackTrace": null,
    });
    (
        status,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The site's VDCs and VDC groups: (id, name).
fn owners() -> Vec<(&'static str, &'static str)> {
    vec![
        (
            "urn:vcloud:vdc:5f1c2a9e-0b7d-4e3a-9c41-7a2e6d8b3f10",
            "eu1-ovdc-prod",
        ),
        (
            "urn:vcloud:vdc:8d3b7e21-4c6a-4f09-b2d5-3e9a1c7f6b42",
            "eu1-ovdc-stage",
        ),
        (
            "urn:vcloud:vdcGroup:2a7c9e4b-1d3f-4b8a-a6e0-9f5c3b2d1e07",
            "eu1-dc-group",
        ),
    ]
}

/// Every network of the site: (owner id, network JSON). The production VDC has the shipped
/// inventory's five networks and 300 tenant networks, so its list takes three pages of 128.
fn networks() -> Vec<(&'static str, Value)> {
    let [prod, stage, group] = [owners()[0].0, owners()[1].0, owners()[2].0];
    let net = |name: &str, kind: &str, octet: u32, owner: &str, owner_name: &str| {
        json!({
            "id": format!("urn:vcloud:network:{name}"),
            "name": name,
            "description": "",
            "ownerRef": {"id": owner, "name": owner_name},
            "networkType": kind,
            "subnets": {"values": [{
                "gateway": format!("10.{octet}.0.1"),
                "prefixLength": 24,
                "dnsServer1": "10.10.0.10",
                "dnsServer2": "",
                "dnsSuffix": "eu1.example.net",
                "enabled": true,
                "ipRanges": {"values": [{"startAddress": format!("10.{octet}.0.20"), "endAddress": format!("10.{octet}.0.200")}]},
                "totalIpCount": 181,
                "usedIpCount": 12,
            }]},
            "totalIpCount": 181,
            // storage-net's pool is all but full: 3 addresses free.
            "usedIpCount": if name == "storage-net" { 178 } else { 12 },
            "shared": false,
            "status": "REALIZED",
        })
    };
    let mut all = vec![
        (
            prod,
            net("mgmt-net", "NAT_ROUTED", 10, prod, "eu1-ovdc-prod"),
        ),
        (
            prod,
            net("storage-net", "ISOLATED", 20, prod, "eu1-ovdc-prod"),
        ),
        (
            prod,
            net("workload-net", "NAT_ROUTED", 30, prod, "eu1-ovdc-prod"),
        ),
        (
            prod,
            net("backup-net", "ISOLATED", 40, prod, "eu1-ovdc-prod"),
        ),
        (
            prod,
            net("ext-dmz-net", "DIRECT", 50, prod, "eu1-ovdc-prod"),
        ),
        (
            stage,
            net("stage-mgmt-net", "NAT_ROUTED", 110, stage, "eu1-ovdc-stage"),
        ),
        (
            group,
            net("replication-net", "OPAQUE", 120, group, "eu1-dc-group"),
        ),
    ];
    // A dual-stack network: two subnets.
    let mut dual = net("dual-stack-net", "NAT_ROUTED", 60, prod, "eu1-ovdc-prod");
    dual["subnets"]["values"]
        .as_array_mut()
        .expect("subnets")
        .push(json!({"gateway": "2001:db8:60::1", "prefixLength": 64, "ipRanges": {"values": []}}));
    all.push((prod, dual));
    for i in 0..300 {
        all.push((
            prod,
            net(
                &format!("tenant-{i:03}-net"),
                "ISOLATED",
                200,
                prod,
                "eu1-ovdc-prod",
            ),
        ));
    }
    // Cloud Director lists in its own order, not by name.
    all.reverse();
    all
}

/// Percent-decoded (and `+` as space), as a form-encoded query or body is.
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query_of(uri: &Uri) -> HashMap<String, String> {
    uri.query()
        .unwrap_or_default()
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

fn fiql(filter: Option<&String>, key: &str) -> Option<String> {
    filter?
        .split(';')
        .find_map(|term| term.strip_prefix(&format!("{key}==")))
        .map(str::to_string)
}

/// Checks the bearer token; `Some` is the answer to give instead.
fn session(state: &Shared, headers: &HeaderMap) -> Option<Response> {
    let mut double = state.lock().expect("not poisoned");
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default()
        .to_string();
    let limit = double.faults.session_calls;
    let Some(calls) = double.sessions.get_mut(&token) else {
        return Some(error(
            StatusCode::UNAUTHORIZED,
            "NOT_AUTHENTICATED",
            "This operation is denied.",
        ));
    };
    *calls += 1;
    if limit.is_some_and(|limit| *calls > limit) {
        return Some(error(
            StatusCode::UNAUTHORIZED,
            "NOT_AUTHENTICATED",
            "This operation is denied.",
        ));
    }
    let version = headers
        .get("accept")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !version.starts_with("application/json;version=") {
        return Some(error(
            StatusCode::NOT_ACCEPTABLE,
            "NOT_ACCEPTABLE",
            "The request has invalid accept header: Invalid API version requested.",
        ));
    }
    None
}

async fn token(
    State(state): State<Shared>,
    axum::extract::Path(org): axum::extract::Path<String>,
    body: String,
) -> Response {
    let form: HashMap<String, String> = body
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect();
    if org != "eu1-platform"
        || form.get("grant_type").map(String::as_str) != Some("refresh_token")
        || form.get("refresh_token").map(String::as_str) != Some(API_TOKEN)
    {
        return error(
            StatusCode::UNAUTHORIZED,
            "NOT_AUTHENTICATED",
            "This operation is denied.",
        );
    }
    let mut double = state.lock().expect("not poisoned");
    double.issued += 1;
    double.logins += 1;
    let access = format!("session-{}", double.issued);
    double.sessions.insert(access.clone(), 0);
    let body = json!({"access_token": access, "token_type": "Bearer", "expires_in": 2592000, "refresh_token": null});
    ([("content-type", "application/json")], body.to_string()).into_response()
}

fn page_of<T: Clone>(items: &[T], query: &HashMap<String, String>) -> (Vec<T>, u32, u32, usize) {
    let page: u32 = query
        .get("page")
        .and_then(|p| p.parse().ok())
        .unwrap_or(1)
        .max(1);
    let size: usize = query
        .get("pageSize")
        .and_then(|p| p.parse().ok())
        .unwrap_or(25)
        .clamp(1, 128);
    let count = items.len().div_ceil(size).max(1) as u32;
    let start = (page as usize - 1) * size;
    let values = items.iter().skip(start).take(size).cloned().collect();
    (values, page, count, size)
}

async fn owner_list(
    state: Shared,
    headers: HeaderMap,
    query: HashMap<String, String>,
    group: bool,
) -> Response {
    if let Some(answer) = session(&state, &headers) {
        return answer;
    }
    let name = fiql(query.get("filter"), "name");
    let items: Vec<Value> = owners()
        .into_iter()
        .filter(|(id, _)| id.contains(":vdcGroup:") == group)
        .filter(|(_, n)| name.as_deref().is_none_or(|want| want == *n))
        .map(|(id, n)| json!({"id": id, "name": n}))
        .collect();
    let (values, page, count, size) = page_of(&items, &query);
    let body = json!({"resultTotal": items.len(), "pageCount": count, "page": page, "pageSize": size, "associations": [], "values": values});
    ([("content-type", "application/json")], body.to_string()).into_response()
}

async fn vdcs(State(state): State<Shared>, headers: HeaderMap, uri: Uri) -> Response {
    owner_list(state, headers, query_of(&uri), false).await
}

async fn vdc_groups(State(state): State<Shared>, headers: HeaderMap, uri: Uri) -> Response {
    owner_list(state, headers, query_of(&uri), true).await
}

async fn org_vdc_networks(State(state): State<Shared>, headers: HeaderMap, uri: Uri) -> Response {
    let query = query_of(&uri);
    if let Some(answer) = session(&state, &headers) {
        return answer;
    }
    let faults = {
        let mut double = state.lock().expect("not poisoned");
        double.list_calls += 1;
        let call = double.list_calls;
        let faults = double.faults.clone();
        if call <= faults.throttled {
            return (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "1")], "").into_response();
        }
        if call <= faults.unavailable {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "SERVICE_UNAVAILABLE",
                "Service unavailable.",
            );
        }
        faults
    };
    if faults.forbidden {
        return error(
            StatusCode::FORBIDDEN,
            "ACCESS_TO_RESOURCE_IS_FORBIDDEN",
            "Access is forbidden.",
        );
    }
    let owner = fiql(query.get("filter"), "ownerRef.id");
    let items: Vec<Value> = networks()
        .into_iter()
        .filter(|(id, _)| owner.as_deref().is_none_or(|want| want == *id))
        .map(|(_, n)| n)
        .collect();
    let (values, page, count, size) = page_of(&items, &query);
    if faults.failing_page == Some(page) {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL_SERVER_ERROR",
            "An internal error occurred.",
        );
    }
    if faults.slow_page == Some(page) {
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let mut body = json!({"resultTotal": items.len(), "pageCount": count, "page": page, "pageSize": size, "associations": [], "values": values});
    if faults.oversized_page == Some(page) {
        body["padding"] = "x".repeat(300 << 10).into();
    }
    let text = body.to_string();
    if faults.truncated_page == Some(page) {
        // Half the body, then the connection fails.
        // Half the body the headers promise, a moment, then the connection fails.
        let half = text[..text.len() / 2].to_string();
        let stream = futures::stream::unfold(0, move |step| {
            let half = half.clone();
            async move {
                match step {
                    0 => Some((Ok::<_, std::io::Error>(half), 1)),
                    1 => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        Some((Err(std::io::Error::other("connection reset")), 2))
                    }
                    _ => None,
                }
            }
        });
        return Response::builder()
            .header("content-type", "application/json")
            .header("content-length", text.len())
            .body(Body::from_stream(stream))
            .expect("a response");
    }
    ([("content-type", "application/json;version=36.1")], text).into_response()
}

/// The double, serving on a port of 127.0.0.1 from a thread of its own.
struct Site {
    address: SocketAddr,
    state: Shared,
}

impl Site {
    fn start(faults: Faults) -> Site {
        let state: Shared = Arc::new(Mutex::new(Double {
            faults,
            ..Double::default()
        }));
        let app = Router::new()
            .route("/oauth/tenant/{org}/token", post(token))
            .route("/cloudapi/1.0.0/vdcs", get(vdcs))
            .route("/cloudapi/1.0.0/vdcGroups", get(vdc_groups))
            .route("/cloudapi/1.0.0/orgVdcNetworks", get(org_vdc_networks))
            .with_state(state.clone());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        listener.set_nonblocking(true).expect("non-blocking");
        let address = listener.local_addr().expect("an address");
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("a listener");
                axum::serve(listener, app).await.expect("the double serves");
            });
        });
        Site { address, state }
    }

    fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    fn logins(&self) -> usize {
        self.state.lock().expect("not poisoned").logins
    }
}

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
