//! The Kubewarden builds of the built-in policies, run the way policy-server runs them.

use std::path::{Path, PathBuf};

use nicpolicy::cases::{discover, Case};
use nicpolicy::{builtin, Host, HostConfig, PolicyOptions};
use nicpolicy_kubewarden_tests::compare::{compare, request, settings, Compared};
use nicpolicy_kubewarden_tests::{Cluster, HostCall, HostError, PolicyServer, ValidationResponse};
use serde_json::{json, Value};

fn cases_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../cases")
        .join(name)
}

fn server(name: &str) -> PolicyServer {
    let policy = builtin::get(name).expect("built in");
    let wasm = policy.kubewarden.expect("a Kubewarden build");
    PolicyServer::load(wasm).unwrap_or_else(|err| panic!("{name}: {err}"))
}

/// How the Kubewarden build answers the CAPVCD case `file`: with the case's own cluster objects,
/// or with `cluster` in their place.
fn answer_case(
    kubewarden: &PolicyServer,
    file: &str,
    mutating: bool,
    cluster: Option<&Cluster>,
) -> (ValidationResponse, Vec<HostCall>) {
    let case = capvcd_case(file);
    let (request, own) = request(&case);
    kubewarden
        .validate(
            &request,
            &settings(&case, mutating),
            cluster.unwrap_or(&own),
        )
        .expect("answers")
}

fn capvcd_case(file: &str) -> Case {
    Case::load(&cases_dir("capvcd").join(file)).expect("case loads")
}

#[test]
fn every_case_of_every_policy_decides_as_nicpolicy_does() {
    let host = Host::new(HostConfig::default()).expect("engine starts");
    let mut summary = Vec::new();
    let mut failures = Vec::new();
    // Cases decided alike that the lifecycle rules act on: UPDATEs, deletions, unknown clusters.
    let mut lifecycle = [0usize; 3];
    let with_kubewarden: Vec<_> = builtin::POLICIES
        .iter()
        .filter(|p| p.kubewarden.is_some())
        .collect();
    assert_eq!(
        with_kubewarden.len(),
        4,
        "every Rust policy has a Kubewarden build"
    );
    for builtin in with_kubewarden {
        let policy = host
            .load(builtin.wasm, PolicyOptions::default())
            .expect("ABI v1 build loads");
        let kubewarden = server(builtin.name);
        let paths = discover(&[cases_dir(builtin.name)]).expect("cases listed");
        let (mut decided, mut refused) = (0, 0);
        let mut host_only = Vec::new();
        for path in &paths {
            let case = match Case::load(path) {
                Ok(case) => case,
                Err(err) => {
                    failures.push(format!("{}: cannot load: {err}", path.display()));
                    continue;
                }
            };
            match compare(&case, &policy, &kubewarden) {
                Ok(Compared::Decided) => {
                    decided += 1;
                    let request = &case.request;
                    lifecycle[0] += usize::from(request.old_machine.is_some());
                    lifecycle[1] += usize::from(request.machine.is_deleting());
                    lifecycle[2] += usize::from(request.cluster_unknown);
                }
                Ok(Compared::SettingsRefused) => refused += 1,
                Ok(Compared::HostOnly) => host_only.push(case.name()),
                Err(mismatches) => failures.push(format!(
                    "{}:\n  {}",
                    path.display(),
                    mismatches.join("\n  ")
                )),
            }
        }
        assert!(
            decided >= 8,
            "{}: only {decided} cases decided",
            builtin.name
        );
        summary.push(format!(
            "{}: {decided} decided alike, {refused} settings refused alike, {} about nicpolicy's \
             host only {host_only:?}",
            builtin.name,
            host_only.len()
        ));
    }
    summary.push(format!(
        "lifecycle: {} UPDATEs, {} deletions, {} unknown clusters",
        lifecycle[0], lifecycle[1], lifecycle[2]
    ));
    eprintln!("{}", summary.join("\n"));
    assert!(
        failures.is_empty(),
        "{} cases differ:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(
        lifecycle.iter().all(|n| *n > 0),
        "the case suites must cover UPDATEs, deletions and unknown clusters: {lifecycle:?}"
    );
}

