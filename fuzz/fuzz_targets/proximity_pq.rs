//! Fuzz target: PQPQ manifest. Decoding arbitrary bytes must never panic, and
//! whatever decodes must re-encode to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prox_engine::proximity::PqManifest;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = PqManifest::decode(data) {
        assert_eq!(m.encode().unwrap(), data);
    }
});
