//! The backstop: a policy's structural rules stated as CEL, for a ValidatingAdmissionPolicy
//! that kube-apiserver evaluates itself while no webhook answers (`nicpolicy export backstop`,
//! docs/abi.md "The backstop").
//!
//! A policy that has a backstop exports `nicpolicy_backstop` ([`export_backstop!`](crate::export_backstop)): the host
//! sends a [`BackstopRequest`] (the settings, the kind, a prefix for parameter keys) and gets
//! back a [`Backstop`]: validations, each an expression over `object`, `oldObject` and
//! `params` (a ConfigMap), and the ConfigMap entries the expressions read. The settings become
//! parameters, not text inside expressions, so a settings change rewrites the ConfigMap only.
//!
//! The one promise a backstop makes: **it never refuses what the policy allows.** Each
//! validation is a necessary condition of the policy's own rule (a subset of what the Wasm rule
//! refuses), so a machine the policy admits always passes it. Rules that need more than the
//! object (the VCDCluster, the owner Machine) are left to the webhook.
//!
//! Expressions keep to the part of CEL that kube-apiserver and the `cel` crate agree on
//! (`size`, `all`, `exists`, `filter`, `in`, `contains`, `matches`, `has`, `int`, conditionals),
//! and stay within kube-apiserver's cost limits: rules over the list of networks do not run
//! on lists longer than Cloud Director's 10 NICs (the count rule refuses those).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::schema::{ObjectKind, Reason};

/// The version of the backstop's request and answer.
pub const BACKSTOP_VERSION: u32 = 1;

/// The parameter key holding the inventory's network names, one per line with a newline before
/// the first and after the last, when the served configuration has an inventory. The host
/// writes it; expressions read it through [`Builder::inventory_param`].
pub const INVENTORY_PARAM: &str = "inventory.networks";

/// What the host sends to `nicpolicy_backstop`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackstopRequest {
    /// [`BACKSTOP_VERSION`].
    pub version: u32,
    /// The kind the validations are for.
    pub kind: ObjectKind,
    /// The policy's settings, as for an evaluation.
    #[serde(default)]
    pub settings: Value,
    /// Prefix of every parameter key the policy names (the host gives each chain entry its
    /// own, so two entries' keys never meet in the one ConfigMap).
    #[serde(default)]
    pub param_prefix: String,
}

/// One validation of a ValidatingAdmissionPolicy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Validation {
    /// The rule it stands in for, as violations name it (`capvcd/duplicate`).
    pub rule: String,
    /// CEL over `object`, `oldObject` and `params`: true admits.
    pub expression: String,
    /// The refusal's message; it starts with the field path.
    pub message: String,
    /// CEL giving a more specific message (the networks at fault), when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_expression: Option<String>,
    /// The field the policy's own violation names, or the list that holds it
    /// (`spec.extraOvdcNetworks`).
    pub field: String,
    /// The reason the policy's violation gives.
    pub reason: Reason,
}

/// What `nicpolicy_backstop` answers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Backstop {
    /// [`BACKSTOP_VERSION`].
    pub version: u32,
    /// The validations, each a necessary condition of one of the policy's rules.
    pub validations: Vec<Validation>,
    /// The ConfigMap entries the expressions read (keys with the request's prefix).
    #[serde(default)]
    pub params: BTreeMap<String, String>,
    /// What the policy checks that the backstop does not, one line each.
    #[serde(default)]
    pub not_covered: Vec<String>,
    /// Whether the policy may write back `extraOvdcNetworks` (defaulting, mapping): the policies
    /// after it in a chain judge the rewritten list, which the backstop never sees.
    #[serde(default)]
    pub rewrites_networks: bool,
}

/// The answer of `nicpolicy_backstop`: the backstop, or why there is none for these settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum BackstopOutput {
    /// The validations.
    Backstop(Backstop),
    /// The settings or the request could not be read.
    Error(String),
}

/// Builds a policy's [`Backstop`] for one kind.
#[derive(Debug)]
pub struct Builder {
    kind: ObjectKind,
    prefix: String,
    backstop: Backstop,
}

impl Builder {
    /// A builder for `request`'s kind and parameter prefix.
    pub fn new(request: &BackstopRequest) -> Builder {
        Builder {
            kind: request.kind,
            prefix: request.param_prefix.clone(),
            backstop: Backstop {
                version: BACKSTOP_VERSION,
                ..Backstop::default()
            },
        }
    }

    /// The kind the validations are for.
    pub fn kind(&self) -> ObjectKind {
        self.kind
    }

