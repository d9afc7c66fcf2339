//! The host's layers, drawn from its imports: a module may use the modules below it, never one
//! above it or beside it. The shared layer (the engine and policies, `served`: the configuration
//! and its snapshot, `clusters`: the cluster lookup of the `nicpolicy-inputs` crate, which a
//! `cargo tree` check keeps free of engines and clients, `audit`'s offline evaluation)
//! knows nothing of HTTP or the Kubernetes API; the adapters (`webhook`, `controller`, the live
//! readers) stand on it; the CLI's commands share through named modules only. Read from the
//! source: code lines only (comments and the unit-test modules at the end of a file do not
//! count).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `host/src`, relative to it ("webhook/review.rs"), with its code: the
/// text before a trailing `#[cfg(test)] mod tests`, each line cut at `//`.
fn sources() -> Vec<(String, String)> {
    sources_under(&src())
}

/// The same for the sources of the crate at `dir` (relative to `host/`): `engine`, `inputs`,
/// `../plugin`.
fn crate_sources(dir: &str) -> Vec<(String, String)> {
    sources_under(&Path::new(env!("CARGO_MANIFEST_DIR")).join(dir).join("src"))
}

fn sources_under(src: &Path) -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read host/src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(src, &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("read source");
            let text = [
                "#[cfg(test)]\nmod tests",
                "#[cfg(test)]\npub(crate) mod tests",
            ]
            .iter()
            .filter_map(|start| text.find(start))
            .min()
            .map_or(text.as_str(), |at| &text[..at]);
            let code: Vec<&str> = text
                .lines()
                .map(|line| line.split("//").next().unwrap_or(""))
                .collect();
            let rel = path
                .strip_prefix(src)
                .expect("under the crate's src")
                .to_string_lossy()
                .replace('\\', "/");
            (rel, code.join("\n"))
        })
        .collect()
}

/// The top-level module a file belongs to ("webhook" for "webhook/review.rs").
fn top(file: &str) -> &str {
    let first = file.split('/').next().unwrap_or(file);
    first.strip_suffix(".rs").unwrap_or(first)
}

