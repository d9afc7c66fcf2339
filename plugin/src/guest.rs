//! The guest side of the ABI: what [`export_policy!`](crate::export_policy) wires up.
//!
//! The host instantiates a policy afresh for every call and drops the instance afterwards, so
//! memory handed out here is never freed: that keeps the allocator out of the hot path.

use serde_json::Value;

use crate::abi::{pack, LogLevel};
use crate::schema::{Decision, EvaluateOutput, Request, SettingsValidation};

/// Reserves `len` bytes for the host to write the input into; 0 when that fails.
pub fn alloc(len: u32) -> u32 {
    let mut buf: Vec<u8> = Vec::new();
    if buf.try_reserve_exact(len as usize).is_err() {
        return 0;
    }
    let ptr = buf.as_mut_ptr();
    std::mem::forget(buf);
    ptr as usize as u32
}

/// Hands `bytes` to the host: the returned value packs their address and length.
fn emit(bytes: Vec<u8>) -> u64 {
    let bytes = bytes.into_boxed_slice();
    let len = bytes.len() as u32;
    let ptr = Box::leak(bytes).as_ptr() as usize as u32;
    pack(ptr, len)
}

fn to_json<T: serde::Serialize>(value: &T) -> Vec<u8> {
    // Serialising these plain structs cannot fail; fall back to a valid error envelope anyway.
    serde_json::to_vec(value)
        .unwrap_or_else(|_| br#"{"error":"policy could not serialise its output"}"#.to_vec())
}

/// Reads the input the host wrote.
///
/// # Safety
/// `ptr` and `len` must describe memory that the host filled after `alloc(len)` returned `ptr`.
unsafe fn input<'a>(ptr: u32, len: u32) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    std::slice::from_raw_parts(ptr as usize as *const u8, len as usize)
}

/// Runs `policy` on a request given as JSON and returns the decision (or error envelope) as
/// JSON: the bytes `nicpolicy_evaluate` hands back, shared with the JS build.
pub fn evaluate_json(input: &[u8], policy: fn(&Request) -> Decision) -> Vec<u8> {
    let output = match serde_json::from_slice::<Request>(input) {
        Ok(request) => EvaluateOutput::Decision(policy(&request)),
        Err(err) => EvaluateOutput::Error {
            error: format!("policy could not read the request: {err}"),
        },
    };
    to_json(&output)
}

/// Runs `check` on settings given as JSON and returns the verdict as JSON.
pub fn validate_settings_json(input: &[u8], check: fn(&Value) -> Result<(), String>) -> Vec<u8> {
    let verdict = match serde_json::from_slice::<Value>(input) {
        Ok(settings) => match check(&settings) {
            Ok(()) => SettingsValidation {
                valid: true,
                message: None,
            },
            Err(message) => SettingsValidation {
                valid: false,
                message: Some(message),
            },
        },
        Err(err) => SettingsValidation {
            valid: false,
            message: Some(format!("settings are not JSON: {err}")),
        },
    };
    to_json(&verdict)
}

/// Runs `policy` on the request at `ptr`/`len` and returns the packed decision.
///
/// # Safety
/// As for [`input`].
pub unsafe fn evaluate(ptr: u32, len: u32, policy: fn(&Request) -> Decision) -> u64 {
    emit(evaluate_json(input(ptr, len), policy))
}

/// Runs `check` on the settings at `ptr`/`len` and returns the packed verdict.
///
/// # Safety
/// As for [`input`].
pub unsafe fn validate_settings(
    ptr: u32,
    len: u32,
    check: fn(&Value) -> Result<(), String>,
) -> u64 {
    emit(validate_settings_json(input(ptr, len), check))
}

/// The settings check of a policy that takes no settings: anything goes.
pub fn accept_any_settings(_settings: &Value) -> Result<(), String> {
    Ok(())
}

#[cfg(target_arch = "wasm32")]
#[link(wasm_import_module = "nicpolicy")]
extern "C" {
    #[link_name = "log"]
    fn host_log(level: i32, ptr: u32, len: u32);
}

/// Sends a log line to the host (the `nicpolicy.log` import); natively it goes to stderr.
///
/// A module that never logs has no import at all.
pub fn log(level: LogLevel, message: &str) {
    #[cfg(target_arch = "wasm32")]
    // SAFETY: the host only reads `len` bytes at `ptr`, which is a live borrow.
    unsafe {
        host_log(
            level as i32,
            message.as_ptr() as usize as u32,
            message.len() as u32,
        );
    }
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("[{level:?}] {message}");
}
