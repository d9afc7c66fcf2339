//! A policy's output in the binary decision format, as the host reads it.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    nicpolicy_tests::fuzzing::binary_decision(data);
});
