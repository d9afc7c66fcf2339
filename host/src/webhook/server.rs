//! The HTTPS server: routes, the bounded evaluation pool, body cap and deadlines, connection
//! cap, probes, metrics and graceful shutdown.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use axum_server::Handle;
use http_body_util::BodyExt;
use tokio::sync::Semaphore;

use crate::clusters::ClusterSource;
use nicpolicy_plugin::ObjectKind;

use super::admission::{too_large_answer, Answer};
use super::connections::{self, BodyBudget, ConnectionLimit, Taken};
use super::decoded;
use super::metrics::Metrics;
use super::review::OnWorker;
use super::review::{Endpoint, NativeEvaluator, Reviewer};
use super::stage_log::StageLog;
use crate::served::config::{Connections, ServeConfig};
use crate::served::{ServeLoadError, Served, ServedPolicies};
use crate::{stages, Host};

/// Everything the routes share.
pub struct App {
    reviewer: Arc<Reviewer>,
    permits: Arc<Semaphore>,
    workers: usize,
    queue_timeout: Duration,
    max_body: usize,
    /// Request bodies held at once, in bytes.
    budget: BodyBudget,
    connections: Connections,
    /// Reviews only from clients with a certificate of the configured client CA
    /// (`clientAuth`); the TLS configuration checks the certificate, this the routes.
    client_certificate_required: bool,
    accepting: AtomicBool,
    host: Host,
    /// Benchmarks only: the stage times of every review answered on a worker.
    stage_log: Option<Arc<StageLog>>,
}

impl App {
    /// Loads the configuration's policies (refusing to start on any error: a bad module, a
    /// pin mismatch, refused settings, an unreadable inventory; a module that cannot be had
    /// from its registry too, unless `registry.onUnavailableAtStart` is `Deny`) over
    /// `clusters`.
    pub fn new(
        host: Host,
        config: ServeConfig,
        clusters: Arc<dyn ClusterSource>,
    ) -> Result<App, ServeLoadError> {
        let workers = config.workers;
        let queue_timeout = config.queue_timeout;
        let max_body = config.max_request_bytes;
        let connections = config.connections;
        let client_certificate_required = config.client_auth.is_some();
        let served = Served::load_at_start(&host, config)?;
        let metrics = Arc::new(Metrics::new());
        let reviewer = Arc::new(Reviewer::new(
            ServedPolicies::new(served),
            clusters,
            metrics.clone(),
        ));
        Ok(App {
            reviewer,
            permits: Arc::new(Semaphore::new(workers)),
            workers,
            queue_timeout,
            max_body,
            budget: BodyBudget::new(connections.max_buffered_bytes, connections.max, &metrics),
            connections,
            client_certificate_required,
            accepting: AtomicBool::new(true),
            host,
            stage_log: None,
        })
    }

    /// For benchmarks only: see [`Reviewer::with_native_evaluator`].
    pub fn with_native_evaluator(mut self, native: NativeEvaluator) -> App {
        let reviewer = Reviewer::new(
            self.reviewer.policies().clone(),
            self.reviewer.clusters().clone(),
            self.reviewer.metrics().clone(),
        )
        .with_native_evaluator(native);
        self.reviewer = Arc::new(reviewer);
        self
    }

    /// For benchmarks only: time the stages of every review answered on an async worker and
    /// show them at `/bench/stages` ([`StageLog`]); each read starts the next period.
    pub fn with_stage_log(mut self) -> App {
        self.stage_log = Some(Arc::new(StageLog::default()));
        self
    }

    /// The reviewer (served policies, clusters, metrics).
    pub fn reviewer(&self) -> &Arc<Reviewer> {
        &self.reviewer
    }

    /// Starts the hot-reload watcher when the configuration asks for one.
    pub fn watch_for_changes(&self) -> std::io::Result<()> {
        let policies = self.reviewer.policies();
        match policies.get().config.reload_interval {
            Some(interval) => {
                policies.watch(self.host.clone(), self.reviewer.metrics().clone(), interval)
            }
            None => Ok(()),
        }
    }

