//! `nicpolicy push` and `pull` against a real registry: Debian's `docker-registry` (the
//! distribution v2 server that .ci/run installs) started on loopback with a configuration and
//! storage of its own. Both artifact layouts, tags and digests, and what is refused.

use std::io::Read as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// A registry on 127.0.0.1, stopped and removed when dropped.
struct Registry {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl Registry {
    fn start(name: &str) -> Registry {
        Registry::start_with(name, None)
    }

    /// A registry serving HTTPS with `tls` (certificate, key) when given.
    fn start_with(name: &str, tls: Option<(&str, &str)>) -> Registry {
        let binary = ["/usr/bin/docker-registry", "/usr/sbin/docker-registry"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .expect("docker-registry is installed (.ci/run installs Debian's docker-registry)");
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("registry-{name}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("registry dir");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let config = dir.join("config.yml");
        let tls = match tls {
            Some((cert, key)) => {
                std::fs::write(dir.join("server.pem"), cert).expect("certificate");
                std::fs::write(dir.join("server.key"), key).expect("key");
                format!(
                    "  tls: {{certificate: {}, key: {}}}\n",
                    dir.join("server.pem").display(),
                    dir.join("server.key").display()
                )
            }
            None => String::new(),
        };
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog: {{level: warn}}\nstorage:\n  filesystem: {{rootdirectory: {}}}\n  delete: {{enabled: true}}\nhttp:\n  addr: 127.0.0.1:{port}\n{tls}",
                dir.join("data").display()
            ),
        )
        .expect("registry config");
        let log = std::fs::File::create(dir.join("registry.log")).expect("log");
        let child = Command::new(binary)
            .args(["serve", &config.to_string_lossy()])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("docker-registry starts");
        let registry = Registry { child, dir, port };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the registry did not listen: {}",
                registry.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        registry
    }

