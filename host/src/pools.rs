//! The static IP pools of the org VDC networks, as Cloud Director counts them (`totalIpCount`,
//! `usedIpCount`): written into the inventory file by `nicpolicy inventory import`
//! ([`crate::clouddirector`]), read back with the inventory ([`crate::inventories`]) and
//! counted by the audit's capacity ([`crate::audit::capacity`]). They are members of the inventory file that are never sent to
//! policies: the request's `Network` has none, so ABI v1 and its binary formats are unchanged.

use std::collections::BTreeMap;

use serde::Serialize;

/// A network's static pool as Cloud Director counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pool {
    /// `totalIpCount`: the addresses of the static IP ranges.
    pub total: u64,
    /// `usedIpCount`: those taken.
    pub used: u64,
}

impl Pool {
    /// The addresses still free.
    pub fn free(&self) -> u64 {
        self.total.saturating_sub(self.used)
    }
}

/// The pools of a deployment's inventories: the default inventory's and each org VDC's
/// ([`crate::inventories`]), by network name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pools {
    /// The default inventory's.
    pub default: BTreeMap<String, Pool>,
    /// Each org VDC's, by its name.
    pub by_vdc: BTreeMap<String, BTreeMap<String, Pool>>,
}

impl Pools {
    /// Whether no inventory counts any pool.
    pub fn is_empty(&self) -> bool {
        self.default.is_empty() && self.by_vdc.values().all(BTreeMap::is_empty)
    }

    /// Every pool: `(org VDC, network, pool)`, the default inventory's first (VDC `None`), then
    /// each VDC's, by name.
    pub fn iter(&self) -> impl Iterator<Item = (Option<&str>, &str, &Pool)> {
        let default = self
            .default
            .iter()
            .map(|(network, pool)| (None, network.as_str(), pool));
        let by_vdc = self.by_vdc.iter().flat_map(|(vdc, set)| {
            set.iter()
                .map(move |(network, pool)| (Some(vdc.as_str()), network.as_str(), pool))
        });
        default.chain(by_vdc)
    }
}
