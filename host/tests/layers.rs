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
    walk(&src(), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("read source");
            let text = match text.find("#[cfg(test)]\nmod tests") {
                Some(at) => &text[..at],
                None => &text,
            };
            let code: Vec<&str> = text
                .lines()
                .map(|line| line.split("//").next().unwrap_or(""))
                .collect();
            let rel = path
                .strip_prefix(src())
                .expect("under host/src")
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
            // A whole path segment: not `my_crate::` or `nicpolicy_plugin::`.
            !code[..*at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_')
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

#[test]
fn the_library_has_no_import_circle() {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, code) in library() {
        let from = top(&file).to_string();
        let to: BTreeSet<String> = named(&code, "crate::")
            .into_iter()
            .filter(|to| *to != from)
            .collect();
        edges.entry(from).or_default().extend(to);
    }
    let circle = find_circle(&edges);
    assert!(
        circle.is_none(),
        "import circle between the host's modules: {}",
        circle.unwrap_or_default().join(" -> ")
    );
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

/// The core: loading, limits, evaluating, chains, case files. It fetches modules through the
/// `ModuleFetcher`s it is given and knows no transport, no built-in policy and no feature.
const CORE: [&str; 17] = [
    "engine",
    "wasm_config",
    "compiler",
    "cache",
    "inspect",
    "policy",
    "limits",
    "error",
    "stages",
    "mode",
    "chain",
    "lifecycle",
    "kubewarden",
    "junit",
    "spec",
    "fetch",
    "cases",
];

#[test]
fn the_core_names_only_the_core_and_has_no_feature_gate() {
    let mut found = Vec::new();
    for (file, code) in library() {
        if !CORE.contains(&top(&file)) {
            continue;
        }
        for to in named(&code, "crate::") {
            if !CORE.contains(&to.as_str()) {
                found.push(format!("{file} uses crate::{to}"));
            }
        }
        // A test module's own gate is the test's business.
        for line in code.lines() {
            if line.contains("cfg(") && line.contains("feature") && !line.contains("test") {
                found.push(format!("{file}: {}", line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
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

#[test]
fn the_inputs_crate_links_no_engine_and_no_kubernetes_client() {
    // The playground compiles nicpolicy-inputs to wasm32, and the commands read manifests with
    // it: it must not pull Wasmtime, a Kubernetes client, an async runtime or an HTTP stack.
    let output = cargo_tree(&[
        "--package",
        "nicpolicy-inputs",
        "--prefix",
        "none",
        "--format",
        "{p}",
    ]);
    let tree = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let crates: BTreeSet<&str> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert!(crates.contains("nicpolicy-plugin"), "{tree}");
    let forbidden = [
        "wasmtime",
        "kube",
        "kube-client",
        "kube-runtime",
        "tokio",
        "axum",
        "hyper",
        "tower",
        "rustls",
    ];
    let found: Vec<&&str> = forbidden.iter().filter(|c| crates.contains(**c)).collect();
    assert!(
        found.is_empty(),
        "nicpolicy-inputs depends on {found:?}:\n{tree}"
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
