"""Checks what cloud-init's net-convert wrote from a network-config nicpolicy rendered.

    check.py OUT --primary eth0 (--gateway 10.10.0.1 | --dhcp-primary) [--mtu eth1=9000]
             [--route eth1=CIDR] [--static eth0=ADDR/PREFIX] [--dns eth0=SERVER]
             [--dhcp-without-routes eth1]

OUT holds netplan/etc/netplan/50-cloud-init.yaml and networkd/etc/systemd/network/*.network,
and netplan-generate/run/systemd/network/*.network (netplan's generator run on the first). In
each: exactly one default route, on the primary, through the gateway (with --dhcp-primary: no
static default route, the primary on DHCP taking its routes from it); each MTU, route,
static address and DNS server on its interface; the DHCP interfaces take no routes and no DNS
from DHCP. Prints every problem and exits 1 when there is one.
"""

import argparse
import glob
import os
import sys

import yaml

DEFAULTS = {"0.0.0.0/0", "::/0", "default"}


def pairs(values):
    return [tuple(v.split("=", 1)) for v in values or []]


def netplan_problems(path, args):
    with open(path) as f:
        doc = yaml.safe_load(f)["network"]
    by_name = {e.get("set-name"): e for e in doc.get("ethernets", {}).values()}
    problems = []
    defaults = [
        (name, r.get("via"))
        for name, e in by_name.items()
        for r in e.get("routes", [])
        if str(r.get("to")) in DEFAULTS
    ]
    defaults += [(name, e["gateway4"]) for name, e in by_name.items() if "gateway4" in e]
    defaults += [(name, e["gateway6"]) for name, e in by_name.items() if "gateway6" in e]
    problems += default_problems(defaults, args)
    if args.dhcp_primary:
        e = by_name.get(args.primary, {})
        if e.get("dhcp4") is not True or e.get("dhcp4-overrides", {}).get("use-routes") is False:
            problems.append(f"{args.primary}: dhcp4 {e.get('dhcp4')}, overrides {e.get('dhcp4-overrides')}: expected DHCP with its routes")
    for name, mtu in pairs(args.mtu):
        if by_name.get(name, {}).get("mtu") != int(mtu):
            problems.append(f"{name}: mtu {by_name.get(name, {}).get('mtu')}, expected {mtu}")
    for name, cidr in pairs(args.route):
        if cidr not in [r.get("to") for r in by_name.get(name, {}).get("routes", [])]:
            problems.append(f"{name}: no route to {cidr}")
    for name, address in pairs(args.static):
        if address not in by_name.get(name, {}).get("addresses", []):
            problems.append(f"{name}: no address {address}")
    for name, server in pairs(args.dns):
        if server not in by_name.get(name, {}).get("nameservers", {}).get("addresses", []):
            problems.append(f"{name}: no DNS server {server}")
    for name in args.dhcp_without_routes or []:
        e = by_name.get(name, {})
        overrides = e.get("dhcp4-overrides", {})
        if e.get("dhcp4") is not True or overrides.get("use-routes") is not False or overrides.get("use-dns") is not False:
            problems.append(f"{name}: dhcp4 {e.get('dhcp4')}, overrides {overrides}: expected DHCP without routes or DNS")
    return [f"netplan: {p}" for p in problems]


def default_problems(defaults, args):
    """The static default routes found, against one via the gateway (none for a DHCP primary)."""
    expected = [] if args.dhcp_primary else [(args.primary, args.gateway)]
    if defaults == expected:
        return []
    if args.dhcp_primary:
        return [f"default routes {defaults}, expected none: the primary takes its route from DHCP"]
    return [f"default routes {defaults}, expected one on {args.primary} via {args.gateway}"]


def networkd_sections(path):
    """[(section, {key: [values]})] in file order; a header starts a new section."""
    sections = []
    for line in open(path):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            sections.append((line[1:-1], {}))
        elif "=" in line and sections:
            key, value = line.split("=", 1)
            sections[-1][1].setdefault(key, []).append(value)
    return sections


