//! The CAPVCD case suite, run through the Wasmtime host against the built policy module, and
//! checked against the same logic called natively.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use nicpolicy::cases::{discover, Case};
use nicpolicy::inspect::inspect;
use nicpolicy::{builtin, Host, PolicyOptions};
use nicpolicy_plugin::abi;
use nicpolicy_tests::{assert_suite_passes, decided_cases, host, Decided};

fn test_host() -> Host {
    host(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cases-cache"))
}

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("cases/capvcd")
}

fn case_paths() -> Vec<PathBuf> {
    discover(&[cases_dir()]).expect("case directory lists")
}

#[test]
fn every_capvcd_case_passes() {
    let host = test_host();
    let policy = host
        .load(builtin::CAPVCD_WASM, PolicyOptions::default())
        .expect("CAPVCD policy loads");
    assert_suite_passes(&policy, &cases_dir(), 30);
}

#[test]
fn wasm_and_native_decide_the_same_on_every_case() {
    let host = test_host();
    let policy = host
        .load(builtin::CAPVCD_WASM, PolicyOptions::default())
        .expect("CAPVCD policy loads");
    let decided = decided_cases(&policy, &cases_dir());
    for Decided {
        case,
        request,
        decision,
    } in &decided
    {
        let native = nicpolicy_capvcd::evaluate_request(request);
        assert_eq!(*decision, native, "{}", case.path.display());
    }
    assert!(decided.len() >= 30, "compared only {} cases", decided.len());
}

#[test]
fn capvcd_module_has_no_imports_beyond_the_log_import() {
    let info = inspect(builtin::CAPVCD_WASM).expect("module reads");
    for import in &info.imports {
        assert_eq!(
            (import.module.as_str(), import.name.as_str()),
            (abi::LOG_IMPORT_MODULE, abi::LOG_IMPORT_NAME),
            "unexpected import {}.{}",
            import.module,
            import.name
        );
    }
    info.check_abi().expect("ABI v1");
    let meta = info.metadata.expect("metadata section");
    assert_eq!(meta.name, "nicpolicy-capvcd");
    assert_eq!(meta.abi_version, abi::ABI_VERSION);
}

#[test]
fn threads_share_one_policy() {
    let host = test_host();
    let policy = Arc::new(
        host.load(builtin::CAPVCD_WASM, PolicyOptions::default())
            .expect("CAPVCD policy loads"),
    );
    let cases: Arc<Vec<Case>> = Arc::new(
        case_paths()
            .iter()
            .map(|p| Case::load(p).expect("case loads"))
            .filter(|c| c.settings.is_null())
            .collect(),
    );
    let expected: Vec<_> = cases
        .iter()
        .map(|c| policy.evaluate(&c.request).expect("evaluates").decision)
        .collect();
    let expected = Arc::new(expected);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (policy, cases, expected) = (policy.clone(), cases.clone(), expected.clone());
            std::thread::spawn(move || {
                for round in 0..25 {
                    let i = (t * 7 + round) % cases.len();
                    let got = policy
                        .evaluate(&cases[i].request)
                        .expect("evaluates")
                        .decision;
                    assert_eq!(got, expected[i], "{}", cases[i].path.display());
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("thread finished without panicking");
    }
}

#[test]
fn compiled_module_cache_is_used_on_the_second_load() {
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let first = host(dir.clone())
        .load(builtin::CAPVCD_WASM, PolicyOptions::default())
        .expect("loads");
    assert_eq!(*first.cache_status(), nicpolicy::cache::CacheStatus::Stored);
    let second = host(dir.clone())
        .load(builtin::CAPVCD_WASM, PolicyOptions::default())
        .expect("loads");
    assert_eq!(*second.cache_status(), nicpolicy::cache::CacheStatus::Hit);

    // A damaged cache file is replaced, not trusted. Loaded modules map their file, so drop
    // them first and swap the file by rename, as the cache itself writes.
    drop((first, second));
    for entry in std::fs::read_dir(&dir).expect("cache dir") {
        let path = entry.expect("entry").path();
        let damaged = path.with_extension("damaged");
        std::fs::write(&damaged, b"not a compiled module").expect("write");
        std::fs::rename(&damaged, &path).expect("rename");
    }
    let third = host(dir.clone())
        .load(builtin::CAPVCD_WASM, PolicyOptions::default())
        .expect("loads");
    assert!(matches!(
        third.cache_status(),
        nicpolicy::cache::CacheStatus::Replaced(_)
    ));
    let _ = std::fs::remove_dir_all(&dir);
}
