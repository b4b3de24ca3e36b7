//! Fuzz target: CRMF content root (unsorted metadata decodes, so compare values). Decoding arbitrary bytes must never panic, and
//! whatever decodes must re-encode to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prox_engine::proximity::ContentRoot;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = ContentRoot::decode(data) {
        let again = m.encode().unwrap();
        assert_eq!(ContentRoot::decode(&again).unwrap(), m);
    }
});
