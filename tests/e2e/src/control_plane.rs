//! etcd and kube-apiserver on loopback, as envtest runs them for Cluster API providers: free
//! ports, a temporary directory, serving certificates, a service-account key and issuer,
//! client-certificate authentication and RBAC authorization. CRDs are installed at start:
//! those sites run ([`Crds::Release`]: CAPVCD v1.3.2's and Cluster API's, from their Go modules)
//! or the project's v1beta3 ones for CAPVCD's main ([`Crds::Main`], config/crd/).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::binaries::{binaries, workspace, Binaries};
use crate::kubectl::Kubectl;
use crate::pki::Pki;
use crate::process::Process;

/// How long kube-apiserver may take to report ready (2 shared cores: usually 5-15 s).
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// Which CRDs a control plane installs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Crds {
    /// What sites run: CAPVCD v1.3.2's CRDs (`config/crd/bases` of its module: VCDMachine,
    /// VCDCluster and VCDMachineTemplate at v1beta1 and v1beta2, v1beta2 stored), labelled with
    /// Cluster API's contract as the release's kustomization labels them, and Cluster API's
    /// own CRDs (core, kubeadm bootstrap and control plane) from its module.
    Release,
    /// The project's CRDs of CAPVCD's unreleased main (config/crd/: CAPVCD kinds at v1beta3
    /// with zones, Cluster at v1beta1 and v1beta2), for what only main has.
    Main,
}

/// The CAPVCD version objects are written at on [`Crds::Release`].
pub const RELEASE_VERSION: &str = "v1beta2";

impl Crds {
    /// The CAPVCD version these CRDs store, which the suites write.
    pub fn capvcd_version(self) -> &'static str {
        match self {
            Crds::Release => RELEASE_VERSION,
            Crds::Main => "v1beta3",
        }
    }
}

/// The CRDs of this test binary's shared control plane (set by [`shared_on`]).
static CRDS: OnceLock<Crds> = OnceLock::new();

/// The CAPVCD version this test binary writes: its shared control plane's, else the release's.
pub fn capvcd_version() -> &'static str {
    CRDS.get()
        .copied()
        .unwrap_or(Crds::Release)
        .capvcd_version()
}

/// A running etcd and kube-apiserver.
pub struct ControlPlane {
    /// The CRDs installed.
    pub crds: Crds,
    /// Where certificates, data, kubeconfigs and logs live.
    pub dir: PathBuf,
    /// kube-apiserver's HTTPS port on 127.0.0.1.
    pub api_port: u16,
    /// The CA of the API server and of its client certificates.
    pub pki: Pki,
    /// A kubeconfig for `e2e-admin` in `system:masters`.
    pub admin_kubeconfig: PathBuf,
    etcd: Process,
    etcd_port: u16,
    apiserver: Process,
}

/// A free TCP port on 127.0.0.1 (bound, read, released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free loopback port")
}

