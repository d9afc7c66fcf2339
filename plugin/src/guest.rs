//! The guest side of the ABI: what [`export_policy!`](crate::export_policy) wires up.
//!
//! The host instantiates a policy afresh for every call and drops the instance afterwards, so
//! memory handed out here is never freed: that keeps the allocator out of the hot path.

// The ABI is raw pointers into linear memory and a global allocator: this module is where the
// SDK needs `unsafe`, each use with a SAFETY note.
#![allow(unsafe_code)]

use serde_json::Value;

use crate::abi::{pack, LogLevel};
use crate::schema::{Decision, EvaluateOutput, Request, SettingsValidation};

/// Reserves `len` bytes for the host to write the input into; 0 when that fails.
pub fn alloc(len: u32) -> u32 {
    let mut buf: Vec<u8> = Vec::new();
    if buf.try_reserve_exact(len as usize).is_err() {
        return 0;
    }
    let ptr = buf.as_mut_ptr();
    std::mem::forget(buf);
    ptr as usize as u32
}

/// Hands `bytes` to the host: the returned value packs their address and length.
fn emit(bytes: Vec<u8>) -> u64 {
    // Leaked as it is: shrinking it first would copy it for nothing, the instance is dropped.
    let bytes = bytes.leak();
    pack(bytes.as_ptr() as usize as u32, bytes.len() as u32)
}

/// Room for a typical decision, so encoding it does not grow the buffer step by step.
const OUTPUT_CAPACITY: usize = 2048;

fn to_json<T: serde::Serialize>(value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(OUTPUT_CAPACITY);
    // Serialising these plain structs cannot fail; fall back to a valid error envelope anyway.
    match serde_json::to_writer(&mut out, value) {
        Ok(()) => out,
        Err(_) => br#"{"error":"policy could not serialise its output"}"#.to_vec(),
    }
}

/// Reads the input the host wrote.
///
/// # Safety
/// `ptr` and `len` must describe memory that the host filled after `alloc(len)` returned `ptr`.
unsafe fn input<'a>(ptr: u32, len: u32) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    std::slice::from_raw_parts(ptr as usize as *const u8, len as usize)
}

/// The log line a policy built with the `stage-marks` feature sends once it has decoded the
/// request; a host measuring where an evaluation's time goes reads it as a stage boundary.
pub const STAGE_DECODED: &str = "nicpolicy-stage: request decoded";
/// The log line a policy built with the `stage-marks` feature sends once its rules decided.
pub const STAGE_DECIDED: &str = "nicpolicy-stage: rules done";

/// Marks a stage of the evaluation for a profiling host (`stage-marks` feature only).
#[inline(always)]
fn stage_mark(_line: &'static str) {
    #[cfg(feature = "stage-marks")]
    log(LogLevel::Debug, _line);
}

/// What becomes of the request and the decision once the answer is encoded.
#[derive(Clone, Copy)]
enum Leftovers {
    /// Dropped, as anywhere else: the public functions below, callable outside a module.
    Drop,
    /// Left where they are. An ABI call runs in a fresh instance that the host throws away
    /// afterwards, so freeing them would only walk every string of the request and the
    /// decision to move the bump allocator's pointer back a little: a fifth of a small
    /// evaluation's guest time (docs/benchmarks.md, "The guest's side").
    Leave,
}

impl Leftovers {
    fn end<T>(self, value: T) {
        match self {
            Leftovers::Drop => drop(value),
            Leftovers::Leave => std::mem::forget(value),
        }
    }
}

/// Runs `policy` on a request given as JSON and returns the decision (or error envelope) as
/// JSON: the bytes `nicpolicy_evaluate` hands back, shared with the JS build.
pub fn evaluate_json(input: &[u8], policy: fn(&Request) -> Decision) -> Vec<u8> {
    json_answer(json_request(input), policy, Leftovers::Drop)
}

fn json_request(input: &[u8]) -> Result<Request, String> {
    serde_json::from_slice::<Request>(input)
        .map_err(|err| format!("policy could not read the request: {err}"))
}

