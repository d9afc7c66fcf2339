//! An OCI registry for the suites: Debian's `docker-registry` (the distribution v2 server that
//! .ci/run installs) on 127.0.0.1 with storage in the control plane's directory, and the
//! `nicpolicy` commands that publish a policy to it (export, push, sign).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::control_plane::free_port;
use crate::process::Process;
use crate::{binaries, ControlPlane};

/// A registry process; its storage stays across [`Registry::stop`] and [`Registry::start`].
pub struct Registry {
    dir: PathBuf,
    port: u16,
    process: Option<Process>,
}

impl Registry {
    /// Starts a registry for the control plane `plane`, named `name`.
    pub fn new(plane: &ControlPlane, name: &str) -> Registry {
        let dir = plane.dir.join(format!("registry-{name}"));
        std::fs::create_dir_all(&dir).expect("registry directory");
        let mut registry = Registry {
            dir,
            port: free_port(),
            process: None,
        };
        registry.start();
        registry
    }

    /// Starts the process (again) on the same port and storage, and waits until it listens.
    pub fn start(&mut self) {
        let binary = ["/usr/bin/docker-registry", "/usr/sbin/docker-registry"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .expect("docker-registry is installed (.ci/run installs Debian's docker-registry)");
        let config = self.dir.join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog: {{level: warn}}\nstorage:\n  filesystem: {{rootdirectory: {}}}\nhttp:\n  addr: 127.0.0.1:{}\n",
                self.dir.join("data").display(),
                self.port
            ),
        )
        .expect("registry configuration");
        let mut command = Command::new(binary);
        command.arg("serve").arg(&config);
        self.process = Some(
            Process::spawn("docker-registry", command, &self.dir.join("registry.log"))
                .expect("docker-registry starts"),
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "the registry did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the process: an outage.
    pub fn stop(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.stop(Duration::from_secs(5));
        }
    }

    /// `127.0.0.1:PORT`, as references name it.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The directory of its storage and of the files the suites write beside it.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `nicpolicy ARGS` in the registry's directory, without the machine user's credentials;
    /// stdout on success, a panic with both streams otherwise.
    pub fn nicpolicy(&self, args: &[&str], env: &[(&str, &str)]) -> String {
        let out = Command::new(&binaries().nicpolicy)
            .args(args)
            .current_dir(&self.dir)
            .env("DOCKER_CONFIG", self.dir.join("no-docker-config"))
            .envs(env.iter().copied())
            .output()
            .expect("nicpolicy runs");
        assert!(
            out.status.success(),
            "nicpolicy {args:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Exports the built-in policy `builtin`, pushes it as `platform/NAME:TAG` and answers its
    /// immutable reference.
    pub fn publish(&self, builtin: &str, tag: &str) -> String {
        let file = format!("{builtin}.wasm");
        self.nicpolicy(&["export", builtin, "-o", &file], &[]);
        self.nicpolicy(
            &[
                "push",
                &file,
                &format!("{}/platform/{builtin}:{tag}", self.host()),
                "--plain-http",
            ],
            &[],
        )
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}
