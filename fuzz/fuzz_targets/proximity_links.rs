//! Fuzz target: typed link extraction (refs.rs) for every block kind.
//! Arbitrary bytes must never panic the walker GC and sync rely on.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| prox_fuzz_bodies::proximity_links(data));
