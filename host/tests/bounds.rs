//! Every reader of a file a user hands to nicpolicy is bounded: a small YAML file whose anchor is
//! aliased thousands of times (a few tens of kilobytes that expand to millions of nodes), or a
//! long value aliased a few dozen times (1 MiB that expands to 64 MiB of text), is refused with
//! the file and the bound, and the process stays small. Peak memory is read from
//! the kernel (`wait4`'s `ru_maxrss`), so it covers the whole process, parser included.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod common;

/// Far above what reading any of these files needs (about 15-20 MiB with the engine), far
/// below what the expansion took before the bound (about 300-580 MiB).
const PEAK_LIMIT_KIB: i64 = 96 * 1024;

/// A 40 KB file: an anchor of 3,000 items aliased 3,000 times, 9 million nodes replayed.
fn alias_file(dir: &Path) -> PathBuf {
    let mut text =
        String::from("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: mgmt-net\nanchor: &a\n");
    // Numbers: nodes without text, so the node bound is the one this file meets first.
    for i in 0..3000 {
        let _ = writeln!(text, "  - {i}");
    }
    text.push_str("copies:\n");
    for _ in 0..3000 {
        text.push_str("  - *a\n");
    }
    let path = dir.join("aliases.yaml");
    std::fs::write(&path, text).expect("write the alias file");
    path
}

/// A 1 MiB file: one 1 MiB value anchored, and aliased 64 times (64 MiB of text replayed,
/// 65 nodes: the node bound alone lets it through).
fn long_alias_file(dir: &Path) -> PathBuf {
    let mut text = String::from(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: mgmt-net\ndata:\n  anchor: &a ",
    );
    text.push_str(&"n".repeat(1 << 20));
    text.push_str("\n  copies:\n");
    for _ in 0..64 {
        text.push_str("    - *a\n");
    }
    let path = dir.join("long-aliases.yaml");
    std::fs::write(&path, text).expect("write the alias file");
    path
}

/// What the bound on the long-value file asks: refused within 64 MiB.
const LONG_PEAK_LIMIT_KIB: i64 = 64 * 1024;

struct Run {
    code: Option<i32>,
    /// stderr, then stdout (audit and test report unreadable files in their report).
    output: String,
    peak_kib: i64,
}

/// Runs nicpolicy with `args` and reports its exit code, stderr and peak resident memory.
// The child is reaped by `wait4` below, which clippy cannot see.
#[allow(clippy::zombie_processes)]
fn run(args: &[&str]) -> Run {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let child = Command::new(env!("CARGO_BIN_EXE_nicpolicy"))
        .args(args)
        .current_dir(&repo)
        .env(
            "NICPOLICY_CACHE_DIR",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("bounds-cache"),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nicpolicy starts");
    let pid = child.id();
    // Both pipes drained at once, so neither can fill and stall the child.
    let stdout = child.stdout.map(|mut pipe| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut pipe, &mut text);
            text
        })
    });
    let mut output = String::new();
    if let Some(mut pipe) = child.stderr {
        let _ = std::io::Read::read_to_string(&mut pipe, &mut output);
    }
    if let Some(text) = stdout.and_then(|thread| thread.join().ok()) {
        output.push_str(&text);
    }
    let (status, peak_kib) = common::reap(pid);
    Run {
        code: status.code(),
        output,
        peak_kib,
    }
}

/// `args` exit with an error naming `file` and its bound of `unit` (`nodes`, `bytes`), within
/// `peak_kib` of resident memory.
fn assert_refused(what: &str, args: &[&str], file: &Path, unit: &str, peak_kib: i64) {
    let run = run(args);
    assert!(
        run.code.is_some_and(|code| code != 0),
        "{what}: exits with an error, got {:?}: {}",
        run.code,
        run.output
    );
    assert!(
        run.output.contains("expands to more than") && run.output.contains(unit),
        "{what}: names the bound: {}",
        run.output
    );
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    assert!(
        run.output.contains(name),
        "{what}: names the file: {}",
        run.output
    );
    assert!(
        run.peak_kib < peak_kib,
        "{what}: peaked at {} KiB (limit {peak_kib} KiB)",
        run.peak_kib
    );
    eprintln!("{what}: refused, peak {} KiB", run.peak_kib);
}

#[test]
fn an_aliased_anchor_is_refused_by_every_reader_without_expanding() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bounds-aliases");
    std::fs::create_dir_all(&dir).expect("test dir");
    let file = alias_file(&dir);
    refused_by_every_reader(&dir, &file, "nodes", PEAK_LIMIT_KIB);
}

#[test]
fn a_long_value_aliased_is_refused_by_every_reader_within_64_mib() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bounds-long-aliases");
    std::fs::create_dir_all(&dir).expect("test dir");
    let file = long_alias_file(&dir);
    refused_by_every_reader(&dir, &file, "bytes", LONG_PEAK_LIMIT_KIB);
}

/// Every reader of a user's file (eval's three, review's two, serve's configuration, audit's
/// and test's folders) refuses `file` naming it and its bound of `unit`, within `peak_kib`.
fn refused_by_every_reader(dir: &Path, file: &Path, unit: &str, peak_kib: i64) {
    let aliases = file.to_str().expect("utf-8 path");
    let cases_dir = dir.join("cases");
    std::fs::create_dir_all(&cases_dir).expect("case dir");
    std::fs::copy(file, cases_dir.join(file.file_name().expect("a file"))).expect("case file");
    let audit_dir = dir.join("audit");
    std::fs::create_dir_all(&audit_dir).expect("audit dir");
    std::fs::copy(file, audit_dir.join(file.file_name().expect("a file"))).expect("audit file");

    let machine = "examples/machine.yaml";
    let cluster = "examples/cluster.yaml";
    let readers: [(&str, Vec<&str>); 8] = [
        ("eval --machine", vec!["eval", "--machine", aliases]),
        (
            "eval --cluster",
            vec!["eval", "--machine", machine, "--cluster", aliases],
        ),
        (
            "eval --inventory",
            vec![
                "eval",
                "--machine",
                machine,
                "--cluster",
                cluster,
                "--inventory",
                aliases,
            ],
        ),
        (
            "review --request",
            vec!["review", "--request", aliases, "--clusters", cluster],
        ),
        (
            "review --clusters",
            vec!["review", "--request", aliases, "--clusters", aliases],
        ),
        ("serve --config", vec!["serve", "--config", aliases]),
        (
            "audit",
            vec!["audit", audit_dir.to_str().expect("utf-8 path")],
        ),
        (
            "test",
            vec!["test", cases_dir.to_str().expect("utf-8 path")],
        ),
    ];
    for (what, args) in &readers {
        assert_refused(what, args, file, unit, peak_kib);
    }
}

#[test]
fn a_file_that_never_ends_is_refused_at_its_bound() {
    // /dev/zero has no end: a reader that trusts a file's length reads until memory runs out.
    let run = run(&["eval", "--machine", "/dev/zero"]);
    assert!(
        run.code.is_some_and(|code| code != 0),
        "exits with an error: {}",
        run.output
    );
    assert!(
        run.output.contains("/dev/zero"),
        "names the file: {}",
        run.output
    );
    assert!(
        run.peak_kib < 2 * PEAK_LIMIT_KIB,
        "peaked at {} KiB",
        run.peak_kib
    );
}
