#!/usr/bin/env bash
# Installs what the tests need and this machine lacks, so `./test.sh` passes on a fresh machine
# with only rustup, Go and Node.js: the pinned Rust toolchain and its wasm32 target, Debian's
# packages (Chromium for the playground's browser tests, Binaryen's wasm-opt, umoci, skopeo and
# docker-registry for the image and registry tests, cloud-init's Python modules, Go and Node.js
# where missing) and wasm-bindgen-cli at the version the crate pins. Each step says what it
# installs; nothing is installed twice. `./test.sh` runs it first; `.ci/run` through test.sh.
#
#   tests/setup.sh           install what is missing
#   tests/setup.sh --check   list what is missing, install nothing (exit 1 if anything is)
set -euo pipefail
cd "$(dirname "$0")/.."

check=false
[[ "${1:-}" == "--check" ]] && check=true
WASM_BINDGEN_VERSION=$(awk -F'"' '/^wasm-bindgen = / { sub("=", "", $2); print $2; exit }' Cargo.toml)

missing=()
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
command -v chromium >/dev/null || missing+=(chromium)
command -v wasm-opt >/dev/null || missing+=(binaryen)
command -v go >/dev/null || missing+=(golang-go)
command -v umoci >/dev/null || missing+=(umoci)
command -v skopeo >/dev/null || missing+=(skopeo)
command -v docker-registry >/dev/null || missing+=(docker-registry)
# Debian's Python modules that cloud-init's net-convert needs (tests/guest/run.sh extracts
# cloud-init itself from its package and runs it on /usr/bin/python3).
/usr/bin/python3 -c 'import yaml, requests, configobj, jinja2, jsonschema, jsonpatch, netifaces, oauthlib, serial' 2>/dev/null ||
  missing+=(python3-yaml python3-requests python3-configobj python3-jinja2 python3-jsonschema
    python3-jsonpatch python3-netifaces python3-oauthlib python3-serial)
wasm_target=true
rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown || wasm_target=false
bindgen=true
wasm-bindgen --version 2>/dev/null | grep -q " ${WASM_BINDGEN_VERSION}$" || bindgen=false

if $check; then
  status=0
  ((${#missing[@]})) && { echo "missing Debian packages: ${missing[*]}"; status=1; }
  $wasm_target || { echo "missing: the wasm32-unknown-unknown Rust target"; status=1; }
  $bindgen || { echo "missing: wasm-bindgen-cli ${WASM_BINDGEN_VERSION}"; status=1; }
  ((status == 0)) && echo "nothing missing"
  exit "$status"
fi

# The toolchain, components and target pinned in rust-toolchain.toml.
rustup toolchain install
$wasm_target || rustup target add wasm32-unknown-unknown
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo=()
  if ((EUID != 0)); then
    command -v sudo >/dev/null || { echo "setup: run as root, or install: apt-get install ${missing[*]}" >&2; exit 1; }
    sudo=(sudo)
  fi
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}"
fi
if ! $bindgen; then
  echo "setup: installing wasm-bindgen-cli ${WASM_BINDGEN_VERSION} (one time, a few minutes)"
  cargo install wasm-bindgen-cli --version "=${WASM_BINDGEN_VERSION}"
fi
