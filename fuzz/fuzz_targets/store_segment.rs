//! Fuzz target: the MmapStore segment scanner (the recovery parser that
//! reads whatever bytes a crash or a damaged disk left behind). It must
//! never panic, the items it reports must tile the scanned prefix in order,
//! and every intact block must re-encode to exactly the bytes it was read
//! from.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prox_engine::store::mmap::format::{
    encode_block, encode_commit, scan, Item, BLOCK_HEADER_LEN, BLOCK_OVERHEAD, COMMIT_LEN,
};

fuzz_target!(|data: &[u8]| {
    let s = scan(data);
    assert!(s.end <= data.len());
    let mut pos = 0usize;
    for item in &s.items {
        match *item {
            Item::Block {
                cid,
                offset,
                len,
                intact,
            } => {
                assert_eq!(offset, pos);
                let end = offset + BLOCK_OVERHEAD + len;
                assert!(end <= s.end);
                if intact {
                    let mut again = Vec::new();
                    encode_block(
                        &mut again,
                        &cid,
                        &data[offset + BLOCK_HEADER_LEN..offset + BLOCK_HEADER_LEN + len],
                    );
                    assert_eq!(again.as_slice(), &data[offset..end]);
                }
                pos = end;
            }
            Item::Commit { offset } => {
                assert_eq!(offset, pos);
                let mut again = Vec::new();
                encode_commit(&mut again);
                assert_eq!(again.as_slice(), &data[offset..offset + COMMIT_LEN]);
                pos = offset + COMMIT_LEN;
            }
            Item::Garbage { start, end } => {
                assert_eq!(start, pos);
                assert!(end > start && end <= s.end);
                pos = end;
            }
        }
    }
    assert_eq!(pos, s.end);
});
