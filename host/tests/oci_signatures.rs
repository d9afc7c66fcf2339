//! Cosign signatures of policy modules against a real registry (Debian's `docker-registry` on
//! loopback): key pairs written by `generate-key-pair`, signatures made by `nicpolicy sign` and by
//! the library, checked by `verify`, `--verify-key` and the webhook configuration's
//! `verification:` section; what is refused (unsigned, another key, a signature of another
//! digest, a repository no rule names); the store through an outage; and copies to a mirror.

mod common;
mod registry;

use std::path::{Path, PathBuf};

use registry::{
    assert_exit_saying, eval_by_reference, nicpolicy, nicpolicy_with, push_second, review, text,
    Pushed, Registry, Serving,
};

const PASSWORD: &str = "correct horse battery staple";

/// Writes the key pair `PREFIX.key` / `PREFIX.pub` in `dir` with `generate-key-pair`.
fn key_pair(dir: &Path, prefix: &str) -> (PathBuf, PathBuf) {
    let out = nicpolicy_with(
        &["generate-key-pair", "--output-key-prefix", prefix],
        dir,
        &[("COSIGN_PASSWORD", PASSWORD)],
    );
    assert!(out.status.success(), "{}", text(&out));
    (
        dir.join(format!("{prefix}.key")),
        dir.join(format!("{prefix}.pub")),
    )
}

fn sign(reference: &str, key: &Path, dir: &Path) -> String {
    let out = nicpolicy_with(
        &[
            "sign",
            reference,
            "--key",
            &key.to_string_lossy(),
            "--plain-http",
        ],
        dir,
        &[("COSIGN_PASSWORD", PASSWORD)],
    );
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn verify(reference: &str, key: &Path, dir: &Path) -> std::process::Output {
    nicpolicy(
        &[
            "verify",
            reference,
            "--key",
            &key.to_string_lossy(),
            "--plain-http",
        ],
        dir,
    )
}

#[test]
fn signed_modules_verify_and_unsigned_other_key_and_moved_signatures_are_refused() {
    let Pushed {
        registry,
        dir,
        immutable,
        tag,
        ..
    } = Pushed::new("sign");
    let (site_key, site_pub) = key_pair(&dir, "site");
    let (other_key, other_pub) = key_pair(&dir, "other");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&site_key)
            .expect("key")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "the private key is the owner's alone");
    }
    // A key pair is never overwritten.
    let out = nicpolicy_with(
        &["generate-key-pair", "--output-key-prefix", "site"],
        &dir,
        &[("COSIGN_PASSWORD", PASSWORD)],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));

    // Unsigned: refused, naming where the signature would be.
    let out = verify(&immutable, &site_pub, &dir);
    let hex = immutable.rsplit("sha256:").next().expect("digest");
    assert_exit_saying(&out, 1, &["not signed", &format!("sha256-{hex}.sig")]);

    // Signed by tag: the digest the tag names is signed, where cosign keeps signatures.
    let at = sign(&tag, &site_key, &dir);
    assert_eq!(
        at,
        format!("{}/platform/capvcd:sha256-{hex}.sig", registry.host())
    );
    let out = verify(&immutable, &site_pub, &dir);
    assert!(out.status.success(), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(&immutable) && said.contains("site.pub"),
        "{said}"
    );
    // Signing twice with the same key keeps one signature; another key adds one.
    sign(&immutable, &site_key, &dir);
    let out = verify(&immutable, &other_pub, &dir);
    assert_exit_saying(&out, 1, &["none of its 1 signature(s)"]);
    sign(&immutable, &other_key, &dir);
    for key in [&site_pub, &other_pub] {
        let out = verify(&immutable, key, &dir);
        assert!(out.status.success(), "{}", text(&out));
    }

    // The wrong password is named.
    let out = nicpolicy_with(
        &[
            "sign",
            &immutable,
            "--key",
            &site_key.to_string_lossy(),
            "--plain-http",
        ],
        &dir,
        &[("COSIGN_PASSWORD", "wrong")],
    );
    assert_exit_saying(&out, 2, &["COSIGN_PASSWORD"]);

    // A signature image moved onto another module's digest vouches for the first digest only.
    let second = push_second(&registry, &dir);
    let second_hex = second.rsplit("sha256:").next().expect("digest");
    let client = reqwest::blocking::Client::new();
    let accept = "application/vnd.oci.image.manifest.v1+json";
    let signatures = client
        .get(format!(
            "http://{}/v2/platform/capvcd/manifests/sha256-{hex}.sig",
            registry.host()
        ))
        .header("accept", accept)
        .send()
        .and_then(|r| r.bytes())
        .expect("signature manifest");
    let manifest: serde_json::Value = serde_json::from_slice(&signatures).expect("json");
    // cosign's layout: simple-signing layers with the signature in an annotation.
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 2, "{manifest}");
    for layer in layers {
        assert_eq!(
            layer["mediaType"],
            "application/vnd.dev.cosign.simplesigning.v1+json"
        );
        assert!(layer["annotations"]["dev.cosignproject.cosign/signature"].is_string());
    }
    // Its blobs into the second repository, then the manifest under the second digest's tag.
    let mut blobs = vec![manifest["config"]["digest"].as_str().expect("config")];
    blobs.extend(layers.iter().map(|l| l["digest"].as_str().expect("digest")));
    for blob in blobs {
        let moved = client
            .post(format!(
                "http://{}/v2/platform/role-based/blobs/uploads/?mount={blob}&from=platform/capvcd",
                registry.host()
            ))
            .send()
            .expect("mount");
        assert_eq!(moved.status(), 201, "{}", registry.log());
    }
    let put = client
        .put(format!(
            "http://{}/v2/platform/role-based/manifests/sha256-{second_hex}.sig",
            registry.host()
        ))
        .header("content-type", accept)
        .body(signatures.to_vec())
        .send()
        .expect("put");
    assert_eq!(put.status(), 201, "{}", registry.log());
    let out = verify(&second, &site_pub, &dir);
    assert_exit_saying(&out, 1, &["another manifest", hex]);

    // --verify-key on eval: the signed module runs, the unsigned one is refused before use.
    let key = site_pub.to_string_lossy();
    let eval = |reference: &str| {
        eval_by_reference(&dir, "machine.yaml", reference, &["--verify-key", &key])
    };
    let out = eval(&tag);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = eval(&second);
    assert_exit_saying(&out, 2, &["refused"]);
}

