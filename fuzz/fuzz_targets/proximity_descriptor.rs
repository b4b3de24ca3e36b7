//! Fuzz target: PRXI descriptor. Decoding arbitrary bytes must never panic, and
//! whatever decodes must re-encode to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prox_engine::proximity::Descriptor;

fuzz_target!(|data: &[u8]| {
    if let Ok(d) = Descriptor::decode(data) {
        assert_eq!(d.encode().unwrap(), data);
    }
});
