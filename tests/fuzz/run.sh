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

# The host embeds the built-in policies, each as an ABI v1 module and, for crates with a
# `kubewarden` feature, as a Kubewarden one. Build both with the workspace's pinned toolchain
# (which has the wasm32 target) into one directory, so the nightly build only reads them.
cd "$root"
packages=()
kubewarden=()
for manifest in policies/*/Cargo.toml; do
    name="$(sed -n 's/^name = "\(.*\)"$/\1/p' "$manifest" | head -n 1)"
    packages+=(--package "$name")
    if grep -q '^kubewarden *=' "$manifest"; then
        kubewarden+=(--package "$name" --features "$name/kubewarden")
    fi
done
cargo build --quiet --profile policy --target wasm32-unknown-unknown \
    --target-dir "$target_dir/wasm-policies" "${packages[@]}"
modules="$target_dir/policy-modules"
mkdir -p "$modules"
cp "$target_dir"/wasm-policies/wasm32-unknown-unknown/policy/*.wasm "$modules/"
if [ "${#kubewarden[@]}" -gt 0 ]; then
    cargo build --quiet --profile policy --target wasm32-unknown-unknown \
        --target-dir "$target_dir/wasm-kubewarden" "${kubewarden[@]}"
    for module in "$target_dir"/wasm-kubewarden/wasm32-unknown-unknown/policy/*.wasm; do
        cp "$module" "$modules/$(basename "$module" .wasm).kubewarden.wasm"
    done
fi
export NICPOLICY_POLICY_DIR="$modules"
# The playground page is built through wasm-bindgen for wasm32, which the nightly toolchain may
# lack: take the page of the workspace's own build (built now if there is none).
page() {
    ls -td "$root"/target/*/build/nicpolicy-*/out/playground 2>/dev/null \
        | while read -r dir; do [ -f "$dir/index.html" ] && echo "$dir" && break; done
}
if [ -z "$(page)" ]; then
    cargo build --quiet --package nicpolicy
fi
NICPOLICY_PLAYGROUND_DIR="$(page)"
export NICPOLICY_PLAYGROUND_DIR

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
