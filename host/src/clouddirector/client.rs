//! A Cloud Director OpenAPI client for reading: one API token, bounded calls, named errors.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

/// The API version of every call: 36.1, the first with API tokens (Cloud Director 10.3.1), which
/// also serves `orgVdcNetworks` with `ownerRef`.
pub const API_VERSION: &str = "36.1";

/// How long and how large each call may be, and how often it is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// Connecting to the site.
    pub connect: Duration,
    /// One whole call, body included.
    pub call: Duration,
    /// The body of one answer.
    pub max_body_bytes: usize,
    /// Attempts of a call answered 429 or 503 (the first included).
    pub attempts: u32,
    /// The longest wait between attempts, whatever `Retry-After` asks.
    pub max_wait: Duration,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            connect: Duration::from_secs(10),
            call: Duration::from_secs(30),
            max_body_bytes: 8 << 20,
            attempts: 4,
            max_wait: Duration::from_secs(30),
        }
    }
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The site's address cannot be used.
    #[error("{site}: {why}")]
    Site {
        /// As given.
        site: String,
        /// Why.
        why: String,
    },
    /// The CA file cannot be read or holds no certificate.
    #[error("{}: {why}", path.display())]
    CaFile {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// 401: the API token (or the session it gave) is not accepted.
    #[error("{what}: 401 Unauthorized from Cloud Director{detail}: the API token is not valid for org {org} (revoked, or of another org); create one under User preferences > API tokens")]
    Unauthorized {
        /// The call.
        what: String,
        /// The org logged in to.
        org: String,
        /// Cloud Director's message, with a leading `: `, or empty.
        detail: String,
    },
    /// 403: the token's user may not read this.
    #[error("{what}: 403 Forbidden from Cloud Director{detail}: the token's user needs a role that can view the org VDC networks (and, for a VDC by name, the VDCs)")]
    Forbidden {
        /// The call.
        what: String,
        /// Cloud Director's message, with a leading `: `, or empty.
        detail: String,
    },
    /// 404 of the call itself.
    #[error("{what}: 404 Not Found from Cloud Director{detail}")]
    NotFound {
        /// The call.
        what: String,
        /// Cloud Director's message, with a leading `: `, or empty.
        detail: String,
    },
    /// 429 or 503 on every attempt.
    #[error("{what}: {status} from Cloud Director on each of {attempts} attempts (it is busy or limiting this client); try again later")]
    Busy {
        /// The call.
        what: String,
        /// The last status.
        status: u16,
        /// Attempts made.
        attempts: u32,
    },
    /// Any other status.
    #[error("{what}: HTTP {status} from Cloud Director{detail}")]
    Status {
        /// The call.
        what: String,
        /// The status.
        status: u16,
        /// Cloud Director's message, with a leading `: `, or empty.
        detail: String,
    },
    /// No answer in time, the connection failed or the body was cut short.
    #[error("{what}: {why}")]
    Transport {
        /// The call.
        what: String,
        /// Why.
        why: String,
    },
    /// An answer larger than [`Bounds::max_body_bytes`].
    #[error("{what}: the answer is larger than {limit} bytes; refused")]
    TooLarge {
        /// The call.
        what: String,
        /// The bound.
        limit: usize,
    },
    /// An answer that is not what the API reference says.
    #[error("{what}: unexpected answer: {why}")]
    BadAnswer {
        /// The call.
        what: String,
        /// Why.
        why: String,
    },
}

/// A logged-in client of one site and org.
pub struct Client {
    http: reqwest::Client,
    base: reqwest::Url,
    org: String,
    bounds: Bounds,
    api_token: String,
    access_token: Option<String>,
}

/// Cloud Director's error message in a body (`{"message": ...}`), as `: message`, or empty.
fn detail(body: &[u8]) -> String {
    serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_string))
        .map(|m| format!(": {}", m.chars().take(300).collect::<String>()))
        .unwrap_or_default()
}

