//! The policy options shared by `eval` and `test`: `--policy` (repeatable, to chain), and the
//! `--settings` and `--sha256` that belong to the `--policy` before them.

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{PossibleValuesParser, TypedValueParser as _};
use clap::ArgMatches;
use nicpolicy::mode::Mode;
use nicpolicy::plugin::provisioner::{Builds, OnUnapplied, PlanField, Profile, Provisioner};
use nicpolicy::plugin::IpAllocationMode;
use nicpolicy::{Host, HostConfig, Limits, PolicyChain, PolicySource, PolicySpec, SettingsSource};

use super::{runtime, usage, Failure};

#[derive(clap::Args)]
pub struct PolicyArgs {
    /// A policy: a module file, builtin:NAME for a policy built into nicpolicy
    /// (builtin:capvcd), or oci://host/repo@sha256:... for a module in an OCI registry (kept
    /// by digest in the cache directory, so a digest is pulled once; a tag is pulled each time
    /// and the kept copy serves while the registry is down). Repeat to chain policies: each is evaluated in order and sees the
    /// extraOvdcNetworks the one before it wrote back; the machine is allowed only if every
    /// policy allows it, violations are listed together (messages prefixed with [policy name]),
    /// and the NIC plan is the last policy's. The built-in CAPVCD policy when omitted.
    #[arg(
        long = "policy",
        value_name = "FILE.wasm|builtin:NAME|oci://REF",
        value_parser = parse_policy_source
    )]
    policies: Vec<PolicySource>,
    /// Refuse a policy unless its sha256 is this; applies to the --policy before it, like
    /// --settings.
    #[arg(long = "sha256", value_name = "HEX")]
    sha256: Vec<String>,
    /// The --policy before it in warn mode (like --settings): its violations are printed as the
    /// webhook's warnings ("would be denied") and it changes nothing; enforce, the default,
    /// denies.
    #[arg(long = "mode", value_name = "enforce|warn", value_parser = parse_mode)]
    modes: Vec<Mode>,
    /// Time limit for one evaluation, like 250ms or 2s.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = nicpolicy::limits::parse_duration)]
    timeout: Duration,
    /// Memory cap for the policy, like 64Mi.
    #[arg(long, value_name = "SIZE", default_value = "64Mi", value_parser = nicpolicy::limits::parse_size)]
    memory: usize,
    /// Compile the module without reading or writing the compiled-module cache (and pull
    /// oci:// modules without keeping them).
    #[arg(long)]
    no_cache: bool,
    #[command(flatten)]
    pub registry: super::registry_args::RegistryArgs,
}

impl PolicyArgs {
    /// Other policies (a candidate chain) under the same limits and cache use.
    pub fn with_sources(&self, policies: Vec<PolicySource>, sha256: Vec<String>) -> PolicyArgs {
        PolicyArgs {
            policies,
            sha256,
            modes: Vec::new(),
            timeout: self.timeout,
            memory: self.memory,
            no_cache: self.no_cache,
            registry: self.registry.clone(),
        }
    }
}

