//! A waPC host built like Kubewarden's policy-evaluator, to run nicpolicy's Kubewarden builds
//! the way policy-server runs them, and to compare their answers with nicpolicy's own host.
//!
//! - [`PolicyServer::load`] refuses what policy-server refuses (the checks of
//!   [`nicpolicy::kubewarden::check`]: waPC exports, imports, `protocolVersion: v1`, rules),
//!   calls `protocol_version` and compiles the module once, with WASI linked and epoch
//!   deadlines as policy-evaluator sets them.
//! - Every call gets a fresh instance ([`wasmtime_provider::WasmtimeEngineProviderPre::rehydrate`],
//!   then `wapc_init`), as policy-server evaluates every request.
//! - Host calls are answered like policy-evaluator's callback handler: binding `kubewarden`,
//!   namespace `kubernetes`, operation `get_resource`, from fixture objects ([`Cluster`]), and
//!   only for the kinds the metadata declares in `contextAwareResources`.
//!
//! [`compare`] runs one nicpolicy case through both hosts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use nicpolicy::kubewarden::{self as kw, ContextAwareResource, Metadata};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use wapc::WapcHost;
use wasmtime_provider::{EpochDeadlines, WasmtimeEngineProviderBuilder, WasmtimeEngineProviderPre};

pub mod compare;

/// How often the epoch ticks, and how many ticks a call may take (policy-server's default
/// timeout is 2 s).
const EPOCH_TICK: Duration = Duration::from_millis(100);
const DEADLINE_TICKS: u64 = 20;

/// Why the test host could not load a module or answer a call.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// What policy-server would refuse at load.
    #[error("policy-server would refuse the module: {0}")]
    Refused(#[from] kw::KubewardenError),
    /// The bytes are no module nicpolicy can read.
    #[error("cannot read the module: {0}")]
    Inspect(#[from] nicpolicy::LoadError),
    /// Wasmtime or waPC failed (compile, instantiate, `wapc_init`).
    #[error("waPC host: {0}")]
    Wapc(String),
    /// The guest answered with an error (`__guest_error`): the cause is in the message.
    #[error("guest error: {0}")]
    Guest(String),
    /// The guest's answer is not the expected JSON.
    #[error("the guest's answer is not a {what}: {error}")]
    Answer {
        /// What was expected.
        what: &'static str,
        /// The parse error.
        error: String,
    },
}

/// Kubewarden's `ValidationResponse`, as policy-evaluator reads it.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct ValidationResponse {
    /// Whether the request is admitted.
    pub accepted: bool,
    /// The rejection message.
    #[serde(default)]
    pub message: Option<String>,
    /// The rejection code.
    #[serde(default)]
    pub code: Option<u16>,
    /// The whole changed object, when the policy mutates.
    #[serde(default)]
    pub mutated_object: Option<Value>,
    /// Warnings for the client.
    #[serde(default)]
    pub warnings: Option<Vec<String>>,
}

/// Kubewarden's `SettingsValidationResponse`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct SettingsVerdict {
    /// Whether the settings can be used.
    pub valid: bool,
    /// Why not.
    #[serde(default)]
    pub message: Option<String>,
}

/// The objects the cluster holds, as `kubernetes/get_resource` serves them.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    /// Every object (Cluster, VCDCluster, ...).
    pub objects: Vec<Value>,
}

/// What `get_resource` receives (policy-evaluator's `GetResourceRequest`).
#[derive(Debug, Deserialize)]
struct GetResource {
    api_version: String,
    kind: String,
    name: String,
    namespace: Option<String>,
}

/// One host call the guest made, for tests to check the lookups.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HostCall {
    /// `binding/namespace/operation`.
    pub operation: String,
    /// The payload, as text.
    pub payload: String,
}

