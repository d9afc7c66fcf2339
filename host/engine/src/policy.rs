//! A loaded policy: compiled once, instantiated afresh for every call.

use std::path::Path;
use std::time::{Duration, Instant};

use nicpolicy_plugin::abi::{self, LogLevel};
use nicpolicy_plugin::backstop::{Backstop, BackstopOutput, BackstopRequest, BACKSTOP_VERSION};
use nicpolicy_plugin::binary;
use nicpolicy_plugin::schema::{EvaluateOutput, RequestRef, SettingsValidation};
use nicpolicy_plugin::{Decision, Inventory, ObjectKind, Request};
use serde_json::Value;
use wasmtime::{
    Caller, Extern, InstancePre, Linker, ModuleExport, ResourceLimiter, Store, Trap, TypedFunc,
};

use crate::cache::CacheStatus;
use crate::engine::Host;
use crate::error::{EvalError, LoadError};
use crate::inspect::{inspect, ModuleInfo};
use crate::limits::{Budget, Limits};
use crate::stages::{self, Stage};

/// How to load a policy.
#[derive(Clone, Debug, Default)]
pub struct PolicyOptions {
    /// Limits for every call into the policy.
    pub limits: Limits,
    /// The policy's settings (JSON `null` for none); checked by the policy at load.
    pub settings: Value,
    /// Refuse the module unless its sha256 is this (hex).
    pub sha256: Option<String>,
}

/// One line the policy logged through `nicpolicy.log`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// Severity.
    pub level: LogLevel,
    /// The text (lossy UTF-8) with control characters escaped ([`escape_log_text`]), so it
    /// can be printed as one line beside the host's own output.
    pub message: String,
}

