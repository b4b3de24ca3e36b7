//! Fuzz target: PQS8 quantizer. Decoding arbitrary bytes must never panic, and
//! whatever decodes must re-encode to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| prox_fuzz_bodies::proximity_quantizer(data));
