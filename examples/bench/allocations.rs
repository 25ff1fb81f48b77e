//! Counts the heap allocations the process makes, so that a throughput row can say how many a
//! consumed message costs (and the channel limit beside it).
//!
//! The benchmark's global allocator is the system's, counted per thread and added to one shared
//! total every [`FLUSH_EVERY`] allocations: a shared counter bumped on every allocation would
//! bounce its cache line between the cores on each one, and slow down what it measures.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Allocations a thread counts before it adds them to [`TOTAL`]; a count read at the end of a run
/// misses at most this many per thread, against hundreds of thousands of messages.
const FLUSH_EVERY: u64 = 64;

static TOTAL: AtomicU64 = AtomicU64::new(0);

thread_local! {
    // `const` and without a destructor: reading it never allocates, so the allocator may use it.
    static UNFLUSHED: Cell<u64> = const { Cell::new(0) };
}

/// The system allocator, counting.
pub struct Counting;

// SAFETY: every call is passed on unchanged to `System`, which upholds `GlobalAlloc`'s contract;
// the counting touches no memory the allocator hands out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's guarantees for `layout` are `System::alloc`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: `ptr` came from this allocator, that is from `System`, with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as `realloc`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

fn count() {
    // A thread being torn down has no counter left: its allocations go uncounted.
    let _ = UNFLUSHED.try_with(|unflushed| {
        let now = unflushed.get() + 1;
        if now >= FLUSH_EVERY {
            TOTAL.fetch_add(now, Ordering::Relaxed);
            unflushed.set(0);
        } else {
            unflushed.set(now);
        }
    });
}

/// Allocations (and reallocations) so far, all threads together, give or take [`FLUSH_EVERY`] per
/// thread.
pub fn so_far() -> u64 {
    TOTAL.load(Ordering::Relaxed)
}
