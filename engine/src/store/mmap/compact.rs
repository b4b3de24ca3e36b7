//! Compaction: copying the live records of wasteful segments into fresh
//! ones, switching the index, then unlinking the old files.

use super::format::{self, BLOCK_HEADER_LEN, BLOCK_OVERHEAD, SEGMENT_HEADER_LEN};
use super::segment::Segment;
use super::{lock, read, write, Loc, MmapStore, DAMAGED, VERIFIED};
use crate::cid::Cid;
use crate::error::{Error, Result};
use crate::store::RetainStats;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// A live record to copy during compaction: (cid, segment, record offset,
/// payload length).
type KeepEntry = (Cid, u32, u64, u32);

impl MmapStore {
    pub(super) fn compact(&self, live: &HashSet<Cid>) -> Result<RetainStats> {
        self.check_writable()?;
        let mut w = lock(&self.writer);
        self.commit_locked(&mut w)?;
        let mut stats = RetainStats::default();
        // Plan: which segments hold something to drop.
        let (victims, keep): (Vec<Arc<Segment>>, Vec<KeepEntry>) = {
            let st = read(&self.state);
            let mut kept_bytes: HashMap<u32, u64> = HashMap::new();
            let mut dirty: HashSet<u32> = HashSet::new();
            for (cid, loc) in &st.index {
                if live.contains(cid) {
                    if loc.damaged() {
                        return Err(Error::Corrupt {
                            cid: *cid,
                            reason: "a live block is damaged; put it again before collecting"
                                .into(),
                        });
                    }
                    stats.kept_blocks += 1;
                    *kept_bytes.entry(loc.seg).or_default() += loc.record_len();
                } else {
                    stats.removed_blocks += 1;
                    if !loc.damaged() {
                        stats.removed_bytes += u64::from(loc.len);
                    }
                    dirty.insert(loc.seg);
                }
            }
            // Also rewrite segments that are mostly waste (duplicates left by
            // an interrupted collection, damaged frames).
            for seg in st.segments.values() {
                let body = seg.written().saturating_sub(SEGMENT_HEADER_LEN as u64);
                let kept = kept_bytes.get(&seg.id).copied().unwrap_or(0);
                if body > 0 && kept < body / 2 {
                    dirty.insert(seg.id);
                }
            }
            let victims: Vec<Arc<Segment>> = st
                .segments
                .values()
                .filter(|s| dirty.contains(&s.id))
                .cloned()
                .collect();
            let mut keep: Vec<_> = st
                .index
                .iter()
                .filter(|(c, l)| dirty.contains(&l.seg) && live.contains(*c))
                .map(|(c, l)| (*c, l.seg, l.off, l.len))
                .collect();
            keep.sort_unstable_by_key(|&(_, seg, off, _)| (seg, off));
            (victims, keep)
        };
        if victims.is_empty() {
            return Ok(stats);
        }
        // The writer only ever appends to the newest segment: retire the
        // active one so compaction output gets higher ids.
        self.commit_locked(&mut w)?;
        w.active = None;
        // Copy live records into fresh segments.
        let mut moved: Vec<(Cid, u32, u64, u32)> = Vec::with_capacity(keep.len());
        let result = (|| -> Result<()> {
            let seg_of: HashMap<u32, &Arc<Segment>> = victims.iter().map(|s| (s.id, s)).collect();
            for &(cid, seg, off, len) in &keep {
                let src = seg_of
                    .get(&seg)
                    .and_then(|s| s.bytes(off + BLOCK_HEADER_LEN as u64, u64::from(len)));
                let Some(data) = src else {
                    return Err(Error::Corrupt {
                        cid,
                        reason: "record extends past the end of its segment".into(),
                    });
                };
                // Always re-hash: a copy must never turn bytes that changed
                // on disk since they were verified into a fresh, valid frame.
                if !cid.matches(data) {
                    self.mark(&cid, seg, off, DAMAGED);
                    return Err(Error::Corrupt {
                        cid,
                        reason: "content does not hash to the CID".into(),
                    });
                }
                let mut rec = Vec::with_capacity(BLOCK_OVERHEAD + data.len());
                format::encode_block(&mut rec, &cid, data);
                let (nseg, noff) = self.append(&mut w, &rec)?;
                moved.push((cid, nseg, noff, len));
            }
            self.sync_active(&mut w)?;
            self.io.sync_dir(&self.dir)
        })();
        if let Err(e) = result {
            // The index still points at the old segments, which are intact.
            // Output segments hold unindexed duplicates; the next collection
            // rewrites them as waste.
            w.active = None;
            w.dirty = false;
            return Err(self.poison_on_io(e));
        }
        // Everything live is durable in the outputs: switch.
        {
            let mut st = write(&self.state);
            let victim_ids: HashSet<u32> = victims.iter().map(|s| s.id).collect();
            // Every dead entry lives in a victim segment (that is what made
            // it a victim), and the writer lock kept new blocks out.
            st.index.retain(|cid, _| live.contains(cid));
            for (cid, seg, off, len) in moved {
                st.index.insert(cid, Loc::new(seg, off, len, VERIFIED));
            }
            for id in &victim_ids {
                st.segments.remove(id);
                st.garbage.remove(id);
            }
        }
        // The active segment (last output) keeps taking appends.
        for seg in &victims {
            if let Err(e) = self.io.remove(&seg.path) {
                tracing::warn!(path = %seg.path.display(), error = %e, "could not remove retired segment");
            }
        }
        self.io
            .sync_dir(&self.dir)
            .map_err(|e| self.poison_on_io(e))?;
        Ok(stats)
    }
}
