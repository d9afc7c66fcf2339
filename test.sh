#!/usr/bin/env bash
# Runs every test: the Rust workspace (unit tests, case suites through Wasmtime, hostile modules,
# the CLI), then the JS build in Node (wasm-bindgen tests and the parity check against Wasmtime),
# the starter site policy, the guest network config through cloud-init, the release image, the
# end-to-end suites against a real kube-apiserver (the chart and config/ among them), the
# playground page in headless Chromium and the Kubewarden builds.
set -euo pipefail
cd "$(dirname "$0")"
source tests/lib/phases.sh

# What the tests need and a fresh machine lacks (Debian's packages, the wasm32 target,
# wasm-bindgen-cli): installed once, each step named.
phase "set-up (tests/setup.sh)"
tests/setup.sh

# The Go-built tools of the later suites (kube-apiserver, kubectl, etcd, helm and Cluster API's
# manager for the end-to-end suites; cosign) build in the background from here, while cargo
# builds: on a cold machine they take 10-15 minutes, much of which overlaps cargo's serial
# stretches (linking, the largest crates). Their output goes to a log, shown if they fail; the
# suites that need them wait for them. On a warm machine this finds them built at once.
go_log=$(mktemp)
(tests/e2e/kube/build.sh >/dev/null && tests/cosign/run.sh --build-only) \
  >"$go_log" 2>&1 &
go_pid=$!
go_tools() {
  [[ -n "$go_pid" ]] || return 0
  local waited=$SECONDS
  if ! wait "$go_pid"; then
    echo "test.sh: building the Go tools failed:" >&2
    cat "$go_log" >&2
    exit 1
  fi
  echo "test.sh: Go tools built (waited $((SECONDS - waited)) s for them)" >&2
  go_pid=""
}

phase "cargo test --workspace"
cargo test --workspace

# Every policy's case suite through the CLI, as a site author runs it. The binary `cargo test`
# just built (same features), rather than `cargo run`, which would rebuild for the host alone.
nicpolicy="${CARGO_TARGET_DIR:-target}/debug/nicpolicy"
phase "case suites and the cost gate (nicpolicy test, bench --compare)"
for policy in capvcd role-based zone-aware static-ip; do
  "$nicpolicy" test --policy "builtin:${policy}" "tests/cases/${policy}"
done

# The cost gate: the Wasm fuel each built-in policy consumes on each of its cases, against the
# baselines committed in tests/bench/ (docs/benchmarks.md, "The cost gate"). A case more than
# 10% costlier fails here, named with its figures; a deliberate change updates the baseline in
# a commit that says why.
for policy in capvcd role-based zone-aware static-ip; do
  "$nicpolicy" bench --policy "builtin:${policy}" "tests/cases/${policy}" --iterations 1 \
    --compare "tests/bench/${policy}.json" --threshold 10 >/dev/null
done

phase "the JS build (wasm-bindgen tests, parity with Wasmtime)"
# wasm-bindgen-test in Node.
CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner \
  cargo test -p nicpolicy-capvcd --features js --target wasm32-unknown-unknown --target-dir target/js

# The JS package as a JavaScript engine loads it, checked case by case against Wasmtime.
cargo build -p nicpolicy-capvcd --features js --target wasm32-unknown-unknown \
  --profile policy-js --target-dir target/js
wasm-bindgen --target nodejs --out-dir target/js/pkg \
  target/js/wasm32-unknown-unknown/policy-js/nicpolicy_capvcd.wasm
node examples/js/evaluate.mjs target/js/pkg
node --test examples/js/check-parity.mjs

# The starter site policy, exactly as the README's "Writing a policy" builds it (a workspace of
# its own; its target directory sits beside the others).
phase "the starter site policy and nicpolicy new"
site_target="$PWD/target/site-policy"
nicpolicy_bin="$(cd "$(dirname "$nicpolicy")" && pwd)/nicpolicy"
site_wasm="$site_target/wasm32-unknown-unknown/release/my_site_policy.wasm"
(
  cd examples/site-policy
  CARGO_TARGET_DIR="$site_target" cargo test
  CARGO_TARGET_DIR="$site_target" cargo build --release --target wasm32-unknown-unknown
  "$nicpolicy_bin" inspect "$site_wasm"
  "$nicpolicy_bin" test --policy "$site_wasm" cases/
)

