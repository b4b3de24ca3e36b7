//! PLVV and PLVB decoders: never panic; accepted inputs round-trip exactly.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prox_engine::envelope::{get_large_value, ValueRef, VersionedValue};
use prox_engine::store::MemStore;

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = VersionedValue::decode(data) {
        assert_eq!(v.encode(), data);
    }
    if let Ok(r) = ValueRef::decode(data) {
        assert_eq!(r.encode(), data);
    }
    let _ = get_large_value(&MemStore::new(), data);
});
