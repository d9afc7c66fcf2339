#!/usr/bin/env bash
# Builds the Kubernetes control plane nicpolicy's end-to-end tests run against: kube-apiserver
# and kubectl from k8s.io/kubernetes and an etcd server from go.etcd.io/etcd/server/v3, at the
# releases pinned in go.mod beside this script, through the Go module proxy; and helm from
# helm.sh/helm/v4, pinned in ../helm/go.mod (a module of its own), for the chart's tests; and
# Cluster API's core manager, pinned in ../capi/go.mod, with Cluster API's and CAPVCD v1.3.2's
# CRDs (and CAPVCD's templates) and OpenReports' report CRDs taken from their modules into
# <dir>/crds/.
#
#   tests/e2e/kube/build.sh              build (or reuse) and print the binary directory last
#   tests/e2e/kube/build.sh --print-dir  print the binary directory only, build nothing
#
# Binaries go to ${XDG_CACHE_HOME:-~/.cache}/nicpolicy-e2e/<versions>-<hash of the Go files>/,
# outside the clone, and are reused while go.mod, go.sum and etcd/main.go stay the same. The
# first build downloads about 400 MB of modules and compiles for 10-15 minutes on 2 cores
# (docs/deploy.md#end-to-end-tests); later runs take a second.
# -E: the ERR trap that names the failed step also fires inside functions.
set -Eeuo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"

required() { awk -v m="$1" '$1 == m { print $2; exit }' go.mod; }
k8s_version=$(required k8s.io/kubernetes)
etcd_version=$(required go.etcd.io/etcd/server/v3)
if [[ -z "$k8s_version" || -z "$etcd_version" ]]; then
  echo "build.sh: go.mod does not require k8s.io/kubernetes and go.etcd.io/etcd/server/v3" >&2
  exit 1
fi
hash=$(cat go.mod go.sum etcd/main.go | sha256sum | cut -c1-12)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/nicpolicy-e2e"
dir="$cache/kubernetes-${k8s_version}-etcd-${etcd_version}-${hash}"

if [[ "${1:-}" == "--print-dir" ]]; then
  echo "$dir"
  exit 0
fi

# One build at a time (.ci/run and test.sh start one in the background while cargo builds): a
# second waits here, then finds the binaries built.
mkdir -p "$cache"
exec 9>"$cache/.build.lock"
flock 9

