//! `nicpolicy serve` deployed as the project ships it: the configuration from config/nicpolicy/,
//! the webhook configurations from config/install.yaml (rendered from charts/nicpolicy; only
//! `clientConfig` swapped for a loopback URL and the CA bundle `--tls-self-signed` wrote), and
//! the identity of the shipped ServiceAccount bound by the shipped ClusterRole of
//! config/install.yaml, so a rule missing there fails the suite.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

use crate::binaries::{binaries, workspace};
use crate::control_plane::{free_port, kubeconfig, ControlPlane};
use crate::kubectl::Kubectl;
use crate::process::Process;

/// How long nicpolicy may take to serve with synced caches.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long kube-apiserver may take to act on a changed webhook configuration.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);

/// A `nicpolicy serve` process and, once [`Webhook::register`]ed, its webhook configurations.
pub struct Webhook {
    /// The configuration directory (the ConfigMap's files): nicpolicy.yaml, inventory.yaml,
    /// policy.wasm.
    pub config_dir: PathBuf,
    /// The HTTPS port on 127.0.0.1.
    pub port: u16,
    /// The CA bundle `--tls-self-signed` wrote.
    pub ca_file: PathBuf,
    process: Option<Process>,
    admin: Kubectl,
    kubeconfig: PathBuf,
    registered: bool,
    http: Option<reqwest::Client>,
    /// The CAPVCD version the control plane's CRDs store (its probe is written at it).
    capvcd_version: &'static str,
    /// `--log-level` of the process.
    log_level: &'static str,
    /// More arguments of `nicpolicy serve`.
    extra_args: Vec<String>,
}

/// Writes the shipped configuration directory for a webhook named `name`: config/nicpolicy's
/// files, as the ConfigMap mounts them (the policies are built in).
pub fn shipped_config(plane: &ControlPlane, name: &str) -> PathBuf {
    let dir = plane.dir.join(format!("webhook-{name}"));
    std::fs::create_dir_all(&dir).expect("webhook directory");
    for file in ["nicpolicy.yaml", "inventory.yaml"] {
        std::fs::copy(
            workspace().join("config/nicpolicy").join(file),
            dir.join(file),
        )
        .expect("copy the shipped configuration");
    }
    dir
}

/// The objects of the multi-document YAML `file` (relative to the workspace) whose kind is one
/// of `kinds`.
pub fn shipped_objects(file: &str, kinds: &[&str]) -> Vec<Value> {
    let path = workspace().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{file}: {err}"));
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|document| {
            let object: Value = serde::Deserialize::deserialize(document)
                .unwrap_or_else(|err| panic!("{file} parses: {err}"));
            object
        })
        .filter(|object| {
            object["kind"]
                .as_str()
                .is_some_and(|kind| kinds.contains(&kind))
        })
        .collect()
}

/// The ServiceAccounts and RBAC objects of `file` (a rendered install.yaml), written as one
/// List into the control plane's directory, to apply as its kustomization would.
pub fn shipped_rbac(plane: &ControlPlane, file: &str) -> PathBuf {
    let items = shipped_objects(
        file,
        &[
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
        ],
    );
    assert!(!items.is_empty(), "{file} has no RBAC objects");
    let path = plane
        .dir
        .join(format!("{}-rbac.json", file.replace('/', "-")));
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    std::fs::write(&path, list.to_string()).expect("write RBAC list");
    path
}

/// Edits `file` in a configuration directory: replaces `from` with `to`, which must occur.
pub fn edit_config(dir: &Path, file: &str, from: &str, to: &str) {
    let path = dir.join(file);
    let text = std::fs::read_to_string(&path).expect("config file");
    assert!(text.contains(from), "{} has no {from:?}", path.display());
    std::fs::write(&path, text.replace(from, to)).expect("write config file");
}

/// A kubeconfig with a token of the shipped ServiceAccount (config/install.yaml's RBAC applied
/// into config/namespace.yaml's namespace, as kustomize does), made once per control plane.
pub fn service_account_kubeconfig(plane: &ControlPlane) -> PathBuf {
    service_account_token(
        plane,
        "nicpolicy-webhook",
        &[
            workspace().join("config/namespace.yaml"),
            shipped_rbac(plane, "config/install.yaml"),
        ],
    )
}