    /// Stops the registry (its storage stays until drop): an outage.
    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("registry.log")).unwrap_or_default()
    }

    /// Writes an artifact by hand (`PUT` of blobs and manifest), as another tool would.
    fn put_artifact(&self, repo: &str, tag: &str, config: (&str, &[u8]), layer: (&str, &[u8])) {
        let client = reqwest::blocking::Client::new();
        for data in [config.1, layer.1] {
            let digest = digest(data);
            let start = client
                .post(format!("http://{}/v2/{repo}/blobs/uploads/", self.host()))
                .send()
                .expect("upload starts");
            assert_eq!(start.status(), 202, "{}", self.log());
            let location = start.headers()["location"]
                .to_str()
                .expect("location")
                .to_string();
            let url = if location.starts_with("http") {
                location
            } else {
                format!("http://{}{location}", self.host())
            };
            let separator = if url.contains('?') { '&' } else { '?' };
            let done = client
                .put(format!("{url}{separator}digest={digest}"))
                .body(data.to_vec())
                .send()
                .expect("upload ends");
            assert_eq!(done.status(), 201, "{}", self.log());
        }
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": config.0, "digest": digest(config.1), "size": config.1.len()},
            "layers": [{"mediaType": layer.0, "digest": digest(layer.1), "size": layer.1.len()}],
        });
        let put = client
            .put(format!("http://{}/v2/{repo}/manifests/{tag}", self.host()))
            .header("content-type", "application/vnd.oci.image.manifest.v1+json")
            .body(manifest.to_string())
            .send()
            .expect("manifest put");
        assert_eq!(put.status(), 201, "{}", self.log());
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn digest(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

fn nicpolicy(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nicpolicy"))
        .args(args)
        .current_dir(dir)
        // No credentials of the machine's user, and a cache of the test's own.
        .env("DOCKER_CONFIG", dir.join("no-docker-config"))
        .env("NICPOLICY_CACHE_DIR", dir.join("cache"))
        .output()
        .expect("nicpolicy runs")
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn text(output: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The built-in CAPVCD policy as a file in `dir`.
fn module(dir: &Path) -> (PathBuf, Vec<u8>) {
    let path = dir.join("capvcd.wasm");
    let out = nicpolicy(&["export", "capvcd", "-o", &path.to_string_lossy()], dir);
    assert!(out.status.success(), "{}", text(&out));
    let mut bytes = Vec::new();
    std::fs::File::open(&path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .expect("module");
    (path, bytes)
}

#[test]
fn push_prints_the_immutable_reference_and_pull_reads_it_by_tag_and_by_digest() {
    let registry = Registry::start("roundtrip");
    let dir = registry.dir.clone();
    let (path, bytes) = module(&dir);
    let reference = format!("{}/platform/capvcd:0.1.0", registry.host());
    let out = nicpolicy(
        &[
            "push",
            &path.to_string_lossy(),
            &format!("oci://{reference}"),
            "--plain-http",
        ],
        &dir,
    );
    assert!(out.status.success(), "{}", text(&out));
    let immutable = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let prefix = format!("{}/platform/capvcd@sha256:", registry.host());
    assert!(immutable.starts_with(&prefix), "{immutable}");

    // The manifest is Kubewarden's layout, with the module's metadata as annotations.
    let manifest: serde_json::Value = reqwest::blocking::Client::new()
        .get(format!(
            "http://{}/v2/platform/capvcd/manifests/0.1.0",
            registry.host()
        ))
        .header("accept", "application/vnd.oci.image.manifest.v1+json")
        .send()
        .and_then(|r| r.json())
        .expect("manifest");
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.wasm.config.v1+json"
    );
    assert_eq!(
        manifest["layers"][0]["mediaType"],
        "application/vnd.wasm.content.layer.v1+wasm"
    );
    assert_eq!(manifest["layers"][0]["digest"], digest(&bytes));
    assert_eq!(
        manifest["annotations"]["org.opencontainers.image.title"],
        "nicpolicy-capvcd"
    );
    // The immutable reference is the manifest's digest as the registry serves it.
    let served = reqwest::blocking::Client::new()
        .get(format!(
            "http://{}/v2/platform/capvcd/manifests/0.1.0",
            registry.host()
        ))
        .header("accept", "application/vnd.oci.image.manifest.v1+json")
        .send()
        .expect("manifest");
    let served_digest = served.headers()["docker-content-digest"]
        .to_str()
        .expect("digest header")
        .to_string();
    assert!(
        immutable.ends_with(&served_digest),
        "{immutable} vs {served_digest}"
    );

    for (source, file) in [
        (reference.as_str(), "by-tag.wasm"),
        (immutable.as_str(), "by-digest.wasm"),
    ] {
        let out = nicpolicy(&["pull", source, "-o", file, "--plain-http"], &dir);
        assert!(out.status.success(), "{}", text(&out));
        let pulled = std::fs::read(dir.join(file)).expect("pulled file");
        assert_eq!(pulled, bytes, "{source}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            said.contains(&immutable) && said.contains("Kubewarden layout"),
            "{said}"
        );
    }
}

#[test]
fn the_cncf_layout_is_read_and_what_is_no_wasm_policy_is_refused() {
    let registry = Registry::start("layouts");
    let dir = registry.dir.clone();
    let (_, bytes) = module(&dir);
    let config = br#"{"architecture":"wasm","os":"wasip1","layerDigests":[]}"#;
    registry.put_artifact(
        "platform/capvcd-cncf",
        "1",
        ("application/vnd.wasm.config.v0+json", config),
        ("application/wasm", &bytes),
    );
    let reference = format!("{}/platform/capvcd-cncf:1", registry.host());
    let out = nicpolicy(
        &["pull", &reference, "-o", "cncf.wasm", "--plain-http"],
        &dir,
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(std::fs::read(dir.join("cncf.wasm")).expect("pulled"), bytes);
    assert!(String::from_utf8_lossy(&out.stderr).contains("CNCF Wasm layout"));

    // A Wasm layer type holding something else.
    registry.put_artifact(
        "platform/not-wasm",
        "1",
        ("application/vnd.wasm.config.v1+json", b"{}"),
        (
            "application/vnd.wasm.content.layer.v1+wasm",
            b"#!/bin/sh\necho hi\n",
        ),
    );
    let out = nicpolicy(
        &[
            "pull",
            &format!("{}/platform/not-wasm:1", registry.host()),
            "--plain-http",
        ],
        &dir,
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a WebAssembly module"),
        "{}",
        text(&out)
    );
    assert!(!dir.join("not-wasm.wasm").exists(), "nothing is written");

    // A container image is not a policy.
    registry.put_artifact(
        "platform/image",
        "1",
        ("application/vnd.oci.image.config.v1+json", b"{}"),
        ("application/vnd.oci.image.layer.v1.tar+gzip", b"\x1f\x8b"),
    );
    let out = nicpolicy(
        &[
            "pull",
            &format!("{}/platform/image:1", registry.host()),
            "--plain-http",
        ],
        &dir,
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("platform/image:1"), "{said}");

    // An unknown tag names the reference and what the registry said.
    let out = nicpolicy(
        &[
            "pull",
            &format!("{}/platform/capvcd-cncf:2", registry.host()),
            "--plain-http",
        ],
        &dir,
    );
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("capvcd-cncf:2"));
}

#[test]
fn plain_http_is_refused_for_a_registry_elsewhere_and_bad_input_is_named() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("oci-refusals");
    std::fs::create_dir_all(&dir).expect("dir");
    let (path, _) = module(&dir);
    let out = nicpolicy(
        &[
            "push",
            &path.to_string_lossy(),
            "registry.example.net/platform/capvcd:1",
            "--plain-http",
        ],
        &dir,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("plain HTTP is only for a registry on loopback"),
        "{}",
        text(&out)
    );
    let out = nicpolicy(&["pull", "Not A Reference!", "--plain-http"], &dir);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an OCI reference"));
    std::fs::write(dir.join("notes.txt"), "not a module").expect("write");
    let out = nicpolicy(
        &["push", "notes.txt", "127.0.0.1:1/p/x:1", "--plain-http"],
        &dir,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

/// A registry holding the built-in CAPVCD module, pushed as `platform/capvcd:0.1.0`.
struct Pushed {
    registry: Registry,
    dir: PathBuf,
    bytes: Vec<u8>,
    tag: String,
    immutable: String,
}

impl Pushed {
    fn new(name: &str) -> Pushed {
        let registry = Registry::start(name);
        let dir = registry.dir.clone();
        let (path, bytes) = module(&dir);
        let tag = format!("{}/platform/capvcd:0.1.0", registry.host());
        let out = nicpolicy(
            &["push", &path.to_string_lossy(), &tag, "--plain-http"],
            &dir,
        );
        assert!(out.status.success(), "{}", text(&out));
        let immutable = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Pushed {
            registry,
            dir,
            bytes,
            tag,
            immutable,
        }
    }
}

#[test]
fn a_policy_by_reference_is_evaluated_and_served_from_the_store_while_the_registry_is_down() {
    let Pushed {
        mut registry,
        dir,
        bytes,
        tag,
        immutable,
    } = Pushed::new("served");
    let cluster = workspace().join("examples/cluster.yaml");
    let machine = workspace().join("examples/invalid-machine.yaml");
    let eval = |reference: &str| {
        nicpolicy(
            &[
                "eval",
                "--cluster",
                &cluster.to_string_lossy(),
                "--machine",
                &machine.to_string_lossy(),
                "--policy",
                &format!("oci://{reference}"),
                "--plain-http",
                "-o",
                "json",
            ],
            &dir,
        )
    };
    let builtin = nicpolicy(
        &[
            "eval",
            "--cluster",
            &cluster.to_string_lossy(),
            "--machine",
            &machine.to_string_lossy(),
            "-o",
            "json",
        ],
        &dir,
    );
    assert_eq!(builtin.status.code(), Some(1), "{}", text(&builtin));
    // By digest and by tag, the module decides as the built-in one it was exported from.
    for reference in [immutable.as_str(), tag.as_str()] {
        let out = eval(reference);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert_eq!(out.stdout, builtin.stdout, "{reference}");
    }
    // The store keeps the module under its digest, in a directory of the user's own.
    let blob = dir
        .join("cache/oci/blobs/sha256")
        .join(format!("{:x}", Sha256::digest(&bytes)));
    assert_eq!(std::fs::read(&blob).expect("stored module"), bytes);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join("cache/oci"))
            .expect("store")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    // inspect takes a reference too.
    let out = nicpolicy(&["inspect", &format!("oci://{tag}"), "--plain-http"], &dir);
    assert!(out.status.success(), "{}", text(&out));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains(&immutable), "{shown}");
    assert!(
        shown.contains(&format!("{:x}", Sha256::digest(&bytes))),
        "{shown}"
    );

    registry.stop();
    // A digest is served from the store without asking; a tag, with a warning naming the
    // digest served.
    let out = eval(&immutable);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(out.stdout, builtin.stdout);
    let out = eval(&tag);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("the registry cannot be reached") && said.contains(&immutable),
        "{said}"
    );
    // A stored module whose bytes were changed is not used.
    std::fs::write(&blob, b"\0asm\x01\0\0\0").expect("tamper");
    let out = eval(&immutable);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&immutable),
        "{}",
        text(&out)
    );
    // Nothing stored and nothing reachable: the error names the reference.
    let out = eval(&format!("{}/platform/other:1", registry.host()));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("platform/other:1"));
}

