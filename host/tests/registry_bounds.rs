//! Pulls from a registry that misbehaves on purpose, on loopback: one that never answers, one
//! whose manifest names 200 layers or a layer larger than a module may be, one that sends more
//! bytes than its manifest declares, one that streams 256 MiB as a manifest or an error body.
//! Each pull ends within its time bound, fetches nothing it need not, and is refused naming
//! what was wrong.

use std::io::{BufRead, BufReader, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nicpolicy::oci::{OciError, RegistryOptions, Timeouts, KUBEWARDEN_CONFIG, KUBEWARDEN_LAYER};
use sha2::{Digest, Sha256};

/// How the fake registry answers a blob request.
#[derive(Clone, Copy)]
enum Blobs {
    /// With `n` bytes of `\0asm` followed by zeros, whatever the manifest says.
    Send(usize),
}

/// What the fake registry does.
#[derive(Clone)]
enum Behaviour {
    /// Accepts connections and never answers.
    Silent,
    /// Answers `/v2/` and the manifest; blobs as `Blobs` says.
    Serve { manifest: String, blobs: Blobs },
    /// Answers the manifest request with `status` and 256 MiB of body, counting what it could
    /// send in `blob_requests` (bytes, here).
    Endless { status: u16 },
}

/// What [`Behaviour::Endless`] sends, unless the client stops reading.
const ENDLESS_BYTES: usize = 256 << 20;

/// A registry on loopback that behaves as told, counting the blob requests it got.
struct Fake {
    port: u16,
    blob_requests: Arc<AtomicUsize>,
}

impl Fake {
    fn start(behaviour: Behaviour) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().expect("an address").port();
        let blob_requests = Arc::new(AtomicUsize::new(0));
        let counted = blob_requests.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming().flatten() {
                match &behaviour {
                    // Kept open and never answered, until the test process ends.
                    Behaviour::Silent => held.push(stream),
                    Behaviour::Serve { manifest, blobs } => {
                        let (manifest, blobs, counted) =
                            (manifest.clone(), *blobs, counted.clone());
                        std::thread::spawn(move || serve(stream, &manifest, blobs, &counted));
                    }
                    Behaviour::Endless { status } => {
                        let (status, counted) = (*status, counted.clone());
                        std::thread::spawn(move || endless(stream, status, &counted));
                    }
                }
            }
        });
        Fake {
            port,
            blob_requests,
        }
    }

    fn reference(&self) -> String {
        format!("127.0.0.1:{}/platform/capvcd:0.1.0", self.port)
    }
}

/// The path of the connection's next request, its headers read; `None` once it is closed.
fn next_request(reader: &mut BufReader<TcpStream>) -> Option<String> {
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
        return None;
    }
    // The headers, up to the blank line.
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
    }
    Some(
        request_line
            .split_whitespace()
            .nth(1)
            .unwrap_or("/")
            .to_string(),
    )
}

/// Answers the requests of one connection.
fn serve(stream: TcpStream, manifest: &str, blobs: Blobs, blob_requests: &AtomicUsize) {
    let mut reader = BufReader::new(stream.try_clone().expect("a second handle"));
    let mut writer = stream;
    while let Some(path) = next_request(&mut reader) {
        let answered = if path.contains("/manifests/") {
            let digest = format!("sha256:{:x}", Sha256::digest(manifest.as_bytes()));
            write!(
                writer,
                "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\n\
                 Docker-Content-Digest: {digest}\r\nContent-Length: {}\r\n\r\n{manifest}",
                manifest.len()
            )
        } else if path.contains("/blobs/") {
            blob_requests.fetch_add(1, Ordering::SeqCst);
            let Blobs::Send(n) = blobs;
            let mut body = b"\0asm\x01\0\0\0".to_vec();
            body.resize(n.max(8), 0);
            write!(
                writer,
                "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .and_then(|()| writer.write_all(&body))
        } else {
            write!(writer, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{{}}")
        };
        if answered.is_err() {
            return;
        }
    }
}

/// Answers `/v2/`, then the manifest request with `status` and [`ENDLESS_BYTES`] of a JSON
/// string, a MiB at a time, adding what was written to `sent` until the client hangs up.
fn endless(stream: TcpStream, status: u16, sent: &AtomicUsize) {
    let mut reader = BufReader::new(stream.try_clone().expect("a second handle"));
    let mut writer = stream;
    while let Some(path) = next_request(&mut reader) {
        if !path.contains("/manifests/") {
            if write!(writer, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{{}}").is_err() {
                return;
            }
            continue;
        }
        let head = format!(
            "HTTP/1.1 {status} Answer\r\nContent-Type: application/json\r\nContent-Length: \
             {ENDLESS_BYTES}\r\n\r\n"
        );
        if writer.write_all(head.as_bytes()).is_err() {
            return;
        }
        let chunk = vec![b'x'; 1 << 20];
        for _ in 0..ENDLESS_BYTES / chunk.len() {
            if writer.write_all(&chunk).is_err() {
                return;
            }
            sent.fetch_add(chunk.len(), Ordering::SeqCst);
        }
        return;
    }
}

/// An image manifest of Kubewarden's layout with `layers` layers of `size` bytes each.
fn manifest(layers: usize, size: u64) -> String {
    let layer = format!(
        r#"{{"mediaType":"{KUBEWARDEN_LAYER}","digest":"sha256:{}","size":{size}}}"#,
        "a".repeat(64)
    );
    format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"{KUBEWARDEN_CONFIG}","digest":"sha256:{}","size":2}},"layers":[{}]}}"#,
        "b".repeat(64),
        vec![layer; layers].join(",")
    )
}

