//! Memory that spilled buffers are read into, kept for the next reads (Flink's sort-merge
//! shuffle reads into a fixed set of read buffers, `BatchShuffleReadBufferPool`, for the same
//! reason). A fetch reads up to about a megabyte; a fresh allocation of that size comes from the
//! kernel page by page (a fault per page, zeroed) and goes back to it when the fetch's buffers
//! are dropped (a TLB shootdown on every core): reading a blocking partition back spent as much
//! time on that as on copying from the page cache. The buffers handed out share one allocation
//! ([`Bytes::from_owner`]); when the last is dropped, the allocation comes back here.

use std::sync::{Mutex, PoisonError};

use bytes::Bytes;

/// Allocations kept at most, and the largest one kept: a process reads into a few at once (its
/// I/O threads and the consumers reading local partitions), each about a fetch.
const KEPT: usize = 8;
const LARGEST_KEPT: usize = 4 << 20;

/// See the module docs.
pub(super) struct ReadBuffers {
    free: Mutex<Vec<Vec<u8>>>,
}

/// The process's read buffers.
pub(super) static READ_BUFFERS: ReadBuffers = ReadBuffers::new();

impl ReadBuffers {
    const fn new() -> Self {
        Self {
            free: Mutex::new(Vec::new()),
        }
    }

    /// `len` bytes to read into: a kept allocation when there is one (its old contents stay
    /// until overwritten; only growth is zeroed), else a new one. Nothing for none (a fetch of
    /// buffers all in memory).
    pub(super) fn take(&self, len: usize) -> Vec<u8> {
        if len == 0 {
            return Vec::new();
        }
        let kept = self
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let mut buffer = kept.unwrap_or_default();
        buffer.resize(len, 0);
        buffer
    }

    /// `buffer` as shared bytes that return it here once the last of them is dropped.
    pub(super) fn share(&'static self, buffer: Vec<u8>) -> Bytes {
        if buffer.is_empty() {
            return Bytes::new();
        }
        Bytes::from_owner(Recycled { buffer, home: self })
    }

    fn give_back(&self, buffer: Vec<u8>) {
        if buffer.capacity() > LARGEST_KEPT {
            return;
        }
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        if free.len() < KEPT {
            free.push(buffer);
        }
    }
}

/// An allocation on loan from [`ReadBuffers`].
struct Recycled {
    buffer: Vec<u8>,
    home: &'static ReadBuffers,
}

impl AsRef<[u8]> for Recycled {
    fn as_ref(&self) -> &[u8] {
        &self.buffer
    }
}

impl Drop for Recycled {
    fn drop(&mut self) {
        self.home.give_back(std::mem::take(&mut self.buffer));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_allocation_comes_back_when_its_last_slice_is_dropped_and_is_read_into_again() {
        let pool: &'static ReadBuffers = Box::leak(Box::new(ReadBuffers::new()));
        let mut first = pool.take(1000);
        first[..3].copy_from_slice(b"abc");
        let address = first.as_ptr();
        let shared = pool.share(first);
        let (head, tail) = (shared.slice(..3), shared.slice(500..));
        drop(shared);
        assert_eq!(&head[..], b"abc");
        drop(head);
        // A slice still holds it: a new read gets another allocation.
        let other = pool.take(10);
        assert_ne!(other.as_ptr(), address);
        drop(tail);
        let again = pool.take(800);
        assert_eq!(
            again.as_ptr(),
            address,
            "the same allocation, read into again"
        );
        assert_eq!(again.len(), 800);
    }

    #[test]
    fn an_empty_read_neither_takes_nor_keeps_an_allocation() {
        let pool: &'static ReadBuffers = Box::leak(Box::new(ReadBuffers::new()));
        drop(pool.share(vec![0; 16]));
        assert_eq!(pool.take(0).capacity(), 0);
        assert!(pool.share(Vec::new()).is_empty());
        assert_eq!(pool.free.lock().unwrap().len(), 1, "the kept one stays");
    }

    #[test]
    fn at_most_a_few_modest_allocations_are_kept() {
        let pool: &'static ReadBuffers = Box::leak(Box::new(ReadBuffers::new()));
        drop(pool.share(vec![0; LARGEST_KEPT + 1]));
        assert!(pool.free.lock().unwrap().is_empty(), "too large to keep");
        for _ in 0..KEPT + 3 {
            drop(pool.share(vec![0; 16]));
        }
        assert_eq!(pool.free.lock().unwrap().len(), KEPT);
    }
}
