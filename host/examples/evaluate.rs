//! Evaluate one machine with the built-in CAPVCD policy: one host, one loaded policy, one
//! request built from the manifests in `examples/`.
//!
//! ```console
//! cargo run -p nicpolicy --example evaluate
//! ```

use std::path::Path;

use nicpolicy::{builtin, Host, HostConfig, PolicyOptions, RequestFiles};

fn main() -> anyhow::Result<()> {
    // One host per process: the Wasmtime engine, its epoch ticker and the module cache.
    let host = Host::new(HostConfig::default())?;
    // Compiled (or read from the cache) once, ABI-checked, its settings validated.
    let policy = host.load(
        builtin::CAPVCD_WASM,
        PolicyOptions {
            settings: serde_json::json!({"maxNics": 6}),
            ..PolicyOptions::default()
        },
    )?;

    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let request = RequestFiles {
        cluster: Some(&examples.join("cluster.yaml")),
        machine: Some(&examples.join("machine.yaml")),
        inventory: Some(&examples.join("inventory.yaml")),
        ..RequestFiles::default()
    }
    .build()?;

    // A fresh instance per call, under the policy's time and memory limits.
    let evaluation = policy.evaluate(&request)?;
    let decision = &evaluation.decision;
    println!(
        "{} {}: {} in {:?}",
        request.kind.as_str(),
        request.machine.name,
        if decision.allowed {
            "allowed"
        } else {
            "denied"
        },
        evaluation.elapsed
    );
    for nic in &decision.nics {
        println!(
            "  NIC {} -> {} ({}, {})",
            nic.index,
            nic.network,
            nic.ip_allocation_mode.as_str(),
            nic.adapter_type.as_str()
        );
    }
    for violation in &decision.violations {
        println!("  {}: {}", violation.field, violation.message);
    }
    Ok(())
}
