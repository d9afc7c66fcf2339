//! `nicpolicy serve` as kube-apiserver meets it: a real server on loopback with a generated CA,
//! real HTTPS clients, the fixtures the API server would send.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use nicpolicy::clusters::StaticClusters;
use nicpolicy::plugin::ObjectKind;
use nicpolicy::served::config::ClusterSourceConfig;
use nicpolicy::served::ServeConfig;
use nicpolicy::webhook::tls::SelfSigned;
use nicpolicy::webhook::{App, Endpoint, Server};
use nicpolicy::{builtin, Host, HostConfig};
use nicpolicy_tests::{allow_result, Module};
use serde_json::{json, Value};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// A fresh directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("webhook")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn host() -> Host {
    Host::new(HostConfig {
        cache_dir: Some(Path::new(env!("CARGO_TARGET_TMPDIR")).join("webhook-cache")),
        max_instances: 64,
        ..HostConfig::default()
    })
    .expect("engine starts")
}

/// The shipped configuration (config/nicpolicy) as the ConfigMap lays it out, with the
/// role-based module beside it; clusters from the example files instead of the API.
fn shipped_config(dir: &Path) -> ServeConfig {
    for file in ["nicpolicy.yaml", "inventory.yaml"] {
        std::fs::copy(
            workspace().join("config/nicpolicy").join(file),
            dir.join(file),
        )
        .expect("copy config");
    }
    let module = builtin::get("role-based").expect("built in").wasm;
    std::fs::write(dir.join("policy.wasm"), module).expect("write module");
    let mut config =
        ServeConfig::read(&dir.join("nicpolicy.yaml")).expect("shipped config is valid");
    config.clusters = ClusterSourceConfig::Static {
        files: vec![workspace().join("examples/cluster.yaml")],
    };
    config.tls = None;
    config
}

/// A configuration serving `module` (written to `dir`) for VCDMachines with the given extra
/// YAML (failure modes, evaluation slots).
fn module_config(dir: &Path, module: &[u8], timeout: &str, extra: &str) -> ServeConfig {
    std::fs::write(dir.join("policy.wasm"), module).expect("write module");
    let text = format!(
        "policies:\n  VCDMachine:\n    - {{path: policy.wasm, timeout: {timeout}, memory: 8Mi}}\n{extra}\nclusters: {{source: Static, files: [{}]}}\n",
        workspace().join("examples/cluster.yaml").display()
    );
    std::fs::write(dir.join("nicpolicy.yaml"), text).expect("write config");
    ServeConfig::read(&dir.join("nicpolicy.yaml")).expect("config is valid")
}

struct TestServer {
    server: Server,
    client: reqwest::Client,
    ca: String,
}

impl TestServer {
    async fn start(config: ServeConfig) -> TestServer {
        let files = match &config.clusters {
            ClusterSourceConfig::Static { files } => files.clone(),
            other => panic!("tests use static clusters, not {other:?}"),
        };
        let clusters = StaticClusters::read(&files).expect("cluster files");
        let app = Arc::new(App::new(host(), config, Arc::new(clusters)).expect("policies load"));
        app.watch_for_changes().expect("watcher starts");
        let tls = SelfSigned::generate(&[]).expect("certificate");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let server = Server::start(app, listener, tls.rustls(None).expect("tls")).expect("serves");
        TestServer {
            client: client(&tls.ca_pem),
            ca: tls.ca_pem,
            server,
        }
    }

    fn url(&self, path: &str) -> String {
        format!(
            "https://localhost:{}{path}",
            self.server.local_addr().port()
        )
    }

    async fn post_bytes(&self, path: &str, body: Vec<u8>) -> (u16, String) {
        post_json(self.client.post(self.url(path)), body).await
    }

    async fn review(&self, endpoint: Endpoint, kind: ObjectKind, review: &Value) -> Value {
        let (status, text) = self
            .post_bytes(&endpoint.path(kind), serde_json::to_vec(review).unwrap())
            .await;
        assert_eq!(status, 200, "{text}");
        let body: Value = serde_json::from_str(&text).expect("JSON answer");
        assert_eq!(body["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(body["kind"], "AdmissionReview");
        assert_eq!(
            body["response"]["uid"], review["request"]["uid"],
            "the uid is echoed"
        );
        body["response"].clone()
    }

    async fn get(&self, path: &str) -> (u16, String) {
        let response = self
            .client
            .get(self.url(path))
            .send()
            .await
            .expect("answered");
        (
            response.status().as_u16(),
            response.text().await.unwrap_or_default(),
        )
    }
}

/// Sends `body` as JSON with `request` and answers the status and the text of the answer.
async fn post_json(request: reqwest::RequestBuilder, body: Vec<u8>) -> (u16, String) {
    let response = request
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("request is answered");
    let status = response.status().as_u16();
    (status, response.text().await.expect("body"))
}

fn client(ca_pem: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).expect("CA"))
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client")
}

fn fixture(name: &str) -> Value {
    let path = workspace().join(format!("tests/fixtures/admission/{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture")).expect("fixture JSON")
}

/// Decodes the response's patch and applies it to the request's object, as the API server does.
fn apply_patch(review: &Value, response: &Value) -> Value {
    assert_eq!(response["patchType"], "JSONPatch");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(
            response["patch"]
                .as_str()
                .expect("patch is a base64 string"),
        )
        .expect("base64");
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).expect("a JSON patch");
    let mut object = review["request"]["object"].clone();
    json_patch::patch(&mut object, &patch).expect("the patch applies to the object it came from");
    object
}

fn plan_networks(object: &Value) -> Vec<String> {
    let text = object["metadata"]["annotations"][nicpolicy::webhook::NIC_PLAN_ANNOTATION]
        .as_str()
        .expect("NIC plan annotation");
    let plan: Value = serde_json::from_str(text).expect("plan is JSON");
    plan["nics"]
        .as_array()
        .expect("nics")
        .iter()
        .map(|n| n["network"].as_str().unwrap().to_string())
        .collect()
}

