#!/usr/bin/env bash
# Builds the CAPVCD policy the ways the `policy` profile was chosen from (opt-level s, z, 3;
# with and without wasm-opt -Os) and runs the interleaved `changes` benchmark on all of them,
# next to the host's memory-reset settings. Arguments go to the benchmark (--rounds N --batch N).
set -euo pipefail
cd "$(dirname "$0")/../.."

out="$PWD/target/bench-variants"
mkdir -p "$out"
features=(--enable-bulk-memory --enable-sign-ext --enable-nontrapping-float-to-int
          --enable-mutable-globals --enable-multivalue --enable-reference-types)
variants=()
for level in s z 3; do
  echo "building the CAPVCD policy with opt-level ${level}" >&2
  CARGO_PROFILE_POLICY_OPT_LEVEL="$level" cargo build --quiet -p nicpolicy-capvcd \
    --profile policy --target wasm32-unknown-unknown --target-dir "$out/opt-$level"
  built="$out/opt-$level/wasm32-unknown-unknown/policy/nicpolicy_capvcd.wasm"
  cp "$built" "$out/opt-$level.wasm"
  variants+=("opt-level ${level}=$out/opt-$level.wasm")
  if command -v wasm-opt >/dev/null; then
    wasm-opt -Os "${features[@]}" "$built" -o "$out/opt-$level-wasm-opt-Os.wasm"
    variants+=("opt-level ${level} + wasm-opt -Os=$out/opt-$level-wasm-opt-Os.wasm")
  fi
done
NICPOLICY_BENCH_VARIANTS="$(IFS=,; echo "${variants[*]}")" \
  cargo bench -p nicpolicy-tests --bench changes -- "$@"
