//! `nicpolicy push` and `pull` against a real registry: Debian's `docker-registry` (the
//! distribution v2 server that .ci/run installs) started on loopback with a configuration and
//! storage of its own. Both artifact layouts, tags and digests, and what is refused.

mod common;
mod registry;

use std::path::{Path, PathBuf};

use registry::{
    assert_exit_saying, digest, eval_by_reference, module, nicpolicy, push, push_second, review,
    text, workspace, Pushed, Registry, Serving,
};
use sha2::{Digest, Sha256};

#[test]
fn push_prints_the_immutable_reference_and_pull_reads_it_by_tag_and_by_digest() {
    let registry = Registry::start("roundtrip");
    let dir = registry.dir.clone();
    let (path, bytes) = module(&dir);
    let reference = format!("{}/platform/capvcd:0.1.0", registry.host());
    let immutable = push(&dir, &path, &format!("oci://{reference}"));
    let prefix = format!("{}/platform/capvcd@sha256:", registry.host());
    assert!(immutable.starts_with(&prefix), "{immutable}");

    // The manifest is Kubewarden's layout, with the module's metadata as annotations.
    let manifest: serde_json::Value = reqwest::blocking::Client::new()
        .get(format!(
            "http://{}/v2/platform/capvcd/manifests/0.1.0",
            registry.host()
        ))
        .header("accept", "application/vnd.oci.image.manifest.v1+json")
        .send()
        .and_then(|r| r.json())
        .expect("manifest");
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.wasm.config.v1+json"
    );
    assert_eq!(
        manifest["layers"][0]["mediaType"],
        "application/vnd.wasm.content.layer.v1+wasm"
    );
    assert_eq!(manifest["layers"][0]["digest"], digest(&bytes));
    assert_eq!(
        manifest["annotations"]["org.opencontainers.image.title"],
        "nicpolicy-capvcd"
    );
    // The immutable reference is the manifest's digest as the registry serves it.
    let served = reqwest::blocking::Client::new()
        .get(format!(
            "http://{}/v2/platform/capvcd/manifests/0.1.0",
            registry.host()
        ))
        .header("accept", "application/vnd.oci.image.manifest.v1+json")
        .send()
        .expect("manifest");
    let served_digest = served.headers()["docker-content-digest"]
        .to_str()
        .expect("digest header")
        .to_string();
    assert!(
        immutable.ends_with(&served_digest),
        "{immutable} vs {served_digest}"
    );

    for (source, file) in [
        (reference.as_str(), "by-tag.wasm"),
        (immutable.as_str(), "by-digest.wasm"),
    ] {
        let out = nicpolicy(&["pull", source, "-o", file, "--plain-http"], &dir);
        assert!(out.status.success(), "{}", text(&out));
        let pulled = std::fs::read(dir.join(file)).expect("pulled file");
        assert_eq!(pulled, bytes, "{source}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            said.contains(&immutable) && said.contains("Kubewarden layout"),
            "{said}"
        );
    }
}