/// The decision on `request` (or the error envelope) as JSON.
fn json_answer(
    request: Result<Request, String>,
    policy: fn(&Request) -> Decision,
    leftovers: Leftovers,
) -> Vec<u8> {
    let output = decide(request, policy, leftovers);
    let out = to_json(&output);
    leftovers.end(output);
    out
}

/// Runs `policy` on a request given in the [binary format](crate::binary) and returns the
/// decision (or error envelope) as JSON, like [`evaluate_json`].
pub fn evaluate_binary_request(input: &[u8], policy: fn(&Request) -> Decision) -> Vec<u8> {
    json_answer(binary_request(input), policy, Leftovers::Drop)
}

/// Runs `policy` on a request given in the [binary format](crate::binary) and returns the
/// decision (or the error) in the [binary decision format](crate::binary::decision).
pub fn evaluate_binary_both(input: &[u8], policy: fn(&Request) -> Decision) -> Vec<u8> {
    binary_answer(input, policy, Answer::V1, Leftovers::Drop)
}

/// [`evaluate_binary_both`] answering in version 2 of the decision format (with sources).
pub fn evaluate_binary_sourced(input: &[u8], policy: fn(&Request) -> Decision) -> Vec<u8> {
    binary_answer(input, policy, Answer::Sourced, Leftovers::Drop)
}

/// [`evaluate_binary_sourced`] with NIC sources turned off while `policy` runs: what the
/// `nicpolicy_evaluate_binary4` export answers. A policy that sets a NIC's source anyway has it
/// dropped, so the answer is the same whatever the policy does.
pub fn evaluate_binary_unsourced_nics(input: &[u8], policy: fn(&Request) -> Decision) -> Vec<u8> {
    binary_answer(input, policy, Answer::UnsourcedNics, Leftovers::Drop)
}

/// The binary decision formats a module answers in.
#[derive(Clone, Copy)]
enum Answer {
    /// Version 1, without sources (`nicpolicy_evaluate_binary2`).
    V1,
    /// Version 2, every source (`nicpolicy_evaluate_binary3`).
    Sourced,
    /// Version 2, the violations' sources only (`nicpolicy_evaluate_binary4`).
    UnsourcedNics,
}

fn binary_answer(
    input: &[u8],
    policy: fn(&Request) -> Decision,
    answer: Answer,
    leftovers: Leftovers,
) -> Vec<u8> {
    let output = match answer {
        Answer::V1 | Answer::Sourced => decide(binary_request(input), policy, leftovers),
        Answer::UnsourcedNics => {
            let mut output = crate::source::without_nic_sources(|| {
                decide(binary_request(input), policy, leftovers)
            });
            if let EvaluateOutput::Decision(decision) = &mut output {
                for nic in &mut decision.nics {
                    // Left, not dropped, with the rest of the decision when the call ends.
                    leftovers.end(nic.source.take());
                }
            }
            output
        }
    };
    let encode: Encoder = match answer {
        Answer::V1 => crate::binary::encode_output,
        Answer::Sourced | Answer::UnsourcedNics => crate::binary::encode_output_v2,
    };
    let out = binary_output(&output, encode);
    leftovers.end(output);
    out
}

type Encoder = fn(&EvaluateOutput, &mut Vec<u8>) -> Result<(), crate::binary::FormatError>;

fn binary_output(output: &EvaluateOutput, encode: Encoder) -> Vec<u8> {
    let mut out = Vec::with_capacity(OUTPUT_CAPACITY);
    // Only a string over 4 GiB could fail, which no instance holds; answer an error anyway.
    if encode(output, &mut out).is_err() {
        out.clear();
        let error = EvaluateOutput::Error {
            error: "policy could not encode its decision".into(),
        };
        let _ = encode(&error, &mut out);
    }
    out
}

fn binary_request(input: &[u8]) -> Result<Request, String> {
    crate::binary::decode(input)
        .map_err(|err| format!("policy could not read the binary request: {err}"))
}