    /// The routes.
    pub fn router(self: &Arc<Self>) -> Router {
        let mut router = Router::new().merge(crate::probes::routes::<App>());
        if let Some(log) = &self.stage_log {
            let log = log.clone();
            router = router.route(
                "/bench/stages",
                get(move || async move {
                    let json = log.take_summary().to_string();
                    ([(header::CONTENT_TYPE, "application/json")], json)
                }),
            );
        }
        for kind in ObjectKind::ALL {
            for endpoint in [Endpoint::Mutate, Endpoint::Validate] {
                for path in endpoint.paths(kind) {
                    router = router.route(
                        &path,
                        post(
                            move |State(app): State<Arc<App>>, request: Request| async move {
                                app.handle(endpoint, kind, request).await
                            },
                        ),
                    );
                }
            }
        }
        router
            .fallback(not_found)
            .layer(axum::middleware::map_response_with_state(
                self.clone(),
                generation_header,
            ))
            .with_state(self.clone())
    }

    async fn handle(
        self: Arc<Self>,
        endpoint: Endpoint,
        kind: ObjectKind,
        request: Request,
    ) -> Response {
        let started = Instant::now();
        if self.client_certificate_required && !super::tls::client_certified(request.extensions()) {
            // Before the body is read: a client that may not send reviews takes no budget.
            let message = "a client certificate signed by clientAuth.caFile is required to send \
                           reviews (kube-apiserver presents one through its \
                           AdmissionConfiguration; docs/deploy.md)";
            self.reviewer.reject("client_certificate", message);
            return (StatusCode::FORBIDDEN, format!("{message}\n")).into_response();
        }
        // Held until the review is answered: the body is in memory until then.
        let (body, mut taken) = match self.read_body(request).await {
            Ok(read) => read,
            Err(response) => return response,
        };
        // And what it becomes once parsed: taken from the same budget before it is built.
        if let Err(response) = self.reserve_decoded(&body, &mut taken).await {
            return response;
        }
        // Bounded: at most `workers` evaluations run; the rest wait up to `queue_timeout`.
        let permit =
            match tokio::time::timeout(self.queue_timeout, self.permits.clone().acquire_owned())
                .await
            {
                Ok(Ok(permit)) => permit,
                _ => {
                    let answer = self
                        .reviewer
                        .busy(endpoint, kind, &body, self.queue_timeout);
                    tracing::warn!(
                        workers = self.workers,
                        "evaluation slots busy; review answered without evaluation"
                    );
                    return respond(answer);
                }
            };
        let answer = if body.len() > connections::BODY_ALLOWANCE_BYTES {
            // A large body is parsed and evaluated on a blocking thread from the start: its
            // parsing alone can take longer than any inline budget, and would hold up this
            // worker's other connections (an ordinary review is a few KiB).
            let reviewer = self.reviewer.clone();
            tokio::task::spawn_blocking(move || {
                let _permit = permit;
                let _taken = taken;
                reviewer.review(endpoint, kind, &body)
            })
            .await
        } else {
            self.review_here_or_blocking(endpoint, kind, body, permit, taken)
                .await
        };
        match answer {
            Ok(answer) => {
                tracing::debug!(
                    path = %endpoint.path(kind),
                    result = answer.result,
                    elapsed_us = started.elapsed().as_micros() as u64,
                    "review"
                );
                respond(answer)
            }
            Err(err) => {
                tracing::error!(error = %err, "review task failed");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("review failed: {err}\n"),
                )
                    .into_response()
            }
        }
    }

    /// An ordinary review: on this worker when the evaluation fits the inline budget (most do,
    /// in far less time than a hand-off to a blocking thread costs); else on a blocking thread.
    async fn review_here_or_blocking(
        &self,
        endpoint: Endpoint,
        kind: ObjectKind,
        body: Bytes,
        permit: tokio::sync::OwnedSemaphorePermit,
        taken: Taken,
    ) -> Result<Answer, tokio::task::JoinError> {
        let on_worker = match &self.stage_log {
            None => self.reviewer.review_on_worker(endpoint, kind, &body),
            Some(log) => {
                let (on_worker, spent) =
                    stages::record(|| self.reviewer.review_on_worker(endpoint, kind, &body));
                if matches!(on_worker, OnWorker::Answered(_)) {
                    log.push(spent);
                }
                on_worker
            }
        };
        match on_worker {
            OnWorker::Answered(answer) => Ok(answer),
            OnWorker::Deferred(deferred) => {
                let reviewer = self.reviewer.clone();
                tokio::task::spawn_blocking(move || {
                    let _permit = permit;
                    let _taken = taken;
                    reviewer.finish(deferred)
                })
                .await
            }
        }
    }

    /// Reads the body up to `maxRequestBytes`, taking room for it from the shared budget. A
    /// larger one is answered without reading the rest: with an AdmissionReview denial when
    /// its first bytes name the review's uid (so the API server denies the object whatever the
    /// webhook's failurePolicy), else with HTTP 413. A body that does not arrive within
    /// `connections.readTimeout` (408), or finds no room in the budget within it (503), is
    /// answered with an HTTP error, which the API server handles by the webhook's
    /// failurePolicy: neither admits anything unchecked. Over HTTP/2 a body waits for no room
    /// at all ([`App::room_wait`]).
    async fn read_body(&self, request: Request) -> Result<(Bytes, Taken), Response> {
        let room_wait = self.room_wait(request.version());
        let declared = request
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let mut body = request.into_body();
        let mut taken = self.budget.empty();
        let mut bytes = Vec::new();
        let mut over = declared
            .filter(|size| *size > self.max_body as u64)
            .is_some();
        // Reading and waiting for room are timed apart: a review queued behind stalled bodies
        // waits for their deadline, then reads in its own time.
        let mut reading = self.connections.read_timeout;
        let mut waiting = room_wait;
        loop {
            let at = Instant::now();
            let frame = match tokio::time::timeout(reading, body.frame()).await {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(_) => return Err(self.read_timed_out(bytes.len(), declared)),
            };
            reading = reading.saturating_sub(at.elapsed());
            let frame = match frame {
                Ok(frame) => frame,
                Err(err) => {
                    let message = format!("cannot read the request body: {err}");
                    self.reviewer.reject("malformed", &message);
                    return Err((StatusCode::BAD_REQUEST, message + "\n").into_response());
                }
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            if !over && bytes.len() + data.len() > self.max_body {
                over = true;
                bytes.truncate(UID_SCAN_BYTES);
            }
            // What is kept of this frame, and the allocation that keeps it.
            let keep = if over {
                data.len().min(UID_SCAN_BYTES.saturating_sub(bytes.len()))
            } else {
                data.len()
            };
            let needed = bytes.len() + keep;
            if needed > bytes.capacity() {
                // The declared length when it fits (one allocation), else doubling.
                let capacity = match declared {
                    Some(size) if !over && size as usize >= needed => size as usize,
                    _ => needed
                        .max(bytes.capacity() * 2)
                        .min(self.max_body.max(needed)),
                };
                let at = Instant::now();
                if tokio::time::timeout(waiting, self.budget.reserve(&mut taken, capacity))
                    .await
                    .is_err()
                {
                    return Err(self.buffers_full());
                }
                waiting = waiting.saturating_sub(at.elapsed());
                bytes.reserve_exact(capacity - bytes.len());
            }
            bytes.extend_from_slice(&data[..keep]);
            if over && bytes.len() >= UID_SCAN_BYTES {
                break;
            }
        }
        if !over {
            return Ok((Bytes::from(bytes), taken));
        }
        let size = declared
            .map(|size| format!(" of {size} bytes"))
            .unwrap_or_default();
        let message = format!(
            "the AdmissionReview{size} is over this webhook's {}-byte limit (maxRequestBytes), so \
             the object cannot be checked; it is denied",
            self.max_body
        );
        Err(self.too_large(&bytes, message))
    }

    /// The answer to a review too large to check (`message` says why): denied with an
    /// AdmissionReview answer when the uid can be read from `start` (the body's first bytes), so
    /// the API server denies the object whatever the webhook's failurePolicy, else HTTP 413.
    fn too_large(&self, start: &[u8], message: String) -> Response {
        self.reviewer.reject("too_large", &message);
        let generation = self.reviewer.policies().get().generation;
        match review_uid(start) {
            Some(uid) => respond(too_large_answer(&uid, &message, generation)),
            None => (StatusCode::PAYLOAD_TOO_LARGE, message + "\n").into_response(),
        }
    }

    /// Takes room in the budget for what `body` becomes once parsed ([`decoded::estimate`]),
    /// waiting up to `connections.readTimeout`. A review that would decode to more than the
    /// whole budget is denied (an AdmissionReview answer when its uid can be read, so the API
    /// server denies the object whatever the failurePolicy), one that finds no room in time is
    /// answered 503 (the failurePolicy applies): neither admits anything unchecked.
    async fn reserve_decoded(&self, body: &Bytes, taken: &mut Taken) -> Result<(), Response> {
        let decoded = decoded::estimate(body);
        if decoded > self.connections.max_buffered_bytes {
            let message = format!(
                "the AdmissionReview would take about {decoded} bytes once read ({} bytes of \
                 text, {} bytes per value), more than this webhook holds for all reviews at once \
                 (connections.maxBufferedBytes, {} bytes): no object of this shape is a machine, \
                 and it is denied",
                body.len(),
                decoded::BYTES_PER_NODE,
                self.connections.max_buffered_bytes
            );
            return Err(self.too_large(body, message));
        }
        let total = taken.bytes().saturating_add(decoded);
        // The body is read whole by now, so waiting holds no flow-control window, even over
        // HTTP/2.
        match tokio::time::timeout(
            self.connections.read_timeout,
            self.budget.reserve(taken, total),
        )
        .await
        {
            Ok(()) => Ok(()),
            Err(_) => Err(self.buffers_full()),
        }
    }

    /// How long a body may wait for room in the budget: up to `connections.readTimeout` over
    /// HTTP/1, where it holds only its own connection; not at all over HTTP/2 (how
    /// kube-apiserver sends its reviews), where a waiting body's unread bytes stay in the
    /// connection's flow-control window, so a few large bodies waiting for room would hold up
    /// every review multiplexed behind them. Answered 503 at once there, the handler's end
    /// resets the stream and gives its window back. (A zero timeout still takes room that is
    /// free: the reservation is tried once first.)
    fn room_wait(&self, version: axum::http::Version) -> Duration {
        if version == axum::http::Version::HTTP_2 {
            Duration::ZERO
        } else {
            self.connections.read_timeout
        }
    }

    /// The answer to a body that did not arrive within `connections.readTimeout`.
    fn read_timed_out(&self, read: usize, declared: Option<u64>) -> Response {
        let of = declared
            .map(|size| format!(" of {size}"))
            .unwrap_or_default();
        let message = format!(
            "the request body did not arrive within {:?} (connections.readTimeout): {read} bytes{of} read",
            self.connections.read_timeout
        );
        self.reviewer.reject("read_timeout", &message);
        closing((StatusCode::REQUEST_TIMEOUT, message + "\n").into_response())
    }

    /// The answer to a body that found no room in `connections.maxBufferedBytes`.
    fn buffers_full(&self) -> Response {
        let message = format!(
            "request bodies of {} bytes are being read or reviewed (connections.maxBufferedBytes) \
             and none was done within {:?}; try again",
            self.connections.max_buffered_bytes, self.connections.read_timeout
        );
        self.reviewer.reject("buffers_full", &message);
        closing((StatusCode::SERVICE_UNAVAILABLE, message + "\n").into_response())
    }

    /// Stops taking new work: `/readyz` fails from now on, so load balancers drain this pod.
    pub fn stop_accepting(&self) {
        self.accepting.store(false, Ordering::Release);
    }
}

