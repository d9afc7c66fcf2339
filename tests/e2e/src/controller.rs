//! `nicpolicy controller` run as the project ships it: the webhook's configuration from
//! config/nicpolicy/ with the candidate configuration from config/controller/candidate/, the
//! OpenReports Report CRD from the OpenReports project's module (tests/e2e/kube/build.sh) and
//! the PolicyReport CRD from config/policyreport/, and the identity of the shipped ServiceAccount
//! bound by config/controller/install.yaml (and nothing else), so a rule missing there fails the
//! suite. Timings (lease, debounce, resync) are shortened through the command line.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use kube::api::Api;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;

use crate::binaries::{binaries, workspace};
use crate::control_plane::{free_port, ControlPlane};
use crate::process::Process;
use crate::webhook::{nicpolicy_command, service_account_token, shipped_config, shipped_rbac};

/// How long the controller may take to serve `/readyz` (caches synced).
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// The ServiceAccount, its namespace and the Lease namespace of config/controller/.
pub const NAMESPACE: &str = "nicpolicy-system";
const SERVICE_ACCOUNT: &str = "nicpolicy-controller";

/// The kinds of report the controller writes (`--report-format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportKind {
    /// `openreports.io/v1alpha1` Report, the default.
    OpenReports,
    /// `wgpolicyk8s.io/v1alpha2` PolicyReport.
    PolicyReport,
}

impl ReportKind {
    /// `--report-format`'s value.
    pub fn flag(self) -> &'static str {
        match self {
            ReportKind::OpenReports => "--report-format=openreports",
            ReportKind::PolicyReport => "--report-format=wgpolicyk8s",
        }
    }

    fn resource(self) -> ApiResource {
        match self {
            ReportKind::OpenReports => ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("openreports.io", "v1alpha1", "Report"),
                "reports",
            ),
            ReportKind::PolicyReport => ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("wgpolicyk8s.io", "v1alpha2", "PolicyReport"),
                "policyreports",
            ),
        }
    }
}

/// How a controller process is started.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Its identity (`POD_NAME`), which the Lease holds.
    pub identity: String,
    /// `--leader-elect` with this Lease name and duration.
    pub lease: Option<(String, Duration)>,
    /// `--candidate-config` with the shipped candidate configuration.
    pub candidate: bool,
    /// `--resync`.
    pub resync: Duration,
    /// Extra arguments.
    pub args: Vec<String>,
    /// Appended to the shipped nicpolicy.yaml before the start.
    pub config: String,
}

impl Settings {
    /// A single replica, no leader election, the shipped candidate, a resync long enough not
    /// to happen during a test (changes come through the watches).
    pub fn single(identity: &str) -> Settings {
        Settings {
            identity: identity.to_string(),
            lease: None,
            candidate: true,
            resync: Duration::from_secs(3600),
            args: Vec::new(),
            config: String::new(),
        }
    }
}

/// A running `nicpolicy controller`.
pub struct Controller {
    /// Its directory: configuration files and nicpolicy.log.
    pub dir: PathBuf,
    /// Port of /metrics, /healthz and /readyz on 127.0.0.1.
    pub port: u16,
    process: Option<Process>,
    http: reqwest::Client,
}

/// Installs the report CRDs (OpenReports' Report from its module, the PolicyReport CRD of
/// config/policyreport/) and the controller's RBAC (config/controller/install.yaml in
/// nicpolicy-system, as its kustomization applies it), and returns a kubeconfig with a token of
/// its ServiceAccount. Done once per control plane.
pub fn controller_kubeconfig(plane: &ControlPlane) -> PathBuf {
    let config = workspace().join("config");
    let kubectl = plane.kubectl();
    kubectl.ok(&[
        "apply",
        "--server-side",
        "-f",
        &binaries()
            .crds
            .join("openreports/openreports.io_reports.yaml")
            .to_string_lossy(),
    ]);
    kubectl.ok(&[
        "apply",
        "-k",
        &config.join("policyreport").to_string_lossy(),
    ]);
    kubectl.ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/reports.openreports.io",
        "crd/policyreports.wgpolicyk8s.io",
    ]);
    service_account_token(
        plane,
        SERVICE_ACCOUNT,
        &[
            config.join("namespace.yaml"),
            shipped_rbac(plane, "config/controller/install.yaml"),
        ],
    )
}

