//! Fuzz target: typed link extraction (refs.rs) for every block kind.
//! Arbitrary bytes must never panic the walker GC and sync rely on.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prox_engine::refs::{links, root_links, sniff, BlockKind};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else { return };
    let kind = match sel % 10 {
        0 => BlockKind::CrabNode,
        1 => BlockKind::Descriptor,
        2 => BlockKind::ProxNode { dims: u32::from(sel / 10 % 8) + 1 },
        3 => BlockKind::ExternalVector,
        4 => BlockKind::Quantizer,
        5 => BlockKind::PqManifest,
        6 => BlockKind::HnswManifest,
        7 => BlockKind::ContentRoot,
        8 => BlockKind::Blob,
        _ => {
            let _ = root_links(rest);
            return;
        }
    };
    let _ = sniff(rest);
    let _ = links(kind, rest);
});
