//! Registry credentials from a docker `config.json`, the format `docker login` writes and an
//! imagePullSecret of type `kubernetes.io/dockerconfigjson` holds:
//!
//! ```json
//! {"auths": {"registry.example.net": {"auth": "<base64 of user:password>"}}}
//! ```
//!
//! An entry may give `username` and `password` instead of `auth`; keys may be written with a
//! scheme or a path (`https://registry.example.net/v1/`), as older docker versions did. Helpers
//! (`credsStore`, `credHelpers`) are not run: a pod has none, and a CLI user can write the entry.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use oci_client::secrets::RegistryAuth;
use serde::Deserialize;

/// Why credentials could not be read.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The file could not be read.
    #[error("{}: cannot read the registry credentials: {why}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// The file is not a docker config.json.
    #[error("{}: not a docker config.json: {why}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// Where and why.
        why: String,
    },
}

#[derive(Deserialize, Default)]
struct DockerConfig {
    #[serde(default)]
    auths: std::collections::BTreeMap<String, Entry>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Entry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    identitytoken: Option<String>,
}

/// Where docker keeps `config.json`: `$DOCKER_CONFIG/config.json`, else
/// `$HOME/.docker/config.json`.
pub fn default_path() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DOCKER_CONFIG") {
        return Some(PathBuf::from(dir).join("config.json"));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".docker/config.json"))
}

/// The credentials for `registry` (`host[:port]`) in `path` (or [`default_path`] when `None`);
/// anonymous when the file has no entry for it, or when no file was named and none is there.
///
/// # Errors
/// A named file that cannot be read, or a file that is not a docker config.json (the field at
/// fault).
pub fn credentials(registry: &str, path: Option<&Path>) -> Result<RegistryAuth, AuthError> {
    let (path, named) = match path {
        Some(path) => (path.to_path_buf(), true),
        None => match default_path() {
            Some(path) => (path, false),
            None => return Ok(RegistryAuth::Anonymous),
        },
    };
    let text = match nicpolicy_inputs::files::read_at_most(&path, 1 << 20) {
        Ok(bytes) => bytes,
        Err(nicpolicy_inputs::files::BoundedReadError::Io(err))
            if !named && err.kind() == std::io::ErrorKind::NotFound =>
        {
            return Ok(RegistryAuth::Anonymous)
        }
        Err(err) => {
            return Err(AuthError::Read {
                path,
                why: err.to_string(),
            })
        }
    };
    let config: DockerConfig =
        serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_slice(&text))
            .map_err(|err| AuthError::Format {
                path: path.clone(),
                why: format!("{}: {}", err.path(), err.inner()),
            })?;
    let Some((key, entry)) = config
        .auths
        .iter()
        .find(|(key, _)| host_of(key) == registry)
    else {
        return Ok(RegistryAuth::Anonymous);
    };
    entry_auth(entry).map_err(|why| AuthError::Format {
        path,
        why: format!("auths.{key}: {why}"),
    })
}

/// `registry.example.net` of `https://registry.example.net/v1/`.
fn host_of(key: &str) -> &str {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    key.split('/').next().unwrap_or(key)
}

fn entry_auth(entry: &Entry) -> Result<RegistryAuth, String> {
    if let Some(token) = entry.identitytoken.as_ref().filter(|t| !t.is_empty()) {
        return Ok(RegistryAuth::Bearer(token.clone()));
    }
    if let (Some(user), Some(password)) = (&entry.username, &entry.password) {
        return Ok(RegistryAuth::Basic(user.clone(), password.clone()));
    }
    let Some(auth) = entry.auth.as_ref().filter(|a| !a.is_empty()) else {
        return Ok(RegistryAuth::Anonymous);
    };
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(auth.trim())
        .map_err(|err| format!("auth is not base64: {err}"))?;
    let text = String::from_utf8(decoded).map_err(|_| "auth is not UTF-8".to_string())?;
    let (user, password) = text
        .split_once(':')
        .ok_or_else(|| "auth is not user:password".to_string())?;
    Ok(RegistryAuth::Basic(user.to_string(), password.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> (tempdir::Dir, PathBuf) {
        let dir = tempdir::Dir::new();
        let path = dir.path().join("config.json");
        std::fs::write(&path, text).expect("write");
        (dir, path)
    }

    /// A directory removed when dropped.
    mod tempdir {
        pub struct Dir(std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                use std::sync::atomic::{AtomicUsize, Ordering};
                static N: AtomicUsize = AtomicUsize::new(0);
                let path = std::env::temp_dir().join(format!(
                    "nicpolicy-auth-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                ));
                std::fs::create_dir_all(&path).expect("temp dir");
                Dir(path)
            }
            pub fn path(&self) -> &std::path::Path {
                &self.0
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn entries_are_found_by_host_in_every_docker_spelling() {
        // "platform:s3cret" in base64.
        let (_dir, path) = write(
            r#"{"auths": {
                "https://registry.example.net/v1/": {"auth": "cGxhdGZvcm06czNjcmV0"},
                "127.0.0.1:5055": {"username": "ci", "password": "pw"}}}"#,
        );
        let basic = |user: &str, password: &str| {
            format!("{:?}", RegistryAuth::Basic(user.into(), password.into()))
        };
        let found = credentials("registry.example.net", Some(&path)).expect("reads");
        assert_eq!(format!("{found:?}"), basic("platform", "s3cret"));
        let found = credentials("127.0.0.1:5055", Some(&path)).expect("reads");
        assert_eq!(format!("{found:?}"), basic("ci", "pw"));
        let found = credentials("mirror.example.net", Some(&path)).expect("reads");
        assert!(matches!(found, RegistryAuth::Anonymous));
    }

    #[test]
    fn bad_files_name_the_field() {
        let (_dir, path) = write(r#"{"auths": {"registry.example.net": {"auth": "***"}}}"#);
        let err = credentials("registry.example.net", Some(&path)).unwrap_err();
        assert!(
            err.to_string()
                .contains("auths.registry.example.net: auth is not base64"),
            "{err}"
        );
        let (_dir, path) = write(r#"{"auths": []}"#);
        let err = credentials("registry.example.net", Some(&path)).unwrap_err();
        assert!(
            err.to_string().contains("not a docker config.json: auths"),
            "{err}"
        );
        let missing = Path::new("/nonexistent/config.json");
        assert!(credentials("registry.example.net", Some(missing)).is_err());
    }
}
