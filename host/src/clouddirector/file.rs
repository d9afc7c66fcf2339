//! The inventory file an import writes: a head naming the site, the org and what was read
//! (no date: the same site gives the same file, so a diff shows what changed), then the
//! networks in their usual member order, each with its pool counts ([`crate::pools`]). One
//! writer, so every import of the same site writes the same bytes.

use nicpolicy_plugin::Network;
use serde::Serialize;

use super::import::Imported;

#[derive(Serialize)]
struct InventoryFile<'a> {
    kind: &'static str,
    networks: Vec<WrittenNetwork<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WrittenNetwork<'a> {
    #[serde(flatten)]
    network: &'a Network,
    #[serde(skip_serializing_if = "Option::is_none")]
    total_ip_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    used_ip_count: Option<u64>,
}

/// The inventory file of `imported`, read from org `org` at `site`.
///
/// # Errors
/// The YAML writer's (it has none for these types in practice).
pub fn render(site: &str, org: &str, imported: &Imported) -> Result<String, serde_yaml_ng::Error> {
    let mut text = format!(
        "# The org VDC networks of org {org} at {site}, as Cloud Director lists them\n# (`nicpolicy inventory import`):\n"
    );
    for source in &imported.sources {
        text.push_str(&format!("#   {source}\n"));
    }
    text.push_str(&serde_yaml_ng::to_string(&InventoryFile {
        kind: "NetworkInventory",
        networks: imported
            .inventory
            .networks
            .iter()
            .map(|network| {
                let pool = imported.pools.get(&network.name);
                WrittenNetwork {
                    network,
                    total_ip_count: pool.map(|p| p.total),
                    used_ip_count: pool.map(|p| p.used),
                }
            })
            .collect(),
    })?);
    Ok(text)
}

/// The file name of org VDC `vdc`'s own inventory: its name with what a file name (or a
/// ConfigMap key) cannot hold, and spaces, as `-`, then `.yaml`.
pub fn file_name(vdc: &str) -> String {
    let name: String = vdc
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("{}.yaml", name.trim_start_matches('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vdc_names_become_file_names_a_configmap_key_can_hold() {
        assert_eq!(file_name("eu1-ovdc-prod"), "eu1-ovdc-prod.yaml");
        assert_eq!(file_name("EU1 Prod/Gold"), "EU1-Prod-Gold.yaml");
        assert_eq!(file_name("..hidden"), "hidden.yaml");
    }
}
