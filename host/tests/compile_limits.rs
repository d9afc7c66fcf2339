//! Compiles are bounded in time and memory by running them in a child process: a module within
//! every count bound can still need hundreds of MiB to compile (deeply nested blocks with a
//! `br_table` to each), and Cranelift cannot be interrupted. Peak memory is read from the kernel
//! (`wait4`'s `ru_maxrss`) for the compiler child and for the server apart.

use std::io::Write as _;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

/// A valid ABI v1 module (its exports typed as the ABI says) with `extra` functions.
fn module(extra: &str) -> Vec<u8> {
    let wat = format!(
        r#"(module
  (memory (export "memory") 17)
  (func (export "nicpolicy_abi_version") (result i32) i32.const 1)
  (func (export "nicpolicy_alloc") (param i32) (result i32) i32.const 65536)
  (func (export "nicpolicy_validate_settings") (param i32 i32) (result i64) i64.const 0)
  (func (export "nicpolicy_evaluate") (param i32 i32) (result i64) i64.const 0)
  {extra}
)"#
    );
    wat::parse_str(&wat).expect("valid module")
}

/// `functions` functions, each `repeats` times `depth` nested blocks with a `br_table` to every
/// one of them from the innermost, a write to one of `locals` locals after each block.
fn nested_br_tables(functions: usize, depth: usize, repeats: usize, locals: usize) -> Vec<u8> {
    let mut body = String::new();
    for r in 0..repeats {
        body.push_str(&"(block ".repeat(depth));
        body.push_str("(br_table");
        for d in 0..depth {
            body.push_str(&format!(" {d}"));
        }
        body.push_str(&format!(" (local.get {}))", r % locals));
        for d in 0..depth {
            body.push_str(&format!(
                ") (local.set {} (i32.add (local.get {}) (i32.const {d})))",
                (d + r) % locals,
                (d * 7 + r + 1) % locals
            ));
        }
        body.push('\n');
    }
    let function = format!("(func (local {})\n{body})\n", "i32 ".repeat(locals));
    module(&function.repeat(functions))
}

struct Compiled {
    code: Option<i32>,
    signal: Option<i32>,
    stderr: String,
    peak_kib: i64,
    took: Duration,
}

/// `nicpolicy __compile-module` on `wasm`, as the host starts it, with a data limit of
/// `limit_mib`.
#[allow(clippy::zombie_processes)]
fn compile_in_child(wasm: &[u8], limit_mib: u64) -> Compiled {
    let settings = format!(
        "max-memory={},max-instances=12,pooling=1,keep-resident={},dirty-only=1,fuel=0,memory-limit={}",
        64 << 20,
        4 << 20,
        limit_mib << 20
    );
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_nicpolicy"))
        .args(["__compile-module", &settings])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nicpolicy starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let bytes = wasm.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&bytes);
    });
    let compiled = finished(child, started);
    let _ = writer.join();
    compiled
}

/// Reads `child`'s stderr to its end, then reaps it.
fn finished(child: std::process::Child, started: Instant) -> Compiled {
    let pid = child.id();
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr {
        let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
    }
    let (status, peak_kib) = common::reap(pid);
    Compiled {
        code: status.code(),
        signal: status.signal(),
        stderr,
        peak_kib,
        took: started.elapsed(),
    }
}

/// The built-in CAPVCD policy, as `nicpolicy export` writes it.
fn capvcd() -> Vec<u8> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("compile-limits");
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let path = dir.join("capvcd.wasm");
    let out = Command::new(env!("CARGO_BIN_EXE_nicpolicy"))
        .args(["export", "capvcd", "-o"])
        .arg(&path)
        .output()
        .expect("export runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read(&path).expect("exported")
}

#[test]
fn a_real_policy_compiles_far_inside_the_default_limit() {
    // 24 MiB of data is enough for the CAPVCD policy; the default allows 128.
    let run = compile_in_child(&capvcd(), 24);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
}

#[test]
fn a_module_within_every_count_bound_is_stopped_at_the_memory_limit() {
    // 20 functions of 56 KiB (30 times 150 nested blocks with a br_table to each), 256 locals:
    // within every count bound, and 670 MiB and 38 s to compile unbounded.
    let wasm = nested_br_tables(20, 150, 30, 256);
    assert!(wasm.len() < 1536 << 10);
    let run = compile_in_child(&wasm, 128);
    assert_ne!(run.code, Some(0), "compiled within 128 MiB?");
    // Rust aborts on a failed allocation.
    assert_eq!(run.signal, Some(6), "{}", run.stderr);
    assert!(
        run.stderr.contains("memory allocation"),
        "stopped by its allocation failing: {}",
        run.stderr
    );
    eprintln!(
        "nested br_tables: stopped after {:?} (peak resident {} MiB, the binary's pages included)",
        run.took,
        run.peak_kib / 1024
    );
}

/// `nicpolicy serve` with `dir/nicpolicy.yaml` (its cache in `dir`, a self-signed certificate,
/// the example cluster), marked `MARK=mark`.
fn serve_command(dir: &Path, mark: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_nicpolicy"));
    command
        .args([
            "serve",
            "--tls-self-signed",
            "--clusters",
            "examples/cluster.yaml",
        ])
        .arg("--ca-bundle")
        .arg(dir.join("ca.crt"))
        .arg("--config")
        .arg(dir.join("nicpolicy.yaml"))
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .env("NICPOLICY_CACHE_DIR", dir.join("cache"))
        .env(MARK, mark);
    command
}

