#!/usr/bin/env bash
# How long `nicpolicy eval` takes with its policy from a registry, beside the same module from a
# file: read from the store, pulled, with and without signature verification (docs/benchmarks.md,
# "Policies from a registry"). Medians of 15 runs of the release binary against Debian's
# docker-registry on loopback.
#
#   cargo build --release -p nicpolicy && tests/benches/registry_load.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
nicpolicy=$PWD/${CARGO_TARGET_DIR:-target}/release/nicpolicy
source tests/lib/registry.sh
scratch_dir
start_registry "$work"
port=$registry_port
export DOCKER_CONFIG="$work/docker" NICPOLICY_CACHE_DIR="$work/cache" COSIGN_PASSWORD=bench
"$nicpolicy" export capvcd -o "$work/capvcd.wasm" 2>/dev/null
ref=$("$nicpolicy" push "$work/capvcd.wasm" "127.0.0.1:$port/platform/capvcd:1" --plain-http 2>/dev/null)
"$nicpolicy" generate-key-pair --output-key-prefix "$work/site" 2>/dev/null
"$nicpolicy" sign "$ref" --key "$work/site.key" --plain-http >/dev/null 2>&1

python3 - "$nicpolicy" "$ref" "$work" <<'PY'
import statistics, subprocess, sys, time
nicpolicy, ref, work = sys.argv[1:]
base = [nicpolicy, "eval", "--cluster", "examples/cluster.yaml", "--machine", "examples/machine.yaml"]
oci = ["--policy", f"oci://{ref}", "--plain-http"]
verify = ["--verify-key", f"{work}/site.pub"]
def median_ms(args, runs=15):
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(base + args, capture_output=True)
        times.append((time.perf_counter() - start) * 1e3)
        if done.returncode not in (0, 1):
            sys.exit(done.stderr.decode())
    return statistics.median(times)
# Fill the compiled-module cache and the store first.
subprocess.run(base + oci, capture_output=True)
rows = [
    ("file, compiled-module cache", ["--policy", f"{work}/capvcd.wasm"]),
    ("oci by digest, from the store", oci),
    ("oci by digest, from the store, verified", oci + verify),
    ("file, compiled (--no-cache)", ["--policy", f"{work}/capvcd.wasm", "--no-cache"]),
    ("oci by digest, pulled and compiled (--no-cache)", oci + ["--no-cache"]),
    ("oci by digest, pulled, verified, compiled (--no-cache)", oci + verify + ["--no-cache"]),
]
print(f"{'eval with the policy':<56} {'median ms':>9}")
for label, args in rows:
    print(f"{label:<56} {median_ms(args):>9.1f}")
PY
