//! `nicpolicy playground`: serves the playground page (paste manifests, see every machine's NICs
//! drawn) from the files embedded in the binary, or writes them for any static web server.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, Result};
use axum::http::{header, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use nicpolicy::playground;

use super::{runtime, usage, Failure};

/// What the page may load: its own files only (no CDN), and compiling WebAssembly.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; \
     style-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'";

/// Options of `nicpolicy playground`.
#[derive(clap::Args)]
pub struct PlaygroundArgs {
    /// Address to serve the page on (port 0 picks a free port; the URL is printed).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Write the page's files into DIR, for any static web server, instead of serving them.
    #[arg(long, value_name = "DIR", conflicts_with = "listen")]
    out: Option<PathBuf>,
}

/// Runs `nicpolicy playground`: writes the page, or serves it until Ctrl-C.
pub fn run(args: PlaygroundArgs) -> Result<u8, Failure> {
    if let Some(dir) = args.out {
        let written = playground::write_to(&dir).map_err(usage)?;
        super::out::println(&format!(
            "wrote the playground ({written} files) to {}; serve that directory over HTTP \
             (browsers do not run WebAssembly modules from file:// pages)",
            dir.display()
        ))?;
        return Ok(0);
    }
    // A port that cannot be had is a usage error; the server failing later is a run-time one.
    let listener = std::net::TcpListener::bind(args.listen)
        .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
        .with_context(|| format!("cannot listen on {}", args.listen))
        .map_err(usage)?;
    serve(listener).map_err(runtime)?;
    Ok(0)
}

fn serve(listener: std::net::TcpListener) -> Result<()> {
    let address = listener.local_addr()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        super::out::println(&format!(
            "Serving the nicpolicy playground on http://{address}/ (Ctrl-C to stop)"
        ))
        .map_err(|failure| failure.error)?;
        let app = axum::Router::new().fallback(serve_file);
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                // No signal handler means no graceful stop; the process still ends on the signal.
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
            .context("serving the playground")
    })
}

async fn serve_file(method: Method, uri: Uri) -> Response {
    if method != Method::GET && method != Method::HEAD {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, "GET, HEAD")],
        )
            .into_response();
    }
    match playground::file(uri.path()) {
        Some((bytes, content_type)) => (
            [
                (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
                (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
                (
                    header::CONTENT_SECURITY_POLICY,
                    HeaderValue::from_static(CONTENT_SECURITY_POLICY),
                ),
                (
                    header::X_CONTENT_TYPE_OPTIONS,
                    HeaderValue::from_static("nosniff"),
                ),
            ],
            bytes,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "not found\n").into_response(),
    }
}
