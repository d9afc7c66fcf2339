//! Processes the suites start (etcd, kube-apiserver, nicpolicy): output to a log file, stopped
//! on drop, and killed by the kernel if the test process dies first.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

/// Every process is started from one thread that lives as long as the test process: the
/// parent-death signal fires when the *thread* that forked a child ends, and test threads end
/// after each test while the shared API server must outlive them.
fn spawner() -> &'static Mutex<mpsc::Sender<SpawnRequest>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("e2e-spawner".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    let _ = reply.send(command.spawn());
                }
                // Keep the thread (and so the children's parent) alive until the process exits.
                loop {
                    std::thread::park();
                }
            })
            .expect("spawner thread starts");
        Mutex::new(tx)
    })
}

/// A started process and its log.
pub struct Process {
    name: String,
    child: Option<Child>,
    log: PathBuf,
}

impl Process {
    /// Starts `command` with stdout and stderr appended to `log`.
    // unsafe: a pre-exec hook that asks the kernel to kill the child with its parent thread.
    #[allow(unsafe_code)]
    pub fn spawn(name: &str, mut command: Command, log: &Path) -> anyhow::Result<Process> {
        let file = File::options().create(true).append(true).open(log)?;
        command
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file);
        // SAFETY: prctl and getppid are async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let (tx, rx) = mpsc::channel();
        spawner()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send((command, tx))
            .map_err(|_| anyhow::anyhow!("the spawner thread is gone"))?;
        let child = rx
            .recv()
            .map_err(|_| anyhow::anyhow!("the spawner thread is gone"))?
            .map_err(|err| anyhow::anyhow!("cannot start {name}: {err}"))?;
        Ok(Process {
            name: name.to_string(),
            child: Some(child),
            log: log.to_path_buf(),
        })
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The log file.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// SIGTERM, up to `grace` to exit, then SIGKILL. Returns the exit status text.
    // unsafe: kill(2), for the SIGTERM std's Child::kill does not send.
    #[allow(unsafe_code)]
    pub fn stop(&mut self, grace: Duration) -> String {
        let Some(mut child) = self.child.take() else {
            return "not running".into();
        };
        if let Ok(Some(status)) = child.try_wait() {
            return format!("had exited: {status}");
        }
        if let Ok(pid) = i32::try_from(child.id()) {
            // SAFETY: kill(2) on our own child's pid, which is not reaped yet.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return status.to_string();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        match child.wait() {
            Ok(status) => format!("killed after {grace:?}: {status}"),
            Err(err) => format!("killed after {grace:?}: {err}"),
        }
    }

    /// SIGKILL, without a chance to clean up. Returns the exit status text.
    pub fn kill(&mut self) -> String {
        let Some(mut child) = self.child.take() else {
            return "not running".into();
        };
        let _ = child.kill();
        match child.wait() {
            Ok(status) => status.to_string(),
            Err(err) => err.to_string(),
        }
    }

    /// The last `lines` lines of the log, for failure messages.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log, lines)
    }

    /// The process's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(10));
    }
}

/// The last `lines` lines of a file (its last 64 KiB at most).
pub fn tail(path: &Path, lines: usize) -> String {
    let Ok(mut file) = File::open(path) else {
        return format!("({} cannot be read)", path.display());
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
