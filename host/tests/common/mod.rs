//! What the host's process tests share. Each test binary uses part of it.
#![allow(dead_code)]

use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Output};

/// A finished command's exit status, stdout and stderr, for assertion messages.
pub fn text(output: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Asserts that `out` exited with `code` and that its stderr says each of `words`.
pub fn assert_exit_saying(out: &Output, code: i32, words: &[&str]) {
    assert_eq!(out.status.code(), Some(code), "{}", text(out));
    let said = String::from_utf8_lossy(&out.stderr);
    for word in words {
        assert!(said.contains(word), "{word:?} not said\n{}", text(out));
    }
}

/// Waits for child `pid` and returns its exit status and peak resident memory in KiB
/// (`wait4`'s `ru_maxrss`, which also covers the descendants it reaped). `wait4` is the one call
/// that reports a child's own peak; std's `wait` drops it.
#[allow(unsafe_code)]
pub fn reap(pid: u32) -> (ExitStatus, i64) {
    let pid = pid as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is this process's child, not yet reaped (its Child was never waited on);
    // both out pointers are to live locals.
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(reaped, pid, "wait4: {}", std::io::Error::last_os_error());
    (ExitStatus::from_raw(status), usage.ru_maxrss)
}

/// The `nicpolicy` binary, to be run from the workspace's root (the examples' paths are
/// relative to it).
pub fn nicpolicy_command() -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_nicpolicy"));
    command.current_dir(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("workspace root"),
    );
    command
}

/// One engine for a test binary's policies, without a compiled-module cache.
pub fn host() -> &'static nicpolicy::Host {
    static HOST: std::sync::OnceLock<nicpolicy::Host> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        nicpolicy::Host::new(nicpolicy::HostConfig {
            cache_dir: None,
            max_instances: 16,
            ..nicpolicy::HostConfig::default()
        })
        .expect("engine starts")
    })
}

/// An ABI v1 module that accepts any settings and whose `nicpolicy_evaluate` is `evaluate`
/// (WebAssembly text: `unreachable`, a loop that never ends, ...).
pub fn abi_module(evaluate: &str) -> Vec<u8> {
    wat::parse_str(format!(
        r#"(module
          (memory (export "memory") 1)
          (data (i32.const 16) "{{\"valid\":true}}")
          (func (export "nicpolicy_abi_version") (result i32) i32.const 1)
          (func (export "nicpolicy_alloc") (param i32) (result i32) i32.const 1024)
          (func (export "nicpolicy_validate_settings") (param i32 i32) (result i64)
            i64.const 68719476750)
          (func (export "nicpolicy_evaluate") (param i32 i32) (result i64)
            {evaluate}))"#
    ))
    .expect("valid wat")
}