/// A kubeconfig with a token of ServiceAccount `name` in nicpolicy-system, after applying
/// `manifests` there (the ServiceAccount and its RBAC), made once per control plane. The token
/// comes from TokenRequest, as the kubelet gets a pod's projected token.
pub fn service_account_token(plane: &ControlPlane, name: &str, manifests: &[PathBuf]) -> PathBuf {
    let path = plane.dir.join(format!("{name}.kubeconfig"));
    if path.is_file() {
        return path;
    }
    let kubectl = plane.kubectl();
    for manifest in manifests {
        kubectl.ok(&[
            "apply",
            "-n",
            "nicpolicy-system",
            "-f",
            &manifest.to_string_lossy(),
        ]);
    }
    let token = kubectl.ok(&[
        "create",
        "token",
        name,
        "-n",
        "nicpolicy-system",
        "--duration=24h",
    ]);
    std::fs::write(
        &path,
        kubeconfig(
            plane.api_port,
            &plane.pki.ca_file,
            &format!("token: {}", token.trim()),
        ),
    )
    .expect("write a ServiceAccount's kubeconfig");
    path
}

/// `nicpolicy SUBCOMMAND` as the suites run it: as the identity of `kubeconfig` (never the
/// environment's cluster), logging at debug, with one module cache for every process.
pub fn nicpolicy_command(subcommand: &str, kubeconfig: &Path) -> Command {
    nicpolicy_command_logging(subcommand, kubeconfig, SUITE_LOG_LEVEL)
}

/// What the suites log: nicpolicy's debug lines too (a line per review).
const SUITE_LOG_LEVEL: &str = "info,nicpolicy=debug";

