//! The component's allocator: bump allocation for the life of the
//! instance.
//!
//! The engine gives every decision a fresh instance, so a guest's heap
//! lives for one `decide` call. Carrying the request in, the host calls the
//! guest's `cabi_realloc` once per string and list (a few hundred times for
//! a 20-message conversation), and the SDK then converts, drops and
//! allocates again; with the C library's `dlmalloc` each of those is a
//! search of its free lists and a free a coalescing step. Here an
//! allocation is a pointer bump in a chunk and a free is nothing, except
//! that freeing or growing the most recent allocation reuses its space (the
//! common pattern of a `Vec` or `String` being built).
//!
//! What the arena hands out is never reused otherwise, so it is bounded:
//! chunks grow from 64 KiB up to [`ARENA_BYTES`] in all, allocations larger
//! than [`LARGE`] go to the system allocator, and once the arena is spent
//! every allocation does. An agent that allocates and frees in a long loop
//! therefore wastes at most [`ARENA_BYTES`] before it is back on `dlmalloc`.
//!
//! Only a `wasm32` build uses it; agents that bring their own
//! `#[global_allocator]` turn off the SDK's `arena` feature.

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;

/// The first chunk; each next one doubles.
const FIRST_CHUNK: usize = 64 << 10;
/// Bytes the arena takes from the system allocator at most.
const ARENA_BYTES: usize = 4 << 20;
/// Allocations larger than this go straight to the system allocator.
const LARGE: usize = 16 << 10;
/// Chunks at most: 64 KiB doubling up to 4 MiB in all.
const MAX_CHUNKS: usize = 8;

/// The first chunk, in the module's zeroed data: no `memory.grow` for a
/// decision that fits in it.
#[repr(C, align(16))]
struct First([u8; FIRST_CHUNK]);
static mut FIRST: First = First([0; FIRST_CHUNK]);

/// The allocator: an arena in front of the system allocator.
pub struct Arena {
    state: UnsafeCell<State>,
}

// SAFETY: `wasm32` agents (either target) are single-threaded; nothing else
// shares the state.
unsafe impl Sync for Arena {}

struct State {
    /// The next free byte of the current chunk.
    top: usize,
    /// The end of the current chunk.
    end: usize,
    /// Where the most recent arena allocation starts (0: none).
    last: usize,
    /// Every chunk taken, `(start, end)`; the current one last.
    chunks: [(usize, usize); MAX_CHUNKS],
    /// How many of `chunks` are in use.
    n: usize,
    /// Bytes taken from the system allocator for chunks.
    taken: usize,
}

impl Arena {
    /// An empty arena; the first chunk is taken on the first allocation.
    pub const fn new() -> Self {
        Self { state: UnsafeCell::new(State { top: 0, end: 0, last: 0, chunks: [(0, 0); MAX_CHUNKS], n: 0, taken: 0 }) }
    }
}

impl Default for Arena {
    fn default() -> Self {
        Self::new()
    }
}

impl State {
    /// Whether `ptr` was handed out by the arena.
    fn owns(&self, ptr: usize) -> bool {
        self.chunks[..self.n].iter().rev().any(|&(start, end)| ptr >= start && ptr < end)
    }

    /// Bumps `layout` out of the current chunk, taking a new chunk when it
    /// does not fit; `None` when the arena is spent.
    unsafe fn bump(&mut self, layout: Layout) -> Option<*mut u8> {
        loop {
            let start = self.top.checked_next_multiple_of(layout.align())?;
            let next = start.checked_add(layout.size())?;
            if self.n > 0 && next <= self.end {
                self.top = next;
                self.last = start;
                return Some(start as *mut u8);
            }
            // SAFETY: the caller's contract, passed on.
            unsafe { self.grow()? };
        }
    }

