//! Fuzz target: PRVR record (decoded with dims from the first byte). Decoding arbitrary bytes must never panic, and
//! whatever decodes must re-encode to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prox_engine::proximity::Record;

fuzz_target!(|data: &[u8]| {
    let Some((&d, rest)) = data.split_first() else { return };
    let dims = u32::from(d % 8) + 1;
    if let Ok(r) = Record::decode(rest, dims) {
        assert_eq!(r.encode().unwrap(), rest);
    }
});