/// Serves with a policy module `wasm` and the `compile` section `compile`; what `serve` did
/// at start (it refuses a policy that does not load and exits 2).
#[allow(clippy::zombie_processes)]
fn serve_with(name: &str, wasm: &[u8], compile: &str) -> Compiled {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("compile-limits-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    std::fs::write(dir.join("policy.wasm"), wasm).expect("module");
    std::fs::write(
        dir.join("nicpolicy.yaml"),
        format!(
            "listen: 127.0.0.1:0\ncompile: {compile}\npolicies:\n  VCDMachine:\n    - path: policy.wasm\n"
        ),
    )
    .expect("config");
    let started = Instant::now();
    let child = serve_command(&dir, name)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nicpolicy serve starts");
    finished(child, started)
}

/// The environment variable that marks the processes one test starts (inherited by their
/// compiler children), so tests running at once do not count each other's.
const MARK: &str = "NICPOLICY_COMPILE_LIMITS_TEST";

/// Processes running `nicpolicy __compile-module` now that carry `MARK=mark`.
fn compilers_running(mark: &str) -> usize {
    let tag = format!("{MARK}={mark}");
    std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| {
                    std::fs::read(e.path().join("cmdline")).is_ok_and(|cmdline| {
                        cmdline
                            .split(|b| *b == 0)
                            .any(|arg| arg == b"__compile-module")
                    })
                })
                .filter(|e| {
                    std::fs::read(e.path().join("environ")).is_ok_and(|environ| {
                        environ.split(|b| *b == 0).any(|v| v == tag.as_bytes())
                    })
                })
                .count()
        })
        .unwrap_or(0)
}

/// `VmHWM` (peak resident) and `VmRSS` of process `pid`, in KiB.
fn memory_of(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| {
                l.strip_prefix(name)?
                    .trim()
                    .strip_suffix(" kB")?
                    .parse()
                    .ok()
            })
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

#[test]
fn a_reload_to_a_policy_over_the_memory_limit_is_refused_and_the_server_stays_small() {
    // `nicpolicy serve` with the CAPVCD policy; the module file is then replaced by one whose
    // compile needs hundreds of MiB, five times over, as the reloads of a site trying variants.
    // Each reload is refused (the compile stops at its 64 MiB), the old policy keeps serving,
    // and the server's own peak memory stays where it was.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("compile-limits-reload");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    std::fs::write(dir.join("policy.wasm"), capvcd()).expect("module");
    std::fs::write(
        dir.join("nicpolicy.yaml"),
        "listen: 127.0.0.1:0\nreload: {interval: 200ms}\ncompile: {memory: 64Mi}\n\
         policies:\n  VCDMachine:\n    - path: policy.wasm\n",
    )
    .expect("config");
    let log = dir.join("serve.log");
    let mut serve = serve_command(&dir, "reload")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("nicpolicy serve starts");
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    let wait_for = |what: &str, count: usize| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while read_log().matches(what).count() < count {
            assert!(Instant::now() < deadline, "no {what:?}:\n{}", read_log());
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait_for("listening (HTTPS)", 1);
    let (started_peak, _) = memory_of(serve.id());
    for variant in 0..5 {
        std::fs::write(
            dir.join("policy.wasm"),
            nested_br_tables(20, 150 + variant, 30, 256),
        )
        .expect("costly module");
        wait_for("reload refused", variant + 1);
    }
    let (peak, now) = memory_of(serve.id());
    let running = serve.try_wait().expect("status").is_none();
    let compilers = compilers_running("reload");
    let _ = serve.kill();
    let _ = serve.wait();
    let text = read_log();
    eprintln!(
        "serve: peak {} MiB after start, {} MiB after 5 refused reloads (resident now {} MiB)",
        started_peak / 1024,
        peak / 1024,
        now / 1024
    );
    assert!(running, "serve exited:\n{text}");
    assert!(
        text.contains("the compile needed more than its memory limit of 64 MiB (compile.memory)"),
        "{text}"
    );
    assert_eq!(compilers, 0, "a compiler process outlived its answer");
    // Unbounded, one such compile alone took a process to 670 MiB.
    assert!(
        peak < started_peak + 32 * 1024,
        "serve grew from {} to {} MiB",
        started_peak / 1024,
        peak / 1024
    );
}

#[test]
fn serve_kills_a_compile_at_its_time_limit_and_leaves_none_running() {
    // Within the memory allowed, but about 30 s to compile.
    let run = serve_with(
        "time",
        &nested_br_tables(120, 150, 6, 256),
        "{timeout: 1s, memory: 2Gi}",
    );
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(
        run.stderr.contains("did not compile within 1s"),
        "{}",
        run.stderr
    );
    assert!(run.took < Duration::from_secs(10), "took {:?}", run.took);
    assert_eq!(
        compilers_running("time"),
        0,
        "a compiler process outlived its answer"
    );
}
