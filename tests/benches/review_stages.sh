#!/usr/bin/env bash
# Builds the CAPVCD policy with the plugin's `stage-marks` feature (the guest logs a mark after
# decoding the request and after its rules), then runs the `review_stages` benchmark with it
# beside the built-in policy, so the guest's decode, rules and encode are timed apart. Arguments
# go to the benchmark (--rounds N --batch N --evict KB).
set -euo pipefail
cd "$(dirname "$0")/../.."

out="$PWD/target/bench-variants/stage-marks"
echo "building the CAPVCD policy with stage marks" >&2
cargo build --quiet -p nicpolicy-capvcd --features stage-marks \
  --profile policy --target wasm32-unknown-unknown --target-dir "$out"
wasm="$out/wasm32-unknown-unknown/policy/nicpolicy_capvcd.wasm"
if command -v wasm-opt >/dev/null; then
  # As host/build.rs treats the built-in policy.
  wasm-opt -Os --enable-bulk-memory --enable-sign-ext --enable-nontrapping-float-to-int \
    --enable-mutable-globals --enable-multivalue --enable-reference-types \
    "$wasm" -o "$out/nicpolicy_capvcd-stage-marks.wasm"
  wasm="$out/nicpolicy_capvcd-stage-marks.wasm"
fi
NICPOLICY_BENCH_STAGE_WASM="$wasm" cargo bench -p nicpolicy-tests --bench review_stages -- "$@"
