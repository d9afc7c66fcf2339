//! The webhook's review path in process: the `nicpolicy serve` reviewer over the load
//! generator's configuration, and the load generator's mix of AdmissionReviews.

use std::path::PathBuf;
use std::sync::Arc;

use nicpolicy::clusters::StaticClusters;
use nicpolicy::plugin::ObjectKind;
use nicpolicy::served::ServeConfig;
use nicpolicy::webhook::{App, Endpoint, Reviewer};
use nicpolicy::{Host, HostConfig};

/// The load generator's mix (host/benches/webhook_load.rs): (endpoint, kind, fixture).
pub const REVIEWS: [(Endpoint, ObjectKind, &str); 4] = [
    (
        Endpoint::Mutate,
        ObjectKind::VcdMachine,
        "vcdmachine-create-worker",
    ),
    (
        Endpoint::Validate,
        ObjectKind::VcdMachine,
        "vcdmachine-create-worker",
    ),
    (
        Endpoint::Validate,
        ObjectKind::VcdMachine,
        "vcdmachine-create-invalid",
    ),
    (
        Endpoint::Validate,
        ObjectKind::VcdMachineTemplate,
        "vcdmachinetemplate-create-worker",
    ),
];

/// One review of the mix, ready to post.
pub struct Review {
    pub endpoint: Endpoint,
    pub kind: ObjectKind,
    pub fixture: &'static str,
    pub body: Vec<u8>,
}

/// The mix, read from tests/fixtures/admission.
pub fn reviews() -> Vec<Review> {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    REVIEWS
        .iter()
        .map(|&(endpoint, kind, fixture)| {
            let file = workspace.join(format!("tests/fixtures/admission/{fixture}.json"));
            let body =
                std::fs::read(&file).unwrap_or_else(|err| panic!("{}: {err}", file.display()));
            Review {
                endpoint,
                kind,
                fixture,
                body,
            }
        })
        .collect()
}

/// The reviewer `nicpolicy serve` runs with the load generator's configuration (example cluster
/// and inventory), serving `policy` (a policy entry of the configuration, such as
/// `{builtin: capvcd}`) for both kinds; with `native`, the CAPVCD rules compiled in decide
/// instead, as `serve --bench-native-capvcd` does.
pub fn reviewer(label: &str, policy: &str, native: bool) -> Arc<Reviewer> {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let examples = workspace.join("examples");
    let dir = super::cache_dir("review-serve");
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let config = format!(
        "inventory: {inventory}\n\
         clusters: {{source: Static, files: [{cluster}]}}\n\
         reload: {{enabled: false}}\n\
         policies:\n  VCDMachine: [{policy}]\n  VCDMachineTemplate: [{policy}]\n",
        inventory = examples.join("inventory.yaml").display(),
        cluster = examples.join("cluster.yaml").display(),
    );
    let path = dir.join(format!("{label}.yaml"));
    std::fs::write(&path, config).expect("write config");
    let config = ServeConfig::read(&path).expect("config is valid");
    let clusters = StaticClusters::read(&[examples.join("cluster.yaml")]).expect("clusters");
    // Like `serve`'s host, without the module cache; few slots, since several hosts share the
    // process's address space.
    let host = Host::new(HostConfig {
        cache_dir: None,
        max_instances: 8,
        ..HostConfig::default()
    })
    .expect("engine starts");
    let mut app = App::new(host, config, Arc::new(clusters)).expect("policies load");
    if native {
        app = app.with_native_evaluator(Arc::new(nicpolicy_plugin::capvcd::evaluate));
    }
    app.reviewer().clone()
}

/// Checks that every reviewer gives the same answer to every review of the mix, or the
/// comparison means nothing.
pub fn same_answers(reviewers: &[(String, Arc<Reviewer>)], reviews: &[Review]) {
    for review in reviews {
        let answers: Vec<Vec<u8>> = reviewers
            .iter()
            .map(|(_, r)| r.review(review.endpoint, review.kind, &review.body).body)
            .collect();
        for ((label, _), answer) in reviewers.iter().zip(&answers) {
            assert_eq!(
                answer, &answers[0],
                "{label} answers {} like {}",
                review.fixture, reviewers[0].0
            );
        }
    }
}
