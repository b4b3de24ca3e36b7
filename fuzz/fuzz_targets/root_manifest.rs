//! RootManifest decoder: never panics; accepted manifests re-encode to bytes
//! that decode to the same manifest.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prox_engine::manifest::RootManifest;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = RootManifest::decode(data) {
        let bytes = m.encode();
        assert_eq!(RootManifest::decode(&bytes).expect("re-encoded manifest decodes"), m);
    }
});
