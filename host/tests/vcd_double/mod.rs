//! A Cloud Director test double: an HTTP server on 127.0.0.1 answering the OpenAPI calls an
//! import makes, in the shapes of Cloud Director's API reference (`/oauth/tenant/{org}/token`,
//! `/cloudapi/1.0.0/vdcs`, `vdcGroups`, `orgVdcNetworks` with `page`/`pageSize`/`pageCount`
//! and FIQL filters), with faults injected: an expired session, 429 with Retry-After, 503, a
//! slow page, a body cut short, a page over the size bound, a page that fails half way, a
//! network withdrawn. Used by `host/tests/inventory_import.rs` and the controller's e2e suite
//! (`tests/e2e/tests/controller.rs`), each through `#[path]`.
// Each test binary uses part of it.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::Uri;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};

pub const API_TOKEN: &str = "kX9vQ2mZr7TqL4wN8yB1cD6fH3jP5sA0";

/// What the double does wrong, and when.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// Sessions are refused (401) after this many calls each.
    pub session_calls: Option<usize>,
    /// The first N list calls get 429 with `Retry-After: 1`.
    pub throttled: usize,
    /// The first N list calls get 503.
    pub unavailable: usize,
    /// This page (1-based) is answered after 3 s.
    pub slow_page: Option<u32>,
    /// This page's body is cut short.
    pub truncated_page: Option<u32>,
    /// This page is padded past 300 KiB.
    pub oversized_page: Option<u32>,
    /// This page fails with 500.
    pub failing_page: Option<u32>,
    /// Every network call is 403.
    pub forbidden: bool,
    /// Networks no longer listed (deleted in Cloud Director).
    pub withdrawn: Vec<String>,
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
pub fn owners() -> Vec<(&'static str, &'static str)> {
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
        .filter(|(_, n)| {
            faults
                .withdrawn
                .iter()
                .all(|gone| n["name"].as_str() != Some(gone.as_str()))
        })
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
pub struct Site {
    address: SocketAddr,
    state: Shared,
}

impl Site {
    /// The double, with `faults`.
    pub fn start(faults: Faults) -> Site {
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

    /// Its base URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Token exchanges so far.
    pub fn logins(&self) -> usize {
        self.state.lock().expect("not poisoned").logins
    }

    /// From now on, `faults`.
    pub fn set_faults(&self, faults: Faults) {
        let mut double = self.state.lock().expect("not poisoned");
        double.faults = faults;
        double.list_calls = 0;
    }
}
