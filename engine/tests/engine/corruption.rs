//! Damaged segment files: a damaged block is reported as
//! `Error::Corrupt { cid, .. }` naming it (never handed out), every other
//! block still reads, and putting the block again repairs the store.
//!
//! PROX_SEED replays the randomised test.

use prox_engine::store::mmap::format::{self, Item, SEGMENT_HEADER_LEN};
use prox_engine::store::{BlockStore, MmapOptions, MmapStore};
use prox_engine::{Cid, Error};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x2545_f491_4f6c_dd1d | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn seed() -> u64 {
    prox_testkit::seed(0xbad_b10c)
}

fn opts() -> MmapOptions {
    MmapOptions {
        segment_bytes: 8 << 10,
        ..MmapOptions::default()
    }
}

/// A committed store of `n` distinct blocks; returns (cid, bytes) pairs.
fn fill(dir: &Path, n: usize, rng: &mut Rng) -> Vec<(Cid, Vec<u8>)> {
    let s = MmapStore::open_with(dir, opts()).unwrap();
    let mut out = Vec::new();
    for i in 0..n {
        let len = 1 + rng.below(900) as usize;
        let mut b: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        b.extend_from_slice(&(i as u32).to_le_bytes());
        out.push((s.put(&b).unwrap(), b));
    }
    s.commit().unwrap();
    s.set_root("main", Some(b"root value")).unwrap();
    out
}

/// Where each block record sits: cid -> (file, record offset, payload len).
fn locate(dir: &Path) -> HashMap<Cid, (PathBuf, usize, usize)> {
    let mut out = HashMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_none_or(|x| x != "seg") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        for item in format::scan(&bytes[SEGMENT_HEADER_LEN..]).items {
            if let Item::Block {
                cid, offset, len, ..
            } = item
            {
                out.insert(cid, (path.clone(), SEGMENT_HEADER_LEN + offset, len));
            }
        }
    }
    out
}

fn flip(path: &Path, at: usize, mask: u8) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] ^= mask;
    // Rewrite in place (same inode), like bit rot would.
    use std::io::{Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(at as u64)).unwrap();
    f.write_all(&bytes[at..at + 1]).unwrap();
    f.sync_all().unwrap();
}

fn assert_corrupt(s: &MmapStore, cid: &Cid) {
    match s.get(cid) {
        Err(Error::Corrupt { cid: got, reason }) => {
            assert_eq!(got, *cid, "error names the damaged block ({reason})")
        }
        other => panic!("{cid}: expected Corrupt, got {other:?}"),
    }
}

#[test]
fn flipped_payload_bytes_are_reported_by_cid_and_repairable() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed());
    let blocks = fill(dir.path(), 120, &mut rng);
    let where_ = locate(dir.path());
    // Damage a handful of payloads, including the very last record of the
    // newest segment (followed only by its commit marker).
    let mut victims: Vec<usize> = (0..6).map(|_| rng.below(119) as usize).collect();
    victims.push(119);
    victims.sort_unstable();
    victims.dedup();
    for &v in &victims {
        let (path, off, len) = &where_[&blocks[v].0];
        let at = off + format::BLOCK_HEADER_LEN + rng.below(*len as u64) as usize;
        flip(path, at, 1 << rng.below(8));
    }
    let s = MmapStore::open_with(dir.path(), opts()).unwrap();
    for (i, (cid, bytes)) in blocks.iter().enumerate() {
        if victims.contains(&i) {
            assert_corrupt(&s, cid);
            assert!(!s.has(cid).unwrap(), "damaged blocks are not offered");
        } else {
            assert_eq!(s.get(cid).unwrap().as_deref(), Some(bytes.as_slice()));
        }
    }
    let mut want: Vec<Cid> = victims.iter().map(|&v| blocks[v].0).collect();
    want.sort_unstable();
    assert_eq!(s.damaged(), want);
    assert_eq!(s.root("main").unwrap().as_deref(), Some(&b"root value"[..]));
    // A collection refuses to run while a live block is damaged...
    let live = blocks.iter().map(|(c, _)| *c).collect();
    assert!(matches!(s.retain(&live), Err(Error::Corrupt { .. })));
    // ...and putting the bytes again repairs it, durably.
    for &v in &victims {
        s.put(&blocks[v].1).unwrap();
        assert_eq!(
            s.get(&blocks[v].0).unwrap().as_deref(),
            Some(&blocks[v].1[..])
        );
    }
    s.commit().unwrap();
    s.retain(&live).unwrap();
    drop(s);
    let s = MmapStore::open_with(dir.path(), opts()).unwrap();
    assert!(s.damaged().is_empty());
    for (cid, bytes) in &blocks {
        assert_eq!(s.get(cid).unwrap().as_deref(), Some(bytes.as_slice()));
    }
}

