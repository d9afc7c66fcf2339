//! Limits: a policy that never returns is stopped at its time limit, one that grows its memory
//! is stopped at its cap, and the host goes on evaluating with the same engine.
//!
//! ```console
//! cargo run -p nicpolicy --example limits
//! ```

use std::time::Duration;

use nicpolicy::plugin::testing;
use nicpolicy::{EvalError, Host, HostConfig, Limits, PolicyOptions};

/// An ABI v1 module whose `nicpolicy_evaluate` runs `body`.
fn module(body: &str) -> anyhow::Result<Vec<u8>> {
    Ok(wat::parse_str(format!(
        r#"(module
          (memory (export "memory") 1)
          (data (i32.const 16) "{{\"valid\":true}}")
          (func (export "nicpolicy_abi_version") (result i32) i32.const 1)
          (func (export "nicpolicy_alloc") (param i32) (result i32) i32.const 1024)
          ;; {{"valid":true}} at 16, 14 bytes: (16 << 32) | 14.
          (func (export "nicpolicy_validate_settings") (param i32 i32) (result i64)
            i64.const 68719476750)
          (func (export "nicpolicy_evaluate") (param i32 i32) (result i64) {body}))"#
    ))?)
}

fn main() -> anyhow::Result<()> {
    let host = Host::new(HostConfig::default())?;
    let limits = Limits::default()
        .with_timeout(Duration::from_millis(50))
        .with_memory_bytes(8 << 20);
    let options = || PolicyOptions {
        limits,
        ..PolicyOptions::default()
    };
    let request = testing::worker(&["storage-net", "workload-net"]);

    let spinning = host.load(&module("(loop $spin (br $spin)) unreachable")?, options())?;
    match spinning.evaluate(&request) {
        Err(err @ EvalError::Timeout(_)) => println!("spinning policy: {err}"),
        other => anyhow::bail!("expected a timeout, got {other:?}"),
    }

    // Grows by 64 KiB pages until the cap refuses (memory.grow returns -1), then traps.
    let growing = host.load(
        &module(
            "(loop $grow (br_if $grow (i32.ne (memory.grow (i32.const 16)) (i32.const -1)))) \
             unreachable",
        )?,
        options(),
    )?;
    match growing.evaluate(&request) {
        Err(err) => println!("growing policy: {err} ({})", err.kind()),
        Ok(_) => anyhow::bail!("expected the growing policy to fail"),
    }

    // The engine is unharmed: the next policy evaluates as usual.
    let capvcd = host.load(nicpolicy::builtin::CAPVCD_WASM, options())?;
    let decision = capvcd.evaluate(&request)?.decision;
    println!("CAPVCD policy afterwards: allowed = {}", decision.allowed);
    Ok(())
}
