//! Typed errors at the library boundary.

use std::path::PathBuf;
use std::time::Duration;

/// Why a policy module could not be loaded. Every variant means the module was refused before
/// it evaluated anything.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("{}: cannot read: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },
    /// The module is larger than [`MAX_MODULE_BYTES`](crate::limits::MAX_MODULE_BYTES); refused
    /// before it is parsed or compiled.
    #[error("the module is {size} bytes, over the {limit}-byte limit for a policy module (a debug build? build with `--release`, or `--profile policy` in the nicpolicy workspace: optimised and stripped)")]
    TooLarge {
        /// Module size in bytes.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The module holds more code than a compile may take on: compiling it could use more
    /// memory than the webhook's pod has. Refused before compiling.
    #[error("the module has {found} {what}, over the limit of {limit} for a policy module (compiling it would take too much memory)")]
    TooComplex {
        /// What is counted, such as "functions".
        what: &'static str,
        /// How many the module has.
        found: u64,
        /// The limit.
        limit: u64,
    },
    /// The module's memories are not one unshared 32-bit memory, which is all the host's
    /// memory limit can bound as a whole (docs/abi.md).
    #[error("the module has {0}; a policy has one linear memory, 32-bit and not shared (the host's memory limit bounds exactly that)")]
    Memory(String),
    /// The bytes are not a WebAssembly binary module.
    #[error("not a WebAssembly module: {0}")]
    NotWasm(String),
    /// The binary is malformed or does not validate.
    #[error("invalid WebAssembly module: {0}")]
    Invalid(String),
    /// The module implements another ABI version.
    #[error("ABI version mismatch: the module implements ABI v{found}, this host speaks ABI v{expected}")]
    AbiMismatch {
        /// What `nicpolicy_abi_version` (or the metadata) said.
        found: i64,
        /// What the host speaks.
        expected: u32,
    },
    /// A required export is missing.
    #[error("missing export `{name}`: ABI v1 needs `{name}` as {expected} (a Rust policy gets every export from `nicpolicy_plugin::export_policy!`, built for wasm32-unknown-unknown; docs/abi.md lists them)")]
    MissingExport {
        /// Export name.
        name: &'static str,
        /// Its required type.
        expected: &'static str,
    },
    /// An export has the wrong type.
    #[error("export `{name}` is {found}, but ABI v1 needs {expected}")]
    ExportType {
        /// Export name.
        name: &'static str,
        /// Its type in the module.
        found: String,
        /// Its required type.
        expected: &'static str,
    },
    /// The module imports something the host does not provide.
    #[error("forbidden import `{module}.{name}` ({ty}): a policy may import only `nicpolicy.log` as func (i32, i32, i32) -> ()")]
    ForbiddenImport {
        /// Import module.
        module: String,
        /// Import name.
        name: String,
        /// Its type.
        ty: String,
    },
    /// The module is a Kubewarden (waPC) build: it runs in Kubewarden, not in this host.
    #[error("this is a Kubewarden (waPC) policy module; nicpolicy runs ABI v1 modules (`nicpolicy export NAME` without `--format kubewarden`)")]
    KubewardenModule,
    /// The metadata custom section is not valid JSON of the documented shape.
    #[error("custom section `nicpolicy.metadata` is not valid: {0}")]
    BadMetadata(String),
    /// The module's digest differs from the pinned one.
    #[error("sha256 mismatch: expected {expected}, the module is {actual}")]
    DigestMismatch {
        /// The pinned digest.
        expected: String,
        /// The module's digest.
        actual: String,
    },
    /// Compilation failed.
    #[error("cannot compile the module: {0}")]
    Compile(String),
    /// Compiling took longer than [`HostConfig::compile_timeout`](crate::HostConfig); the
    /// compile was abandoned.
    #[error("the module did not compile within {}s; a module this slow to compile is refused", limit.as_secs_f64())]
    CompileTimeout {
        /// The limit.
        limit: std::time::Duration,
    },
    /// The requested limits do not fit the host.
    #[error("invalid limits: {0}")]
    Limits(String),
    /// The policy refused its settings.
    #[error("settings refused by the policy: {0}")]
    Settings(String),
    /// The policy refused the settings read from a file.
    #[error("settings in {} refused by the policy: {reason}", path.display())]
    SettingsFileRefused {
        /// The settings file.
        path: PathBuf,
        /// The policy's reason.
        reason: String,
    },
    /// A settings file could not be read or parsed.
    #[error(transparent)]
    SettingsFile(Box<nicpolicy_inputs::manifest::ManifestError>),
    /// No built-in policy has this name.
    #[error("no built-in policy named `{name}`; built-in policies: {known}")]
    UnknownBuiltin {
        /// The name asked for.
        name: String,
        /// The names there are, joined by `, ` (`none` in a build without them).
        known: String,
    },
    /// A module could not be got from its registry (`oci://`): the reference and why.
    #[error("{0}")]
    Registry(String),
    /// A fetched module could not be got: its source (`scheme:reference`) and why.
    #[error("{module}: {reason}")]
    Fetch {
        /// The source as written.
        module: String,
        /// Why it could not be got.
        reason: String,
    },
    /// A source names a scheme the loader has no fetcher for.
    #[error("{scheme}{reference}: nothing here fetches `{scheme}` modules (known: {known})")]
    NoFetcher {
        /// The scheme, as written (`oci://`).
        scheme: String,
        /// The reference after it.
        reference: String,
        /// The schemes the loader fetches, joined by `, ` (`none`).
        known: String,
    },
    /// A chain was given no policy at all.
    #[error("a chain needs at least one policy")]
    EmptyChain,
    /// Calling the module while loading it failed (ABI version or settings check).
    #[error("the policy failed while loading: {0}")]
    Runtime(EvalError),
}