/// Who builds the planned NICs, for `eval`, `audit` and `render`: each plan field it will not
/// apply is reported (docs/schema.md, "What the provisioner applies"), and what it builds is
/// what `render vcd --built`, `render network-config` and `audit --vm-nics` go by.
#[derive(clap::Args)]
pub struct ProvisionerArgs {
    /// The provisioner build the site runs: capvcd-1.3 (upstream v1.3.2: every NIC POOL,
    /// VMXNET3), capvcd-main (the same NICs, zones), deckhouse (every NIC DHCP, VMXNET3) or
    /// custom (--provisioner-applies, --provisioner-builds).
    #[arg(
        long = "provisioner",
        value_name = "PROFILE",
        default_value = "capvcd-1.3",
        value_parser = parse_profile
    )]
    profile: Profile,
    /// The provisioner's name in messages (default: the profile's, `CAPVCD` for capvcd-1.3).
    #[arg(long = "provisioner-name", value_name = "NAME")]
    name: Option<String>,
    /// A plan field a custom provisioner applies as planned (repeatable or comma-separated):
    /// network, primary, ipAllocationMode, ipAddress, adapterType, connected. Implies
    /// --provisioner custom; the builds of the other profiles apply none.
    #[arg(
        long = "provisioner-applies",
        value_name = "FIELD",
        value_delimiter = ',',
        value_parser = parse_plan_field
    )]
    applies: Vec<PlanField>,
    /// What a custom provisioner gives the NICs it creates where it does not apply the plan,
    /// FIELD=VALUE (repeatable or comma-separated): ipAllocationMode=POOL|DHCP|NONE,
    /// adapterType=VMXNET3|E1000E|..., connected=true|false. Implies --provisioner custom;
    /// unset fields as stock CAPVCD builds them.
    #[arg(
        long = "provisioner-builds",
        value_name = "FIELD=VALUE",
        value_delimiter = ','
    )]
    builds: Vec<String>,
    /// A plan field the provisioner will not apply: a warning (default) or a denial.
    #[arg(
        long,
        value_name = "WHAT",
        default_value = "warn",
        value_parser = PossibleValuesParser::new(["warn", "deny"]).map(|s| match s.as_str() {
            "deny" => OnUnapplied::Deny,
            _ => OnUnapplied::Warn,
        })
    )]
    on_unapplied: OnUnapplied,
}

impl ProvisionerArgs {
    /// The provisioner these options name.
    ///
    /// # Errors
    /// `--provisioner-applies` or `--provisioner-builds` with a profile other than `custom`, or
    /// a `--provisioner-builds` entry that is not FIELD=VALUE of a field it can build.
    pub fn provisioner(&self) -> Result<Provisioner, Failure> {
        let declares = !self.applies.is_empty() || !self.builds.is_empty();
        let profile = match self.profile {
            // The default stands for "not given": declaring a build makes it a custom one.
            Profile::Capvcd13 if declares => Profile::Custom,
            profile => profile,
        };
        if declares && profile != Profile::Custom {
            return Err(usage(anyhow::anyhow!(
                "--provisioner-applies and --provisioner-builds declare a custom build; the \
                 {} profile states what it applies and builds (use --provisioner custom)",
                profile.as_str()
            )));
        }
        let mut provisioner = Provisioner::of(profile);
        if let Some(name) = &self.name {
            if name.is_empty() {
                return Err(usage(anyhow::anyhow!(
                    "--provisioner-name must not be empty"
                )));
            }
            provisioner.name = name.clone();
        }
        provisioner.applies = self.applies.clone();
        provisioner.applies.sort();
        provisioner.applies.dedup();
        for entry in &self.builds {
            set_built(&mut provisioner.builds, entry).map_err(|message| {
                usage(anyhow::anyhow!("--provisioner-builds {entry}: {message}"))
            })?;
        }
        Ok(provisioner)
    }

    /// `chain`, reporting what this provisioner will not apply of its plans.
    ///
    /// # Errors
    /// As for [`ProvisionerArgs::provisioner`].
    pub fn apply(&self, chain: PolicyChain) -> Result<PolicyChain, Failure> {
        Ok(chain.with_provisioner(self.provisioner()?, self.on_unapplied))
    }
}