fn options(timeouts: Timeouts) -> RegistryOptions {
    // Anonymous, whatever the machine's user has logged in to. Written once: the tests run at
    // once, and a rewrite truncates the file under another test's reading of it.
    static ANONYMOUS: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    let anonymous = ANONYMOUS.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("registry-bounds");
        std::fs::create_dir_all(&dir).expect("dir");
        let anonymous = dir.join("anonymous.json");
        std::fs::write(&anonymous, "{\"auths\": {}}").expect("config");
        anonymous
    });
    RegistryOptions {
        plain_http: true,
        docker_config: Some(anonymous.clone()),
        timeouts,
        ..RegistryOptions::default()
    }
}

/// Whether `err` is an outage, which a stored copy may stand in for.
fn is_outage(err: &OciError) -> bool {
    matches!(
        err,
        OciError::Registry {
            unreachable: true,
            ..
        }
    )
}

/// What an [`Behaviour::Endless`] registry could send before the connection closed: the bound,
/// and what the sockets' buffers took, never the 256 MiB.
fn assert_read_no_further(fake: &Fake) {
    let sent = fake.blob_requests.load(Ordering::SeqCst);
    assert!(sent < 16 << 20, "{sent} bytes sent: read on past the bound");
}

fn pull(reference: &str, options: &RegistryOptions) -> Result<nicpolicy::oci::Pulled, OciError> {
    nicpolicy::oci::blocking(|| nicpolicy::oci::pull(reference, options))
}

#[test]
fn a_registry_that_never_answers_ends_the_pull_at_its_deadline() {
    let fake = Fake::start(Behaviour::Silent);
    let timeouts = Timeouts {
        connect: Duration::from_secs(1),
        read: Duration::from_secs(30),
        pull: Duration::from_secs(2),
    };
    let started = Instant::now();
    let err = pull(&fake.reference(), &options(timeouts)).expect_err("no answer");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(
        is_outage(&err),
        "an outage, which a stored copy may stand in for: {err:?}"
    );
    assert!(err.to_string().contains("not finished within 2 s"), "{err}");
}

#[test]
fn a_manifest_of_many_layers_is_refused_before_any_layer_is_fetched() {
    let fake = Fake::start(Behaviour::Serve {
        manifest: manifest(200, 1000),
        blobs: Blobs::Send(1000),
    });
    let err = pull(&fake.reference(), &options(Timeouts::default())).expect_err("200 layers");
    assert!(err.to_string().contains("has 200 layers"), "{err}");
    assert_eq!(fake.blob_requests.load(Ordering::SeqCst), 0);
}

#[test]
fn a_layer_declared_larger_than_a_module_may_be_is_refused_before_it_is_fetched() {
    let fake = Fake::start(Behaviour::Serve {
        manifest: manifest(1, 256 << 20),
        blobs: Blobs::Send(1000),
    });
    let err = pull(&fake.reference(), &options(Timeouts::default())).expect_err("too large");
    assert!(err.to_string().contains("more than the"), "{err}");
    assert_eq!(fake.blob_requests.load(Ordering::SeqCst), 0);
}

#[test]
fn a_layer_longer_than_its_manifest_says_is_cut_off() {
    // 1,000 bytes declared, 32 MiB sent.
    let fake = Fake::start(Behaviour::Serve {
        manifest: manifest(1, 1000),
        blobs: Blobs::Send(32 << 20),
    });
    let err = pull(&fake.reference(), &options(Timeouts::default())).expect_err("too long");
    assert!(
        err.to_string()
            .contains("more than the 1000 bytes the manifest says"),
        "{err}"
    );
    assert!(
        !is_outage(&err),
        "a registry that lies is no outage: {err:?}"
    );
}

#[test]
fn a_layer_shorter_than_its_manifest_says_is_refused() {
    let fake = Fake::start(Behaviour::Serve {
        manifest: manifest(1, 1000),
        blobs: Blobs::Send(500),
    });
    let err = pull(&fake.reference(), &options(Timeouts::default())).expect_err("too short");
    assert!(err.to_string().contains("sent 500 bytes"), "{err}");
}

#[test]
fn a_manifest_past_its_bound_is_refused_without_reading_the_rest() {
    let fake = Fake::start(Behaviour::Endless { status: 200 });
    let started = Instant::now();
    let err = pull(&fake.reference(), &options(Timeouts::default())).expect_err("too large");
    assert!(
        err.to_string().contains(&format!(
            "is over {} bytes",
            nicpolicy::oci::manifest::MAX_MANIFEST_BYTES
        )),
        "{err}"
    );
    assert!(
        !is_outage(&err),
        "a registry that sends too much is no outage: {err:?}"
    );
    assert_read_no_further(&fake);
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn an_error_answer_is_read_to_its_bound_only() {
    let fake = Fake::start(Behaviour::Endless { status: 404 });
    let err = pull(&fake.reference(), &options(Timeouts::default())).expect_err("not found");
    let text = err.to_string();
    assert!(text.contains("404"), "{text}");
    assert!(
        text.len() < 2 * nicpolicy::oci::manifest::MAX_ERROR_BODY_BYTES,
        "{} bytes of error",
        text.len()
    );
    assert_read_no_further(&fake);
}
