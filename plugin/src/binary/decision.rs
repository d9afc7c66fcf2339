//! The binary decision format: what a policy answers through
//! [`EXPORT_EVALUATE_BINARY2`](crate::abi::EXPORT_EVALUATE_BINARY2) (version 1) and
//! [`EXPORT_EVALUATE_BINARY3`](crate::abi::EXPORT_EVALUATE_BINARY3) (version 2), a
//! [`Decision`] or the policy's error, in the layout of the [request format](super)
//! (little-endian `u32` lengths and counts, tag bytes, UTF-8 strings).
//!
//! Version 2 is version 1 with an optional [`Source`] after each NIC and each violation. It has
//! an export of its own so that a module built with sources still answers a host that predates
//! them (that host calls the version 1 export, which leaves the sources out).
//!
//! The host reads this from a module it does not trust: [`decode_output`] is total (every
//! count is checked against the bytes left before anything is reserved, every tag and string
//! is checked), and the host applies the same rules to the decision as to one read from JSON.

use super::{FormatError, Problem, Reader, Stop, Writer};
use crate::schema::{
    AdapterType, Decision, EvaluateOutput, IpAllocationMode, Nic, Reason, Violation,
};
use crate::source::{Origin, Source};

/// The first four bytes of an output in this format, version 1: `NPD` and the version.
pub const DECISION_MAGIC: [u8; 4] = *b"NPD\x01";
/// The first four bytes of an output in version 2 (with sources).
pub const DECISION_MAGIC_V2: [u8; 4] = *b"NPD\x02";

/// The output's kind, after the magic.
const IS_DECISION: u8 = 0;
const IS_ERROR: u8 = 1;

/// Flag bits of a decision's header byte.
const ALLOWED: u8 = 1;
const STRICT: u8 = 1 << 1;
const HAS_EXTRA_OVDC_NETWORKS: u8 = 1 << 2;
const KNOWN_FLAGS: u8 = ALLOWED | STRICT | HAS_EXTRA_OVDC_NETWORKS;

/// Appends `output` to `out` in the binary decision format, version 1 (sources left out).
///
/// # Errors
/// [`Problem::TooLong`] for a string or list over `u32::MAX` bytes or items.
pub fn encode_output(output: &EvaluateOutput, out: &mut Vec<u8>) -> Result<(), FormatError> {
    encode_version(output, false, out)
}

/// Appends `output` to `out` in the binary decision format, version 2 (with sources).
///
/// # Errors
/// As for [`encode_output`].
pub fn encode_output_v2(output: &EvaluateOutput, out: &mut Vec<u8>) -> Result<(), FormatError> {
    encode_version(output, true, out)
}

fn encode_version(
    output: &EvaluateOutput,
    sources: bool,
    out: &mut Vec<u8>,
) -> Result<(), FormatError> {
    let mut w = Writer { out };
    w.out.extend_from_slice(if sources {
        &DECISION_MAGIC_V2
    } else {
        &DECISION_MAGIC
    });
    match output {
        EvaluateOutput::Error { error } => {
            w.u8(IS_ERROR);
            w.str(error, "Output.error")
        }
        EvaluateOutput::Decision(decision) => {
            w.u8(IS_DECISION);
            w.decision(decision, sources)
        }
    }
}

