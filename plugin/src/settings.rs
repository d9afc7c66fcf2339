//! Typed settings: a policy declares its settings as a serde type that implements
//! [`PolicySettings`], and the SDK reads them ([`parse`]: JSON `null` means the defaults, field
//! paths in every error), checks them ([`PolicySettings::check`]) when the host loads the policy,
//! and denies with the reason ([`denial`]) should unreadable settings ever reach an evaluation.
//! [`export_policy!`](crate::export_policy) wires it all up with `settings: Type`:
//!
//! ```
//! use nicpolicy_plugin::settings::PolicySettings;
//! use nicpolicy_plugin::{capvcd, Decision, Request};
//! use serde::Deserialize;
//!
//! /// The site's settings: the CAPVCD rules' own, plus a list of its own.
//! #[derive(Debug, Default, Deserialize)]
//! #[serde(rename_all = "camelCase", deny_unknown_fields)]
//! pub struct Settings {
//!     #[serde(default)]
//!     pub capvcd: capvcd::Settings,
//!     #[serde(default)]
//!     pub reserved_networks: Vec<String>,
//! }
//!
//! impl PolicySettings for Settings {
//!     fn check(&self) -> Result<(), String> {
//!         self.capvcd.check_nested("capvcd")
//!     }
//! }
//!
//! fn evaluate(request: &Request, settings: &Settings) -> Decision {
//!     capvcd::evaluate_with(request, &settings.capvcd)
//! }
//!
//! nicpolicy_plugin::export_policy!(evaluate, settings: Settings);
//! # fn main() {}
//! ```

use serde::de::DeserializeOwned;
pub use serde_json::Value;

use crate::schema::{Decision, Reason, Request, Violation};

/// Settings a policy reads into a type of its own.
///
/// `Default` is what JSON `null` (no settings at all) means. Derive `Deserialize` with
/// `#[serde(deny_unknown_fields)]`, so a misspelt setting is refused instead of silently
/// falling back to its default, and `#[serde(default)]` on optional fields.
pub trait PolicySettings: DeserializeOwned + Default {
    /// Checks serde cannot express (ranges, names, fields that contradict each other). The
    /// error starts with the path of the field at fault, like `worker.defaults[1]: ...`.
    ///
    /// # Errors
    /// Why the settings cannot be used.
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
}

/// Reads settings as `S`: `null` is `S::default()` (taken as valid: no settings at all means
/// the policy's defaults), anything else must be a mapping whose fields serde reads (errors
/// start with the path of the field at fault, like `networks.storage-net.ipAllocationMode: ...`),
/// then [`PolicySettings::check`].
///
/// # Errors
/// Why the settings cannot be used.
pub fn parse<S: PolicySettings>(value: &Value) -> Result<S, String> {
    let settings: S = match value {
        Value::Null => return Ok(S::default()),
        Value::Object(_) => serde_path_to_error::deserialize(value).map_err(|err| {
            let message = err.inner().to_string();
            match field_path(err.path(), &message) {
                Some(path) => format!("{path}: {message}"),
                None => message,
            }
        })?,
        other => {
            return Err(format!(
                "settings must be a map of setting names to values, not {}",
                describe(other)
            ))
        }
    };
    settings.check()?;
    Ok(settings)
}

/// Where an error of serde sits, for the start of the message. An unknown field is named by
/// the message already, so the path stops at the mapping that holds it.
fn field_path(path: &serde_path_to_error::Path, message: &str) -> Option<String> {
    let segments: Vec<String> = path.iter().map(ToString::to_string).collect();
    let unknown = segments
        .last()
        .is_some_and(|last| message.starts_with(&format!("unknown field `{last}`")));
    let keep = if unknown {
        segments.len() - 1
    } else {
        segments.len()
    };
    let mut text = String::new();
    for segment in &segments[..keep] {
        if !text.is_empty() && !segment.starts_with('[') {
            text.push('.');
        }
        text.push_str(segment);
    }
    (!text.is_empty()).then_some(text)
}

