//! A chain: a site's own rule (the hand-written `nic-limit` policy, at most 3 NICs) in front of
//! the built-in CAPVCD policy, loaded from one list of [`PolicySpec`]s. The machine in
//! `examples/invalid-machine.yaml` breaks both, and the chain reports each violation once,
//! prefixed with the policy that found it.
//!
//! ```console
//! cargo run -p nicpolicy --example chain
//! ```

use std::path::Path;

use nicpolicy::{sources, Host, HostConfig, PolicySource, PolicySpec, RequestFiles};

fn main() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let nic_limit = wat::parse_file(root.join("policies/nic-limit-wat/nic-limit.wat"))?;

    let host = Host::new(HostConfig::default())?;
    // Every entry says where its module comes from, its settings, pin and limits; an error
    // names the entry that failed. The loader of `sources` fetches `builtin:` (and `oci://`)
    // modules.
    let chain = sources::Sources::new(&host).loader(&host).load(&[
        PolicySpec::new(PolicySource::Bytes(nic_limit.into()))
            .with_settings(serde_json::json!({"maxNics": 3})),
        PolicySpec::new(sources::parse("builtin:capvcd")?)
            .with_settings_file(root.join("examples/settings.yaml")),
    ])?;

    let request = RequestFiles {
        cluster: Some(&root.join("examples/cluster.yaml")),
        machine: Some(&root.join("examples/invalid-machine.yaml")),
        inventory: Some(&root.join("examples/inventory.yaml")),
        ..RequestFiles::default()
    }
    .build()?;

    let evaluation = chain.evaluate(&request)?;
    println!(
        "{}: {}",
        chain.name(),
        if evaluation.decision.allowed {
            "allowed"
        } else {
            "denied"
        }
    );
    for violation in &evaluation.decision.violations {
        println!(
            "  {} ({:?}): {}",
            violation.field, violation.reason, violation.message
        );
    }
    // Each policy's own decision stays available, unprefixed.
    for step in &evaluation.steps {
        println!(
            "{} found {} violation(s) in {:?}",
            step.policy,
            step.evaluation.decision.violations.len(),
            step.evaluation.elapsed
        );
    }
    Ok(())
}
