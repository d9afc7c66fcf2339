//! The plan as Cloud Director's NetworkConnectionSection: goldens written from the API reference,
//! and, over every case suite of every built-in policy, the rendered section compared field by
//! field with what stock CAPVCD sends, every difference being one the host reports as not
//! built as planned.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use nicpolicy::builtin;
use nicpolicy::plugin::provisioner::{self, PlanField, Profile, Provisioner};
use nicpolicy::plugin::{Decision, Nic, Request};
use nicpolicy::vcd::{built_nics, parse_section, render_section, VmNics};
use nicpolicy::PolicyOptions;
use nicpolicy_tests::{decided_cases, host};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// CAPVCD's reconcile rules, as its controller behaves (not its code): the VM's NICs are the
/// primary network followed by `spec.extraOvdcNetworks`, renumbered from 0 in that order, with
/// `PrimaryNetworkConnectionIndex` 0; every NIC it creates is connected, `mode` (`POOL` in
/// v1.3.2 and `main`, `DHCP` in Deckhouse's patched build), `VMXNET3`, with no address of its
/// own and `needsCustomization` false. Written as the XML it PUTs, so the comparison reads both
/// sides through the same parser.
fn what_capvcd_sends(primary: &str, extras: &[String], mode: &str) -> String {
    let mut xml = String::from(
        "<NetworkConnectionSection xmlns=\"http://www.vmware.com/vcloud/v1.5\" \
         xmlns:ovf=\"http://schemas.dmtf.org/ovf/envelope/1\">\
         <ovf:Info>Specifies the available VM network connections</ovf:Info>\
         <PrimaryNetworkConnectionIndex>0</PrimaryNetworkConnectionIndex>",
    );
    for (i, network) in std::iter::once(primary)
        .chain(extras.iter().map(String::as_str))
        .enumerate()
    {
        xml.push_str(&format!(
            "<NetworkConnection network=\"{network}\" needsCustomization=\"false\">\
             <NetworkConnectionIndex>{i}</NetworkConnectionIndex>\
             <IsConnected>true</IsConnected>\
             <IpAddressAllocationMode>{mode}</IpAddressAllocationMode>\
             <NetworkAdapterType>VMXNET3</NetworkAdapterType></NetworkConnection>"
        ));
    }
    xml + "</NetworkConnectionSection>"
}

/// Every (NIC index, field) where `plan` and `sent` differ.
fn differences(plan: &VmNics, sent: &VmNics) -> BTreeSet<(u32, PlanField)> {
    let mut found = BTreeSet::new();
    let indexes: BTreeSet<u32> = plan
        .nics
        .iter()
        .chain(&sent.nics)
        .map(|n| n.nic.index)
        .collect();
    for index in indexes {
        let at = |section: &VmNics| -> Option<Nic> {
            section
                .nics
                .iter()
                .find(|n| n.nic.index == index)
                .map(|n| n.nic.clone())
        };
        let (Some(p), Some(s)) = (at(plan), at(sent)) else {
            found.insert((index, PlanField::Network));
            continue;
        };
        let fields = [
            (PlanField::Network, p.network != s.network),
            (PlanField::Primary, p.primary != s.primary),
            (
                PlanField::IpAllocationMode,
                p.ip_allocation_mode != s.ip_allocation_mode,
            ),
            (PlanField::IpAddress, p.ip_address != s.ip_address),
            (PlanField::AdapterType, p.adapter_type != s.adapter_type),
            (PlanField::Connected, p.connected != s.connected),
        ];
        found.extend(fields.iter().filter(|(_, d)| *d).map(|(f, _)| (index, *f)));
    }
    found
}

fn extras<'a>(request: &'a Request, decision: &'a Decision) -> &'a [String] {
    decision
        .extra_ovdc_networks
        .as_deref()
        .unwrap_or(&request.machine.extra_ovdc_networks)
}