#[test]
fn metadata_is_what_policy_server_requires() {
    for builtin in builtin::POLICIES.iter().filter(|p| p.kubewarden.is_some()) {
        let kubewarden = server(builtin.name);
        let metadata = kubewarden.metadata();
        assert_eq!(metadata.protocol_version.as_deref(), Some("v1"));
        assert_eq!(metadata.execution_mode.as_deref(), Some("kubewarden-wapc"));
        assert!(metadata.mutating);
        assert!(metadata.background_audit);
        let rule = &metadata.rules[0];
        assert_eq!(rule.api_groups, ["infrastructure.cluster.x-k8s.io"]);
        assert_eq!(rule.api_versions, ["v1beta3"]);
        assert_eq!(rule.resources, ["vcdmachines", "vcdmachinetemplates"]);
        assert_eq!(rule.operations, ["CREATE", "UPDATE"]);
        let kinds: Vec<(&str, &str)> = metadata
            .context_aware_resources
            .iter()
            .map(|r| (r.api_version.as_str(), r.kind.as_str()))
            .collect();
        assert_eq!(
            kinds,
            [
                (nicpolicy_plugin::kubewarden::CLUSTER_API_VERSION, "Cluster"),
                (
                    nicpolicy_plugin::kubewarden::VCD_CLUSTER_API_VERSION,
                    "VCDCluster"
                )
            ]
        );
        for key in ["title", "version", "description", "license"] {
            let value = metadata
                .annotations
                .get(&format!("io.kubewarden.policy.{key}"))
                .unwrap_or_else(|| panic!("{}: no {key} annotation", builtin.name));
            assert!(!value.is_empty(), "{}: empty {key}", builtin.name);
        }
        assert_eq!(
            metadata.annotations["io.kubewarden.policy.title"],
            builtin.package
        );
        // The workspace declares no repository, and no address is made up for it.
        assert_eq!(
            metadata.annotations.get("io.kubewarden.policy.source"),
            None,
            "{}",
            builtin.name
        );
    }
}

#[test]
fn an_unannotated_or_abi_v1_module_is_refused() {
    let abi_v1 = builtin::get("capvcd").expect("built in").wasm;
    let err = PolicyServer::load(abi_v1).err().expect("refused");
    assert!(err.to_string().contains("__guest_call"), "{err}");
    // A waPC module without the metadata section: what `kwctl annotate` would be needed for.
    let wasm = builtin::get("capvcd")
        .and_then(|p| p.kubewarden)
        .expect("built");
    let stripped = strip_section(wasm, "io.kubewarden.metadata");
    assert!(stripped.len() < wasm.len());
    let err = PolicyServer::load(&stripped).err().expect("refused");
    assert!(
        matches!(
            err,
            HostError::Refused(nicpolicy::kubewarden::KubewardenError::MissingMetadata)
        ),
        "{err}"
    );
}

/// The module without the custom section `name`.
fn strip_section(wasm: &[u8], name: &str) -> Vec<u8> {
    let mut out = wasm[..8].to_vec();
    let mut rest = &wasm[8..];
    let leb = |bytes: &[u8]| -> (usize, usize) {
        let (mut value, mut shift, mut used) = (0usize, 0, 0);
        for byte in bytes {
            used += 1;
            value |= usize::from(byte & 0x7f) << shift;
            shift += 7;
            if byte & 0x80 == 0 {
                break;
            }
        }
        (value, used)
    };
    while !rest.is_empty() {
        let id = rest[0];
        let (size, used) = leb(&rest[1..]);
        let section = &rest[..1 + used + size];
        let body = &rest[1 + used..1 + used + size];
        let keep = id != 0 || {
            let (len, n) = leb(body);
            &body[n..n + len] != name.as_bytes()
        };
        if keep {
            out.extend_from_slice(section);
        }
        rest = &rest[1 + used + size..];
    }
    out
}

#[test]
fn validating_mode_never_returns_a_mutated_object() {
    let kubewarden = server("capvcd");
    let (mutating, _) = answer_case(&kubewarden, "02-one-extra.yaml", true, None);
    assert!(mutating.accepted);
    let mutated = mutating.mutated_object.expect("defaults in mutating mode");
    assert!(mutated["metadata"]["annotations"]["nicpolicy.io/nic-plan"].is_string());
    let (validating, _) = answer_case(&kubewarden, "02-one-extra.yaml", false, None);
    assert!(validating.accepted);
    assert_eq!(validating.mutated_object, None);
}

