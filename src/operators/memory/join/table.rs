//! The join's in-memory build table, and the cursor that walks one probe record's matches.
//!
//! Build rows sit in one `Vec` in arrival order; each key maps to the first and last row of a
//! chain threaded through a parallel `Vec<u32>` of successors. Three allocations in all however
//! many keys there are (a `HashMap<K, Vec<R>>` would make one per key, each with spare
//! capacity the budget would have to guess at), and a key's matches come out in arrival order.

use std::hash::Hash;

use crate::operators::memory::budget::{next_vec_capacity, table_bytes, vec_bytes};
use crate::operators::memory::hash::{FixedHashMap, FixedState};

/// The end of a chain.
pub(crate) const END: u32 = u32::MAX;

/// First and last row of one key's chain.
#[derive(Clone, Copy)]
struct Chain {
    first: u32,
    last: u32,
}

/// Build rows by key, with the bytes held: the three containers at capacity plus each row's
/// charge (and each distinct key's).
pub(crate) struct BuildTable<K, R> {
    heads: FixedHashMap<K, Chain>,
    rows: Vec<R>,
    next: Vec<u32>,
    charged: usize,
    limit: usize,
}

impl<K: Hash + Eq, R> BuildTable<K, R> {
    pub(crate) fn new(limit: usize, seed: u64) -> Self {
        Self {
            heads: FixedHashMap::with_hasher(FixedState::for_tables(seed)),
            rows: Vec::new(),
            next: Vec::new(),
            charged: 0,
            limit,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Lowers the limit (a block nested loop join keeps a bitmap beside the table).
    pub(crate) fn set_limit(&mut self, limit: usize) {
        self.limit = limit;
    }

    /// Bytes held if one more row is added, of a new key or not.
    fn bytes_with_one_more(&self, new_key: bool) -> usize {
        let rows_growing = self.rows.len() == self.rows.capacity();
        let heads_growing = new_key && self.heads.len() == self.heads.capacity();
        vec_bytes::<R>(self.rows.capacity(), rows_growing)
            .saturating_add(vec_bytes::<u32>(self.next.capacity(), rows_growing))
            .saturating_add(table_bytes::<(K, Chain)>(
                self.heads.capacity(),
                heads_growing,
            ))
            .saturating_add(self.charged)
    }

    /// Adds `row` under `key` if it fits the limit — `row_charge` for the row, plus
    /// `key_charge` if the key is new — or if the table is empty (a table always holds one
    /// row). Otherwise hands both back.
    pub(crate) fn try_insert(
        &mut self,
        key: K,
        row: R,
        row_charge: usize,
        key_charge: usize,
    ) -> Result<(), (K, R)> {
        let chain = self.heads.get(&key).copied();
        let charge = row_charge.saturating_add(if chain.is_none() { key_charge } else { 0 });
        let full = self.rows.len() >= END as usize;
        if !self.is_empty()
            && (full
                || self
                    .bytes_with_one_more(chain.is_none())
                    .saturating_add(charge)
                    > self.limit)
        {
            return Err((key, row));
        }
        if self.rows.len() == self.rows.capacity() {
            let capacity = self.rows.capacity();
            let grow = next_vec_capacity(capacity) - capacity;
            self.rows.reserve_exact(grow);
            self.next.reserve_exact(grow);
        }
        // Below END: checked above (an empty table has index 0).
        let index = self.rows.len() as u32;
        self.rows.push(row);
        self.next.push(END);
        match chain {
            Some(chain) => {
                self.next[chain.last as usize] = index;
                self.heads.insert(
                    key,
                    Chain {
                        first: chain.first,
                        last: index,
                    },
                );
            }
            None => {
                self.heads.insert(
                    key,
                    Chain {
                        first: index,
                        last: index,
                    },
                );
            }
        }
        self.charged = self.charged.saturating_add(charge);
        Ok(())
    }

    /// The first row of `key`'s chain, or [`END`].
    pub(crate) fn first(&self, key: &K) -> u32 {
        self.heads.get(key).map_or(END, |chain| chain.first)
    }

    /// Empties the table, keeping its allocations (charged at capacity).
    pub(crate) fn clear(&mut self) {
        self.heads.clear();
        self.rows.clear();
        self.next.clear();
        self.charged = 0;
    }

    /// The rows, in arrival order.
    pub(crate) fn into_rows(self) -> Vec<R> {
        self.rows
    }
}

/// Walks the matches of one probe record: yields `(left, Some(right))` per match (cloning the
/// left record for all but the last), then, for an outer join without a match, `(left, None)`.
pub(crate) struct ProbeCursor<L> {
    left: Option<L>,
    next: u32,
    matched: bool,
}

impl<L: Clone> ProbeCursor<L> {
    /// A cursor for `left` starting at chain position `first` (from [`BuildTable::first`]).
    pub(crate) fn new(left: L, first: u32) -> Self {
        Self {
            left: Some(left),
            next: first,
            matched: false,
        }
    }

    /// A cursor that yields nothing.
    pub(crate) fn empty() -> Self {
        Self {
            left: None,
            next: END,
            matched: false,
        }
    }

    /// Whether any match was yielded.
    pub(crate) fn matched(&self) -> bool {
        self.matched
    }

    /// The next output row. `emit_unmatched`: a left record without matches yields
    /// `(left, None)` (left outer join) instead of nothing.
    pub(crate) fn step<K, R: Clone>(
        &mut self,
        table: &BuildTable<K, R>,
        emit_unmatched: bool,
    ) -> Option<(L, Option<R>)> {
        if self.next != END {
            let index = self.next as usize;
            self.next = table.next[index];
            self.matched = true;
            let right = table.rows[index].clone();
            let left = if self.next == END {
                self.left.take()?
            } else {
                self.left.clone()?
            };
            return Some((left, Some(right)));
        }
        let left = self.left.take()?;
        (emit_unmatched && !self.matched).then_some((left, None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outputs(
        table: &BuildTable<u32, &'static str>,
        key: u32,
        outer: bool,
    ) -> Vec<(u32, Option<&'static str>)> {
        let mut cursor = ProbeCursor::new(key, table.first(&key));
        std::iter::from_fn(|| cursor.step(table, outer)).collect()
    }

    #[test]
    fn chains_keep_arrival_order_and_outer_rows_appear_once() {
        let mut table = BuildTable::new(usize::MAX, 0);
        for (key, row) in [(1, "a"), (2, "b"), (1, "c"), (1, "d")] {
            table.try_insert(key, row, 0, 0).unwrap();
        }
        assert_eq!(
            outputs(&table, 1, false),
            [(1, Some("a")), (1, Some("c")), (1, Some("d"))]
        );
        assert_eq!(outputs(&table, 2, true), [(2, Some("b"))]);
        assert_eq!(outputs(&table, 3, true), [(3, None)]);
        assert_eq!(outputs(&table, 3, false), []);
    }

    #[test]
    fn a_full_table_refuses_but_an_empty_one_always_accepts() {
        let mut table = BuildTable::<u32, u64>::new(10, 0);
        assert!(table.try_insert(1, 1, 1000, 0).is_ok());
        assert!(table.try_insert(2, 2, 1, 0).is_err());
        table.clear();
        assert!(table.try_insert(2, 2, 1000, 0).is_ok());
    }
}
