//! Block-session frames from a hostile peer (`/prox/blocks/1`): reading
//! client and server frames never panics and never allocates past the
//! block limit; a client frame read back re-encodes to a frame that reads
//! back the same way.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| prox_fuzz_bodies::sync_frames(data));
