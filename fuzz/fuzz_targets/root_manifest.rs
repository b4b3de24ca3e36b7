//! RootManifest decoder: never panics; accepted manifests re-encode to bytes
//! that decode to the same manifest.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| prox_fuzz_bodies::root_manifest(data));