impl Writer<'_> {
    fn source(&mut self, source: Option<&Source>) -> Result<(), FormatError> {
        let Some(source) = source else {
            self.u8(0);
            return Ok(());
        };
        let Source {
            origin,
            field,
            rule,
            setting,
            policy,
        } = source;
        self.u8(1);
        self.u8(match origin {
            None => 0,
            Some(Origin::ClusterNetwork) => 1,
            Some(Origin::Zone) => 2,
            Some(Origin::Machine) => 3,
            Some(Origin::RoleDefaults) => 4,
            Some(Origin::Settings) => 5,
        });
        self.opt_str(field.as_deref(), "Source.field")?;
        self.opt_str(rule.as_deref(), "Source.rule")?;
        self.opt_str(setting.as_deref(), "Source.setting")?;
        self.opt_str(policy.as_deref(), "Source.policy")
    }

    fn decision(&mut self, decision: &Decision, sources: bool) -> Result<(), FormatError> {
        let Decision {
            allowed,
            nics,
            extra_ovdc_networks,
            vapp_networks,
            violations,
            warnings,
            strict,
        } = decision;
        self.flags(&[
            (*allowed, ALLOWED),
            (*strict, STRICT),
            (extra_ovdc_networks.is_some(), HAS_EXTRA_OVDC_NETWORKS),
        ]);
        self.count(nics.len(), "Decision.nics")?;
        for nic in nics {
            let Nic {
                index,
                network,
                primary,
                ip_allocation_mode,
                ip_address,
                adapter_type,
                connected,
                source,
            } = nic;
            self.u32(*index);
            self.str(network, "Nic.network")?;
            self.u8(u8::from(*primary));
            self.u8(match ip_allocation_mode {
                IpAllocationMode::Pool => 0,
                IpAllocationMode::Dhcp => 1,
                IpAllocationMode::Manual => 2,
                IpAllocationMode::None => 3,
            });
            self.opt_str(ip_address.as_deref(), "Nic.ipAddress")?;
            self.u8(match adapter_type {
                AdapterType::Vmxnet3 => 0,
                AdapterType::E1000 => 1,
                AdapterType::E1000e => 2,
                AdapterType::SriovEthernetCard => 3,
                AdapterType::Vmxnet2 => 4,
                AdapterType::PcNet32 => 5,
            });
            self.u8(u8::from(*connected));
            if sources {
                self.source(source.as_deref())?;
            }
        }
        if let Some(networks) = extra_ovdc_networks {
            self.strs(networks, "Decision.extraOvdcNetworks")?;
        }
        self.strs(vapp_networks, "Decision.vappNetworks")?;
        self.count(violations.len(), "Decision.violations")?;
        for Violation {
            field,
            reason,
            message,
            source,
        } in violations
        {
            self.str(field, "Violation.field")?;
            self.u8(match reason {
                Reason::Required => 0,
                Reason::Invalid => 1,
                Reason::Duplicate => 2,
                Reason::NotFound => 3,
                Reason::TooMany => 4,
                Reason::Forbidden => 5,
                Reason::NotSupported => 6,
            });
            self.str(message, "Violation.message")?;
            if sources {
                self.source(source.as_deref())?;
            }
        }
        self.strs(warnings, "Decision.warnings")
    }
}

/// Reads a policy's output in the binary decision format: its decision, or its error.
///
/// The decision is read as it is; whether it is coherent (allowed exactly without violations,
/// NIC indexes) is the host's check, as for a decision read from JSON.
///
/// # Errors
/// A [`FormatError`] naming the byte and field where the bytes stop being an output: wrong
/// magic, a truncated field, a string that is not UTF-8, an undefined tag, a count larger than
/// the bytes left, or bytes after the end.
pub fn decode_output(bytes: &[u8]) -> Result<EvaluateOutput, FormatError> {
    let mut reader = Reader::new(bytes);
    let output = reader.output();
    reader.finish(output, "Output")
}

