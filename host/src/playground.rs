//! The playground page of `nicpolicy playground`: static files (HTML, JS, CSS, the policies'
//! wasm-bindgen builds, the page's manifest reader, example manifests) built by `build.rs` and
//! embedded in the binary, so the page works offline from any static file server.

use std::path::{Path, PathBuf};

include!(concat!(env!("OUT_DIR"), "/playground_files.rs"));

/// A page file that could not be written.
#[derive(Debug, thiserror::Error)]
#[error("{}: cannot write: {source}", path.display())]
pub struct WriteError {
    /// The file or directory.
    pub path: PathBuf,
    /// The I/O error.
    #[source]
    pub source: std::io::Error,
}

/// The file at a URL path (`/` is `index.html`), with its content type.
pub fn file(url_path: &str) -> Option<(&'static [u8], &'static str)> {
    let name = match url_path.trim_start_matches('/') {
        "" => "index.html",
        name => name,
    };
    FILES
        .iter()
        .find(|(file, _)| *file == name)
        .map(|(file, bytes)| (*bytes, content_type(file)))
}

/// The `Content-Type` of a page file, from its extension.
pub fn content_type(name: &str) -> &'static str {
    match name.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        // Browsers compile a module while it downloads only when served as application/wasm.
        Some("wasm") => "application/wasm",
        Some("json") => "application/json",
        Some("yaml" | "yml") => "application/yaml",
        Some("png") => "image/png",
        Some("svg") => "image/svg+xml",
        _ => "application/octet-stream",
    }
}

/// Writes every page file under `dir` (created when missing; files of the same name are
/// replaced) and returns how many were written.
pub fn write_to(dir: &Path) -> Result<usize, WriteError> {
    for (name, bytes) in FILES {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| WriteError {
                path: parent.to_path_buf(),
                source,
            })?;
        }
        std::fs::write(&path, bytes).map_err(|source| WriteError { path, source })?;
    }
    Ok(FILES.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_holds_every_builtin_policy_and_the_manifest_reader() {
        assert!(file("/").is_some_and(|(_, kind)| kind.starts_with("text/html")));
        for policy in crate::builtin::POLICIES {
            let module = policy.package.replace('-', "_");
            let (_, kind) = file(&format!("/pkg/{module}_bg.wasm")).expect(policy.name);
            assert_eq!(kind, "application/wasm");
            assert!(file(&format!("pkg/{module}.js")).is_some(), "{module}");
        }
        assert!(file("pkg/nicpolicy_playground_bg.wasm").is_some());
        let (index, _) = file("pkg/policies.json").expect("policies.json");
        let index: serde_json::Value = serde_json::from_slice(index).expect("JSON");
        assert_eq!(
            index.as_array().map(Vec::len),
            Some(crate::builtin::POLICIES.len())
        );
        assert!(file("examples/cluster-multizone.yaml").is_some());
        assert!(file("../Cargo.toml").is_none());
    }
}