/// Why an evaluation produced no decision. The host stays usable after any of them.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// The policy ran past its time limit and was interrupted.
    #[error("the policy exceeded its time limit of {}ms", .0.as_millis())]
    Timeout(Duration),
    /// The policy tried to use more memory than its cap.
    #[error("the policy exceeded its memory limit of {limit} bytes")]
    MemoryLimit {
        /// The cap in bytes.
        limit: usize,
    },
    /// The policy trapped.
    #[error("the policy trapped: {message}")]
    Trap {
        /// Trap description with the Wasm backtrace when there is one.
        message: String,
    },
    /// The policy's output is not what ABI v1 requires.
    #[error("the policy returned bad output: {0}")]
    BadOutput(String),
    /// The policy returned `{"error": ...}`: it could not decide.
    #[error("the policy reported an error: {0}")]
    Policy(String),
    /// The input JSON is over the cap.
    #[error("the input is {size} bytes, over the {limit}-byte limit")]
    InputTooLarge {
        /// Input size.
        size: usize,
        /// The cap.
        limit: usize,
    },
    /// The output JSON is over the cap.
    #[error("the policy's output is {size} bytes, over the {limit}-byte limit")]
    OutputTooLarge {
        /// Output size.
        size: usize,
        /// The cap.
        limit: usize,
    },
    /// The host could not make an instance (for example, all instance slots busy).
    #[error("cannot instantiate the policy: {0}")]
    Instantiate(String),
    /// A time, memory or output limit hit on an input larger than a
    /// [`LARGE_INPUT_SHARE`](crate::LARGE_INPUT_SHARE)th of the input cap: the
    /// request's size, not the policy, is taken to have caused it.
    #[error("{cause} on an input of {size} bytes (over 1/{share} of the {limit}-byte input limit)", share = crate::limits::LARGE_INPUT_SHARE)]
    LimitOnLargeInput {
        /// The limit hit: [`EvalError::Timeout`], [`EvalError::MemoryLimit`] or
        /// [`EvalError::OutputTooLarge`].
        cause: Box<EvalError>,
        /// Input size.
        size: usize,
        /// The input cap.
        limit: usize,
    },
}

impl EvalError {
    /// Whether the request caused the failure (its size or shape), not the policy or the host.
    /// Such a failure is the request's fault: it is answered as a denial, whatever the
    /// webhook's `onPolicyFailure` says; fail-open is only for faults of the policy or the host
    /// (trap, time limit, memory cap, bad output).
    pub fn is_request_fault(&self) -> bool {
        matches!(
            self,
            EvalError::InputTooLarge { .. } | EvalError::LimitOnLargeInput { .. }
        )
    }

    /// Whether this is a time, memory or output limit (of the policy's [`Limits`](crate::limits::Limits)).
    pub fn is_resource_limit(&self) -> bool {
        matches!(
            self,
            EvalError::Timeout(_)
                | EvalError::MemoryLimit { .. }
                | EvalError::OutputTooLarge { .. }
        )
    }

    /// A short stable name for the kind of failure (for metrics and logs).
    pub fn kind(&self) -> &'static str {
        match self {
            EvalError::Timeout(_) => "timeout",
            EvalError::MemoryLimit { .. } => "memory",
            EvalError::Trap { .. } => "trap",
            EvalError::BadOutput(_) => "bad_output",
            EvalError::Policy(_) => "policy_error",
            EvalError::InputTooLarge { .. } => "input_too_large",
            EvalError::OutputTooLarge { .. } => "output_too_large",
            EvalError::Instantiate(_) => "instantiate",
            EvalError::LimitOnLargeInput { .. } => "limit_on_large_input",
        }
    }
}
