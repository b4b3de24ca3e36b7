//! Fuzz target: the MmapStore segment scanner (the recovery parser that
//! reads whatever bytes a crash or a damaged disk left behind). It must
//! never panic, the items it reports must tile the scanned prefix in order,
//! and every intact block must re-encode to exactly the bytes it was read
//! from.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| prox_fuzz_bodies::store_segment(data));
