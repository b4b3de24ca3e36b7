//! Node decoder: never panics; every accepted `CRAB` input re-encodes to
//! the same bytes (the strict decoder admits exactly one encoding per node).
#![no_main]

use libfuzzer_sys::fuzz_target;
use prox_engine::prolly::Node;

fuzz_target!(|data: &[u8]| {
    if let Ok(node) = Node::decode(data) {
        let bytes = node.encode();
        if data.starts_with(b"CRAB") {
            assert_eq!(bytes, data, "accepted CRAB input must round-trip byte-exactly");
        }
        assert_eq!(Node::decode(&bytes).expect("re-encoded node decodes"), node);
        let _ = node.child_cids();
    }
});
