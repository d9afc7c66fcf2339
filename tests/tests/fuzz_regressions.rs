//! The fuzz targets' checks on the saved inputs (seeds and every input that once crashed), on
//! the stable toolchain: each fix stays covered without cargo-fuzz.

use std::path::{Path, PathBuf};

use nicpolicy_tests::fuzzing;

fn inputs(target: &str) -> Vec<PathBuf> {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut files = Vec::new();
    for dir in ["seeds", "regressions"] {
        if let Ok(entries) = std::fs::read_dir(fuzz.join(dir).join(target)) {
            files.extend(entries.filter_map(Result::ok).map(|e| e.path()));
        }
    }
    files.sort();
    files
}

#[test]
fn guest_output_inputs_decode_without_panic() {
    let files = inputs("guest_output");
    assert!(files.len() >= 5, "seeds present: {files:?}");
    for path in files {
        fuzzing::guest_output(&std::fs::read(&path).expect("input"));
    }
}

#[test]
fn manifest_request_inputs_map_without_panic() {
    let files = inputs("manifest_request");
    assert!(!files.is_empty(), "seeds present");
    for path in files {
        fuzzing::manifest_request(&std::fs::read(&path).expect("input"));
    }
}

#[test]
fn admission_review_inputs_are_answered() {
    let files = inputs("admission_review");
    assert!(files.len() >= 8, "seeds present: {files:?}");
    for path in files {
        let bytes = std::fs::read(&path).expect("input");
        fuzzing::admission_review(&bytes);
        // Cut short: malformed JSON must be answered too.
        fuzzing::admission_review(&bytes[..bytes.len() / 2]);
    }
}

#[test]
fn binary_request_inputs_decode_alike_in_wasm_and_natively() {
    let files = inputs("binary_request");
    assert!(files.len() >= 4, "seeds present: {files:?}");
    for path in files {
        let bytes = std::fs::read(&path).expect("input");
        fuzzing::binary_request(&bytes);
        // Cut short, and each byte in turn flipped: read alike (or refused alike) in Wasm and
        // natively, whichever field the damage lands in.
        fuzzing::binary_request(&bytes[..bytes.len() / 2]);
        for at in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[at] ^= 0xff;
            fuzzing::binary_request(&flipped);
        }
    }
}

#[test]
fn binary_decision_inputs_decode_or_are_refused() {
    let files = inputs("binary_decision");
    assert!(files.len() >= 5, "seeds present: {files:?}");
    for path in files {
        let bytes = std::fs::read(&path).expect("input");
        fuzzing::binary_decision(&bytes);
        // Every cut and every flipped byte: decoded exactly, or refused with its byte and field.
        for end in 0..bytes.len() {
            fuzzing::binary_decision(&bytes[..end]);
        }
        for at in 0..bytes.len() {
            for flip in [0x01, 0x80, 0xff] {
                let mut flipped = bytes.clone();
                flipped[at] ^= flip;
                fuzzing::binary_decision(&flipped);
            }
        }
    }
}
