//! The reference CAPVCD network policy, and the host's default.
//!
//! NIC 0 is the cluster's network (or the network of the machine's zone), the extra networks
//! follow in order with POOL addresses and VMXNET3 adapters unless the settings say otherwise.
//! Duplicates, the primary repeated, too many NICs, malformed or unknown names, an unresolvable
//! primary and NIC changes on provisioned machines are refused. The rules live in
//! [`nicpolicy_plugin::capvcd`] so site policies can reuse them one by one.

use nicpolicy_plugin::{capvcd, Decision, Request};

/// Evaluates one machine with the CAPVCD rules, reading the settings from the request (the
/// exported policy; also callable natively).
pub fn evaluate(request: &Request) -> Decision {
    capvcd::evaluate(request)
}

nicpolicy_plugin::export_policy!(capvcd::evaluate_with, settings: capvcd::Settings);
