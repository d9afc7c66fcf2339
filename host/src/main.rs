//! `nicpolicy`: evaluate and inspect CAPVCD network policies, and serve them as an admission
//! webhook. Each command lives in its own module under `cli/`.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

mod cli;

use cli::policy_args::Positions;

/// Exit codes, as documented in the README (0: allowed, every case passed, or a clean stop).
mod exit {
    /// The policy denied the machine; in `test`, a case failed.
    pub const DENIED: u8 = 1;
    /// Bad usage or input: flags, files, configuration, a module that is no valid policy,
    /// refused settings.
    pub const USAGE: u8 = 2;
    /// A failure at run time: the policy (trap, time limit, memory cap, bad output), the
    /// engine, or the server after it started.
    pub const RUNTIME: u8 = 3;
}

#[derive(Parser)]
#[command(
    name = "nicpolicy",
    version,
    about = "Network defaulting and validation for CAPVCD machines, as WebAssembly policies",
    after_help = "Exit codes: 0 allowed, 1 denied (test: a case failed), 2 bad usage or input, 3 failure at run time (the policy, the engine, or the server)."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Evaluate a policy for one machine and print its decision (NIC plan, violations).
    Eval(cli::eval::EvalArgs),
    /// Show a policy module's metadata, imports, exports and sha256.
    Inspect(cli::inspect::InspectArgs),
    /// Run case files (manifests plus the expected decision) against a policy.
    Test(cli::test::TestArgs),
    /// Run the admission webhook (HTTPS) that defaults and validates VCDMachines and
    /// VCDMachineTemplates with the configured policies.
    Serve(cli::serve::ServeArgs),
    /// Answer one AdmissionReview from a file and print the response, as the webhook would.
    Review(cli::review::ReviewArgs),
    /// Write a built-in policy module to a file (for a ConfigMap or a site's own chain).
    Export(cli::export::ExportArgs),
    /// Read the org VDC networks from Cloud Director (`inventory import`) into an inventory.
    Inventory(cli::inventory::InventoryArgs),
    /// Push a policy module to an OCI registry (Kubewarden's layout) and print the immutable
    /// reference (host/repo@sha256:...) to pin in a configuration.
    Push(cli::push::PushArgs),
    /// Pull a policy module from an OCI registry (Kubewarden's or the CNCF Wasm layout),
    /// check it and write it to a file.
    Pull(cli::pull::PullArgs),
    /// Copy a policy module from one registry to another (an air-gapped mirror) with its
    /// manifest digest and signatures, checked on the way, and print the copy's immutable
    /// reference.
    Copy(cli::copy::CopyArgs),
    /// Sign a policy module in a registry with a cosign key pair (the signature goes beside it,
    /// where `cosign verify --key` and the webhook's verification read it).
    Sign(cli::sign::SignArgs),
    /// Check that a policy module in a registry is signed by one of the given public keys.
    Verify(cli::verify::VerifyArgs),
    /// Write a new cosign key pair (PREFIX.key sealed with COSIGN_PASSWORD, PREFIX.pub).
    GenerateKeyPair(cli::sign::GenerateKeyPairArgs),
    /// Time policies on the requests of case files: compile and cache-load time, evaluation
    /// p50/p99 and peak memory per case, beside the built-in CAPVCD policy.
    Bench(cli::bench::BenchArgs),
    /// Start a site policy: write a crate with typed settings, one rule on top of the CAPVCD
    /// rules, unit tests, case files and a CI workflow, and print how to build and test it.
    New(cli::new::NewArgs),
    /// Serve the playground page: paste manifests, see every machine's NICs drawn and decided
    /// by the built-in policies, in the browser.
    Playground(cli::playground::PlaygroundArgs),
    /// Evaluate every machine and machine template of manifest folders or of a live cluster,
    /// grouped by cluster, optionally beside a candidate chain (shadow mode).
    Audit(cli::audit::AuditArgs),
    /// Print the shell completion script for bash, zsh or fish (source it, or install it
    /// where the shell loads completions).
    Completion {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write a machine's NIC plan as the documents that build it: the Cloud Director
    /// NetworkConnectionSection (vcd) and the guest's cloud-init network config
    /// (network-config).
    Render(cli::render_plan::RenderArgs),
    /// Audit the cluster continuously: reports (OpenReports or PolicyReports), Events and
    /// metrics for every VCDMachine and VCDMachineTemplate, with an optional candidate chain
    /// (shadow mode).
    Controller(cli::controller::ControllerArgs),
}

