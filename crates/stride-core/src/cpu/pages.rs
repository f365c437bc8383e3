//! Large host buffers: ask Linux for transparent huge pages before their first touch, as
//! NumPy does. A fresh result of an op is written once, page by page; with 4 KiB pages the
//! page faults cost more than the op itself (64 MiB = 16 384 faults), with 2 MiB pages they
//! are 512 times fewer. Advice only: the contents and the semantics are unchanged, and where
//! the kernel refuses (THP disabled) nothing happens.

/// Below this a buffer gains nothing from huge pages (NumPy uses the same threshold).
const MIN_BYTES: usize = 4 << 20;
const HUGE_PAGE: usize = 2 << 20;

/// Advises huge pages for the 2 MiB-aligned interior of `[ptr, ptr + bytes)`.
pub(crate) fn advise_huge_pages(ptr: *const u8, bytes: usize) {
    #[cfg(target_os = "linux")]
    {
        if bytes < MIN_BYTES || ptr.is_null() {
            return;
        }
        let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
        let end = (ptr as usize + bytes) / HUGE_PAGE * HUGE_PAGE;
        if end > start {
            // SAFETY: the range lies inside one live allocation of ours; MADV_HUGEPAGE changes
            // how it is backed, never its contents. A failure is harmless, so it is ignored.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, bytes);
}