impl Controller {
    /// Starts `nicpolicy controller` with the shipped configuration (in a directory named
    /// after `settings.identity`) and waits for `/readyz`.
    pub async fn start(plane: &ControlPlane, settings: &Settings) -> Controller {
        let kubeconfig = controller_kubeconfig(plane);
        let dir = shipped_config(plane, &format!("controller-{}", settings.identity));
        if !settings.config.is_empty() {
            let path = dir.join("nicpolicy.yaml");
            let shipped = std::fs::read_to_string(&path).expect("the shipped configuration");
            std::fs::write(&path, format!("{shipped}\n{}", settings.config))
                .expect("the configuration");
        }
        let port = free_port();
        let mut command = nicpolicy_command("controller", &kubeconfig);
        command
            .arg("--config")
            .arg(dir.join("nicpolicy.yaml"))
            .arg(format!("--listen=127.0.0.1:{port}"))
            .arg(format!("--resync={}s", settings.resync.as_secs()))
            // Gather a change's burst briefly: the tests wait on results, not on time.
            .arg("--debounce=200ms")
            .args(&settings.args)
            .env("POD_NAME", &settings.identity)
            .env("POD_NAMESPACE", NAMESPACE);
        if settings.candidate {
            command
                .arg("--candidate-config")
                .arg(workspace().join("config/controller/candidate/nicpolicy.yaml"));
        }
        if let Some((name, duration)) = &settings.lease {
            command
                .arg("--leader-elect")
                .arg(format!("--lease-name={name}"))
                .arg(format!("--lease-duration={}ms", duration.as_millis()));
        }
        let process = Process::spawn("nicpolicy controller", command, &dir.join("nicpolicy.log"))
            .expect("nicpolicy controller starts");
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(5))
            .build()
            .expect("HTTP client");
        let mut controller = Controller {
            dir,
            port,
            process: Some(process),
            http,
        };
        controller.wait_ready().await;
        controller
    }

    async fn wait_ready(&mut self) {
        let start = Instant::now();
        loop {
            if !self.running() {
                panic!("nicpolicy controller exited:\n{}", self.log_tail(30));
            }
            let ready = self.http.get(self.url("/readyz")).send().await;
            if matches!(&ready, Ok(r) if r.status().is_success()) {
                eprintln!(
                    "e2e: nicpolicy controller ready on port {} in {:.1} s",
                    self.port,
                    start.elapsed().as_secs_f64()
                );
                return;
            }
            if start.elapsed() > READY_TIMEOUT {
                panic!(
                    "nicpolicy controller was not ready after {READY_TIMEOUT:?}:\n{}",
                    self.log_tail(40)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// The metrics as `(name{labels}, value)`; empty when the process does not answer.
    pub async fn metrics(&self) -> BTreeMap<String, f64> {
        let Ok(response) = self.http.get(self.url("/metrics")).send().await else {
            return BTreeMap::new();
        };
        let text = response.text().await.unwrap_or_default();
        text.lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| {
                let (name, value) = line.rsplit_once(' ')?;
                Some((name.to_string(), value.parse().ok()?))
            })
            .collect()
    }

    /// Whether `/readyz` answers 200.
    pub async fn ready(&self) -> bool {
        self.http
            .get(self.url("/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
    }

    /// One metric (`name{labels}` as printed), 0 when absent.
    pub async fn metric(&self, name: &str) -> f64 {
        self.metrics().await.get(name).copied().unwrap_or(0.0)
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().and_then(Process::pid)
    }

    /// Whether the process runs.
    pub fn running(&mut self) -> bool {
        self.process.as_mut().is_some_and(Process::running)
    }

    /// SIGKILL, as a node failure ends a pod: the Lease is not handed back.
    pub fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            eprintln!("e2e: nicpolicy controller killed: {}", process.kill());
        }
    }

    /// SIGTERM and wait: the leader hands its Lease back.
    pub fn stop(&mut self) {
        if let Some(mut process) = self.process.take() {
            let status = process.stop(Duration::from_secs(30));
            eprintln!("e2e: nicpolicy controller stopped: {status}");
        }
    }

    /// The last lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        crate::process::tail(&self.dir.join("nicpolicy.log"), lines)
    }

    /// Its whole log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("nicpolicy.log")).unwrap_or_default()
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            eprintln!(
                "e2e: last lines of {}:\n{}",
                self.dir.join("nicpolicy.log").display(),
                self.log_tail(40)
            );
        }
    }
}

/// The reports of `kind` in `namespace`.
pub fn reports(client: &kube::Client, namespace: &str, kind: ReportKind) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &kind.resource())
}

/// The `nicpolicy` report (OpenReports, the default kind) of `namespace`, or None.
pub async fn report(client: &kube::Client, namespace: &str) -> Option<Value> {
    report_of(client, namespace, ReportKind::OpenReports).await
}

/// The `nicpolicy` report of `kind` in `namespace`, or None.
pub async fn report_of(client: &kube::Client, namespace: &str, kind: ReportKind) -> Option<Value> {
    reports(client, namespace, kind)
        .get_opt("nicpolicy")
        .await
        .ok()
        .flatten()
        .map(|object| serde_json::to_value(object).expect("serialisable"))
}

/// The results of a report about machine `name`.
pub fn results_of<'a>(report: &'a Value, name: &str) -> Vec<&'a Value> {
    report["results"]
        .as_array()
        .map(|results| {
            results
                .iter()
                .filter(|r| r["resources"][0]["name"] == name)
                .collect()
        })
        .unwrap_or_default()
}

/// Polls the report (OpenReports, the default kind) of `namespace` until `accept` holds for
/// it; returns it and how long that took. Panics after `deadline` with the last report seen
/// and `controller`'s log.
pub async fn report_until(
    client: &kube::Client,
    namespace: &str,
    deadline: Duration,
    controller: &Controller,
    what: &str,
    accept: impl Fn(&Value) -> bool,
) -> (Value, Duration) {
    report_of_until(
        client,
        namespace,
        ReportKind::OpenReports,
        deadline,
        controller,
        what,
        accept,
    )
    .await
}

/// [`report_until`] for a report of `kind`.
pub async fn report_of_until(
    client: &kube::Client,
    namespace: &str,
    kind: ReportKind,
    deadline: Duration,
    controller: &Controller,
    what: &str,
    accept: impl Fn(&Value) -> bool,
) -> (Value, Duration) {
    let start = Instant::now();
    let mut last = Value::Null;
    while start.elapsed() < deadline {
        if let Some(report) = report_of(client, namespace, kind).await {
            if accept(&report) {
                return (report, start.elapsed());
            }
            last = report;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!(
        "the {kind:?} of {namespace} did not show {what} within {deadline:?}; last seen:\n{}\ncontroller log:\n{}",
        serde_json::to_string_pretty(&last["results"]).unwrap_or_default(),
        controller.log_tail(30)
    );
}

/// Polls until `check` returns true; panics with `what` after `deadline`.
pub async fn eventually<F, Fut>(deadline: Duration, what: &str, mut check: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < deadline {
        if check().await {
            return start.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{what}: not within {deadline:?}");
}
