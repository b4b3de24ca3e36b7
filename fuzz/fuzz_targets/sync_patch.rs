//! Block patches from a hostile peer (`DELTA` frames of `/prox/blocks/1`):
//! applying never panics or exceeds the limit; encoding round-trips.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| prox_fuzz_bodies::sync_patch(data));
