//! A result partition's subpartitions that have state: a hash table while few of them do, a
//! vector indexed by subpartition once many do.
//!
//! Flink keeps an object per subpartition; here an all-to-all job at P = 10,000 has 10⁸
//! subpartitions, of which a job of 200 records per source fills 2 %: a slot for each would be
//! gigabytes per TaskManager, so a partition starts with a table of those that have state. At
//! P = 1,000 most of them do (2,000 records over 1,000 subpartitions fill ~86 %), and then the
//! table costs what a vector does not: each look-up of an entry its producer wrote long before
//! misses the cache twice (the control bytes, then the entry) where a slot misses once, and the
//! table grows by doubling into fresh pages while it is filled (page faults of those were ~4 % of
//! that job's CPU). So the table becomes a vector once its next growth would be no smaller
//! than one (see [`DENSE_FROM`]), and stays one.

use super::result_partition::ResultSubpartition;
use crate::base::hash::FixedHashMap;

/// A table that must grow turns into a vector once at least this share (numerator,
/// denominator) of the subpartitions have an entry: a slot (64 bytes) per subpartition is then
/// no larger than the grown table (72 bytes an entry with its key, at most 7/8 of twice the
/// buckets in use: ≥ 0.4 × 8/7 × 2 × 73 ≈ 67 bytes per subpartition).
const DENSE_FROM: (usize, usize) = (2, 5);

/// See the module docs.
pub(super) struct SubpartitionTable {
    /// Subpartitions of the partition (the vector's length once dense).
    count: u32,
    layout: Layout,
}

enum Layout {
    Sparse(FixedHashMap<u32, ResultSubpartition>),
    Dense {
        slots: Vec<Option<ResultSubpartition>>,
        /// Slots that are `Some`.
        len: usize,
    },
}

impl SubpartitionTable {
    /// An empty table of a partition of `count` subpartitions.
    pub(super) fn new(count: u32) -> Self {
        Self {
            count,
            layout: Layout::Sparse(FixedHashMap::default()),
        }
    }

    /// Whether it is a vector (for tests).
    #[cfg(test)]
    pub(super) fn is_dense(&self) -> bool {
        matches!(self.layout, Layout::Dense { .. })
    }

    pub(super) fn get(&self, index: u32) -> Option<&ResultSubpartition> {
        match &self.layout {
            Layout::Sparse(map) => map.get(&index),
            Layout::Dense { slots, .. } => slots.get(index as usize)?.as_ref(),
        }
    }

    pub(super) fn get_mut(&mut self, index: u32) -> Option<&mut ResultSubpartition> {
        match &mut self.layout {
            Layout::Sparse(map) => map.get_mut(&index),
            Layout::Dense { slots, .. } => slots.get_mut(index as usize)?.as_mut(),
        }
    }

    pub(super) fn contains(&self, index: u32) -> bool {
        self.get(index).is_some()
    }

    /// The entry of subpartition `index` (below the partition's count), made if it has none.
    pub(super) fn get_or_default(&mut self, index: u32) -> &mut ResultSubpartition {
        debug_assert!(index < self.count, "subpartition {index} of {}", self.count);
        if let Layout::Sparse(map) = &self.layout
            && map.len() >= map.capacity()
            && map.len() * DENSE_FROM.1 >= self.count as usize * DENSE_FROM.0
            && !map.contains_key(&index)
        {
            self.make_dense();
        }
        match &mut self.layout {
            Layout::Sparse(map) => map.entry(index).or_default(),
            Layout::Dense { slots, len } => {
                let slot = &mut slots[index as usize];
                if slot.is_none() {
                    *len += 1;
                }
                slot.get_or_insert_with(ResultSubpartition::default)
            }
        }
    }

    fn make_dense(&mut self) {
        let Layout::Sparse(map) = &mut self.layout else {
            return;
        };
        let mut slots: Vec<Option<ResultSubpartition>> = Vec::new();
        slots.resize_with(self.count as usize, || None);
        let len = map.len();
        for (index, sub) in map.drain() {
            slots[index as usize] = Some(sub);
        }
        self.layout = Layout::Dense { slots, len };
    }

