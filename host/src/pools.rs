//! The static IP pools of the org VDC networks, as Cloud Director counts them (`totalIpCount`,
//! `usedIpCount`): written into the inventory file by `nicpolicy inventory import`
//! ([`crate::clouddirector`]) and read back by the audit's capacity
//! ([`crate::audit::capacity`]). They are members of the inventory file that are never sent to
//! policies: the request's `Network` has none, so ABI v1 and its binary formats are unchanged.

use std::collections::BTreeMap;
use std::path::Path;

use nicpolicy_inputs::manifest::ManifestError;
use serde::{Deserialize, Serialize};

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

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CountedNetwork {
    name: String,
    #[serde(default)]
    total_ip_count: Option<u64>,
    #[serde(default)]
    used_ip_count: Option<u64>,
}

/// The pools of the inventory file at `path` that carry both counts, by network name (these
/// members are not sent to policies).
///
/// # Errors
/// The file cannot be read, a count is not a whole number (named with its path), or a network
/// uses more than it has.
pub fn read_pools(path: &Path) -> Result<BTreeMap<String, Pool>, ManifestError> {
    let mut pools = BTreeMap::new();
    crate::inventories::read_members(path, |file, object, i, network: CountedNetwork| {
        if let (Some(total), Some(used)) = (network.total_ip_count, network.used_ip_count) {
            if used > total {
                return Err(file.field_error(
                    object,
                    &format!("networks[{i}].usedIpCount"),
                    format!("{used} is more than totalIpCount {total}"),
                ));
            }
            pools.insert(network.name, Pool { total, used });
        }
        Ok(())
    })?;
    Ok(pools)
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
    /// Reads the pools of the default inventory file and of each VDC's.
    ///
    /// # Errors
    /// As for [`read_pools`], for the first file that fails.
    pub fn read(
        default: Option<&Path>,
        by_vdc: &BTreeMap<String, std::path::PathBuf>,
        missing: crate::inventories::Missing,
    ) -> Result<Pools, ManifestError> {
        let mut pools = Pools {
            default: default.map(read_pools).transpose()?.unwrap_or_default(),
            by_vdc: BTreeMap::new(),
        };
        for (vdc, path) in by_vdc {
            if missing == crate::inventories::Missing::UseDefault && !path.exists() {
                continue;
            }
            pools.by_vdc.insert(vdc.clone(), read_pools(path)?);
        }
        Ok(pools)
    }

    /// Whether no inventory counts any pool.
    pub fn is_empty(&self) -> bool {
        self.default.is_empty() && self.by_vdc.values().all(BTreeMap::is_empty)
    }
}
