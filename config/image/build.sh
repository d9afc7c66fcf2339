#!/usr/bin/env bash
# Builds the nicpolicy container image without a container engine: the release binary
# (`cargo build --release --locked`, built-in policies through wasm-opt), a root filesystem
# made of the pinned Debian packages in packages.lock (the C library, libgcc and the CA
# bundle: everything the binary links, checked with readelf), written as an OCI image layout by
# Debian's `umoci`: user 65532, entrypoint /usr/local/bin/nicpolicy, OCI labels, every
# timestamp set to the last commit's time, so the same tree and packages give the same digest.
#
#   config/image/build.sh                 writes target/image/oci (tag: the crate's version)
#   config/image/build.sh --out DIR       the OCI layout goes to DIR instead
#   config/image/build.sh --binary PATH   packs an already built binary (no cargo build)
#   config/image/build.sh --update-lock   pins the packages' current versions in packages.lock
#
# Then copy it anywhere with skopeo, for example:
#   skopeo copy oci:target/image/oci:0.1.0 docker://registry.example.net/platform/nicpolicy:0.1.0
# docs/deploy.md ("The image") describes it; tests/image/run.sh builds, pushes and runs it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"

out="$root/target/image/oci"
binary=""
update_lock=false
while (($#)); do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --binary) binary=$2; shift 2 ;;
    --update-lock) update_lock=true; shift ;;
    -h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

for tool in umoci dpkg-deb apt-get readelf; do
  command -v "$tool" >/dev/null || {
    echo "build.sh: '$tool' not found (Debian: apt-get install umoci dpkg binutils)" >&2
    exit 1
  }
done

lock="$here/packages.lock"
packages=(libc6 libgcc-s1 ca-certificates)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

download() { # download NAME[=VERSION]...: into $work/debs, updating the package lists once if needed
  mkdir -p "$work/debs"
  (cd "$work/debs" && { apt-get download "$@" 2>/dev/null || { apt-get update -qq && apt-get download "$@"; }; }) >&2
}

if $update_lock; then
  download "${packages[@]}"
  {
    echo "# The Debian packages of the nicpolicy image's root filesystem: name, version, sha256 of"
    echo "# the .deb. config/image/build.sh --update-lock writes this file."
    for name in "${packages[@]}"; do
      deb=$(ls "$work/debs/${name}"_*.deb)
      echo "$name $(dpkg-deb -f "$deb" Version) $(sha256sum "$deb" | cut -d' ' -f1)"
    done
  } >"$lock"
  echo "build.sh: pinned in $lock:"
  grep -v '^#' "$lock"
  exit 0
fi

# The workspace's version (host/Cargo.toml inherits it).
version=$(awk -F'"' '/^version *=/ { print $2; exit }' Cargo.toml)
revision=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
# Reproducible: every timestamp is the last commit's (0 outside a git clone).
epoch=$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)

# 1. The binary.
if [[ -z "$binary" ]]; then
  wasm_opt=$(command -v wasm-opt) || {
    echo "build.sh: wasm-opt not found: the image's built-in policies go through it (Debian: apt-get install binaryen)" >&2
    exit 1
  }
  echo "image: cargo build --release --locked -p nicpolicy" >&2
  WASM_OPT="$wasm_opt" cargo build --release --locked -p nicpolicy >&2
  binary="${CARGO_TARGET_DIR:-$root/target}/release/nicpolicy"
fi
[[ -x "$binary" ]] || { echo "build.sh: $binary is not an executable" >&2; exit 1; }

# 2. It links the C library and libgcc only: what the packages below provide.
allowed="libc.so.6 libm.so.6 libgcc_s.so.1 ld-linux-x86-64.so.2"
for needed in $(readelf -d "$binary" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
  [[ " $allowed " == *" $needed "* ]] || {
    echo "build.sh: $binary needs $needed, which the image does not carry (it carries: $allowed)" >&2
    exit 1
  }
done

# 3. The pinned packages, checked against their sha256.
specs=()
while read -r name pinned _; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  specs+=("$name=$pinned")
done <"$lock"
download "${specs[@]}" || {
  echo "build.sh: the pinned packages (${specs[*]}) cannot be downloaded; if Debian replaced them, pin the current ones: config/image/build.sh --update-lock" >&2
  exit 1
}
rootfs="$work/rootfs"
mkdir -p "$rootfs"
while read -r name pinned sha256; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  deb=$(ls "$work/debs/${name}_"*.deb)
  echo "$sha256  $deb" | sha256sum --check --quiet || {
    echo "build.sh: $deb does not have the sha256 packages.lock pins for $name $pinned" >&2
    exit 1
  }
  dpkg-deb -x "$deb" "$rootfs"
done <"$lock"

# 4. The root filesystem: what the packages' maintainer scripts would have done (the CA bundle),
# the user, the binary; documentation other than the licences removed.
mkdir -p "$rootfs/etc/ssl/certs" "$rootfs/usr/local/bin" "$rootfs/tmp"
find "$rootfs/usr/share/ca-certificates" -name '*.crt' | LC_ALL=C sort | xargs cat \
  >"$rootfs/etc/ssl/certs/ca-certificates.crt"
rm -rf "$rootfs/usr/sbin/update-ca-certificates" "$rootfs/usr/share/man" "$rootfs/usr/share/lintian" \
  "$rootfs/usr/share/locale"
find "$rootfs/usr/share/doc" -type f ! -name copyright -delete
chmod 1777 "$rootfs/tmp"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' \
  >"$rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
install -m 0755 "$binary" "$rootfs/usr/local/bin/nicpolicy"
chown -R 0:0 "$rootfs"
find "$rootfs" -exec touch -h -d "@$epoch" {} +

# 5. The OCI layout.
tag="$version"
rm -rf "$out"
mkdir -p "$(dirname "$out")"
umoci init --layout "$out"
umoci new --image "$out:$tag"
umoci insert --image "$out:$tag" --history.created "$created" --history.author nicpolicy \
  --history.created_by "config/image/build.sh (${specs[*]}, nicpolicy $version)" "$rootfs" /
labels=(
  "org.opencontainers.image.title=nicpolicy"
  "org.opencontainers.image.description=Network defaulting and validation for CAPVCD machines, as WebAssembly policies"
  "org.opencontainers.image.version=$version"
  "org.opencontainers.image.revision=$revision"
  "org.opencontainers.image.licenses=Apache-2.0"
  "org.opencontainers.image.created=$created"
)
config_args=(--no-history --image "$out:$tag" --created "$created" --os linux --architecture amd64
  --config.user 65532:65532 --config.entrypoint /usr/local/bin/nicpolicy --config.workingdir /
  --config.env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt)
for label in "${labels[@]}"; do
  config_args+=(--config.label "$label" --manifest.annotation "$label")
done
umoci config "${config_args[@]}"
umoci gc --layout "$out"

manifest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' "$out/index.json")
echo "image: $out:$tag ($manifest, $(du -sh "$out" | cut -f1)); packages: ${specs[*]}" >&2
echo "$out:$tag@$manifest"
