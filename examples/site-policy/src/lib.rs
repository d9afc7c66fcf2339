//! CAPVCD's rules, and control-plane machines never attach to the DMZ network.
//!
//! Settings are the CAPVCD policy's (`maxNics`, `networks`, ...): the SDK reads and checks them
//! when the host loads the policy.

use nicpolicy_plugin::capvcd;
use nicpolicy_plugin::{Decision, Reason, Request, Role, Violation};

/// The network control-plane machines stay off.
pub const DMZ_NETWORK: &str = "ext-dmz-net";

/// Every CAPVCD rule, then this site's own.
pub fn evaluate(request: &Request, settings: &capvcd::Settings) -> Decision {
    let mut decision = capvcd::evaluate_with(request, settings);
    if request.machine.role == Role::ControlPlane {
        let spec = request.kind.spec_path();
        for (i, name) in request.machine.extra_ovdc_networks.iter().enumerate() {
            if name == DMZ_NETWORK {
                decision.violations.push(Violation::new(
                    format!("{spec}.extraOvdcNetworks[{i}]"),
                    Reason::Forbidden,
                    format!("control-plane machines stay off {DMZ_NETWORK}"),
                ));
            }
        }
    }
    decision.finish()
}

nicpolicy_plugin::export_policy!(evaluate, settings: capvcd::Settings);

#[cfg(test)]
mod tests {
    use nicpolicy_plugin::schema::CONTROL_PLANE_LABEL;
    use nicpolicy_plugin::testing;

    use super::*;

    #[test]
    fn control_planes_stay_off_the_dmz() {
        let mut request = testing::worker(&["storage-net", "ext-dmz-net"]);
        assert!(evaluate(&request, &capvcd::Settings::default()).allowed);

        request.machine.role = Role::ControlPlane;
        request
            .machine
            .labels
            .insert(CONTROL_PLANE_LABEL.to_string(), String::new());
        let decision = evaluate(&request, &capvcd::Settings::default());
        assert_eq!(
            testing::violation_fields(&decision),
            [("spec.extraOvdcNetworks[1]", Reason::Forbidden)]
        );
    }
}
