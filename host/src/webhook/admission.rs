//! The AdmissionReview wire format: reading a review out of a request body, and writing the
//! answers (allow, deny, a failure answered the configured way, HTTP 400 for an unreadable body).

use base64::Engine as _;
use json_patch::Patch;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube::core::response::{StatusCause, StatusDetails, StatusSummary};
use kube::core::{DynamicObject, Status};
use nicpolicy_plugin::objects;
use nicpolicy_plugin::{Decision, ObjectKind, Violation};
use serde_json::Value;

use crate::served::config::FailureMode;
use crate::served::Served;
use nicpolicy_inputs::manifest::CAPVCD_GROUP;

/// An HTTP answer: status code and a JSON AdmissionReview body.
#[derive(Clone, Debug)]
pub struct Answer {
    /// 200 for every answered review; 400 when the body is not a readable AdmissionReview.
    pub http_status: u16,
    /// The AdmissionReview (or, for HTTP 400, an AdmissionReview without uid) as JSON.
    pub body: Vec<u8>,
    /// Whether the object was admitted.
    pub allowed: bool,
    /// What the review came to, as `nicpolicy_reviews_total` counts it.
    pub result: &'static str,
    /// Generation of the configuration that answered.
    pub generation: u64,
    /// Why the request could not be read (HTTP 400, 413); empty otherwise.
    pub message: String,
}

/// Reads the request out of an AdmissionReview, or says what is wrong with it.
pub(super) fn review_request(
    raw: &Value,
    generation: u64,
) -> Result<AdmissionRequest<DynamicObject>, Answer> {
    let api_version = raw.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = raw.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind != "AdmissionReview" || api_version != "admission.k8s.io/v1" {
        return Err(invalid(format!(
            "expected an AdmissionReview of admission.k8s.io/v1, got kind {kind:?} apiVersion {api_version:?}"
        ), generation));
    }
    let review: AdmissionReview<DynamicObject> =
        serde_path_to_error::deserialize(raw).map_err(|err| {
            invalid(
                format!(
                    "malformed AdmissionReview at {}: {}",
                    err.path(),
                    err.inner()
                ),
                generation,
            )
        })?;
    review
        .try_into()
        .map_err(|_| invalid("the AdmissionReview has no request".to_string(), generation))
}

/// [`review_request`] from bytes.
pub(super) fn read_review(
    body: &[u8],
    generation: u64,
) -> Result<AdmissionRequest<DynamicObject>, Answer> {
    let raw: Value = serde_json::from_slice(body)
        .map_err(|err| invalid(format!("the request body is not JSON: {err}"), generation))?;
    review_request(&raw, generation)
}

/// Whether the review's object is being deleted: an UPDATE of an object with
/// `metadata.deletionTimestamp` set. A CREATE carrying the field is not (kube-apiserver clears
/// it), so it cannot be used to slip past a rule.
pub(super) fn deleting(request: &AdmissionRequest<DynamicObject>) -> bool {
    matches!(request.operation, kube::core::admission::Operation::Update)
        && request
            .object
            .as_ref()
            .is_some_and(|o| o.metadata.deletion_timestamp.is_some())
}

/// [`objects::fill_metadata`] from the review's request.
pub(super) fn fill_metadata(object: &mut Value, request: &AdmissionRequest<DynamicObject>) {
    objects::fill_metadata(
        object,
        request.namespace.as_deref().unwrap_or_default(),
        &request.name,
    );
}

/// The Status of an invalid object, as kube-apiserver builds it for schema errors
/// (`reason: Invalid`, code 422, one cause per field), so kubectl prints it the same way.
pub(super) fn invalid_status(kind: ObjectKind, name: &str, decision: &Decision) -> Status {
    let errors: Vec<String> = decision
        .violations
        .iter()
        .map(Violation::field_error)
        .collect();
    let list = match errors.as_slice() {
        [one] => one.clone(),
        several => format!("[{}]", several.join(", ")),
    };
    let name = name.to_string();
    Status {
        status: Some(StatusSummary::Failure),
        code: 422,
        message: format!(
            "{}.{CAPVCD_GROUP} {name:?} is invalid: {list}",
            kind.as_str()
        ),
        metadata: None,
        reason: "Invalid".to_string(),
        details: Some(StatusDetails {
            name,
            group: CAPVCD_GROUP.to_string(),
            kind: kind.as_str().to_string(),
            uid: String::new(),
            causes: decision
                .violations
                .iter()
                .map(|v| StatusCause {
                    reason: v.reason.kubernetes_cause().to_string(),
                    message: v.message.clone(),
                    field: v.field.clone(),
                })
                .collect(),
            retry_after_seconds: 0,
        }),
    }
}

pub(super) fn allow(
    request: &AdmissionRequest<DynamicObject>,
    patch: Option<Patch>,
    warnings: Vec<String>,
    served: &Served,
) -> Answer {
    let mut response = AdmissionResponse::from(request);
    let patched = patch.is_some();
    if let Some(patch) = patch {
        response = match response.with_patch(patch) {
            Ok(response) => response,
            Err(err) => {
                AdmissionResponse::from(request).deny(format!("cannot encode the patch: {err}"))
            }
        };
    }
    if !warnings.is_empty() {
        response.warnings = Some(warnings);
    }
    let allowed = response.allowed;
    let result = match (allowed, patched) {
        (true, true) => "patched",
        (true, false) => "allowed",
        (false, _) => "error",
    };
    finish(response, allowed, result, served)
}

