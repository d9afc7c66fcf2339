//! Where the suites find kube-apiserver, etcd, kubectl, helm, Cluster API's manager, the CRDs
//! of Cluster API and CAPVCD v1.3.2, and nicpolicy. A missing binary fails the
//! suite with what to run: the suites never skip.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The binaries a suite runs.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// kube-apiserver built by tests/e2e/kube/build.sh.
    pub kube_apiserver: PathBuf,
    /// kubectl from the same Kubernetes release.
    pub kubectl: PathBuf,
    /// The etcd server.
    pub etcd: PathBuf,
    /// helm, built by the same script from its own Go module (tests/e2e/helm).
    pub helm: PathBuf,
    /// Cluster API's core manager, built by the same script from its module (tests/e2e/capi).
    pub cluster_api_manager: PathBuf,
    /// The CRDs taken from the Go modules by the same script: `cluster-api/` (Cluster API's
    /// core, kubeadm bootstrap and control plane), `capvcd/` (CAPVCD v1.3.2's
    /// `config/crd/bases`), `capvcd-templates/` (CAPVCD v1.3.2's `templates/`).
    pub crds: PathBuf,
    /// The `nicpolicy` binary under test.
    pub nicpolicy: PathBuf,
}

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("tests/e2e sits two levels below the workspace root")
        .to_path_buf()
}

/// The binaries, located once: `NICPOLICY_E2E_BIN_DIR` (tests/e2e/run.sh sets it), else the
/// directory `tests/e2e/kube/build.sh --print-dir` names; `NICPOLICY_BIN`, else the `nicpolicy`
/// cargo built beside the test executable.
pub fn binaries() -> &'static Binaries {
    static BINARIES: OnceLock<Binaries> = OnceLock::new();
    BINARIES.get_or_init(|| match locate() {
        Ok(found) => found,
        Err(why) => panic!("\n\nthe end-to-end suite cannot run: {why}\n"),
    })
}

fn locate() -> Result<Binaries, String> {
    let build = workspace().join("tests/e2e/kube/build.sh");
    let dir = match std::env::var_os("NICPOLICY_E2E_BIN_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let output = Command::new(&build)
                .arg("--print-dir")
                .output()
                .map_err(|err| format!("cannot run {}: {err}", build.display()))?;
            if !output.status.success() {
                return Err(format!(
                    "{} --print-dir failed: {}",
                    build.display(),
                    String::from_utf8_lossy(&output.stderr)
                ));
            }
            PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
        }
    };
    let nicpolicy = match std::env::var_os("NICPOLICY_BIN") {
        Some(path) => PathBuf::from(path),
        None => std::env::current_exe()
            .ok()
            .and_then(|exe| Some(exe.parent()?.parent()?.join("nicpolicy")))
            .ok_or("cannot tell where cargo put the nicpolicy binary; set NICPOLICY_BIN")?,
    };
    let found = Binaries {
        kube_apiserver: dir.join("kube-apiserver"),
        kubectl: dir.join("kubectl"),
        etcd: dir.join("etcd"),
        helm: dir.join("helm"),
        cluster_api_manager: dir.join("cluster-api-manager"),
        crds: dir.join("crds"),
        nicpolicy,
    };
    for (path, how) in [
        (&found.kube_apiserver, format!("run {}", build.display())),
        (&found.kubectl, format!("run {}", build.display())),
        (&found.etcd, format!("run {}", build.display())),
        (&found.helm, format!("run {}", build.display())),
        (
            &found.cluster_api_manager,
            format!("run {}", build.display()),
        ),
        (
            &found.crds.join("SOURCES"),
            format!("run {}", build.display()),
        ),
        (
            &found.nicpolicy,
            "run tests/e2e/run.sh, which builds it with `cargo test --workspace --no-run`"
                .to_string(),
        ),
    ] {
        if !path.is_file() {
            return Err(format!("{} is missing: {how}", path.display()));
        }
    }
    Ok(found)
}
