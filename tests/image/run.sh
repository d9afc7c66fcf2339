#!/usr/bin/env bash
# The release image, built as a release is (config/image/build.sh: release binary, pinned Debian
# packages, umoci), pushed with skopeo to a registry started on 127.0.0.1 (Debian's
# docker-registry, the distribution v2 server), inspected there (digest, entrypoint, user,
# labels), pulled back, unpacked and run in its own root as the pod's user: the binary starts
# and evaluates the CAPVCD case suite with nothing from this machine's filesystem. A second
# build from the same binary gives the same digest.
#
#   tests/image/run.sh              (IMAGE_BINARY=PATH packs that binary instead of a release build)
set -euo pipefail
cd "$(dirname "$0")/../.."

for tool in umoci skopeo docker-registry chroot python3; do
  command -v "$tool" >/dev/null || {
    echo "image: '$tool' not found (.ci/run installs umoci, skopeo and docker-registry)" >&2
    exit 1
  }
done

source tests/lib/registry.sh
scratch_dir
fail() { echo "not ok - $*" >&2; exit 1; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }

build_args=()
[[ -n "${IMAGE_BINARY:-}" ]] && build_args=(--binary "$IMAGE_BINARY")
started=$SECONDS
built=$(config/image/build.sh "${build_args[@]}" --out "$work/oci")
echo "ok - built $built in $((SECONDS - started)) s"
layout_ref=${built%@*}
digest=${built##*@}
tag=${layout_ref##*:}

# Reproducible: the same binary and packages, the same digest.
binary="${IMAGE_BINARY:-${CARGO_TARGET_DIR:-target}/release/nicpolicy}"
again=$(config/image/build.sh --binary "$binary" --out "$work/oci-again" 2>/dev/null)
[[ "${again##*@}" == "$digest" ]] || fail "a second build gave ${again##*@}, not $digest"
echo "ok - a second build gives the same digest"

# A registry of its own on loopback.
start_registry "$work" || fail "the registry did not start"
port=$registry_port

remote="docker://127.0.0.1:$port/platform/nicpolicy:$tag"
skopeo copy --quiet --preserve-digests --dest-tls-verify=false "oci:$layout_ref" "$remote"
echo "ok - pushed to ${remote#docker://}"

inspect=$(skopeo inspect --tls-verify=false "$remote")
[[ "$(json 'd["Digest"]' <<<"$inspect")" == "$digest" ]] || fail "the registry serves $(json 'd["Digest"]' <<<"$inspect"), not $digest"
[[ "$(json 'd["Labels"]["org.opencontainers.image.version"]' <<<"$inspect")" == "$tag" ]] || fail "version label"
[[ "$(json 'd["Os"] + "/" + d["Architecture"]' <<<"$inspect")" == linux/amd64 ]] || fail "platform"
config=$(skopeo inspect --tls-verify=false --config "$remote")
[[ "$(json 'd["config"]["User"]' <<<"$config")" == 65532:65532 ]] || fail "user: $(json 'd["config"]["User"]' <<<"$config")"
[[ "$(json 'd["config"]["Entrypoint"]' <<<"$config")" == "['/usr/local/bin/nicpolicy']" ]] || fail "entrypoint"
echo "ok - the registry serves $digest: user 65532:65532, entrypoint /usr/local/bin/nicpolicy, version $tag"

# Pulled back by digest and run in its own root as the pod's user, with an empty environment.
skopeo copy --quiet --src-tls-verify=false "${remote%:*}@$digest" "oci:$work/pulled:$tag"
umoci unpack --image "$work/pulled:$tag" "$work/bundle" >/dev/null
rootfs="$work/bundle/rootfs"
# The case files and the fixtures they name, laid out as in the repository.
mkdir -p "$rootfs/tmp/tests/cases"
cp -r tests/cases/capvcd "$rootfs/tmp/tests/cases/"
cp -r tests/fixtures "$rootfs/tmp/tests/"
chmod -R a+rX "$rootfs/tmp/tests"
in_root() { env -i "$(command -v chroot)" --userspec=65532:65532 "$rootfs" /usr/local/bin/nicpolicy "$@"; }
version=$(in_root --version) || fail "nicpolicy --version in the image's root"
[[ "$version" == "nicpolicy $tag"* ]] || fail "--version said: $version"
in_root test --policy builtin:capvcd /tmp/tests/cases/capvcd >"$work/test.out" 2>&1 || {
  tail -40 "$work/test.out"
  fail "nicpolicy test in the image's root"
}
echo "ok - runs in its own root as 65532: $(head -1 <<<"$version"); $(tail -1 "$work/test.out")"

# The module cache in the pod: the webhook's Deployment (config/install.yaml) runs as 65532
# with NICPOLICY_CACHE_DIR under an emptyDir, which the kubelet makes root's with mode 0777.
# Started that way twice in the image's root, serve stores the compiled modules the first time
# and loads them from the cache the second.
read -r user group cache_env cache_mount < <(/usr/bin/python3 - <<'PY'
import yaml
docs = [d for d in yaml.safe_load_all(open("config/install.yaml")) if d]
pod = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "nicpolicy-webhook")["spec"]["template"]["spec"]
container = pod["containers"][0]
env = {e["name"]: e.get("value") for e in container["env"]}
mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "cache")
print(pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"], env["NICPOLICY_CACHE_DIR"], mount)
PY
)
mkdir -p "$rootfs/etc/nicpolicy" "$rootfs$cache_mount"
cp config/nicpolicy/nicpolicy.yaml config/nicpolicy/inventory.yaml examples/cluster.yaml "$rootfs/etc/nicpolicy/"
chmod 0777 "$rootfs$cache_mount"
serve_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$rootfs/proc"
# A container has /proc (serve compiles in a child process of its own binary, /proc/self/exe):
# a mount and PID namespace of its own gives the root one, gone when serve exits.
serve_in_pod() { # serve_in_pod LOG [CACHE_DIR]: starts serve as the Deployment does, waits for /readyz, stops it
  env -i "NICPOLICY_CACHE_DIR=${2:-$cache_env}" "$(command -v unshare)" --mount --pid --fork \
    --mount-proc="$rootfs/proc" --kill-child=SIGTERM \
    "$(command -v chroot)" --userspec="$user:$group" "$rootfs" \
    /usr/local/bin/nicpolicy serve --config=/etc/nicpolicy/nicpolicy.yaml --log-format=json \
    --listen "127.0.0.1:$serve_port" --clusters /etc/nicpolicy/cluster.yaml \
    --tls-self-signed --ca-bundle /tmp/nicpolicy-ca.crt >"$1" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do
    curl -fsSk "https://127.0.0.1:$serve_port/readyz" >/dev/null 2>&1 && break
    sleep 0.1
  done
  curl -fsSk "https://127.0.0.1:$serve_port/readyz" >/dev/null 2>&1 || {
    cat "$1"
    pkill -KILL -P "$pid"
    fail "serve did not get ready"
  }
  # unshare --fork ignores SIGTERM itself; serve, its child, is what the kubelet would stop.
  pkill -TERM -P "$pid"
  wait "$pid" || true
}
serve_in_pod "$work/serve-1.log"
serve_in_pod "$work/serve-2.log"
loaded() { grep '"policy loaded"' "$1" | python3 -c 'import json,sys; print(" ".join(sorted({json.loads(l)["fields"]["cache"] if "fields" in json.loads(l) else json.loads(l)["cache"] for l in sys.stdin})))'; }
first=$(loaded "$work/serve-1.log")
second=$(loaded "$work/serve-2.log")
# Both kinds serve the same module: the second load of the first start is a hit already.
[[ "$first" == "hit stored" || "$first" == stored ]] || {
  cat "$work/serve-1.log"
  fail "first start: cache $first, not stored"
}
[[ "$second" == hit ]] || { cat "$work/serve-2.log"; fail "second start: cache $second, not hit"; }
owner=$(stat -c '%u %a' "$rootfs$cache_env")
[[ "$owner" == "$user 700" ]] || fail "$cache_env is $owner, not $user 700"
echo "ok - the module cache works in the pod: stored on the first start, hit on the second ($cache_env: uid $user, mode 700)"
# The check can fail: the emptyDir itself (root's, 0777) is never trusted.
serve_in_pod "$work/serve-3.log" "$cache_mount"
third=$(loaded "$work/serve-3.log")
[[ "$third" == bypassed* ]] || { cat "$work/serve-3.log"; fail "the emptyDir itself: cache $third, not bypassed"; }
echo "ok - pointed at the emptyDir itself, the cache is bypassed: ${third:0:120}"