#[test]
fn the_cncf_layout_is_read_and_what_is_no_wasm_policy_is_refused() {
    let registry = Registry::start("layouts");
    let dir = registry.dir.clone();
    let (_, bytes) = module(&dir);
    let config = br#"{"architecture":"wasm","os":"wasip1","layerDigests":[]}"#;
    registry.put_artifact(
        "platform/capvcd-cncf",
        "1",
        ("application/vnd.wasm.config.v0+json", config),
        ("application/wasm", &bytes),
    );
    let reference = format!("{}/platform/capvcd-cncf:1", registry.host());
    let out = nicpolicy(
        &["pull", &reference, "-o", "cncf.wasm", "--plain-http"],
        &dir,
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(std::fs::read(dir.join("cncf.wasm")).expect("pulled"), bytes);
    assert!(String::from_utf8_lossy(&out.stderr).contains("CNCF Wasm layout"));

    // A Wasm layer type holding something else.
    registry.put_artifact(
        "platform/not-wasm",
        "1",
        ("application/vnd.wasm.config.v1+json", b"{}"),
        (
            "application/vnd.wasm.content.layer.v1+wasm",
            b"#!/bin/sh\necho hi\n",
        ),
    );
    let out = nicpolicy(
        &[
            "pull",
            &format!("{}/platform/not-wasm:1", registry.host()),
            "--plain-http",
        ],
        &dir,
    );
    assert_exit_saying(&out, 3, &["not a WebAssembly module"]);
    assert!(!dir.join("not-wasm.wasm").exists(), "nothing is written");

    // A container image is not a policy.
    registry.put_artifact(
        "platform/image",
        "1",
        ("application/vnd.oci.image.config.v1+json", b"{}"),
        ("application/vnd.oci.image.layer.v1.tar+gzip", b"\x1f\x8b"),
    );
    let out = nicpolicy(
        &[
            "pull",
            &format!("{}/platform/image:1", registry.host()),
            "--plain-http",
        ],
        &dir,
    );
    assert_exit_saying(&out, 3, &["platform/image:1"]);

    // An unknown tag names the reference and what the registry said.
    let out = nicpolicy(
        &[
            "pull",
            &format!("{}/platform/capvcd-cncf:2", registry.host()),
            "--plain-http",
        ],
        &dir,
    );
    assert_exit_saying(&out, 3, &["capvcd-cncf:2"]);
}

#[test]
fn plain_http_is_refused_for_a_registry_elsewhere_and_bad_input_is_named() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("oci-refusals");
    std::fs::create_dir_all(&dir).expect("dir");
    let (path, _) = module(&dir);
    let out = nicpolicy(
        &[
            "push",
            &path.to_string_lossy(),
            "registry.example.net/platform/capvcd:1",
            "--plain-http",
        ],
        &dir,
    );
    assert_exit_saying(&out, 2, &["plain HTTP is only for a registry on loopback"]);
    let out = nicpolicy(&["pull", "Not A Reference!", "--plain-http"], &dir);
    assert_exit_saying(&out, 2, &["not an OCI reference"]);
    std::fs::write(dir.join("notes.txt"), "not a module").expect("write");
    let out = nicpolicy(
        &["push", "notes.txt", "127.0.0.1:1/p/x:1", "--plain-http"],
        &dir,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    // --verify-key checks what is pulled: where nothing is, it is refused, not ignored.
    let (module, _) = module(&dir);
    std::fs::write(dir.join("site.pub"), "").expect("write");
    let out = nicpolicy(
        &[
            "push",
            &module.to_string_lossy(),
            "127.0.0.1:1/p/x:1",
            "--plain-http",
            "--verify-key",
            "site.pub",
        ],
        &dir,
    );
    assert_exit_saying(&out, 2, &["--verify-key checks modules that are pulled"]);
}

#[test]
fn a_policy_by_reference_is_evaluated_and_served_from_the_store_while_the_registry_is_down() {
    let Pushed {
        mut registry,
        dir,
        bytes,
        tag,
        immutable,
    } = Pushed::new("served");
    let cluster = workspace().join("examples/cluster.yaml");
    let machine = workspace().join("examples/invalid-machine.yaml");
    let eval = |reference: &str| {
        eval_by_reference(&dir, "invalid-machine.yaml", reference, &["-o", "json"])
    };
    let builtin = nicpolicy(
        &[
            "eval",
            "--cluster",
            &cluster.to_string_lossy(),
            "--machine",
            &machine.to_string_lossy(),
            "-o",
            "json",
        ],
        &dir,
    );
    assert_eq!(builtin.status.code(), Some(1), "{}", text(&builtin));
    // By digest and by tag, the module decides as the built-in one it was exported from.
    for reference in [immutable.as_str(), tag.as_str()] {
        let out = eval(reference);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert_eq!(out.stdout, builtin.stdout, "{reference}");
    }
    // The store keeps the module under its digest, in a directory of the user's own.
    let blob = dir
        .join("cache/oci/blobs/sha256")
        .join(format!("{:x}", Sha256::digest(&bytes)));
    assert_eq!(std::fs::read(&blob).expect("stored module"), bytes);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join("cache/oci"))
            .expect("store")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
    }

    // bench pulls with the command's registry options too.
    let case = workspace().join("tests/cases/capvcd");
    let out = nicpolicy(
        &[
            "bench",
            &case.to_string_lossy(),
            "--policy",
            &format!("oci://{tag}"),
            "--plain-http",
            "--iterations",
            "1",
            "-o",
            "json",
        ],
        &dir,
    );
    assert!(out.status.success(), "{}", text(&out));
    // inspect takes a reference too.
    let out = nicpolicy(&["inspect", &format!("oci://{tag}"), "--plain-http"], &dir);
    assert!(out.status.success(), "{}", text(&out));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains(&immutable), "{shown}");
    assert!(
        shown.contains(&format!("{:x}", Sha256::digest(&bytes))),
        "{shown}"
    );

    registry.stop();
    // A digest is served from the store without asking; a tag, with a warning naming the
    // digest served.
    let out = eval(&immutable);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(out.stdout, builtin.stdout);
    let out = eval(&tag);
    assert_exit_saying(&out, 1, &["the registry cannot be reached", &immutable]);
    // A stored module whose bytes were changed is not used.
    std::fs::write(&blob, b"\0asm\x01\0\0\0").expect("tamper");
    let out = eval(&immutable);
    assert_exit_saying(&out, 2, &[&immutable]);
    // Nothing stored and nothing reachable: the error names the reference.
    let out = eval(&format!("{}/platform/other:1", registry.host()));
    assert_exit_saying(&out, 2, &["platform/other:1"]);
}

