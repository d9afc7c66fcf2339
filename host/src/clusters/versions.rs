//! Which version of each Cluster API and CAPVCD kind to read, as the API server serves them.
//!
//! Sites run different builds: CAPVCD v1.3.2 (the last release) serves its kinds at v1beta1 and
//! v1beta2, CAPVCD's main adds v1beta3 (zones), and Cluster API serves `Cluster` at v1beta1
//! (up to v1.10) or v1beta1 and v1beta2 (v1.11). A watch or list at a version the CRD does not
//! serve answers 404 for good, so the version is found from discovery (or pinned in the
//! configuration) instead of being written into the code.

use kube::core::ApiResource;
use nicpolicy_plugin::objects::CAPVCD_GROUP;

/// Cluster API's core group.
pub const CLUSTER_API_GROUP: &str = "cluster.x-k8s.io";
/// The API group of Cluster API's kubeadm control-plane provider.
pub const CONTROL_PLANE_GROUP: &str = "controlplane.cluster.x-k8s.io";

/// CAPVCD versions whose objects nicpolicy reads, in order of preference: v1beta3 carries the
/// zones that v1beta2 lacks, so it wins where both are served.
pub const CAPVCD_READABLE: [&str; 2] = ["v1beta3", "v1beta2"];

/// Cluster API versions whose `Cluster` nicpolicy reads (both spell `infrastructureRef`), in
/// order of preference.
pub const CLUSTER_API_READABLE: [&str; 2] = ["v1beta2", "v1beta1"];

/// What could not be found.
#[derive(Debug, thiserror::Error)]
pub enum VersionError {
    /// Discovery failed (the API server is unreachable, or refused).
    #[error("discovery of {group} failed: {source}")]
    Discovery {
        /// The API group asked for.
        group: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// The kind is served, but at no version nicpolicy reads.
    #[error(
        "{kind}.{group} is served at {served}, none of which nicpolicy reads ({readable})",
        served = served.join(", "),
        readable = readable.join(", ")
    )]
    Unreadable {
        /// The kind.
        kind: String,
        /// Its group.
        group: String,
        /// The versions the API server serves it at.
        served: Vec<String>,
        /// The versions nicpolicy reads.
        readable: Vec<String>,
    },
}

/// The resources to read, one per kind found, and a note for each kind that is not served.
#[derive(Debug, Default)]
pub struct Resolved {
    /// The kinds found, each at its chosen version, in the order asked.
    pub resources: Vec<ApiResource>,
    /// `"<Kind>.<group> is not served by this cluster"`, for each kind asked for and not found.
    pub missing: Vec<String>,
}

impl Resolved {
    /// The resource of `kind`, when it is served.
    pub fn get(&self, kind: &str) -> Option<&ApiResource> {
        self.resources.iter().find(|r| r.kind == kind)
    }
}

/// One kind to find: its group, and the versions that may be read, preferred first.
#[derive(Clone, Copy, Debug)]
pub struct Wanted<'a> {
    /// The API group.
    pub group: &'a str,
    /// The kind.
    pub kind: &'a str,
    /// The readable versions, preferred first.
    pub readable: &'a [&'a str],
}

