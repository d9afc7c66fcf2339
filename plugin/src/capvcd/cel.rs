//! The CAPVCD rules' structural part as CEL, for the [backstop](crate::backstop).
//!
//! Each function adds the validation that stands in for one rule of [`super`], with the same
//! settings. Each refuses only what the rule refuses, never more: the checks that need the
//! VCDCluster (the primary network, its zone, the primary listed again) or the plan (address
//! modes, adapters) are left to the webhook, and list rules do not run on lists of
//! [`VCD_MAX_NICS`] or more extra networks, which the count rule refuses (that keeps each
//! expression's cost bounded in kube-apiserver).

use crate::backstop::{quote, Builder, Validation};
use crate::schema::{ObjectKind, Reason};

use super::{rules, Settings, MAX_NETWORK_NAME_LEN, VCD_MAX_NICS};

/// CEL that is true when the name `n` passes [`super::check_name`]: not empty, at most
/// [`MAX_NETWORK_NAME_LEN`] characters, no leading or trailing space, no control character
/// (the white space `check_name` trims is a space or a control character, but for rare Unicode
/// spaces, which this leaves to the webhook).
fn well_formed(n: &str) -> String {
    format!(
        "(size({n}) > 0 && size({n}) <= {MAX_NETWORK_NAME_LEN} && !{n}.startsWith(' ') && \
         !{n}.endsWith(' ') && !{n}.matches({}))",
        quote("\\p{Cc}")
    )
}

/// The list rules' guard: a list of [`VCD_MAX_NICS`] or more extra networks is refused by the
/// count rule whatever the settings, so the others need not look at it.
fn short(list: &str) -> String {
    format!("size({list}) >= {VCD_MAX_NICS}")
}

/// Malformed names (`capvcd/network-name`).
pub fn names(builder: &mut Builder) {
    let list = builder.extras("object");
    let field = builder.field("extraOvdcNetworks");
    builder.validate(Validation {
        rule: rules::NETWORK_NAME.into(),
        expression: format!("{} || {list}.all(n, {})", short(&list), well_formed("n")),
        message: format!(
            "{field}: a network name is empty, longer than {MAX_NETWORK_NAME_LEN} characters, \
             starts or ends with a space, or holds a control character"
        ),
        message_expression: None,
        field,
        reason: Reason::Invalid,
    });
}

/// A network listed twice (`capvcd/duplicate`).
pub fn duplicates(builder: &mut Builder) {
    let list = builder.extras("object");
    let field = builder.field("extraOvdcNetworks");
    let twice = format!("size({list}.filter(m, m == n)) > 1");
    builder.validate(Validation {
        rule: rules::DUPLICATE.into(),
        expression: format!("{} || {list}.all(n, n == '' || !({twice}))", short(&list)),
        message: format!("{field}: a network is listed twice; each network can be attached once"),
        message_expression: Some(format!(
            "{} + ': network \"' + {list}.filter(n, n != '' && {twice})[0] + '\" is listed \
             twice; each network can be attached once'",
            quote(&field)
        )),
        field,
        reason: Reason::Duplicate,
    });
}

/// More NICs than `maxNics` (`capvcd/max-nics`).
pub fn max_nics(settings: &Settings, builder: &mut Builder) {
    let list = builder.extras("object");
    let field = builder.field("extraOvdcNetworks");
    let max = builder.param("maxNics", settings.max_nics.to_string());
    builder.validate(Validation {
        rule: rules::MAX_NICS.into(),
        expression: format!(
            "size({list}) + 1 <= ({} ? int({max}) : {VCD_MAX_NICS})",
            max.present
        ),
        message: format!("{field}: more NICs than this site allows (maxNics, at most {VCD_MAX_NICS} in Cloud Director)"),
        message_expression: Some(format!(
            "{} + ': ' + string(size({list}) + 1) + ' NICs requested (the primary and ' + \
             string(size({list})) + ' extra networks), but at most ' + ({} ? {max} : '{VCD_MAX_NICS}') \
             + ' are allowed (maxNics)'",
            quote(&field),
            max.present
        )),
        field,
        reason: Reason::TooMany,
    });
}

