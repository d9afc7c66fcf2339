#!/usr/bin/env bash
# Runs every fuzz target (or those named as arguments) for a bounded time each.
#
#   tests/fuzz/run.sh                         # every target, 60 s each
#   NICPOLICY_FUZZ_SECONDS=180 tests/fuzz/run.sh guest_output
#
# Needs a nightly toolchain and cargo-fuzz (`rustup toolchain install nightly`,
# `cargo install cargo-fuzz`). Builds into tests/fuzz/target. Exits non-zero when a target
# crashes; the input is then in tests/fuzz/artifacts/<target>/.
#
# Environment:
#   NICPOLICY_FUZZ_SECONDS    time per target (default 60)
#   NICPOLICY_FUZZ_SANITIZER  cargo-fuzz sanitizer: none (default), address, ...
#   NICPOLICY_FUZZ_TOOLCHAIN  toolchain for cargo-fuzz (default nightly)
#   NICPOLICY_FUZZ_ARGS       extra libFuzzer options, for example "-jobs=2 -workers=2"
set -euo pipefail

fuzz_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$fuzz_dir/../.." && pwd)"
seconds="${NICPOLICY_FUZZ_SECONDS:-60}"
sanitizer="${NICPOLICY_FUZZ_SANITIZER:-none}"
toolchain="${NICPOLICY_FUZZ_TOOLCHAIN:-nightly}"
target_dir="$fuzz_dir/target"

if ! cargo "+$toolchain" fuzz --version >/dev/null 2>&1; then
    echo "run.sh: needs cargo-fuzz on the $toolchain toolchain:" >&2
    echo "  rustup toolchain install $toolchain && cargo install cargo-fuzz" >&2
    exit 2
fi

# The host embeds the built-in policies. Build them with the workspace's pinned toolchain
# (which has the wasm32 target) so the nightly build only reads them.
cd "$root"
packages=()
for manifest in policies/*/Cargo.toml; do
    name="$(sed -n 's/^name = "\(.*\)"$/\1/p' "$manifest" | head -n 1)"
    packages+=(--package "$name")
done
cargo build --quiet --profile policy --target wasm32-unknown-unknown \
    --target-dir "$target_dir/wasm-policies" "${packages[@]}"
export NICPOLICY_POLICY_DIR="$target_dir/wasm-policies/wasm32-unknown-unknown/policy"

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo "+$toolchain" fuzz list --fuzz-dir "$fuzz_dir")
fi

failed=()
for target in "${targets[@]}"; do
    corpus="$fuzz_dir/corpus/$target"
    mkdir -p "$corpus" "$fuzz_dir/artifacts/$target"
    echo "== $target: ${seconds}s"
    # shellcheck disable=SC2086 # NICPOLICY_FUZZ_ARGS is a list of options
    if ! cargo "+$toolchain" fuzz run --fuzz-dir "$fuzz_dir" --target-dir "$target_dir" \
        --sanitizer "$sanitizer" "$target" "$corpus" "$fuzz_dir/seeds/$target" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 ${NICPOLICY_FUZZ_ARGS:-}; then
        failed+=("$target")
    fi
done

if [ "${#failed[@]}" -gt 0 ]; then
    echo "run.sh: crashed: ${failed[*]} (inputs in $fuzz_dir/artifacts/)" >&2
    exit 1
fi
echo "run.sh: no crash in ${targets[*]}"