/// The decision on a decoded request, or the error envelope for one that could not be read.
fn decide(
    request: Result<Request, String>,
    policy: fn(&Request) -> Decision,
    leftovers: Leftovers,
) -> EvaluateOutput {
    match request {
        Ok(request) => {
            stage_mark(STAGE_DECODED);
            let mut decision = policy(&request);
            leftovers.end(request);
            // Whatever order the rules ran in, violations go out in field order.
            decision.sort_violations();
            stage_mark(STAGE_DECIDED);
            EvaluateOutput::Decision(decision)
        }
        Err(error) => EvaluateOutput::Error { error },
    }
}

/// Runs `check` on settings given as JSON and returns the verdict as JSON.
pub fn validate_settings_json(input: &[u8], check: fn(&Value) -> Result<(), String>) -> Vec<u8> {
    let verdict = match serde_json::from_slice::<Value>(input) {
        Ok(settings) => match check(&settings) {
            Ok(()) => SettingsValidation {
                valid: true,
                message: None,
            },
            Err(message) => SettingsValidation {
                valid: false,
                message: Some(message),
            },
        },
        Err(err) => SettingsValidation {
            valid: false,
            message: Some(format!("settings are not JSON: {err}")),
        },
    };
    to_json(&verdict)
}

/// Runs `policy` on the request at `ptr`/`len` and returns the packed decision.
///
/// # Safety
/// `ptr` and `len` must describe memory the host filled after `nicpolicy_alloc(len)`
/// returned `ptr`.
pub unsafe fn evaluate(ptr: u32, len: u32, policy: fn(&Request) -> Decision) -> u64 {
    emit(json_answer(
        json_request(input(ptr, len)),
        policy,
        Leftovers::Leave,
    ))
}

/// Runs `policy` on the binary request at `ptr`/`len` and returns the packed decision.
///
/// # Safety
/// `ptr` and `len` must describe memory the host filled after `nicpolicy_alloc(len)`
/// returned `ptr`.
pub unsafe fn evaluate_binary(ptr: u32, len: u32, policy: fn(&Request) -> Decision) -> u64 {
    emit(json_answer(
        binary_request(input(ptr, len)),
        policy,
        Leftovers::Leave,
    ))
}

/// Runs `policy` on the binary request at `ptr`/`len` and returns the packed binary decision.
///
/// # Safety
/// `ptr` and `len` must describe memory the host filled after `nicpolicy_alloc(len)`
/// returned `ptr`.
pub unsafe fn evaluate_binary2(ptr: u32, len: u32, policy: fn(&Request) -> Decision) -> u64 {
    emit(binary_answer(
        input(ptr, len),
        policy,
        Answer::V1,
        Leftovers::Leave,
    ))
}

/// Runs `policy` on the binary request at `ptr`/`len` and returns the packed binary decision,
/// version 2 (with sources).
///
/// # Safety
/// `ptr` and `len` must describe memory the host filled after `nicpolicy_alloc(len)`
/// returned `ptr`.
pub unsafe fn evaluate_binary3(ptr: u32, len: u32, policy: fn(&Request) -> Decision) -> u64 {
    emit(binary_answer(
        input(ptr, len),
        policy,
        Answer::Sourced,
        Leftovers::Leave,
    ))
}

/// Runs `policy` on the binary request at `ptr`/`len` with NIC sources turned off
/// ([`crate::source::nic_sources_wanted`]) and returns the packed binary decision, version 2:
/// the violations keep their sources, the NICs have none.
///
/// # Safety
/// `ptr` and `len` must describe memory the host filled after `nicpolicy_alloc(len)`
/// returned `ptr`.
pub unsafe fn evaluate_binary4(ptr: u32, len: u32, policy: fn(&Request) -> Decision) -> u64 {
    emit(binary_answer(
        input(ptr, len),
        policy,
        Answer::UnsourcedNics,
        Leftovers::Leave,
    ))
}