#[test]
fn library_signatures_check_and_a_mirror_copy_keeps_them() {
    use nicpolicy::oci::signature::{SigningKey, TrustedKey, Verification};
    use nicpolicy::oci::RegistryOptions;

    let Pushed {
        mut registry,
        dir,
        immutable,
        bytes,
        ..
    } = Pushed::new("sign-copy");
    // Signed with the library itself, read back by the CLI with the public key it gives.
    let key = SigningKey::generate().expect("key");
    let public = dir.join("platform.pub");
    std::fs::write(&public, key.public_pem().expect("pem")).expect("public key");
    // Anonymous, whatever the machine's user has logged in to.
    let anonymous = dir.join("anonymous.json");
    std::fs::write(&anonymous, "{\"auths\": {}}").expect("config");
    let options = RegistryOptions {
        plain_http: true,
        docker_config: Some(anonymous),
        ..RegistryOptions::default()
    };
    let signed =
        nicpolicy::oci::blocking(|| nicpolicy::oci::signature::sign(&immutable, &key, &options))
            .expect("signed");
    assert_eq!(signed.immutable, immutable);
    let out = verify(&immutable, &public, &dir);
    assert!(out.status.success(), "{}", text(&out));

    // The library's pull with verification answers the key.
    let verifying = RegistryOptions {
        verification: Verification::every_repository(vec![TrustedKey::read(&public).expect("key")]),
        ..options.clone()
    };
    let pulled = nicpolicy::oci::blocking(|| nicpolicy::oci::pull(&immutable, &verifying))
        .expect("verified pull");
    assert_eq!(pulled.bytes, bytes);
    assert_eq!(
        pulled.verified_by.as_deref(),
        Some(public.display().to_string().as_str())
    );

    // Copied to a mirror with its signature: same digest, and it verifies there with the source
    // gone.
    let mirror = Registry::start("sign-mirror");
    let target = format!("{}/mirror/capvcd:0.1.0", mirror.host());
    let out = nicpolicy(
        &[
            "copy",
            &immutable,
            &target,
            "--plain-http",
            "--verify-key",
            &public.to_string_lossy(),
        ],
        &dir,
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("1 signature(s)"),
        "{}",
        text(&out)
    );
    let copied = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(copied.rsplit('@').next(), immutable.rsplit('@').next());
    registry.stop();
    let out = verify(&copied, &public, &dir);
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn the_webhook_configuration_refuses_unsigned_modules_and_verifies_its_store_in_an_outage() {
    let Pushed {
        mut registry,
        dir,
        immutable,
        ..
    } = Pushed::new("sign-serve");
    let (site_key, site_pub) = key_pair(&dir, "site");
    let (_, other_pub) = key_pair(&dir, "other");
    let config = dir.join("nicpolicy.yaml");
    let write = |reference: &str, pattern: &str, key: &Path| {
        // Written beside and renamed over, as a ConfigMap update swaps the file.
        let next = dir.join("nicpolicy.yaml.next");
        std::fs::write(
            &next,
            format!(
                "policies:\n  VCDMachine:\n    - oci: {reference}\n\
                 registry: {{plainHttp: true, requireDigest: true}}\n\
                 verification:\n  - references: [\"{pattern}\"]\n    keys: [{}]\n\
                 reload: {{interval: 200ms}}\n",
                key.display()
            ),
        )
        .expect("config");
        std::fs::rename(&next, &config).expect("swap");
    };
    let platform = format!("{}/platform/*", registry.host());
    let review = || review(&dir, &config, "vcdmachine-create-invalid.json");
    let refused = |out: &std::process::Output, words: &[&str]| {
        assert_exit_saying(out, 2, &[&["policies.VCDMachine[0]"], words].concat());
    };

    // Unsigned: the configuration does not load.
    write(&immutable, &platform, &site_pub);
    refused(&review(), &["not signed"]);
    // A repository no rule names is refused too.
    write(&immutable, "registry.example.net/platform/*", &site_pub);
    refused(&review(), &["no verification rule"]);
    // A rule that is no pattern of repositories, or a key that is no key: the field is named.
    write(
        &immutable,
        &format!("{}/platform/capvcd:0.1.0", registry.host()),
        &site_pub,
    );
    let out = review();
    assert_exit_saying(&out, 2, &["verification[0].references[0]"]);
    write(&immutable, &platform, &site_key);
    let out = review();
    assert_exit_saying(&out, 2, &["verification[0].keys[0]"]);

    // Signed: served, and it decides (denies the invalid machine).
    sign(&immutable, &site_key, &dir);
    write(&immutable, &platform, &site_pub);
    let out = review();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));

    // The webhook serves it; a reload to an unsigned digest is refused and counted, and the
    // signed generation keeps serving.
    let serving = Serving::start(&dir, &config);
    serving.until_ready("ok: generation 1", &dir);
    let second = push_second(&registry, &dir);
    write(&second, &platform, &site_pub);
    Serving::eventually(&dir, "the unsigned module refused", || {
        Serving::log(&dir).contains("not signed")
    });
    serving.until_ready("ok: generation 1", &dir);
    drop(serving);

    // The registry is down: the stored module starts with its stored signature, checked again
    // with the keys configured now.
    write(&immutable, &platform, &site_pub);
    registry.stop();
    let out = review();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    write(&immutable, &platform, &other_pub);
    refused(&review(), &["cannot be reached", "do not check"]);
}
