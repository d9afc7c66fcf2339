//! Compiling a policy module in a child process, bounded in time and in memory.
//!
//! Counting a module's functions and bytes before compiling ([`CompileBounds`]) does not bound
//! Cranelift's memory: nesting and control flow drive it, and a module within every count (deeply
//! nested blocks with a `br_table` to each) took one compile past 280 MiB. Nor can Cranelift be
//! interrupted: a compile given up at the time limit ran on in the background. In a child process
//! both are bounded exactly:
//!
//! - the child limits its own data (`RLIMIT_DATA`: its heap and every private writable mapping)
//!   before it reads the module, so a compile that needs more fails its allocation and the child
//!   ends, while the host keeps serving;
//! - the parent kills the child at the time limit and reaps it: no compile runs past its answer,
//!   so at most as many compiles run as loads are waiting for one.
//!
//! The child is this same program run with [`CompilerProcess::args`] (for the `nicpolicy`
//! binary, the first argument `__compile-module`, which its `main` hands to [`child_main`] before
//! the command line is parsed: no help or completion shows it). It builds its
//! engine from the same [`EngineShape`] ([`crate::wasm_config`]) and writes the compiled artifact to
//! its standard output; the parent loads it with [`Module::deserialize`], which checks that it was
//! made for this engine.
//!
//! [`CompileBounds`]: crate::limits::CompileBounds

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wasmtime::{Engine, Module};

use crate::error::LoadError;
use crate::limits::MAX_MODULE_BYTES;
use crate::wasm_config::{wasmtime_config, EngineShape};

/// How to start a compiler child.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompilerProcess {
    /// The program: this one.
    pub program: PathBuf,
    /// The arguments that make it a compiler child (before the settings argument).
    pub args: Vec<OsString>,
    /// The child's data limit, in bytes: a compile that needs more fails.
    pub memory_bytes: u64,
}

impl CompilerProcess {
    /// Default [`CompilerProcess::memory_bytes`]: every module within the default compile
    /// bounds that compiles in time stays far below it (docs/benchmarks.md, "Compiling a
    /// policy"), and the shipped Deployment's 256 MiB holds it beside a serving host.
    pub const DEFAULT_MEMORY_BYTES: u64 = 128 << 20;

    /// The running program, started with `args`.
    ///
    /// # Errors
    /// The path of the running program cannot be found.
    pub fn this_program(args: &[&str], memory_bytes: u64) -> std::io::Result<CompilerProcess> {
        Ok(CompilerProcess {
            program: std::env::current_exe()?,
            args: args.iter().map(OsString::from).collect(),
            memory_bytes,
        })
    }
}

/// Most bytes of compiled artifact read back from a child (a module of `MAX_MODULE_BYTES`
/// compiles to a few times its size).
const MAX_ARTIFACT_BYTES: usize = 256 << 20;
/// Most bytes of a child's error output kept.
const MAX_STDERR_BYTES: usize = 16 << 10;

/// What a child needs to build the same engine, and its memory limit: one argument,
/// `key=value` pairs separated by commas.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ChildSettings {
    shape: EngineShape,
    memory_limit: u64,
}

impl ChildSettings {
    fn of(shape: &EngineShape, memory_limit: u64) -> ChildSettings {
        ChildSettings {
            shape: *shape,
            memory_limit,
        }
    }

    fn encode(&self) -> String {
        format!(
            "max-memory={},max-instances={},pooling={},keep-resident={},dirty-only={},fuel={},memory-limit={}",
            self.shape.max_memory_bytes,
            self.shape.max_instances,
            u8::from(self.shape.pooling),
            self.shape.keep_resident_bytes,
            u8::from(self.shape.reset_dirty_pages_only),
            u8::from(self.shape.count_fuel),
            self.memory_limit
        )
    }

    fn parse(text: &str) -> Result<ChildSettings, String> {
        let mut fields = std::collections::BTreeMap::new();
        for pair in text.split(',') {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("{pair:?} is not key=value"))?;
            let value: u64 = value
                .parse()
                .map_err(|_| format!("{key}: {value:?} is not a number"))?;
            fields.insert(key, value);
        }
        let get = |key: &str| {
            fields
                .get(key)
                .copied()
                .ok_or_else(|| format!("{key} is missing"))
        };
        let size = |key: &str| get(key).and_then(|v| usize::try_from(v).map_err(|e| e.to_string()));
        Ok(ChildSettings {
            shape: EngineShape {
                max_memory_bytes: size("max-memory")?,
                max_instances: u32::try_from(get("max-instances")?).map_err(|e| e.to_string())?,
                pooling: get("pooling")? == 1,
                keep_resident_bytes: size("keep-resident")?,
                reset_dirty_pages_only: get("dirty-only")? == 1,
                count_fuel: get("fuel")? == 1,
            },
            memory_limit: get("memory-limit")?,
        })
    }
}

