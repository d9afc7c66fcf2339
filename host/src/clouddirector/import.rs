//! The org VDC networks of the VDCs (or VDC groups) named, as an inventory.

use std::collections::BTreeMap;

use nicpolicy_plugin::schema::{Inventory, IpRange, Network, NetworkType};
use serde_json::Value;

use super::client::{Client, ClientError};
use crate::pools::Pool;

/// Results per page: the most Cloud Director serves.
pub const PAGE_SIZE: u32 = 128;
/// Pages read at most per owner (128 × 1,000 networks): a server that never stops paging is
/// cut off.
pub const MAX_PAGES: u32 = 1000;

/// Whose networks to read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owner {
    /// An org VDC, by name.
    Vdc(String),
    /// A VDC group, by name (its networks serve all its VDCs).
    VdcGroup(String),
    /// An org VDC or VDC group by its URN (`urn:vcloud:vdc:...`, as a VCDCluster's
    /// `status.vcdResourceMap.ovdcs[].id` holds it).
    Id(String),
}

impl Owner {
    fn describe(&self) -> String {
        match self {
            Owner::Vdc(name) => format!("org VDC {name:?}"),
            Owner::VdcGroup(name) => format!("VDC group {name:?}"),
            Owner::Id(id) => format!("owner {id}"),
        }
    }
}

/// What an import read.
#[derive(Clone, Debug, PartialEq)]
pub struct Imported {
    /// The networks, sorted by name.
    pub inventory: Inventory,
    /// Each network's static pool as Cloud Director counts it (`totalIpCount`, `usedIpCount`),
    /// where it gives both: written beside the network ([`crate::pools`]), not sent to
    /// policies.
    pub pools: BTreeMap<String, Pool>,
    /// What was read, one line each, for the file's head (no time: the same site gives the
    /// same file).
    pub sources: Vec<String>,
    /// What could not be carried over as it is (a second subnet), one line each.
    pub warnings: Vec<String>,
}

/// Why an import failed. Nothing is written then.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// A call failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// A VDC or VDC group by that name is not in the org.
    #[error("{owner} is not in org {org} (or the token's user cannot see it)")]
    NoSuchOwner {
        /// The owner.
        owner: String,
        /// The org.
        org: String,
    },
    /// Two networks of one name among the owners read: one inventory cannot hold both.
    #[error(
        "network {name:?} exists in {first} and {second}: import them into separate inventories"
    )]
    Duplicate {
        /// The name.
        name: String,
        /// Where the first came from.
        first: String,
        /// Where the second came from.
        second: String,
    },
    /// A network without a usable field.
    #[error("{what}: network {index} of the answer: {why}")]
    Network {
        /// The call.
        what: String,
        /// Its position in the page.
        index: usize,
        /// Why.
        why: String,
    },
    /// More pages than [`MAX_PAGES`].
    #[error("{what}: more than {MAX_PAGES} pages; refused")]
    TooManyPages {
        /// The call.
        what: String,
    },
}

fn text(value: &Value, key: &str) -> Option<String> {
    value
        .get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// The URN of a VDC or VDC group by name.
async fn resolve(client: &mut Client, owner: &Owner) -> Result<(String, String), ImportError> {
    let (path, name) = match owner {
        Owner::Id(id) => return Ok((id.clone(), owner.describe())),
        Owner::Vdc(name) => ("vdcs", name),
        Owner::VdcGroup(name) => ("vdcGroups", name),
    };
    let what = format!("find {}", owner.describe());
    let answer = client
        .get(
            &what,
            path,
            &[
                ("filter", format!("name=={name}")),
                ("page", "1".into()),
                ("pageSize", PAGE_SIZE.to_string()),
            ],
        )
        .await?;
    let found = answer
        .get("values")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|v| v.get("name").and_then(Value::as_str) == Some(name.as_str()))
        .and_then(|v| text(v, "id"));
    match found {
        Some(id) => Ok((id, owner.describe())),
        None => Err(ImportError::NoSuchOwner {
            owner: owner.describe(),
            org: client.org().to_string(),
        }),
    }
}

/// The network's static pool counts, when the answer gives both (the API may give `null`).
fn pool(value: &Value) -> Result<Option<Pool>, String> {
    let count = |key: &str| match value.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(n) => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("{key} {n} is not a count")),
    };
    match (count("totalIpCount")?, count("usedIpCount")?) {
        (Some(total), Some(used)) if used > total => Err(format!(
            "usedIpCount {used} is more than totalIpCount {total}"
        )),
        (Some(total), Some(used)) => Ok(Some(Pool { total, used })),
        _ => Ok(None),
    }
}