def networkd_problems(directory, args):
    files = {}
    for path in glob.glob(os.path.join(directory, "*.network")):
        sections = networkd_sections(path)
        names = [v for s, kv in sections if s == "Match" for v in kv.get("Name", [])]
        files[names[0] if names else path] = sections
    problems = []

    def values(name, section, key):
        return [v for s, kv in files.get(name, []) if s == section for v in kv.get(key, [])]

    defaults = []
    for name, sections in files.items():
        for section, kv in sections:
            if section == "Route" and set(kv.get("Destination", ["0.0.0.0/0"])) & DEFAULTS:
                defaults += [(name, g) for g in kv.get("Gateway", [])]
            if section == "Network":
                defaults += [(name, g) for g in kv.get("Gateway", [])]
    problems += default_problems(defaults, args)
    if args.dhcp_primary:
        dhcp = values(args.primary, "Network", "DHCP")
        use_routes = [v.lower() for v in values(args.primary, "DHCPv4", "UseRoutes") + values(args.primary, "DHCP", "UseRoutes")]
        if dhcp not in (["ipv4"], ["yes"]) or set(use_routes) & {"false", "no", "0"}:
            problems.append(f"{args.primary}: DHCP {dhcp}, UseRoutes {use_routes}: expected DHCP with its routes")
    for name, mtu in pairs(args.mtu):
        if values(name, "Link", "MTUBytes") != [mtu]:
            problems.append(f"{name}: MTUBytes {values(name, 'Link', 'MTUBytes')}, expected {mtu}")
    for name, cidr in pairs(args.route):
        if cidr not in values(name, "Route", "Destination"):
            problems.append(f"{name}: no route to {cidr}")
    for name, address in pairs(args.static):
        if address not in values(name, "Address", "Address") + values(name, "Network", "Address"):
            problems.append(f"{name}: no address {address}")
    for name, server in pairs(args.dns):
        if server not in " ".join(values(name, "Network", "DNS")).split():
            problems.append(f"{name}: no DNS server {server}")
    no = {"false", "no", "0"}
    for name in args.dhcp_without_routes or []:
        dhcp = values(name, "Network", "DHCP")
        use_routes = [v.lower() for v in values(name, "DHCPv4", "UseRoutes") + values(name, "DHCP", "UseRoutes")]
        use_dns = [v.lower() for v in values(name, "DHCPv4", "UseDNS") + values(name, "DHCP", "UseDNS")]
        if dhcp not in (["ipv4"], ["yes"]) or not use_routes or set(use_routes) - no or not use_dns or set(use_dns) - no:
            problems.append(f"{name}: DHCP {dhcp}, UseRoutes {use_routes}, UseDNS {use_dns}: expected DHCP without routes or DNS")
    return [f"networkd: {p}" for p in problems]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--primary", required=True)
    parser.add_argument("--gateway")
    parser.add_argument("--dhcp-primary", action="store_true")
    parser.add_argument("--mtu", action="append")
    parser.add_argument("--route", action="append")
    parser.add_argument("--static", action="append")
    parser.add_argument("--dns", action="append")
    parser.add_argument("--dhcp-without-routes", action="append")
    args = parser.parse_args()
    if bool(args.gateway) == args.dhcp_primary:
        parser.error("give --gateway or --dhcp-primary, not both")
    problems = netplan_problems(os.path.join(args.out, "netplan/etc/netplan/50-cloud-init.yaml"), args)
    problems += networkd_problems(os.path.join(args.out, "networkd/etc/systemd/network"), args)
    # netplan's own generator, run on cloud-init's netplan output, when the run has it.
    generated = os.path.join(args.out, "netplan-generate/run/systemd/network")
    if os.path.isdir(os.path.join(args.out, "netplan-generate")):
        problems += [f"netplan generate: {p}" for p in networkd_problems(generated, args)]
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
