//! PLVV and PLVB decoders: never panic; accepted inputs round-trip exactly.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| prox_fuzz_bodies::envelope(data));
