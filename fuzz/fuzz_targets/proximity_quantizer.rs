//! Fuzz target: PQS8 quantizer. Decoding arbitrary bytes must never panic, and
//! whatever decodes must re-encode to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prox_engine::proximity::Quantizer;

fuzz_target!(|data: &[u8]| {
    if let Ok(q) = Quantizer::decode(data) {
        assert_eq!(q.encode().unwrap(), data);
    }
});