impl Client {
    /// A client of `site` (`https://vcd.example.net`; plain `http://` only to a loopback
    /// address, for tests) for `org`, trusting the system's CAs and those of `ca_file`.
    ///
    /// # Errors
    /// The site or the CA file cannot be used.
    pub fn new(
        site: &str,
        org: &str,
        api_token: String,
        ca_file: Option<&Path>,
        bounds: Bounds,
    ) -> Result<Client, ClientError> {
        let bad = |why: &str| ClientError::Site {
            site: site.to_string(),
            why: why.to_string(),
        };
        let mut base = reqwest::Url::parse(site).map_err(|err| bad(&err.to_string()))?;
        let loopback = base.host_str().is_some_and(|host| {
            host == "localhost"
                || host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        });
        match base.scheme() {
            "https" => {}
            "http" if loopback => {}
            "http" => return Err(bad(
                "plain http is refused (the API token would cross the network in clear); use https",
            )),
            other => return Err(bad(&format!("scheme {other} is not http(s)"))),
        }
        // The site's root: CAPVCD's VCDCluster.spec.site may carry a trailing /api.
        base.set_path("/");
        base.set_query(None);
        let mut builder = reqwest::Client::builder()
            .connect_timeout(bounds.connect)
            .timeout(bounds.call)
            .redirect(reqwest::redirect::Policy::none());
        if let Some(path) = ca_file {
            let pem = std::fs::read(path).map_err(|err| ClientError::CaFile {
                path: path.to_path_buf(),
                why: err.to_string(),
            })?;
            let certificates =
                reqwest::Certificate::from_pem_bundle(&pem).map_err(|err| ClientError::CaFile {
                    path: path.to_path_buf(),
                    why: err.to_string(),
                })?;
            if certificates.is_empty() {
                return Err(ClientError::CaFile {
                    path: path.to_path_buf(),
                    why: "holds no PEM certificate".into(),
                });
            }
            for certificate in certificates {
                builder = builder.add_root_certificate(certificate);
            }
        }
        let http = builder.build().map_err(|err| bad(&err.to_string()))?;
        Ok(Client {
            http,
            base,
            org: org.to_string(),
            bounds,
            api_token,
            access_token: None,
        })
    }

    /// The org logged in to.
    pub fn org(&self) -> &str {
        &self.org
    }

