#!/usr/bin/env bash
# Runs the end-to-end suites: nicpolicy serve and nicpolicy controller against a real
# kube-apiserver and etcd.
#
#   tests/e2e/run.sh                 every suite
#   tests/e2e/run.sh admission       one suite (admission, lifecycle, restarts, deploy, controller,
#                                    registry, main_crds, capi, templates, backstop)
#   tests/e2e/run.sh admission -- invalid    one suite, tests whose name contains "invalid"
#
# Builds (or reuses) kube-apiserver, kubectl and etcd with tests/e2e/kube/build.sh, and the
# nicpolicy binary with the same cargo command as the unit tests (so nothing is rebuilt after
# them), then runs the suites with their output shown: each kubectl command and what it printed.
set -euo pipefail
cd "$(dirname "$0")/../.."

NICPOLICY_E2E_BIN_DIR=$(tests/e2e/kube/build.sh)
export NICPOLICY_E2E_BIN_DIR

suites=()
while (($#)) && [[ "$1" != "--" ]]; do
  suites+=(--test "$1")
  shift
done
if ((${#suites[@]} == 0)); then
  suites=(--test admission --test lifecycle --test restarts --test deploy --test controller --test registry
    --test main_crds --test capi --test templates --test backstop)
fi
[[ "${1:-}" == "--" ]] && shift

# target/debug/nicpolicy, built as `cargo test --workspace` builds it.
cargo test --workspace --no-run --quiet
# One suite at a time (each starts its own API server); within a suite the tests share one.
cargo test --workspace --no-fail-fast --features nicpolicy-e2e/e2e "${suites[@]}" -- --nocapture --test-threads=1 "$@"
