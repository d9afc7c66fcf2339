//! Cluster API's own core manager (built by tests/e2e/kube/build.sh from `sigs.k8s.io/cluster-api`)
//! run against the control plane: its MachineDeployment, MachineSet, Machine, Cluster,
//! ClusterClass and topology controllers create and update VCDMachines and VCDMachineTemplates
//! exactly as they do on a management cluster, with nicpolicy registered. Its own webhooks are
//! served (the manager always starts its webhook server) but not registered, as envtest-based
//! provider suites run it: nothing defaults Cluster API's objects, so the suites write them
//! complete. Nothing reconciles Cloud Director, so VCDMachines never get a provider ID or a
//! ready status.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;
use rcgen::{CertificateParams, KeyPair};

use crate::binaries::binaries;
use crate::control_plane::{free_port, ControlPlane};
use crate::process::Process;

/// How long the manager may take to report healthy.
const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// A running Cluster API manager.
pub struct ClusterApi {
    process: Process,
    health_port: u16,
}

impl ClusterApi {
    /// Starts the manager as the cluster admin, with the ClusterTopology feature gate on (the
    /// topology controller is alpha and off by default), and waits for its health endpoint.
    pub fn start(plane: &ControlPlane) -> anyhow::Result<ClusterApi> {
        let dir = plane.dir.join("cluster-api");
        let certs = dir.join("webhook-certs");
        std::fs::create_dir_all(&certs)?;
        // The webhook server needs a certificate to start, even with no registration.
        let key = KeyPair::generate()?;
        let cert = CertificateParams::new(vec!["127.0.0.1".to_string()])?.self_signed(&key)?;
        std::fs::write(certs.join("tls.crt"), cert.pem())?;
        std::fs::write(certs.join("tls.key"), key.serialize_pem())?;
        let health_port = free_port();
        let mut command = Command::new(&binaries().cluster_api_manager);
        command
            .arg(format!("--kubeconfig={}", plane.admin_kubeconfig.display()))
            .arg(format!("--webhook-cert-dir={}", certs.display()))
            .arg(format!("--webhook-port={}", free_port()))
            .arg(format!("--health-addr=127.0.0.1:{health_port}"))
            .arg(format!("--diagnostics-address=127.0.0.1:{}", free_port()))
            .arg("--insecure-diagnostics")
            .arg("--leader-elect=false")
            .arg("--feature-gates=ClusterTopology=true")
            // No storage-version migration of Cluster API's CRDs on a fresh API server.
            .arg("--skip-crd-migration-phases=StorageVersionMigration,CleanupManagedFields")
            .arg("--sync-period=30s")
            .arg("--v=2");
        let process = Process::spawn("cluster-api", command, &dir.join("manager.log"))
            .context("Cluster API's manager")?;
        let mut manager = ClusterApi {
            process,
            health_port,
        };
        manager.wait_healthy()?;
        Ok(manager)
    }

    fn wait_healthy(&mut self) -> anyhow::Result<()> {
        let start = Instant::now();
        loop {
            if !self.process.running() {
                anyhow::bail!(
                    "Cluster API's manager exited:\n{}",
                    self.process.log_tail(40)
                );
            }
            if http_ok(self.health_port, "/readyz") {
                eprintln!(
                    "e2e: Cluster API's manager ready in {:.1} s",
                    start.elapsed().as_secs_f64()
                );
                return Ok(());
            }
            if start.elapsed() > READY_TIMEOUT {
                anyhow::bail!(
                    "Cluster API's manager was not ready after {READY_TIMEOUT:?}:\n{}",
                    self.process.log_tail(40)
                );
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// The manager's log file.
    pub fn log(&self) -> PathBuf {
        self.process.log().to_path_buf()
    }

    /// The last lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        self.process.log_tail(lines)
    }
}

/// Whether a plain HTTP GET of `path` on 127.0.0.1:`port` answers 200.
fn http_ok(port: u16, path: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
}

impl Drop for ClusterApi {
    fn drop(&mut self) {
        self.process.stop(Duration::from_secs(10));
    }
}