/// Sets the field `FIELD=VALUE` names in `builds`.
fn set_built(builds: &mut Builds, entry: &str) -> Result<(), String> {
    let Some((field, value)) = entry.split_once('=') else {
        return Err("not FIELD=VALUE".to_string());
    };
    let quoted = serde_json::Value::String(value.to_string());
    match PlanField::parse(field) {
        Some(PlanField::IpAllocationMode) => {
            let mode: IpAllocationMode = serde_json::from_value(quoted)
                .map_err(|_| format!("{value:?} is not POOL, DHCP or NONE"))?;
            if mode == IpAllocationMode::Manual {
                return Err(
                    "MANUAL needs an address of the plan's: declare ipAllocationMode and \
                     ipAddress with --provisioner-applies instead"
                        .to_string(),
                );
            }
            builds.ip_allocation_mode = mode;
        }
        Some(PlanField::AdapterType) => {
            builds.adapter_type = serde_json::from_value(quoted)
                .map_err(|_| format!("{value:?} is not an adapter type nicpolicy plans"))?;
        }
        Some(PlanField::Connected) => {
            builds.connected = match value {
                "true" => true,
                "false" => false,
                _ => return Err(format!("{value:?} is not true or false")),
            };
        }
        _ => {
            return Err(format!(
                "{field:?} is not a field a provisioner builds (ipAllocationMode, adapterType, \
                 connected)"
            ))
        }
    }
    Ok(())
}

fn parse_profile(text: &str) -> Result<Profile, String> {
    Profile::parse(text).ok_or_else(|| {
        let names: Vec<&str> = Profile::ALL.iter().map(|p| p.as_str()).collect();
        format!(
            "{text:?} is not a provisioner profile ({}); a site's own build is custom, named \
             with --provisioner-name",
            names.join(", ")
        )
    })
}

fn parse_plan_field(text: &str) -> Result<PlanField, String> {
    PlanField::parse(text).ok_or_else(|| {
        let names: Vec<&str> = PlanField::ALL.iter().map(|f| f.as_str()).collect();
        format!("{text:?} is not a plan field ({})", names.join(", "))
    })
}

/// `builtin:NAME` names an embedded policy; anything else is a file.
pub(super) fn parse_policy_source(text: &str) -> Result<PolicySource, String> {
    nicpolicy::sources::parse(text).map_err(|err| err.to_string())
}

fn parse_mode(text: &str) -> Result<Mode, String> {
    match text {
        "enforce" => Ok(Mode::Enforce),
        "warn" => Ok(Mode::Warn),
        other => Err(format!("{other:?} is not a mode: enforce or warn")),
    }
}

/// Where `--policy`, `--settings` and `--sha256` appear on the command line: an option that
/// belongs to one policy applies to the `--policy` before it.
pub struct Positions {
    policies: Vec<usize>,
    settings: Vec<usize>,
    sha256: Vec<usize>,
    modes: Vec<usize>,
}

impl Positions {
    /// The positions in a subcommand's matches (none when it has no policy options).
    pub fn of(matches: Option<&ArgMatches>) -> Positions {
        Positions::of_ids(matches, ["policies", "settings", "sha256", "modes"])
    }

    /// The positions of the candidate chain's options (`nicpolicy audit --candidate`,
    /// `--candidate-settings`, `--candidate-sha256`).
    pub fn of_candidates(matches: Option<&ArgMatches>) -> Positions {
        Positions::of_ids(
            matches,
            // The candidate chain is evaluated whole, beside the one in force: no modes.
            [
                "candidates",
                "candidate_settings",
                "candidate_sha256",
                "candidate_modes",
            ],
        )
    }

    fn of_ids(
        matches: Option<&ArgMatches>,
        [policies, settings, sha256, modes]: [&str; 4],
    ) -> Positions {
        let indices = |id: &str| -> Vec<usize> {
            matches
                // `indices_of` insists on an argument the subcommand defines.
                .filter(|m| m.try_contains_id(id).unwrap_or(false))
                .and_then(|m| m.indices_of(id))
                .map(Iterator::collect)
                .unwrap_or_default()
        };
        Positions {
            policies: indices(policies),
            settings: indices(settings),
            sha256: indices(sha256),
            modes: indices(modes),
        }
    }

    /// Which policy (0-based) an option at command-line position `at` belongs to: the last
    /// `--policy` before it, or the first policy when it comes before every `--policy`.
    fn owner(&self, at: usize) -> usize {
        self.policies.iter().rposition(|&p| p < at).unwrap_or(0)
    }
}