    /// Subpartitions with an entry.
    pub(super) fn len(&self) -> usize {
        match &self.layout {
            Layout::Sparse(map) => map.len(),
            Layout::Dense { len, .. } => *len,
        }
    }

    /// Each subpartition with an entry, and the entry, in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u32, &ResultSubpartition)> {
        let (sparse, dense) = match &self.layout {
            Layout::Sparse(map) => (Some(map.iter().map(|(&index, sub)| (index, sub))), None),
            Layout::Dense { slots, .. } => (None, Some(slots.iter())),
        };
        let dense = dense
            .into_iter()
            .flatten()
            .enumerate()
            .filter_map(|(index, slot)| {
                let index =
                    u32::try_from(index).expect("a partition has at most u32::MAX subpartitions");
                slot.as_ref().map(|sub| (index, sub))
            });
        sparse.into_iter().flatten().chain(dense)
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut ResultSubpartition> {
        let (sparse, dense) = match &mut self.layout {
            Layout::Sparse(map) => (Some(map.values_mut()), None),
            Layout::Dense { slots, .. } => (None, Some(slots.iter_mut().flatten())),
        };
        sparse
            .into_iter()
            .flatten()
            .chain(dense.into_iter().flatten())
    }

    /// Drops every entry (and frees the vector).
    pub(super) fn clear(&mut self) {
        self.layout = Layout::Sparse(FixedHashMap::default());
    }
}

// A slot's size, which `DENSE_FROM` assumes.
const _: () = assert!(std::mem::size_of::<Option<ResultSubpartition>>() <= 64);

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(count: u32, indices: impl IntoIterator<Item = u32>) -> SubpartitionTable {
        let mut table = SubpartitionTable::new(count);
        for index in indices {
            table.get_or_default(index).released = true;
        }
        table
    }

    #[test]
    fn a_sparse_partition_keeps_a_table_and_a_dense_one_becomes_a_vector() {
        // 200 of 10,000 (an all-to-all of P = 10,000, 200 records per source).
        let sparse = filled(10_000, (0..200).map(|i| i * 50));
        assert!(!sparse.is_dense());
        assert_eq!(sparse.len(), 200);
        // Most of 1,000.
        let dense = filled(1_000, (0..900).map(|i| (i * 7) % 1_000));
        assert!(dense.is_dense());
        assert_eq!(dense.len(), 900);
    }

    #[test]
    fn both_layouts_hold_the_same_entries() {
        for count in [1u32, 2, 7, 64, 1_000] {
            // Every other subpartition, in a scrambled order (13 is prime to each count), each
            // made twice.
            let indices: Vec<u32> = (0..count)
                .filter(|i| i % 2 == 0)
                .map(|i| (i * 13) % count)
                .collect();
            let mut table = SubpartitionTable::new(count);
            for &index in indices.iter().chain(&indices) {
                table.get_or_default(index).buffers.push(
                    crate::exchange::partition::spill::Stored::Spilled {
                        offset: u64::from(index),
                        len: 1,
                        bytes: 1,
                    },
                );
            }
            let mut expected: Vec<u32> = indices.clone();
            expected.sort_unstable();
            expected.dedup();
            assert_eq!(table.len(), expected.len(), "count {count}");
            let mut seen: Vec<(u32, usize)> = table
                .iter()
                .map(|(index, sub)| (index, sub.buffers.len()))
                .collect();
            seen.sort_unstable();
            assert_eq!(seen, expected.iter().map(|&i| (i, 2)).collect::<Vec<_>>());
            assert_eq!(table.is_dense(), count >= 7, "count {count}");
            for index in 0..count {
                assert_eq!(
                    table.contains(index),
                    expected.contains(&index),
                    "{index} of {count}"
                );
                assert_eq!(table.get_mut(index).is_some(), expected.contains(&index));
            }
            assert!(table.get(count).is_none());
            assert_eq!(table.values_mut().count(), expected.len());
            table.clear();
            assert_eq!(table.len(), 0);
            assert_eq!(table.iter().count(), 0);
        }
    }
}
