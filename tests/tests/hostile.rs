//! Policies that misbehave: each gets its typed error, and the host keeps evaluating good
//! policies correctly afterwards.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use nicpolicy::{builtin, EvalError, Host, HostConfig, LoadError, Policy, PolicyOptions};
use nicpolicy_plugin::abi::pack;
use nicpolicy_plugin::binary;
use nicpolicy_plugin::schema::{EvaluateOutput, Reason, Violation};
use nicpolicy_plugin::{testing, Decision, Request};
use nicpolicy_tests::{host, tight_options, Module};

fn test_host() -> Host {
    host(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hostile-cache"))
}

fn request() -> Request {
    testing::worker(&["storage-net", "workload-net"])
}

/// The CAPVCD policy still gives the right plan on the same host.
fn assert_host_healthy(host: &Host) {
    let policy = host
        .load(builtin::CAPVCD_WASM, PolicyOptions::default())
        .expect("CAPVCD policy loads");
    assert_right_plan(&policy);
}

/// A loaded CAPVCD policy plans [`request`] correctly.
fn assert_right_plan(policy: &Policy) {
    let decision = policy.evaluate(&request()).expect("evaluates").decision;
    let networks: Vec<&str> = decision.nics.iter().map(|n| n.network.as_str()).collect();
    assert_eq!(networks, ["mgmt-net", "storage-net", "workload-net"]);
    assert!(decision.allowed);
}

fn eval_error(host: &Host, module: &Module) -> EvalError {
    let policy = host
        .load(&module.wasm(), tight_options())
        .unwrap_or_else(|err| panic!("module loads: {err}"));
    match policy.evaluate(&request()) {
        Ok(evaluation) => panic!("expected an error, got {:?}", evaluation.decision),
        Err(err) => err,
    }
}

fn load_error(host: &Host, module: &Module) -> LoadError {
    match host.load(&module.wasm(), tight_options()) {
        Ok(_) => panic!("expected the module to be refused"),
        Err(err) => err,
    }
}

#[test]
fn infinite_loop_is_stopped_by_the_time_limit() {
    let host = test_host();
    let started = Instant::now();
    let err = eval_error(
        &host,
        &Module::evaluating("(loop $spin (br $spin)) unreachable"),
    );
    let elapsed = started.elapsed();
    assert!(
        matches!(err, EvalError::Timeout(limit) if limit == Duration::from_millis(200)),
        "{err}"
    );
    // Generous bound: the point is that the loop ends, not a precise figure.
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    assert_host_healthy(&host);
}

#[test]
fn loop_in_start_function_refuses_the_module() {
    let host = test_host();
    let mut module = Module::allowing();
    module.extra = "(func $spin (loop $l (br $l))) (start $spin)".into();
    let err = load_error(&host, &module);
    assert!(
        matches!(err, LoadError::Runtime(EvalError::Timeout(_))),
        "{err}"
    );
    assert_host_healthy(&host);
}

#[test]
fn infinite_loop_in_alloc_is_stopped_by_the_time_limit() {
    let host = test_host();
    // The settings (`null`, 4 bytes) pass, so the module loads; the request (hundreds of
    // bytes) makes nicpolicy_alloc spin.
    let mut module = Module::allowing();
    module.alloc_prefix =
        "(if (i32.gt_u (local.get $len) (i32.const 64)) (then (loop $spin (br $spin))))".into();
    let started = Instant::now();
    let err = eval_error(&host, &module);
    let elapsed = started.elapsed();
    assert!(
        matches!(err, EvalError::Timeout(limit) if limit == Duration::from_millis(200)),
        "{err}"
    );
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    assert_host_healthy(&host);

    // Spinning on every call refuses the module: loading allocates for the settings check.
    module.alloc_prefix = "(loop $spin (br $spin))".into();
    let started = Instant::now();
    let err = load_error(&host, &module);
    assert!(
        matches!(err, LoadError::Runtime(EvalError::Timeout(_))),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_host_healthy(&host);
}

#[test]
fn unreachable_is_a_trap_with_its_message() {
    let host = test_host();
    let err = eval_error(&host, &Module::evaluating("unreachable"));
    match &err {
        EvalError::Trap { message } => assert!(message.contains("unreachable"), "{message}"),
        other => panic!("expected a trap, got {other}"),
    }
    assert_host_healthy(&host);
}

#[test]
fn unbounded_memory_growth_hits_the_memory_cap() {
    let host = test_host();
    let grow = "(loop $more (br_if $more (i32.ne (memory.grow (i32.const 16)) (i32.const -1)))) unreachable";
    let err = eval_error(&host, &Module::evaluating(grow));
    assert!(
        matches!(err, EvalError::MemoryLimit { limit } if limit == 8 << 20),
        "{err}"
    );
    assert_host_healthy(&host);
}

#[test]
fn initial_memory_over_the_cap_is_a_memory_error() {
    let host = test_host();
    let mut module = Module::allowing();
    module.pages = 200; // 12.5 MiB, over the 8 MiB cap
    let err = load_error(&host, &module);
    assert!(
        matches!(err, LoadError::Runtime(EvalError::MemoryLimit { .. })),
        "{err}"
    );
}

/// A data segment of `bytes` bytes of filler at `offset`, followed by `tail`.
fn data_segment(offset: u32, bytes: usize, tail: &str) -> String {
    format!(
        r#"(data (i32.const {offset}) "{}{}")"#,
        " ".repeat(bytes),
        tail.replace('"', "\\\"")
    )
}

#[test]
fn data_segment_beyond_the_memory_cap_refuses_the_module() {
    let host = test_host();
    // 2 MiB of data at 7 MiB in a 10 MiB memory: instantiating needs more than the 8 MiB cap.
    let mut module = Module::allowing();
    module.pages = 160;
    module.extra = data_segment(7 << 20, 2 << 20, "");
    let started = Instant::now();
    let err = load_error(&host, &module);
    assert!(
        matches!(err, LoadError::Runtime(EvalError::MemoryLimit { limit }) if limit == 8 << 20),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_host_healthy(&host);
}

#[test]
fn data_segment_outside_the_declared_memory_refuses_the_module() {
    let host = test_host();
    // Memory of two pages, a segment at 1 GiB: instantiation fails, nothing grows.
    let mut module = Module::allowing();
    module.extra = data_segment(1 << 30, 16, "");
    let started = Instant::now();
    let err = load_error(&host, &module);
    assert!(
        matches!(&err, LoadError::Runtime(EvalError::Trap { message }) if message.contains("out of bounds")),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_host_healthy(&host);
}

#[test]
fn large_legal_data_segment_is_served() {
    let host = test_host();
    // 4 MiB of data in a 5 MiB memory, under the 8 MiB cap; the decision sits at its end, so
    // every evaluation reads the segment as the module declared it.
    let decision = r#"{"allowed":true,"warnings":["read from the end of a 4 MiB data segment"]}"#;
    let (offset, filler) = (1 << 20, 4 << 20);
    let mut module = Module::evaluating(&format!(
        "i64.const {}",
        pack(offset + filler as u32, decision.len() as u32)
    ));
    // 81 pages: the decision ends just past the 5 MiB mark.
    module.pages = 81;
    module.extra = data_segment(offset, filler, decision);
    let wasm = module.wasm();
    let started = Instant::now();
    let policy = host.load(&wasm, tight_options()).expect("loads");
    let loaded = started.elapsed();
    let started = Instant::now();
    for _ in 0..50 {
        let evaluation = policy.evaluate(&request()).expect("evaluates");
        assert_eq!(
            evaluation.decision.warnings,
            ["read from the end of a 4 MiB data segment"]
        );
    }
    let evaluated = started.elapsed();
    assert!(loaded < Duration::from_secs(10), "load took {loaded:?}");
    assert!(
        evaluated < Duration::from_secs(5),
        "50 calls took {evaluated:?}"
    );
    assert_host_healthy(&host);
}

/// 20,000 small functions: under the size cap, yet many seconds of Cranelift work.
fn slow_to_compile() -> Module {
    let body = " local.get 0 i64.const 3 i64.mul local.set 0".repeat(30);
    let mut module = Module::allowing();
    module.extra = (0..20_000)
        .map(|i| format!("(func $f{i} (param i64) (result i64){body} local.get 0)\n"))
        .collect();
    module
}

#[test]
fn module_slow_to_compile_is_refused_at_the_compile_limit() {
    let limit = Duration::from_secs(2);
    // The CAPVCD policy comes from a cache filled by a host without the short limit: compiling
    // it can take over 2 s in a debug build on a busy machine.
    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hostile-slow-cache");
    host(cache.clone())
        .load(builtin::CAPVCD_WASM, PolicyOptions::default())
        .expect("CAPVCD policy loads");
    let host = Host::new(HostConfig {
        cache_dir: Some(cache),
        compile_timeout: limit,
        // The default bounds refuse this module before compiling; the time limit is the
        // second line for a host configured with looser bounds.
        compile_bounds: nicpolicy::limits::CompileBounds {
            max_functions: 50_000,
            max_code_bytes: 8 << 20,
            ..Default::default()
        },
        ..HostConfig::default()
    })
    .expect("engine starts");
    // Loaded before: the abandoned compile below still runs for seconds on a core, and a
    // second compile would compete with it for a core.
    let capvcd = host
        .load(builtin::CAPVCD_WASM, PolicyOptions::default())
        .expect("CAPVCD policy loads");
    assert_eq!(*capvcd.cache_status(), nicpolicy::cache::CacheStatus::Hit);
    let wasm = slow_to_compile().wasm();
    assert!(wasm.len() < nicpolicy::limits::MAX_MODULE_BYTES);
    let started = Instant::now();
    let err = match host.load(&wasm, tight_options()) {
        Ok(_) => panic!("expected the compile limit to refuse the module"),
        Err(err) => err,
    };
    let waited = started.elapsed();
    assert!(
        matches!(err, LoadError::CompileTimeout { limit: l } if l == limit),
        "{err}"
    );
    assert!(
        err.to_string().contains("did not compile within 2s"),
        "{err}"
    );
    // The caller got its answer at the limit, not when the abandoned compile ended.
    assert!(waited < Duration::from_secs(6), "refused after {waited:?}");
    assert_right_plan(&capvcd);
    host.load(&Module::allowing().wasm(), tight_options())
        .expect("a small module still compiles on the same host");
}

#[test]
fn deep_recursion_is_a_stack_overflow_trap() {
    let host = test_host();
    let mut module = Module::evaluating("i32.const 0 call $down drop i64.const 0");
    module.extra =
        "(func $down (param i32) (result i32) local.get 0 i32.const 1 i32.add call $down)".into();
    let err = eval_error(&host, &module);
    match &err {
        EvalError::Trap { message } => assert!(message.contains("stack"), "{message}"),
        other => panic!("expected a trap, got {other}"),
    }
    assert_host_healthy(&host);
}

#[test]
fn result_outside_memory_is_bad_output() {
    let host = test_host();
    let err = eval_error(
        &host,
        &Module::evaluating(&format!("i64.const {}", pack(0xFFFF_0000, 64))),
    );
    assert!(
        matches!(&err, EvalError::BadOutput(m) if m.contains("outside memory")),
        "{err}"
    );
    assert_host_healthy(&host);
}

#[test]
fn result_over_the_size_cap_is_refused() {
    let host = test_host();
    let err = eval_error(
        &host,
        &Module::evaluating(&format!("i64.const {}", pack(0, 2 << 20))),
    );
    assert!(
        matches!(err, EvalError::OutputTooLarge { size, .. } if size == 2 << 20),
        "{err}"
    );
}

#[test]
fn output_that_is_not_json_or_not_a_decision_is_bad_output() {
    let host = test_host();
    let err = eval_error(&host, &Module::returning("allowed: yes"));
    assert!(
        matches!(&err, EvalError::BadOutput(m) if m.contains("not a decision")),
        "{err}"
    );
    let err = eval_error(&host, &Module::returning(r#"{"allowed":"yes"}"#));
    assert!(
        matches!(&err, EvalError::BadOutput(m) if m.contains("allowed")),
        "{err}"
    );
    let err = eval_error(&host, &Module::returning(r#"{"allowed":false}"#));
    assert!(
        matches!(&err, EvalError::BadOutput(m) if m.contains("without a violation")),
        "{err}"
    );
    assert_host_healthy(&host);
}

#[test]
fn invalid_utf8_output_is_bad_output() {
    let host = test_host();
    let mut module = Module::evaluating(&format!("i64.const {}", pack(256, 4)));
    module.extra = r#"(data (i32.const 256) "\ff\fe\fd\fc")"#.into();
    module.data = String::new();
    let err = eval_error(&host, &module);
    assert!(
        matches!(&err, EvalError::BadOutput(m) if m.contains("UTF-8")),
        "{err}"
    );
}

#[test]
fn error_envelope_is_a_policy_error() {
    let host = test_host();
    let err = eval_error(
        &host,
        &Module::returning(r#"{"error":"inventory service unreachable"}"#),
    );
    assert!(
        matches!(&err, EvalError::Policy(m) if m == "inventory service unreachable"),
        "{err}"
    );
}

#[test]
fn other_abi_version_is_refused() {
    let host = test_host();
    let mut module = Module::allowing();
    module.abi_version = 2;
    let err = load_error(&host, &module);
    assert!(
        matches!(
            err,
            LoadError::AbiMismatch {
                found: 2,
                expected: 1
            }
        ),
        "{err}"
    );
}

/// A policy gets no clock, randomness, file system, environment or network: every import but
/// `nicpolicy.log` is refused at load, and the error names it.
#[test]
fn wasi_and_other_imports_are_refused() {
    let host = test_host();
    let wasi = "wasi_snapshot_preview1";
    for (module_name, name, ty) in [
        (
            wasi,
            "fd_write",
            "(func (param i32 i32 i32 i32) (result i32))",
        ),
        (
            wasi,
            "clock_time_get",
            "(func (param i32 i64 i32) (result i32))",
        ),
        (wasi, "random_get", "(func (param i32 i32) (result i32))"),
        (wasi, "environ_get", "(func (param i32 i32) (result i32))"),
        (wasi, "args_get", "(func (param i32 i32) (result i32))"),
        (
            wasi,
            "path_open",
            "(func (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32))",
        ),
        (
            wasi,
            "sock_accept",
            "(func (param i32 i32 i32) (result i32))",
        ),
        (
            wasi,
            "sock_recv",
            "(func (param i32 i32 i32 i32 i32 i32) (result i32))",
        ),
        (
            wasi,
            "sock_send",
            "(func (param i32 i32 i32 i32 i32) (result i32))",
        ),
        (wasi, "sock_shutdown", "(func (param i32 i32) (result i32))"),
        (
            "wasi_unstable",
            "clock_time_get",
            "(func (param i32 i64 i32) (result i32))",
        ),
        ("env", "now", "(func (result i64))"),
        ("env", "memory", "(memory 1)"),
        ("env", "table", "(table 1 funcref)"),
        ("env", "seed", "(global i64)"),
        ("nicpolicy", "now", "(func (result i64))"),
        ("nicpolicy", "log", "(func (param i32 i32))"),
    ] {
        let mut module = Module::allowing();
        // The allowed import first: the refusal must name the other one.
        module.imports = format!(
            r#"(import "nicpolicy" "log" (func (param i32 i32 i32))) (import "{module_name}" "{name}" {ty})"#
        );
        let err = load_error(&host, &module);
        match &err {
            LoadError::ForbiddenImport {
                module: found_module,
                name: found_name,
                ..
            } => assert_eq!(
                (found_module.as_str(), found_name.as_str()),
                (module_name, name),
                "{err}"
            ),
            other => panic!("{module_name}.{name}: expected ForbiddenImport, got {other}"),
        }
        assert!(
            err.to_string().contains(&format!("`{module_name}.{name}`")),
            "{err}"
        );
    }
    assert_host_healthy(&host);
}

#[test]
fn missing_export_is_refused() {
    let host = test_host();
    let mut text = Module::allowing().wat();
    text = text.replace(r#"(export "nicpolicy_validate_settings")"#, "");
    let err = host
        .load(&wat::parse_str(&text).unwrap(), tight_options())
        .err()
        .expect("refused");
    assert!(
        matches!(
            err,
            LoadError::MissingExport {
                name: "nicpolicy_validate_settings",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn binary_exports_of_another_type_are_refused() {
    let host = test_host();
    for name in ["nicpolicy_evaluate_binary1", "nicpolicy_evaluate_binary2"] {
        let mut module = Module::allowing();
        module.extra = format!(
            r#"(func (export "{name}") (param i32) (result i64)
    i64.const 0)"#
        );
        let err = load_error(&host, &module);
        assert!(
            matches!(err, LoadError::ExportType { name: found, .. } if found == name),
            "{err}"
        );
    }
    assert_host_healthy(&host);
}

/// A module that exports `nicpolicy_evaluate_binary2` answering `output` whatever it is asked
/// (and allows everything through JSON).
fn answering_binary(output: &[u8]) -> Module {
    // Past the text data of [`Module`], below the heap its `nicpolicy_alloc` hands out.
    const AT: u32 = 0x8000;
    let bytes: String = output.iter().map(|b| format!("\\{b:02x}")).collect();
    let mut module = Module::allowing();
    module.extra = format!(
        r#"(data (i32.const {AT}) "{bytes}")
  (func (export "nicpolicy_evaluate_binary2") (param i32 i32) (result i64)
    i64.const {})"#,
        pack(AT, output.len() as u32)
    );
    module
}

fn binary_output(output: &EvaluateOutput) -> Vec<u8> {
    let mut bytes = Vec::new();
    binary::encode_output(output, &mut bytes).expect("encodes");
    bytes
}

#[test]
fn binary_decisions_are_held_to_the_rules_of_json_ones() {
    let host = test_host();
    let load = |output: &[u8]| {
        let policy = host
            .load(&answering_binary(output).wasm(), tight_options())
            .expect("loads");
        assert_eq!(policy.request_format(), nicpolicy::RequestFormat::Binary2);
        policy
    };

    // Well formed and coherent: taken as it is (binary2 speaks decision format 1, which has
    // no sources).
    let mut plan = nicpolicy_plugin::capvcd::evaluate(&request());
    nicpolicy_plugin::source::strip(&mut plan);
    assert_eq!(plan.nics.len(), 3);
    let policy = load(&binary_output(&EvaluateOutput::Decision(plan.clone())));
    assert_eq!(policy.evaluate(&request()).expect("decides").decision, plan);

    // Coherence rules: allowed with a violation.
    let mut incoherent = Decision::from_violations(vec![Violation::new(
        "spec.extraOvdcNetworks[0]",
        Reason::NotFound,
        "no such network",
    )]);
    incoherent.allowed = true;
    let err = load(&binary_output(&EvaluateOutput::Decision(incoherent)))
        .evaluate(&request())
        .expect_err("refused");
    let allowed_with_violations = "decision allows the machine but lists violations";
    assert!(
        matches!(&err, EvalError::BadOutput(m) if m == allowed_with_violations),
        "{err}"
    );

    // The policy's own error is a policy failure, not a bad output.
    let failing = EvaluateOutput::Error {
        error: "inventory service unreachable".into(),
    };
    let err = load(&binary_output(&failing))
        .evaluate(&request())
        .expect_err("fails");
    assert!(
        matches!(&err, EvalError::Policy(m) if m == "inventory service unreachable"),
        "{err}"
    );

    // Garbage, JSON, a forged count and a cut decision: each named by byte and field.
    let mut forged = binary_output(&EvaluateOutput::Decision(plan.clone()));
    forged[6..10].copy_from_slice(&u32::MAX.to_le_bytes());
    let whole = binary_output(&EvaluateOutput::Decision(plan));
    let cut = &whole[..whole.len() - 3];
    for (output, expected) in [
        (
            &b"\x00\xffgarbage"[..],
            "at byte 0, reading Output.magic: not a binary decision",
        ),
        (
            br#"{"allowed":true}"#,
            "at byte 0, reading Output.magic: not a binary decision",
        ),
        (
            &forged,
            "at byte 6, reading Decision.nics: a count of 4294967295 items",
        ),
        (
            cut,
            "reading Decision.warnings: the input ends inside the field",
        ),
    ] {
        let err = load(output).evaluate(&request()).expect_err("refused");
        let EvalError::BadOutput(message) = &err else {
            panic!("not BadOutput: {err}");
        };
        assert!(
            message.starts_with("output is not a binary decision: ") && message.contains(expected),
            "{message}"
        );
    }
    assert_host_healthy(&host);
}

#[test]
fn binary_request_export_is_used_and_held_to_the_same_rules() {
    // A module that takes JSON only gets JSON; one that exports the binary entry point gets
    // its requests there, under the same limits and output checks (here: a trap).
    let host = test_host();
    let json_only = host
        .load(&Module::allowing().wasm(), tight_options())
        .expect("loads");
    assert_eq!(json_only.request_format(), nicpolicy::RequestFormat::Json);
    assert!(json_only.evaluate_binary(b"NPB\x01").is_none());
    assert!(json_only
        .with_request_format(nicpolicy::RequestFormat::Binary1)
        .is_err());
    assert!(
        json_only
            .evaluate(&request())
            .expect("allows")
            .decision
            .allowed
    );

    let mut module = Module::allowing();
    module.extra = r#"(func (export "nicpolicy_evaluate_binary1") (param i32 i32) (result i64)
    unreachable)"#
        .to_string();
    let policy = host.load(&module.wasm(), tight_options()).expect("loads");
    assert_eq!(policy.request_format(), nicpolicy::RequestFormat::Binary1);
    assert!(policy
        .with_request_format(nicpolicy::RequestFormat::Binary2)
        .is_err());
    let err = policy.evaluate(&request()).expect_err("traps");
    assert!(matches!(err, EvalError::Trap { .. }), "{err}");
    // Told to send JSON, the same module answers through nicpolicy_evaluate.
    let json = policy
        .with_request_format(nicpolicy::RequestFormat::Json)
        .expect("JSON always");
    assert!(json.evaluate(&request()).expect("allows").decision.allowed);
    assert_host_healthy(&host);
}

#[test]
fn files_that_are_not_wasm_are_refused() {
    let host = test_host();
    let err = host
        .load(
            b"apiVersion: v1\nkind: ConfigMap\n",
            PolicyOptions::default(),
        )
        .err()
        .expect("refused");
    assert!(matches!(err, LoadError::NotWasm(_)), "{err}");
}

#[test]
fn log_import_is_collected_and_bounded() {
    let host = test_host();
    let mut module = Module::evaluating(&format!(
        "(loop $again (call $log (i32.const 1) (i32.const 256) (i32.const 20)) \
         (local.set $len (i32.add (local.get $len) (i32.const 1))) \
         (br_if $again (i32.lt_u (local.get $len) (i32.const 100000)))) i64.const {}",
        nicpolicy_tests::allow_result()
    ));
    module.imports = r#"(import "nicpolicy" "log" (func $log (param i32 i32 i32)))"#.into();
    module.data = "checking storage-net".into();
    // Reuse the $len parameter as the loop counter, starting from the input length.
    let policy = host.load(&module.wasm(), tight_options()).expect("loads");
    let evaluation = policy.evaluate(&request()).expect("evaluates");
    assert_eq!(evaluation.logs[0].message, "checking storage-net");
    assert_eq!(
        evaluation.logs.len(),
        65,
        "64 lines kept plus a dropped-lines note"
    );
    assert!(evaluation.logs[64].message.contains("dropped"));
}

#[test]
fn pinned_digest_must_match() {
    let host = test_host();
    let wasm = Module::allowing().wasm();
    let options = PolicyOptions {
        sha256: Some("00".repeat(32)),
        ..PolicyOptions::default()
    };
    let err = host.load(&wasm, options).err().expect("refused");
    match err {
        LoadError::DigestMismatch { expected, actual } => {
            assert_eq!(expected, "00".repeat(32));
            assert_eq!(actual, nicpolicy::inspect::sha256_hex(&wasm));
        }
        other => panic!("expected a digest mismatch, got {other}"),
    }
}

#[test]
fn modules_too_costly_to_compile_are_refused_before_compiling() {
    let host = test_host();
    // 100,000 tiny functions in under a megabyte: compiling it takes over 500 MB.
    let many = nicpolicy_tests::costly::tiny_functions(100_000).wasm();
    assert!(many.len() < 1 << 20, "{} bytes", many.len());
    match host.load(&many, PolicyOptions::default()) {
        Err(LoadError::TooComplex {
            what: "functions",
            found,
            limit,
        }) => assert!(found > limit, "{found} <= {limit}"),
        Err(other) => panic!("expected TooComplex, got {other}"),
        Ok(_) => panic!("a module of 100,000 functions was accepted"),
    }
    // One function with more locals than the bound.
    let locals = nicpolicy_tests::costly::heavy_functions(1, 6_000, 1024).wasm();
    let err = host
        .load(&locals, PolicyOptions::default())
        .err()
        .expect("refused");
    assert!(err.to_string().contains("locals in one function"), "{err}");
    // Within the bounds, a costly module loads.
    let bounded = nicpolicy_tests::costly::heavy_functions(4, 256, 16 << 10).wasm();
    host.load(&bounded, PolicyOptions::default())
        .unwrap_or_else(|err| panic!("bounded module loads: {err}"));
    assert_host_healthy(&host);
}

#[test]
fn policy_log_lines_are_escaped() {
    let mut module = Module::evaluating(&format!(
        "(call $log (i32.const 2) (i32.const 1024) (i32.const 20)) i64.const {}",
        nicpolicy_tests::allow_result()
    ));
    module.imports = r#"(import "nicpolicy" "log" (func $log (param i32 i32 i32)))"#.into();
    // CR LF, an escape sequence and U+202E (right-to-left override), as WAT byte escapes.
    module.extra = r#"(data (i32.const 1024) "a\0d\0aerror: x\1b[31m\e2\80\aez")"#.into();
    let host = test_host();
    let policy = host
        .load(&module.wasm(), tight_options())
        .expect("module loads");
    let logs = policy.evaluate(&request()).expect("evaluates").logs;
    assert_eq!(logs[0].message, r"a\r\nerror: x\u{1b}[31m\u{202e}z");
}
