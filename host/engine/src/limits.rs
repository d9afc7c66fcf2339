//! Per-evaluation limits: time, memory, input and output size.

use std::cell::Cell;
use std::time::Duration;

/// Largest policy module the host loads, in bytes. Compile time grows with module size, and a
/// module is compiled before any time limit applies; this bounds it (docs/abi.md, Limits). Real
/// policies are far smaller: the built-in CAPVCD module is a few hundred KiB.
pub const MAX_MODULE_BYTES: usize = 8 << 20;

/// Largest public or private key file read (a PEM key is a few hundred bytes): a file named as a
/// key that is anything else is refused before it fills memory.
pub const MAX_KEY_BYTES: u64 = 64 * 1024;

/// Bounds on the code of a policy module, checked before it is compiled (see
/// [`CodeShape::check`](crate::inspect::CodeShape::check)). A compile's memory grows with the
/// number of functions (every compiled function is kept until the module is linked) and with
/// the size and locals of the largest function (Cranelift's working set); these keep the worst
/// module that is still accepted well inside the shipped Deployment's 256 MiB
/// (docs/benchmarks.md, "Compiling a policy"). Real policies are far below them: the built-in
/// policies have under 300 functions, under 240 KiB of code, no function over 41 KiB and no
/// more than 66 locals in one function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompileBounds {
    /// Most functions a module may define.
    pub max_functions: u64,
    /// Largest code section, in bytes.
    pub max_code_bytes: u64,
    /// Largest function body, in bytes.
    pub max_function_bytes: u64,
    /// Most locals one function may declare.
    pub max_locals: u64,
}

impl Default for CompileBounds {
    fn default() -> Self {
        CompileBounds {
            max_functions: 5_000,
            max_code_bytes: 1536 << 10,
            max_function_bytes: 64 << 10,
            max_locals: 256,
        }
    }
}

/// A time, memory or output limit hit on an input larger than `1/LARGE_INPUT_SHARE` of the
/// input cap ([`Limits::max_input_bytes`]) is the request's fault
/// ([`EvalError::LimitOnLargeInput`](crate::EvalError::LimitOnLargeInput)), answered as a
/// denial rather than under `onPolicyFailure`: a request must not be able to make the policy
/// fail on purpose and so be admitted unchecked. Real requests are a few KiB, far below an
/// eighth of any sensible cap (the webhook's default cap is 3 MiB).
pub const LARGE_INPUT_SHARE: usize = 8;

/// Limits applied to every call into a policy.
///
/// The defaults suit an admission webhook: a CAPVCD evaluation takes tens of microseconds and
/// about 1 MiB of guest memory, so these leave wide headroom while stopping a runaway policy
/// long before kube-apiserver's webhook timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time for one call (instantiation included), enforced through epochs.
    pub timeout: Duration,
    /// Most linear memory one instance may have, in bytes.
    pub memory_bytes: usize,
    /// Largest request (or settings) JSON the host sends, in bytes.
    pub max_input_bytes: usize,
    /// Largest output JSON the host accepts, in bytes.
    pub max_output_bytes: usize,
}

impl Limits {
    /// Default time limit for one evaluation.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(1000);
    /// Default memory cap of one instance.
    pub const DEFAULT_MEMORY_BYTES: usize = 64 << 20;
    /// Default cap on input JSON.
    pub const DEFAULT_MAX_INPUT_BYTES: usize = 1 << 20;
    /// Default cap on output JSON.
    pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 1 << 20;

    /// Sets the time limit.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the memory cap.
    pub fn with_memory_bytes(mut self, bytes: usize) -> Self {
        self.memory_bytes = bytes;
        self
    }

    /// Sets the input cap.
    pub fn with_max_input_bytes(mut self, bytes: usize) -> Self {
        self.max_input_bytes = bytes;
        self
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Self::DEFAULT_TIMEOUT,
            memory_bytes: Self::DEFAULT_MEMORY_BYTES,
            max_input_bytes: Self::DEFAULT_MAX_INPUT_BYTES,
            max_output_bytes: Self::DEFAULT_MAX_OUTPUT_BYTES,
        }
    }
}

/// A shorter time limit for evaluations that run where blocking is costly, such as the webhook's
/// async workers (docs/deploy.md, `evaluation.inlineBudget`).
///
/// An evaluation still running when its budget is spent is cut, and [`Budget::overran`] says so
/// from then on. Being cut is not a policy failure: whatever the evaluation (or a chain or
/// [`crate::lifecycle::judge`] built on it) returned is to be discarded, and the request run
/// again under the policy's own limit where blocking is fine. The policy's own limit still
/// applies when it is the shorter one; running past it is the policy's failure, as always.
///
/// The budget is enforced with the host's epoch ticks ([`crate::HostConfig::epoch_tick`]), so
/// an evaluation is cut between `time` and `time` plus one tick.
#[derive(Debug)]
pub struct Budget {
    time: Duration,
    overran: Cell<bool>,
}

impl Budget {
    /// A budget of `time`.
    pub fn new(time: Duration) -> Budget {
        Budget {
            time,
            overran: Cell::new(false),
        }
    }

    /// The time an evaluation may run before it is cut.
    pub fn time(&self) -> Duration {
        self.time
    }

    /// Whether an evaluation under this budget was cut: its result, and everything built on
    /// it, is to be discarded.
    pub fn overran(&self) -> bool {
        self.overran.get()
    }

    /// Marks an evaluation under this budget as cut. The engine does when an evaluation
    /// overruns; public so that what reacts to a cut (the webhook's inline gate) can be tested.
    pub fn cut(&self) {
        self.overran.set(true);
    }
}

/// Parses a duration such as `250ms`, `2s` or `1m`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 250ms, 2s or 1m"))?;
    let duration = match unit {
        "ms" => Duration::from_millis(value),
        "s" => Duration::from_secs(value),
        "m" => Duration::from_secs(value.saturating_mul(60)),
        _ => return Err(format!("{text:?}: unit must be ms, s or m")),
    };
    if duration.is_zero() {
        return Err(format!("{text:?}: a limit must be above zero"));
    }
    Ok(duration)
}

/// Parses a size such as `64Mi`, `512Ki`, `1Gi` or a plain number of bytes.
pub fn parse_size(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: usize = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size like 64Mi"))?;
    let shift = match unit {
        "" => 0,
        "Ki" => 10,
        "Mi" => 20,
        "Gi" => 30,
        _ => return Err(format!("{text:?}: unit must be Ki, Mi or Gi")),
    };
    value
        .checked_mul(1 << shift)
        .filter(|bytes| *bytes > 0)
        .ok_or_else(|| format!("{text:?}: size out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert!(parse_duration("2h").is_err());
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("fast").is_err());
    }

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("64Mi"), Ok(64 << 20));
        assert_eq!(parse_size("512Ki"), Ok(512 << 10));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("64MB").is_err());
        assert!(parse_size("0").is_err());
    }
}
