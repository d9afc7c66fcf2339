//! Helpers for reading a policy's settings, so site policies word their errors alike.

use serde::de::DeserializeOwned;
use serde_json::Value;

/// How a JSON value reads in an error message: "a list", "a map", ...
pub fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    }
}

/// Reads settings that must be a mapping: `null` is `None` (the policy's defaults), anything else
/// that is not a mapping is refused naming the `keys` it takes, and the mapping is read as `T`.
pub fn read_object<T: DeserializeOwned>(value: &Value, keys: &str) -> Result<Option<T>, String> {
    match value {
        Value::Null => Ok(None),
        Value::Object(_) => T::deserialize(value)
            .map(Some)
            .map_err(|err| err.to_string()),
        other => Err(format!(
            "settings must be a map with {keys}, not {}",
            describe(other)
        )),
    }
}