impl Cluster {
    /// Answers one host call the way policy-evaluator does, for the kinds in `allowed`.
    fn answer(
        &self,
        allowed: &[ContextAwareResource],
        binding: &str,
        namespace: &str,
        operation: &str,
        payload: &[u8],
    ) -> Result<Vec<u8>, String> {
        if binding != "kubewarden" {
            return Err(format!("unknown binding: {binding}"));
        }
        if (namespace, operation) != ("kubernetes", "get_resource") {
            return Err(format!(
                "Policy has not been granted access to the '{namespace}/{operation}' host capability"
            ));
        }
        let request: GetResource = serde_json::from_slice(payload)
            .map_err(|err| format!("cannot decode the get_resource request: {err}"))?;
        let wanted = ContextAwareResource {
            api_version: request.api_version.clone(),
            kind: request.kind.clone(),
        };
        if !allowed.contains(&wanted) {
            return Err(format!(
                "Policy has not been granted access to Kubernetes {}/{} resources; it is not among its contextAwareResources",
                request.api_version, request.kind
            ));
        }
        // The API server serves an object at any version of its group (converting it), so a
        // v1beta2 fixture answers a v1beta3 read, as CAPVCD's conversion webhook would.
        let group = |api_version: &str| api_version.split_once('/').map(|(g, _)| g.to_string());
        let found = self.objects.iter().find(|object| {
            object.get("apiVersion").and_then(Value::as_str).map(group)
                == Some(group(&request.api_version))
                && object.get("kind").and_then(Value::as_str) == Some(&request.kind)
                && object.pointer("/metadata/name").and_then(Value::as_str) == Some(&request.name)
                && object
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    == request.namespace.as_deref()
        });
        match found {
            Some(object) => {
                let mut object = object.clone();
                object["apiVersion"] = Value::String(request.api_version.clone());
                serde_json::to_vec(&object).map_err(|err| err.to_string())
            }
            None => Err(format!(
                "{} {:?} not found in namespace {:?}",
                request.kind,
                request.name,
                request.namespace.unwrap_or_default()
            )),
        }
    }
}

/// A loaded Kubewarden policy.
pub struct PolicyServer {
    pre: WasmtimeEngineProviderPre,
    metadata: Metadata,
    /// Kinds the host serves to this policy: its `contextAwareResources`.
    pub context_aware_resources: Vec<ContextAwareResource>,
    ticker: Option<(Arc<AtomicBool>, JoinHandle<()>)>,
}

impl Drop for PolicyServer {
    fn drop(&mut self) {
        if let Some((stop, handle)) = self.ticker.take() {
            stop.store(true, Ordering::Relaxed);
            let _ = handle.join();
        }
    }
}

