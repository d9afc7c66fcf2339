//! Helpers for the wasm test harness: a host set up for tests and hand-written ABI v1 modules in
//! WebAssembly text, so hostile behaviour can be produced on purpose.

use std::path::PathBuf;
use std::time::Duration;

use nicpolicy::{Host, HostConfig, Limits, PolicyOptions};
use nicpolicy_plugin::abi::pack;

pub mod fuzzing;

/// A host with a private module cache under the test target directory.
pub fn host(cache_dir: PathBuf) -> Host {
    Host::new(HostConfig {
        cache_dir: Some(cache_dir),
        ..HostConfig::default()
    })
    .expect("engine starts")
}

/// Options with a short time limit and a small memory cap, so hostile tests finish quickly.
pub fn tight_options() -> PolicyOptions {
    PolicyOptions {
        limits: Limits::default()
            .with_timeout(Duration::from_millis(200))
            .with_memory_bytes(8 << 20),
        ..PolicyOptions::default()
    }
}

/// Where the fixed strings of [`module`] live in memory.
const VALID_AT: u32 = 16;
const VALID: &str = r#"{"valid":true}"#;
const ALLOW_AT: u32 = 64;
const ALLOW: &str = r#"{"allowed":true}"#;
/// Free-form data segment for a module's own output.
pub const DATA_AT: u32 = 256;

/// Packed result pointing at the "allowed" decision of [`Module`].
pub fn allow_result() -> u64 {
    pack(ALLOW_AT, ALLOW.len() as u32)
}

/// Packed result pointing at `data` placed by [`Module::data`].
pub fn data_result(data: &str) -> u64 {
    pack(DATA_AT, data.len() as u32)
}

/// An ABI v1 module in WebAssembly text with parts to override.
#[derive(Clone, Debug)]
pub struct Module {
    /// Body of `nicpolicy_evaluate (param $ptr i32) (param $len i32) (result i64)`.
    pub evaluate: String,
    /// Value `nicpolicy_abi_version` returns.
    pub abi_version: i32,
    /// Import declarations.
    pub imports: String,
    /// More module fields (functions, start, data).
    pub extra: String,
    /// Text stored at [`DATA_AT`].
    pub data: String,
    /// Initial memory pages.
    pub pages: u32,
    /// Instructions run first in `nicpolicy_alloc (param $len i32) (result i32)`; they must
    /// leave the stack as they found it.
    pub alloc_prefix: String,
}

impl Module {
    /// A module whose evaluation runs `body` (which must leave an i64 on the stack).
    pub fn evaluating(body: &str) -> Module {
        Module {
            evaluate: body.to_string(),
            abi_version: 1,
            imports: String::new(),
            extra: String::new(),
            data: String::new(),
            pages: 2,
            alloc_prefix: String::new(),
        }
    }

    /// A well-behaved module that allows every machine.
    pub fn allowing() -> Module {
        Module::evaluating(&format!("i64.const {}", allow_result()))
    }

    /// A module returning `data` as its output.
    pub fn returning(data: &str) -> Module {
        let mut module = Module::evaluating(&format!("i64.const {}", data_result(data)));
        module.data = data.to_string();
        module
    }

    /// The module's text.
    pub fn wat(&self) -> String {
        let escape = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
        format!(
            r#"(module
  {imports}
  (memory (export "memory") {pages})
  (global $heap (mut i32) (i32.const 65536))
  (data (i32.const {VALID_AT}) "{valid}")
  (data (i32.const {ALLOW_AT}) "{allow}")
  (data (i32.const {DATA_AT}) "{data}")
  (func (export "nicpolicy_abi_version") (result i32) i32.const {abi})
  (func (export "nicpolicy_alloc") (param $len i32) (result i32)
    (local $p i32)
    {alloc_prefix}
    global.get $heap
    local.set $p
    global.get $heap
    local.get $len
    i32.add
    global.set $heap
    local.get $p)
  (func (export "nicpolicy_validate_settings") (param i32 i32) (result i64)
    i64.const {valid_result})
  (func (export "nicpolicy_evaluate") (param $ptr i32) (param $len i32) (result i64)
    {evaluate})
  {extra}
)"#,
            imports = self.imports,
            pages = self.pages,
            valid = escape(VALID),
            allow = escape(ALLOW),
            data = escape(&self.data),
            abi = self.abi_version,
            valid_result = pack(VALID_AT, VALID.len() as u32),
            evaluate = self.evaluate,
            extra = self.extra,
            alloc_prefix = self.alloc_prefix,
        )
    }

    /// The module's binary.
    pub fn wasm(&self) -> Vec<u8> {
        wat::parse_str(self.wat()).unwrap_or_else(|err| panic!("{err}\n{}", self.wat()))
    }
}