# `nicpolicy new` as a stranger runs it: a policy crate written into an empty temporary
# directory, outside this repository, built and tested with the commands it prints (its SDK is
# this clone's plugin/; its target directory is the starter's, so the dependencies build once).
new_dir=$(mktemp -d)
"$nicpolicy_bin" new dmz-guard --path "$new_dir" --sdk-path "$PWD/plugin"
(
  cd "$new_dir/dmz-guard"
  CARGO_TARGET_DIR="$site_target" cargo test
  CARGO_TARGET_DIR="$site_target" cargo build --release --target wasm32-unknown-unknown
  "$nicpolicy_bin" test --policy "$site_target/wasm32-unknown-unknown/release/dmz_guard.wasm" cases/
  # Its README's cost gate: a baseline saved, then the same module compared with it.
  mkdir -p bench
  "$nicpolicy_bin" bench --policy "$site_target/wasm32-unknown-unknown/release/dmz_guard.wasm" cases/ \
    --iterations 1 --save bench/baseline.json >/dev/null
  "$nicpolicy_bin" bench --policy "$site_target/wasm32-unknown-unknown/release/dmz_guard.wasm" cases/ \
    --iterations 1 --compare bench/baseline.json --threshold 10 >/dev/null
  # Its backstop, through the host: CAPVCD's rules with its settings, and its own rule named
  # as the webhook's.
  printf 'apiVersion: nicpolicy.io/v1alpha1\nkind: ServeConfig\npolicies:\n  VCDMachine:\n    - path: %s\n      settings: {capvcd: {maxNics: 6}}\n' \
    "$site_target/wasm32-unknown-unknown/release/dmz_guard.wasm" >serve.yaml
  "$nicpolicy_bin" export backstop --config serve.yaml >backstop.yaml
  grep -q "VCDMachine.0.maxNics: '6'" backstop.yaml
  grep -q "(dmz-guard): control-plane machines on controlPlaneForbidden" backstop.yaml
)
rm -rf "$new_dir"

# The guest network config of the worked example, converted by Debian's cloud-init to netplan
# and systemd-networkd and checked: one default route, on the primary NIC (docs/plan-to-vm.md).
phase "the guest network config (cloud-init)"
NICPOLICY_BIN="$nicpolicy" tests/guest/run.sh

# The release image without a container engine (config/image/build.sh: pinned Debian packages,
# umoci), pushed with skopeo to a loopback docker-registry, pulled back and run in its own root
# as the pod's user, with the Deployment's module cache. It packs the binary `cargo test` built
# (IMAGE_BINARY): what is tested is the image's making, and a release build of its own would be
# the run's longest single step on a cold machine (docs/benchmarks.md, "CI time"). A release runs
# config/image/build.sh without --binary.
phase "the image"
IMAGE_BINARY="$nicpolicy" tests/image/run.sh

phase "cosign signatures"
go_tools
NICPOLICY_BIN="$nicpolicy" tests/cosign/run.sh

# End to end: nicpolicy serve registered with a real kube-apiserver and etcd, built from their Go
# modules the first time (docs/deploy.md#end-to-end-tests) and reused after.
phase "end to end (kube-apiserver, Cluster API)"
tests/e2e/run.sh

# The playground page in headless Chromium (Debian's `chromium`; playwright-core never downloads a
# browser), served by the binary `cargo test` built and checked against its decisions.
# Screenshots: target/playground-screenshots/.
phase "the playground in Chromium"
PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --prefix tests/playground --no-audit --no-fund
NICPOLICY_BIN="$nicpolicy" node --test --test-concurrency=1 tests/playground/browser.test.mjs

# The Kubewarden builds through a waPC host built like policy-server (its own Cargo workspace:
# the Wasmtime features of wasmtime-provider stay out of the host's build), every case suite
# compared with nicpolicy's host.
phase "the Kubewarden builds (waPC host)"
(cd tests/kubewarden && cargo test)