#[test]
fn a_withdrawn_tag_is_not_served_from_the_store() {
    let Pushed {
        registry,
        dir,
        tag,
        immutable,
        ..
    } = Pushed::new("withdrawn");
    let eval = |reference: &str| {
        eval_by_reference(&dir, "invalid-machine.yaml", reference, &["-o", "json"])
    };
    // Pulled once: the store holds it under the tag.
    let out = eval(&tag);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    // The registry answers, and no longer has the tag (its manifest deleted).
    let (repository, digest) = immutable.split_once('@').expect("host/repo@digest");
    let path = repository
        .split_once('/')
        .map(|(_, repo)| repo)
        .expect("host/repo");
    let deleted = reqwest::blocking::Client::new()
        .delete(format!(
            "http://{}/v2/{path}/manifests/{digest}",
            registry.host()
        ))
        .send()
        .expect("the registry answers");
    assert_eq!(deleted.status().as_u16(), 202, "{deleted:?}");
    // A registry that answers no is believed: no stored copy stands in for the tag.
    let out = eval(&tag);
    assert_exit_saying(&out, 2, &[&tag]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!said.contains("cannot be reached"), "{said}");
    assert!(
        !said.contains(&immutable),
        "the stored digest is not offered: {said}"
    );
}

#[test]
fn a_swapped_or_exposed_store_entry_is_not_served() {
    use std::os::unix::fs::PermissionsExt;

    let Pushed {
        mut registry,
        dir,
        immutable,
        ..
    } = Pushed::new("swapped");
    let eval = || eval_by_reference(&dir, "invalid-machine.yaml", &immutable, &["-o", "json"]);
    let first = eval();
    assert_eq!(first.status.code(), Some(1), "{}", text(&first));
    registry.stop();
    // With the registry down, the stored copy serves the digest.
    let out = eval();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(out.stdout, first.stdout);

    let store = dir.join("cache/oci");
    let entry_path = store
        .join("refs")
        .join(format!("{:x}.json", Sha256::digest(immutable.as_bytes())));
    let original = std::fs::read(&entry_path).expect("the entry");
    let write_private = |path: &Path, bytes: &[u8]| {
        std::fs::write(path, bytes).expect("write");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    };
    // Someone who can write the store puts another module under the same digest: a blob of
    // its own, and an entry (and a manifest) naming it. The signed manifest's digest no longer
    // matches, and the module is not used.
    let (_, other) = registry::export(&dir, "role-based");
    let other_layer = format!("sha256:{:x}", Sha256::digest(&other));
    write_private(
        &store
            .join("blobs/sha256")
            .join(other_layer.trim_start_matches("sha256:")),
        &other,
    );
    let mut entry: serde_json::Value = serde_json::from_slice(&original).expect("JSON");
    let real_layer = entry["layer"].as_str().expect("a layer").to_string();
    let manifest = entry["manifest"]
        .as_str()
        .expect("the manifest kept")
        .to_string();
    assert!(manifest.contains(&real_layer), "{manifest}");
    entry["layer"] = other_layer.clone().into();
    write_private(&entry_path, entry.to_string().as_bytes());
    let out = eval();
    assert_exit_saying(&out, 2, &[&immutable]);
    entry["manifest"] = manifest.replace(&real_layer, &other_layer).into();
    write_private(&entry_path, entry.to_string().as_bytes());
    let out = eval();
    assert_exit_saying(&out, 2, &[&immutable]);

    // The real entry back, in a directory others may write: not used either.
    write_private(&entry_path, &original);
    let refs = store.join("refs");
    std::fs::set_permissions(&refs, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let out = eval();
    assert_exit_saying(&out, 2, &[&immutable]);
    std::fs::set_permissions(&refs, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let out = eval();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(out.stdout, first.stdout);
}

#[test]
fn the_webhook_configuration_serves_a_policy_by_digest_through_an_outage() {
    let Pushed {
        mut registry,
        dir,
        tag,
        immutable,
        ..
    } = Pushed::new("configured");
    let write = |name: &str, reference: &str| {
        let config = dir.join(name);
        std::fs::write(
            &config,
            format!(
                "policies:\n  VCDMachine:\n    - oci: {reference}\n\
                 registry: {{plainHttp: true, requireDigest: true}}\n"
            ),
        )
        .expect("config");
        config
    };
    let by_digest = write("by-digest.yaml", &immutable);
    let request = workspace().join("tests/fixtures/admission/vcdmachine-create-invalid.json");
    let clusters = workspace().join("examples/cluster.yaml");
    let review = |config: &Path| review(&dir, config, "vcdmachine-create-invalid.json");
    let builtin = nicpolicy(
        &[
            "review",
            "--request",
            &request.to_string_lossy(),
            "--clusters",
            &clusters.to_string_lossy(),
        ],
        &dir,
    );
    assert_eq!(builtin.status.code(), Some(1), "{}", text(&builtin));
    let out = review(&by_digest);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(out.stdout, builtin.stdout);
    // A tag is refused by requireDigest, naming the field.
    let out = review(&write("by-tag.yaml", &tag));
    assert_exit_saying(&out, 2, &["policies.VCDMachine[0].oci", "requireDigest"]);
    // The registry is down: the webhook still starts, from the store.
    registry.stop();
    let out = review(&by_digest);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(out.stdout, builtin.stdout);
}

#[test]
fn the_webhook_reloads_to_a_new_digest_and_keeps_serving_when_a_pull_fails() {
    let Pushed {
        mut registry,
        dir,
        immutable,
        ..
    } = Pushed::new("reload");
    // A second module under another tag: the role-based policy.
    let role_based = push_second(&registry, &dir);

    let config = dir.join("nicpolicy.yaml");
    let write = |reference: &str| {
        // Written beside and renamed over, as a ConfigMap update swaps the file.
        let next = dir.join("nicpolicy.yaml.next");
        std::fs::write(
            &next,
            format!(
                "policies:\n  VCDMachine:\n    - oci: {reference}\n\
                 registry: {{plainHttp: true, requireDigest: true}}\n\
                 reload: {{interval: 200ms}}\n"
            ),
        )
        .expect("config");
        std::fs::rename(&next, &config).expect("swap");
    };
    write(&immutable);
    let serving = Serving::start(&dir, &config);
    serving.until_ready("ok: generation 1", &dir);

    // A new digest in the configuration: pulled and swapped in.
    write(&role_based);
    serving.until_ready("ok: generation 2", &dir);
    assert!(
        Serving::log(&dir).contains(&role_based),
        "the pull is logged with its digest:\n{}",
        Serving::log(&dir)
    );
    // What generation 1 used and generation 2 does not is gone from the cache and the store:
    // the role-based module's compiled file is the only one of the server's engine, and the
    // store holds its reference and module alone.
    let role_sha256 = format!(
        "{:x}",
        Sha256::digest(std::fs::read(dir.join("role-based.wasm")).expect("exported"))
    );
    let names = |at: &Path| -> Vec<String> {
        std::fs::read_dir(at)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let cache = dir.join("cache");
    let compiled = names(&cache);
    let suffix = compiled
        .iter()
        .find_map(|name| name.strip_prefix(&role_sha256))
        .expect("the role-based module compiled in the cache")
        .to_string();
    let same_engine: Vec<&String> = compiled.iter().filter(|n| n.ends_with(&suffix)).collect();
    assert_eq!(same_engine.len(), 1, "{compiled:?}");
    assert_eq!(names(&cache.join("oci/refs")).len(), 1);
    assert_eq!(
        names(&cache.join("oci/blobs/sha256")),
        std::slice::from_ref(&role_sha256),
        "only the module generation 2 serves"
    );

    // The registry is down and the next digest was never pulled: the reload fails, counted,
    // and generation 2 keeps serving.
    registry.stop();
    write(&format!(
        "{}/platform/role-based@sha256:{}",
        registry.host(),
        "0".repeat(64)
    ));
    Serving::eventually(&dir, "a load failure counted", || {
        serving
            .get("/metrics")
            .and_then(|text| {
                text.lines()
                    .find(|l| l.starts_with("nicpolicy_policy_load_failures_total"))
                    .and_then(|l| l.split_whitespace().last())
                    .and_then(|n| n.parse::<f64>().ok())
            })
            .is_some_and(|failures| failures >= 1.0)
    });
    serving.until_ready("ok: generation 2", &dir);
}

#[test]
fn the_kustomize_example_configuration_is_valid_and_names_digests() {
    let path = workspace().join("examples/kustomize/registry-module/nicpolicy.yaml");
    let config =
        nicpolicy::served::config::ServeConfig::read(&path).unwrap_or_else(|err| panic!("{err}"));
    assert!(config.registry.require_digest);
    assert_eq!(
        config.registry.options.docker_config.as_deref(),
        Some(Path::new("/etc/nicpolicy-registry/config.json"))
    );
    let references: Vec<&nicpolicy::PolicySource> = config
        .policies
        .values()
        .flatten()
        .map(|policy| &policy.spec.source)
        .filter(|source| {
            matches!(source, nicpolicy::PolicySource::Fetched { scheme, .. } if scheme == "oci://")
        })
        .collect();
    assert_eq!(references.len(), 2, "{references:?}");
    // The public key travels in the ConfigMap beside the configuration.
    let rule = &config.registry.options.verification.rules[0];
    assert_eq!(rule.references, ["registry.example.net/platform/*"]);
    assert!(rule.keys[0]
        .file()
        .is_some_and(|file| file.ends_with("registry-module/platform.pub")));
}

#[test]
fn a_private_registry_is_trusted_through_its_ca_for_every_registry_or_for_it_alone() {
    let tls = nicpolicy::webhook::tls::SelfSigned::generate(&[]).expect("a CA and a certificate");
    let registry = Registry::start_with("tls", Some((&tls.cert_pem, &tls.key_pem)));
    let dir = registry.dir.clone();
    std::fs::write(dir.join("ca.pem"), &tls.ca_pem).expect("CA");
    let (path, bytes) = module(&dir);
    let reference = format!("{}/platform/capvcd:0.1.0", registry.host());
    let push = |extra: &[&str]| {
        let mut args = vec!["push", path.to_str().expect("path"), reference.as_str()];
        args.extend_from_slice(extra);
        nicpolicy(&args, &dir)
    };
    // Without the CA the certificate is not trusted, and the error says where it failed.
    let out = push(&[]);
    assert_exit_saying(&out, 3, &[&reference]);
    // A CA for another registry does not help; for this one (or every one) it does.
    let other = "mirror.internal:5000=ca.pem".to_string();
    let out = push(&["--registry-ca", &other]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let own = format!("{}=ca.pem", registry.host());
    let out = push(&["--registry-ca", &own]);
    assert!(out.status.success(), "{}", text(&out));
    let out = nicpolicy(
        &[
            "pull",
            &reference,
            "-o",
            "pulled.wasm",
            "--registry-ca",
            "ca.pem",
        ],
        &dir,
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        std::fs::read(dir.join("pulled.wasm")).expect("pulled"),
        bytes
    );
}

#[test]
fn copy_mirrors_a_module_into_another_registry_with_the_same_layer() {
    let Pushed {
        mut registry,
        dir,
        bytes,
        immutable,
        ..
    } = Pushed::new("copy-from");
    let mirror = Registry::start("copy-to");
    let target = format!("{}/mirror/capvcd:0.1.0", mirror.host());
    let out = nicpolicy(&["copy", &immutable, &target, "--plain-http"], &dir);
    assert!(out.status.success(), "{}", text(&out));
    let copied = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        copied.starts_with(&format!("{}/mirror/capvcd@sha256:", mirror.host())),
        "{copied}"
    );
    // The same module bytes (so a sha256 pin holds for either copy) and the same manifest.
    assert_eq!(
        copied.rsplit('@').next(),
        immutable.rsplit('@').next(),
        "the manifest is written alike"
    );
    // The source is gone: the mirror alone serves it.
    registry.stop();
    let out = nicpolicy(
        &["pull", &copied, "-o", "mirrored.wasm", "--plain-http"],
        &dir,
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        std::fs::read(dir.join("mirrored.wasm")).expect("pulled"),
        bytes
    );
}

#[test]
fn a_registry_behind_basic_auth_takes_the_credentials_of_a_docker_config() {
    let registry = Registry::start_with_login("login", ("platform-ci", "s3cret-pa55"));
    let dir = registry.dir.clone();
    let (path, bytes) = module(&dir);
    let tag = format!("{}/platform/capvcd:0.1.0", registry.host());
    let credentials = |name: &str, password: &str| {
        let path = dir.join(name);
        let auth = base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            format!("platform-ci:{password}"),
        );
        std::fs::write(
            &path,
            serde_json::json!({"auths": {registry.host(): {"auth": auth}}}).to_string(),
        )
        .expect("config.json");
        path
    };
    let good = credentials("good.json", "s3cret-pa55");
    let wrong = credentials("wrong.json", "guess");
    let push = |config: Option<&Path>| {
        let mut args = vec![
            "push".to_string(),
            path.to_string_lossy().into_owned(),
            tag.clone(),
            "--plain-http".to_string(),
        ];
        if let Some(config) = config {
            args.push("--registry-config".to_string());
            args.push(config.to_string_lossy().into_owned());
        }
        nicpolicy(&args.iter().map(String::as_str).collect::<Vec<_>>(), &dir)
    };
    // Anonymous and a wrong password are turned away, as the registry says.
    for out in [push(None), push(Some(&wrong))] {
        assert_eq!(out.status.code(), Some(3), "{}", text(&out));
        let said = String::from_utf8_lossy(&out.stderr).to_lowercase();
        assert!(
            said.contains("401") || said.contains("unauthorized"),
            "{said}"
        );
    }
    let out = push(Some(&good));
    assert!(out.status.success(), "{}", text(&out));
    let immutable = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let out = nicpolicy(
        &[
            "pull",
            &immutable,
            "-o",
            "pulled.wasm",
            "--plain-http",
            "--registry-config",
            &good.to_string_lossy(),
        ],
        &dir,
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        std::fs::read(dir.join("pulled.wasm")).expect("pulled"),
        bytes
    );
    // The webhook's configuration names the same file (`registry.config`, where the chart
    // mounts the credentials Secret).
    let config = dir.join("nicpolicy.yaml");
    std::fs::write(
        &config,
        format!(
            "policies:\n  VCDMachine:\n    - oci: {immutable}\n\
             registry: {{plainHttp: true, requireDigest: true, config: {}}}\n",
            good.display()
        ),
    )
    .expect("config");
    let out = review(&dir, &config, "vcdmachine-create-invalid.json");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
}

#[test]
fn a_module_that_cannot_be_had_at_start_stops_the_start_or_denies_only_its_kind() {
    let registry = Registry::start("unavailable");
    let dir = registry.dir.clone();
    // Named by tag and never pushed yet: nothing in the store, nothing at the registry.
    let tag = format!("{}/platform/capvcd:0.1.0", registry.host());
    let config = dir.join("nicpolicy.yaml");
    let write = |mode: &str| {
        std::fs::write(
            &config,
            format!(
                "policies:\n  VCDMachine:\n    - oci: {tag}\n  VCDMachineTemplate:\n    - builtin: capvcd\n\
                 registry: {{plainHttp: true{mode}}}\nreload: {{interval: 200ms}}\n"
            ),
        )
        .expect("config");
    };
    let review = |fixture: &str| review(&dir, &config, fixture);
    // The default: the start stops, naming the entry and the registry's answer.
    write("");
    let out = review("vcdmachinetemplate-create-worker.json");
    assert_exit_saying(&out, 2, &["policies.VCDMachine[0]"]);
    // Deny: the other kind is served; this kind is denied saying why; a deletion passes.
    write(", onUnavailableAtStart: Deny");
    let out = review("vcdmachinetemplate-create-worker.json");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // (review answers 3 for a denial the policy did not make, as for a policy failure)
    let out = review("vcdmachine-create-worker.json");
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("\"allowed\": false")
            && said.contains("could not be had at start")
            && said.contains("platform/capvcd:0.1.0"),
        "{said}"
    );
    let out = review("vcdmachine-delete.json");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    // Served: ready with the kind named, and whole once the module is pushed.
    let serving = Serving::start(&dir, &config);
    serving.until_ready("ok: generation 1 (unavailable: VCDMachine)", &dir);
    let (path, _) = module(&dir);
    push(&dir, &path, &tag);
    serving.until_ready("ok: generation 2", &dir);
}
