//! The reference CAPVCD network policy, and the host's default.
//!
//! NIC 0 is the cluster's network (or the network of the machine's zone), the extra networks
//! follow in order with POOL addresses and VMXNET3 adapters unless the settings say otherwise.
//! Duplicates, the primary repeated, too many NICs, malformed or unknown names, an unresolvable
//! primary and NIC changes on provisioned machines are refused. The rules live in
//! [`nicpolicy_plugin::capvcd`] so site policies can reuse them one by one.
//!
//! Natively, `evaluate_request` (defined by `export_policy!`) runs it as the host does.

use nicpolicy_plugin::capvcd;

nicpolicy_plugin::export_policy!(capvcd::evaluate_with, settings: capvcd::Settings);
nicpolicy_plugin::export_backstop!(capvcd::backstop, settings: capvcd::Settings);
