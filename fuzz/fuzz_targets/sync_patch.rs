//! Block patches from a hostile peer (`DELTA`, `ZDELTA`, `ZBLOCK` frames of
//! `/prox/blocks/1`): decoding never panics or exceeds the limit; encoding
//! round-trips.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| prox_fuzz_bodies::sync_patch(data));
