//! A fixed-length array whose initial value is all-zero bytes, mapped straight from the kernel
//! (zero pages, nothing written up front) and, from a quarter of a huge page up, asked to be
//! backed by transparent huge pages.
//!
//! Why: the named-call cache (`name_table`) probes a random bucket of its index on every call.
//! At 100k live clients the index is 1 MiB and the arena 4 MiB; with 4 KiB pages a probe also
//! tends to miss the TLB (the sensors and the caller's objects stream through it), a page walk
//! in front of the cache miss. With 2 MiB pages each array needs a handful of TLB entries.

use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

const HUGE_PAGE: usize = 2 << 20;

/// `len` values of `T`, all-zero initially. Only for types whose all-zero bytes are a valid
/// value (see [`ZeroedArray::new`]).
pub struct ZeroedArray<T> {
    /// Start of the mapping (`map_len` bytes); the array starts at `data`.
    map: NonNull<u8>,
    map_len: usize,
    data: NonNull<T>,
    len: usize,
}

// SAFETY: the array owns its values like a `Box<[T]>` does.
unsafe impl<T: Send> Send for ZeroedArray<T> {}
unsafe impl<T: Sync> Sync for ZeroedArray<T> {}

impl<T> ZeroedArray<T> {
    /// # Safety
    /// All-zero bytes must be a valid `T`, and `T` must need no drop (the mapping is simply
    /// unmapped).
    pub unsafe fn new(len: usize) -> Self {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .expect("array size overflows");
        // From a quarter of a huge page up, a whole huge page is worth its unused part: one TLB
        // entry for the array instead of hundreds.
        let huge = bytes >= HUGE_PAGE / 4;
        let huge_len = bytes.div_ceil(HUGE_PAGE) * HUGE_PAGE;
        // Room to place a huge-page aligned array inside the mapping.
        let map_len = if huge { huge_len + HUGE_PAGE } else { bytes.max(1) };
        let map = map_zeroed(map_len);
        let start = if huge {
            let aligned = map.add(map.align_offset(HUGE_PAGE));
            // Advice only: without THP the array is simply backed by small pages.
            advise_huge_pages(aligned, huge_len);
            aligned
        } else {
            map
        };
        debug_assert_eq!(start.align_offset(std::mem::align_of::<T>()), 0);
        ZeroedArray {
            map: NonNull::new_unchecked(map),
            map_len,
            data: NonNull::new_unchecked(start as *mut T),
            len,
        }
    }
}

impl<T> Deref for ZeroedArray<T> {
    type Target = [T];

    #[inline(always)]
    fn deref(&self) -> &[T] {
        // SAFETY: `data` holds `len` initialised values for the array's lifetime.
        unsafe { std::slice::from_raw_parts(self.data.as_ptr(), self.len) }
    }
}

impl<T> DerefMut for ZeroedArray<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.data.as_ptr(), self.len) }
    }
}

impl<T> Drop for ZeroedArray<T> {
    fn drop(&mut self) {
        // SAFETY: the mapping was made in `new` and nothing refers to it any more.
        unsafe { unmap(self.map.as_ptr(), self.map_len) };
    }
}

/// `len` bytes of zero pages straight from the kernel (nothing is written up front).
#[cfg(unix)]
unsafe fn map_zeroed(len: usize) -> *mut u8 {
    let map = libc::mmap(
        std::ptr::null_mut(),
        len,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
        -1,
        0,
    );
    if map == libc::MAP_FAILED {
        std::alloc::handle_alloc_error(page_layout(len));
    }
    map as *mut u8
}

#[cfg(unix)]
unsafe fn unmap(map: *mut u8, len: usize) {
    libc::munmap(map as *mut libc::c_void, len);
}

/// Elsewhere the allocator's zeroed memory (large zeroed allocations are fresh pages there too).
#[cfg(not(unix))]
unsafe fn map_zeroed(len: usize) -> *mut u8 {
    let map = std::alloc::alloc_zeroed(page_layout(len));
    if map.is_null() {
        std::alloc::handle_alloc_error(page_layout(len));
    }
    map
}

#[cfg(not(unix))]
unsafe fn unmap(map: *mut u8, len: usize) {
    std::alloc::dealloc(map, page_layout(len));
}

fn page_layout(len: usize) -> std::alloc::Layout {
    std::alloc::Layout::from_size_align(len, 4096).expect("array size overflows")
}

/// Transparent huge pages are a Linux feature; elsewhere the array keeps small pages.
#[cfg(target_os = "linux")]
unsafe fn advise_huge_pages(start: *mut u8, len: usize) {
    libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
}

#[cfg(not(target_os = "linux"))]
unsafe fn advise_huge_pages(_start: *mut u8, _len: usize) {}

#[cfg(test)]
mod tests {
    use super::ZeroedArray;

    #[test]
    fn small_and_huge_arrays_start_zeroed_and_are_writable() {
        for len in [1usize, 1000, 100_000, 3 << 20] {
            // SAFETY: all-zero is a valid u64, which needs no drop.
            let mut a = unsafe { ZeroedArray::<u64>::new(len) };
            assert_eq!(a.len(), len);
            assert!(a.iter().all(|&x| x == 0));
            a[len - 1] = 7;
            assert_eq!(a[len - 1], 7);
        }
    }
}