#[test]
fn damage_while_open_is_caught_on_first_read() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed() ^ 1);
    let blocks = fill(dir.path(), 40, &mut rng);
    let where_ = locate(dir.path());
    let s = MmapStore::open_with(dir.path(), opts()).unwrap();
    let (cid, _) = &blocks[17];
    let (path, off, _) = &where_[cid];
    // The scan at open saw an intact record; the bytes change afterwards,
    // before anyone read the block.
    flip(path, off + format::BLOCK_HEADER_LEN, 0x80);
    assert_corrupt(&s, cid);
    assert_corrupt(&s, cid);
    assert!(!s.has(cid).unwrap());
    for (c, b) in blocks.iter().filter(|(c, _)| c != cid) {
        assert_eq!(s.get(c).unwrap().as_deref(), Some(b.as_slice()));
    }
}

#[test]
fn damaged_headers_lose_only_their_record() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed() ^ 2);
    let blocks = fill(dir.path(), 60, &mut rng);
    let where_ = locate(dir.path());
    // A record header (its CID bytes), and the header of a whole segment.
    let (path, off, _) = &where_[&blocks[30].0];
    flip(path, off + 12, 0x01);
    let (path2, _, _) = &where_[&blocks[5].0];
    flip(path2, 2, 0xff);
    let s = MmapStore::open_with(dir.path(), opts()).unwrap();
    // The record's identity is gone: it reads as absent, never as data,
    // and `has` is false so replication fetches it again.
    assert_eq!(s.get(&blocks[30].0).unwrap(), None);
    for (i, (cid, bytes)) in blocks.iter().enumerate() {
        if i != 30 {
            assert_eq!(s.get(cid).unwrap().as_deref(), Some(bytes.as_slice()));
        }
    }
}

#[test]
fn random_flips_never_yield_wrong_bytes() {
    let seed = seed();
    let mut rng = Rng::new(seed ^ 3);
    for round in 0..8 {
        let dir = tempfile::tempdir().unwrap();
        let blocks = fill(dir.path(), 80, &mut rng);
        let where_ = locate(dir.path());
        let files: Vec<PathBuf> = {
            let mut v: Vec<PathBuf> = where_.values().map(|(p, _, _)| p.clone()).collect();
            v.sort();
            v.dedup();
            v
        };
        let mut hits: Vec<(PathBuf, usize)> = Vec::new();
        for _ in 0..1 + rng.below(12) {
            let path = &files[rng.below(files.len() as u64) as usize];
            let len = std::fs::metadata(path).unwrap().len();
            let at = rng.below(len) as usize;
            flip(path, at, 1 << rng.below(8));
            hits.push((path.clone(), at));
        }
        let ctx = format!("PROX_SEED={seed} round {round}");
        let s = MmapStore::open_with(dir.path(), opts())
            .unwrap_or_else(|e| panic!("{ctx}: open failed: {e}"));
        for (cid, bytes) in &blocks {
            let (path, off, len) = &where_[cid];
            let end = off + format::BLOCK_OVERHEAD + len;
            let touched = hits
                .iter()
                .any(|(p, at)| p == path && *at >= *off && *at < end);
            match s.get(cid) {
                Ok(Some(got)) => assert_eq!(got.as_ref(), bytes.as_slice(), "{ctx}: {cid}"),
                Ok(None) | Err(Error::Corrupt { .. }) if touched => {}
                other => panic!("{ctx}: untouched block {cid}: {other:?}"),
            }
        }
    }
}

#[test]
fn damaged_roots_file_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed() ^ 4);
    fill(dir.path(), 3, &mut rng);
    // One root change so far: generation 1, in slot ROOTS.1, with no
    // older copy to fall back to.
    flip(&dir.path().join("ROOTS.1"), 6, 0x10);
    match MmapStore::open_with(dir.path(), opts()) {
        Err(Error::StoreDamaged { path, .. }) => assert!(path.ends_with("ROOTS.1")),
        other => panic!("expected StoreDamaged, got {other:?}"),
    }
}
