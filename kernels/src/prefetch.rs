//! Software prefetch: safe hints that pull cache lines towards the core
//! without waiting for them.
//!
//! A prefetch never faults, never changes memory and never changes a result;
//! it only lets the misses of independent loads (a whole neighbour list of a
//! graph traversal) overlap instead of being paid one by one inside the
//! distance loop. x86-64 uses `prefetcht0` (SSE, part of the x86-64
//! baseline, so no run-time detection is needed); aarch64 uses
//! `prfm pldl1keep`; other targets compile to nothing. Under
//! `PROX_ISA=scalar` every function here is a no-op too, which makes the
//! effect of prefetching measurable with the same binary.

use crate::{isa, Isa};

/// Cache line size assumed for stepping through a slice (bytes).
pub const LINE: usize = 64;

/// Hints one cache line at `p`.
#[inline(always)]
fn line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: `prefetcht0` is an SSE instruction (x86-64 baseline); it is
        // a hint that never faults, whatever the address, and writes nothing.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>()) };
    }
    #[cfg(target_arch = "aarch64")]
    {
        // SAFETY: `prfm` is a hint in the base A64 ISA; it never faults,
        // whatever the address, reads no register but `p`, writes nothing.
        unsafe {
            std::arch::asm!(
                "prfm pldl1keep, [{0}]",
                in(reg) p,
                options(nostack, readonly, preserves_flags)
            )
        };
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = p;
    }
}

#[inline(always)]
fn enabled() -> bool {
    isa() != Isa::Scalar
}

/// Hints every cache line covering `slice` (nothing for an empty slice).
#[inline]
pub fn prefetch_read<T>(slice: &[T]) {
    if slice.is_empty() || !enabled() {
        return;
    }
    let start = slice.as_ptr().cast::<u8>();
    let bytes = std::mem::size_of_val(slice);
    // Step line by line from the line holding the first byte to the line
    // holding the last one (pointers are only formed, never dereferenced).
    let back = start as usize & (LINE - 1);
    let lines = (back + bytes).div_ceil(LINE);
    let first = start.wrapping_sub(back);
    for i in 0..lines {
        line(first.wrapping_add(i * LINE));
    }
}

/// Hints the first cache line of `slice` only (nothing if empty).
#[inline]
pub fn prefetch_first<T>(slice: &[T]) {
    if !slice.is_empty() && enabled() {
        line(slice.as_ptr().cast::<u8>());
    }
}

/// Hints the cache line holding `arena[offset]`; out of range is a no-op.
#[inline]
pub fn prefetch_index<T>(arena: &[T], offset: usize) {
    if offset < arena.len() && enabled() {
        line(arena[offset..].as_ptr().cast::<u8>());
    }
}

/// Huge-page granule the advice below aligns to (x86-64 and aarch64 with
/// 4 KiB base pages).
const HUGE: usize = 2 << 20;

/// Asks the kernel to back the 2 MiB-aligned pages lying wholly inside
/// `slice` with transparent huge pages (`MADV_HUGEPAGE`: future faults),
/// and with `collapse` also to convert the pages already faulted in now
/// (`MADV_COLLAPSE`, Linux 6.1+, synchronous; copies the memory once).
///
/// Random access over a large arena (a graph traversal over hundreds of MB)
/// misses the TLB on almost every probe with 4 KiB pages; with 2 MiB pages
/// the whole arena fits the TLB. Like a prefetch this is only a hint: it
/// never changes memory contents or any result, failures are ignored
/// (THP disabled, old kernel, not anonymous memory), and other targets
/// compile to nothing. Returns whether the kernel accepted the advice
/// (`false` also for slices too small to hold one aligned huge page).
pub fn advise_huge_pages<T>(slice: &[T], collapse: bool) -> bool {
    let start = slice.as_ptr() as usize;
    let end = start + std::mem::size_of_val(slice);
    let lo = start.next_multiple_of(HUGE);
    let hi = end & !(HUGE - 1);
    if hi <= lo {
        return false;
    }
    #[cfg(target_os = "linux")]
    {
        /// `MADV_COLLAPSE` (not yet in every libc release).
        const MADV_COLLAPSE: libc::c_int = 25;
        let p = lo as *mut libc::c_void;
        // SAFETY: `[lo, hi)` lies inside `slice`, memory this process owns
        // and keeps mapped for the call; both advices only change how the
        // kernel backs the pages (never their contents, protection or
        // mapping), so no Rust reference observes any change.
        let ok = unsafe { libc::madvise(p, hi - lo, libc::MADV_HUGEPAGE) } == 0;
        if ok && collapse {
            // SAFETY: as above; a collapse copies pages into a huge page
            // atomically with respect to the process's view of memory.
            let _ = unsafe { libc::madvise(p, hi - lo, MADV_COLLAPSE) };
        }
        ok
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = collapse;
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_change_nothing() {
        let v: Vec<u32> = (0..1000).collect();
        prefetch_read(&v);
        prefetch_read(&v[3..517]);
        prefetch_read::<u8>(&[]);
        prefetch_first(&v[999..]);
        prefetch_first::<u64>(&[]);
        prefetch_index(&v, 0);
        prefetch_index(&v, 999);
        prefetch_index(&v, 1000);
        prefetch_index(&v, usize::MAX);
        let bytes = [7u8; 3];
        prefetch_read(&bytes[1..]);
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as u32));
        assert_eq!(bytes, [7; 3]);
    }

    #[test]
    fn huge_page_advice_changes_nothing() {
        // 6 MiB of distinct values: at least two aligned huge pages inside.
        let mut v: Vec<u64> = (0..(6 << 20) / 8).collect();
        assert!(!advise_huge_pages::<u64>(&[], true));
        assert!(!advise_huge_pages(&v[..1000], false));
        // Accepted or not (THP may be disabled), the contents are unchanged.
        let _ = advise_huge_pages(&v, false);
        let _ = advise_huge_pages(&v, true);
        v[12345] += 1;
        assert!(v
            .iter()
            .enumerate()
            .all(|(i, &x)| x == i as u64 + u64::from(i == 12345)));
    }
}
