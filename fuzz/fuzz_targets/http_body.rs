//! HTTP request bodies (`search`, `search:batch`, JSON and
//! `application/octet-stream` f32 rows with query-string options): never panic; an
//! accepted body has exactly the vector shape asked for with finite
//! components, and the checked reader agrees with the single-pass one.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| prox_fuzz_bodies::http_body(data));
