//! The checks behind the fuzz targets in `tests/fuzz/`. The targets call these functions on
//! arbitrary bytes; `tests/tests/fuzz_regressions.rs` calls them on the saved inputs (seeds and
//! every input that once crashed), so each fix stays covered on the stable toolchain.
//!
//! Each function panics only when the host misbehaves: a panic inside the library, an error that
//! cannot be displayed, or a result that breaks a documented rule.

use std::path::Path;

use nicpolicy::manifest::ManifestFile;
use nicpolicy::policy::{check_decision, decode_binary_decision, decode_decision};
use nicpolicy::request::build_request;
use nicpolicy::EvalError;
use nicpolicy_plugin::{Decision, Request};

/// Separates the files of one `manifest_request` input: machine, cluster, inventory, old
/// machine, machine name (missing parts are absent).
pub const PART_SEPARATOR: char = '\0';

/// Manifest text to request, as `nicpolicy eval` does it: the input is split at NUL bytes into
/// the machine file, the cluster file, an optional inventory file, an optional old machine file
/// and an optional `--machine-name`. Each file is parsed with [`ManifestFile::parse`]; when all
/// parse, [`build_request`] runs. A request that comes out must survive a JSON round trip
/// unchanged (it is what the policy receives).
pub fn manifest_request(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut parts = text.split(PART_SEPARATOR);
    let machine = parse("machine.yaml", parts.next().unwrap_or_default());
    let cluster = parse("cluster.yaml", parts.next().unwrap_or_default());
    let inventory = parts
        .next()
        .filter(|text| !text.is_empty())
        .map(|text| parse("inventory.yaml", text).map(|file| file.inventory()));
    let old = parts
        .next()
        .filter(|text| !text.is_empty())
        .map(|text| parse("old.yaml", text));
    let machine_name = parts.next();

    let (Some(machine), Some(cluster)) = (machine, cluster) else {
        return;
    };
    let inventory = match inventory {
        None => None,
        Some(Some(Ok(inventory))) => Some(inventory),
        Some(Some(Err(err))) => {
            displayed(&err);
            return;
        }
        Some(None) => return,
    };
    let old = match old {
        None => None,
        Some(Some(old)) => Some(old),
        Some(None) => return,
    };
    match build_request(
        &machine,
        machine_name,
        Some(&cluster),
        old.as_ref(),
        inventory,
    ) {
        Ok(request) => {
            let json = serde_json::to_vec(&request).expect("a request encodes as JSON");
            let back: Request = serde_json::from_slice(&json).unwrap_or_else(|err| {
                panic!(
                    "the encoded request does not decode: {err}\n{}",
                    String::from_utf8_lossy(&json)
                )
            });
            // What a policy receives: the host-only `same_cluster_as_stored` travels to none.
            let sent = Request {
                same_cluster_as_stored: false,
                ..request
            };
            assert_eq!(back, sent, "the request changes in a JSON round trip");
        }
        Err(err) => displayed(&err),
    }
}

fn parse(path: &str, text: &str) -> Option<ManifestFile> {
    match ManifestFile::parse(Path::new(path), text) {
        Ok(file) => Some(file),
        Err(err) => {
            displayed(&err);
            None
        }
    }
}

/// Every error must render (a message the user reads) without panicking and name the file.
fn displayed(err: &nicpolicy::ManifestError) {
    let message = err.to_string();
    assert!(!message.is_empty(), "an empty error message: {err:?}");
}

/// Guest output to decision, as the host reads a policy's result: [`decode_decision`] on
/// arbitrary bytes. It either returns a decision that follows the decision rules and survives
/// a JSON round trip, or fails with `BadOutput` or `Policy` (an error envelope); no other error.
pub fn guest_output(data: &[u8]) {
    match decode_decision(data) {
        Ok(decision) => {
            check_decision(&decision).expect("a decoded decision follows the decision rules");
            let json = serde_json::to_vec(&decision).expect("a decision encodes as JSON");
            let back: Decision = decode_decision(&json).unwrap_or_else(|err| {
                panic!(
                    "the re-encoded decision is refused: {err}\n{}",
                    String::from_utf8_lossy(&json)
                )
            });
            assert_eq!(back, decision, "the decision changes in a JSON round trip");
        }
        Err(EvalError::BadOutput(message)) => {
            assert!(!message.is_empty(), "BadOutput without a message")
        }
        Err(EvalError::Policy(_)) => {}
        Err(other) => panic!("decode_decision failed with {} ({other})", other.kind()),
    }
}