/// What `--version` prints: the version, the ABI and request formats this host speaks, and
/// the sha256 of each built-in policy (what `builtin:NAME` loads, as `nicpolicy inspect` and a
/// configuration's `sha256` pin name it).
fn long_version() -> String {
    let mut text = format!(
        "{}\nABI: nicpolicy v{} (requests: JSON, binary v1, binary v2, binary v3)\nbuilt-in policies:",
        env!("CARGO_PKG_VERSION"),
        nicpolicy::plugin::abi::ABI_VERSION
    );
    for policy in nicpolicy::builtin::POLICIES {
        text.push_str(&format!(
            "\n  {:<12} sha256 {}",
            policy.name,
            nicpolicy::inspect::sha256_hex(policy.wasm)
        ));
    }
    text
}

/// The argument that makes this program a compiler child ([`nicpolicy::compiler`]), started by
/// `serve` and `controller` themselves. Not a command of the CLI: no help, completion or
/// suggestion shows it.
const COMPILE_MODULE: &str = "__compile-module";

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    if args.next().is_some_and(|first| first == COMPILE_MODULE) {
        let settings = args.next().unwrap_or_default();
        return ExitCode::from(nicpolicy::compiler::child_main(&settings.to_string_lossy()));
    }
    // Parsed in two steps: the raw matches keep where each option stood, which decides the
    // policy a --settings or --sha256 belongs to.
    // Built once per run; clap keeps `'static` text.
    let version: &'static str = Box::leak(long_version().into_boxed_str());
    let matches = Cli::command().long_version(version).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|err| err.exit());
    let positions = Positions::of(matches.subcommand().map(|(_, m)| m));
    let candidate_positions = Positions::of_candidates(matches.subcommand().map(|(_, m)| m));
    // `render vcd` and `render network-config` take their policy options one level down.
    let nested_positions = Positions::of(
        matches
            .subcommand()
            .and_then(|(_, m)| m.subcommand())
            .map(|(_, m)| m),
    );
    let result = match cli.command {
        Command::Eval(args) => cli::eval::run(args, &positions),
        Command::Inspect(args) => cli::inspect::run(args),
        Command::Test(args) => cli::test::run(args, &positions),
        Command::Serve(args) => cli::serve::run(args),
        Command::Review(args) => cli::review::run(args),
        Command::Export(args) => cli::export::run(args),
        Command::Inventory(args) => cli::inventory::run(args),
        Command::Push(args) => cli::push::run(args),
        Command::Pull(args) => cli::pull::run(args),
        Command::Copy(args) => cli::copy::run(args),
        Command::Sign(args) => cli::sign::run_sign(args),
        Command::Verify(args) => cli::verify::run(args),
        Command::GenerateKeyPair(args) => cli::sign::run_generate(args),
        Command::New(args) => cli::new::run(args),
        Command::Bench(args) => cli::bench::run(args, &positions),
        Command::Playground(args) => cli::playground::run(args),
        Command::Audit(args) => cli::audit::run(args, &positions, &candidate_positions),
        Command::Completion { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "nicpolicy", &mut script);
            cli::out::print(&String::from_utf8_lossy(&script)).map(|()| 0)
        }
        Command::Render(args) => cli::render_plan::run(args, &nested_positions),
        Command::Controller(args) => cli::controller::run(args),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            eprintln!("error: {:#}", failure.error);
            ExitCode::from(failure.code)
        }
    }
}
