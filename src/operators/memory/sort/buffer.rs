//! The sorter's in-memory buffer: records with their keys, charged against the budget.

use std::cmp::Ordering;

use crate::operators::memory::budget::{next_vec_capacity, vec_bytes};
use crate::operators::memory::sort::SortOrder;

/// A buffered record: its key, computed once (a comparison must not call the key function,
/// which may allocate), and its arrival number, which makes an unstable in-place sort stable.
pub(crate) struct Entry<K, T> {
    pub(crate) key: K,
    seq: u64,
    pub(crate) value: T,
}

/// Records in arrival order until sorted, with the bytes they are charged.
pub(crate) struct SortBuffer<K, T> {
    entries: Vec<Entry<K, T>>,
    /// The charges of the buffered records (footprints and overheads; `budget.rs`).
    charged: usize,
    limit: usize,
    next_seq: u64,
}

impl<K: Ord, T> SortBuffer<K, T> {
    /// An empty buffer that holds at most `limit` bytes (but always at least one record).
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            entries: Vec::new(),
            charged: 0,
            limit,
            next_seq: 0,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether a record charged `charge` fits, counting the growth of the entries' buffer if
    /// it is full (old and new buffer are both live while it grows).
    pub(crate) fn fits(&self, charge: usize) -> bool {
        let growing = self.entries.len() == self.entries.capacity();
        vec_bytes::<Entry<K, T>>(self.entries.capacity(), growing)
            .saturating_add(self.charged)
            .saturating_add(charge)
            <= self.limit
    }

    /// Adds a record. The caller has checked [`Self::fits`] or found the buffer empty.
    pub(crate) fn push(&mut self, key: K, value: T, charge: usize) {
        if self.entries.len() == self.entries.capacity() {
            let capacity = self.entries.capacity();
            self.entries
                .reserve_exact(next_vec_capacity(capacity) - capacity);
        }
        self.entries.push(Entry {
            key,
            seq: self.next_seq,
            value,
        });
        self.next_seq += 1;
        self.charged = self.charged.saturating_add(charge);
    }

    /// Sorts the buffered records by key (`order`), ties in arrival order. In place:
    /// `sort_unstable_by` allocates nothing, where the stable sort would allocate a scratch
    /// buffer of up to half the entries outside the budget; the arrival number restores
    /// stability.
    pub(crate) fn sort(&mut self, order: SortOrder) {
        self.entries
            .sort_unstable_by(|a, b| order.compare(&a.key, &b.key).then(a.seq.cmp(&b.seq)));
    }

    /// Takes the records out in their current order, keeping the entries' buffer (it is
    /// charged at capacity, so reusing it costs nothing more).
    pub(crate) fn drain(&mut self) -> std::vec::Drain<'_, Entry<K, T>> {
        self.charged = 0;
        self.entries.drain(..)
    }

    /// All records, in their current order.
    pub(crate) fn into_entries(self) -> Vec<Entry<K, T>> {
        self.entries
    }
}

impl SortOrder {
    /// `a` against `b` in this order.
    #[inline]
    pub(crate) fn compare<K: Ord>(self, a: &K, b: &K) -> Ordering {
        match self {
            SortOrder::Ascending => a.cmp(b),
            SortOrder::Descending => b.cmp(a),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorting_is_stable_in_both_orders() {
        let mut buffer = SortBuffer::new(usize::MAX);
        for (i, key) in [3, 1, 3, 2, 1, 3].into_iter().enumerate() {
            buffer.push(key, i, 0);
        }
        buffer.sort(SortOrder::Ascending);
        let got: Vec<_> = buffer.drain().map(|e| (e.key, e.value)).collect();
        assert_eq!(got, [(1, 1), (1, 4), (2, 3), (3, 0), (3, 2), (3, 5)]);
        for (i, key) in [3, 1, 3, 2, 1, 3].into_iter().enumerate() {
            buffer.push(key, i, 0);
        }
        buffer.sort(SortOrder::Descending);
        let got: Vec<_> = buffer.drain().map(|e| (e.key, e.value)).collect();
        assert_eq!(got, [(3, 0), (3, 2), (3, 5), (2, 3), (1, 1), (1, 4)]);
    }

    #[test]
    fn growth_is_charged_before_it_happens() {
        let entry = size_of::<Entry<u64, u64>>();
        // Room for 16 entries plus their charges, but not for growing to 32 while 16 live.
        let mut buffer = SortBuffer::<u64, u64>::new(16 * entry + 16 * 10 + 10);
        assert!(buffer.fits(10), "the first allocation (0 → 16) fits");
        for i in 0..16 {
            assert!(buffer.fits(10));
            buffer.push(i, i, 10);
        }
        assert!(
            !buffer.fits(10),
            "growing to 32 needs 48 entries' worth at once"
        );
    }
}
