//! AdmissionReview bodies to answers: the webhook's reviewer on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    nicpolicy_tests::fuzzing::admission_review(data);
});