/// One `VdcNetwork` of the answer as an inventory network.
fn network(value: &Value, warnings: &mut Vec<String>) -> Result<Network, String> {
    let name = text(value, "name").ok_or("no name")?;
    let network_type = match value.get("networkType").and_then(Value::as_str) {
        Some("NAT_ROUTED") => Some(NetworkType::Routed),
        Some("ISOLATED") => Some(NetworkType::Isolated),
        Some("DIRECT") => Some(NetworkType::Direct),
        Some("OPAQUE") => Some(NetworkType::Imported),
        _ => None,
    };
    let subnets: Vec<&Value> = value
        .pointer("/subnets/values")
        .and_then(Value::as_array)
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    let mut out = Network::named(name.clone());
    out.network_type = network_type;
    if let Some(subnet) = subnets.first() {
        out.gateway = text(subnet, "gateway");
        out.prefix_length = subnet
            .get("prefixLength")
            .and_then(Value::as_u64)
            .map(|p| u8::try_from(p).map_err(|_| format!("prefixLength {p} is out of range")))
            .transpose()?;
        out.dns = ["dnsServer1", "dnsServer2"]
            .iter()
            .filter_map(|key| text(subnet, key))
            .collect();
        out.static_ip_ranges = subnet
            .pointer("/ipRanges/values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|range| {
                Ok(IpRange {
                    start: text(range, "startAddress").ok_or("an IP range without startAddress")?,
                    end: text(range, "endAddress").ok_or("an IP range without endAddress")?,
                })
            })
            .collect::<Result<_, String>>()?;
    }
    if subnets.len() > 1 {
        warnings.push(format!(
            "{name}: {} subnets; the inventory holds one per network, the first ({}/{})",
            subnets.len(),
            out.gateway.as_deref().unwrap_or("?"),
            out.prefix_length.map_or("?".to_string(), |p| p.to_string()),
        ));
    }
    Ok(out)
}

/// Reads the networks of `owners` (all the org's when empty), every page, and returns them as
/// an inventory sorted by name, so the same site gives the same file.
///
/// # Errors
/// The first call that fails, an owner that does not exist, two networks of one name.
pub async fn import(client: &mut Client, owners: &[Owner]) -> Result<Imported, ImportError> {
    let mut filters: Vec<(Option<String>, String)> = Vec::new();
    if owners.is_empty() {
        filters.push((None, format!("org {}", client.org())));
    }
    for owner in owners {
        let (id, described) = resolve(client, owner).await?;
        filters.push((Some(id), described));
    }
    let mut networks: BTreeMap<String, (Network, String)> = BTreeMap::new();
    let mut pools = BTreeMap::new();
    let mut warnings = Vec::new();
    let mut sources = Vec::new();
    for (id, described) in &filters {
        let what = format!("list the networks of {described}");
        let mut page = 1;
        let mut read = 0;
        loop {
            let mut query = vec![
                ("page", page.to_string()),
                ("pageSize", PAGE_SIZE.to_string()),
            ];
            if let Some(id) = id {
                query.push(("filter", format!("ownerRef.id=={id}")));
            }
            let answer = client.get(&what, "orgVdcNetworks", &query).await?;
            let values = answer
                .get("values")
                .and_then(Value::as_array)
                .ok_or_else(|| ClientError::BadAnswer {
                    what: what.clone(),
                    why: "no values".into(),
                })?;
            for (index, value) in values.iter().enumerate() {
                let failed = |why| ImportError::Network {
                    what: what.clone(),
                    index,
                    why,
                };
                let network = network(value, &mut warnings).map_err(failed)?;
                if let Some(counted) = pool(value).map_err(failed)? {
                    pools.insert(network.name.clone(), counted);
                }
                read += 1;
                if let Some((_, first)) = networks.get(&network.name) {
                    return Err(ImportError::Duplicate {
                        name: network.name.clone(),
                        first: first.clone(),
                        second: described.clone(),
                    });
                }
                networks.insert(network.name.clone(), (network, described.clone()));
            }
            let page_count = answer.get("pageCount").and_then(Value::as_u64).unwrap_or(1);
            if u64::from(page) >= page_count || values.is_empty() {
                break;
            }
            page += 1;
            if page > MAX_PAGES {
                return Err(ImportError::TooManyPages { what });
            }
        }
        let count = if read == 1 {
            "1 network".to_string()
        } else {
            format!("{read} networks")
        };
        sources.push(match id {
            Some(id) => format!("{described} ({id}): {count}"),
            None => format!("{described}: {count}"),
        });
    }
    let inventory = Inventory {
        networks: networks.into_values().map(|(network, _)| network).collect(),
    };
    nicpolicy_plugin::objects::check_inventory(&inventory).map_err(|(field, why)| {
        ImportError::Network {
            what: "the imported inventory".into(),
            index: field
                .strip_prefix("networks[")
                .and_then(|rest| rest.split(']').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0),
            why: format!("{field}: {why}"),
        }
    })?;
    Ok(Imported {
        inventory,
        pools,
        sources,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pool_counts_are_read_when_both_are_whole_numbers() {
        let counted = json!({"totalIpCount": 231, "usedIpCount": 228});
        assert_eq!(
            pool(&counted),
            Ok(Some(Pool {
                total: 231,
                used: 228
            }))
        );
        // The API may give null (govcd declares both as pointers): no pool then.
        assert_eq!(
            pool(&json!({"totalIpCount": null, "usedIpCount": 3})),
            Ok(None)
        );
        assert_eq!(pool(&json!({})), Ok(None));
        assert_eq!(
            pool(&json!({"totalIpCount": 10, "usedIpCount": 11})),
            Err("usedIpCount 11 is more than totalIpCount 10".to_string())
        );
        assert_eq!(
            pool(&json!({"totalIpCount": "ten", "usedIpCount": 1})),
            Err("totalIpCount \"ten\" is not a count".to_string())
        );
    }
}
