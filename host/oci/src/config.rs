//! The registry settings of a served configuration, read into the registry client's own types
//! ([`RegistryOptions`](crate::RegistryOptions), [`VerificationRule`]): one type per setting,
//! checked where the configuration is read, so that a reload refuses a bad key or pattern with
//! the field that holds it instead of failing at the next pull.

use std::path::PathBuf;

use crate::signature::{check_pattern, TrustedKey, VerificationRule};

/// A setting that cannot be used: its field, relative to what was read (`references[0]`,
/// `keys[1]`), and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The field, relative to what was read.
    pub field: String,
    /// Why it cannot be used.
    pub message: String,
}

impl FieldError {
    fn at(field: impl Into<String>, message: impl Into<String>) -> FieldError {
        FieldError {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// One rule of `verification:`: modules of the repositories `references` names must be signed
/// by one of `keys` (PEM files, already resolved against the configuration's directory). The
/// keys are read and parsed now, so a load uses the keys that were checked.
///
/// # Errors
/// The first field that cannot be used: no pattern, a pattern that matches nothing sensible,
/// no key, a key file that cannot be read or holds no public key.
pub fn verification_rule(
    references: &[String],
    keys: &[PathBuf],
) -> Result<VerificationRule, FieldError> {
    if references.is_empty() {
        return Err(FieldError::at(
            "references",
            "name the repositories this rule is for (host/path/name, * for any run of \
             characters)",
        ));
    }
    for (j, pattern) in references.iter().enumerate() {
        check_pattern(pattern).map_err(|why| FieldError::at(format!("references[{j}]"), why))?;
    }
    if keys.is_empty() {
        return Err(FieldError::at(
            "keys",
            "a rule needs at least one public key (a PEM file, as cosign.pub)",
        ));
    }
    let keys = keys
        .iter()
        .enumerate()
        .map(|(j, path)| {
            let field = format!("keys[{j}]");
            let pem = nicpolicy_inputs::files::read_at_most(
                path,
                nicpolicy_engine::limits::MAX_KEY_BYTES,
            )
            .map_err(|err| FieldError::at(&field, format!("{}: {err}", path.display())))?;
            TrustedKey::from_file_pem(path, pem)
                .map_err(|err| FieldError::at(&field, err.to_string()))
        })
        .collect::<Result<_, _>>()?;
    Ok(VerificationRule {
        references: references.to_vec(),
        keys,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_refusal_names_its_field() {
        let none = verification_rule(&[], &[PathBuf::from("cosign.pub")]).expect_err("no pattern");
        assert_eq!(none.field, "references");
        let bad = verification_rule(&["*".to_string(), String::new()], &[]).expect_err("empty");
        assert_eq!(bad.field, "references[1]");
        let keyless = verification_rule(&["registry.example.net/platform/*".to_string()], &[])
            .expect_err("no key");
        assert_eq!(keyless.field, "keys");
        let missing = verification_rule(
            &["registry.example.net/platform/*".to_string()],
            &[PathBuf::from("/nonexistent/cosign.pub")],
        )
        .expect_err("no file");
        assert_eq!(missing.field, "keys[0]");
        assert!(
            missing.message.starts_with("/nonexistent/cosign.pub: "),
            "{}",
            missing.message
        );
    }
}
