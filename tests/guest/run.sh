#!/usr/bin/env bash
# The guest network config nicpolicy renders, checked by the real tools: Debian's cloud-init
# (`cloud-init devel net-convert`) turns each rendered network-config into netplan and into
# systemd-networkd files, Debian's netplan generator turns that netplan into networkd files as
# the guest would, and check.py asserts on what they wrote: exactly one default route, on
# the primary NIC, the inventory's MTUs and routes, no routes or DNS taken from DHCP on other
# NICs.
#
#   tests/guest/run.sh        (NICPOLICY_BIN: the nicpolicy binary, default target/debug/nicpolicy)
#
# cloud-init and netplan are extracted from their Debian packages (apt-get download + dpkg-deb:
# neither runs a daemon here) into ${XDG_CACHE_HOME:-~/.cache}/nicpolicy-guest/ and reused; its Python modules
# come from Debian's packages (.ci/run installs them) and run on Debian's /usr/bin/python3.
set -euo pipefail
cd "$(dirname "$0")/../.."
here=tests/guest
nicpolicy="${NICPOLICY_BIN:-${CARGO_TARGET_DIR:-target}/debug/nicpolicy}"
python=/usr/bin/python3

cache="${XDG_CACHE_HOME:-$HOME/.cache}/nicpolicy-guest"
mkdir -p "$cache"
if ! compgen -G "$cache/cloud-init-*/usr/bin/cloud-init" >/dev/null; then
  download=$(mktemp -d)
  (cd "$download" && { apt-get download cloud-init 2>/dev/null || { apt-get update -qq && apt-get download cloud-init; }; })
  deb=$(ls "$download"/cloud-init_*.deb)
  version=$(dpkg-deb -f "$deb" Version)
  dpkg-deb -x "$deb" "$cache/cloud-init-$version"
  rm -rf "$download"
fi
root=$(compgen -G "$cache/cloud-init-*" | head -1)
echo "guest: cloud-init ${root##*/cloud-init-} (extracted in $root)"
# netplan's generator (netplan YAML to systemd-networkd), likewise extracted with its library.
if ! compgen -G "$cache/netplan-*/usr/libexec/netplan/generate" >/dev/null; then
  download=$(mktemp -d)
  (cd "$download" && { apt-get download netplan.io libnetplan0 2>/dev/null || { apt-get update -qq && apt-get download netplan.io libnetplan0; }; })
  version=$(dpkg-deb -f "$download"/netplan.io_*.deb Version)
  for deb in "$download"/*.deb; do dpkg-deb -x "$deb" "$cache/netplan-$version"; done
  rm -rf "$download"
fi
netplan=$(compgen -G "$cache/netplan-*" | head -1)
echo "guest: netplan ${netplan##*/netplan-} (extracted in $netplan)"
generate() { # generate NETPLAN_YAML ROOT
  mkdir -p "$2/etc/netplan"
  install -m 600 "$1" "$2/etc/netplan/50-cloud-init.yaml"
  LD_LIBRARY_PATH="$netplan/usr/lib/x86_64-linux-gnu" "$netplan/usr/libexec/netplan/generate" \
    --root-dir "$2" >"$2.log" 2>&1 || { cat "$2.log"; return 1; }
}
convert() { # convert INPUT OUTDIR FORMAT
  PYTHONPATH="$root/usr/lib/python3/dist-packages" "$python" "$root/usr/bin/cloud-init" \
    devel net-convert -p "$1" -k yaml -d "$2" -D debian -O "$3" >"$2.log" 2>&1 || { cat "$2.log"; return 1; }
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
# name | nicpolicy render network-config arguments | what check.py expects
while IFS='|' read -r name args expect; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  out="$work/$name"
  mkdir -p "$out"
  # shellcheck disable=SC2086 # the arguments are words of the table above
  "$nicpolicy" render network-config $args >"$out/network-config.yaml" 2>"$out/stderr"
  convert "$out/network-config.yaml" "$out/netplan" netplan
  convert "$out/network-config.yaml" "$out/networkd" networkd
  generate "$out/netplan/etc/netplan/50-cloud-init.yaml" "$out/netplan-generate"
  # shellcheck disable=SC2086
  if "$python" "$here/check.py" "$out" $expect; then
    echo "ok - $name"
    passed=$((passed + 1))
  else
    echo "not ok - $name (rendered: $out/network-config.yaml)"
    cat "$out/network-config.yaml"
    failed=$((failed + 1))
  fi
done <<'CASES'
# The worked example of docs/plan-to-vm.md: mgmt-net (primary), storage-net (MTU 9000, a route to
# the replication subnet), workload-net, every NIC from the pool.
three-networks|--cluster examples/cluster.yaml --machine examples/machine.yaml --inventory examples/inventory.yaml --nics examples/vm-network-connection-section.xml|--primary eth0 --gateway 10.10.0.1 --mtu eth1=9000 --route eth1=10.21.0.0/16 --static eth0=10.10.0.23/24 --static eth2=10.30.1.77/22 --dns eth0=10.10.0.10
# storage-net on DHCP (examples/settings.yaml) on a VM whose provisioner applied it (a custom
# build that applies the plan's modes): no default route and no DNS from its DHCP server.
dhcp-storage|--cluster examples/cluster.yaml --machine examples/machine.yaml --inventory examples/inventory.yaml --settings examples/settings.yaml --provisioner custom --provisioner-applies ipAllocationMode --nics tests/fixtures/vcd/vm-storage-dhcp.xml|--primary eth0 --gateway 10.10.0.1 --mtu eth1=9000 --route eth1=10.21.0.0/16 --dhcp-without-routes eth1
# The worked example built by Deckhouse's CAPVCD (every NIC DHCP): the primary takes its default
# route from DHCP, the others neither routes nor DNS from theirs.
deckhouse|--cluster examples/cluster.yaml --machine examples/machine.yaml --inventory examples/inventory.yaml --provisioner deckhouse --nics tests/fixtures/vcd/vm-deckhouse-leased.xml|--primary eth0 --dhcp-primary --mtu eth1=9000 --route eth1=10.21.0.0/16 --dhcp-without-routes eth1 --dhcp-without-routes eth2
CASES
echo "$passed passed, $failed failed"
((failed == 0))