#[test]
fn the_webhook_configuration_serves_a_policy_by_digest_through_an_outage() {
    let Pushed {
        mut registry,
        dir,
        tag,
        immutable,
        ..
    } = Pushed::new("configured");
    let write = |name: &str, reference: &str| {
        let config = dir.join(name);
        std::fs::write(
            &config,
            format!(
                "policies:\n  VCDMachine:\n    - oci: {reference}\n\
                 registry: {{plainHttp: true, requireDigest: true}}\n"
            ),
        )
        .expect("config");
        config
    };
    let by_digest = write("by-digest.yaml", &immutable);
    let request = workspace().join("tests/fixtures/admission/vcdmachine-create-invalid.json");
    let clusters = workspace().join("examples/cluster.yaml");
    let review = |config: &Path| {
        nicpolicy(
            &[
                "review",
                "--request",
                &request.to_string_lossy(),
                "--config",
                &config.to_string_lossy(),
                "--clusters",
                &clusters.to_string_lossy(),
            ],
            &dir,
        )
    };
    let builtin = nicpolicy(
        &[
            "review",
            "--request",
            &request.to_string_lossy(),
            "--clusters",
            &clusters.to_string_lossy(),
        ],
        &dir,
    );
    assert_eq!(builtin.status.code(), Some(1), "{}", text(&builtin));
    let out = review(&by_digest);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(out.stdout, builtin.stdout);
    // A tag is refused by requireDigest, naming the field.
    let out = review(&write("by-tag.yaml", &tag));
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("policies.VCDMachine[0].oci") && said.contains("requireDigest"),
        "{said}"
    );
    // The registry is down: the webhook still starts, from the store.
    registry.stop();
    let out = review(&by_digest);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(out.stdout, builtin.stdout);
}