binaries=(kube-apiserver kubectl etcd)
complete() {
  [[ -f "$dir/.complete" ]] || return 1
  for bin in "${binaries[@]}"; do [[ -x "$dir/$bin" ]] || return 1; done
}
helm_dir="$here/../helm"
helm_version=$(awk '$1 == "require" && $2 == "helm.sh/helm/v4" { print $3; exit }' "$helm_dir/go.mod")
helm_stamp=".helm-${helm_version}-$(cat "$helm_dir/go.mod" "$helm_dir/go.sum" | sha256sum | cut -c1-12)"
# helm is built into the same directory, on its own stamp: a new helm does not rebuild the
# control plane.
build_helm() {
  [[ -f "$dir/$helm_stamp" && -x "$dir/helm" ]] && return 0
  command -v go >/dev/null || { echo "build.sh: no 'go' command (.ci/run installs golang-go)" >&2; return 1; }
  local start=$SECONDS
  echo "e2e binaries: building helm ${helm_version} ($(go env GOVERSION))..." >&2
  (cd "$helm_dir" && go mod download && go build -buildvcs=false \
    -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=${helm_version}" \
    -o "$dir/helm.partial" helm.sh/helm/v4/cmd/helm) >&2
  mv "$dir/helm.partial" "$dir/helm"
  rm -f "$dir"/.helm-*
  touch "$dir/$helm_stamp"
  echo "e2e binaries: helm ${helm_version}: done in $((SECONDS - start)) s" >&2
}
# Cluster API's core manager (the module root is its main package), pinned in ../capi/go.mod,
# and the CRDs the suites install, from the Go modules through the proxy (nothing is copied
# into the repository): CAPVCD's last release (its CRDs serve v1beta1 and v1beta2; its
# templates/ are rendered by the templates suite) and Cluster API's core, kubeadm bootstrap and
# kubeadm control-plane CRDs of the same module as the manager. CAPVCD's own manager cannot be
# built here: its pinned cloud-provider-for-cloud-director pseudo-version is not served by
# the module proxy.
capi_dir="$here/../capi"
capi_version=$(awk '$1 == "require" && $2 == "sigs.k8s.io/cluster-api" { print $3; exit }' "$capi_dir/go.mod")
capvcd_module=github.com/vmware/cluster-api-provider-cloud-director
capvcd_version=v1.3.2
openreports_module=github.com/openreports/reports-api
openreports_version=v0.2.1
capi_stamp=".capi-${capi_version}-capvcd-${capvcd_version}-$(cat "$capi_dir/go.mod" "$capi_dir/go.sum" "$here/build.sh" | sha256sum | cut -c1-12)"
build_capi() {
  [[ -f "$dir/$capi_stamp" && -x "$dir/cluster-api-manager" ]] && return 0
  command -v go >/dev/null || { echo "build.sh: no 'go' command (.ci/run installs golang-go)" >&2; return 1; }
  local start=$SECONDS module_dir capvcd_dir openreports_dir
  echo "e2e binaries: building Cluster API's manager ${capi_version} ($(go env GOVERSION))..." >&2
  (cd "$capi_dir" && go mod download && go build -buildvcs=false -ldflags "-s -w" \
    -o "$dir/cluster-api-manager.partial" sigs.k8s.io/cluster-api) >&2
  module_dir=$(cd "$capi_dir" && go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api)
  capvcd_dir=$(cd "$capi_dir" && go mod download -json "${capvcd_module}@${capvcd_version}" |
    /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
  openreports_dir=$(cd "$capi_dir" && go mod download -json "${openreports_module}@${openreports_version}" |
    /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
  rm -rf "$dir/crds.partial"
  mkdir -p "$dir/crds.partial/cluster-api" "$dir/crds.partial/capvcd" "$dir/crds.partial/capvcd-templates" \
    "$dir/crds.partial/openreports"
  cp "$module_dir"/config/crd/bases/*.yaml "$module_dir"/bootstrap/kubeadm/config/crd/bases/*.yaml \
    "$module_dir"/controlplane/kubeadm/config/crd/bases/*.yaml "$dir/crds.partial/cluster-api/"
  cp "$capvcd_dir"/config/crd/bases/*.yaml "$dir/crds.partial/capvcd/"
  cp "$capvcd_dir"/templates/*.yaml "$dir/crds.partial/capvcd-templates/"
  cp "$openreports_dir"/config/crd/*.yaml "$dir/crds.partial/openreports/"
  echo "${capvcd_module}@${capvcd_version} sigs.k8s.io/cluster-api@${capi_version} ${openreports_module}@${openreports_version}" >"$dir/crds.partial/SOURCES"
  chmod -R u+w "$dir/crds.partial"
  rm -rf "$dir/crds"
  mv "$dir/crds.partial" "$dir/crds"
  mv "$dir/cluster-api-manager.partial" "$dir/cluster-api-manager"
  rm -f "$dir"/.capi-*
  touch "$dir/$capi_stamp"
  echo "e2e binaries: Cluster API ${capi_version}, CAPVCD ${capvcd_version} and OpenReports ${openreports_version} CRDs: done in $((SECONDS - start)) s" >&2
}
if complete; then
  echo "e2e binaries: reusing kube-apiserver ${k8s_version}, kubectl ${k8s_version}, etcd ${etcd_version} in $dir" >&2
  build_helm
  build_capi
  echo "$dir"
  exit 0
fi

if ! command -v go >/dev/null; then
  echo "build.sh: failed step: find Go: no 'go' command (.ci/run installs golang-go)" >&2
  exit 1
fi

step_name=""
staging=""
on_error() {
  echo "build.sh: failed step: ${step_name} (output above)" >&2
  [[ -n "$staging" ]] && rm -rf "$staging"
}
trap on_error ERR

# Runs one named step, timing it.
step() {
  step_name=$1
  shift
  local start=$SECONDS
  echo "e2e binaries: ${step_name}..." >&2
  "$@" >&2
  echo "e2e binaries: ${step_name}: done in $((SECONDS - start)) s" >&2
}

minor=${k8s_version#v1.}
minor=${minor%%.*}
# What `kube-apiserver --version` and kubectl's version skew check report; the module build
# otherwise says v0.0.0-master.
version_flags="-X k8s.io/component-base/version.gitVersion=${k8s_version}"
version_flags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor}"
version_flags+=" -X k8s.io/client-go/pkg/version.gitVersion=${k8s_version}"
version_flags+=" -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=${minor}"
ldflags="-s -w ${version_flags}"

started=$SECONDS
staging="${dir}.partial.$$"
rm -rf "$staging"
mkdir -p "$staging"
echo "e2e binaries: building kube-apiserver and kubectl ${k8s_version}, etcd ${etcd_version} into $dir ($(go env GOVERSION), $(nproc) cores)" >&2
step "download modules" go mod download
# No VCS stamp: the clone's git metadata says nothing about these binaries (and git refuses a
# clone owned by another user).
step "build etcd ${etcd_version}" go build -buildvcs=false -ldflags "-s -w" -o "$staging/etcd" ./etcd
step "build kube-apiserver ${k8s_version}" go build -buildvcs=false -ldflags "$ldflags" -o "$staging/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
step "build kubectl ${k8s_version}" go build -buildvcs=false -ldflags "$ldflags" -o "$staging/kubectl" k8s.io/kubernetes/cmd/kubectl
step_name="install into $dir"
touch "$staging/.complete"
rm -rf "$dir"
mv "$staging" "$dir"
trap - ERR
build_helm
build_capi
echo "e2e binaries: built in $((SECONDS - started)) s:" >&2
(cd "$dir" && du -h "${binaries[@]}" helm cluster-api-manager) >&2
echo "$dir"