/// Guest output in the binary decision format, as the host reads it from
/// `nicpolicy_evaluate_binary2`: [`decode_binary_decision`] on arbitrary bytes. It either
/// returns a decision that follows the decision rules, or fails with `BadOutput` or `Policy`;
/// what it reads is exactly the input (it encodes back to the same bytes: nothing is read
/// loosely), and the same decision read from JSON is the same.
pub fn binary_decision(data: &[u8]) {
    use nicpolicy_plugin::binary;
    use nicpolicy_plugin::schema::EvaluateOutput;

    let encoded = |output: &EvaluateOutput| {
        let mut bytes = Vec::new();
        binary::encode_output(output, &mut bytes).expect("an output encodes");
        bytes
    };
    match decode_binary_decision(data) {
        Ok(decision) => {
            check_decision(&decision).expect("a decoded decision follows the decision rules");
            let output = EvaluateOutput::Decision(decision.clone());
            assert_eq!(
                encoded(&output),
                data,
                "the decision encodes back to its bytes"
            );
            let json = serde_json::to_vec(&decision).expect("a decision encodes as JSON");
            let from_json = decode_decision(&json).expect("the same decision from JSON");
            assert_eq!(
                from_json, decision,
                "JSON and binary carry the same decision"
            );
        }
        Err(EvalError::BadOutput(message)) => {
            assert!(!message.is_empty(), "BadOutput without a message");
            if let Err(err) = binary::decode_output(data) {
                assert!(
                    err.at <= data.len(),
                    "{err} lies outside {} bytes",
                    data.len()
                );
            }
        }
        Err(EvalError::Policy(error)) => {
            let output = EvaluateOutput::Error { error };
            assert_eq!(
                encoded(&output),
                data,
                "the error encodes back to its bytes"
            );
        }
        Err(other) => panic!(
            "decode_binary_decision failed with {} ({other})",
            other.kind()
        ),
    }
}

/// The webhook's reviewer on arbitrary request bodies, for both endpoints of both kinds: the
/// built-in CAPVCD policy, the example cluster. Every body gets an answer whose body is a JSON
/// AdmissionReview: HTTP 200 with a response, or 400 for a body that is no readable review.
pub fn admission_review(data: &[u8]) {
    use nicpolicy::clusters::StaticClusters;
    use nicpolicy::plugin::ObjectKind;
    use nicpolicy::served::ServeConfig;
    use nicpolicy::webhook::{App, Endpoint};
    use std::sync::{Arc, OnceLock};

    static APP: OnceLock<App> = OnceLock::new();
    let app = APP.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let clusters = StaticClusters::read(&[root.join("examples/cluster.yaml")])
            .expect("the example cluster reads");
        let mut config = ServeConfig::builtin_default();
        config.reload_interval = None;
        config.inventory = Some(root.join("examples/inventory.yaml"));
        let host = nicpolicy::Host::new(nicpolicy::HostConfig {
            cache_dir: None,
            max_instances: 8,
            ..nicpolicy::HostConfig::default()
        })
        .expect("engine starts");
        App::new(host, config, Arc::new(clusters)).expect("the built-in policy loads")
    });
    for kind in ObjectKind::ALL {
        for endpoint in [Endpoint::Mutate, Endpoint::Validate] {
            let answer = app.reviewer().review(endpoint, kind, data);
            let body: serde_json::Value =
                serde_json::from_slice(&answer.body).expect("every answer is JSON");
            assert_eq!(body["kind"], "AdmissionReview", "{body}");
            match answer.http_status {
                200 => assert!(body["response"]["uid"].is_string(), "{body}"),
                400 => assert!(!answer.allowed),
                other => panic!("unexpected HTTP status {other}: {body}"),
            }
        }
    }
}

/// A request in the binary format (`nicpolicy_plugin::binary`), read natively and by the
/// built-in CAPVCD policy in Wasm. Natively, a request that decodes survives an encode and
/// decode unchanged, and an error names a byte inside the input. In Wasm, every input gets a
/// decision or the policy's own error, never a trap or bad output; a request that decodes
/// natively gets the decision the native rules give it.
pub fn binary_request(data: &[u8]) {
    use nicpolicy_plugin::binary;
    use std::sync::OnceLock;

    static POLICY: OnceLock<nicpolicy::Policy> = OnceLock::new();
    let policy = POLICY.get_or_init(|| {
        let host = nicpolicy::Host::new(nicpolicy::HostConfig {
            cache_dir: None,
            max_instances: 4,
            ..nicpolicy::HostConfig::default()
        })
        .expect("engine starts");
        host.load(
            nicpolicy::builtin::CAPVCD_WASM,
            nicpolicy::PolicyOptions::default(),
        )
        .expect("the built-in policy loads")
    });
    let native = binary::decode(data);
    match &native {
        Ok(request) => {
            let mut again = Vec::new();
            binary::encode(request.with_settings(&request.settings), &mut again)
                .expect("a decoded request encodes");
            let back = binary::decode(&again).expect("a re-encoded request decodes");
            assert_eq!(
                &back, request,
                "the request changes in an encode and decode"
            );
        }
        Err(err) => {
            assert!(
                err.at <= data.len(),
                "{err} lies outside {} bytes",
                data.len()
            );
            assert!(!err.to_string().is_empty());
        }
    }
    let answer = policy
        .evaluate_binary(data)
        .expect("the built-in policy takes the binary format");
    match (answer, native) {
        (Ok(evaluation), Ok(request)) => assert_eq!(
            evaluation.decision,
            nicpolicy_capvcd::evaluate_request(&request),
            "Wasm and native decide alike"
        ),
        (Err(EvalError::Policy(message)), Err(err)) => assert!(
            message.contains(&err.to_string()),
            "the policy names the same problem: {message} / {err}"
        ),
        (answer, native) => panic!(
            "Wasm and native disagree: {:?} / {:?}",
            answer.map(|e| e.decision),
            native.map(|_| "a request")
        ),
    }
}