/// [`nicpolicy_command`] logging at `level` (`info` as the shipped Deployments do, for
/// benchmarks: a debug line per review is a write per review).
fn nicpolicy_command_logging(subcommand: &str, kubeconfig: &Path, level: &str) -> Command {
    let mut command = Command::new(&binaries().nicpolicy);
    command
        .arg(subcommand)
        .arg(format!("--log-level={level}"))
        .env("KUBECONFIG", kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("RUST_LOG")
        // What the chart's downward API gives the pods: Events about nicpolicy itself go there.
        .env("POD_NAMESPACE", "nicpolicy-system")
        .env("POD_NAME", format!("nicpolicy-{subcommand}-e2e"))
        .env(
            "NICPOLICY_CACHE_DIR",
            std::env::temp_dir().join("nicpolicy-e2e-module-cache"),
        );
    command
}

impl Webhook {
    /// Starts `nicpolicy serve --config DIR/nicpolicy.yaml --tls-self-signed` on a free port
    /// with the shipped ServiceAccount's identity and waits for `/readyz` (caches synced).
    pub async fn start(plane: &ControlPlane, config_dir: &Path) -> Webhook {
        Webhook::start_as(plane, config_dir, SUITE_LOG_LEVEL, Vec::new()).await
    }

    /// [`Webhook::start`] logging at `log_level` (`info` as the shipped Deployments do, for
    /// benchmarks), with more arguments of `nicpolicy serve`.
    pub async fn start_as(
        plane: &ControlPlane,
        config_dir: &Path,
        log_level: &'static str,
        extra_args: Vec<String>,
    ) -> Webhook {
        let mut webhook = Webhook {
            config_dir: config_dir.to_path_buf(),
            port: free_port(),
            ca_file: config_dir.join("nicpolicy-ca.crt"),
            process: None,
            admin: plane.kubectl(),
            kubeconfig: service_account_kubeconfig(plane),
            registered: false,
            http: None,
            capvcd_version: plane.crds.capvcd_version(),
            log_level,
            extra_args,
        };
        webhook.spawn().await;
        webhook
    }

    /// The shipped configuration (in a directory named after `name`), started and registered.
    pub async fn registered(plane: &ControlPlane, name: &str) -> Webhook {
        let mut webhook = Webhook::start(plane, &shipped_config(plane, name)).await;
        webhook.register().await;
        webhook
    }

    async fn spawn(&mut self) {
        let _ = std::fs::remove_file(&self.ca_file);
        let mut command = nicpolicy_command_logging("serve", &self.kubeconfig, self.log_level);
        command
            .arg("--config")
            .arg(self.config_dir.join("nicpolicy.yaml"))
            .arg("--tls-self-signed")
            .arg("--ca-bundle")
            .arg(&self.ca_file)
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .args(&self.extra_args);
        let process = Process::spawn("nicpolicy", command, &self.config_dir.join("nicpolicy.log"))
            .expect("nicpolicy serve starts");
        self.process = Some(process);
        self.wait_ready().await;
    }

    async fn wait_ready(&mut self) {
        let start = Instant::now();
        loop {
            if let Some(process) = self.process.as_mut() {
                if !process.running() {
                    panic!("nicpolicy serve exited:\n{}", process.log_tail(30));
                }
            }
            if self.ca_file.is_file() {
                let ca = std::fs::read(&self.ca_file).expect("CA bundle");
                // No kept-alive connection: the tests stop nicpolicy from synchronous code, and
                // an idle connection whose client task cannot run would hold the server's
                // graceful shutdown for its whole grace period.
                let http = reqwest::Client::builder()
                    .add_root_certificate(reqwest::Certificate::from_pem(&ca).expect("PEM"))
                    .http1_only()
                    .pool_max_idle_per_host(0)
                    .timeout(Duration::from_secs(5))
                    .build()
                    .expect("HTTPS client");
                let ready = http.get(self.url("/readyz")).send().await;
                if matches!(&ready, Ok(r) if r.status().is_success()) {
                    eprintln!(
                        "e2e: nicpolicy serve ready on port {} in {:.1} s",
                        self.port,
                        start.elapsed().as_secs_f64()
                    );
                    self.http = Some(http);
                    return;
                }
            }
            if start.elapsed() > READY_TIMEOUT {
                panic!(
                    "nicpolicy serve was not ready after {READY_TIMEOUT:?}:\n{}",
                    self.log_tail(40)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `https://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    /// The last lines of nicpolicy's log.
    pub fn log_tail(&self, lines: usize) -> String {
        crate::process::tail(&self.config_dir.join("nicpolicy.log"), lines)
    }

    /// nicpolicy's whole log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.config_dir.join("nicpolicy.log")).unwrap_or_default()
    }

    /// The shipped webhook configurations with `clientConfig` pointing at this process.
    pub fn configurations(&self) -> Value {
        let ca = std::fs::read(&self.ca_file).expect("CA bundle");
        let ca_bundle = base64::engine::general_purpose::STANDARD.encode(ca);
        let mut items = Vec::new();
        for mut object in shipped_objects(
            "config/install.yaml",
            &[
                "MutatingWebhookConfiguration",
                "ValidatingWebhookConfiguration",
            ],
        ) {
            let webhooks = object["webhooks"]
                .as_array_mut()
                .expect("a webhook configuration lists webhooks");
            for webhook in webhooks {
                let path = webhook
                    .pointer("/clientConfig/service/path")
                    .and_then(Value::as_str)
                    .expect("each shipped webhook names a service path")
                    .to_string();
                webhook["clientConfig"] = json!({
                    "url": self.url(&path),
                    "caBundle": ca_bundle,
                });
            }
            items.push(object);
        }
        json!({"apiVersion": "v1", "kind": "List", "items": items})
    }

    /// Registers the shipped webhook configurations with kube-apiserver and waits until it
    /// sends reviews here.
    pub async fn register(&mut self) {
        let list = self.configurations().to_string();
        self.admin.apply(&list);
        self.registered = true;
        let start = Instant::now();
        loop {
            let before = self.reviews_answered().await;
            self.probe();
            if self.reviews_answered().await > before {
                eprintln!(
                    "e2e: webhook registered; kube-apiserver calls it after {:.1} s",
                    start.elapsed().as_secs_f64()
                );
                return;
            }
            if start.elapsed() > REGISTER_TIMEOUT {
                panic!("kube-apiserver did not call the registered webhook within {REGISTER_TIMEOUT:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn probe_api_version(&self) -> String {
        format!("infrastructure.cluster.x-k8s.io/{}", self.capvcd_version)
    }

    /// A server-side dry-run create of a VCDMachine in `default`: reviewed by whatever webhook
    /// is registered, stored nowhere. Returns whether it was admitted.
    fn probe(&self) -> bool {
        let probe = json!({
            "apiVersion": self.probe_api_version(),
            "kind": "VCDMachine",
            "metadata": {
                "name": "e2e-registration-probe",
                "namespace": "default",
                "labels": {"cluster.x-k8s.io/cluster-name": "e2e-registration-probe"}
            },
            "spec": {"extraOvdcNetworks": ["storage-net"]}
        });
        self.admin
            .run_with(
                &["create", "--dry-run=server", "-o", "name", "-f", "-"],
                Some(&probe.to_string()),
            )
            .success
    }

    /// The text of `/metrics` (empty when the process does not answer).
    pub async fn metrics(&self) -> String {
        let Some(http) = self.http.as_ref() else {
            return String::new();
        };
        let Ok(response) = http.get(self.url("/metrics")).send().await else {
            return String::new();
        };
        response.text().await.unwrap_or_default()
    }

    /// Whether `/readyz` answers 200 now.
    pub async fn ready(&self) -> bool {
        let Some(http) = self.http.as_ref() else {
            return false;
        };
        matches!(http.get(self.url("/readyz")).send().await, Ok(r) if r.status().is_success())
    }

    /// The sum of `nicpolicy_reviews_total` (0 when the process does not answer).
    pub async fn reviews_answered(&self) -> u64 {
        self.metric_sum("nicpolicy_reviews_total").await as u64
    }

    /// The sum of the metric `name` over its labels (0 when absent or the process does not
    /// answer).
    pub async fn metric_sum(&self, name: &str) -> f64 {
        self.metrics()
            .await
            .lines()
            .filter(|line| {
                line.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with(['{', ' ']))
            })
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Stops the process (SIGTERM); the webhook configurations stay registered, as when every
    /// replica is down.
    pub fn stop(&mut self) {
        self.http = None;
        if let Some(mut process) = self.process.take() {
            let status = process.stop(Duration::from_secs(30));
            eprintln!("e2e: nicpolicy serve stopped: {status}");
        }
    }

    /// Starts the process again on the same port with the same configuration directory.
    pub async fn restart(&mut self) {
        self.stop();
        self.spawn().await;
        if self.registered {
            // A new CA was generated: point the configurations at it.
            self.register().await;
        }
    }

    /// The process's id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().and_then(Process::pid)
    }

    /// The process's peak resident memory so far (`VmHWM`), in bytes.
    pub fn peak_rss(&self) -> u64 {
        let pid = self.pid().expect("nicpolicy serve runs");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("its status");
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmHWM:"))
            .and_then(|kb| kb.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .expect("VmHWM in kB")
            * 1024
    }

    /// Whether the process is running.
    pub fn running(&mut self) -> bool {
        self.process.as_mut().is_some_and(Process::running)
    }

    /// Removes the webhook configurations and waits until kube-apiserver stops calling them.
    pub fn unregister(&mut self) {
        if !self.registered {
            return;
        }
        self.registered = false;
        self.admin.run(&[
            "delete",
            "mutatingwebhookconfiguration/nicpolicy",
            "validatingwebhookconfiguration/nicpolicy",
            "--ignore-not-found",
        ]);
        let start = Instant::now();
        // The probe is admitted once no webhook is consulted (nothing else checks it).
        while !self.probe() {
            if start.elapsed() > REGISTER_TIMEOUT {
                let why = format!(
                    "kube-apiserver still called the deleted webhooks after {REGISTER_TIMEOUT:?}"
                );
                // A second panic while a failed test unwinds would abort the whole binary.
                if std::thread::panicking() {
                    eprintln!("e2e: {why}");
                    return;
                }
                panic!("{why}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            eprintln!(
                "e2e: last lines of {}:\n{}",
                self.config_dir.join("nicpolicy.log").display(),
                self.log_tail(40)
            );
        }
        self.unregister();
    }
}
