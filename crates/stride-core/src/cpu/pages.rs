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
        extern "C" {
            fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
        }
        const MADV_HUGEPAGE: i32 = 14;
        if bytes < MIN_BYTES || ptr.is_null() {
            return;
        }
        let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
        let end = (ptr as usize + bytes) / HUGE_PAGE * HUGE_PAGE;
        if end > start {
            // SAFETY: the range lies inside one live allocation of ours; MADV_HUGEPAGE changes
            // how it is backed, never its contents. A failure is harmless, so it is ignored.
            unsafe {
                madvise(start as *mut std::ffi::c_void, end - start, MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, bytes);
}