/// Runs every case file under `dir` against `policy` (as `nicpolicy test` does); returns how
/// many ran and a description of each failure (mismatches and the actual outcome, or why the
/// case could not load).
pub fn run_suite(policy: &nicpolicy::Policy, dir: &std::path::Path) -> (usize, Vec<String>) {
    use nicpolicy::cases::{discover, Outcome, Report};

    let paths = discover(&[dir.to_path_buf()]).unwrap_or_default();
    let chain = nicpolicy::PolicyChain::new(policy.clone());
    let report = Report::run(&paths, &chain, |_| {});
    let failures = report
        .failures()
        .map(|case| match &case.outcome {
            Outcome::Failed { mismatches, actual } => format!(
                "{}:\n  {}\n  actual:\n{actual}",
                case.path.display(),
                mismatches.join("\n  ")
            ),
            Outcome::Passed => String::new(),
        })
        .collect();
    (paths.len(), failures)
}

/// Runs the suite in `dir` and fails the test unless it has at least `min_cases` cases and all
/// pass.
pub fn assert_suite_passes(policy: &nicpolicy::Policy, dir: &std::path::Path, min_cases: usize) {
    let (count, failures) = run_suite(policy, dir);
    assert!(
        count >= min_cases,
        "only {count} cases in {}",
        dir.display()
    );
    assert!(
        failures.is_empty(),
        "{} failing cases:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// One case evaluated through the host.
pub struct Decided {
    /// The case.
    pub case: nicpolicy::cases::Case,
    /// Its request with the case's settings in place, as the policy received it.
    pub request: nicpolicy_plugin::Request,
    /// What the policy decided.
    pub decision: nicpolicy_plugin::Decision,
}

/// Every case in `dir` whose settings the policy accepts, evaluated (cases whose settings are
/// refused at load have nothing to evaluate and are left out).
pub fn decided_cases(policy: &nicpolicy::Policy, dir: &std::path::Path) -> Vec<Decided> {
    use nicpolicy::cases::{discover, Case};

    let paths = discover(&[dir.to_path_buf()]).expect("case directory lists");
    let mut decided = Vec::new();
    for path in paths {
        let case = Case::load(&path).unwrap_or_else(|err| panic!("{err}"));
        let Ok(configured) = policy.with_settings(case.settings.clone()) else {
            continue;
        };
        let decision = configured
            .evaluate(&case.request)
            .unwrap_or_else(|err| panic!("{}: {err}", path.display()))
            .decision;
        let mut request = case.request.clone();
        request.settings = case.settings.clone();
        decided.push(Decided {
            case,
            request,
            decision,
        });
    }
    decided
}

/// Modules that are costly to compile, for the compile bounds (docs/benchmarks.md, "Compiling a
/// policy"): a valid ABI v1 module whose `extra` functions have the given shape.
pub mod costly {
    use super::Module;
    use std::fmt::Write as _;

    /// `count` functions that do nothing.
    pub fn tiny_functions(count: usize) -> Module {
        let mut module = Module::allowing();
        module.extra = "(func)\n".repeat(count);
        module
    }

    /// `count` functions, each declaring `locals` i32 locals and with a body of about
    /// `body_bytes` bytes: blocks that branch on one local and write another, cycling through
    /// them all, so every local lives across many blocks (the compiler's worst case per byte).
    pub fn heavy_functions(count: usize, locals: usize, body_bytes: usize) -> Module {
        let locals = locals.max(2);
        // `block; local.get a; br_if 0; local.get b; i32.const 1; i32.add; local.set c; end`
        // encodes in 17 bytes with two-byte local indexes (fewer with one-byte ones).
        let steps = body_bytes / 17;
        let mut body = String::with_capacity(steps * 64);
        for step in 0..steps {
            let (a, b, c) = (
                step % locals,
                (step * 7 + 1) % locals,
                (step * 13 + 2) % locals,
            );
            let _ = writeln!(
                body,
                "(block (br_if 0 (local.get {a})) (local.set {c} (i32.add (local.get {b}) (i32.const 1))))"
            );
        }
        let function = format!("(func (local {})\n{body})\n", "i32 ".repeat(locals));
        let mut module = Module::allowing();
        module.extra = function.repeat(count);
        module
    }
}
