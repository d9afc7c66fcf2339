//! A request in the binary format: read natively and by the built-in policy in Wasm.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    nicpolicy_tests::fuzzing::binary_request(data);
});
