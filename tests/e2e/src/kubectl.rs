//! kubectl as a person runs it: every command and what it printed go to the test's output, so
//! a run's log shows denials exactly as kubectl prints them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// kubectl with one kubeconfig.
#[derive(Debug, Clone)]
pub struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
}

/// What one kubectl command did.
#[derive(Debug, Clone)]
pub struct Output {
    /// Whether it exited 0.
    pub success: bool,
    /// What it printed on stdout.
    pub stdout: String,
    /// What it printed on stderr (warnings and errors).
    pub stderr: String,
}

impl Kubectl {
    /// kubectl `bin` using `kubeconfig`.
    pub fn new(bin: &Path, kubeconfig: &Path) -> Kubectl {
        Kubectl {
            bin: bin.to_path_buf(),
            kubeconfig: kubeconfig.to_path_buf(),
        }
    }

    /// Runs `kubectl ARGS`, with `stdin` fed to it when given, and logs it.
    pub fn run_with(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut command = Command::new(&self.bin);
        command
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command
            .spawn()
            .unwrap_or_else(|err| panic!("cannot run {}: {err}", self.bin.display()));
        if let Some(text) = stdin {
            let mut pipe = child.stdin.take().expect("stdin is piped");
            pipe.write_all(text.as_bytes())
                .expect("kubectl reads its input");
        }
        let output = child.wait_with_output().expect("kubectl finishes");
        let result = Output {
            success: output.status.success(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        };
        eprintln!(
            "$ kubectl {}{}   [{}]",
            args.join(" "),
            if stdin.is_some() { " <<manifest" } else { "" },
            output.status
        );
        for line in result.stdout.lines().chain(result.stderr.lines()).take(40) {
            eprintln!("  {line}");
        }
        result
    }

    /// Runs `kubectl ARGS`.
    pub fn run(&self, args: &[&str]) -> Output {
        self.run_with(args, None)
    }

    /// Runs `kubectl ARGS` and returns stdout; panics with what it printed when it fails.
    pub fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(
            output.success,
            "kubectl {} failed:\n{}",
            args.join(" "),
            output.stderr
        );
        output.stdout
    }

    /// `kubectl apply -f -` with `manifest`; panics when it fails.
    pub fn apply(&self, manifest: &str) -> Output {
        let output = self.run_with(&["apply", "-f", "-"], Some(manifest));
        assert!(output.success, "kubectl apply failed:\n{}", output.stderr);
        output
    }

    /// The kubeconfig this kubectl uses.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }
}
