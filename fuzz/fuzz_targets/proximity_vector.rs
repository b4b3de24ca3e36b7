//! Fuzz target: PRXV external vector. Decoding arbitrary bytes must never panic, and
//! whatever decodes must re-encode to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prox_engine::proximity::ExternalVector;

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = ExternalVector::decode(data) {
        assert_eq!(v.encode().unwrap(), data);
    }
});