impl PolicyServer {
    /// Checks the module as policy-server does, compiles it, and asks it its protocol version.
    pub fn load(bytes: &[u8]) -> Result<PolicyServer, HostError> {
        let info = nicpolicy::inspect::inspect(bytes)?;
        let metadata = kw::check(&info)?;
        let mut config = wasmtime::Config::default();
        config.epoch_interruption(true);
        let engine = wasmtime::Engine::new(&config).map_err(|e| HostError::Wapc(e.to_string()))?;
        let pre = WasmtimeEngineProviderBuilder::new()
            .engine(engine.clone())
            .module_bytes(bytes)
            .build_pre()
            .map_err(|e| HostError::Wapc(e.to_string()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let ticker = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(EPOCH_TICK);
                engine.increment_epoch();
            }
        });
        let server = PolicyServer {
            pre,
            context_aware_resources: metadata.context_aware_resources.clone(),
            metadata,
            ticker: Some((stop, ticker)),
        };
        let version = server.call("protocol_version", b"", &Cluster::default())?.0;
        let version: String = serde_json::from_slice(&version).map_err(|e| HostError::Answer {
            what: "protocol version",
            error: e.to_string(),
        })?;
        if version != kw::PROTOCOL_VERSION {
            return Err(HostError::Refused(kw::KubewardenError::ProtocolVersion {
                found: version,
            }));
        }
        Ok(server)
    }

    /// The module's metadata.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// Calls `operation` in a fresh instance; returns the answer and the host calls it made.
    pub fn call(
        &self,
        operation: &str,
        payload: &[u8],
        cluster: &Cluster,
    ) -> Result<(Vec<u8>, Vec<HostCall>), HostError> {
        let deadlines = EpochDeadlines {
            wapc_init: DEADLINE_TICKS,
            wapc_func: DEADLINE_TICKS,
        };
        let engine = self
            .pre
            .rehydrate(Some(deadlines))
            .map_err(|e| HostError::Wapc(e.to_string()))?;
        let calls = Arc::new(Mutex::new(Vec::new()));
        let seen = calls.clone();
        let cluster = cluster.clone();
        let allowed = self.context_aware_resources.clone();
        let callback = move |_id: u64, binding: &str, namespace: &str, op: &str, payload: &[u8]| {
            if let Ok(mut seen) = seen.lock() {
                seen.push(HostCall {
                    operation: format!("{binding}/{namespace}/{op}"),
                    payload: String::from_utf8_lossy(payload).into_owned(),
                });
            }
            cluster
                .answer(&allowed, binding, namespace, op, payload)
                .map_err(|message| -> Box<dyn std::error::Error + Send + Sync> { message.into() })
        };
        let host = WapcHost::new(Box::new(engine), Some(Box::new(callback)))
            .map_err(|e| HostError::Wapc(e.to_string()))?;
        let answer = host.call(operation, payload).map_err(|err| match err {
            wapc::errors::Error::GuestCallFailure(message) => HostError::Guest(message),
            other => HostError::Wapc(other.to_string()),
        })?;
        let calls = calls.lock().map(|c| c.clone()).unwrap_or_default();
        Ok((answer, calls))
    }

    /// `validate_settings`.
    pub fn validate_settings(&self, settings: &Value) -> Result<SettingsVerdict, HostError> {
        let payload = serde_json::to_vec(settings).unwrap_or_default();
        let (answer, _) = self.call("validate_settings", &payload, &Cluster::default())?;
        serde_json::from_slice(&answer).map_err(|e| HostError::Answer {
            what: "settings verdict",
            error: e.to_string(),
        })
    }

    /// `validate` with `{"request": request, "settings": settings}`, as policy-evaluator
    /// builds it.
    pub fn validate(
        &self,
        request: &Value,
        settings: &Value,
        cluster: &Cluster,
    ) -> Result<(ValidationResponse, Vec<HostCall>), HostError> {
        let payload = serde_json::to_vec(&json!({"request": request, "settings": settings}))
            .unwrap_or_default();
        self.validate_raw(&payload, cluster)
    }

    /// `validate` with any payload, for hostile input.
    pub fn validate_raw(
        &self,
        payload: &[u8],
        cluster: &Cluster,
    ) -> Result<(ValidationResponse, Vec<HostCall>), HostError> {
        let (answer, calls) = self.call("validate", payload, cluster)?;
        let response = serde_json::from_slice(&answer).map_err(|e| HostError::Answer {
            what: "ValidationResponse",
            error: e.to_string(),
        })?;
        Ok((response, calls))
    }
}

/// The AdmissionRequest policy-server sends for `object` (camelCase, as the API server does).
pub fn admission_request(object: &Value, old: Option<&Value>) -> Value {
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let resource = format!("{}s", kind.to_ascii_lowercase());
    let mut request = json!({
        "uid": "5c0c8a2e-0b7e-4d8f-9a57-3f1c2b8e6d10",
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": resource},
        "name": object.pointer("/metadata/name").cloned().unwrap_or(Value::Null),
        "namespace": object.pointer("/metadata/namespace").cloned().unwrap_or(Value::Null),
        "operation": if old.is_some() { "UPDATE" } else { "CREATE" },
        "userInfo": {"username": "system:serviceaccount:capi-system:capi-controller-manager",
                     "groups": ["system:serviceaccounts", "system:authenticated"]},
        "object": object,
        "dryRun": false,
    });
    if let Some(old) = old {
        request["oldObject"] = old.clone();
    }
    request
}
