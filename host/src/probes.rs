//! The probe and metrics endpoints every long-running command serves: `/healthz` (the process
//! answers), `/readyz` (it can do its work) and `/metrics` (OpenMetrics text). The webhook
//! serves them beside its review endpoints, the controller on its own port; each says what
//! ready means and what its metrics are through [`Probed`].

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// The content type of `/metrics`.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The paths [`routes`] serves, for messages that list them.
pub const PATHS: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// What a served command says about itself.
pub trait Probed: Send + Sync + 'static {
    /// `Ok(text)` when it can do its work (the body of a 200), `Err(why)` when not (of a 503).
    fn readiness(&self) -> Result<String, String>;

    /// Its metrics, OpenMetrics text, read now.
    fn metrics(&self) -> String;
}

/// `/healthz`, `/readyz` and `/metrics` for a router whose state is `Arc<S>`.
pub fn routes<S: Probed>() -> Router<Arc<S>> {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz::<S>))
        .route("/metrics", get(metrics::<S>))
}

async fn readyz<S: Probed>(State(probed): State<Arc<S>>) -> Response {
    match probed.readiness() {
        Ok(text) => (StatusCode::OK, with_newline(text)).into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, with_newline(why)).into_response(),
    }
}

async fn metrics<S: Probed>(State(probed): State<Arc<S>>) -> Response {
    let mut response = probed.metrics().into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(OPENMETRICS));
    response
}

fn with_newline(mut text: String) -> String {
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    struct Fake {
        ready: AtomicBool,
    }

    impl Probed for Fake {
        fn readiness(&self) -> Result<String, String> {
            if self.ready.load(Ordering::Acquire) {
                Ok("ok: generation 3".into())
            } else {
                Err("cluster cache not synced yet".into())
            }
        }

        fn metrics(&self) -> String {
            "# TYPE nicpolicy_up gauge\nnicpolicy_up 1\n# EOF\n".into()
        }
    }

    #[tokio::test]
    async fn probes_say_what_the_command_says_about_itself() {
        let fake = Arc::new(Fake {
            ready: AtomicBool::new(false),
        });
        let router = routes::<Fake>().with_state(fake.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binds");
        let addr = listener.local_addr().expect("address");
        let server = tokio::spawn(async move { axum::serve(listener, router).await });
        let get = |path: &str| {
            let url = format!("http://{addr}{path}");
            async move {
                let response = reqwest::get(url).await.expect("answers");
                let status = response.status().as_u16();
                let kind = response
                    .headers()
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                (status, kind, response.text().await.expect("body"))
            }
        };
        assert_eq!(get("/healthz").await.0, 200);
        let (status, _, body) = get("/readyz").await;
        assert_eq!(
            (status, body.as_str()),
            (503, "cluster cache not synced yet\n")
        );
        fake.ready.store(true, Ordering::Release);
        let (status, _, body) = get("/readyz").await;
        assert_eq!((status, body.as_str()), (200, "ok: generation 3\n"));
        let (status, kind, body) = get("/metrics").await;
        assert_eq!((status, kind.as_str()), (200, OPENMETRICS));
        assert!(body.ends_with("# EOF\n"), "{body}");
        server.abort();
    }
}