    /// Takes the next chunk: the static first one, then chunks from the
    /// system allocator.
    unsafe fn grow(&mut self) -> Option<()> {
        if self.n == 0 {
            // SAFETY: only its address is taken.
            let chunk = unsafe { std::ptr::addr_of_mut!(FIRST.0) } as usize;
            self.chunks[0] = (chunk, chunk + FIRST_CHUNK);
            self.n = 1;
            self.top = chunk;
            self.end = chunk + FIRST_CHUNK;
            self.last = 0;
            return Some(());
        }
        if self.n == MAX_CHUNKS {
            return None;
        }
        let size = FIRST_CHUNK << self.n;
        if self.taken + size > ARENA_BYTES {
            return None;
        }
        let layout = Layout::from_size_align(size, 16).ok()?;
        // SAFETY: `layout` has a non-zero size.
        let chunk = unsafe { System.alloc(layout) } as usize;
        if chunk == 0 {
            return None;
        }
        self.chunks[self.n] = (chunk, chunk + size);
        self.n += 1;
        self.taken += size;
        self.top = chunk;
        self.end = chunk + size;
        self.last = 0;
        Some(())
    }
}

// SAFETY: every pointer handed out is either a fresh, suitably aligned range
// of a chunk no other allocation overlaps (chunks are never freed, the bump
// pointer only moves back over the most recent allocation when that one is
// freed or resized) or comes from `System`, to which it is returned.
unsafe impl GlobalAlloc for Arena {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: single-threaded (see `Sync`); no other borrow is live.
        let state = unsafe { &mut *self.state.get() };
        if layout.size() <= LARGE
            && let Some(ptr) = unsafe { state.bump(layout) }
        {
            return ptr;
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as in `alloc`.
        let state = unsafe { &mut *self.state.get() };
        let at = ptr as usize;
        if state.owns(at) {
            if at == state.last {
                state.top = at;
                state.last = 0;
            }
            return;
        }
        // SAFETY: not the arena's, so the system allocator's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as in `alloc`.
        let state = unsafe { &mut *self.state.get() };
        let at = ptr as usize;
        if !state.owns(at) {
            // SAFETY: the system allocator's; the caller's contract.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // The most recent allocation grows or shrinks in place while it
        // fits in its chunk.
        if at == state.last && new_size <= LARGE && at.checked_add(new_size).is_some_and(|next| next <= state.end) {
            state.top = at + new_size;
            return ptr;
        }
        if new_size <= layout.size() {
            return ptr;
        }
        // SAFETY: `new_size` is non-zero (larger than the old size) and
        // the caller guarantees it does not overflow when aligned.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: as above.
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both ranges are valid for the old size and distinct
            // (the old one is still allocated).
            unsafe { std::ptr::copy_nonoverlapping(ptr, new, layout.size()) };
            // SAFETY: `ptr` was allocated with `layout`.
            unsafe { self.dealloc(ptr, layout) };
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_allocations_bump_and_the_last_one_is_reused() {
        let arena = Arena::new();
        let small = Layout::from_size_align(24, 8).unwrap();
        unsafe {
            let a = arena.alloc(small);
            let b = arena.alloc(small);
            assert_eq!(b as usize, a as usize + 24);
            arena.dealloc(b, small);
            let c = arena.alloc(small);
            assert_eq!(c, b, "freeing the last allocation gives its space back");
            // Growing the last allocation keeps it in place.
            let grown = arena.realloc(c, small, 100);
            assert_eq!(grown, c);
            // Growing an earlier one moves it and keeps its bytes.
            a.write_bytes(7, 24);
            let moved = arena.realloc(a, small, 200);
            assert_ne!(moved, a);
            assert_eq!(std::slice::from_raw_parts(moved, 24), [7; 24]);
            // Alignment is honoured.
            let big_align = Layout::from_size_align(8, 64).unwrap();
            assert_eq!(arena.alloc(big_align) as usize % 64, 0);
        }
    }

    #[test]
    fn large_and_overflowing_allocations_go_to_the_system() {
        let arena = Arena::new();
        let large = Layout::from_size_align(LARGE + 1, 8).unwrap();
        let chunk = Layout::from_size_align(LARGE, 8).unwrap();
        unsafe {
            let p = arena.alloc(large);
            assert!(!(*arena.state.get()).owns(p as usize));
            arena.dealloc(p, large);
            // Spend the arena; later allocations still succeed.
            let mut kept = Vec::new();
            for _ in 0..(ARENA_BYTES / LARGE + 8) {
                let p = arena.alloc(chunk);
                assert!(!p.is_null());
                p.write_bytes(1, LARGE);
                kept.push(p);
            }
            let state = &*arena.state.get();
            assert!(state.taken <= ARENA_BYTES);
            assert!(!state.owns(*kept.last().unwrap() as usize));
            for p in kept {
                arena.dealloc(p, chunk);
            }
        }
    }
}
