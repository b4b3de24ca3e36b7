//! Fuzz target: PRXN node (dims from the first byte). Decoding arbitrary bytes must never panic, and
//! whatever decodes must re-encode to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prox_engine::proximity::ProxNode;

fuzz_target!(|data: &[u8]| {
    let Some((&d, rest)) = data.split_first() else { return };
    let dims = u32::from(d % 8) + 1;
    if let Ok(n) = ProxNode::decode(rest, dims) {
        assert_eq!(n.encode().unwrap(), rest);
        assert_eq!(n.encoded_len(dims as usize), rest.len());
    }
});
