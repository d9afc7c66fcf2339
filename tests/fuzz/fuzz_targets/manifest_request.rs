//! Manifest text to request: machine, cluster, inventory and old-machine files (separated by
//! NUL bytes) through `ManifestFile::parse` and `build_request`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    nicpolicy_tests::fuzzing::manifest_request(data);
});