impl Reader<'_> {
    fn output(&mut self) -> Result<EvaluateOutput, Stop> {
        let r = self;
        let sources = match r.take(4, "Output.magic")? {
            magic if magic == DECISION_MAGIC => false,
            magic if magic == DECISION_MAGIC_V2 => true,
            _ => return Err(r.error_at(0, "Output.magic", Problem::NotBinaryDecision)),
        };
        let output = match r.u8("Output.kind")? {
            IS_DECISION => EvaluateOutput::Decision(r.decision(sources)?),
            IS_ERROR => EvaluateOutput::Error {
                error: r.str("Output.error")?,
            },
            tag => return Err(r.bad_tag(tag, "Output.kind")),
        };
        r.end("Output")?;
        Ok(output)
    }

    fn source(&mut self) -> Result<Option<Box<Source>>, Stop> {
        if !self.flag("Source")? {
            return Ok(None);
        }
        let origin = match self.u8("Source.origin")? {
            0 => None,
            1 => Some(Origin::ClusterNetwork),
            2 => Some(Origin::Zone),
            3 => Some(Origin::Machine),
            4 => Some(Origin::RoleDefaults),
            5 => Some(Origin::Settings),
            tag => return Err(self.bad_tag(tag, "Source.origin")),
        };
        Ok(Some(Box::new(Source {
            origin,
            field: self.opt_str("Source.field")?,
            rule: self.opt_str("Source.rule")?,
            setting: self.opt_str("Source.setting")?,
            policy: self.opt_str("Source.policy")?,
        })))
    }

    fn decision(&mut self, sources: bool) -> Result<Decision, Stop> {
        let flags = self.u8("Decision.flags")?;
        if flags & !KNOWN_FLAGS != 0 {
            return Err(self.bad_tag(flags, "Decision.flags"));
        }
        let mut decision = Decision {
            allowed: flags & ALLOWED != 0,
            strict: flags & STRICT != 0,
            ..Decision::default()
        };
        // A NIC is at least an index, an empty name and five tag bytes.
        let count = self.count("Decision.nics", 13)?;
        decision.nics.reserve_exact(count);
        for _ in 0..count {
            let mut nic = Nic {
                index: self.u32("Nic.index")?,
                network: self.str("Nic.network")?,
                primary: false,
                ip_allocation_mode: IpAllocationMode::Pool,
                ip_address: None,
                adapter_type: AdapterType::Vmxnet3,
                connected: false,
                source: None,
            };
            nic.primary = self.flag("Nic.primary")?;
            nic.ip_allocation_mode = match self.u8("Nic.ipAllocationMode")? {
                0 => IpAllocationMode::Pool,
                1 => IpAllocationMode::Dhcp,
                2 => IpAllocationMode::Manual,
                3 => IpAllocationMode::None,
                tag => return Err(self.bad_tag(tag, "Nic.ipAllocationMode")),
            };
            nic.ip_address = self.opt_str("Nic.ipAddress")?;
            nic.adapter_type = match self.u8("Nic.adapterType")? {
                0 => AdapterType::Vmxnet3,
                1 => AdapterType::E1000,
                2 => AdapterType::E1000e,
                3 => AdapterType::SriovEthernetCard,
                4 => AdapterType::Vmxnet2,
                5 => AdapterType::PcNet32,
                tag => return Err(self.bad_tag(tag, "Nic.adapterType")),
            };
            nic.connected = self.flag("Nic.connected")?;
            if sources {
                nic.source = self.source()?;
            }
            decision.nics.push(nic);
        }
        if flags & HAS_EXTRA_OVDC_NETWORKS != 0 {
            decision.extra_ovdc_networks = Some(self.strs("Decision.extraOvdcNetworks")?);
        }
        decision.vapp_networks = self.strs("Decision.vappNetworks")?;
        // A violation is at least two empty strings and a tag byte.
        let count = self.count("Decision.violations", 9)?;
        decision.violations.reserve_exact(count);
        for _ in 0..count {
            let field = self.str("Violation.field")?;
            let reason = match self.u8("Violation.reason")? {
                0 => Reason::Required,
                1 => Reason::Invalid,
                2 => Reason::Duplicate,
                3 => Reason::NotFound,
                4 => Reason::TooMany,
                5 => Reason::Forbidden,
                6 => Reason::NotSupported,
                tag => return Err(self.bad_tag(tag, "Violation.reason")),
            };
            let message = self.str("Violation.message")?;
            let source = if sources { self.source()? } else { None };
            decision.violations.push(Violation {
                field,
                reason,
                message,
                source,
            });
        }
        decision.warnings = self.strs("Decision.warnings")?;
        Ok(decision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(output: &EvaluateOutput) -> Vec<u8> {
        let mut out = Vec::new();
        encode_output(output, &mut out).unwrap();
        out
    }

    /// A denial with every field set: a three-NIC plan, a write-back, vApp networks, a warning.
    fn full_decision() -> Decision {
        let nic = |index: u32, network: &str| Nic {
            index,
            network: network.into(),
            primary: index == 0,
            ip_allocation_mode: IpAllocationMode::Pool,
            ip_address: None,
            adapter_type: AdapterType::Vmxnet3,
            connected: true,
            source: None,
        };
        let mut storage = nic(2, "storage-net");
        storage.ip_allocation_mode = IpAllocationMode::Manual;
        storage.ip_address = Some("10.20.0.15".into());
        Decision {
            allowed: false,
            nics: vec![nic(0, "mgmt-net"), nic(1, "workload-net"), storage],
            extra_ovdc_networks: Some(vec!["workload-net".into(), "storage-net".into()]),
            vapp_networks: vec![
                "mgmt-net".into(),
                "workload-net".into(),
                "storage-net".into(),
            ],
            violations: vec![Violation::new(
                "spec.extraOvdcNetworks[1]",
                Reason::NotFound,
                "network \"storage-nët\" is not in org VDC ovdc-a",
            )],
            warnings: vec!["storage-net has 3 free addresses left".into()],
            strict: true,
        }
    }

    #[test]
    fn outputs_round_trip() {
        let outputs = [
            EvaluateOutput::Decision(full_decision()),
            EvaluateOutput::Decision(Decision::from_violations(Vec::new())),
            EvaluateOutput::Error {
                error: "policy could not read the binary request: at byte 0".into(),
            },
        ];
        for output in outputs {
            assert_eq!(decode_output(&encoded(&output)).unwrap(), output);
        }
    }

    /// [`full_decision`] with a source on each part, every origin used.
    fn sourced_decision() -> Decision {
        let mut decision = full_decision();
        for (nic, origin) in decision.nics.iter_mut().zip(Origin::ALL) {
            nic.source = Some(Box::new(
                Source::nic(
                    origin,
                    format!("spec.extraOvdcNetworks[{}]", nic.index),
                    "capvcd/plan",
                )
                .with_setting("networks.storage-net"),
            ));
        }
        decision.nics[2].source = Some(Box::new(Source {
            origin: Some(Origin::Settings),
            policy: Some("site".into()),
            ..Source::default()
        }));
        decision.violations[0].source = Some(Box::new(Source::rule("capvcd/inventory")));
        decision
    }

    #[test]
    fn version_2_carries_sources_and_version_1_leaves_them_out() {
        let output = EvaluateOutput::Decision(sourced_decision());
        let mut v2 = Vec::new();
        encode_output_v2(&output, &mut v2).unwrap();
        assert_eq!(v2[..4], DECISION_MAGIC_V2);
        assert_eq!(decode_output(&v2).unwrap(), output);
        let mut origins = sourced_decision();
        for origin in Origin::ALL {
            origins.nics[0].source = Some(Box::new(Source {
                origin: Some(origin),
                ..Source::default()
            }));
            let output = EvaluateOutput::Decision(origins.clone());
            let mut bytes = Vec::new();
            encode_output_v2(&output, &mut bytes).unwrap();
            assert_eq!(decode_output(&bytes).unwrap(), output);
        }
        let mut without = sourced_decision();
        crate::source::strip(&mut without);
        assert_eq!(
            decode_output(&encoded(&output)).unwrap(),
            EvaluateOutput::Decision(without)
        );
    }

    #[test]
    fn version_2_truncations_and_flips_are_refused_or_exact() {
        let mut bytes = Vec::new();
        encode_output_v2(&EvaluateOutput::Decision(sourced_decision()), &mut bytes).unwrap();
        for end in 0..bytes.len() {
            assert!(decode_output(&bytes[..end]).is_err(), "cut at {end}");
        }
        for at in 0..bytes.len() {
            let mut corrupt = bytes.clone();
            corrupt[at] ^= 0x80;
            if let Ok(output) = decode_output(&corrupt) {
                let mut again = Vec::new();
                encode_output_v2(&output, &mut again).unwrap();
                assert_eq!(again, corrupt, "flip at {at}");
            }
        }
    }

    #[test]
    fn every_enum_value_round_trips() {
        // Encoder and decoder each map the enums to tag bytes: every value must come back.
        let mut decision = full_decision();
        let modes = [
            IpAllocationMode::Pool,
            IpAllocationMode::Dhcp,
            IpAllocationMode::Manual,
            IpAllocationMode::None,
        ];
        let adapters = [
            AdapterType::Vmxnet3,
            AdapterType::E1000,
            AdapterType::E1000e,
            AdapterType::SriovEthernetCard,
            AdapterType::Vmxnet2,
            AdapterType::PcNet32,
        ];
        for mode in modes {
            for adapter in adapters {
                decision.nics[1].ip_allocation_mode = mode;
                decision.nics[1].adapter_type = adapter;
                let output = EvaluateOutput::Decision(decision.clone());
                assert_eq!(decode_output(&encoded(&output)).unwrap(), output);
            }
        }
        for reason in Reason::ALL {
            decision.violations[0].reason = reason;
            let output = EvaluateOutput::Decision(decision.clone());
            assert_eq!(decode_output(&encoded(&output)).unwrap(), output);
        }
        for (allowed, strict, extra) in [(true, false, None), (false, true, Some(Vec::new()))] {
            decision.allowed = allowed;
            decision.strict = strict;
            decision.extra_ovdc_networks = extra;
            let output = EvaluateOutput::Decision(decision.clone());
            assert_eq!(decode_output(&encoded(&output)).unwrap(), output);
        }
    }

    #[test]
    fn every_truncation_is_refused_without_panicking() {
        let bytes = encoded(&EvaluateOutput::Decision(full_decision()));
        for end in 0..bytes.len() {
            let err = decode_output(&bytes[..end]).unwrap_err();
            assert!(
                matches!(
                    err.problem,
                    Problem::Truncated | Problem::CountTooLarge(_) | Problem::NotBinaryDecision
                ),
                "cut at {end}: {err}"
            );
        }
    }

    #[test]
    fn every_flipped_byte_decodes_or_names_the_problem() {
        // No panic and no runaway allocation, whichever byte a policy corrupts.
        let bytes = encoded(&EvaluateOutput::Decision(full_decision()));
        for at in 0..bytes.len() {
            for flip in [0x01, 0x80, 0xff] {
                let mut corrupt = bytes.clone();
                corrupt[at] ^= flip;
                match decode_output(&corrupt) {
                    // What decodes encodes back to the same bytes: nothing is read loosely.
                    Ok(output) => assert_eq!(encoded(&output), corrupt, "flip at {at}"),
                    Err(err) => assert!(err.at <= corrupt.len(), "{err}"),
                }
            }
        }
    }

    #[test]
    fn errors_name_the_byte_and_field() {
        assert_eq!(
            decode_output(br#"{"allowed":true}"#).unwrap_err().to_string(),
            "at byte 0, reading Output.magic: not a binary decision (it must start with NPD and version byte 1 or 2)"
        );
        let mut bytes = encoded(&EvaluateOutput::Decision(full_decision()));
        // The first NIC's index follows magic, kind, flags and the NIC count; then its name.
        let tag_at = 4 + 1 + 1 + 4 + 4 + 4 + "mgmt-net".len() + 1;
        bytes[tag_at] = 9;
        assert_eq!(
            decode_output(&bytes).unwrap_err().to_string(),
            format!(
                "at byte {tag_at}, reading Nic.ipAllocationMode: tag byte 9 is not defined here"
            )
        );
        let mut trailing = encoded(&EvaluateOutput::Error {
            error: "boom".into(),
        });
        trailing.push(0);
        assert_eq!(
            decode_output(&trailing).unwrap_err().to_string(),
            format!(
                "at byte {}, reading Output: 1 bytes follow the end",
                trailing.len() - 1
            )
        );
    }

    #[test]
    fn forged_counts_and_flags_are_refused() {
        let bytes = encoded(&EvaluateOutput::Decision(full_decision()));
        let mut forged = bytes.clone();
        forged[6..10].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            decode_output(&forged).unwrap_err().problem,
            Problem::CountTooLarge(u32::MAX)
        );
        let mut flags = bytes;
        flags[5] |= 0x80;
        let err = decode_output(&flags).unwrap_err();
        assert_eq!((err.at, err.field), (5, "Decision.flags"));
    }
}