    /// The path of `field` under the kind's spec (`spec.template.spec.extraOvdcNetworks` for a
    /// template).
    pub fn field(&self, field: &str) -> String {
        format!("{}.{field}", self.kind.spec_path())
    }

    /// Sets parameter `key` (prefixed) to `value` and returns the CEL that reads it.
    pub fn param(&mut self, key: &str, value: impl Into<String>) -> Param {
        let key = format!("{}{key}", self.prefix);
        let read = Param::of(&key);
        self.backstop.params.insert(key, value.into());
        read
    }

    /// The CEL that reads the inventory parameter ([`INVENTORY_PARAM`]), which the host sets.
    pub fn inventory_param(&self) -> Param {
        Param::of(INVENTORY_PARAM)
    }

    /// CEL for the list of extra networks of `object` (`object` or `oldObject`): the variable
    /// the host defines for it ([`variables`]).
    pub fn extras(&self, object: &str) -> String {
        if object == "oldObject" {
            format!("variables.{OLD_EXTRAS}")
        } else {
            format!("variables.{EXTRAS}")
        }
    }

    /// CEL that is true when `object`'s `spec.providerID` is set and not empty (a VCDMachine).
    pub fn provisioned(&self, object: &str) -> String {
        let mut guard = String::new();
        if object != "object" {
            guard = format!("{object} != null && ");
        }
        format!("({guard}has({object}.spec) && has({object}.spec.providerID) && {object}.spec.providerID != '')")
    }

    /// Adds a validation. It must refuse only what the policy's own rule refuses: a rule that
    /// needs more than the object (its cluster, its owner Machine's role) has none.
    ///
    /// A site's own rule, "no machine attaches to a retired network", beside CAPVCD's:
    ///
    /// ```
    /// use nicpolicy_plugin::backstop::{quote, BackstopRequest, Builder, Validation, BACKSTOP_VERSION};
    /// use nicpolicy_plugin::capvcd;
    /// use nicpolicy_plugin::{ObjectKind, Reason};
    ///
    /// /// The networks being retired, as the policy's settings name them.
    /// fn backstop(retired: &[&str], settings: &capvcd::Settings, builder: &mut Builder) {
    ///     capvcd::cel::all(settings, builder);
    ///     let list = builder.extras("object");
    ///     let field = builder.field("extraOvdcNetworks");
    ///     // The settings are a parameter: the expression stays the same when they change.
    ///     let retired = builder.param("retired", format!("\n{}\n", retired.join("\n")));
    ///     builder.validate(Validation {
    ///         rule: "site/retired".into(),
    ///         expression: format!("!{list}.exists(n, {retired}.contains('\\n' + n + '\\n'))"),
    ///         message: format!("{field}: a network is being retired; attach to its successor"),
    ///         message_expression: None,
    ///         field,
    ///         reason: Reason::Forbidden,
    ///     });
    /// }
    ///
    /// let request = BackstopRequest {
    ///     version: BACKSTOP_VERSION,
    ///     kind: ObjectKind::VcdMachine,
    ///     settings: serde_json::Value::Null,
    ///     param_prefix: "VCDMachine.0.".into(),
    /// };
    /// let mut builder = Builder::new(&request);
    /// backstop(&["legacy-net"], &capvcd::Settings::default(), &mut builder);
    /// let backstop = builder.finish();
    /// assert_eq!(backstop.params["VCDMachine.0.retired"], "\nlegacy-net\n");
    /// assert!(backstop.validations.iter().any(|v| v.rule == "site/retired"));
    /// assert_eq!(quote("it's"), "'it\\'s'");
    /// ```
    pub fn validate(&mut self, validation: Validation) {
        self.backstop.validations.push(validation);
    }

    /// Notes something the policy checks that the backstop does not.
    pub fn not_covered(&mut self, what: impl Into<String>) {
        self.backstop.not_covered.push(what.into());
    }

    /// Says that the policy may write back `extraOvdcNetworks`.
    pub fn rewrites_networks(&mut self) {
        self.backstop.rewrites_networks = true;
    }

    /// The backstop built.
    pub fn finish(self) -> Backstop {
        self.backstop
    }
}

/// A parameter of the ConfigMap, as CEL: [`Param::read`] (also its `Display`) reads it as a
/// string, [`Param::present`] is true when the ConfigMap holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Param {
    /// `params.data['key']`.
    pub read: String,
    /// `(has(params.data) && 'key' in params.data)`.
    pub present: String,
}

impl Param {
    fn of(key: &str) -> Param {
        let key = quote(key);
        Param {
            read: format!("params.data[{key}]"),
            present: format!("(has(params.data) && {key} in params.data)"),
        }
    }
}