pub(super) fn deny(
    request: &AdmissionRequest<DynamicObject>,
    code: u16,
    reason: &str,
    message: String,
    served: &Served,
) -> Answer {
    let mut response = AdmissionResponse::from(request).deny(&message);
    response.result.code = code;
    response.result.reason = reason.to_string();
    response.result.status = Some(StatusSummary::Failure);
    finish(response, false, "error", served)
}

/// A failure that is not the policy's decision, answered the configured way.
pub(super) fn failure_answer(
    request: &AdmissionRequest<DynamicObject>,
    mode: FailureMode,
    code: u16,
    reason: &str,
    message: &str,
    served: &Served,
) -> Answer {
    match mode {
        FailureMode::Deny => deny(request, code, reason, message.to_string(), served),
        FailureMode::Allow => {
            let mut answer = allow(
                request,
                None,
                vec![format!("nicpolicy: not checked: {message}")],
                served,
            );
            answer.result = "error";
            answer
        }
    }
}

/// The denial of a review too large to read, answered to its `uid` (found in its first bytes):
/// a denial, not an error, so the API server refuses the object whatever the webhook's
/// failurePolicy.
pub fn too_large_answer(uid: &str, message: &str, generation: u64) -> Answer {
    let review = serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {
            "uid": uid,
            "allowed": false,
            "status": {
                "status": "Failure",
                "code": 413,
                "reason": "RequestEntityTooLarge",
                "message": message,
            },
        },
    });
    Answer {
        http_status: 200,
        body: serde_json::to_vec(&review).unwrap_or_default(),
        allowed: false,
        result: "error",
        generation,
        message: message.to_string(),
    }
}

/// HTTP 400 for a body that is no readable AdmissionReview (there is no uid to answer to).
pub(super) fn invalid(message: String, generation: u64) -> Answer {
    let response = AdmissionResponse::invalid(&message);
    Answer {
        http_status: 400,
        body: encode(response),
        allowed: false,
        result: "error",
        generation,
        message,
    }
}

pub(super) fn finish(
    response: AdmissionResponse,
    allowed: bool,
    result: &'static str,
    served: &Served,
) -> Answer {
    let body = encode(response);
    nicpolicy_engine::stages::mark(nicpolicy_engine::stages::Stage::ResponseEncode);
    Answer {
        http_status: 200,
        body,
        allowed,
        result,
        generation: served.generation,
        message: String::new(),
    }
}

/// Serialises the response. kube-core writes `patch` as an array of numbers
/// (kube-rs/kube#1781); the API server reads a `[]byte` as base64, so it is written as such.
pub(super) fn encode(mut response: AdmissionResponse) -> Vec<u8> {
    let patch = response.patch.take();
    let mut review = match serde_json::to_value(response.into_review()) {
        Ok(value) => value,
        Err(err) => serde_json::json!({ "error": err.to_string() }),
    };
    if let (Some(patch), Some(map)) = (
        patch,
        review.get_mut("response").and_then(Value::as_object_mut),
    ) {
        map.insert(
            "patch".to_string(),
            Value::String(base64::engine::general_purpose::STANDARD.encode(patch)),
        );
        map.insert(
            "patchType".to_string(),
            Value::String("JSONPatch".to_string()),
        );
    }
    serde_json::to_vec(&review).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use json_patch::jsonptr::PointerBuf;
    use json_patch::{AddOperation, PatchOperation};
    use serde_json::json;

    #[test]
    fn patches_are_base64_in_the_response() {
        let request: AdmissionRequest<DynamicObject> = serde_json::from_value::<AdmissionReview<DynamicObject>>(json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                        "kind": {"group": CAPVCD_GROUP, "version": "v1beta3", "kind": "VCDMachine"},
                        "resource": {"group": CAPVCD_GROUP, "version": "v1beta3", "resource": "vcdmachines"},
                        "operation": "CREATE", "userInfo": {}, "name": "m", "namespace": "prod-eu1"}
        }))
        .unwrap()
        .try_into()
        .unwrap();
        let patch = Patch(vec![PatchOperation::Add(AddOperation {
            path: PointerBuf::from_tokens(["spec", "extraOvdcNetworks"]),
            value: json!(["storage-net"]),
        })]);
        let response = AdmissionResponse::from(&request).with_patch(patch).unwrap();
        let body: Value = serde_json::from_slice(&encode(response)).unwrap();
        let text = body["response"]["patch"].as_str().expect("a string");
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(text)
            .unwrap();
        let operations: Value = serde_json::from_slice(&decoded).unwrap();
        assert_eq!(operations[0]["path"], "/spec/extraOvdcNetworks");
        assert_eq!(body["response"]["patchType"], "JSONPatch");
        assert_eq!(
            body["response"]["uid"],
            "705ab4f5-6393-11e8-b7cc-42010a800002"
        );
    }
}
