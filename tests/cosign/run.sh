#!/usr/bin/env bash
# Checks that nicpolicy's signatures and cosign's are one format, against cosign itself: cosign
# (pinned in go.mod beside this script, built from the Go module proxy) and nicpolicy sign and
# verify each other's signatures of a module in a loopback registry (Debian's docker-registry),
# and each opens the other's encrypted private key. No transparency log: both are offline.
#
#   NICPOLICY_BIN=target/debug/nicpolicy tests/cosign/run.sh
#
# cosign is built once into ${XDG_CACHE_HOME:-~/.cache}/nicpolicy-cosign/<version>-<hash>/ and
# reused while go.mod and go.sum stay the same (a few minutes the first time on 2 cores).
set -Eeuo pipefail
here=$(cd "$(dirname "$0")" && pwd)
trap 'echo "tests/cosign/run.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

version=$(awk '$1 == "require" && $2 == "github.com/sigstore/cosign/v2" { print $3; exit }' "$here/go.mod")
hash=$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-12)
bin_dir="${XDG_CACHE_HOME:-$HOME/.cache}/nicpolicy-cosign/${version}-${hash}"
cosign="$bin_dir/cosign"
mkdir -p "$bin_dir"
# One build at a time (.ci/run and test.sh build it in the background while cargo builds): a
# second waits here, then finds it built.
exec 9>"$bin_dir/.build.lock"
flock 9
if [[ ! -x "$cosign" ]]; then
  start=$SECONDS
  echo "cosign: building ${version} ($(go env GOVERSION))..." >&2
  (cd "$here" && go build -buildvcs=false -o "$cosign.partial" github.com/sigstore/cosign/v2/cmd/cosign)
  mv "$cosign.partial" "$cosign"
  echo "cosign: built in $((SECONDS - start)) s" >&2
fi
exec 9>&-
# --build-only: build (or find) cosign and stop.
[[ "${1:-}" == "--build-only" ]] && exit 0
nicpolicy=$(cd "$(dirname "${NICPOLICY_BIN:-$here/../../target/debug/nicpolicy}")" && pwd)/$(basename "${NICPOLICY_BIN:-nicpolicy}")

source "$here/../lib/registry.sh"
scratch_dir
start_registry "$work"
port=$registry_port

cd "$work"
export DOCKER_CONFIG="$work/docker" NICPOLICY_CACHE_DIR="$work/cache"
host="127.0.0.1:$port"
"$nicpolicy" export capvcd -o capvcd.wasm 2>/dev/null
ref=$("$nicpolicy" push capvcd.wasm "$host/platform/capvcd:1.0.0" --plain-http 2>/dev/null)
cosign_verify() {
  "$cosign" verify --key "$1" --insecure-ignore-tlog --allow-http-registry "$ref" >/dev/null 2>"$work/cosign-verify.log"
}
fail() {
  echo "tests/cosign/run.sh: $*" >&2
  exit 1
}

# Key pairs of each tool.
COSIGN_PASSWORD=cosign-pw "$cosign" generate-key-pair --output-key-prefix by-cosign >/dev/null 2>&1
COSIGN_PASSWORD=nicpolicy-pw "$nicpolicy" generate-key-pair --output-key-prefix by-nicpolicy 2>/dev/null

# Unsigned: neither accepts it.
"$nicpolicy" verify "$ref" --key by-cosign.pub --plain-http 2>/dev/null && fail "nicpolicy verified an unsigned module"
cosign_verify by-nicpolicy.pub && fail "cosign verified an unsigned module"

# cosign signs with its key; nicpolicy verifies, and refuses another key.
COSIGN_PASSWORD=cosign-pw "$cosign" sign --key by-cosign.key --tlog-upload=false \
  --allow-http-registry -y "$ref" >/dev/null 2>&1
"$nicpolicy" verify "$ref" --key by-cosign.pub --plain-http >/dev/null ||
  fail "nicpolicy does not verify cosign's signature"
"$nicpolicy" verify "$ref" --key by-nicpolicy.pub --plain-http 2>/dev/null &&
  fail "nicpolicy verified cosign's signature with another key"

# nicpolicy signs with its key; cosign verifies.
COSIGN_PASSWORD=nicpolicy-pw "$nicpolicy" sign "$ref" --key by-nicpolicy.key --plain-http >/dev/null 2>&1
cosign_verify by-nicpolicy.pub || {
  cat "$work/cosign-verify.log" >&2
  fail "cosign does not verify nicpolicy's signature"
}
# Both signatures sit in one signature image: each tool still verifies the other's.
cosign_verify by-cosign.pub || fail "cosign lost its own signature when nicpolicy added one"
"$nicpolicy" verify "$ref" --key by-cosign.pub --plain-http >/dev/null ||
  fail "nicpolicy lost cosign's signature"

# Each opens the other's encrypted private key.
# (another module, so that cosign_verify checks only the signatures made here)
signatures_ref=$ref
ref=$("$nicpolicy" push capvcd.wasm "$host/platform/capvcd-keys:1.0.0" --plain-http 2>/dev/null)
COSIGN_PASSWORD=cosign-pw "$nicpolicy" sign "$ref" --key by-cosign.key --plain-http >/dev/null 2>&1 ||
  fail "nicpolicy cannot sign with cosign's private key"
cosign_verify by-cosign.pub || fail "cosign does not verify what nicpolicy signed with cosign's key"
COSIGN_PASSWORD=nicpolicy-pw "$cosign" sign --key by-nicpolicy.key --tlog-upload=false \
  --allow-http-registry -y "$ref" >/dev/null 2>&1 || fail "cosign cannot sign with nicpolicy's private key"
"$nicpolicy" verify "$ref" --key by-nicpolicy.pub --plain-http >/dev/null ||
  fail "nicpolicy does not verify what cosign signed with nicpolicy's key"

echo "cosign ${version} and nicpolicy: each verifies the other's signatures (${signatures_ref%%@*}, ${ref%%@*}) and opens the other's keys"
