//! Node decoder: never panics; every accepted `CRAB` input re-encodes to
//! the same bytes (the strict decoder admits exactly one encoding per node).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| prox_fuzz_bodies::crab_node(data));