/// Runs `check` on the settings at `ptr`/`len` and returns the packed verdict.
///
/// # Safety
/// `ptr` and `len` must describe memory the host filled after `nicpolicy_alloc(len)`
/// returned `ptr`.
pub unsafe fn validate_settings(
    ptr: u32,
    len: u32,
    check: fn(&Value) -> Result<(), String>,
) -> u64 {
    emit(validate_settings_json(input(ptr, len), check))
}

/// Runs `backstop` on the request at `ptr`/`len` and returns the packed
/// [`BackstopOutput`](crate::backstop::BackstopOutput).
///
/// # Safety
/// `ptr` and `len` must describe memory the host filled after `nicpolicy_alloc(len)`
/// returned `ptr`.
pub unsafe fn backstop(
    ptr: u32,
    len: u32,
    backstop: fn(&crate::backstop::BackstopRequest) -> Result<crate::backstop::Backstop, String>,
) -> u64 {
    emit(crate::backstop::backstop_json(input(ptr, len), backstop))
}

/// The settings check of a policy that takes no settings: anything goes.
pub fn accept_any_settings(_settings: &Value) -> Result<(), String> {
    Ok(())
}

#[cfg(target_arch = "wasm32")]
#[link(wasm_import_module = "nicpolicy")]
extern "C" {
    #[link_name = "log"]
    fn host_log(level: i32, ptr: u32, len: u32);
}

/// Sends a log line to the host (the `nicpolicy.log` import); natively it goes to stderr.
///
/// A module that never logs has no import at all.
pub fn log(level: LogLevel, message: &str) {
    #[cfg(target_arch = "wasm32")]
    // SAFETY: the host only reads `len` bytes at `ptr`, which is a live borrow.
    unsafe {
        host_log(
            level as i32,
            message.as_ptr() as usize as u32,
            message.len() as u32,
        );
    }
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("[{level:?}] {message}");
}

/// The allocator [`export_policy!`](crate::export_policy) installs in an ABI v1 module: a bump
/// allocator over the module's linear memory.
///
/// Every call runs in a fresh instance that is dropped afterwards, so nothing needs to be
/// reused: an allocation is a pointer increment, `free` only takes back the latest block, and
/// `realloc` of the latest block (a growing `Vec` or `String`) extends it in place. It is far
/// smaller than a general-purpose allocator and touches fewer pages. Memory grows in steps of
/// [`BumpAllocator::GROW_PAGES`] pages, or exactly what is needed when the memory cap refuses
/// a whole step. Only for single-threaded instances that do not outlive a call.
#[cfg(target_arch = "wasm32")]
pub struct BumpAllocator {
    /// Next free address (0 until the first allocation).
    next: core::cell::Cell<usize>,
    /// End of the memory the allocator may use.
    end: core::cell::Cell<usize>,
}

// SAFETY: a wasm32 instance without threads runs one call at a time.
#[cfg(target_arch = "wasm32")]
unsafe impl Sync for BumpAllocator {}

#[cfg(target_arch = "wasm32")]
impl Default for BumpAllocator {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(target_arch = "wasm32")]
impl BumpAllocator {
    /// Pages (64 KiB) the memory grows by at a time.
    pub const GROW_PAGES: usize = 4;
    const PAGE: usize = 65536;

    /// The allocator, starting at the heap base on first use.
    pub const fn new() -> Self {
        BumpAllocator {
            next: core::cell::Cell::new(0),
            end: core::cell::Cell::new(0),
        }
    }

    /// Makes `[.., end)` usable, growing the memory if needed.
    #[inline(always)]
    fn reserve(&self, end: usize) -> bool {
        // Every call but the first few finds room: keep that test inline, the rest out of line.
        end <= self.end.get() || self.reserve_more(end)
    }

    /// [`Self::reserve`] when the reserved memory is not enough (or not known yet).
    #[cold]
    #[inline(never)]
    fn reserve_more(&self, end: usize) -> bool {
        if self.next.get() == 0 {
            extern "C" {
                static __heap_base: u8;
            }
            // The linker defines `__heap_base`; only its address is taken.
            self.next.set(core::ptr::addr_of!(__heap_base) as usize);
            self.end
                .set(core::arch::wasm32::memory_size(0) * Self::PAGE);
        }
        if end <= self.end.get() {
            return true;
        }
        let needed = (end - self.end.get()).div_ceil(Self::PAGE);
        for pages in [needed.max(Self::GROW_PAGES), needed] {
            if core::arch::wasm32::memory_grow(0, pages) != usize::MAX {
                self.end.set(self.end.get() + pages * Self::PAGE);
                return true;
            }
        }
        false
    }