/// A network the inventory does not list (`capvcd/inventory`), when the served configuration
/// has an inventory. The policy leaves malformed names to the name rule, which refuses them on
/// the same field: this one need not tell them apart (one regular expression less per name).
pub fn inventory(builder: &mut Builder) {
    let list = builder.extras("object");
    let field = builder.field("extraOvdcNetworks");
    let networks = builder.inventory_param();
    let unknown = format!("!{networks}.contains('\\n' + n + '\\n')");
    builder.validate(Validation {
        rule: rules::INVENTORY.into(),
        expression: format!(
            "!{} || {} || {list}.all(n, !({unknown}))",
            networks.present,
            short(&list)
        ),
        message: format!("{field}: a network is not a network of the org VDC"),
        message_expression: Some(format!(
            "{} + ': network \"' + {list}.filter(n, {unknown})[0] + '\" is not a network of the \
             org VDC'",
            quote(&field)
        )),
        field,
        reason: Reason::NotFound,
    });
}

/// A changed list of extra networks on a machine provisioned before and after the change
/// (`capvcd/provisioned-update`), unless `allowNicChangesOnProvisioned`. For a policy that can
/// write defaults into an empty list, `defaults_empty_list` says whether these settings do
/// (`None` for a policy that never does): an empty list is then left to the webhook, since the
/// policy judges the defaulted list. It is a parameter, like the settings, so the expression
/// stays the same whatever the settings. Templates have no provider ID: nothing is added for
/// them.
pub fn provisioned(settings: &Settings, builder: &mut Builder, defaults_empty_list: Option<bool>) {
    if builder.kind() != ObjectKind::VcdMachine {
        return;
    }
    let list = builder.extras("object");
    let old = builder.extras("oldObject");
    let field = builder.field("extraOvdcNetworks");
    let allow = builder.param(
        "allowNicChangesOnProvisioned",
        settings.allow_nic_changes_on_provisioned.to_string(),
    );
    let empty = match defaults_empty_list {
        Some(defaults) => {
            let read = builder.param("defaultsEmptyList", defaults.to_string());
            format!(
                " || ({} && {read} == 'true' && size({list}) == 0)",
                read.present
            )
        }
        None => String::new(),
    };
    builder.validate(Validation {
        rule: rules::PROVISIONED_UPDATE.into(),
        expression: format!(
            "!({} && {}) || ({} && {allow} == 'true'){empty} || {list} == {old}",
            builder.provisioned("oldObject"),
            builder.provisioned("object"),
            allow.present,
        ),
        message: format!(
            "{field}: the extra networks of a provisioned machine cannot change (CAPVCD would \
             hot-remove and renumber the NICs of the running VM); replace the machine instead, \
             or set allowNicChangesOnProvisioned"
        ),
        message_expression: None,
        field,
        reason: Reason::Forbidden,
    });
}

/// What the CAPVCD policy checks that its backstop does not.
pub fn not_covered(builder: &mut Builder) {
    builder
        .not_covered("the primary network (NIC 0) and the zone's: they come from the VCDCluster");
    builder.not_covered(
        "the primary network listed again among the extra networks: it needs the VCDCluster",
    );
    if builder.kind() == ObjectKind::VcdMachine {
        builder.not_covered(
            "a changed failure domain on a provisioned machine: it needs the VCDCluster",
        );
    }
    builder.not_covered("address modes and adapters of the NIC plan (a primary without an address, SR-IOV on a network that is not direct)");
    builder.not_covered("rare Unicode spaces at either end of a network name (a space or a control character is covered)");
}

/// Every structural CAPVCD rule above, for a policy that judges the machine's own list.
pub fn all(settings: &Settings, builder: &mut Builder) {
    names(builder);
    duplicates(builder);
    max_nics(settings, builder);
    inventory(builder);
    provisioned(settings, builder, None);
    not_covered(builder);
}
