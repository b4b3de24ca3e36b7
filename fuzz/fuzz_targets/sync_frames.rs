//! Block-session frames from a hostile peer (`/prox/blocks/1`): reading
//! client and server frames never panics and never allocates past the
//! block limit; a client frame read back re-encodes to a frame that reads
//! back the same way.
#![no_main]

use futures::executor::block_on;
use futures::io::Cursor;
use libfuzzer_sys::fuzz_target;
use prox_sync::protocol::frames::{ClientFrame, ServerFrame};

/// A small block limit keeps allocations bounded whatever the input says.
const MAX_BLOCK: u32 = 1 << 16;

fuzz_target!(|data: &[u8]| {
    let mut io = Cursor::new(data);
    for _ in 0..64 {
        match block_on(ClientFrame::read(&mut io)) {
            Ok(Some(frame)) => {
                let mut out = Vec::new();
                if frame.encode(&mut out).is_ok() {
                    let again = block_on(ClientFrame::read(&mut Cursor::new(&out[..])));
                    assert!(
                        matches!(again, Ok(Some(_))),
                        "re-encoded frame does not read"
                    );
                }
            }
            _ => break,
        }
    }
    let mut io = Cursor::new(data);
    for _ in 0..64 {
        match block_on(ServerFrame::read(&mut io, MAX_BLOCK)) {
            Ok(ServerFrame::Block(b)) => assert!(b.len() <= MAX_BLOCK as usize),
            Ok(_) => {}
            Err(_) => break,
        }
    }
});