impl ControlPlane {
    /// Starts etcd and kube-apiserver in a fresh temporary directory named after `name`, waits
    /// for `/readyz` and installs `crds`.
    pub fn start(name: &str, crds: Crds) -> anyhow::Result<ControlPlane> {
        install_failure_hook();
        let bins = binaries();
        let dir = std::env::temp_dir().join(format!("nicpolicy-e2e-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        eprintln!("e2e: control plane for {name} in {}", dir.display());
        let pki = Pki::write(&dir.join("pki"))?;
        let admin = pki.client("admin", "e2e-admin", "system:masters")?;
        let (etcd_port, peer_port, api_port) = (free_port(), free_port(), free_port());
        let etcd = start_etcd(bins, &dir, etcd_port, peer_port)?;
        let admin_kubeconfig = dir.join("admin.kubeconfig");
        std::fs::write(
            &admin_kubeconfig,
            kubeconfig(
                api_port,
                &pki.ca_file,
                &format!(
                    "client-certificate: {}\n    client-key: {}",
                    admin.cert.display(),
                    admin.key.display()
                ),
            ),
        )?;
        let apiserver = start_apiserver(bins, &dir, &pki, etcd_port, api_port)?;
        let plane = ControlPlane {
            crds,
            dir,
            api_port,
            pki,
            admin_kubeconfig,
            etcd,
            etcd_port,
            apiserver,
        };
        plane.wait_ready(READY_TIMEOUT)?;
        plane.install_crds()?;
        Ok(plane)
    }

    /// kubectl as the cluster admin.
    pub fn kubectl(&self) -> Kubectl {
        Kubectl::new(&binaries().kubectl, &self.admin_kubeconfig)
    }

    /// A kube-rs client as the cluster admin.
    pub async fn client(&self) -> kube::Client {
        client_from(&self.admin_kubeconfig).await
    }

    /// Polls `/readyz` until it answers `ok`.
    pub fn wait_ready(&self, timeout: Duration) -> anyhow::Result<()> {
        let start = Instant::now();
        let kubectl = self.kubectl();
        loop {
            let output = Command::new(kubectl_bin())
                .arg("--kubeconfig")
                .arg(kubectl.kubeconfig())
                .args(["get", "--raw", "/readyz"])
                .output()?;
            if output.status.success() {
                eprintln!(
                    "e2e: kube-apiserver ready in {:.1} s",
                    start.elapsed().as_secs_f64()
                );
                return Ok(());
            }
            if start.elapsed() > timeout {
                bail!(
                    "kube-apiserver was not ready after {timeout:?}: {}\nlast lines of {}:\n{}",
                    String::from_utf8_lossy(&output.stderr).trim(),
                    self.apiserver.log().display(),
                    self.apiserver.log_tail(30)
                );
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// Installs the CRDs of [`ControlPlane::crds`] and waits until every one is established.
    fn install_crds(&self) -> anyhow::Result<()> {
        let kubectl = self.kubectl();
        let mut names = Vec::new();
        match self.crds {
            Crds::Main => {
                // As a user does: `kubectl apply -k config/crd/`.
                let crds = workspace().join("config/crd");
                let applied = kubectl.run(&["apply", "-k", &crds.to_string_lossy()]);
                if !applied.success {
                    bail!("kubectl apply -k config/crd failed: {}", applied.stderr);
                }
                names.extend(
                    [
                        "clusters.cluster.x-k8s.io",
                        "vcdclusters.infrastructure.cluster.x-k8s.io",
                        "vcdmachines.infrastructure.cluster.x-k8s.io",
                        "vcdmachinetemplates.infrastructure.cluster.x-k8s.io",
                    ]
                    .map(str::to_string),
                );
            }
            Crds::Release => {
                let dir = &binaries().crds;
                for set in ["cluster-api", "capvcd"] {
                    let path = dir.join(set);
                    // Server-side: Cluster API's CRDs are too large for the last-applied
                    // annotation.
                    let applied =
                        kubectl.run(&["apply", "--server-side", "-f", &path.to_string_lossy()]);
                    if !applied.success {
                        bail!(
                            "kubectl apply {} failed: {}",
                            path.display(),
                            applied.stderr
                        );
                    }
                    for entry in std::fs::read_dir(&path)? {
                        let file = entry?.path();
                        let text = std::fs::read_to_string(&file)?;
                        let crd: serde_json::Value = serde_yaml_ng::from_str(&text)
                            .with_context(|| format!("{}", file.display()))?;
                        if let Some(name) = crd.pointer("/metadata/name").and_then(|n| n.as_str()) {
                            names.push(name.to_string());
                        }
                    }
                }
                // Cluster API finds a provider's version by its contract label, which each
                // provider's config/crd/kustomization.yaml adds (commonLabels): v1beta2 for
                // CAPVCD v1.3.2's CRDs, v1beta1 for the kubeadm bootstrap and control-plane
                // providers of Cluster API's module.
                for (suffixes, version) in [
                    (&[".infrastructure.cluster.x-k8s.io"][..], "v1beta2"),
                    (
                        &[
                            ".bootstrap.cluster.x-k8s.io",
                            ".controlplane.cluster.x-k8s.io",
                        ][..],
                        "v1beta1",
                    ),
                ] {
                    let provider: Vec<&String> = names
                        .iter()
                        .filter(|n| suffixes.iter().any(|s| n.ends_with(s)))
                        .collect();
                    let label = format!("cluster.x-k8s.io/v1beta1={version}");
                    let mut args = vec!["label", "--overwrite", "crd"];
                    args.extend(provider.iter().map(|n| n.as_str()));
                    args.push(&label);
                    kubectl.ok(&args);
                }
            }
        }
        let mut args = vec!["wait", "--for=condition=Established", "--timeout=60s"];
        let named: Vec<String> = names.iter().map(|n| format!("crd/{n}")).collect();
        args.extend(named.iter().map(String::as_str));
        let waited = kubectl.run(&args);
        if !waited.success {
            bail!("the CRDs were not established: {}", waited.stderr);
        }
        Ok(())
    }

    /// Stops kube-apiserver (SIGTERM; SIGKILL after 5 s, as its open watches keep it from
    /// exiting sooner) and starts it again on the same port with the same etcd after
    /// `down_for`, as a control-plane upgrade or a crash does to its clients.
    pub fn restart_apiserver(&mut self, down_for: Duration) -> anyhow::Result<()> {
        let status = self.apiserver.stop(Duration::from_secs(5));
        eprintln!("e2e: kube-apiserver stopped ({status}); down for {down_for:?}");
        std::thread::sleep(down_for);
        self.apiserver = start_apiserver(
            binaries(),
            &self.dir,
            &self.pki,
            self.etcd_port,
            self.api_port,
        )?;
        self.wait_ready(READY_TIMEOUT)
    }

    /// Freezes kube-apiserver (SIGSTOP): it keeps its port and accepts connections, but answers
    /// nothing, as an overloaded or partitioned API server does to its clients, until
    /// [`ControlPlane::resume_apiserver`].
    pub fn pause_apiserver(&self) -> anyhow::Result<()> {
        self.signal_apiserver("-STOP")
    }

    /// Lets a paused kube-apiserver run again (SIGCONT).
    pub fn resume_apiserver(&self) -> anyhow::Result<()> {
        self.signal_apiserver("-CONT")
    }

    fn signal_apiserver(&self, signal: &str) -> anyhow::Result<()> {
        let pid = self
            .apiserver
            .pid()
            .ok_or_else(|| anyhow::anyhow!("kube-apiserver is not running"))?;
        let status = std::process::Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()?;
        if !status.success() {
            bail!("kill {signal} {pid}: {status}");
        }
        Ok(())
    }

    /// The last lines of kube-apiserver's log.
    pub fn apiserver_log_tail(&self, lines: usize) -> String {
        self.apiserver.log_tail(lines)
    }

    /// Whether etcd still runs.
    pub fn etcd_running(&mut self) -> bool {
        self.etcd.running()
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.apiserver.stop(Duration::from_secs(15));
        self.etcd.stop(Duration::from_secs(10));
        if failed() {
            eprintln!(
                "e2e: a test failed; logs and data kept in {} (kube-apiserver.log, etcd.log, webhook-*/nicpolicy.log)",
                self.dir.display()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn kubectl_bin() -> &'static Path {
    &binaries().kubectl
}

fn start_etcd(bins: &Binaries, dir: &Path, port: u16, peer_port: u16) -> anyhow::Result<Process> {
    let client_url = format!("http://127.0.0.1:{port}");
    let peer_url = format!("http://127.0.0.1:{peer_port}");
    let mut command = Command::new(&bins.etcd);
    command
        .arg("--name=e2e")
        .arg(format!("--data-dir={}", dir.join("etcd").display()))
        .arg(format!("--listen-client-urls={client_url}"))
        .arg(format!("--advertise-client-urls={client_url}"))
        .arg(format!("--listen-peer-urls={peer_url}"))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg(format!("--initial-cluster=e2e={peer_url}"))
        // Test data: no fsync, a small log.
        .arg("--unsafe-no-fsync")
        .arg("--log-level=warn");
    Process::spawn("etcd", command, &dir.join("etcd.log")).context("etcd")
}

fn start_apiserver(
    bins: &Binaries,
    dir: &Path,
    pki: &Pki,
    etcd_port: u16,
    port: u16,
) -> anyhow::Result<Process> {
    let mut command = Command::new(&bins.kube_apiserver);
    command
        .arg(format!("--etcd-servers=http://127.0.0.1:{etcd_port}"))
        .arg(format!("--secure-port={port}"))
        .arg("--bind-address=127.0.0.1")
        .arg("--advertise-address=127.0.0.1")
        .arg(format!(
            "--cert-dir={}",
            dir.join("apiserver-certs").display()
        ))
        .arg(format!("--tls-cert-file={}", pki.serving_cert.display()))
        .arg(format!(
            "--tls-private-key-file={}",
            pki.serving_key.display()
        ))
        .arg(format!("--client-ca-file={}", pki.ca_file.display()))
        // The client certificate kube-apiserver presents to a webhook that asks for one
        // (nicpolicy's `clientAuth`), as docs/deploy.md sets it up.
        .arg(format!(
            "--admission-control-config-file={}",
            admission_configuration(dir, pki)?.display()
        ))
        .arg("--service-account-issuer=https://kubernetes.default.svc.cluster.local")
        .arg(format!(
            "--service-account-key-file={}",
            pki.service_account_public_key.display()
        ))
        .arg(format!(
            "--service-account-signing-key-file={}",
            pki.service_account_key.display()
        ))
        .arg("--service-cluster-ip-range=10.0.0.0/24")
        .arg("--authorization-mode=RBAC")
        // No controller manager creates service-account tokens; tokens come from TokenRequest.
        .arg("--disable-admission-plugins=ServiceAccount")
        .arg("--allow-privileged=true")
        // Nothing routes to the advertised address: keep the kubernetes Service's endpoints alone.
        .arg("--endpoint-reconciler-type=none")
        .arg("--v=1");
    Process::spawn("kube-apiserver", command, &dir.join("kube-apiserver.log"))
        .context("kube-apiserver")
}

/// kube-apiserver's AdmissionConfiguration: both webhook plugins read a kubeconfig whose
/// default user (`*`, any webhook) is [`Pki::webhook_client`].
fn admission_configuration(dir: &Path, pki: &Pki) -> anyhow::Result<std::path::PathBuf> {
    let kubeconfig = dir.join("webhook-client.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1
kind: Config
users:
- name: '*'
  user:
    client-certificate: {}
    client-key: {}
",
            pki.webhook_client.cert.display(),
            pki.webhook_client.key.display()
        ),
    )?;
    let plugin = |name: &str| {
        format!(
            "- name: {name}
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: WebhookAdmissionConfiguration
    kubeConfigFile: {}
",
            kubeconfig.display()
        )
    };
    let path = dir.join("admission-configuration.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
{}{}",
            plugin("ValidatingAdmissionWebhook"),
            plugin("MutatingAdmissionWebhook")
        ),
    )?;
    Ok(path)
}

/// A kubeconfig for the API server on `port`, with `user` lines (indented by 4) for the user.
pub fn kubeconfig(port: u16, ca: &Path, user: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://127.0.0.1:{port}
    certificate-authority: {ca}
users:
- name: e2e
  user:
    {user}
contexts:
- name: e2e
  context: {{cluster: e2e, user: e2e}}
current-context: e2e
",
        ca = ca.display()
    )
}

/// A kube-rs client from a kubeconfig file.
pub async fn client_from(path: &Path) -> kube::Client {
    let config = kube::config::Kubeconfig::read_from(path).expect("kubeconfig reads");
    let config = kube::Config::from_custom_kubeconfig(config, &Default::default())
        .await
        .expect("kubeconfig is usable");
    kube::Client::try_from(config).expect("client builds")
}

static FAILED: AtomicBool = AtomicBool::new(false);

/// Whether a test in this process has panicked.
pub fn failed() -> bool {
    FAILED.load(Ordering::Acquire)
}

/// Records panics so the control plane keeps its logs when a test fails.
fn install_failure_hook() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            FAILED.store(true, Ordering::Release);
            previous(info);
        }));
    });
}