/// Compiles `bytes` for `engine` in a child started as `process` says, waiting at most `limit`.
///
/// # Errors
/// [`LoadError::CompileTimeout`] when the child did not finish within `limit` (it is killed);
/// [`LoadError::Compile`] when it refused the module, went over its memory limit (named in the
/// message), or could not be started.
// Loading the child's artifact is `unsafe` in Wasmtime: see the SAFETY note below.
#[allow(unsafe_code)]
pub fn compile_in_child(
    process: &CompilerProcess,
    engine: &Engine,
    shape: &EngineShape,
    bytes: &[u8],
    limit: Duration,
) -> Result<Module, LoadError> {
    let started = Instant::now();
    let settings = ChildSettings::of(shape, process.memory_bytes);
    let mut child = Command::new(&process.program)
        .args(&process.args)
        .arg(settings.encode())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| {
            LoadError::Compile(format!(
                "cannot start the compiler process {}: {err}",
                process.program.display()
            ))
        })?;
    // The module in, the artifact and any error out, each on a thread of its own: no pipe can
    // fill up and stall the other side.
    let input = child.stdin.take().map(|mut stdin| {
        let module = bytes.to_vec();
        std::thread::spawn(move || {
            let _ = stdin.write_all(&module);
        })
    });
    let output = child.stdout.take().map(|stdout| {
        std::thread::spawn(move || {
            let mut artifact = Vec::new();
            let _ = stdout
                .take(MAX_ARTIFACT_BYTES as u64 + 1)
                .read_to_end(&mut artifact);
            artifact
        })
    });
    let errors = child.stderr.take().map(|stderr| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            let _ = stderr.take(MAX_STDERR_BYTES as u64).read_to_end(&mut text);
            String::from_utf8_lossy(&text).trim().to_string()
        })
    });
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() >= limit => {
                // Killed and reaped: nothing of this compile runs past the answer.
                let _ = child.kill();
                let _ = child.wait();
                return Err(LoadError::CompileTimeout { limit });
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(err) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(LoadError::Compile(format!(
                    "cannot wait for the compiler process: {err}"
                )));
            }
        }
    };
    if let Some(input) = input {
        let _ = input.join();
    }
    let artifact = output.and_then(|o| o.join().ok()).unwrap_or_default();
    let errors = errors.and_then(|e| e.join().ok()).unwrap_or_default();
    if !status.success() {
        return Err(LoadError::Compile(child_failure(
            status,
            &errors,
            process.memory_bytes,
        )));
    }
    if artifact.len() > MAX_ARTIFACT_BYTES {
        return Err(LoadError::Compile(format!(
            "the compiled module is over {} MiB",
            MAX_ARTIFACT_BYTES >> 20
        )));
    }
    // SAFETY: the artifact was written by this program (the compiler child runs the same
    // binary) from the module's bytes, for an engine built from the same configuration; Wasmtime
    // checks its header and that it was compiled for this engine before using it.
    unsafe { Module::deserialize(engine, &artifact) }.map_err(|err| {
        LoadError::Compile(format!(
            "the compiler process's output does not load: {err:#}"
        ))
    })
}

/// What a failed child's exit says. Only an allocation failure (the child's data limit, which
/// it reports before it aborts) or the kernel's SIGKILL (a cgroup's OOM killer) is blamed on
/// memory; any other signal is named as what it is.
fn child_failure(status: std::process::ExitStatus, errors: &str, memory_bytes: u64) -> String {
    let out_of_memory = errors.contains("memory allocation") || errors.contains("out of memory");
    let limit = memory_bytes >> 20;
    #[cfg(unix)]
    {
        use rustix::process::Signal;
        use std::os::unix::process::ExitStatusExt;
        match status.signal() {
            Some(signal) if out_of_memory => {
                return format!(
                    "the compile needed more than its memory limit of {limit} MiB \
                     (compile.memory) and was stopped ({})",
                    signal_name(signal)
                )
            }
            Some(signal) if signal == Signal::KILL.as_raw() => {
                return format!(
                    "the compiler process was killed ({}): by the kernel's out-of-memory \
                     killer when the pod's memory ran out (its own limit is {limit} MiB, \
                     compile.memory), or by an operator",
                    signal_name(signal)
                )
            }
            Some(signal) => {
                let said = if errors.is_empty() {
                    String::new()
                } else {
                    format!(": {errors}")
                };
                return format!(
                    "the compiler process died of {} while compiling the module{said}",
                    signal_name(signal)
                );
            }
            None => {}
        }
    }
    if out_of_memory {
        return format!(
            "the compile needed more than its memory limit of {limit} MiB (compile.memory)"
        );
    }
    if errors.is_empty() {
        format!("the compiler process failed ({status})")
    } else {
        errors.to_string()
    }
}