/// The top-level modules `code` names through `crate::` (or `nicpolicy::`, from the binary).
fn named(code: &str, prefix: &str) -> BTreeSet<String> {
    code.match_indices(prefix)
        .filter(|(at, _)| {
            // A whole path segment: not `my_crate::` or `nicpolicy_plugin::`, nor a macro's
            // `$crate::`, which names the crate where the macro is used.
            !code[..*at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$')
        })
        .map(|(at, _)| {
            code[at + prefix.len()..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_' || c.is_ascii_digit())
                .collect::<String>()
        })
        .filter(|name| !name.is_empty())
        .collect()
}

fn library() -> Vec<(String, String)> {
    sources()
        .into_iter()
        .filter(|(file, _)| !file.starts_with("cli/") && file != "main.rs" && file != "lib.rs")
        .collect()
}

/// Which top-level modules each module of `sources` names through `crate::`.
fn edges(sources: &[(String, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, code) in sources {
        let from = top(file).to_string();
        let to: BTreeSet<String> = named(code, "crate::")
            .into_iter()
            .filter(|to| *to != from)
            .collect();
        edges.entry(from).or_default().extend(to);
    }
    edges
}

#[test]
fn no_crate_has_an_import_circle() {
    for (name, sources) in [
        ("nicpolicy (host/src)", library()),
        ("nicpolicy-engine", crate_sources("engine")),
        ("nicpolicy-inputs", crate_sources("inputs")),
        ("nicpolicy-oci", crate_sources("oci")),
        ("nicpolicy-plugin", crate_sources("../plugin")),
    ] {
        assert!(sources.len() > 2, "{name}: read its sources");
        let circle = find_circle(&edges(&sources));
        assert!(
            circle.is_none(),
            "import circle between the modules of {name}: {}",
            circle.unwrap_or_default().join(" -> ")
        );
    }
}

/// A circle in `edges`, as the path around it, found by a depth-first search for a back edge.
fn find_circle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut circle = path[at..].to_vec();
            circle.push(node.to_string());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(circle) = visit(next, edges, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|node| visit(node, edges, &mut Vec::new(), &mut done))
}

#[test]
fn no_layer_imports_one_above_or_beside_it() {
    // Adapters: what serves over HTTP or talks to the Kubernetes API, and the page.
    let adapters = ["webhook", "controller", "playground"];
    let mut broken = Vec::new();
    for (file, code) in library() {
        let from = top(&file);
        for to in named(&code, "crate::") {
            let allowed = match (from, to.as_str()) {
                (a, b) if a == b => true,
                // The controller is the continuous audit: it evaluates through audit's
                // offline evaluation, which knows nothing of it.
                ("controller", "audit") => true,
                (_, b) if adapters.contains(&b) => false,
                // The audit is offline evaluation below the controller.
                (a, "audit") => a == "controller",
                _ => true,
            };
            if !allowed {
                broken.push(format!("{file} uses crate::{to}"));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "imports across layers:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_engine_has_no_feature_gate() {
    // The engine fetches modules through the `ModuleFetcher`s it is given: one build of it
    // serves every program, with nothing switched in or out (its tests included).
    let engine = crate_sources("engine");
    assert!(
        engine.iter().any(|(file, _)| file == "spec.rs"),
        "read the engine"
    );
    let mut gates = Vec::new();
    for (file, code) in &engine {
        for line in code.lines() {
            if line.contains("cfg(") && line.contains("feature") {
                gates.push(format!("{file}: {}", line.trim()));
            }
        }
    }
    assert!(gates.is_empty(), "{}", gates.join("\n"));
}

#[test]
fn only_the_webhook_and_its_two_commands_use_it() {
    let owners = ["cli/serve.rs", "cli/review.rs"];
    let users: Vec<String> = sources()
        .into_iter()
        .filter(|(file, _)| top(file) != "webhook" && !owners.contains(&file.as_str()))
        .filter(|(file, code)| {
            let prefix = if file.starts_with("cli/") || file == "main.rs" {
                "nicpolicy::"
            } else {
                "crate::"
            };
            named(code, prefix).contains("webhook")
        })
        .map(|(file, _)| file)
        .collect();
    assert!(
        users.is_empty(),
        "outside webhook/, cli/serve.rs and cli/review.rs, these use webhook::: {users:?}"
    );
}

#[test]
fn the_shared_layer_knows_no_http_and_no_kubernetes_client() {
    let clients = [
        "kube::",
        "kube_runtime::",
        "axum::",
        "axum_server::",
        "hyper::",
        "tower::",
    ];
    let mut found = Vec::new();
    for (file, code) in sources() {
        // The live readers and the adapters may; nothing else in the library.
        // `probes.rs`: the probe and metrics endpoints the adapters serve; `clusters/versions.rs`:
        // discovery of the versions the live readers read at; `guard.rs`: the CRD watch both
        // adapters run.
        let live = [
            "audit/live.rs",
            "clusters/live.rs",
            "clusters/versions.rs",
            "guard.rs",
            "probes.rs",
        ]
        .contains(&file.as_str());
        let adapter = ["webhook", "controller", "playground"].contains(&top(&file));
        if live || adapter || file.starts_with("cli/") || file == "main.rs" || file == "lib.rs" {
            continue;
        }
        for client in clients {
            if code.contains(client) {
                found.push(format!("{file} uses {client}"));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn commands_share_through_named_modules_not_through_each_other() {
    let commands: BTreeSet<String> = sources()
        .iter()
        .filter_map(|(file, code)| {
            let name = file.strip_prefix("cli/")?.strip_suffix(".rs")?;
            // A command module has the command's `run`.
            code.contains("pub fn run(").then(|| name.to_string())
        })
        .collect();
    assert!(
        commands.contains("eval") && commands.contains("serve"),
        "{commands:?}"
    );
    let mut crossing = Vec::new();
    for (file, code) in sources() {
        let Some(name) = file
            .strip_prefix("cli/")
            .and_then(|f| f.strip_suffix(".rs"))
        else {
            continue;
        };
        for used in named(&code, "super::") {
            if used != name && commands.contains(&used) {
                crossing.push(format!("cli/{name}.rs uses the `{used}` command"));
            }
        }
    }
    assert!(crossing.is_empty(), "{}", crossing.join("\n"));
}

/// `cargo tree --offline --edges normal ARGS` in this workspace (the build has fetched every
/// crate already).
fn cargo_tree(args: &[&str]) -> std::process::Output {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    std::process::Command::new(cargo)
        .args(["tree", "--offline", "--edges", "normal"])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs")
}

/// The crates `package` links (normal edges), from `cargo tree`.
fn linked(package: &str) -> (BTreeSet<String>, String) {
    let output = cargo_tree(&["--package", package, "--prefix", "none", "--format", "{p}"]);
    let tree = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let crates = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_string)
        .collect();
    (crates, tree)
}

/// Asserts that `package` links `expected` and none of `forbidden`.
fn assert_links_none_of(package: &str, expected: &str, forbidden: &[&str]) {
    let (crates, tree) = linked(package);
    assert!(
        crates.contains(expected),
        "{package} links {expected}:\n{tree}"
    );
    let found: Vec<&&str> = forbidden.iter().filter(|c| crates.contains(**c)).collect();
    assert!(found.is_empty(), "{package} depends on {found:?}:\n{tree}");
}

#[test]
fn the_inputs_crate_links_no_engine_and_no_kubernetes_client() {
    // The playground compiles nicpolicy-inputs to wasm32, and the commands read manifests with
    // it: it must not pull Wasmtime, a Kubernetes client, an async runtime or an HTTP stack.
    assert_links_none_of(
        "nicpolicy-inputs",
        "nicpolicy-plugin",
        &[
            "wasmtime",
            "kube",
            "kube-client",
            "kube-runtime",
            "tokio",
            "axum",
            "hyper",
            "tower",
            "rustls",
        ],
    );
}

#[test]
fn the_engine_links_no_registry_client_no_http_and_no_kubernetes_client() {
    // Whoever embeds the engine (a CLI, another policy engine, a test) gets Wasmtime and the
    // policy inputs, and none of the server stack: the compiler, not a review, keeps it so.
    assert_links_none_of(
        "nicpolicy-engine",
        "wasmtime",
        &[
            "tokio",
            "kube",
            "kube-client",
            "kube-runtime",
            "axum",
            "hyper",
            "reqwest",
            "rustls",
            "oci-client",
            "sigstore",
        ],
    );
}

#[test]
fn the_registry_crate_links_no_kubernetes_client_and_no_server() {
    // Pulling a module needs an HTTP client, never the webhook's server stack or kube.
    assert_links_none_of(
        "nicpolicy-oci",
        "oci-client",
        &["kube", "kube-client", "kube-runtime", "axum", "axum-server"],
    );
}

#[test]
fn one_tls_stack_ring_and_no_aws_lc_or_openssl() {
    // kube, the webhook's server and the registry client all run rustls on ring; a dependency
    // that turns on aws-lc-rs or OpenSSL would add a second stack to build, audit and patch.
    for stack in [
        "aws-lc-rs",
        "aws-lc-sys",
        "openssl",
        "openssl-sys",
        "native-tls",
    ] {
        let output = cargo_tree(&["--workspace", "--invert", stack]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success() && stderr.contains("did not match any packages"),
            "{stack} is in the build:\n{}",
            String::from_utf8_lossy(&output.stdout)
        );
    }
    let ring = cargo_tree(&["--workspace", "--invert", "ring"]);
    assert!(
        ring.status.success(),
        "ring is the TLS provider, so it is in the build"
    );
}

#[test]
fn the_checks_see_what_they_look_for() {
    // Paths are whole segments: another crate's name ending the same way is not this crate.
    let code = "use crate::webhook::Server;\nlet x = nicpolicy_plugin::objects::y(crate::spec::Z);";
    assert_eq!(
        named(code, "crate::"),
        BTreeSet::from(["spec".to_string(), "webhook".to_string()])
    );
    assert_eq!(named(code, "plugin::"), BTreeSet::new());
    assert_eq!(named("$crate::guest::log(x)", "crate::"), BTreeSet::new());
    assert_eq!(top("webhook/review.rs"), "webhook");
    assert_eq!(top("engine.rs"), "engine");
    // A circle through three modules is found and named; a tree is not one.
    let graph = |pairs: &[(&str, &str)]| {
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, to) in pairs {
            edges
                .entry(from.to_string())
                .or_default()
                .insert(to.to_string());
        }
        edges
    };
    let circle = find_circle(&graph(&[
        ("engine", "policy"),
        ("policy", "inspect"),
        ("inspect", "engine"),
    ]));
    assert_eq!(
        circle.map(|c| c.join(" -> ")).as_deref(),
        Some("engine -> policy -> inspect -> engine")
    );
    assert_eq!(
        find_circle(&graph(&[
            ("spec", "policy"),
            ("spec", "engine"),
            ("policy", "engine")
        ])),
        None
    );
}

#[test]
fn cargo_the_crate_docs_and_the_readme_list_the_same_features() {
    let host = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |path: &Path| std::fs::read_to_string(path).expect("readable");
    // host/Cargo.toml's [features], without `default`.
    let manifest = read(&host.join("Cargo.toml"));
    let section = manifest
        .split("[features]")
        .nth(1)
        .expect("a [features] section");
    let section = section.split("\n[").next().unwrap_or(section);
    let cargo: BTreeSet<String> = section
        .lines()
        .filter(|line| !line.starts_with('#') && !line.starts_with(' '))
        .filter_map(|line| line.split_once(" = "))
        .map(|(name, _)| name.trim().to_string())
        .filter(|name| name != "default")
        .collect();
    // lib.rs's "# Features": one `- `NAME` (default): ...` item each.
    let lib = read(&host.join("src/lib.rs"));
    let documented: BTreeSet<String> = lib
        .lines()
        .filter_map(|line| line.strip_prefix("//! - `"))
        .filter_map(|rest| rest.split_once("` (default)"))
        .map(|(name, _)| name.to_string())
        .collect();
    // README: "Features of `nicpolicy`: `NAME` (...), ...; all are on by default."
    let readme = read(&host.join("../README.md")).replace('\n', " ");
    let sentence = readme
        .split("Features of `nicpolicy`:")
        .nth(1)
        .and_then(|rest| rest.split("all are on by default").next())
        .expect("README lists the features");
    let listed: BTreeSet<String> = sentence
        .split('`')
        .collect::<Vec<_>>()
        .chunks(2)
        .filter_map(|pair| match pair {
            [_, name] => Some(name.to_string()),
            _ => None,
        })
        .filter(|name| cargo.contains(name) || !name.contains(' '))
        .filter(|name| sentence.contains(&format!("`{name}` (")))
        .collect();
    assert!(cargo.len() >= 5, "{cargo:?}");
    assert_eq!(
        documented, cargo,
        "lib.rs # Features against host/Cargo.toml"
    );
    assert_eq!(listed, cargo, "README against host/Cargo.toml");
}