/// The chain the command line describes: every `--policy` in order (the built-in CAPVCD policy
/// when there is none), each with its own `--settings` and `--sha256`, and the limits every
/// policy gets.
pub fn policy_specs(
    args: &PolicyArgs,
    settings: &[PathBuf],
    positions: &Positions,
) -> Result<Vec<PolicySpec>, Failure> {
    let sources = if args.policies.is_empty() {
        vec![nicpolicy::builtin::CAPVCD.source()]
    } else {
        args.policies.clone()
    };
    let limits = Limits::default()
        .with_timeout(args.timeout)
        .with_memory_bytes(args.memory);
    let mut specs: Vec<PolicySpec> = sources
        .into_iter()
        .map(|source| PolicySpec::new(source).with_limits(limits))
        .collect();
    // Never out of range: positions come from the same command line as the policies.
    let last = specs.len() - 1;
    for (path, &at) in settings.iter().zip(&positions.settings) {
        let spec = &mut specs[positions.owner(at).min(last)];
        if spec.settings != SettingsSource::default() {
            return Err(usage(anyhow::anyhow!(
                "two --settings for {}: give each policy one, after its --policy",
                spec.source.label()
            )));
        }
        spec.settings = SettingsSource::File(path.clone());
    }
    for (digest, &at) in args.sha256.iter().zip(&positions.sha256) {
        let spec = &mut specs[positions.owner(at).min(last)];
        if spec.sha256.is_some() {
            return Err(usage(anyhow::anyhow!(
                "two --sha256 for {}: give each policy one, after its --policy",
                spec.source.label()
            )));
        }
        spec.sha256 = Some(digest.clone());
    }
    let mut moded = vec![false; specs.len()];
    for (&mode, &at) in args.modes.iter().zip(&positions.modes) {
        let owner = positions.owner(at).min(last);
        if std::mem::replace(&mut moded[owner], true) {
            return Err(usage(anyhow::anyhow!(
                "two --mode for {}: give each policy one, after its --policy",
                specs[owner].source.label()
            )));
        }
        specs[owner].mode = mode;
    }
    Ok(specs)
}