    /// Exchanges the API token for a bearer token (`/oauth/tenant/{org}/token`; the provider's
    /// `/oauth/provider/token` for org `system`).
    async fn login(&mut self) -> Result<(), ClientError> {
        let path = if self.org.eq_ignore_ascii_case("system") {
            "oauth/provider/token".to_string()
        } else {
            format!("oauth/tenant/{}/token", self.org)
        };
        let what = format!("log in to org {}", self.org);
        let url = self.base.join(&path).map_err(|err| ClientError::Site {
            site: self.base.to_string(),
            why: err.to_string(),
        })?;
        let request = self
            .http
            .post(url)
            .header("Accept", "application/json")
            .form(&[
                ("grant_type", "refresh_token"),
                ("refresh_token", self.api_token.as_str()),
            ]);
        let body = self.send(&what, request).await?;
        let answer: Value =
            serde_json::from_slice(&body).map_err(|err| ClientError::BadAnswer {
                what: what.clone(),
                why: err.to_string(),
            })?;
        let token = answer
            .get("access_token")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| ClientError::BadAnswer {
                what,
                why: "no access_token".into(),
            })?;
        self.access_token = Some(token.to_string());
        Ok(())
    }

    /// `GET /cloudapi/1.0.0/{path}` with `query`, as JSON. Logs in first, and again once when
    /// the session is refused (it expired).
    ///
    /// # Errors
    /// As [`ClientError`] says.
    pub async fn get(
        &mut self,
        what: &str,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<Value, ClientError> {
        if self.access_token.is_none() {
            self.login().await?;
        }
        let url = self
            .base
            .join(&format!("cloudapi/1.0.0/{path}"))
            .map_err(|err| ClientError::Site {
                site: self.base.to_string(),
                why: err.to_string(),
            })?;
        let mut relogged = false;
        loop {
            let token = self.access_token.clone().unwrap_or_default();
            let request = self
                .http
                .get(url.clone())
                .query(query)
                .header("Accept", format!("application/json;version={API_VERSION}"))
                .bearer_auth(token);
            match self.send(what, request).await {
                Err(ClientError::Unauthorized { .. }) if !relogged => {
                    tracing::info!(what, "the session was refused: logging in again");
                    relogged = true;
                    self.login().await?;
                }
                Err(err) => return Err(err),
                Ok(body) => {
                    return serde_json::from_slice(&body).map_err(|err| ClientError::BadAnswer {
                        what: what.to_string(),
                        why: format!("not JSON: {err}"),
                    })
                }
            }
        }
    }

    /// Sends `request`, retrying 429 and 503 (waiting as `Retry-After` asks, within
    /// [`Bounds::max_wait`]), and reads the body within [`Bounds::max_body_bytes`].
    async fn send(
        &self,
        what: &str,
        request: reqwest::RequestBuilder,
    ) -> Result<Vec<u8>, ClientError> {
        let transport = |err: reqwest::Error| ClientError::Transport {
            what: what.to_string(),
            why: if err.is_timeout() {
                format!("no answer within {:?}", self.bounds.call)
            } else {
                // reqwest's own text names the URL only; the cause is further down.
                let mut why = err.to_string();
                let mut source = std::error::Error::source(&err);
                while let Some(cause) = source {
                    why.push_str(&format!(": {cause}"));
                    source = cause.source();
                }
                why
            },
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let Some(request) = request.try_clone() else {
                return Err(ClientError::Transport {
                    what: what.to_string(),
                    why: "the request cannot be sent again".into(),
                });
            };
            let mut response = request.send().await.map_err(transport)?;
            let status = response.status().as_u16();
            if matches!(status, 429 | 503) {
                if attempt >= self.bounds.attempts {
                    return Err(ClientError::Busy {
                        what: what.to_string(),
                        status,
                        attempts: attempt,
                    });
                }
                let wait = response
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map_or(
                        Duration::from_secs(1 << (attempt - 1).min(4)),
                        Duration::from_secs,
                    )
                    .min(self.bounds.max_wait);
                tracing::warn!(
                    what,
                    status,
                    attempt,
                    wait_s = wait.as_secs(),
                    "Cloud Director is busy: waiting before the next attempt"
                );
                tokio::time::sleep(wait).await;
                continue;
            }
            let declared = response.content_length().unwrap_or(0);
            if declared > self.bounds.max_body_bytes as u64 {
                return Err(ClientError::TooLarge {
                    what: what.to_string(),
                    limit: self.bounds.max_body_bytes,
                });
            }
            let mut body = Vec::new();
            while let Some(chunk) =
                response
                    .chunk()
                    .await
                    .map_err(|err| ClientError::Transport {
                        what: what.to_string(),
                        why: format!("the answer was cut short: {err}"),
                    })?
            {
                if body.len() + chunk.len() > self.bounds.max_body_bytes {
                    return Err(ClientError::TooLarge {
                        what: what.to_string(),
                        limit: self.bounds.max_body_bytes,
                    });
                }
                body.extend_from_slice(&chunk);
            }
            if (200..=299).contains(&status) {
                return Ok(body);
            }
            // Only a refusal's body is read for Cloud Director's message: a page is parsed once,
            // by the caller.
            let detail = detail(&body);
            return match status {
                401 => Err(ClientError::Unauthorized {
                    what: what.to_string(),
                    org: self.org.clone(),
                    detail,
                }),
                403 => Err(ClientError::Forbidden {
                    what: what.to_string(),
                    detail,
                }),
                404 => Err(ClientError::NotFound {
                    what: what.to_string(),
                    detail,
                }),
                _ => Err(ClientError::Status {
                    what: what.to_string(),
                    status,
                    detail,
                }),
            };
        }
    }
}
