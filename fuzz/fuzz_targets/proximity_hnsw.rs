//! Fuzz target: HNSW manifest. Decoding arbitrary bytes must never panic, and
//! whatever decodes must re-encode to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prox_engine::proximity::HnswManifest;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = HnswManifest::decode(data) {
        assert_eq!(m.encode().unwrap(), data);
    }
});