/// Checks settings as `S`: the `nicpolicy_validate_settings` export of a typed policy.
///
/// # Errors
/// As for [`parse`].
pub fn validate<S: PolicySettings>(value: &Value) -> Result<(), String> {
    parse::<S>(value).map(|_| ())
}

/// Reads the request's settings as `S` and runs `policy`; settings that cannot be read are
/// denied with the reason (the host normally refuses them when it loads the policy).
pub fn evaluate<S: PolicySettings>(
    request: &Request,
    policy: fn(&Request, &S) -> Decision,
) -> Decision {
    let mut decision = match parse::<S>(&request.settings) {
        Ok(settings) => policy(request, &settings),
        Err(message) => denial(message),
    };
    // As the glue returns it to a host: violations in field order.
    decision.sort_violations();
    decision
}

/// For `#[serde(deserialize_with = ...)]` on a settings field: JSON `null` reads as the field's
/// default, as if it were left out.
///
/// # Errors
/// The field's own deserialisation errors.
pub fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de> + Default,
{
    Ok(<Option<T> as serde::Deserialize>::deserialize(deserializer)?.unwrap_or_default())
}

/// The decision for settings that could not be read.
pub fn denial(message: String) -> Decision {
    Decision::from_violations(vec![Violation::new(
        "settings",
        Reason::Invalid,
        format!("the policy's settings are invalid: {message}"),
    )])
}

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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Debug, Default, Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Site {
        #[serde(default)]
        networks: BTreeMap<String, Network>,
        #[serde(default)]
        max_nics: u32,
    }

    #[derive(Debug, Default, Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Network {
        #[serde(default)]
        ip_allocation_mode: Option<crate::IpAllocationMode>,
    }

    impl PolicySettings for Site {
        fn check(&self) -> Result<(), String> {
            if self.max_nics > 10 {
                return Err(format!("maxNics: {} is above 10", self.max_nics));
            }
            Ok(())
        }
    }

    #[test]
    fn null_is_the_defaults() {
        let site: Site = parse(&Value::Null).expect("defaults");
        assert_eq!(site.max_nics, 0);
        assert!(site.networks.is_empty());
        let site: Site = parse(&json!({"networks": {"storage-net": {"ipAllocationMode": "DHCP"}}}))
            .expect("valid");
        assert_eq!(
            site.networks["storage-net"].ip_allocation_mode,
            Some(crate::IpAllocationMode::Dhcp)
        );
    }

    #[test]
    fn errors_start_with_the_nested_path() {
        let err =
            parse::<Site>(&json!({"networks": {"storage-net": {"ipAllocationMode": "STATIC"}}}))
                .unwrap_err();
        assert!(
            err.starts_with("networks.storage-net.ipAllocationMode: unknown variant `STATIC`"),
            "{err}"
        );
        let err = parse::<Site>(&json!({"networks": {"storage-net": {"ipAllocationMod": "POOL"}}}))
            .unwrap_err();
        assert!(
            err.starts_with("networks.storage-net: unknown field `ipAllocationMod`"),
            "{err}"
        );
        let err = parse::<Site>(&json!({"maxNic": 4})).unwrap_err();
        assert!(err.starts_with("unknown field `maxNic`"), "{err}");
    }

    #[test]
    fn check_runs_after_reading() {
        assert_eq!(
            parse::<Site>(&json!({"maxNics": 12})).unwrap_err(),
            "maxNics: 12 is above 10"
        );
        assert!(parse::<Site>(&json!(["storage-net"]))
            .unwrap_err()
            .ends_with("not a list"));
    }

    #[test]
    fn unreadable_settings_are_denied_with_the_reason() {
        fn never(_: &Request, _: &Site) -> Decision {
            unreachable!("settings are refused first")
        }
        let mut request = crate::testing::worker(&["storage-net"]);
        request.settings = json!({"maxNics": 12});
        let decision = evaluate(&request, never);
        assert!(!decision.allowed);
        assert_eq!(decision.violations[0].field, "settings");
        assert!(decision.violations[0]
            .message
            .ends_with("maxNics: 12 is above 10"));
    }
}