impl std::fmt::Display for Param {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.read)
    }
}

/// The variable holding the object's extra networks.
pub const EXTRAS: &str = "extras";
/// The variable holding the stored object's extra networks (`[]` on a CREATE).
pub const OLD_EXTRAS: &str = "oldExtras";

/// The variables every backstop's expressions may read, as `(name, expression)`, which the host
/// declares in each ValidatingAdmissionPolicy (`spec.variables`) in this order:
/// [`EXTRAS`] and [`OLD_EXTRAS`], the lists of extra networks of `object` and `oldObject`, `[]`
/// when the field (or one above it) is absent.
pub fn variables(kind: ObjectKind) -> [(&'static str, String); 2] {
    let list = |object: &str| {
        let mut path = object.to_string();
        let mut present = Vec::new();
        if object == "oldObject" {
            present.push("oldObject != null".to_string());
        }
        for part in kind.spec_path().split('.').chain(["extraOvdcNetworks"]) {
            present.push(format!("has({path}.{part})"));
            path = format!("{path}.{part}");
        }
        format!("{} ? {path} : []", present.join(" && "))
    };
    [(EXTRAS, list("object")), (OLD_EXTRAS, list("oldObject"))]
}

/// `text` as a CEL string literal (single quotes, backslash escapes).
pub fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// The backstop of a policy whose settings are `S`: the settings read and checked as for an
/// evaluation, then `rules` adds its validations. Used by [`export_backstop!`](crate::export_backstop).
///
/// # Errors
/// Why the request or the settings cannot be used.
pub fn build<S: crate::settings::PolicySettings>(
    request: &BackstopRequest,
    rules: fn(&S, &mut Builder),
) -> Result<Backstop, String> {
    if request.version != BACKSTOP_VERSION {
        return Err(format!(
            "backstop request version {} is not supported (this policy speaks {BACKSTOP_VERSION})",
            request.version
        ));
    }
    let settings: S = crate::settings::parse(&request.settings)?;
    let mut builder = Builder::new(request);
    rules(&settings, &mut builder);
    Ok(builder.finish())
}

/// The guest side of `nicpolicy_backstop`: request JSON in, [`BackstopOutput`] JSON out.
pub fn backstop_json(
    input: &[u8],
    backstop: fn(&BackstopRequest) -> Result<Backstop, String>,
) -> Vec<u8> {
    let output = match serde_json::from_slice::<BackstopRequest>(input) {
        Ok(request) => match backstop(&request) {
            Ok(backstop) => BackstopOutput::Backstop(backstop),
            Err(error) => BackstopOutput::Error(error),
        },
        Err(err) => BackstopOutput::Error(format!("the backstop request cannot be read: {err}")),
    };
    serde_json::to_vec(&output).unwrap_or_else(|err| {
        format!("{{\"error\":\"cannot encode the backstop: {err}\"}}").into_bytes()
    })
}

/// Exports `nicpolicy_backstop` for a policy built with
/// [`export_policy!`](crate::export_policy): `rules` adds the policy's validations for its
/// typed settings. Natively it defines `backstop_request`, which the host's tests call.
///
/// ```
/// use nicpolicy_plugin::backstop::Builder;
/// use nicpolicy_plugin::capvcd::{self, Settings};
///
/// /// CAPVCD's structural rules, as the policy enforces them.
/// fn backstop(settings: &Settings, builder: &mut Builder) {
///     capvcd::backstop(settings, builder);
/// }
///
/// nicpolicy_plugin::export_policy!(capvcd::evaluate_with, settings: Settings);
/// nicpolicy_plugin::export_backstop!(backstop, settings: Settings);
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! export_backstop {
    ($rules:path, settings: $settings:ty) => {
        /// The policy's backstop (its structural rules as CEL) for `request`.
        pub fn backstop_request(
            request: &$crate::backstop::BackstopRequest,
        ) -> ::core::result::Result<$crate::backstop::Backstop, ::std::string::String> {
            $crate::backstop::build::<$settings>(request, $rules)
        }

        #[cfg(all(
            target_arch = "wasm32",
            not(feature = "js"),
            not(feature = "kubewarden")
        ))]
        #[allow(unsafe_code)]
        const _: () = {
            #[no_mangle]
            pub extern "C" fn nicpolicy_backstop(ptr: u32, len: u32) -> u64 {
                // SAFETY: the host wrote `len` bytes at `ptr`, which came from `nicpolicy_alloc`.
                unsafe { $crate::guest::backstop(ptr, len, backstop_request) }
            }
        };
    };
}