impl<'a> Wanted<'a> {
    /// A CAPVCD kind, read at [`CAPVCD_READABLE`].
    pub fn capvcd(kind: &'a str) -> Wanted<'a> {
        Wanted {
            group: CAPVCD_GROUP,
            kind,
            readable: &CAPVCD_READABLE,
        }
    }

    /// A kind of Cluster API's kubeadm control-plane provider
    /// (`controlplane.cluster.x-k8s.io`), at v1beta2 or v1beta1.
    pub fn control_plane(kind: &'a str) -> Wanted<'a> {
        Wanted {
            group: CONTROL_PLANE_GROUP,
            kind,
            readable: &["v1beta2", "v1beta1"],
        }
    }

    /// A Cluster API kind, at `pinned` when the configuration names a version, else at
    /// [`CLUSTER_API_READABLE`].
    pub fn cluster_api(kind: &'a str, pinned: Option<&'a [&'a str]>) -> Wanted<'a> {
        Wanted {
            group: CLUSTER_API_GROUP,
            kind,
            readable: pinned.unwrap_or(&CLUSTER_API_READABLE),
        }
    }
}

/// Finds each wanted kind through discovery. A group or kind the API server does not serve is
/// a note in [`Resolved::missing`], not an error: a cluster without ClusterClasses is normal.
///
/// # Errors
/// [`VersionError::Discovery`] when the API server does not answer, and
/// [`VersionError::Unreadable`] when a kind is served only at versions nicpolicy cannot read.
pub async fn resolve(
    client: &kube::Client,
    wanted: &[Wanted<'_>],
) -> Result<Resolved, VersionError> {
    let mut groups: Vec<(&str, Option<kube::discovery::ApiGroup>)> = Vec::new();
    let mut resolved = Resolved::default();
    for want in wanted {
        if !groups.iter().any(|(g, _)| *g == want.group) {
            let found = match kube::discovery::group(client, want.group).await {
                Ok(group) => Some(group),
                Err(kube::Error::Api(status)) if status.code == 404 => None,
                Err(source) => {
                    return Err(VersionError::Discovery {
                        group: want.group.to_string(),
                        source,
                    })
                }
            };
            groups.push((want.group, found));
        }
        let group = groups
            .iter()
            .find(|(g, _)| *g == want.group)
            .and_then(|(_, found)| found.as_ref());
        let served: Vec<(String, ApiResource)> = group
            .map(|group| {
                group
                    .versions()
                    .filter_map(|version| {
                        group
                            .versioned_resources(version)
                            .into_iter()
                            .find(|(resource, _)| resource.kind == want.kind)
                            .map(|(resource, _)| (version.to_string(), resource))
                    })
                    .collect()
            })
            .unwrap_or_default();
        match choose(want, &served)? {
            Some(resource) => resolved.resources.push(resource),
            None => resolved.missing.push(format!(
                "{}.{} is not served by this cluster",
                want.kind, want.group
            )),
        }
    }
    Ok(resolved)
}

/// The preferred readable version among those served; None when the kind is not served at all.
fn choose(
    want: &Wanted<'_>,
    served: &[(String, ApiResource)],
) -> Result<Option<ApiResource>, VersionError> {
    if served.is_empty() {
        return Ok(None);
    }
    for version in want.readable {
        if let Some((_, resource)) = served.iter().find(|(v, _)| v == version) {
            return Ok(Some(resource.clone()));
        }
    }
    Err(VersionError::Unreadable {
        kind: want.kind.to_string(),
        group: want.group.to_string(),
        served: served.iter().map(|(v, _)| v.clone()).collect(),
        readable: want.readable.iter().map(|v| v.to_string()).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::GroupVersionKind;

    fn served(versions: &[&str]) -> Vec<(String, ApiResource)> {
        versions
            .iter()
            .map(|v| {
                (
                    v.to_string(),
                    ApiResource::from_gvk_with_plural(
                        &GroupVersionKind::gvk(CAPVCD_GROUP, v, "VCDCluster"),
                        "vcdclusters",
                    ),
                )
            })
            .collect()
    }

    #[test]
    fn the_release_is_read_at_v1beta2_and_main_at_v1beta3() {
        let want = Wanted::capvcd("VCDCluster");
        let release = choose(&want, &served(&["v1beta1", "v1beta2"])).unwrap();
        assert_eq!(release.unwrap().version, "v1beta2");
        let main = choose(&want, &served(&["v1beta1", "v1beta2", "v1beta3"])).unwrap();
        assert_eq!(main.unwrap().version, "v1beta3");
    }

    #[test]
    fn a_kind_not_served_is_missing_and_one_at_other_versions_is_an_error() {
        let want = Wanted::capvcd("VCDCluster");
        assert!(choose(&want, &[]).unwrap().is_none());
        let err = choose(&want, &served(&["v1beta1"])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "VCDCluster.infrastructure.cluster.x-k8s.io is served at v1beta1, none of which \
             nicpolicy reads (v1beta3, v1beta2)"
        );
    }

    #[test]
    fn a_pinned_cluster_api_version_is_the_only_one_read() {
        let pinned = ["v1beta1"];
        let want = Wanted::cluster_api("Cluster", Some(&pinned));
        assert_eq!(want.readable, ["v1beta1"]);
        assert_eq!(
            Wanted::cluster_api("Cluster", None).readable,
            CLUSTER_API_READABLE
        );
    }
}
