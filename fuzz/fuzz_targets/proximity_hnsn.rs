//! Fuzz target: HNSN graph value. Decoding arbitrary bytes must never panic, and
//! whatever decodes must re-encode to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prox_engine::proximity::HnswNode;

fuzz_target!(|data: &[u8]| {
    if let Ok(n) = HnswNode::decode(data) {
        assert_eq!(n.encode().unwrap(), data);
    }
});
