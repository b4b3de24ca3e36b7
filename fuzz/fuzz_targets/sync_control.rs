//! Control messages from a hostile peer (`/prox/ctl/1`, CBOR): decoding a
//! request or a response never panics, and what decodes re-encodes to
//! bytes that decode again.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| prox_fuzz_bodies::sync_control(data));
