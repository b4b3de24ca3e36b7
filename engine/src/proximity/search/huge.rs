//! Transparent huge pages for the load-time search buffers.
//!
//! Exact search reads its survivors' codes at random offsets of buffers of
//! hundreds of megabytes; with 4 KiB pages nearly every such read is also a
//! TLB miss. Where the kernel leaves huge pages to `madvise` (the common
//! default), a buffer is advised right after its zeroed allocation and
//! before it is first written, so its pages are faulted in as 2 MiB pages.
//! Advice only: nothing changes if the kernel declines, and nothing is done
//! on other systems.

/// Advises the whole 2 MiB-aligned part of `v`'s allocation for huge pages.
pub(crate) fn advise<T>(v: &mut [T]) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let bytes = std::mem::size_of_val(v);
        if bytes < 2 * HUGE {
            return;
        }
        let start = v.as_mut_ptr() as usize;
        let first = start.next_multiple_of(HUGE);
        let end = (start + bytes) / HUGE * HUGE;
        if end > first {
            // SAFETY: `first..end` lies inside `v`'s allocation, which this
            // process owns; MADV_HUGEPAGE is advice that changes no
            // contents, and its result is deliberately ignored.
            unsafe {
                libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = v;
}