#[test]
fn every_case_renders_what_capvcd_sends_but_the_fields_reported() {
    let host = host(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vcd-cache"));
    let mut compared = 0;
    let mut with_differences = 0;
    let mut failures = Vec::new();
    for policy in builtin::POLICIES {
        let loaded = host
            .load(policy.wasm, PolicyOptions::default())
            .unwrap_or_else(|err| panic!("{}: {err}", policy.name));
        let dir = workspace().join("tests/cases").join(policy.name);
        for decided in decided_cases(&loaded, &dir) {
            let (request, decision) = (&decided.request, &decided.decision);
            // A plan without NIC 0 (its primary not known yet) has nothing CAPVCD would send.
            let Some(primary) = decision.nics.iter().find(|n| n.index == 0) else {
                continue;
            };
            let plan = parse_section(&render_section(&decision.nics)).expect("rendered parses");
            // Each profile against the mode its build gives a new NIC, stated here from the
            // builds (docs/plan-to-vm.md), not taken from the profile under test.
            for (profile, mode) in [
                (Profile::Capvcd13, "POOL"),
                (Profile::CapvcdMain, "POOL"),
                (Profile::Deckhouse, "DHCP"),
            ] {
                let sent = parse_section(&what_capvcd_sends(
                    &primary.network,
                    extras(request, decision),
                    mode,
                ))
                .expect("CAPVCD's section parses");
                let differ = differences(&plan, &sent);
                let reported: BTreeSet<(u32, PlanField)> =
                    provisioner::unapplied(&Provisioner::of(profile), request, decision)
                        .iter()
                        .map(|u| (u.index, u.field))
                        .collect();
                if differ != reported {
                    failures.push(format!(
                        "{} ({}): the plan differs from the build's section at {differ:?}, \
                         reported {reported:?}",
                        decided.case.path.display(),
                        profile.as_str()
                    ));
                }
                // The section `render vcd --built` writes is the build's.
                let built = parse_section(&render_section(&built_nics(
                    &Provisioner::of(profile),
                    &decision.nics,
                    extras(request, decision),
                )))
                .expect("built parses");
                if !differences(&built, &sent).is_empty() {
                    failures.push(format!(
                        "{} ({}): render vcd --built differs from the build's section at {:?}",
                        decided.case.path.display(),
                        profile.as_str(),
                        differences(&built, &sent)
                    ));
                }
                compared += 1;
                with_differences += usize::from(!differ.is_empty());
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Every built-in suite was read, and some plans do ask for what CAPVCD does not build (the
    // static-ip policy's MANUAL NICs, DHCP settings).
    assert!(compared >= 300, "only {compared} plans compared");
    assert!(
        with_differences >= 5,
        "only {with_differences} plans differ"
    );
}

/// The case `path`'s decision by `policy`.
fn case_plan(policy: &str, case: &str) -> Vec<Nic> {
    let host = host(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vcd-cache"));
    let module = builtin::get(policy).expect("built in").wasm;
    let loaded = host.load(module, PolicyOptions::default()).expect("loads");
    let dir = workspace().join("tests/cases").join(policy);
    decided_cases(&loaded, &dir)
        .into_iter()
        .find(|d| d.case.path.ends_with(case))
        .unwrap_or_else(|| panic!("no case {case}"))
        .decision
        .nics
}

#[test]
fn sections_match_the_goldens() {
    let goldens = workspace().join("tests/fixtures/vcd");
    for (policy, case, golden) in [
        (
            "capvcd",
            "03-three-extras-in-order.yaml",
            "worker-four-networks.xml",
        ),
        (
            "static-ip",
            "01-manual-address-on-extra.yaml",
            "static-ip-manual-extra.xml",
        ),
    ] {
        let rendered = render_section(&case_plan(policy, case));
        let want = std::fs::read_to_string(goldens.join(golden)).expect("golden");
        assert_eq!(rendered, want, "{policy} {case} against {golden}");
    }
}