/// Asks the client to close the connection after this answer (the rest of its body was not
/// read).
fn closing(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// How much of an oversized body is read to find the review's uid.
const UID_SCAN_BYTES: usize = 4096;

/// The uid of an AdmissionReview from its first bytes: kube-apiserver writes
/// `"request":{"uid":"..."` before the objects.
fn review_uid(start: &[u8]) -> Option<String> {
    let marker = br#""request":{"uid":""#;
    let at = start.windows(marker.len()).position(|w| w == marker)? + marker.len();
    let rest = &start[at..];
    let end = rest.iter().position(|&b| b == b'"')?;
    let uid = std::str::from_utf8(&rest[..end]).ok()?;
    let plain = !uid.is_empty()
        && uid.len() <= 128
        && uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    plain.then(|| uid.to_string())
}

/// Puts `x-nicpolicy-generation` on every answer that has none yet (404, 405, probes), so
/// each answer says which configuration was serving.
async fn generation_header(State(app): State<Arc<App>>, mut response: Response) -> Response {
    if !response.headers().contains_key(GENERATION_HEADER) {
        let generation = app.reviewer.policies().get().generation;
        if let Ok(value) = HeaderValue::from_str(&generation.to_string()) {
            response.headers_mut().insert(GENERATION_HEADER, value);
        }
    }
    response
}

/// The header naming the configuration generation that answered.
pub const GENERATION_HEADER: &str = "x-nicpolicy-generation";

fn respond(answer: Answer) -> Response {
    let status = StatusCode::from_u16(answer.http_status).unwrap_or(StatusCode::OK);
    let mut response = (status, Body::from(answer.body)).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Ok(value) = HeaderValue::from_str(&answer.generation.to_string()) {
        response.headers_mut().insert(GENERATION_HEADER, value);
    }
    response
}

impl crate::probes::Probed for App {
    fn readiness(&self) -> Result<String, String> {
        if !self.accepting.load(Ordering::Acquire) {
            return Err("shutting down".into());
        }
        if let Some(why) = self.reviewer.clusters().unready_reason() {
            return Err(why);
        }
        let served = self.reviewer.policies().get();
        if served.degraded() {
            // Ready: the other kinds are served, and the unavailable one is answered (denied,
            // saying why) rather than left to kube-apiserver's failurePolicy.
            let kinds: Vec<&str> = served.unavailable.keys().map(|k| k.as_str()).collect();
            return Ok(format!(
                "ok: generation {} (unavailable: {})",
                served.generation,
                kinds.join(", ")
            ));
        }
        Ok(format!("ok: generation {}", served.generation))
    }

    fn metrics(&self) -> String {
        self.reviewer.metrics().encode()
    }
}

async fn not_found(request: Request) -> Response {
    let paths: Vec<String> = ObjectKind::ALL
        .into_iter()
        .flat_map(|k| [Endpoint::Mutate.paths(k), Endpoint::Validate.paths(k)])
        .flatten()
        .collect();
    (
        StatusCode::NOT_FOUND,
        format!(
            "no endpoint {}; reviews go to {}; probes: {}\n",
            request.uri().path(),
            paths.join(", "),
            crate::probes::PATHS.join(", ")
        ),
    )
        .into_response()
}

/// A running server.
pub struct Server {
    handle: Handle<SocketAddr>,
    addr: SocketAddr,
    app: Arc<App>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    /// Serves `app` over TLS on `listener` (bind it first, port 0 for any). Must be called
    /// inside a Tokio runtime.
    pub fn start(
        app: Arc<App>,
        listener: std::net::TcpListener,
        tls: RustlsConfig,
    ) -> std::io::Result<Server> {
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let handle = Handle::new();
        let router = app.router();
        let limits = app.connections;
        let acceptor = RustlsAcceptor::new(tls)
            .handshake_timeout(limits.read_timeout)
            .acceptor(ConnectionLimit::new(
                limits.max,
                limits.max_per_client,
                limits.idle_timeout,
                app.reviewer.metrics(),
            ));
        let mut server = axum_server::from_tcp(listener)?
            .acceptor(acceptor)
            .handle(handle.clone());
        // What a connection holds before its body reaches the budget (connections.rs).
        server
            .http_builder()
            .http1()
            .header_read_timeout(limits.idle_timeout)
            .max_buf_size(connections::HTTP1_BUFFER_BYTES);
        server
            .http_builder()
            .http2()
            .initial_connection_window_size(connections::HTTP2_CONNECTION_WINDOW)
            .initial_stream_window_size(connections::HTTP2_STREAM_WINDOW)
            .max_concurrent_streams(connections::HTTP2_MAX_STREAMS);
        let task = tokio::spawn(async move { server.serve(router.into_make_service()).await });
        Ok(Server {
            handle,
            addr,
            app,
            task,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The application state.
    pub fn app(&self) -> &Arc<App> {
        &self.app
    }

    /// Stops accepting connections; reviews in flight finish (up to `grace`).
    pub fn shutdown(&self, grace: Duration) {
        self.app.stop_accepting();
        self.handle.graceful_shutdown(Some(grace));
    }

    /// Waits until the server has stopped.
    pub async fn wait(self) -> std::io::Result<()> {
        match self.task.await {
            Ok(result) => result,
            Err(err) => Err(std::io::Error::other(err)),
        }
    }
}

// The body handling of the routes, over plain HTTP on loopback (TLS is the acceptor's, tested
// with the whole server in tests/tests/webhook.rs).
#[cfg(all(test, feature = "builtin"))]
mod tests {
    use std::path::Path;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::clusters::StaticClusters;
    use crate::HostConfig;

    /// A served app with a 4 KiB body limit and a 300 ms read deadline, on loopback.
    async fn serving() -> SocketAddr {
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/cluster.yaml");
        let text = format!(
            "policies:\n  VCDMachine: [{{builtin: capvcd}}]\nmaxRequestBytes: 4Ki\n\
             connections: {{readTimeout: 300ms}}\nclusters: {{source: Static, files: [{}]}}\n",
            examples.display()
        );
        let config = ServeConfig::parse(Path::new("nicpolicy.yaml"), &text).expect("config");
        let host = Host::new(HostConfig {
            cache_dir: None,
            ..HostConfig::default()
        })
        .expect("engine");
        let clusters = Arc::new(StaticClusters::default());
        let app = Arc::new(App::new(host, config, clusters).expect("policies load"));
        let router = app.router();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binds");
        let addr = listener.local_addr().expect("address");
        tokio::spawn(async move { axum::serve(listener, router).await });
        addr
    }

    fn url(addr: SocketAddr, path: &str) -> String {
        format!("http://{addr}{path}")
    }

    #[tokio::test]
    async fn an_oversized_review_is_denied_to_its_uid_or_refused_without_one() {
        let addr = serving().await;
        let client = reqwest::Client::new();
        let path = Endpoint::Validate.path(ObjectKind::VcdMachine);
        // The uid comes first, as kube-apiserver writes it: the answer is a denial to it.
        let padding = "x".repeat(8 << 10);
        let body = format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"7f3c","object":{{"pad":"{padding}"}}}}}}"#
        );
        let response = client
            .post(url(addr, &path))
            .body(body)
            .send()
            .await
            .expect("answers");
        assert_eq!(response.status(), 200);
        let text = response.text().await.expect("body");
        let review: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(review["response"]["uid"], "7f3c");
        assert_eq!(review["response"]["allowed"], false);
        assert_eq!(review["response"]["status"]["code"], 413);
        let message = review["response"]["status"]["message"]
            .as_str()
            .unwrap_or("");
        assert!(
            message.contains("4096-byte limit (maxRequestBytes)"),
            "{message}"
        );
        // No uid to answer to: HTTP 413.
        let response = client
            .post(url(addr, &path))
            .body(padding)
            .send()
            .await
            .expect("answers");
        assert_eq!(response.status(), 413);
    }

    #[tokio::test]
    async fn a_stalled_body_is_cut_at_the_read_deadline_and_the_server_keeps_serving() {
        let addr = serving().await;
        let path = Endpoint::Validate.path(ObjectKind::VcdMachine);
        let mut stalled = tokio::net::TcpStream::connect(addr)
            .await
            .expect("connects");
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
             content-length: 1000\r\n\r\n{{\"apiVersion\":"
        );
        stalled.write_all(head.as_bytes()).await.expect("writes");
        let mut answer = Vec::new();
        let read =
            tokio::time::timeout(Duration::from_secs(5), stalled.read_to_end(&mut answer)).await;
        assert!(read.is_ok(), "the connection was not cut");
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("connections.readTimeout"), "{answer}");
        // Meanwhile the server answers everyone else.
        let ready = reqwest::get(url(addr, "/readyz")).await.expect("answers");
        assert_eq!(ready.status(), 200);
        assert!(ready
            .text()
            .await
            .unwrap_or_default()
            .starts_with("ok: generation 1"));
    }

    #[tokio::test]
    async fn a_body_that_is_no_review_gets_a_clear_400() {
        let addr = serving().await;
        let path = Endpoint::Validate.path(ObjectKind::VcdMachine);
        let response = reqwest::Client::new()
            .post(url(addr, &path))
            .body("kind: AdmissionReview")
            .send()
            .await
            .expect("answers");
        assert_eq!(response.status(), 400);
        let text = response.text().await.unwrap_or_default();
        assert!(
            text.contains("not JSON") || text.contains("AdmissionReview"),
            "{text}"
        );
    }
}