fn causes(response: &Value) -> Vec<(String, String)> {
    response["status"]["details"]["causes"]
        .as_array()
        .expect("causes")
        .iter()
        .map(|c| {
            (
                c["field"].as_str().unwrap().to_string(),
                c["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

const M: ObjectKind = ObjectKind::VcdMachine;
const T: ObjectKind = ObjectKind::VcdMachineTemplate;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shipped_config_answers_the_api_server_fixtures() {
    let dir = scratch("shipped");
    let server = TestServer::start(shipped_config(&dir)).await;

    // A worker that lists no extra networks gets the site's defaults written in, and the plan.
    let review = fixture("vcdmachine-create-worker-defaults");
    let response = server.review(Endpoint::Mutate, M, &review).await;
    assert_eq!(response["allowed"], true);
    let patched = apply_patch(&review, &response);
    assert_eq!(
        patched["spec"]["extraOvdcNetworks"],
        json!(["storage-net", "workload-net"])
    );
    assert_eq!(
        plan_networks(&patched),
        ["mgmt-net", "storage-net", "workload-net"]
    );
    // The API server validates the mutated object: allowed, and patching it again is a no-op.
    let mut again = review.clone();
    again["request"]["object"] = patched;
    let response = server.review(Endpoint::Validate, M, &again).await;
    assert_eq!(response["allowed"], true, "{response}");
    let response = server.review(Endpoint::Mutate, M, &again).await;
    assert!(
        response.get("patch").is_none(),
        "nothing left to change: {response}"
    );

    // A worker with its own extras: only the plan annotation is added, of NICs CAPVCD builds.
    let review = fixture("vcdmachine-create-worker");
    let response = server.review(Endpoint::Mutate, M, &review).await;
    let patched = apply_patch(&review, &response);
    assert_eq!(
        patched["spec"], review["request"]["object"]["spec"],
        "spec untouched"
    );
    let plan = patched["metadata"]["annotations"][nicpolicy::webhook::NIC_PLAN_ANNOTATION]
        .as_str()
        .unwrap();
    assert!(
        plan.contains(r#""network":"storage-net","primary":false,"ipAllocationMode":"POOL""#),
        "{plan}"
    );

    // Every bad field at once, as kube-apiserver reports schema errors.
    let review = fixture("vcdmachine-create-invalid");
    let response = server.review(Endpoint::Validate, M, &review).await;
    assert_eq!(response["allowed"], false);
    assert_eq!(response["status"]["code"], 422);
    assert_eq!(response["status"]["reason"], "Invalid");
    assert_eq!(response["status"]["details"]["name"], "prod-eu1-md-0-h3v8r");
    assert_eq!(
        causes(&response),
        [
            (
                "spec.extraOvdcNetworks[2]".to_string(),
                "FieldValueDuplicate".to_string()
            ),
            (
                "spec.extraOvdcNetworks[3]".to_string(),
                "FieldValueDuplicate".to_string()
            ),
            (
                "spec.extraOvdcNetworks[4]".to_string(),
                "FieldValueNotFound".to_string()
            ),
            // The site's rule on top of CAPVCD's: workers may list only the allowed networks.
            (
                "spec.extraOvdcNetworks[4]".to_string(),
                "FieldValueNotSupported".to_string()
            ),
        ]
    );
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "VCDMachine.infrastructure.cluster.x-k8s.io \"prod-eu1-md-0-h3v8r\" is invalid: [spec.extraOvdcNetworks[2]: Duplicate value: "
        ),
        "{message}"
    );
    assert!(
        message.contains(r#"did you mean "storage-net"?"#),
        "{message}"
    );
    // The mutating endpoint leaves a denied machine to the validating one.
    let response = server.review(Endpoint::Mutate, M, &review).await;
    assert_eq!(response["allowed"], true);
    assert!(response.get("patch").is_none());

    // Changing the NICs of a running VM is refused.
    let review = fixture("vcdmachine-update-provisioned");
    let response = server.review(Endpoint::Validate, M, &review).await;
    assert_eq!(response["allowed"], false);
    assert_eq!(
        causes(&response),
        [(
            "spec.extraOvdcNetworks".to_string(),
            "FieldValueForbidden".to_string()
        )]
    );

    // Templates: paths point into spec.template.spec.
    let review = fixture("vcdmachinetemplate-create-control-plane-dmz");
    let response = server.review(Endpoint::Validate, T, &review).await;
    assert_eq!(response["allowed"], false);
    let fields = causes(&response);
    assert!(
        fields.contains(&(
            "spec.template.spec.extraOvdcNetworks[0]".to_string(),
            "FieldValueForbidden".to_string()
        )),
        "{fields:?}"
    );
    let review = fixture("vcdmachinetemplate-create-worker");
    let response = server.review(Endpoint::Validate, T, &review).await;
    assert_eq!(response["allowed"], true, "{response}");
    let response = server.review(Endpoint::Mutate, T, &review).await;
    let patched = apply_patch(&review, &response);
    assert_eq!(
        plan_networks(&patched),
        ["mgmt-net", "storage-net", "workload-net", "backup-net"]
    );

    // A machine of a cluster nobody knows (yet): checked without it, allowed with a warning
    // naming it.
    let review = fixture("vcdmachine-create-unknown-cluster");
    let response = server.review(Endpoint::Validate, M, &review).await;
    assert_eq!(response["allowed"], true, "{response}");
    let warning = response["warnings"][0].as_str().unwrap();
    assert!(
        warning.contains("prod-us1") && warning.contains("checked without its cluster"),
        "{warning}"
    );

    // Deletions carry no network choice.
    let response = server
        .review(Endpoint::Validate, M, &fixture("vcdmachine-delete"))
        .await;
    assert_eq!(response["allowed"], true);

    // Probes and metrics.
    assert_eq!(server.get("/healthz").await.0, 200);
    let (status, text) = server.get("/readyz").await;
    assert_eq!(status, 200, "{text}");
    let (status, metrics) = server.get("/metrics").await;
    assert_eq!(status, 200);
    assert!(
        metrics.contains(
            r#"nicpolicy_reviews_total{kind="VCDMachine",endpoint="validate",result="denied"} 2"#
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            r#"nicpolicy_reviews_total{kind="VCDMachine",endpoint="mutate",result="patched"} 2"#
        ),
        "{metrics}"
    );
    assert!(metrics.contains(r#"nicpolicy_evaluation_duration_seconds_count{kind="VCDMachine",policy="nicpolicy-role-based"}"#), "{metrics}");
    assert!(
        metrics.contains(r#"nicpolicy_requests_rejected_total{reason="unknown_cluster"} 1"#),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_clear_answers_and_the_server_keeps_serving() {
    let dir = scratch("bad-requests");
    let mut config = shipped_config(&dir);
    config.max_request_bytes = 64 << 10;
    let server = TestServer::start(config).await;
    let validate = Endpoint::Validate.path(M);

    let (status, text) = server
        .post_bytes(&validate, b"{\"apiVersion\": ".to_vec())
        .await;
    assert_eq!(status, 400);
    assert!(text.contains("not JSON"), "{text}");

    let (status, text) = server
        .post_bytes(
            &validate,
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
        )
        .await;
    assert_eq!(status, 400);
    assert!(text.contains("has no request"), "{text}");

    let mut no_uid = fixture("vcdmachine-create-worker");
    no_uid["request"].as_object_mut().unwrap().remove("uid");
    let (status, text) = server
        .post_bytes(&validate, serde_json::to_vec(&no_uid).unwrap())
        .await;
    assert_eq!(status, 400);
    assert!(text.contains("request") && text.contains("uid"), "{text}");

    let (status, text) = server
        .post_bytes(
            &validate,
            br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{}}"#
                .to_vec(),
        )
        .await;
    assert_eq!(status, 400);
    assert!(text.contains("admission.k8s.io/v1"), "{text}");

    // Missing object on CREATE: answered to the uid, with the field.
    let mut no_object = fixture("vcdmachine-create-worker");
    no_object["request"]["object"] = Value::Null;
    let response = server.review(Endpoint::Validate, M, &no_object).await;
    assert_eq!(response["allowed"], false);
    assert!(response["status"]["message"]
        .as_str()
        .unwrap()
        .contains("request.object is missing"));

    // A field of the wrong type, with its path.
    let mut bad_field = fixture("vcdmachine-create-worker");
    bad_field["request"]["object"]["spec"]["extraOvdcNetworks"] =
        json!(["storage-net", {"name": "x"}]);
    let response = server.review(Endpoint::Validate, M, &bad_field).await;
    assert_eq!(response["allowed"], false);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.contains("spec.extraOvdcNetworks[1]"), "{message}");

    // A Pod sent to the VCDMachine endpoint, and a template sent to the machine endpoint.
    let mut pod = fixture("vcdmachine-create-worker");
    pod["request"]["kind"] = json!({"group": "", "version": "v1", "kind": "Pod"});
    let response = server.review(Endpoint::Validate, M, &pod).await;
    assert_eq!(response["allowed"], false);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.contains("not Pod (core)"), "{message}");
    let template = fixture("vcdmachinetemplate-create-worker");
    let response = server.review(Endpoint::Validate, M, &template).await;
    assert!(response["status"]["message"]
        .as_str()
        .unwrap()
        .contains("not VCDMachineTemplate"));

    // Over the body cap.
    let mut big = fixture("vcdmachine-create-worker");
    big["request"]["object"]["metadata"]["annotations"] = json!({"padding": "x".repeat(100 << 10)});
    let (status, text) = server
        .post_bytes(&validate, serde_json::to_vec(&big).unwrap())
        .await;
    assert_eq!(status, 413);
    assert!(text.contains("65536-byte limit"), "{text}");

    // Unknown path and method.
    let (status, text) = server.get("/validate-vcdmachine").await;
    assert_eq!(status, 404);
    assert!(text.contains(&validate), "{text}");

    // Still serving, correctly.
    let response = server
        .review(Endpoint::Validate, M, &fixture("vcdmachine-create-worker"))
        .await;
    assert_eq!(response["allowed"], true);
    let (_, metrics) = server.get("/metrics").await;
    assert!(
        metrics.contains(r#"nicpolicy_requests_rejected_total{reason="too_large"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"nicpolicy_requests_rejected_total{reason="wrong_kind"} 2"#),
        "{metrics}"
    );
}

fn looping() -> Vec<u8> {
    Module::evaluating("(loop $spin (br $spin)) unreachable").wasm()
}

/// Allows after spinning through `iterations` of a counting loop (a policy that is slow but
/// finishes).
fn slow(iterations: u32) -> Vec<u8> {
    Module::evaluating(&format!(
        "(local $i i32)
         (block $done (loop $again
           local.get $i i32.const {iterations} i32.ge_u br_if $done
           local.get $i i32.const 1 i32.add local.set $i
           br $again))
         i64.const {}",
        allow_result()
    ))
    .wasm()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_that_times_out_follows_the_failure_mode() {
    let review = fixture("vcdmachine-create-worker");
    for (mode, allowed) in [("Deny", false), ("Allow", true)] {
        let dir = scratch(&format!("timeout-{mode}"));
        let config = module_config(
            &dir,
            &looping(),
            "50ms",
            &format!("onPolicyFailure: {mode}"),
        );
        let server = TestServer::start(config).await;
        let started = Instant::now();
        let response = server.review(Endpoint::Validate, M, &review).await;
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "answered within the limit"
        );
        assert_eq!(response["allowed"], allowed, "{mode}: {response}");
        let text = if allowed {
            response["warnings"][0].as_str().unwrap().to_string()
        } else {
            assert_eq!(response["status"]["code"], 500);
            response["status"]["message"].as_str().unwrap().to_string()
        };
        assert!(text.contains("exceeded its time limit of 50ms"), "{text}");
        assert!(
            text.contains("VCDMachine prod-eu1/prod-eu1-md-0-q9z4m"),
            "{text}"
        );
        let (_, metrics) = server.get("/metrics").await;
        assert!(
            metrics.contains(r#"error="timeout",mode="enforce"} 1"#),
            "{metrics}"
        );
        // Cut on the async worker first, then run out its own limit on a blocking thread:
        // the cut itself is not a failure.
        assert_eq!(
            counter(&metrics, "nicpolicy_inline_budget_overruns_total"),
            1
        );
        // The server still answers probes while policies fail.
        assert_eq!(server.get("/healthz").await.0, 200);
    }
}

/// The value of an unlabelled metric in `/metrics` text.
fn counter(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{metrics}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_policy_holds_the_async_workers_for_one_budget_only() {
    // Two slow reviews at once would hold both async workers for their whole evaluation if it
    // ran there; cut at the inline budget, they finish on blocking threads and the workers keep
    // answering other connections.
    let dir = scratch("inline-budget");
    let config = module_config(
        &dir,
        &slow(400_000_000),
        "5s",
        "evaluation: {workers: 2, inlineBudget: 5ms}",
    );
    let server = Arc::new(TestServer::start(config).await);
    let review = fixture("vcdmachine-create-worker");
    let slow_reviews: Vec<_> = (0..2)
        .map(|i| {
            let (server, mut review) = (server.clone(), review.clone());
            review["request"]["uid"] = json!(format!("slow-{i}"));
            tokio::spawn(async move {
                let started = Instant::now();
                let response = server.review(Endpoint::Validate, M, &review).await;
                (response, started.elapsed())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(40)).await;
    let started = Instant::now();
    assert_eq!(server.get("/healthz").await.0, 200);
    let probe = started.elapsed();
    let mut slowest = Duration::ZERO;
    for task in slow_reviews {
        let (response, took) = task.await.expect("answered");
        assert_eq!(response["allowed"], true, "{response}");
        slowest = slowest.max(took);
    }
    assert!(
        probe < slowest / 2,
        "the probe waited {probe:?} while the slow reviews took {slowest:?}"
    );
    let (_, metrics) = server.get("/metrics").await;
    let cuts = counter(&metrics, "nicpolicy_inline_budget_overruns_total");
    assert!((1..=2).contains(&cuts), "{metrics}");
    // A cut evaluation leaves no trace of its own: each review is counted once.
    assert!(
        metrics.contains(
            r#"nicpolicy_reviews_total{kind="VCDMachine",endpoint="validate",result="allowed"} 2"#
        ),
        "{metrics}"
    );
    // Right after a cut, reviews go straight to blocking threads: no budget spent on them.
    let response = server.review(Endpoint::Validate, M, &review).await;
    assert_eq!(response["allowed"], true, "{response}");
    let (_, metrics) = server.get("/metrics").await;
    assert_eq!(
        counter(&metrics, "nicpolicy_inline_budget_overruns_total"),
        cuts
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_evaluation_slots_give_a_clear_answer_not_a_hang() {
    let dir = scratch("busy");
    let config = module_config(
        &dir,
        &looping(),
        "1500ms",
        "evaluation: {workers: 1, queueTimeout: 100ms}",
    );
    let server = Arc::new(TestServer::start(config).await);
    let review = fixture("vcdmachine-create-worker");
    let first = {
        let (server, review) = (server.clone(), review.clone());
        tokio::spawn(async move { server.review(Endpoint::Validate, M, &review).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let second = server.review(Endpoint::Validate, M, &review).await;
    let waited = started.elapsed();
    assert!(waited < Duration::from_millis(1000), "waited {waited:?}");
    assert_eq!(second["allowed"], false);
    assert_eq!(second["status"]["code"], 503);
    let message = second["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("evaluation slot (1) stayed busy for 100ms"),
        "{message}"
    );
    let first = first.await.unwrap();
    assert!(first["status"]["message"]
        .as_str()
        .unwrap()
        .contains("time limit"));
    let (_, metrics) = server.get("/metrics").await;
    assert!(
        metrics.contains(r#"nicpolicy_requests_rejected_total{reason="busy"} 1"#),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_reviews_are_all_answered_correctly() {
    let dir = scratch("concurrent");
    let server = Arc::new(TestServer::start(shipped_config(&dir)).await);
    let mut tasks = Vec::new();
    for client in 0..32 {
        let server = server.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..15 {
                let (name, allowed) = if (client + i) % 3 == 0 {
                    ("vcdmachine-create-invalid", false)
                } else {
                    ("vcdmachine-create-worker", true)
                };
                let mut review = fixture(name);
                review["request"]["uid"] = json!(format!("uid-{client}-{i}"));
                let response = server.review(Endpoint::Validate, M, &review).await;
                assert_eq!(response["allowed"], allowed, "{response}");
            }
        }));
    }
    for task in tasks {
        task.await.expect("client finished without error");
    }
    let (_, metrics) = server.get("/metrics").await;
    assert!(!metrics.contains(r#"result="error""#), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_reviews_in_flight_finish() {
    let dir = scratch("shutdown");
    let config = module_config(&dir, &slow(150_000_000), "5s", "");
    let server = Arc::new(TestServer::start(config).await);
    let review = fixture("vcdmachine-create-worker");
    let url = server.url(&Endpoint::Validate.path(M));
    let in_flight = {
        let server = server.clone();
        let review = review.clone();
        tokio::spawn(async move { server.review(Endpoint::Validate, M, &review).await })
    };
    tokio::time::sleep(Duration::from_millis(30)).await;
    server.server.shutdown(Duration::from_secs(10));
    let response = in_flight.await.expect("the review in flight was answered");
    assert_eq!(response["allowed"], true, "{response}");
    // New connections are refused once it has stopped.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let fresh = client(&server.ca);
    assert!(fresh.post(url).body("{}").send().await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_certificates_are_picked_up() {
    use nicpolicy::served::config::TlsFiles;
    use nicpolicy::webhook::metrics::Metrics;
    use nicpolicy::webhook::tls;

    let dir = scratch("rotation");
    let files = TlsFiles {
        cert_file: dir.join("tls.crt"),
        key_file: dir.join("tls.key"),
        reload_interval: Duration::from_millis(100),
    };
    let write = |set: &SelfSigned| {
        std::fs::write(&files.cert_file, &set.cert_pem).unwrap();
        std::fs::write(&files.key_file, &set.key_pem).unwrap();
    };
    let first = SelfSigned::generate(&[]).unwrap();
    write(&first);
    let config_dir = scratch("rotation-config");
    let config = shipped_config(&config_dir);
    let clusters = StaticClusters::read(&[workspace().join("examples/cluster.yaml")]).unwrap();
    let app = Arc::new(App::new(host(), config, Arc::new(clusters)).unwrap());
    let rustls = tls::from_files(&files, None).expect("certificate files load");
    tls::watch(
        rustls.clone(),
        files.clone(),
        None,
        Arc::new(Metrics::new()),
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let server = Server::start(app, listener, rustls).unwrap();
    let url = format!("https://localhost:{}/healthz", server.local_addr().port());
    assert!(client(&first.ca_pem).get(&url).send().await.is_ok());

    let second = SelfSigned::generate(&[]).unwrap();
    write(&second);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        // A fresh client each time: no connection reuse across the switch.
        if client(&second.ca_pem).get(&url).send().await.is_ok() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        client(&first.ca_pem).get(&url).send().await.is_err(),
        "the old certificate is no longer served"
    );
}

#[test]
fn bad_configurations_are_refused_at_start_with_the_field() {
    let dir = scratch("bad-config");
    let good = builtin::get("capvcd").unwrap().wasm;
    let clusters = || Arc::new(StaticClusters::default());

    // Settings the policy refuses.
    let config = module_config(&dir, good, "250ms", "");
    let mut config_with_settings = config.clone();
    config_with_settings.policies.get_mut(&M).unwrap()[0]
        .spec
        .settings = nicpolicy::SettingsSource::Inline(json!({"maxNics": 42}));
    let err = App::new(host(), config_with_settings, clusters())
        .err()
        .expect("refused");
    let text = err.to_string();
    assert!(
        text.contains("policies.VCDMachine[0]") && text.contains("maxNics"),
        "{text}"
    );

    // A pin that does not match: both digests in the message.
    let mut pinned = config.clone();
    pinned.policies.get_mut(&M).unwrap()[0].spec.sha256 = Some("0".repeat(64));
    let text = App::new(host(), pinned, clusters())
        .err()
        .expect("refused")
        .to_string();
    assert!(
        text.contains(&"0".repeat(64)) && text.contains(&nicpolicy::inspect::sha256_hex(good)),
        "{text}"
    );

    // A file that is not Wasm.
    let not_wasm = module_config(&dir, b"apiVersion: v1\nkind: ConfigMap\n", "250ms", "");
    let text = App::new(host(), not_wasm, clusters())
        .err()
        .expect("refused")
        .to_string();
    assert!(
        text.contains("policy.wasm") && text.contains("not a WebAssembly module"),
        "{text}"
    );

    // An inventory that does not parse (with the good module back in place).
    std::fs::write(dir.join("policy.wasm"), good).unwrap();
    std::fs::write(
        dir.join("inventory.yaml"),
        "networks:\n  - name: storage-net\n    gateway: 10.20.0.300\n",
    )
    .unwrap();
    let mut bad_inventory = config;
    bad_inventory.inventory = Some(dir.join("inventory.yaml"));
    let text = App::new(host(), bad_inventory, clusters())
        .err()
        .expect("refused")
        .to_string();
    assert!(text.contains("networks[0].gateway"), "{text}");
}

/// A module that allows with one warning naming `version`.
fn marked(version: &str) -> Vec<u8> {
    Module::returning(&format!(r#"{{"allowed":true,"warnings":["{version}"]}}"#)).wasm()
}

/// Replaces `path` the way a ConfigMap update does: the new file appears whole.
fn replace(path: &Path, bytes: &[u8]) {
    let staging = path.with_extension("staging");
    std::fs::write(&staging, bytes).unwrap();
    std::fs::rename(&staging, path).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_swap_under_load_without_a_failed_review() {
    let dir = scratch("reload");
    let module = dir.join("policy.wasm");
    std::fs::write(&module, marked("version-a")).unwrap();
    // The same module twice in the chain: a review that mixed two versions would show it.
    let text = format!(
        "policies:\n  VCDMachine:\n    - {{path: policy.wasm}}\n    - {{path: policy.wasm}}\nreload: {{interval: 50ms}}\nclusters: {{source: Static, files: [{}]}}\n",
        workspace().join("examples/cluster.yaml").display()
    );
    std::fs::write(dir.join("nicpolicy.yaml"), text).unwrap();
    let config = ServeConfig::read(&dir.join("nicpolicy.yaml")).unwrap();
    let server = Arc::new(TestServer::start(config).await);
    let review = fixture("vcdmachine-create-worker");

    let running = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let mut clients = Vec::new();
    for _ in 0..8 {
        let (server, review, running) = (server.clone(), review.clone(), running.clone());
        clients.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            while running.load(std::sync::atomic::Ordering::Relaxed) {
                let response = server.review(Endpoint::Validate, M, &review).await;
                assert_eq!(response["allowed"], true, "{response}");
                let warnings: Vec<String> = response["warnings"]
                    .as_array()
                    .expect("warnings")
                    .iter()
                    // `[policy name] version-x` in a chain of two.
                    .map(|w| w.as_str().unwrap().rsplit(' ').next().unwrap().to_string())
                    .collect();
                assert_eq!(warnings.len(), 2, "{response}");
                assert_eq!(
                    warnings[0], warnings[1],
                    "one version per review: {response}"
                );
                // A client's reviews follow each other: the version it sees never goes back.
                if let Some(last) = seen.last() {
                    assert!(warnings[0] >= *last, "{} after {last}", warnings[0]);
                }
                seen.push(warnings[0].clone());
            }
            seen
        }));
    }
    let pause = Duration::from_millis(400);
    tokio::time::sleep(pause).await;
    replace(&module, &marked("version-b"));
    tokio::time::sleep(pause).await;
    // A broken rollout: refused, version-b keeps serving.
    replace(&module, b"\0asm\x01\0\0\0 truncated");
    tokio::time::sleep(pause).await;
    replace(&module, &marked("version-c"));
    tokio::time::sleep(pause).await;
    running.store(false, std::sync::atomic::Ordering::Relaxed);

    let mut all = Vec::new();
    for client in clients {
        let seen = client.await.expect("no client saw a failed review");
        assert_eq!(seen.last().map(String::as_str), Some("version-c"));
        all.extend(seen);
    }
    assert!(all.len() > 100, "only {} reviews", all.len());
    for version in ["version-a", "version-b", "version-c"] {
        assert!(all.iter().any(|v| v == version), "{version} never served");
    }
    let (_, metrics) = server.get("/metrics").await;
    assert!(
        metrics.contains(r#"nicpolicy_policy_reloads_total{result="success"} 2"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"nicpolicy_policy_reloads_total{result="failure"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains("nicpolicy_policy_load_failures_total 1"),
        "{metrics}"
    );
    assert!(!metrics.contains(r#"result="error""#), "{metrics}");
}

/// The VCDMachineTemplate of the worker fixture as `clusterctl generate cluster` writes it: no
/// cluster label, no owner reference.
fn unlabelled_template(extras: Value) -> Value {
    let mut review = fixture("vcdmachinetemplate-create-worker");
    let object = &mut review["request"]["object"];
    object["metadata"].as_object_mut().unwrap().remove("labels");
    object["spec"]["template"]["spec"]["extraOvdcNetworks"] = extras;
    review
}

/// An UPDATE of the provisioned worker fixture from `old` to `new` extra networks.
fn machine_update(old: Value, new: Value) -> Value {
    let mut review = fixture("vcdmachine-update-provisioned");
    review["request"]["oldObject"]["spec"]["extraOvdcNetworks"] = old;
    review["request"]["object"]["spec"]["extraOvdcNetworks"] = new;
    review
}

fn warnings(response: &Value) -> Vec<String> {
    response["warnings"]
        .as_array()
        .map(|w| {
            w.iter()
                .map(|w| w.as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_blocks_a_clusters_lifecycle() {
    let dir = scratch("lifecycle");
    let server = TestServer::start(shipped_config(&dir)).await;

    // `clusterctl generate cluster | kubectl apply`: the template has no cluster label and
    // comes before its cluster. Checked without it, allowed with a warning that also says the
    // namespace's only VCDCluster was not used.
    let review = unlabelled_template(json!(["storage-net", "workload-net"]));
    let response = server.review(Endpoint::Validate, T, &review).await;
    assert_eq!(response["allowed"], true, "{response}");
    let said = warnings(&response).join("\n");
    assert!(said.contains("checked without its cluster"), "{said}");
    assert!(
        said.contains("VCDCluster prod-eu1 is the only one in namespace prod-eu1 but was not used"),
        "{said}"
    );
    // Its defaulting still writes the list, but no plan: NIC 0 is not known.
    let response = server.review(Endpoint::Mutate, T, &review).await;
    assert_eq!(response["allowed"], true);
    assert!(
        response.get("patch").is_none_or(Value::is_null),
        "{response}"
    );

    // Rules that need no cluster still deny it.
    let review = unlabelled_template(json!(["storage-net", "storage-net"]));
    let response = server.review(Endpoint::Validate, T, &review).await;
    assert_eq!(response["allowed"], false);
    assert_eq!(
        causes(&response),
        [(
            "spec.template.spec.extraOvdcNetworks[1]".to_string(),
            "FieldValueDuplicate".to_string()
        )]
    );

    // A machine stored with a duplicate, relabelled: allowed, the duplicate a warning.
    let mut review = machine_update(
        json!(["storage-net", "storage-net"]),
        json!(["storage-net", "storage-net"]),
    );
    review["request"]["object"]["metadata"]["labels"]["platform.example.net/drain"] = json!("true");
    let response = server.review(Endpoint::Validate, M, &review).await;
    assert_eq!(response["allowed"], true, "{response}");
    assert!(warnings(&response).iter().any(|w| w.starts_with(
        "pre-existing violation, not enforced on this update: spec.extraOvdcNetworks[1]: Duplicate value"
    )), "{response}");

    // ... but a new violation on top of it denies, for the new one alone.
    let review = machine_update(
        json!(["storage-net", "storage-net"]),
        json!(["storage-net", "storage-net", "storage-net"]),
    );
    let response = server.review(Endpoint::Validate, M, &review).await;
    assert_eq!(response["allowed"], false);
    let fields: Vec<String> = causes(&response).into_iter().map(|(f, _)| f).collect();
    assert!(
        fields.contains(&"spec.extraOvdcNetworks[2]".to_string()),
        "{fields:?}"
    );
    assert!(
        !fields.contains(&"spec.extraOvdcNetworks[1]".to_string()),
        "{fields:?}"
    );

    // Being deleted: CAPVCD removes its finalizer from a machine with a bad spec. Allowed by
    // validation, left alone by defaulting.
    let mut review = machine_update(json!(["mgmt-net"]), json!(["mgmt-net"]));
    for object in ["object", "oldObject"] {
        review["request"][object]["metadata"]["deletionTimestamp"] = json!("2026-12-03T16:20:00Z");
    }
    review["request"]["object"]["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("finalizers");
    let response = server.review(Endpoint::Validate, M, &review).await;
    assert_eq!(response["allowed"], true, "{response}");
    assert!(warnings(&response)
        .iter()
        .any(|w| w
            .starts_with("not enforced, the object is being deleted: spec.extraOvdcNetworks[0]")));
    let response = server.review(Endpoint::Mutate, M, &review).await;
    assert_eq!(response["allowed"], true);
    assert!(
        response.get("patch").is_none_or(Value::is_null),
        "{response}"
    );
}

/// A configuration serving the CAPVCD policy with a small input cap, under `failure_mode`.
fn small_input_config(dir: &Path, failure_mode: &str) -> ServeConfig {
    let text = format!(
        "onPolicyFailure: {failure_mode}\npolicies:\n  VCDMachine:\n    - {{builtin: capvcd, maxInputBytes: 2Ki}}\nclusters: {{source: Static, files: [{}]}}\n",
        workspace().join("examples/cluster.yaml").display()
    );
    std::fs::write(dir.join("nicpolicy.yaml"), text).expect("write config");
    ServeConfig::read(&dir.join("nicpolicy.yaml")).expect("config is valid")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_request_is_denied_under_both_failure_modes() {
    for mode in ["Deny", "Allow"] {
        let dir = scratch(&format!("oversized-{mode}"));
        let server = TestServer::start(small_input_config(&dir, mode)).await;
        let mut review = fixture("vcdmachine-create-worker");
        review["request"]["object"]["metadata"]["annotations"] =
            json!({"backup.example.net/notes": "nightly snapshot to backup-net; ".repeat(100)});
        let response = server.review(Endpoint::Validate, M, &review).await;
        assert_eq!(response["allowed"], false, "{mode}: {response}");
        assert_eq!(
            causes(&response),
            [(
                "metadata.annotations".to_string(),
                "FieldValueInvalid".to_string()
            )],
            "{mode}"
        );
        let message = response["status"]["message"].as_str().unwrap();
        assert!(message.contains("2048-byte limit"), "{mode}: {message}");
        // A machine of ordinary size is checked as usual.
        let response = server
            .review(Endpoint::Validate, M, &fixture("vcdmachine-create-worker"))
            .await;
        assert_eq!(response["allowed"], true, "{mode}: {response}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_says_its_generation_and_oversized_bodies_are_denied() {
    let dir = scratch("generation");
    let mut config = shipped_config(&dir);
    config.max_request_bytes = 16 << 10;
    let server = TestServer::start(config).await;
    let validate = Endpoint::Validate.path(M);
    let generation = |response: &reqwest::Response| {
        response
            .headers()
            .get("x-nicpolicy-generation")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };

    // 400, 404 and 405 carry the serving generation.
    let response = server
        .client
        .post(server.url(&validate))
        .body("{\"apiVersion\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    assert_eq!(generation(&response).as_deref(), Some("1"));
    let response = server
        .client
        .get(server.url(&validate))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 405);
    assert_eq!(generation(&response).as_deref(), Some("1"));
    let response = server.client.get(server.url("/nope")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 404);
    assert_eq!(generation(&response).as_deref(), Some("1"));

    // Over maxRequestBytes, written as kube-apiserver writes a review (uid first): denied to
    // its uid, so failurePolicy cannot let it through.
    let padding = "x".repeat(32 << 10);
    let body = format!(
        r#"{{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{{"uid":"5d2c8e1f-3a4b-4c6d-9e8f-7a6b5c4d3e2f","kind":{{"group":"infrastructure.cluster.x-k8s.io","version":"v1beta3","kind":"VCDMachine"}},"object":{{"metadata":{{"annotations":{{"notes":"{padding}"}}}}}}}}}}"#
    );
    let response = server
        .client
        .post(server.url(&validate))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(generation(&response).as_deref(), Some("1"));
    let answer: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    assert_eq!(
        answer["response"]["uid"],
        "5d2c8e1f-3a4b-4c6d-9e8f-7a6b5c4d3e2f"
    );
    assert_eq!(answer["response"]["allowed"], false);
    assert_eq!(answer["response"]["status"]["code"], 413);
    assert!(answer["response"]["status"]["message"]
        .as_str()
        .unwrap()
        .contains("16384-byte limit (maxRequestBytes)"));

    // Without a readable uid: HTTP 413, with the header.
    let response = server
        .client
        .post(server.url(&validate))
        .body(padding.clone() + &padding)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 413);
    assert_eq!(generation(&response).as_deref(), Some("1"));

    // Still serving.
    let response = server
        .review(Endpoint::Validate, M, &fixture("vcdmachine-create-worker"))
        .await;
    assert_eq!(response["allowed"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_too_costly_to_compile_is_refused_on_reload_and_the_old_one_serves() {
    let dir = scratch("reload-costly");
    let module = dir.join("policy.wasm");
    std::fs::write(&module, marked("version-a")).unwrap();
    let text = format!(
        "policies:\n  VCDMachine:\n    - {{path: policy.wasm}}\nreload: {{interval: 50ms}}\nclusters: {{source: Static, files: [{}]}}\n",
        workspace().join("examples/cluster.yaml").display()
    );
    std::fs::write(dir.join("nicpolicy.yaml"), text).unwrap();
    let server = TestServer::start(ServeConfig::read(&dir.join("nicpolicy.yaml")).unwrap()).await;
    replace(
        &module,
        &nicpolicy_tests::costly::tiny_functions(100_000).wasm(),
    );
    let started = Instant::now();
    loop {
        let (_, metrics) = server.get("/metrics").await;
        if metrics.contains(r#"nicpolicy_policy_reloads_total{result="failure"} 1"#) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no refused reload: {metrics}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let review = fixture("vcdmachine-create-worker");
    let response = server.review(Endpoint::Validate, M, &review).await;
    assert_eq!(response["allowed"], true);
    assert_eq!(warnings(&response), ["version-a"]);
    let (_, text) = server.get("/readyz").await;
    assert!(text.contains("generation 1"), "{text}");
}

/// The site rules (the role-based policy) for VCDMachines in `mode` in front of the CAPVCD
/// policy, enforced; the shipped inventory.
fn site_rules_then_capvcd(dir: &Path, mode: &str) -> ServeConfig {
    let text = format!(
        "inventory: {}
clusters: {{source: Static, files: [{}]}}
policies:
  VCDMachine:
    - builtin: role-based
      mode: {mode}
      settings:
        controlPlane: {{required: [mgmt-net], allowed: [storage-net, backup-net]}}
        worker: {{allowed: [storage-net, workload-net, backup-net, ext-dmz-net], defaults: [storage-net, workload-net]}}
    - builtin: capvcd
",
        workspace().join("config/nicpolicy/inventory.yaml").display(),
        workspace().join("examples/cluster.yaml").display()
    );
    std::fs::write(dir.join("nicpolicy.yaml"), text).expect("write config");
    ServeConfig::read(&dir.join("nicpolicy.yaml")).expect("config is valid")
}

/// The response `app` gives to `review` at `endpoint`, without a server.
fn answer(app: &App, endpoint: Endpoint, review: &Value) -> Value {
    let body = serde_json::to_vec(review).expect("JSON");
    let answer = app.reviewer().review(endpoint, M, &body);
    assert_eq!(
        answer.http_status,
        200,
        "{}",
        String::from_utf8_lossy(&answer.body)
    );
    let body: Value = serde_json::from_slice(&answer.body).expect("JSON answer");
    body["response"].clone()
}

fn static_clusters(config: &ServeConfig) -> Arc<StaticClusters> {
    let ClusterSourceConfig::Static { files } = &config.clusters else {
        panic!("tests use static clusters");
    };
    Arc::new(StaticClusters::read(files).expect("cluster files"))
}

const WOULD_DENY: &str = "nicpolicy (mode: warn): would be denied: ";

#[test]
fn warn_mode_policies_warn_and_change_nothing_while_enforced_ones_deny() {
    let dir = scratch("warn-mode");
    let host = host();
    let config = site_rules_then_capvcd(&dir, "warn");
    let clusters = static_clusters(&config);
    let app = App::new(host.clone(), config, clusters).expect("policies load");

    // A control-plane machine on workload-net: the site rules would deny it, CAPVCD allows.
    let mut control_plane = fixture("vcdmachine-create-worker");
    let object = &mut control_plane["request"]["object"];
    object["metadata"]["labels"]["cluster.x-k8s.io/control-plane"] = json!("");
    object["spec"]["extraOvdcNetworks"] = json!(["workload-net"]);
    let response = answer(&app, Endpoint::Validate, &control_plane);
    assert_eq!(response["allowed"], true, "{response}");
    let said = warnings(&response);
    assert!(
        said.iter().any(|w| w.starts_with(&format!(
            "{WOULD_DENY}spec.extraOvdcNetworks[0]: Unsupported value: [nicpolicy-role-based] "
        ))),
        "{said:?}"
    );
    let metrics = app.reviewer().metrics().encode();
    assert!(
        metrics.contains(r#"nicpolicy_warned_violations_total{kind="VCDMachine",policy="nicpolicy-role-based",reason="NotSupported"} 1"#),
        "{metrics}"
    );

    // A worker listing nothing: the site's defaults are not written, only announced; the plan
    // is CAPVCD's, of the list as it stands.
    let review = fixture("vcdmachine-create-worker-defaults");
    let response = answer(&app, Endpoint::Mutate, &review);
    assert_eq!(response["allowed"], true, "{response}");
    let patched = apply_patch(&review, &response);
    assert!(
        patched["spec"].get("extraOvdcNetworks").is_none(),
        "{patched}"
    );
    assert_eq!(plan_networks(&patched), ["mgmt-net"]);
    let plan = patched["metadata"]["annotations"][nicpolicy::webhook::NIC_PLAN_ANNOTATION]
        .as_str()
        .expect("NIC plan annotation");
    assert!(
        plan.starts_with(r#"{"policy":"nicpolicy-capvcd","#),
        "named after the enforced policy alone: {plan}"
    );
    let said = warnings(&response);
    assert!(
        said.contains(&"nicpolicy (mode: warn): not applied: [nicpolicy-role-based] would set spec.extraOvdcNetworks to [storage-net, workload-net]".to_string()),
        "{said:?}"
    );

    // CAPVCD, enforced, still denies what it finds; the site rule's finding stays a warning.
    let response = answer(
        &app,
        Endpoint::Validate,
        &fixture("vcdmachine-create-invalid"),
    );
    assert_eq!(response["allowed"], false, "{response}");
    let found = causes(&response);
    assert!(
        found.contains(&(
            "spec.extraOvdcNetworks[2]".to_string(),
            "FieldValueDuplicate".to_string()
        )),
        "{found:?}"
    );
    assert!(
        !found
            .iter()
            .any(|(_, reason)| reason == "FieldValueNotSupported"),
        "{found:?}"
    );
    assert!(
        warnings(&response).iter().any(|w| w.starts_with(&format!(
            "{WOULD_DENY}spec.extraOvdcNetworks[4]: Unsupported value"
        ))),
        "{response}"
    );

    // Switching the file to enforce is picked up by the reload: the same machine is denied.
    site_rules_then_capvcd(&dir, "enforce");
    let reloaded = app
        .reviewer()
        .policies()
        .reload_if_changed(
            &host,
            app.reviewer().metrics().as_ref(),
            &mut Default::default(),
        )
        .expect("reloads");
    assert!(reloaded);
    let response = answer(&app, Endpoint::Validate, &control_plane);
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(
        causes(&response),
        [(
            "spec.extraOvdcNetworks[0]".to_string(),
            "FieldValueNotSupported".to_string()
        )]
    );
}

#[test]
fn a_failing_warn_mode_policy_denies_nothing_and_skips_no_enforced_check() {
    let dir = scratch("warn-mode-failure");
    std::fs::write(dir.join("loop.wasm"), looping()).expect("write module");
    let text = format!(
        "onPolicyFailure: Deny\npolicies:\n  VCDMachine:\n    - {{path: loop.wasm, timeout: 50ms, mode: warn}}\n    - {{builtin: capvcd}}\nclusters: {{source: Static, files: [{}]}}\n",
        workspace().join("examples/cluster.yaml").display()
    );
    std::fs::write(dir.join("nicpolicy.yaml"), &text).expect("write config");
    let config = ServeConfig::read(&dir.join("nicpolicy.yaml")).expect("config is valid");
    let clusters = static_clusters(&config);
    let app = App::new(host(), config, clusters).expect("policies load");

    // Failed under onPolicyFailure: Deny, and yet admitted: a warn-mode policy denies nothing.
    let response = answer(
        &app,
        Endpoint::Validate,
        &fixture("vcdmachine-create-worker"),
    );
    assert_eq!(response["allowed"], true, "{response}");
    let said = warnings(&response).join("\n");
    assert!(
        said.starts_with("nicpolicy (mode: warn): not checked: policy ")
            && said.contains("exceeded its time limit of 50ms"),
        "{said}"
    );
    // The enforced policy after it still runs and denies.
    let response = answer(
        &app,
        Endpoint::Validate,
        &fixture("vcdmachine-create-invalid"),
    );
    assert_eq!(response["allowed"], false, "{response}");
    assert!(
        causes(&response).contains(&(
            "spec.extraOvdcNetworks[2]".to_string(),
            "FieldValueDuplicate".to_string()
        )),
        "{response}"
    );
    let metrics = app.reviewer().metrics().encode();
    assert!(
        metrics.contains(r#"error="timeout",mode="warn"} 2"#),
        "{metrics}"
    );
}

#[test]
fn flags_given_to_serve_still_win_after_a_reload() {
    use nicpolicy::served::config::Overrides;
    use nicpolicy::served::ReloadState;
    use nicpolicy::served::{Served, ServedPolicies};
    use nicpolicy::webhook::metrics::Metrics;

    let dir = scratch("reload-overrides");
    let write = |timeout: &str| {
        let text = format!(
            "listen: 0.0.0.0:9443\npolicies:\n  VCDMachine:\n    - {{builtin: capvcd, timeout: {timeout}}}\n"
        );
        replace(&dir.join("nicpolicy.yaml"), text.as_bytes());
    };
    write("1s");
    let mut config = ServeConfig::read(&dir.join("nicpolicy.yaml")).unwrap();
    let listen: std::net::SocketAddr = "127.0.0.1:18443".parse().unwrap();
    let clusters = ClusterSourceConfig::Static {
        files: vec![workspace().join("examples/cluster.yaml")],
    };
    config.override_with(Overrides {
        listen: Some(listen),
        clusters: Some(clusters.clone()),
    });
    let host = Host::new(HostConfig::default()).unwrap();
    let policies = ServedPolicies::new(Served::load(&host, config, 1).unwrap());
    write("2s");
    let reloaded = policies
        .reload_if_changed(&host, &Metrics::new(), &mut ReloadState::default())
        .unwrap();
    assert!(reloaded);
    let served = policies.get();
    assert_eq!(served.generation, 2);
    assert_eq!(served.config.listen, listen);
    assert_eq!(served.config.clusters, clusters);
}

/// A TLS connection to `server` that speaks HTTP/1.1 by hand, for clients reqwest will not be:
/// one that sends part of a body and stalls.
async fn raw_connection(
    server: &TestServer,
) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    use tokio_rustls::rustls::pki_types::pem::PemObject as _;
    use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = tokio_rustls::rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(server.ca.as_bytes()) {
        roots.add(cert.expect("CA PEM")).expect("CA");
    }
    let config = tokio_rustls::rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(server.server.local_addr()).await?;
    let name = ServerName::try_from("localhost").expect("name");
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
}

/// Sends the head of a review of `length` bytes and `sent` bytes of its body, then nothing
/// more, until the server closes the connection. A server that stops reading closes it with
/// bytes unread, which resets it (the answer may be lost): the server's metrics count why.
async fn stall(server: &TestServer, length: usize, sent: usize) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let stream = raw_connection(server).await.expect("connects");
    let (mut read, mut write) = tokio::io::split(stream);
    let head = format!(
        "POST {} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\r\n",
        Endpoint::Validate.path(M)
    );
    let writer = tokio::spawn(async move {
        write.write_all(head.as_bytes()).await?;
        let chunk = vec![b' '; 64 << 10];
        let mut left = sent;
        while left > 0 {
            let n = left.min(chunk.len());
            write.write_all(&chunk[..n]).await?;
            left -= n;
        }
        write.flush().await?;
        // Held open, sending nothing.
        std::future::pending::<()>().await;
        Ok::<_, std::io::Error>(write)
    });
    let mut answer = Vec::new();
    let _ = read.read_to_end(&mut answer).await;
    writer.abort();
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.is_empty()
            || answer.starts_with("HTTP/1.1 408")
            || answer.starts_with("HTTP/1.1 503"),
        "a stalled body got {answer:?}"
    );
}

/// The value of `name{reason="..."}` in `/metrics` text, 0 when absent.
fn rejected(metrics: &str, reason: &str) -> u64 {
    let prefix = format!("nicpolicy_requests_rejected_total{{reason=\"{reason}\"}} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&prefix)?.parse().ok())
        .unwrap_or(0)
}

/// How long an ordinary review (the example worker) sent now takes to be answered; it must be
/// allowed.
async fn small_review_answered_in(server: &TestServer) -> Duration {
    let asked = Instant::now();
    let response = server
        .review(Endpoint::Validate, M, &fixture("vcdmachine-create-worker"))
        .await;
    let answered_in = asked.elapsed();
    assert_eq!(response["allowed"], true, "{response}");
    answered_in
}

/// Held by each test that measures this process's resident memory, so that two of them never
/// run at once and count each other's allocations (the test harness runs tests in parallel).
async fn measuring_memory() -> tokio::sync::MutexGuard<'static, ()> {
    static MEASURING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    MEASURING.lock().await
}

fn resident_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|l| {
                l.strip_prefix("VmRSS:")?
                    .trim()
                    .strip_suffix(" kB")?
                    .parse()
                    .ok()
            })
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stalled_bodies_are_cut_and_reviews_are_still_answered() {
    // 100 clients each send 3 MiB less one byte of a 3 MiB review and stall. The budget holds
    // 16 MiB of them; the rest wait for room. Each gets an HTTP error by its deadlines (the
    // API server applies the failurePolicy: nothing is admitted), and a review sent in the
    // middle of it is answered within the API server's 5 s timeout.
    let _alone = measuring_memory().await;
    let dir = scratch("stalled-bodies");
    let mut config = shipped_config(&dir);
    config.connections.read_timeout = Duration::from_secs(1);
    config.connections.max_buffered_bytes = 16 << 20;
    // The 100 clients all come from loopback: each its own client here.
    config.connections.max_per_client = config.connections.max;
    let server = Arc::new(TestServer::start(config).await);
    let before = resident_kib();
    let started = Instant::now();
    let stalled: Vec<_> = (0..100)
        .map(|_| {
            let server = server.clone();
            tokio::spawn(async move { stall(&server, 3 << 20, (3 << 20) - 1).await })
        })
        .collect();
    let mut peak_buffered = 0;
    let mut peak_kib = before;
    let sampler = {
        let server = server.clone();
        tokio::spawn(async move {
            let mut samples = Vec::new();
            for _ in 0..30 {
                let (_, metrics) = server.get("/metrics").await;
                samples.push((
                    counter(&metrics, "nicpolicy_request_bytes_buffered"),
                    resident_kib(),
                ));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            samples
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let answered_in = small_review_answered_in(&server).await;
    assert!(
        answered_in < Duration::from_secs(5),
        "a review behind 100 stalled bodies waited {answered_in:?}"
    );
    for (buffered, kib) in sampler.await.expect("sampler") {
        peak_buffered = peak_buffered.max(buffered);
        peak_kib = peak_kib.max(kib);
    }
    assert!(peak_buffered > 0, "the stalled bodies were buffered");
    assert!(
        peak_buffered <= 16 << 20,
        "{peak_buffered} bytes buffered, over maxBufferedBytes"
    );
    for task in stalled {
        task.await.expect("client");
    }
    let cut_in = started.elapsed();
    assert!(
        cut_in < Duration::from_secs(10),
        "stalled bodies held for {cut_in:?}"
    );
    let (_, metrics) = server.get("/metrics").await;
    let timed_out = rejected(&metrics, "read_timeout");
    let full = rejected(&metrics, "buffers_full");
    assert_eq!(timed_out + full, 100, "{metrics}");
    assert!(
        timed_out > 0 && full > 0,
        "{timed_out} timed out, {full} found no room"
    );
    assert_eq!(counter(&metrics, "nicpolicy_request_bytes_buffered"), 0);
    // 100 bodies of 3 MiB unbounded would be 300 MiB; the budget and the connection buffers
    // bound them (the clients' own buffers are in this process too).
    let grew_mib = peak_kib.saturating_sub(before) / 1024;
    eprintln!(
        "100 stalled 3 MiB bodies: {timed_out} cut at readTimeout, {full} found no room, \
         review answered in {answered_in:?}, peak buffered {peak_buffered} B, \
         resident +{grew_mib} MiB, all cut in {cut_in:?}"
    );
    assert!(grew_mib < 128, "resident memory grew {grew_mib} MiB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn reviews_that_decode_large_are_held_to_the_budget() {
    let _alone = measuring_memory().await;
    // 16 reviews at once, each a 3 MB VCDMachine carrying 240,000 short labels: about 50 MB
    // each once parsed and copied (16 x 83 MB decoded at once before the budget counted it).
    // The budget (64 MiB) takes them one or two at a time; the others wait for room or get
    // 503, and a review sent meanwhile is answered at once.
    let dir = scratch("decoded-size");
    let mut config = shipped_config(&dir);
    // The 16 clients all come from loopback: each its own client here.
    config.connections.max_per_client = config.connections.max;
    // Time for 16 bodies of 2.9 MB to arrive and to wait for room on a loaded machine: the
    // test is about memory, not deadlines.
    config.connections.read_timeout = Duration::from_secs(10);
    let server = Arc::new(TestServer::start(config).await);
    let mut review = fixture("vcdmachine-create-worker");
    let labels: serde_json::Map<String, Value> = (0..240_000)
        .map(|i| (format!("l{i}"), Value::String(String::new())))
        .collect();
    review["request"]["object"]["metadata"]["labels"] = Value::Object(labels);
    let body = serde_json::to_vec(&review).expect("JSON");
    assert!(
        body.len() > 2 << 20 && body.len() < 3 << 20,
        "{} bytes",
        body.len()
    );
    let before = resident_kib();
    let path = Endpoint::Validate.path(M);
    // Each large review from a client of its own (a connection of its own): over one shared
    // HTTP/2 connection, the bodies waiting for room would fill its flow-control window and
    // hold up the small review below for want of window, not of memory.
    let large: Vec<_> = (0..16)
        .map(|_| {
            let (url, ca, body) = (server.url(&path), server.ca.clone(), body.clone());
            tokio::spawn(async move {
                // Longer than the default 20 s: a review may wait for room behind others.
                let request = client(&ca).post(url).timeout(Duration::from_secs(120));
                post_json(request, body).await
            })
        })
        .collect();
    let sampler = tokio::spawn(async move {
        let mut peak = 0;
        for _ in 0..60 {
            peak = peak.max(resident_kib());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        peak
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let answered_in = small_review_answered_in(&server).await;
    assert!(answered_in < Duration::from_secs(5), "{answered_in:?}");
    let mut statuses = Vec::new();
    for task in large {
        let (status, text) = task.await.expect("client");
        // Reviewed, or refused by the budget: 503 for no room in time, 408 for a body that
        // did not arrive within readTimeout while the others were read.
        assert!(matches!(status, 200 | 503 | 408), "{status}: {text}");
        statuses.push(status);
    }
    let peak_kib = sampler.await.expect("sampler");
    let grew_mib = peak_kib.saturating_sub(before) / 1024;
    eprintln!(
        "16 reviews of 240,000 labels: statuses {statuses:?}, a small review answered in \
         {answered_in:?}, resident +{grew_mib} MiB"
    );
    assert!(statuses.contains(&200), "some were reviewed: {statuses:?}");
    // The server's share is to stay under 160 MiB; the clients' 16 bodies are in this process
    // too. (Measured on 2026-12-07, debug build, readTimeout 2 s: +144 MiB with the decoded
    // size counted, +313 MiB and the small review 0.9 s late without; here +97 MiB.)
    let clients_mib = ((16 * body.len()) >> 20) as u64;
    assert!(
        grew_mib < 160 + clients_mib,
        "resident memory grew {grew_mib} MiB ({clients_mib} MiB of it the clients' bodies)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn over_one_http2_connection_a_review_is_not_held_behind_bodies_waiting_for_room() {
    // kube-apiserver sends its reviews over one HTTP/2 connection. Large reviews there that
    // cannot get room in the body budget (held here by a body that stalls on a connection of
    // its own) must not keep their unread bytes in that connection's flow-control window, or
    // every review multiplexed behind them waits with them, up to readTimeout.
    let dir = scratch("http2-stalled-bodies");
    let mut config = shipped_config(&dir);
    config.connections.max_buffered_bytes = 4 << 20;
    config.connections.read_timeout = Duration::from_secs(10);
    let server = Arc::new(TestServer::start(config).await);
    // 3 MB of the 4 MiB budget held by a body that stops arriving.
    let holder = {
        let server = server.clone();
        tokio::spawn(async move { stall(&server, 3_000_000, 2_900_000).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    // 1.2 MB reviews of one long label: more than the room left.
    let mut review = fixture("vcdmachine-create-worker");
    review["request"]["object"]["metadata"]["labels"]["note"] =
        Value::String("n".repeat(1_200_000));
    let body = serde_json::to_vec(&review).expect("JSON");
    let shared = reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(reqwest::Certificate::from_pem(server.ca.as_bytes()).expect("CA"))
        .http2_prior_knowledge()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client");
    let path = Endpoint::Validate.path(M);
    let large: Vec<_> = (0..4)
        .map(|_| {
            let (request, body) = (shared.post(server.url(&path)), body.clone());
            tokio::spawn(async move { post_json(request, body).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let asked = Instant::now();
    let (status, text) = post_json(
        shared.post(server.url(&path)),
        serde_json::to_vec(&fixture("vcdmachine-create-worker")).expect("JSON"),
    )
    .await;
    let answered_in = asked.elapsed();
    assert_eq!(status, 200, "{text}");
    let mut statuses = Vec::new();
    for task in large {
        let (status, text) = task.await.expect("client");
        // No room at once: 503 (the failurePolicy applies), never left waiting.
        assert_eq!(status, 503, "{text}");
        statuses.push(status);
    }
    eprintln!(
        "4 large reviews over one HTTP/2 connection, the budget held: {statuses:?}; a small one \
         behind them answered in {answered_in:?}"
    );
    assert!(
        answered_in < Duration::from_secs(2),
        "the small review waited {answered_in:?} behind bodies waiting for room"
    );
    holder.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_are_closed_and_idle_ones_time_out() {
    use tokio::io::AsyncReadExt as _;
    let dir = scratch("connection-cap");
    let mut config = shipped_config(&dir);
    config.connections.max = 4;
    config.connections.idle_timeout = Duration::from_secs(1);
    let server = TestServer::start(config).await;
    let mut open = Vec::new();
    for _ in 0..4 {
        open.push(raw_connection(&server).await.expect("under the cap"));
    }
    let fifth = client(&server.ca).get(server.url("/metrics")).send().await;
    assert!(fifth.is_err(), "a fifth connection was served: {fifth:?}");
    assert!(raw_connection(&server).await.is_err(), "closed at accept");
    // Idle ones are closed by the server after idleTimeout, which frees the cap.
    let mut buf = [0u8; 1];
    for stream in &mut open {
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await;
        assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
    }
    drop(open);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (status, metrics) = server.get("/metrics").await;
    assert_eq!(status, 200);
    assert!(
        counter(&metrics, "nicpolicy_connections_refused_total") >= 2,
        "{metrics}"
    );
}

#[tokio::test]
async fn a_plan_capvcd_will_not_build_is_a_warning_or_a_denial() {
    // The CAPVCD policy planning storage-net on DHCP, which stock CAPVCD never applies.
    let dir = scratch("not-built-as-planned");
    let mut config = shipped_config(&dir);
    let dhcp = nicpolicy::PolicySpec::new(nicpolicy::sources::builtin("capvcd").unwrap())
        .with_settings(json!({"networks": {"storage-net": {"ipAllocationMode": "DHCP"}}}));
    config.policies.get_mut(&M).unwrap()[0].spec = dhcp;
    let review = fixture("vcdmachine-create-worker");

    let server = TestServer::start(config.clone()).await;
    let response = server.review(Endpoint::Validate, M, &review).await;
    assert_eq!(response["allowed"], true, "{response}");
    assert_eq!(
        response["warnings"],
        json!([
            "nicpolicy: not built as planned: NIC 1 (storage-net): ipAllocationMode DHCP is not \
             applied: CAPVCD builds POOL"
        ]),
        "{response}"
    );
    // The mutating answer does not repeat it (kubectl would print it twice).
    let mutated = server.review(Endpoint::Mutate, M, &review).await;
    assert!(mutated.get("warnings").is_none(), "{mutated}");

    // onUnapplied: Deny: denied on the field that made the NIC.
    config.on_unapplied = nicpolicy::plugin::provisioner::OnUnapplied::Deny;
    let server = TestServer::start(config.clone()).await;
    let response = server.review(Endpoint::Validate, M, &review).await;
    assert_eq!(response["allowed"], false, "{response}");
    let cause = &response["status"]["details"]["causes"][0];
    assert_eq!(cause["field"], "spec.extraOvdcNetworks[0]", "{response}");
    assert_eq!(cause["reason"], "FieldValueNotSupported", "{response}");

    // A site provisioner that applies IP modes: admitted, nothing to say.
    config.provisioner.applies = vec![nicpolicy::plugin::provisioner::PlanField::IpAllocationMode];
    let server = TestServer::start(config.clone()).await;
    let response = server.review(Endpoint::Validate, M, &review).await;
    assert_eq!(response["allowed"], true, "{response}");
    assert!(response.get("warnings").is_none(), "{response}");

    // On a Deckhouse site every NIC is built DHCP: the plan's POOL NICs are the ones reported
    // (storage-net, planned DHCP, is not), and the shipped configuration with `profile:
    // deckhouse` reads as that build.
    std::fs::write(
        dir.join("deckhouse.yaml"),
        std::fs::read_to_string(workspace().join("config/nicpolicy/nicpolicy.yaml"))
            .unwrap()
            .replace("profile: capvcd-1.3", "profile: deckhouse"),
    )
    .unwrap();
    let read = ServeConfig::read(&dir.join("deckhouse.yaml"));
    let deckhouse = match read {
        Ok(read) => read.provisioner,
        Err(err) => panic!("{err}"),
    };
    config.provisioner = deckhouse;
    config.on_unapplied = nicpolicy::plugin::provisioner::OnUnapplied::Warn;
    let server = TestServer::start(config).await;
    let response = server.review(Endpoint::Validate, M, &review).await;
    assert_eq!(response["allowed"], true, "{response}");
    assert_eq!(
        response["warnings"],
        json!([
            "nicpolicy: not built as planned: NIC 0 (mgmt-net): ipAllocationMode POOL is not \
             applied: Deckhouse's CAPVCD builds DHCP",
            "nicpolicy: not built as planned: NIC 2 (workload-net): ipAllocationMode POOL is not \
             applied: Deckhouse's CAPVCD builds DHCP"
        ]),
        "{response}"
    );
}

#[tokio::test]
async fn a_machine_is_judged_against_its_org_vdcs_inventory() {
    // prod-eu1 is in eu1-ovdc-prod (examples/cluster.yaml); its worker asks for storage-net
    // and workload-net.
    let dir = scratch("inventories");
    let mut config = shipped_config(&dir);
    let review = fixture("vcdmachine-create-worker");
    let write = |name: &str, networks: &[&str]| {
        let path = dir.join(name);
        let list: Vec<String> = networks.iter().map(|n| format!("  - name: {n}")).collect();
        std::fs::write(&path, format!("networks:\n{}\n", list.join("\n"))).unwrap();
        path
    };
    // The default lists every network; eu1-ovdc-prod's own has no workload-net.
    config.inventory = Some(write(
        "default.yaml",
        &["mgmt-net", "storage-net", "workload-net"],
    ));
    config.inventories = BTreeMap::from([(
        "eu1-ovdc-prod".to_string(),
        write("eu1-ovdc-prod.yaml", &["mgmt-net", "storage-net"]),
    )]);
    let server = TestServer::start(config.clone()).await;
    let response = server.review(Endpoint::Validate, M, &review).await;
    assert_eq!(response["allowed"], false, "{response}");
    assert!(
        response["status"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("workload-net")),
        "{response}"
    );
    // Another VDC's inventory does not apply: prod-eu1 falls back to the default.
    config.inventories = BTreeMap::from([(
        "eu1-ovdc-stage".to_string(),
        write("eu1-ovdc-stage.yaml", &["mgmt-net"]),
    )]);
    let server = TestServer::start(config).await;
    let response = server.review(Endpoint::Validate, M, &review).await;
    assert_eq!(response["allowed"], true, "{response}");
}

/// Cluster API's Machines of prod-eu1 as the management cluster holds them (metadata only is
/// read): a control-plane Machine and a worker Machine.
const MACHINES: &str = "apiVersion: cluster.x-k8s.io/v1beta1
kind: Machine
metadata:
  name: prod-eu1-control-plane-7xk2p
  namespace: prod-eu1
  labels: {cluster.x-k8s.io/cluster-name: prod-eu1, cluster.x-k8s.io/control-plane: \"\"}
spec: {clusterName: prod-eu1}
---
apiVersion: cluster.x-k8s.io/v1beta1
kind: Machine
metadata:
  name: prod-eu1-md-0-q9z4m
  namespace: prod-eu1
  labels: {cluster.x-k8s.io/cluster-name: prod-eu1, cluster.x-k8s.io/deployment-name: prod-eu1-md-0}
spec: {clusterName: prod-eu1}
";

/// The shipped configuration over the example cluster (paused when `paused`, as `clusterctl
/// move` leaves it) and [`MACHINES`].
fn app_with_machines(name: &str, paused: bool) -> App {
    let dir = scratch(name);
    let mut config = shipped_config(&dir);
    let cluster = std::fs::read_to_string(workspace().join("examples/cluster.yaml"))
        .expect("example cluster");
    let cluster = if paused {
        let paused = cluster.replacen(
            "spec:\n  clusterNetwork:",
            "spec:\n  paused: true\n  clusterNetwork:",
            1,
        );
        assert_ne!(paused, cluster, "the example Cluster's spec moved");
        paused
    } else {
        cluster
    };
    std::fs::write(dir.join("cluster.yaml"), cluster).expect("write cluster");
    std::fs::write(dir.join("machines.yaml"), MACHINES).expect("write machines");
    config.clusters = ClusterSourceConfig::Static {
        files: vec![dir.join("cluster.yaml"), dir.join("machines.yaml")],
    };
    let clusters = static_clusters(&config);
    App::new(host(), config, clusters).expect("policies load")
}

/// The worker fixture's CREATE with `labels`, owned by Machine `owner`, listing `extras`.
fn owned_create(labels: Value, owner: &str, extras: Value) -> Value {
    let mut review = fixture("vcdmachine-create-worker");
    let object = &mut review["request"]["object"];
    object["metadata"]["labels"] = labels;
    object["metadata"]["ownerReferences"][0]["name"] = json!(owner);
    object["spec"]["extraOvdcNetworks"] = extras;
    review
}

#[test]
fn a_vcdmachine_is_judged_by_the_cluster_and_role_of_its_owner_machine() {
    let app = app_with_machines("owner-machine", false);
    let control_plane = "prod-eu1-control-plane-7xk2p";
    let dmz = json!(["storage-net", "ext-dmz-net"]);
    let refused_on_dmz = |response: &Value| {
        assert_eq!(response["allowed"], false, "{response}");
        assert!(
            causes(response)
                .iter()
                .any(|(field, _)| field == "spec.extraOvdcNetworks[1]"),
            "{response}"
        );
    };
    // The three ways a tenant could dress a control-plane machine as something else: no
    // labels, another cluster's label, a worker's labels. CAPVCD reads the owner Machine, and
    // so does nicpolicy: a control plane of prod-eu1 may not sit on ext-dmz-net.
    for labels in [
        json!({}),
        json!({"cluster.x-k8s.io/cluster-name": "prod-us1"}),
        json!({"cluster.x-k8s.io/cluster-name": "prod-eu1", "cluster.x-k8s.io/deployment-name": "prod-eu1-md-0"}),
    ] {
        let review = owned_create(labels.clone(), control_plane, dmz.clone());
        let response = answer(&app, Endpoint::Validate, &review);
        refused_on_dmz(&response);
        if labels.as_object().is_some_and(|l| !l.is_empty()) {
            let said = warnings(&response).join("\n");
            assert!(
                said.contains(&format!("its owner Machine {control_plane} says cluster prod-eu1, control plane: judged as the Machine says")),
                "{labels}: {said}"
            );
        }
    }
    // The worker Machine's VCDMachine may use the DMZ; its labels agree, so no warning.
    let review = owned_create(
        json!({"cluster.x-k8s.io/cluster-name": "prod-eu1"}),
        "prod-eu1-md-0-q9z4m",
        dmz.clone(),
    );
    let response = answer(&app, Endpoint::Validate, &review);
    assert_eq!(response["allowed"], true, "{response}");
    assert!(warnings(&response).is_empty(), "{response}");

    // Before its owner exists (a MachineSet creates the VCDMachine first), its own labels
    // decide: a worker of prod-eu1.
    let mut review = owned_create(
        json!({"cluster.x-k8s.io/cluster-name": "prod-eu1"}),
        "unused",
        dmz.clone(),
    );
    review["request"]["object"]["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("ownerReferences");
    assert_eq!(answer(&app, Endpoint::Validate, &review)["allowed"], true);

    // The UPDATE that sets the owner (Cluster API's Machine controller) is judged in full
    // against the Machine's cluster and role, though the stored object had the same list.
    let mut update = review.clone();
    update["request"]["operation"] = json!("UPDATE");
    update["request"]["oldObject"] = review["request"]["object"].clone();
    update["request"]["object"]["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
        "name": control_plane, "uid": "m-1", "controller": true
    }]);
    refused_on_dmz(&answer(&app, Endpoint::Validate, &update));

    // The same UPDATE to a worker's Machine, and Cluster API putting back a label the tenant
    // removed, pass.
    update["request"]["object"]["metadata"]["ownerReferences"][0]["name"] =
        json!("prod-eu1-md-0-q9z4m");
    assert_eq!(answer(&app, Endpoint::Validate, &update)["allowed"], true);
}

#[test]
fn the_ratchet_holds_only_while_the_provider_id_stays() {
    let app = app_with_machines("provider-id", false);
    // Stored provisioned with a duplicate (before nicpolicy): an UPDATE that keeps the
    // provider ID is excused, one that clears or changes it is judged in full.
    let stored = json!(["storage-net", "storage-net"]);
    let review = machine_update(stored.clone(), stored.clone());
    assert_eq!(answer(&app, Endpoint::Validate, &review)["allowed"], true);
    for provider_id in [
        Value::Null,
        json!("vmware-cloud-director://urn:vcloud:vm:other"),
    ] {
        let mut toggled = review.clone();
        let spec = toggled["request"]["object"]["spec"]
            .as_object_mut()
            .unwrap();
        match &provider_id {
            Value::Null => spec.remove("providerID"),
            id => spec.insert("providerID".into(), id.clone()),
        };
        let response = answer(&app, Endpoint::Validate, &toggled);
        assert_eq!(response["allowed"], false, "{provider_id}: {response}");
        assert!(
            causes(&response)
                .iter()
                .any(|(field, _)| field == "spec.extraOvdcNetworks[1]"),
            "{response}"
        );
    }

    // The record stays: a provisioned machine's plan annotation is not rewritten.
    let mut review = machine_update(json!(["storage-net"]), json!(["storage-net"]));
    for object in ["object", "oldObject"] {
        review["request"][object]["metadata"]["annotations"] =
            json!({"nicpolicy.io/nic-plan": "{\"policy\":\"as built\",\"nics\":[]}"});
    }
    let response = answer(&app, Endpoint::Mutate, &review);
    assert_eq!(response["allowed"], true, "{response}");
    assert!(
        response.get("patch").is_none_or(Value::is_null),
        "{response}"
    );

    // Nor by anyone else: an UPDATE that rewrites the record gets the stored one back from
    // defaulting, and is refused by validation when it skipped defaulting.
    review["request"]["object"]["metadata"]["annotations"] =
        json!({"nicpolicy.io/nic-plan": "{\"policy\":\"made up\",\"nics\":[]}"});
    let response = answer(&app, Endpoint::Mutate, &review);
    assert_eq!(response["allowed"], true, "{response}");
    let restored = apply_patch(&review, &response);
    assert_eq!(
        restored["metadata"]["annotations"]["nicpolicy.io/nic-plan"],
        "{\"policy\":\"as built\",\"nics\":[]}"
    );
    let response = answer(&app, Endpoint::Validate, &review);
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(
        causes(&response),
        [(
            "metadata.annotations[nicpolicy.io/nic-plan]".to_string(),
            "FieldValueForbidden".to_string()
        )]
    );
}

/// A CREATE of the provisioned worker fixture with `extras`, as `clusterctl move` writes it.
fn moved_create(extras: Value) -> Value {
    let mut review = machine_update(extras.clone(), extras);
    review["request"]["operation"] = json!("CREATE");
    review["request"]["oldObject"] = Value::Null;
    review
}

#[test]
fn a_machine_moved_or_restored_into_a_paused_cluster_is_taken_as_built() {
    let app = app_with_machines("moved", true);
    // A stored violation the ratchet would excuse: admitted, as a warning.
    let review = moved_create(json!(["storage-net", "storage-net"]));
    let response = answer(&app, Endpoint::Validate, &review);
    assert_eq!(response["allowed"], true, "{response}");
    assert!(
        warnings(&response).iter().any(|w| w
            .starts_with("already built, not enforced on this create: spec.extraOvdcNetworks[1]")),
        "{response}"
    );
    // A provisioned worker with no extra networks: not defaulted, no plan for NICs it lacks.
    let mut review = moved_create(json!([]));
    review["request"]["object"]["metadata"]["annotations"] =
        json!({"nicpolicy.io/nic-plan": "{\"policy\":\"as built\",\"nics\":[]}"});
    let response = answer(&app, Endpoint::Mutate, &review);
    assert_eq!(response["allowed"], true, "{response}");
    assert!(
        response.get("patch").is_none_or(Value::is_null),
        "{response}"
    );
    assert_eq!(answer(&app, Endpoint::Validate, &review)["allowed"], true);

    // Outside a paused cluster a provider ID on a CREATE proves nothing: judged in full.
    let app = app_with_machines("not-moved", false);
    let response = answer(
        &app,
        Endpoint::Validate,
        &moved_create(json!(["storage-net", "storage-net"])),
    );
    assert_eq!(response["allowed"], false, "{response}");
    assert!(
        warnings(&response)
            .iter()
            .any(|w| w.contains("outside a paused cluster: judged in full")),
        "{response}"
    );
}

#[test]
fn cluster_apis_topology_dry_run_skips_immutability_not_structure() {
    let app = app_with_machines("topology-dry-run", false);
    // A provisioned machine's NIC list changed: the frozen-list rule denies...
    let changed = machine_update(
        json!(["storage-net"]),
        json!(["storage-net", "workload-net"]),
    );
    assert_eq!(answer(&app, Endpoint::Validate, &changed)["allowed"], false);
    // ... but not in the topology controller's dry run (dryRun and its annotation).
    let mut dry = changed.clone();
    dry["request"]["dryRun"] = json!(true);
    dry["request"]["object"]["metadata"]["annotations"] =
        json!({"topology.cluster.x-k8s.io/dry-run": ""});
    let response = answer(&app, Endpoint::Validate, &dry);
    assert_eq!(response["allowed"], true, "{response}");
    assert!(
        warnings(&response)
            .iter()
            .any(|w| w.starts_with("not enforced in Cluster API's topology dry run")),
        "{response}"
    );
    // The annotation alone (no dry run) is not the topology's, and a structural violation
    // still denies in a dry run.
    let mut annotated = changed.clone();
    annotated["request"]["object"]["metadata"]["annotations"] =
        json!({"topology.cluster.x-k8s.io/dry-run": ""});
    assert_eq!(
        answer(&app, Endpoint::Validate, &annotated)["allowed"],
        false
    );
    let mut duplicate = dry.clone();
    duplicate["request"]["object"]["spec"]["extraOvdcNetworks"] =
        json!(["storage-net", "storage-net"]);
    assert_eq!(
        answer(&app, Endpoint::Validate, &duplicate)["allowed"],
        false
    );
}
