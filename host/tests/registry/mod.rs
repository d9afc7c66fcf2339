//! What the registry tests share: Debian's `docker-registry` (the distribution v2 server that
//! .ci/run installs) started on loopback with a configuration and storage of its own, plain
//! HTTP or HTTPS, anonymous or behind htpasswd basic auth; the `nicpolicy` binary run against it;
//! and `nicpolicy serve` started on a configuration.
// Each test crate uses a part of this module.
#![allow(dead_code)]

use std::io::Read as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

pub use crate::common::{assert_exit_saying, text};

/// A registry on 127.0.0.1, stopped and removed when dropped.
pub struct Registry {
    pub child: Child,
    pub dir: PathBuf,
    pub port: u16,
}

impl Registry {
    pub fn start(name: &str) -> Registry {
        Registry::start_with(name, None)
    }

    /// A registry serving HTTPS with `tls` (certificate, key) when given.
    pub fn start_with(name: &str, tls: Option<(&str, &str)>) -> Registry {
        Registry::start_full(name, tls, None)
    }

    /// A registry that lets in only `login` (user, password) through htpasswd basic auth.
    pub fn start_with_login(name: &str, login: (&str, &str)) -> Registry {
        Registry::start_full(name, None, Some(login))
    }

    fn start_full(name: &str, tls: Option<(&str, &str)>, login: Option<(&str, &str)>) -> Registry {
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
        let auth = match login {
            Some((user, password)) => {
                // The distribution server reads bcrypt entries only.
                let hash = bcrypt::hash(password, 4).expect("bcrypt");
                std::fs::write(dir.join("htpasswd"), format!("{user}:{hash}\n")).expect("htpasswd");
                format!(
                    "auth:\n  htpasswd: {{realm: nicpolicy-test, path: {}}}\n",
                    dir.join("htpasswd").display()
                )
            }
            None => String::new(),
        };
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog: {{level: warn}}\nstorage:\n  filesystem: {{rootdirectory: {}}}\n  delete: {{enabled: true}}\nhttp:\n  addr: 127.0.0.1:{port}\n{tls}{auth}",
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
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("registry.log")).unwrap_or_default()
    }

    /// Writes an artifact by hand (`PUT` of blobs and manifest), as another tool would.
    pub fn put_artifact(&self, repo: &str, tag: &str, config: (&str, &[u8]), layer: (&str, &[u8])) {
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

pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

pub fn nicpolicy(args: &[&str], dir: &Path) -> Output {
    nicpolicy_with(args, dir, &[])
}

/// `nicpolicy args` in `dir` with the environment variables `env` besides.
pub fn nicpolicy_with(args: &[&str], dir: &Path, env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nicpolicy"))
        .args(args)
        .current_dir(dir)
        // No credentials of the machine's user, and a cache of the test's own.
        .env("DOCKER_CONFIG", dir.join("no-docker-config"))
        .env("NICPOLICY_CACHE_DIR", dir.join("cache"))
        .envs(env.iter().copied())
        .output()
        .expect("nicpolicy runs")
}

/// `nicpolicy review` of the admission request `fixture` (in tests/fixtures/admission) with the
/// webhook configuration `config` and the clusters of examples/cluster.yaml.
pub fn review(dir: &Path, config: &Path, fixture: &str) -> Output {
    let request = workspace().join("tests/fixtures/admission").join(fixture);
    let clusters = workspace().join("examples/cluster.yaml");
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
        dir,
    )
}

/// `nicpolicy eval` of examples/`machine` in examples/cluster.yaml with the policy
/// `oci://reference` over plain HTTP, and `extra` arguments.
pub fn eval_by_reference(dir: &Path, machine: &str, reference: &str, extra: &[&str]) -> Output {
    let cluster = workspace().join("examples/cluster.yaml");
    let machine = workspace().join("examples").join(machine);
    let mut args = vec![
        "eval".to_string(),
        "--cluster".to_string(),
        cluster.to_string_lossy().into_owned(),
        "--machine".to_string(),
        machine.to_string_lossy().into_owned(),
        "--policy".to_string(),
        format!("oci://{reference}"),
        "--plain-http".to_string(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    nicpolicy(&args.iter().map(String::as_str).collect::<Vec<_>>(), dir)
}

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The built-in CAPVCD policy as a file in `dir`.
pub fn module(dir: &Path) -> (PathBuf, Vec<u8>) {
    export(dir, "capvcd")
}

/// The built-in policy `name` as the file `NAME.wasm` in `dir`, and its bytes.
pub fn export(dir: &Path, name: &str) -> (PathBuf, Vec<u8>) {
    let path = dir.join(format!("{name}.wasm"));
    let out = nicpolicy(&["export", name, "-o", &path.to_string_lossy()], dir);
    assert!(out.status.success(), "{}", text(&out));
    let mut bytes = Vec::new();
    std::fs::File::open(&path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .expect("module");
    (path, bytes)
}

/// `nicpolicy push` of the module at `path` to `reference` over plain HTTP; the immutable
/// reference it prints.
pub fn push(dir: &Path, path: &Path, reference: &str) -> String {
    let out = nicpolicy(
        &["push", &path.to_string_lossy(), reference, "--plain-http"],
        dir,
    );
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A registry holding the built-in CAPVCD module, pushed as `platform/capvcd:0.1.0`.
pub struct Pushed {
    pub registry: Registry,
    pub dir: PathBuf,
    pub bytes: Vec<u8>,
    pub tag: String,
    pub immutable: String,
}

impl Pushed {
    pub fn new(name: &str) -> Pushed {
        let registry = Registry::start(name);
        let dir = registry.dir.clone();
        let (path, bytes) = module(&dir);
        let tag = format!("{}/platform/capvcd:0.1.0", registry.host());
        let immutable = push(&dir, &path, &tag);
        Pushed {
            registry,
            dir,
            bytes,
            tag,
            immutable,
        }
    }
}

/// The role-based module pushed beside the CAPVCD one, unsigned; its immutable reference.
pub fn push_second(registry: &Registry, dir: &Path) -> String {
    let (second, _) = export(dir, "role-based");
    push(
        dir,
        &second,
        &format!("{}/platform/role-based:0.1.0", registry.host()),
    )
}

/// `nicpolicy serve` on loopback with a self-signed certificate, killed when dropped.
pub struct Serving {
    pub child: Child,
    pub client: reqwest::blocking::Client,
    pub base: String,
}

impl Serving {
    pub fn start(dir: &Path, config: &Path) -> Serving {
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

    pub fn log(dir: &Path) -> String {
        std::fs::read_to_string(dir.join("serve.log")).unwrap_or_default()
    }

    pub fn get(&self, path: &str) -> Option<String> {
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

    /// Waits up to 30 s until `check` holds; fails naming `what`, with the server's log.
    pub fn eventually(dir: &Path, what: &str, mut check: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !check() {
            assert!(
                Instant::now() < deadline,
                "{what}: not within 30 s\n{}",
                Self::log(dir)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until `/readyz` answers `text`.
    pub fn until_ready(&self, text: &str, dir: &Path) {
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