/// `text` as one printable line: control characters (line breaks, escape sequences, C1
/// controls) and the Unicode direction overrides are written as Rust escapes (`\n`,
/// `\u{1b}`, `\u{202e}`), so a policy's log line can neither start a line of its own (a fake
/// `error:` line) nor drive the terminal.
pub fn escape_log_text(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| {
        c.is_control()
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// The result of one evaluation.
#[derive(Clone, Debug)]
pub struct Evaluation {
    /// What the policy decided.
    pub decision: Decision,
    /// What it logged.
    pub logs: Vec<LogLine>,
    /// Wall-clock time of the call, instantiation included.
    pub elapsed: Duration,
    /// The instance's linear memory when the call ended: its peak, since a memory never
    /// shrinks (what `nicpolicy bench` reports beside the policy's `memory` limit).
    pub memory_bytes: usize,
    /// The Wasm fuel the call consumed, instantiation included, on a host that counts it
    /// ([`crate::HostConfig::count_fuel`]); the same for the same module and input on any
    /// machine.
    pub fuel: Option<u64>,
}

/// The fuel a store starts with on a host that counts it: more than any call can use within
/// a time limit, so it only counts.
const FUEL_COUNTED: u64 = u64::MAX / 2;

/// Most log lines kept per call; more are counted, not stored.
const MAX_LOG_LINES: usize = 64;
/// Most bytes of one log line kept.
const MAX_LOG_LINE_BYTES: usize = 4096;
/// Most table elements an instance may grow to (Rust policies use a few hundred).
const MAX_TABLE_ELEMENTS: usize = 100_000;

/// Per-call state inside the store.
struct State {
    memory_limit: usize,
    memory_limit_hit: bool,
    logs: Vec<LogLine>,
    dropped_logs: usize,
}

impl ResourceLimiter for State {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_limit {
            // Remember why growth failed: the guest usually traps right after.
            self.memory_limit_hit = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}

/// Export handles resolved once per module, so calls skip name lookups.
#[derive(Clone, Copy)]
struct Exports {
    memory: ModuleExport,
    abi_version: ModuleExport,
    alloc: ModuleExport,
    evaluate: ModuleExport,
    validate_settings: ModuleExport,
    /// `nicpolicy_evaluate_binary1`, when the module has it.
    evaluate_binary1: Option<ModuleExport>,
    /// `nicpolicy_evaluate_binary2`, when the module has it.
    evaluate_binary2: Option<ModuleExport>,
    /// `nicpolicy_evaluate_binary3`, when the module has it.
    evaluate_binary3: Option<ModuleExport>,
    /// `nicpolicy_evaluate_binary4` (binary v3 without NIC sources), when the module has it.
    evaluate_binary4: Option<ModuleExport>,
    /// `nicpolicy_backstop`, when the module has it.
    backstop: Option<ModuleExport>,
}

pub use crate::inspect::RequestFormat;

/// Reads what an evaluation export returned: [`decode_decision`] or [`decode_binary_decision`].
type DecodeOutput = fn(&[u8]) -> Result<Decision, EvalError>;

// Loading lives beside the policy it makes, so the engine knows nothing of policies.
impl Host {
    /// Loads a policy from module bytes: inspect, ABI checks, compile, settings check.
    ///
    /// # Errors
    /// A [`LoadError`]: the module is not a valid ABI v1 policy, does not match its pinned
    /// digest, cannot be compiled in time, asks for limits the host cannot give, or refuses its
    /// settings.
    pub fn load(&self, bytes: &[u8], options: PolicyOptions) -> Result<Policy, LoadError> {
        Policy::load(self, bytes, options)
    }

    /// Loads a policy from a `.wasm` file.
    ///
    /// # Errors
    /// [`LoadError::Read`] when the file cannot be read; otherwise as for [`Host::load`].
    pub fn load_file(&self, path: &Path, options: PolicyOptions) -> Result<Policy, LoadError> {
        let bytes = crate::inspect::read_module(path)?;
        self.load(&bytes, options)
    }
}

/// A policy module ready to evaluate. `Send + Sync`: share it across threads; each call gets its
/// own store and instance, so calls never see each other's state. Cloning is cheap and shares
/// the compiled module.
#[derive(Clone)]
pub struct Policy {
    info: ModuleInfo,
    /// [`Policy::name`], made once: it is in every evaluation's result.
    name: std::sync::Arc<str>,
    limits: Limits,
    settings: Value,
    pre: InstancePre<State>,
    exports: Exports,
    /// What [`Policy::evaluate`] sends: the binary format when the module takes it.
    request_format: RequestFormat,
    /// Whether the NICs' sources are read ([`Policy::with_nic_sources`]).
    nic_sources: bool,
    /// The policy's time limit in epoch ticks.
    deadline_ticks: u64,
    /// The host's epoch tick, to turn a [`Budget`] into ticks.
    epoch_tick: Duration,
    /// Whether the engine counts fuel ([`crate::HostConfig::count_fuel`]).
    count_fuel: bool,
    cache_status: CacheStatus,
    load_time: Duration,
}

impl Policy {
    pub(crate) fn load(
        host: &Host,
        bytes: &[u8],
        options: PolicyOptions,
    ) -> Result<Policy, LoadError> {
        let started = Instant::now();
        let info = inspect(bytes)?;
        if let Some(expected) = &options.sha256 {
            if !expected.eq_ignore_ascii_case(&info.sha256) {
                return Err(LoadError::DigestMismatch {
                    expected: expected.to_ascii_lowercase(),
                    actual: info.sha256,
                });
            }
        }
        info.check_abi()?;
        let config = host.config();
        info.code.check(&config.compile_bounds)?;
        if config.pooling && options.limits.memory_bytes > config.max_memory_bytes {
            return Err(LoadError::Limits(format!(
                "a memory limit of {} bytes is above the host's maximum of {} bytes",
                options.limits.memory_bytes, config.max_memory_bytes
            )));
        }

        let (module, cache_status) = host.compile(bytes, &info.sha256)?;
        let mut linker: Linker<State> = Linker::new(host.engine());
        linker
            .func_wrap(abi::LOG_IMPORT_MODULE, abi::LOG_IMPORT_NAME, host_log)
            .map_err(|err| LoadError::Compile(format!("{err:#}")))?;
        let pre = linker
            .instantiate_pre(&module)
            .map_err(|err| LoadError::Compile(format!("{err:#}")))?;
        let export = |name: &'static str| {
            module
                .get_export_index(name)
                .ok_or(LoadError::MissingExport {
                    name,
                    expected: "an export",
                })
        };
        let exports = Exports {
            memory: export(abi::EXPORT_MEMORY)?,
            abi_version: export(abi::EXPORT_ABI_VERSION)?,
            alloc: export(abi::EXPORT_ALLOC)?,
            evaluate: export(abi::EXPORT_EVALUATE)?,
            validate_settings: export(abi::EXPORT_VALIDATE_SETTINGS)?,
            // Its type was checked with the others (ModuleInfo::check_abi).
            evaluate_binary1: module.get_export_index(abi::EXPORT_EVALUATE_BINARY1),
            evaluate_binary2: module.get_export_index(abi::EXPORT_EVALUATE_BINARY2),
            evaluate_binary3: module.get_export_index(abi::EXPORT_EVALUATE_BINARY3),
            evaluate_binary4: module.get_export_index(abi::EXPORT_EVALUATE_BINARY4),
            backstop: module.get_export_index(abi::EXPORT_BACKSTOP),
        };
        // The newest (and fastest) format the module takes.
        let request_format = info
            .request_formats()
            .last()
            .copied()
            .unwrap_or(RequestFormat::Json);
        let deadline_ticks = ticks(options.limits.timeout, config.epoch_tick);

        let name = match &info.metadata {
            // The name is the module's own text and ends up in logs and messages.
            Some(meta) => escape_log_text(&meta.name).into_owned(),
            None => format!("sha256:{}", &info.sha256[..12]),
        };
        let policy = Policy {
            name: name.into(),
            info,
            limits: options.limits,
            settings: Value::Null,
            pre,
            exports,
            request_format,
            nic_sources: true,
            deadline_ticks,
            epoch_tick: config.epoch_tick,
            count_fuel: config.count_fuel,
            cache_status,
            load_time: Duration::ZERO,
        };
        let version = policy.abi_version().map_err(LoadError::Runtime)?;
        if version != i64::from(abi::ABI_VERSION) {
            return Err(LoadError::AbiMismatch {
                found: version,
                expected: abi::ABI_VERSION,
            });
        }
        let mut policy = policy.with_settings(options.settings)?;
        policy.load_time = started.elapsed();
        Ok(policy)
    }

    /// The same compiled policy with other settings, checked by the policy first.
    ///
    /// # Errors
    /// [`LoadError::Settings`] when the policy refuses them, [`LoadError::Runtime`] when the
    /// check itself fails.
    pub fn with_settings(&self, settings: Value) -> Result<Policy, LoadError> {
        self.validate_settings(&settings)
            .map_err(LoadError::Runtime)?
            .map_err(LoadError::Settings)?;
        Ok(Policy {
            settings,
            ..self.clone()
        })
    }

    /// The same compiled policy with another input cap ([`Limits::max_input_bytes`]).
    pub fn with_max_input_bytes(&self, bytes: usize) -> Policy {
        let mut policy = self.clone();
        policy.limits.max_input_bytes = bytes;
        policy
    }

    /// The same compiled policy sending its requests in `format`.
    ///
    /// # Errors
    /// [`LoadError::MissingExport`] when the module does not take `format`.
    pub fn with_request_format(&self, format: RequestFormat) -> Result<Policy, LoadError> {
        if self.route(format).is_none() {
            return Err(LoadError::MissingExport {
                name: format.export(),
                expected: "func (i32, i32) -> i64",
            });
        }
        Ok(Policy {
            request_format: format,
            ..self.clone()
        })
    }

    /// The same compiled policy, its decisions' NICs with sources (`true`, the default: what
    /// `--explain`, the playground and case files that name sources read) or without (`false`:
    /// for callers that read only the violations' sources, such as the webhook and the
    /// controller). Without, a module that exports `nicpolicy_evaluate_binary4` is asked for
    /// a decision without NIC sources and skips building them; other modules answer as
    /// before, and their NICs' sources are dropped. Violations keep their sources either way.
    pub fn with_nic_sources(&self, wanted: bool) -> Policy {
        Policy {
            nic_sources: wanted,
            ..self.clone()
        }
    }

    /// Whether the decisions' NICs carry sources ([`Policy::with_nic_sources`]).
    pub fn nic_sources(&self) -> bool {
        self.nic_sources
    }

    /// The export that takes `format` and the reader of what it returns; `None` when the
    /// module does not have the export.
    fn route(&self, format: RequestFormat) -> Option<(&ModuleExport, DecodeOutput)> {
        let exports = &self.exports;
        match format {
            RequestFormat::Binary3 if !self.nic_sources && exports.evaluate_binary4.is_some() => {
                Some((exports.evaluate_binary4.as_ref()?, decode_binary_decision))
            }
            RequestFormat::Json => Some((&exports.evaluate, decode_decision)),
            RequestFormat::Binary1 => Some((exports.evaluate_binary1.as_ref()?, decode_decision)),
            RequestFormat::Binary2 => {
                Some((exports.evaluate_binary2.as_ref()?, decode_binary_decision))
            }
            RequestFormat::Binary3 => {
                Some((exports.evaluate_binary3.as_ref()?, decode_binary_decision))
            }
        }
    }

    /// How [`Policy::evaluate`] sends requests: the newest binary format the module takes,
    /// JSON when it takes none.
    pub fn request_format(&self) -> RequestFormat {
        self.request_format
    }

    /// What the module declares.
    pub fn info(&self) -> &ModuleInfo {
        &self.info
    }

    /// The policy's name from its metadata, or its digest when it has none.
    pub fn name(&self) -> String {
        self.name.to_string()
    }

    /// The limits every call runs under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The settings sent with every request.
    pub fn settings(&self) -> &Value {
        &self.settings
    }

    /// Whether the compiled module came from the cache.
    pub fn cache_status(&self) -> &CacheStatus {
        &self.cache_status
    }

    /// Time the load took (inspect, compile or cache load, ABI and settings checks).
    pub fn load_time(&self) -> Duration {
        self.load_time
    }

    /// Evaluates one request in a fresh instance, under the policy's limits. The request's own
    /// `settings` are replaced by the policy's.
    ///
    /// # Errors
    /// An [`EvalError`] when the call produced no decision: time limit, memory cap, trap, bad
    /// or oversized output, an oversized request, the policy's own error, or no free instance
    /// slot. The policy stays usable.
    pub fn evaluate(&self, request: &Request) -> Result<Evaluation, EvalError> {
        self.evaluate_within(request, None)
    }

    /// [`Policy::evaluate`], cut short when `budget` is spent before the policy's own time
    /// limit (then [`Budget::overran`] is set and the result is to be discarded).
    ///
    /// # Errors
    /// As for [`Policy::evaluate`].
    pub fn evaluate_within(
        &self,
        request: &Request,
        budget: Option<&Budget>,
    ) -> Result<Evaluation, EvalError> {
        let request = request.with_settings(&self.settings);
        // `request_format` always has its export (`with_request_format` checks).
        let (format, (export, decode)) = match self.route(self.request_format) {
            Some(route) => (self.request_format, route),
            None => (
                RequestFormat::Json,
                (&self.exports.evaluate, decode_decision as DecodeOutput),
            ),
        };
        let input = match format {
            RequestFormat::Json => encode_request(request).map_err(|err| err.to_string()),
            RequestFormat::Binary1 | RequestFormat::Binary2 | RequestFormat::Binary3 => {
                let mut input = Vec::with_capacity(1024);
                binary::encode(request, &mut input)
                    .map(|()| input)
                    .map_err(|err| err.to_string())
            }
        }
        .map_err(|err| EvalError::BadOutput(format!("cannot encode the request: {err}")))?;
        stages::mark(Stage::RequestEncode);
        let mut evaluation = self.evaluate_export(export, &input, budget, decode)?;
        if !self.nic_sources {
            // Modules without `nicpolicy_evaluate_binary4` still send them.
            for nic in &mut evaluation.decision.nics {
                nic.source = None;
            }
        }
        Ok(evaluation)
    }

    /// Evaluates a request given as JSON bytes, exactly as they are sent to the policy.
    ///
    /// # Errors
    /// As for [`Policy::evaluate`].
    pub fn evaluate_json(&self, input: &[u8]) -> Result<Evaluation, EvalError> {
        self.evaluate_export(&self.exports.evaluate, input, None, decode_decision)
    }

    /// Evaluates a request given in the binary format, exactly as the bytes are sent to the
    /// policy (they need not be a valid request: the policy answers what it cannot read with
    /// an error), through the export of [`Policy::request_format`] (`nicpolicy_evaluate_binary1`
    /// when that is JSON). `None` when the module does not take the binary format.
    ///
    /// # Errors
    /// As for [`Policy::evaluate`].
    pub fn evaluate_binary(&self, input: &[u8]) -> Option<Result<Evaluation, EvalError>> {
        let format = match self.request_format {
            RequestFormat::Json => RequestFormat::Binary1,
            binary => binary,
        };
        let (export, decode) = self.route(format)?;
        Some(self.evaluate_export(export, input, None, decode))
    }

    fn evaluate_export(
        &self,
        export: &ModuleExport,
        input: &[u8],
        budget: Option<&Budget>,
        decode: DecodeOutput,
    ) -> Result<Evaluation, EvalError> {
        let started = Instant::now();
        let (decision, logs, memory_bytes, fuel) = self.call(export, input, budget, decode)?;
        Ok(Evaluation {
            decision,
            logs,
            elapsed: started.elapsed(),
            memory_bytes,
            fuel,
        })
    }

    /// Asks the policy whether `settings` are valid: `Ok(Err(reason))` when it refuses them.
    ///
    /// # Errors
    /// An [`EvalError`] when the check itself fails (as for [`Policy::evaluate`]).
    pub fn validate_settings(&self, settings: &Value) -> Result<Result<(), String>, EvalError> {
        let input = serde_json::to_vec(settings)
            .map_err(|err| EvalError::BadOutput(format!("cannot encode the settings: {err}")))?;
        let (verdict, _logs, _, _) = self.call(&self.exports.validate_settings, &input, None, |bytes| {
            let verdict: SettingsValidation = serde_json::from_slice(bytes).map_err(|err| {
                EvalError::BadOutput(format!(
                    "nicpolicy_validate_settings must return {{\"valid\": bool, \"message\": string}}: {err}"
                ))
            })?;
            Ok(verdict)
        })?;
        Ok(match verdict {
            SettingsValidation { valid: true, .. } => Ok(()),
            SettingsValidation { message, .. } => {
                Err(message.unwrap_or_else(|| "no reason given".to_string()))
            }
        })
    }

    /// The policy's backstop for `kind` with its settings ([`nicpolicy_plugin::backstop`]):
    /// `Ok(None)` for a module without `nicpolicy_backstop`. Parameter keys start with
    /// `param_prefix`.
    ///
    /// # Errors
    /// An [`EvalError`] when the call fails or answers garbage; [`EvalError::BadOutput`] with
    /// the policy's reason when it refuses the request.
    pub fn backstop(
        &self,
        kind: ObjectKind,
        param_prefix: &str,
    ) -> Result<Option<Backstop>, EvalError> {
        let Some(export) = &self.exports.backstop else {
            return Ok(None);
        };
        let request = BackstopRequest {
            version: BACKSTOP_VERSION,
            kind,
            settings: self.settings.clone(),
            param_prefix: param_prefix.to_string(),
        };
        let input = serde_json::to_vec(&request).map_err(|err| {
            EvalError::BadOutput(format!("cannot encode the backstop request: {err}"))
        })?;
        let (output, _logs, _, _) = self.call(export, &input, None, |bytes| {
            serde_json::from_slice::<BackstopOutput>(bytes).map_err(|err| {
                EvalError::BadOutput(format!(
                    "nicpolicy_backstop must return {{\"backstop\": ...}} or {{\"error\": string}}: {err}"
                ))
            })
        })?;
        match output {
            BackstopOutput::Backstop(backstop) if backstop.version == BACKSTOP_VERSION => {
                Ok(Some(backstop))
            }
            BackstopOutput::Backstop(backstop) => Err(EvalError::BadOutput(format!(
                "nicpolicy_backstop answered version {}, not {BACKSTOP_VERSION}",
                backstop.version
            ))),
            BackstopOutput::Error(error) => Err(EvalError::BadOutput(format!(
                "nicpolicy_backstop refused: {error}"
            ))),
        }
    }

    fn new_store(&self, deadline_ticks: u64) -> Store<State> {
        let mut store = Store::new(
            self.pre.module().engine(),
            State {
                memory_limit: self.limits.memory_bytes,
                memory_limit_hit: false,
                logs: Vec::new(),
                dropped_logs: 0,
            },
        );
        store.limiter(|state| state as &mut dyn ResourceLimiter);
        store.set_epoch_deadline(deadline_ticks);
        store.epoch_deadline_trap();
        if self.count_fuel {
            // Counted, not limited: the epoch deadline bounds the time. An engine that counts
            // fuel always accepts an amount.
            let _ = store.set_fuel(FUEL_COUNTED);
        }
        store
    }

    fn abi_version(&self) -> Result<i64, EvalError> {
        let mut store = self.new_store(self.deadline_ticks);
        let instance = self
            .pre
            .instantiate(&mut store)
            .map_err(|err| self.classify(err, &store, true))?;
        let func: TypedFunc<(), i32> = typed(&mut store, &instance, &self.exports.abi_version)?;
        let version = func
            .call(&mut store, ())
            .map_err(|err| self.classify(err, &store, false))?;
        Ok(i64::from(version))
    }

    /// One call: fresh store and instance, input copied in, output decoded in place; cut at
    /// `budget` when that comes before the policy's time limit.
    fn call<R>(
        &self,
        export: &ModuleExport,
        input: &[u8],
        budget: Option<&Budget>,
        decode: impl FnOnce(&[u8]) -> Result<R, EvalError>,
    ) -> Result<(R, Vec<LogLine>, usize, Option<u64>), EvalError> {
        if let Some(budget) = budget.filter(|budget| budget.overran()) {
            // Spent by an earlier evaluation of the same attempt: it is to be run again anyway.
            return Err(EvalError::Timeout(budget.time()));
        }
        let budget = budget
            .map(|budget| (budget, ticks(budget.time(), self.epoch_tick)))
            .filter(|(_, ticks)| *ticks < self.deadline_ticks);
        let deadline = budget.map_or(self.deadline_ticks, |(_, ticks)| ticks);
        let result = self.call_until(export, input, deadline, decode);
        if let (Err(EvalError::Timeout(_)), Some((budget, _))) = (&result, budget) {
            budget.cut();
            return Err(EvalError::Timeout(budget.time()));
        }
        result.map_err(|err| self.on_input_of(input.len(), err))
    }

    /// `err` as the request's fault when it is a resource limit hit on a large input
    /// ([`LARGE_INPUT_SHARE`](crate::LARGE_INPUT_SHARE)).
    fn on_input_of(&self, size: usize, err: EvalError) -> EvalError {
        let limit = self.limits.max_input_bytes;
        if err.is_resource_limit() && size.saturating_mul(crate::limits::LARGE_INPUT_SHARE) > limit
        {
            EvalError::LimitOnLargeInput {
                cause: Box::new(err),
                size,
                limit,
            }
        } else {
            err
        }
    }

    fn call_until<R>(
        &self,
        export: &ModuleExport,
        input: &[u8],
        deadline_ticks: u64,
        decode: impl FnOnce(&[u8]) -> Result<R, EvalError>,
    ) -> Result<(R, Vec<LogLine>, usize, Option<u64>), EvalError> {
        if input.len() > self.limits.max_input_bytes {
            return Err(EvalError::InputTooLarge {
                size: input.len(),
                limit: self.limits.max_input_bytes,
            });
        }
        let mut store = self.new_store(deadline_ticks);
        let instance = self
            .pre
            .instantiate(&mut store)
            .map_err(|err| self.classify(err, &store, true))?;
        let Some(Extern::Memory(memory)) =
            instance.get_module_export(&mut store, &self.exports.memory)
        else {
            return Err(EvalError::BadOutput(
                "export `memory` is not a memory".into(),
            ));
        };
        let alloc: TypedFunc<i32, i32> = typed(&mut store, &instance, &self.exports.alloc)?;
        let run: TypedFunc<(i32, i32), i64> = typed(&mut store, &instance, export)?;
        stages::mark(Stage::Instantiate);

        let len = input.len() as i32;
        let ptr = alloc
            .call(&mut store, len)
            .map_err(|err| self.classify(err, &store, false))?;
        if ptr == 0 && len > 0 {
            return Err(self.out_of_memory_or(&store, || {
                EvalError::BadOutput(format!("nicpolicy_alloc returned 0 for {len} bytes"))
            }));
        }
        memory.write(&mut store, ptr as u32 as usize, input).map_err(|_| {
            EvalError::BadOutput(format!(
                "nicpolicy_alloc returned {ptr:#x}, but {len} bytes there do not fit in memory of {} bytes",
                memory.data_size(&store)
            ))
        })?;
        stages::mark(Stage::InputCopy);
        let packed = run
            .call(&mut store, (ptr, len))
            .map_err(|err| self.classify(err, &store, false))?;
        stages::mark_guest_return();
        let (out_ptr, out_len) = abi::unpack(packed as u64);
        let (out_ptr, out_len) = (out_ptr as usize, out_len as usize);
        if out_len > self.limits.max_output_bytes {
            return Err(EvalError::OutputTooLarge {
                size: out_len,
                limit: self.limits.max_output_bytes,
            });
        }
        let data = memory.data(&store);
        let bytes = out_ptr
            .checked_add(out_len)
            .and_then(|end| data.get(out_ptr..end))
            .ok_or_else(|| {
                EvalError::BadOutput(format!(
                    "result at {out_ptr:#x} with length {out_len} lies outside memory of {} bytes",
                    data.len()
                ))
            })?;
        let result = decode(bytes)?;
        let memory_bytes = memory.data_size(&store);
        let fuel = if self.count_fuel {
            store.get_fuel().ok().map(|left| FUEL_COUNTED - left)
        } else {
            None
        };
        let mut logs = std::mem::take(&mut store.data_mut().logs);
        let dropped = store.data().dropped_logs;
        if dropped > 0 {
            logs.push(LogLine {
                level: LogLevel::Warn,
                message: format!("{dropped} more log lines dropped"),
            });
        }
        stages::mark(Stage::OutputDecode);
        // Dropping the store frees the instance; the pool resets its memory slot here.
        drop(store);
        stages::mark(Stage::InstanceDrop);
        Ok((result, logs, memory_bytes, fuel))
    }

    fn out_of_memory_or(
        &self,
        store: &Store<State>,
        other: impl FnOnce() -> EvalError,
    ) -> EvalError {
        if store.data().memory_limit_hit {
            EvalError::MemoryLimit {
                limit: self.limits.memory_bytes,
            }
        } else {
            other()
        }
    }

    /// Maps a Wasmtime error to what happened, in the policy's terms. The time limit wins over a
    /// refused `memory.grow` (the guest may have kept running after it), which wins over
    /// the trap that usually follows such a refusal.
    fn classify(
        &self,
        err: wasmtime::Error,
        store: &Store<State>,
        instantiating: bool,
    ) -> EvalError {
        match err.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => EvalError::Timeout(self.limits.timeout),
            _ if store.data().memory_limit_hit => EvalError::MemoryLimit {
                limit: self.limits.memory_bytes,
            },
            Some(Trap::StackOverflow) => EvalError::Trap {
                message: "call stack exhausted (recursion too deep)".to_string(),
            },
            None if instantiating => EvalError::Instantiate(format!("{err:#}")),
            _ => EvalError::Trap {
                message: format!("{err:#}"),
            },
        }
    }
}

thread_local! {
    /// The inventory last encoded on this thread, and its JSON: a server sends the same
    /// inventory with every request, and comparing it costs a fraction of encoding it.
    static INVENTORY_JSON: std::cell::RefCell<Option<(Inventory, Vec<u8>)>> =
        const { std::cell::RefCell::new(None) };
}

/// `time` in epoch ticks of `tick`, with one extra tick: the current one may be nearly over
/// when the call starts.
fn ticks(time: Duration, tick: Duration) -> u64 {
    let tick = tick.as_nanos().max(1);
    u64::try_from(time.as_nanos().div_ceil(tick) + 1).unwrap_or(u64::MAX)
}

/// `request` as JSON, as the policy receives it. The inventory, the largest part, is encoded
/// once per thread while it stays the same, and written last (JSON objects are unordered).
fn encode_request(mut request: RequestRef<'_>) -> serde_json::Result<Vec<u8>> {
    let Some(inventory) = request.inventory.take() else {
        return serde_json::to_vec(&request);
    };
    let mut out = Vec::with_capacity(1024);
    serde_json::to_writer(&mut out, &request)?;
    // The object always has fields (`operation` at least): the inventory goes in before its
    // closing brace.
    out.pop();
    out.extend_from_slice(b",\"inventory\":");
    INVENTORY_JSON.with(|cache| -> serde_json::Result<()> {
        let mut cache = cache.borrow_mut();
        match &*cache {
            Some((cached, json)) if cached == inventory => out.extend_from_slice(json),
            _ => {
                let json = serde_json::to_vec(inventory)?;
                out.extend_from_slice(&json);
                *cache = Some((inventory.clone(), json));
            }
        }
        Ok(())
    })?;
    out.push(b'}');
    Ok(out)
}

fn typed<P, R>(
    store: &mut Store<State>,
    instance: &wasmtime::Instance,
    export: &ModuleExport,
) -> Result<TypedFunc<P, R>, EvalError>
where
    P: wasmtime::WasmParams,
    R: wasmtime::WasmResults,
{
    instance
        .get_module_export(&mut *store, export)
        .and_then(Extern::into_func)
        .ok_or_else(|| EvalError::BadOutput("an ABI export is not a function".into()))?
        .typed(&*store)
        .map_err(|err| EvalError::BadOutput(format!("ABI export has the wrong type: {err:#}")))
}

/// The `nicpolicy.log` import: copies the message out of guest memory.
fn host_log(mut caller: Caller<'_, State>, level: i32, ptr: i32, len: i32) -> wasmtime::Result<()> {
    if stages::recording() {
        if let Some(stage) = guest_stage_mark(&mut caller, ptr, len) {
            stages::mark(stage);
            return Ok(());
        }
    }
    if caller.data().logs.len() >= MAX_LOG_LINES {
        caller.data_mut().dropped_logs += 1;
        return Ok(());
    }
    let Some(Extern::Memory(memory)) = caller.get_export(abi::EXPORT_MEMORY) else {
        return Err(wasmtime::Error::msg(
            "nicpolicy.log: the module exports no memory",
        ));
    };
    let (start, len) = (
        ptr as u32 as usize,
        (len as u32 as usize).min(MAX_LOG_LINE_BYTES),
    );
    let message = memory
        .data(&caller)
        .get(start..start.saturating_add(len))
        .map(|bytes| escape_log_text(&String::from_utf8_lossy(bytes)).into_owned())
        .ok_or_else(|| {
            wasmtime::Error::msg(format!(
                "nicpolicy.log: message at {start:#x} with length {len} lies outside memory"
            ))
        })?;
    caller.data_mut().logs.push(LogLine {
        level: LogLevel::from_i32(level),
        message,
    });
    Ok(())
}

/// The guest stage a log line marks (a policy built with the plugin's `stage-marks` feature),
/// if it is such a line.
fn guest_stage_mark(caller: &mut Caller<'_, State>, ptr: i32, len: i32) -> Option<Stage> {
    let Some(Extern::Memory(memory)) = caller.get_export(abi::EXPORT_MEMORY) else {
        return None;
    };
    let start = ptr as u32 as usize;
    let line = memory
        .data(&*caller)
        .get(start..start.saturating_add(len as u32 as usize))?;
    match line {
        _ if line == nicpolicy_plugin::guest::STAGE_DECODED.as_bytes() => Some(Stage::GuestDecode),
        _ if line == nicpolicy_plugin::guest::STAGE_DECIDED.as_bytes() => Some(Stage::Rules),
        _ => None,
    }
}

/// Reads a decision (or an error envelope) and checks that it is coherent.
pub fn decode_decision(bytes: &[u8]) -> Result<Decision, EvalError> {
    // One plain pass for a well-formed decision: tracking field paths makes decoding about
    // three times slower, and only an output that is refused needs them (docs/benchmarks.md).
    let decision = match serde_json::from_slice::<Decision>(bytes) {
        Ok(decision) => decision,
        Err(_) => refused_output(bytes)?,
    };
    check_decision(&decision).map_err(EvalError::BadOutput)?;
    Ok(decision)
}

/// Reads a decision (or the policy's error) in the binary decision format and checks that it
/// is coherent, as [`decode_decision`] does for JSON.
pub fn decode_binary_decision(bytes: &[u8]) -> Result<Decision, EvalError> {
    match binary::decode_output(bytes) {
        Ok(EvaluateOutput::Decision(decision)) => {
            check_decision(&decision).map_err(EvalError::BadOutput)?;
            Ok(decision)
        }
        Ok(EvaluateOutput::Error { error }) => Err(EvalError::Policy(error)),
        Err(err) => Err(EvalError::BadOutput(format!(
            "output is not a binary decision: {err}"
        ))),
    }
}

/// Why an output is not a decision: not UTF-8, the policy's error envelope, the field at fault,
/// or data after the decision.
fn refused_output(bytes: &[u8]) -> Result<Decision, EvalError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|err| EvalError::BadOutput(format!("output is not UTF-8: {err}")))?;
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed: Result<Decision, _> = serde_path_to_error::deserialize(&mut de);
    let decision = match parsed {
        Ok(decision) => {
            de.end().map_err(|err| {
                EvalError::BadOutput(format!("output has data after the decision: {err}"))
            })?;
            decision
        }
        Err(err) => {
            // Not a decision: the error envelope of the schema, or garbage.
            if let Ok(EvaluateOutput::Error { error }) = serde_json::from_str(text) {
                return Err(EvalError::Policy(error));
            }
            let path = err.path().to_string();
            let at = if path == "." {
                String::new()
            } else {
                format!(" at `{path}`")
            };
            return Err(EvalError::BadOutput(format!(
                "output is not a decision{at}: {}",
                err.inner()
            )));
        }
    };
    Ok(decision)
}