/// `nicpolicy serve` on loopback with a self-signed certificate, killed when dropped.
struct Serving {
    child: Child,
    client: reqwest::blocking::Client,
    base: String,
}

impl Serving {
    fn start(dir: &Path, config: &Path) -> Serving {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let ca = dir.join("serve-ca.crt");
        let _ = std::fs::remove_file(&ca);
        let clusters = workspace().join("examples/cluster.yaml");
        let log = std::fs::File::create(dir.join("serve.log")).expect("log");
        let child = Command::new(env!("CARGO_BIN_EXE_nicpolicy"))
            .args(["serve", "--config"])
            .arg(config)
            .args([
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--tls-self-signed",
            ])
            .arg("--ca-bundle")
            .arg(&ca)
            .arg("--clusters")
            .arg(&clusters)
            .current_dir(dir)
            .env("DOCKER_CONFIG", dir.join("no-docker-config"))
            .env("NICPOLICY_CACHE_DIR", dir.join("cache"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("serve starts");
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ca.exists() {
            assert!(
                Instant::now() < deadline,
                "serve wrote no CA: {}",
                Self::log(dir)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let pem = std::fs::read(&ca).expect("CA");
        let client = reqwest::blocking::Client::builder()
            .use_rustls_tls()
            .add_root_certificate(reqwest::Certificate::from_pem(&pem).expect("CA"))
            .timeout(Duration::from_secs(10))
            .build()
            .expect("client");
        Serving {
            child,
            client,
            base: format!("https://127.0.0.1:{port}"),
        }
    }

    fn log(dir: &Path) -> String {
        std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default()
    }

    fn get(&self, path: &str) -> Option<String> {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .ok()?;
        response
            .status()
            .is_success()
            .then(|| response.text().ok())
            .flatten()
    }

    /// Waits until `/readyz` answers `text`.
    fn until_ready(&self, text: &str, dir: &Path) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if self.get("/readyz").is_some_and(|body| body.trim() == text) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "/readyz never said {text:?}; now {:?}\n{}",
                self.get("/readyz"),
                Self::log(dir)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_webhook_reloads_to_a_new_digest_and_keeps_serving_when_a_pull_fails() {
    let Pushed {
        mut registry,
        dir,
        immutable,
        ..
    } = Pushed::new("reload");
    // A second module under another tag: the role-based policy.
    let second = dir.join("role-based.wasm");
    let out = nicpolicy(
        &["export", "role-based", "-o", &second.to_string_lossy()],
        &dir,
    );
    assert!(out.status.success(), "{}", text(&out));
    let out = nicpolicy(
        &[
            "push",
            &second.to_string_lossy(),
            &format!("{}/platform/role-based:0.1.0", registry.host()),
            "--plain-http",
        ],
        &dir,
    );
    assert!(out.status.success(), "{}", text(&out));
    let role_based = String::from_utf8_lossy(&out.stdout).trim().to_string();

    let config = dir.join("nicpolicy.yaml");
    let write = |reference: &str| {
        // Written beside and renamed over, as a ConfigMap update swaps the file.
        let next = dir.join("nicpolicy.yaml.next");
        std::fs::write(
            &next,
            format!(
                "policies:\n  VCDMachine:\n    - oci: {reference}\n\
                 registry: {{plainHttp: true, requireDigest: true}}\n\
                 reload: {{interval: 200ms}}\n"
            ),
        )
        .expect("config");
        std::fs::rename(&next, &config).expect("swap");
    };
    write(&immutable);
    let serving = Serving::start(&dir, &config);
    serving.until_ready("ok: generation 1", &dir);

    // A new digest in the configuration: pulled and swapped in.
    write(&role_based);
    serving.until_ready("ok: generation 2", &dir);
    assert!(
        Serving::log(&dir).contains(&role_based),
        "the pull is logged with its digest:\n{}",
        Serving::log(&dir)
    );

    // The registry is down and the next digest was never pulled: the reload fails, counted,
    // and generation 2 keeps serving.
    registry.stop();
    write(&format!(
        "{}/platform/role-based@sha256:{}",
        registry.host(),
        "0".repeat(64)
    ));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let failures = serving
            .get("/metrics")
            .and_then(|text| {
                text.lines()
                    .find(|l| l.starts_with("nicpolicy_policy_load_failures_total"))
                    .and_then(|l| l.split_whitespace().last())
                    .and_then(|n| n.parse::<f64>().ok())
            })
            .unwrap_or(0.0);
        if failures >= 1.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no load failure counted\n{}",
            Serving::log(&dir)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    serving.until_ready("ok: generation 2", &dir);
}

#[test]
fn the_kustomize_example_configuration_is_valid_and_names_digests() {
    let path = workspace().join("examples/kustomize/registry-module/nicpolicy.yaml");
    let config =
        nicpolicy::served::config::ServeConfig::read(&path).unwrap_or_else(|err| panic!("{err}"));
    assert!(config.registry.require_digest);
    assert_eq!(
        config.registry.config.as_deref(),
        Some(Path::new("/etc/nicpolicy-registry/config.json"))
    );
    let references: Vec<&nicpolicy::PolicySource> = config
        .policies
        .values()
        .flatten()
        .map(|policy| &policy.spec.source)
        .filter(|source| matches!(source, nicpolicy::PolicySource::Oci(_)))
        .collect();
    assert_eq!(references.len(), 2, "{references:?}");
}

#[test]
fn a_private_registry_is_trusted_through_its_ca_for_every_registry_or_for_it_alone() {
    let tls = nicpolicy::webhook::tls::SelfSigned::generate(&[]).expect("a CA and a certificate");
    let registry = Registry::start_with("tls", Some((&tls.cert_pem, &tls.key_pem)));
    let dir = registry.dir.clone();
    std::fs::write(dir.join("ca.pem"), &tls.ca_pem).expect("CA");
    let (path, bytes) = module(&dir);
    let reference = format!("{}/platform/capvcd:0.1.0", registry.host());
    let push = |extra: &[&str]| {
        let mut args = vec!["push", path.to_str().expect("path"), reference.as_str()];
        args.extend_from_slice(extra);
        nicpolicy(&args, &dir)
    };
    // Without the CA the certificate is not trusted, and the error says where it failed.
    let out = push(&[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&reference),
        "{}",
        text(&out)
    );
    // A CA for another registry does not help; for this one (or every one) it does.
    let other = "mirror.internal:5000=ca.pem".to_string();
    let out = push(&["--registry-ca", &other]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let own = format!("{}=ca.pem", registry.host());
    let out = push(&["--registry-ca", &own]);
    assert!(out.status.success(), "{}", text(&out));
    let out = nicpolicy(
        &[
            "pull",
            &reference,
            "-o",
            "pulled.wasm",
            "--registry-ca",
            "ca.pem",
        ],
        &dir,
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        std::fs::read(dir.join("pulled.wasm")).expect("pulled"),
        bytes
    );
}

#[test]
fn copy_mirrors_a_module_into_another_registry_with_the_same_layer() {
    let Pushed {
        mut registry,
        dir,
        bytes,
        immutable,
        ..
    } = Pushed::new("copy-from");
    let mirror = Registry::start("copy-to");
    let target = format!("{}/mirror/capvcd:0.1.0", mirror.host());
    let out = nicpolicy(&["copy", &immutable, &target, "--plain-http"], &dir);
    assert!(out.status.success(), "{}", text(&out));
    let copied = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        copied.starts_with(&format!("{}/mirror/capvcd@sha256:", mirror.host())),
        "{copied}"
    );
    // The same module bytes (so a sha256 pin holds for either copy) and the same manifest.
    assert_eq!(
        copied.rsplit('@').next(),
        immutable.rsplit('@').next(),
        "the manifest is written alike"
    );
    // The source is gone: the mirror alone serves it.
    registry.stop();
    let out = nicpolicy(
        &["pull", &copied, "-o", "mirrored.wasm", "--plain-http"],
        &dir,
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        std::fs::read(dir.join("mirrored.wasm")).expect("pulled"),
        bytes
    );
}