#[test]
fn a_machine_of_an_unknown_cluster_is_checked_without_it() {
    let kubewarden = server("capvcd");
    let nothing = Cluster::default();
    let (response, calls) = answer_case(&kubewarden, "02-one-extra.yaml", true, Some(&nothing));
    assert!(response.accepted, "{response:?}");
    let warning = &response.warnings.expect("a warning")[0];
    assert!(warning.contains("checked without its cluster"), "{warning}");
    assert!(
        warning.contains("Cluster \"prod-eu1\" not found"),
        "{warning}"
    );
    assert_eq!(calls.len(), 1, "stops at the missing Cluster");
    // Without the cluster NIC 0 is unknown: no NIC plan is written (with it, one is: above).
    let plan = response
        .mutated_object
        .as_ref()
        .and_then(|m| m.pointer("/metadata/annotations/nicpolicy.io~1nic-plan"));
    assert_eq!(plan, None);
    // The rules that need only the machine still deny.
    let (response, _) = answer_case(&kubewarden, "09-duplicate-extra.yaml", true, Some(&nothing));
    assert!(!response.accepted, "{response:?}");
    assert!(response
        .message
        .unwrap_or_default()
        .contains("Duplicate value"));
}

#[test]
fn undeclared_resources_are_refused_by_the_host() {
    let mut kubewarden = server("capvcd");
    // A host that grants only what the policy does not ask for.
    kubewarden
        .context_aware_resources
        .retain(|r| r.kind != "Cluster");
    let (response, _) = answer_case(&kubewarden, "09-duplicate-extra.yaml", true, None);
    let warning = &response.warnings.expect("a warning")[0];
    assert!(warning.contains("not been granted access"), "{warning}");
}

#[test]
fn the_cluster_is_read_through_get_resource() {
    let kubewarden = server("capvcd");
    let (_, calls) = answer_case(&kubewarden, "02-one-extra.yaml", true, None);
    let payloads: Vec<Value> = calls
        .iter()
        .map(|c| serde_json::from_str(&c.payload).expect("JSON"))
        .collect();
    assert_eq!(payloads[0]["kind"], "Cluster");
    assert_eq!(payloads[0]["name"], "prod-eu1");
    assert_eq!(payloads[0]["namespace"], "prod-eu1");
    assert_eq!(payloads[1]["kind"], "VCDCluster");
    assert_eq!(
        payloads[1]["api_version"],
        "infrastructure.cluster.x-k8s.io/v1beta3"
    );
}

#[test]
fn hostile_requests_get_an_error_that_names_the_cause() {
    let kubewarden = server("capvcd");
    let cluster = Cluster::default();
    // waPC reports a trap as a failed call too; the guest's own error never mentions Wasm.
    let guest_error = |payload: &[u8]| match kubewarden.validate_raw(payload, &cluster) {
        Err(HostError::Guest(message)) if !message.contains("wasm") => message,
        other => panic!("expected the guest's error, got {other:?}"),
    };
    assert!(guest_error(b"not json").contains("malformed ValidationRequest"));
    let message = guest_error(br#"{"request": {"kind": 7}, "settings": {}}"#);
    assert!(message.contains("request.kind"), "{message}");
    let case = capvcd_case("02-one-extra.yaml");
    let (mut request, _) = request(&case);
    request["operation"] = json!("FROB");
    let payload = serde_json::to_vec(&json!({"request": request, "settings": {}})).unwrap();
    let message = guest_error(&payload);
    assert!(message.contains("unknown operation \"FROB\""), "{message}");
    // An unknown waPC operation: the guest's own error, not a trap.
    match kubewarden.call("mutate", b"{}", &cluster) {
        Err(HostError::Guest(message)) => {
            assert!(message.contains("No handler registered"), "{message}")
        }
        other => panic!("expected a guest error, got {other:?}"),
    }
    // A request for another kind, or without an object: a 400 answer with the reason.
    let mut pod = request.clone();
    pod["operation"] = json!("CREATE");
    pod["kind"] = json!({"group": "", "version": "v1", "kind": "Pod"});
    let (response, _) = kubewarden
        .validate(&pod, &json!({}), &cluster)
        .expect("answers");
    assert!(!response.accepted);
    assert_eq!(response.code, Some(400));
    assert!(response.message.unwrap_or_default().contains("Pod (core)"));
    let mut empty = request.clone();
    empty["operation"] = json!("CREATE");
    empty["object"] = Value::Null;
    let (response, _) = kubewarden
        .validate(&empty, &json!({}), &cluster)
        .expect("answers");
    assert_eq!(response.code, Some(400));
    assert!(response
        .message
        .unwrap_or_default()
        .contains("request.object is missing"));
    // Bad settings are refused with the key at fault.
    let verdict = kubewarden
        .validate_settings(&json!({"maxNics": 42}))
        .expect("answers");
    assert!(!verdict.valid);
    assert!(verdict.message.unwrap_or_default().contains("maxNics"));
}
