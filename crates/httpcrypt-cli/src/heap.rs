//! The binary's global allocator: the system allocator, with allocations
//! aligned beyond 16 bytes carved out of a plain `malloc`.
//!
//! tokio aligns a task and a socket's I/O state to 128 bytes (a cache-line
//! pair, against false sharing), so every accepted connection makes two
//! such allocations. glibc serves them with `posix_memalign`, which skips
//! its per-thread cache, takes a chunk `align` bytes too large from the
//! bins and splits the ends off again: about 500 instructions each, where a
//! `malloc` of the same size from the thread cache takes under 100 (callgrind
//! of `serve` under new plaintext connections; `bench/profile/INSTRUCTIONS.md`
//! has the per-request totals before and after).
//! Here such a request takes `size + align` bytes from `malloc`, returns
//! the first aligned address past its start and keeps the start in the word
//! before it, which `dealloc` reads back: the same chunk goes to `free`, and
//! glibc's thread cache serves it next time. The cost is up to `align` bytes
//! per such allocation (128 per task and per socket, both freed with the
//! connection).
//!
//! Everything aligned to 16 bytes or less goes to the system allocator
//! unchanged, and so does a request too large to pad.

use std::alloc::{GlobalAlloc, Layout, System};

/// What `malloc` guarantees on the 64-bit targets this binary builds for.
const MALLOC_ALIGN: usize = 16;

/// The global allocator of the `httpcrypt` binary (see the module's
/// documentation).
#[derive(Debug)]
pub(crate) struct Heap;

/// The padded layout an over-aligned `layout` is carved from, if it needs
/// one: `size + align` bytes at `malloc`'s alignment, which always holds an
/// `align`-aligned block of `size` bytes with at least one word before it.
fn padded(layout: Layout) -> Option<Layout> {
    if layout.align() <= MALLOC_ALIGN {
        return None;
    }
    let size = layout.size().checked_add(layout.align())?;
    Layout::from_size_align(size, MALLOC_ALIGN).ok()
}

// SAFETY (for the impl as a whole): every block handed out is either the
// system allocator's own (align ≤ 16, or a request `padded` refuses, which
// `System` then serves at the asked alignment) or lies inside a padded block
// of `System`: `start + align` rounded down to `align` is at least
// `start + 16` (start is 16-aligned, align ≥ 32 is a power of two) and at
// most `start + align`, so `size` bytes from there fit in `size + align`,
// and the word before it lies inside the block, after its start. `dealloc`
// and `realloc` get the caller's layout back (GlobalAlloc's contract), so
// they take the same branch `alloc` took and find the start where it was
// written.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Heap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(outer) = padded(layout) else {
            // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
            return unsafe { System.alloc(layout) };
        };
        // SAFETY: `outer` has a non-zero size (`align` ≥ 32 was added).
        let start = unsafe { System.alloc(outer) };
        if start.is_null() {
            return start;
        }
        let at = ((start as usize + layout.align()) & !(layout.align() - 1)) - start as usize;
        // SAFETY: `at` lies in `16..=align` (see above), inside the block.
        let block = unsafe { start.add(at) };
        // SAFETY: the word before `block` is inside the padded block, past
        // its start, and 8-aligned (`block` is 32-aligned at least).
        unsafe { block.cast::<*mut u8>().sub(1).write(start) };
        block
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let Some(outer) = padded(layout) else {
            // SAFETY: allocated by `System` with this layout.
            return unsafe { System.dealloc(ptr, layout) };
        };
        // SAFETY: `alloc` wrote the padded block's start in the word
        // before `ptr`, and that block was allocated with `outer`.
        unsafe {
            let start = ptr.cast::<*mut u8>().sub(1).read();
            System.dealloc(start, outer);
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if padded(layout).is_none() {
            // SAFETY: the caller's layout.
            return unsafe { System.alloc_zeroed(layout) };
        }
        // SAFETY: the caller's layout; `alloc` returns `size` writable bytes.
        unsafe {
            let p = self.alloc(layout);
            if !p.is_null() {
                p.write_bytes(0, layout.size());
            }
            p
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if padded(layout).is_none() {
            // SAFETY: allocated by `System` with `layout`; the caller
            // guarantees `new_size` is valid for its alignment.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // SAFETY: the caller's contract for `realloc`: `ptr` came from this
        // allocator with `layout`, and `new_size` rounded up to the
        // alignment does not overflow.
        unsafe {
            let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
            let p = self.alloc(new_layout);
            if !p.is_null() {
                std::ptr::copy_nonoverlapping(ptr, p, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            p
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every alignment from 1 to 4 KiB and sizes around it: aligned as
    /// asked, writable over its whole size, kept intact by `realloc` and
    /// given back (a wrong start would crash `free` or corrupt the heap,
    /// which the later allocations would meet).
    #[test]
    #[allow(unsafe_code)]
    fn blocks_are_aligned_writable_and_given_back() {
        let heap = Heap;
        for shift in 0..=12 {
            let align = 1usize << shift;
            for size in [1, 7, 16, 64, align, align + 1, 3 * align + 5, 5000] {
                let layout = Layout::from_size_align(size, align).expect("a valid layout");
                // SAFETY: a non-zero size; each block is used within its
                // size and freed once with the layout it was made with.
                unsafe {
                    let p = heap.alloc(layout);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "size {size} align {align}");
                    for i in 0..size {
                        p.add(i).write(i as u8);
                    }
                    let grown = heap.realloc(p, layout, size * 2 + 3);
                    assert!(!grown.is_null());
                    assert_eq!(grown as usize % align, 0);
                    for i in 0..size {
                        assert_eq!(grown.add(i).read(), i as u8);
                    }
                    let grown_layout =
                        Layout::from_size_align(size * 2 + 3, align).expect("a valid layout");
                    heap.dealloc(grown, grown_layout);
                    let z = heap.alloc_zeroed(layout);
                    assert_eq!(z as usize % align, 0);
                    assert!((0..size).all(|i| z.add(i).read() == 0));
                    heap.dealloc(z, layout);
                }
            }
        }
    }

    /// The binary runs on this allocator: the runtime's 128-byte aligned
    /// task and I/O state go through the padded branch.
    #[test]
    fn the_runtimes_alignment_takes_the_padded_branch() {
        let layout = Layout::from_size_align(640, 128).expect("a valid layout");
        assert_eq!(
            padded(layout),
            Some(Layout::from_size_align(768, 16).expect("a valid layout"))
        );
        assert_eq!(padded(Layout::new::<[u64; 4]>()), None);
    }
}
