//! Control messages from a hostile peer (`/prox/ctl/1`, CBOR): decoding a
//! request or a response never panics, and what decodes re-encodes to
//! bytes that decode again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prox_sync::protocol::codec;
use prox_sync::protocol::messages::{Request, Response};

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = codec::decode::<Request>(data) {
        let bytes = codec::encode(&req).expect("a decoded request encodes");
        codec::decode::<Request>(&bytes).expect("an encoded request decodes");
    }
    if let Ok(resp) = codec::decode::<Response>(data) {
        let bytes = codec::encode(&resp).expect("a decoded response encodes");
        codec::decode::<Response>(&bytes).expect("an encoded response decodes");
    }
});