/// Loads the chain `specs` describe on a host sized for the command line.
pub fn load_chain(
    args: &PolicyArgs,
    specs: &[PolicySpec],
    verbose: bool,
) -> Result<PolicyChain, Failure> {
    let mut config = HostConfig::default();
    if args.no_cache {
        config.cache_dir = None;
    }
    config.max_memory_bytes = config.max_memory_bytes.max(args.memory);
    // The CLI evaluates one machine: a small pool is enough.
    config.max_instances = 4;
    let host = Host::new(config).map_err(runtime)?;
    let sources = nicpolicy::sources::Sources::with_registry(&host, args.registry.options()?);
    let chain = sources.loader(&host).load(specs).map_err(usage)?;
    for nicpolicy::oci::fetcher::FetchRecord {
        reference,
        immutable,
        fetched,
    } in sources.fetched()
    {
        match fetched {
            nicpolicy::oci::store::Fetched::StoredWhileUnreachable(why) => eprintln!(
                "warning: oci://{reference}: the registry cannot be reached ({why}); using \
                 {immutable}, pulled before"
            ),
            _ if verbose => eprintln!("oci://{reference}: {immutable} ({fetched:?})"),
            _ => {}
        }
    }
    for policy in chain.policies() {
        if let nicpolicy::cache::CacheStatus::Untrusted(why) = policy.cache_status() {
            eprintln!("warning: compiled-module cache not used: {why}");
        }
    }
    if verbose {
        for policy in chain.policies() {
            eprintln!(
                "loaded {} (sha256 {}) in {:.2} ms, cache: {}",
                policy.name(),
                policy.info().sha256,
                policy.load_time().as_secs_f64() * 1e3,
                policy.cache_status()
            );
        }
    }
    Ok(chain)
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, FromArgMatches, Parser};

    use super::*;

    /// `--settings` and the policy options, as `eval` and `test` take them.
    #[derive(Parser)]
    struct Line {
        #[arg(long = "settings")]
        settings: Vec<PathBuf>,
        #[command(flatten)]
        policy: PolicyArgs,
    }

    /// The specs for a command line, or the usage error's text.
    fn specs(args: &[&str]) -> Result<Vec<PolicySpec>, String> {
        let matches = Line::command()
            .try_get_matches_from(std::iter::once("eval").chain(args.iter().copied()))
            .map_err(|err| err.to_string())?;
        let line = Line::from_arg_matches(&matches).map_err(|err| err.to_string())?;
        policy_specs(&line.policy, &line.settings, &Positions::of(Some(&matches)))
            .map_err(|failure| failure.error.to_string())
    }

    fn file(path: &str) -> SettingsSource {
        SettingsSource::File(PathBuf::from(path))
    }

    #[test]
    fn an_option_belongs_to_the_policy_before_it() {
        let positions = Positions {
            policies: vec![2, 6],
            settings: vec![1, 4, 8],
            sha256: vec![],
            modes: vec![],
        };
        // Before every --policy: the first policy.
        assert_eq!(positions.owner(1), 0);
        assert_eq!(positions.owner(4), 0);
        assert_eq!(positions.owner(8), 1);
    }

    #[test]
    fn settings_and_digests_follow_their_policy() {
        let specs = specs(&[
            "--policy",
            "nic-limit.wasm",
            "--settings",
            "nic-limit.yaml",
            "--policy",
            "builtin:capvcd",
            "--sha256",
            "0d5a",
            "--settings",
            "capvcd.yaml",
        ])
        .expect("valid");
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[0].source, PolicySource::File("nic-limit.wasm".into()));
        assert_eq!(specs[0].settings, file("nic-limit.yaml"));
        assert_eq!(specs[0].sha256, None);
        assert_eq!(specs[1].source.label(), "builtin:capvcd");
        assert_eq!(specs[1].settings, file("capvcd.yaml"));
        assert_eq!(specs[1].sha256.as_deref(), Some("0d5a"));
    }

    #[test]
    fn options_before_every_policy_go_to_the_first() {
        let site = specs(&["--settings", "site.yaml", "--policy", "site.wasm"]).expect("valid");
        assert_eq!(site[0].settings, file("site.yaml"));
        // Without --policy, the built-in CAPVCD policy takes them.
        let default = specs(&["--settings", "capvcd.yaml", "--timeout", "250ms"]).expect("valid");
        assert_eq!(default[0].source.label(), "builtin:capvcd");
        assert_eq!(default[0].settings, file("capvcd.yaml"));
        assert_eq!(default[0].limits.timeout, Duration::from_millis(250));
    }

    #[test]
    fn a_policy_takes_one_settings_file_and_one_digest() {
        let err = specs(&[
            "--policy",
            "builtin:capvcd",
            "--settings",
            "a.yaml",
            "--settings",
            "b.yaml",
        ])
        .unwrap_err();
        assert!(
            err.starts_with("two --settings for builtin:capvcd"),
            "{err}"
        );
        let ok = specs(&[
            "--sha256", "0d5a", "--policy", "x.wasm", "--policy", "y.wasm", "--sha256", "0d5b",
        ])
        .expect("one digest each");
        assert_eq!(ok[0].sha256.as_deref(), Some("0d5a"));
        assert_eq!(ok[1].sha256.as_deref(), Some("0d5b"));
        let err =
            specs(&["--policy", "x.wasm", "--sha256", "0d5a", "--sha256", "0d5b"]).unwrap_err();
        assert!(err.starts_with("two --sha256 for x.wasm"), "{err}");
    }

    #[test]
    fn an_unknown_builtin_is_refused_with_the_names() {
        let err = specs(&["--policy", "builtin:storage-only"]).unwrap_err();
        assert!(
            err.contains("no built-in policy named `storage-only`; built-in policies: capvcd"),
            "{err}"
        );
    }
}