    /// Where the next block starts: the heap base before the first block.
    #[inline(always)]
    fn next(&self) -> usize {
        match self.next.get() {
            0 => {
                // Sets `next` to the heap base; the memory is never too small for nothing.
                self.reserve_more(0);
                self.next.get()
            }
            next => next,
        }
    }
}

#[cfg(target_arch = "wasm32")]
// SAFETY: blocks are aligned, inside memory the allocator reserved, and never overlap: each
// starts at or after the end of every live block.
unsafe impl core::alloc::GlobalAlloc for BumpAllocator {
    #[inline]
    unsafe fn alloc(&self, layout: core::alloc::Layout) -> *mut u8 {
        // A layout's alignment is a power of two: round up with a mask, not a division.
        let mask = layout.align() - 1;
        let start = match self.next().checked_add(mask) {
            Some(end) => end & !mask,
            None => return core::ptr::null_mut(),
        };
        match start.checked_add(layout.size()) {
            Some(end) if self.reserve(end) => {
                self.next.set(end);
                start as *mut u8
            }
            _ => core::ptr::null_mut(),
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: core::alloc::Layout) {
        // Only the latest block can be given back.
        if ptr as usize + layout.size() == self.next.get() {
            self.next.set(ptr as usize);
        }
    }

    unsafe fn realloc(
        &self,
        ptr: *mut u8,
        layout: core::alloc::Layout,
        new_size: usize,
    ) -> *mut u8 {
        let start = ptr as usize;
        if start + layout.size() == self.next.get() {
            // The latest block: grow or shrink it where it is.
            return match start.checked_add(new_size) {
                Some(end) if self.reserve(end) => {
                    self.next.set(end);
                    ptr
                }
                _ => core::ptr::null_mut(),
            };
        }
        if new_size <= layout.size() {
            return ptr;
        }
        // SAFETY: `realloc`'s contract gives a valid layout with a non-zero size.
        let new_layout =
            unsafe { core::alloc::Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: as above.
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are live and distinct; the old one holds `layout.size()` bytes.
            unsafe { core::ptr::copy_nonoverlapping(ptr, new, layout.size()) };
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binary::{decode_output, encode};

    /// One of the guest's evaluation entry points.
    type Export = fn(&[u8], fn(&Request) -> Decision) -> Vec<u8>;

    fn answer(export: Export) -> Decision {
        // A duplicate network: a violation beside the NIC plan.
        let request = crate::testing::worker(&["storage-net", "workload-net", "storage-net"]);
        let mut input = Vec::new();
        encode(request.with_settings(&request.settings), &mut input).expect("encodes");
        match decode_output(&export(&input, crate::capvcd::evaluate)).expect("decodes") {
            EvaluateOutput::Decision(decision) => decision,
            EvaluateOutput::Error { error } => panic!("{error}"),
        }
    }

    #[test]
    fn binary4_answers_binary3_without_the_nics_sources() {
        let full = answer(evaluate_binary_sourced);
        let lean = answer(evaluate_binary_unsourced_nics);
        assert!(full.nics.iter().all(|nic| nic.source.is_some()));
        assert!(lean.nics.iter().all(|nic| nic.source.is_none()));
        // The violations keep theirs: rule names reach reports and warnings.
        assert!(!lean.violations.is_empty());
        assert_eq!(lean.violations, full.violations);
        let mut stripped = full.clone();
        for nic in &mut stripped.nics {
            nic.source = None;
        }
        assert_eq!(lean, stripped, "the same decision otherwise");
        // Sources are wanted again after the call.
        assert!(crate::source::nic_sources_wanted());
    }
}