/// The rules every decision follows, whichever policy made it.
pub fn check_decision(decision: &Decision) -> Result<(), String> {
    match (decision.allowed, decision.violations.is_empty()) {
        (true, false) => return Err("decision allows the machine but lists violations".to_string()),
        (false, true) => {
            return Err("decision denies the machine without a violation saying why".to_string())
        }
        _ => {}
    }
    let mut previous: Option<u32> = None;
    for nic in &decision.nics {
        if previous.is_some_and(|p| nic.index <= p) {
            return Err(format!(
                "NIC indexes must be unique and ascending; {} follows {}",
                nic.index,
                previous.unwrap_or_default()
            ));
        }
        if nic.primary != (nic.index == 0) {
            return Err(format!(
                "NIC {} on {:?}: the primary NIC is exactly the one with index 0",
                nic.index, nic.network
            ));
        }
        previous = Some(nic.index);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nicpolicy_plugin::schema::{Network, NetworkType};
    use nicpolicy_plugin::testing;
    use serde_json::json;

    fn network(name: &str) -> Network {
        Network {
            name: name.to_string(),
            network_type: Some(NetworkType::Routed),
            gateway: Some("10.20.0.1".to_string()),
            prefix_length: Some(24),
            static_ip_ranges: Vec::new(),
            dns: vec!["10.20.0.10".to_string()],
            used_ip_addresses: Vec::new(),
        }
    }

    #[test]
    fn requests_encode_alike_with_the_inventory_encoded_once() {
        let settings = json!({"adapterType": "VMXNET3"});
        let mut request = testing::worker(&["storage-net", "workload-net"]);
        let plain = |request: &Request| -> Value {
            serde_json::to_value(request.with_settings(&settings)).expect("encodes")
        };
        let ours = |request: &Request| -> Value {
            let bytes = encode_request(request.with_settings(&settings)).expect("encodes");
            serde_json::from_slice(&bytes).expect("valid JSON")
        };
        // Without an inventory, with one (encoded, then from the thread's copy), with another.
        assert_eq!(ours(&request), plain(&request));
        request.inventory = Some(Inventory {
            networks: vec![network("mgmt-net"), network("storage-net")],
        });
        assert_eq!(ours(&request), plain(&request));
        assert_eq!(ours(&request), plain(&request));
        request.inventory = Some(Inventory {
            networks: vec![network("workload-net")],
        });
        assert_eq!(ours(&request), plain(&request));
        assert_eq!(
            ours(&request)["inventory"]["networks"][0]["name"],
            "workload-net"
        );
    }
}