/// A signal by its name, as `kill -l` spells it, and its number.
#[cfg(unix)]
fn signal_name(signal: i32) -> String {
    use rustix::process::Signal;
    const NAMED: [(Signal, &str); 8] = [
        (Signal::ABORT, "SIGABRT"),
        (Signal::BUS, "SIGBUS"),
        (Signal::FPE, "SIGFPE"),
        (Signal::ILL, "SIGILL"),
        (Signal::KILL, "SIGKILL"),
        (Signal::SEGV, "SIGSEGV"),
        (Signal::TERM, "SIGTERM"),
        (Signal::XCPU, "SIGXCPU"),
    ];
    match NAMED.iter().find(|(s, _)| s.as_raw() == signal) {
        Some((_, name)) => format!("{name}, signal {signal}"),
        None => format!("signal {signal}"),
    }
}

/// The compiler child: limits its data to what `settings` says, reads a module from standard
/// input, compiles it for an engine built from `settings` and writes the artifact to standard
/// output. Returns the exit code: 0 compiled, 1 the module did not compile, 2 bad settings or
/// input.
pub fn child_main(settings: &str) -> u8 {
    let settings = match ChildSettings::parse(settings) {
        Ok(settings) => settings,
        Err(why) => {
            eprintln!("compiler settings: {why}");
            return 2;
        }
    };
    if let Err(why) = limit_memory(settings.memory_limit) {
        eprintln!("cannot limit the compiler's memory: {why}");
        return 2;
    }
    let mut bytes = Vec::new();
    if let Err(err) = std::io::stdin()
        .take(MAX_MODULE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
    {
        eprintln!("cannot read the module: {err}");
        return 2;
    }
    if bytes.len() > MAX_MODULE_BYTES {
        eprintln!("the module is over {} bytes", MAX_MODULE_BYTES);
        return 2;
    }
    let engine = match Engine::new(&wasmtime_config(&settings.shape)) {
        Ok(engine) => engine,
        Err(err) => {
            eprintln!("cannot create the Wasm engine: {err:#}");
            return 2;
        }
    };
    match engine.precompile_module(&bytes) {
        Ok(artifact) => match std::io::stdout().lock().write_all(&artifact) {
            Ok(()) => 0,
            Err(err) => {
                eprintln!("cannot write the compiled module: {err}");
                2
            }
        },
        Err(err) => {
            eprintln!("{err:#}");
            1
        }
    }
}

/// Limits this process's data (heap and private writable mappings) to `bytes`. The address
/// space reserved for instances is not data (it is mapped without access), so the engine is
/// built as the host's is.
#[cfg(unix)]
fn limit_memory(bytes: u64) -> Result<(), String> {
    use rustix::process::{setrlimit, Resource, Rlimit};
    setrlimit(
        Resource::Data,
        Rlimit {
            current: Some(bytes),
            maximum: Some(bytes),
        },
    )
    .map_err(|err| err.to_string())
}

#[cfg(not(unix))]
fn limit_memory(_bytes: u64) -> Result<(), String> {
    Err("a compiler process needs a Unix data limit".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_round_trip_and_errors_name_the_key() {
        let settings = ChildSettings::of(&crate::HostConfig::default().shape(), 128 << 20);
        assert_eq!(ChildSettings::parse(&settings.encode()), Ok(settings));
        assert_eq!(
            ChildSettings::parse("max-memory=1").unwrap_err(),
            "max-instances is missing"
        );
        assert!(ChildSettings::parse("max-memory=lots")
            .unwrap_err()
            .contains("max-memory"));
    }

    #[cfg(unix)]
    #[test]
    fn a_childs_signal_is_named_and_only_memory_failures_blame_memory() {
        use std::os::unix::process::ExitStatusExt;
        let signalled = |signal: i32| std::process::ExitStatus::from_raw(signal);
        let abort_oom = child_failure(
            signalled(libc::SIGABRT),
            "memory allocation of 4096 bytes failed",
            128 << 20,
        );
        assert!(
            abort_oom.starts_with("the compile needed more than its memory limit of 128 MiB"),
            "{abort_oom}"
        );
        assert!(abort_oom.contains("SIGABRT, signal 6"), "{abort_oom}");
        let segv = child_failure(signalled(libc::SIGSEGV), "", 128 << 20);
        assert_eq!(
            segv,
            "the compiler process died of SIGSEGV, signal 11 while compiling the module"
        );
        assert!(!segv.contains("memory limit"));
        let killed = child_failure(signalled(libc::SIGKILL), "", 128 << 20);
        assert!(killed.contains("killed (SIGKILL, signal 9)"), "{killed}");
    }
}