/// The control plane shared by the tests of one test binary, and the lock that runs them one at
/// a time (webhook configurations are cluster-wide, so two tests registering theirs at once
/// would review each other's objects).
pub struct Shared {
    plane: Arc<ControlPlane>,
    _serial: MutexGuard<'static, ()>,
}

impl std::ops::Deref for Shared {
    type Target = ControlPlane;
    fn deref(&self) -> &ControlPlane {
        &self.plane
    }
}

static SHARED: Mutex<Option<Arc<ControlPlane>>> = Mutex::new(None);
static SERIAL: Mutex<()> = Mutex::new(());
/// Why the shared control plane did not start: later tests fail at once with the same reason
/// instead of waiting for another start to time out.
static START_FAILED: OnceLock<String> = OnceLock::new();

/// The test binary's control plane on the CRDs sites run ([`Crds::Release`]), started by the
/// first test that asks; stopped when the process exits.
pub fn shared() -> Shared {
    shared_on(Crds::Release)
}

/// The test binary's control plane on `crds` (one set per test binary).
// unsafe: atexit(3), the one hook libtest's exit runs.
#[allow(unsafe_code)]
pub fn shared_on(crds: Crds) -> Shared {
    let _ = CRDS.set(crds);
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut slot = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    let plane = match slot.as_ref() {
        Some(plane) => {
            assert_eq!(plane.crds, crds, "one set of CRDs per test binary");
            plane.clone()
        }
        None => {
            if let Some(why) = START_FAILED.get() {
                panic!("the control plane did not start: {why}");
            }
            let name = std::env::current_exe()
                .ok()
                .and_then(|exe| exe.file_stem().map(|s| s.to_string_lossy().into_owned()))
                .and_then(|stem| stem.split('-').next().map(str::to_string))
                .unwrap_or_else(|| "suite".into());
            let plane = match ControlPlane::start(&name, crds) {
                Ok(plane) => Arc::new(plane),
                Err(err) => {
                    let why = format!("{err:#}");
                    let _ = START_FAILED.set(why.clone());
                    panic!("the control plane did not start: {why}");
                }
            };
            // SAFETY: registering a plain extern "C" function; it runs once at exit.
            unsafe { libc::atexit(stop_shared) };
            *slot = Some(plane.clone());
            plane
        }
    };
    Shared {
        plane,
        _serial: serial,
    }
}

/// Stops the shared control plane when the test binary exits (libtest ends with `exit`, which
/// runs `atexit` handlers but no destructors of statics).
extern "C" fn stop_shared() {
    let plane = SHARED.lock().unwrap_or_else(|e| e.into_inner()).take();
    drop(plane);
}
