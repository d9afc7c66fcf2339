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
