//! Guest output to decision: `decode_decision` on the bytes a policy returns.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    nicpolicy_tests::fuzzing::guest_output(data);
});
