//! Values by index below a known count, of which perhaps only a few exist: a hash table while
//! few do, a vector of slots once many do.
//!
//! The exchange keeps state per channel and per subpartition only for those that got data: an
//! all-to-all job at P = 10,000 has 10⁸ of each, of which a job of 200 records per source fills
//! 2 %, so a slot for each would be gigabytes per TaskManager. At P = 1,000 most of them get
//! data (2,000 records over 1,000 subpartitions fill ~86 %), and then the table costs what a
//! vector does not: each look-up of an entry written long before (by a producer on another
//! core) misses the cache twice (the control bytes, then the entry) where a slot misses once,
//! and the table grows by doubling into fresh pages while it fills (page faults under its
//! growth were ~4 % of that job's CPU). So a table becomes a vector once its next growth would
//! take about as much memory as one (a slot per index), and stays one.

use crate::base::hash::FixedHashMap;

/// See the module docs.
pub struct IndexTable<V> {
    /// Indices are below it (the vector's length once dense).
    count: u32,
    layout: Layout<V>,
}

enum Layout<V> {
    Sparse(FixedHashMap<u32, V>),
    Dense {
        slots: Vec<Option<V>>,
        /// Slots that are `Some`.
        len: usize,
    },
}

impl<V> IndexTable<V> {
    /// An empty table of indices below `count`.
    pub fn new(count: u32) -> Self {
        Self {
            count,
            layout: Layout::Sparse(FixedHashMap::default()),
        }
    }

    /// Whether it is a vector.
    pub fn is_dense(&self) -> bool {
        matches!(self.layout, Layout::Dense { .. })
    }

    /// Whether `len` entries in a table, at its fullest (7/8 of its buckets) and doubled as it
    /// grows past them, take at least the memory of a slot per index.
    fn dense_pays(&self, len: usize) -> bool {
        let slot = std::mem::size_of::<Option<V>>().max(1);
        let entry = std::mem::size_of::<(u32, V)>() + 1; // and its control byte
        (self.count as usize).saturating_mul(slot) * 7 <= len.saturating_mul(entry) * 2 * 8
    }

    pub fn get(&self, index: u32) -> Option<&V> {
        match &self.layout {
            Layout::Sparse(map) => map.get(&index),
            Layout::Dense { slots, .. } => slots.get(index as usize)?.as_ref(),
        }
    }

    pub fn get_mut(&mut self, index: u32) -> Option<&mut V> {
        match &mut self.layout {
            Layout::Sparse(map) => map.get_mut(&index),
            Layout::Dense { slots, .. } => slots.get_mut(index as usize)?.as_mut(),
        }
    }

    pub fn contains(&self, index: u32) -> bool {
        self.get(index).is_some()
    }

    /// The value at `index` (below the count), made by `make` if there is none.
    ///
    /// # Panics
    /// If `index` is not below the count.
    pub fn get_or_insert_with(&mut self, index: u32, make: impl FnOnce() -> V) -> &mut V {
        assert!(index < self.count, "index {index} of {}", self.count);
        if let Layout::Sparse(map) = &self.layout
            && map.len() >= map.capacity()
            && self.dense_pays(map.len() + 1)
            && !map.contains_key(&index)
        {
            self.make_dense();
        }
        match &mut self.layout {
            Layout::Sparse(map) => map.entry(index).or_insert_with(make),
            Layout::Dense { slots, len } => {
                let slot = &mut slots[index as usize];
                if slot.is_none() {
                    *len += 1;
                }
                slot.get_or_insert_with(make)
            }
        }
    }

    /// Makes room for `additional` more values at once: as a vector if they would make it pay.
    pub fn reserve(&mut self, additional: usize) {
        let Layout::Sparse(map) = &self.layout else {
            return;
        };
        let wanted = map.len().saturating_add(additional);
        if wanted > map.capacity() && self.dense_pays(wanted) {
            self.make_dense();
        } else if let Layout::Sparse(map) = &mut self.layout {
            map.reserve(additional);
        }
    }

    fn make_dense(&mut self) {
        let Layout::Sparse(map) = &mut self.layout else {
            return;
        };
        let mut slots: Vec<Option<V>> = Vec::new();
        slots.resize_with(self.count as usize, || None);
        let len = map.len();
        for (index, value) in map.drain() {
            slots[index as usize] = Some(value);
        }
        self.layout = Layout::Dense { slots, len };
    }

    /// Values it holds.
    pub fn len(&self) -> usize {
        match &self.layout {
            Layout::Sparse(map) => map.len(),
            Layout::Dense { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Each index with a value, and the value, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &V)> {
        let (sparse, dense) = match &self.layout {
            Layout::Sparse(map) => (Some(map.iter().map(|(&index, value)| (index, value))), None),
            Layout::Dense { slots, .. } => (None, Some(slots.iter())),
        };
        let dense = (dense.into_iter().flatten().zip(0u32..))
            .filter_map(|(slot, index)| slot.as_ref().map(|value| (index, value)));
        sparse.into_iter().flatten().chain(dense)
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        let (sparse, dense) = match &mut self.layout {
            Layout::Sparse(map) => (Some(map.values_mut()), None),
            Layout::Dense { slots, .. } => (None, Some(slots.iter_mut().flatten())),
        };
        sparse
            .into_iter()
            .flatten()
            .chain(dense.into_iter().flatten())
    }

    /// Drops every value (and frees the vector).
    pub fn clear(&mut self) {
        self.layout = Layout::Sparse(FixedHashMap::default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value of 64 bytes, as the exchange's are.
    type Value = [u64; 8];

    fn filled(count: u32, indices: impl IntoIterator<Item = u32>) -> IndexTable<Value> {
        let mut table = IndexTable::new(count);
        for index in indices {
            table.get_or_insert_with(index, || [0; 8])[0] += 1;
        }
        table
    }

    #[test]
    fn a_sparse_table_stays_a_table_and_a_dense_one_becomes_a_vector() {
        // 200 of 10,000 (an all-to-all of P = 10,000, 200 records per source).
        let sparse = filled(10_000, (0..200).map(|i| i * 50));
        assert!(!sparse.is_dense());
        assert_eq!(sparse.len(), 200);
        // Most of 1,000.
        let dense = filled(1_000, (0..900).map(|i| (i * 7) % 1_000));
        assert!(dense.is_dense());
        assert_eq!(dense.len(), 900);
        // A reservation for most of them at once makes the vector at once; for a few, not.
        let mut reserved: IndexTable<Value> = IndexTable::new(1_000);
        reserved.reserve(10);
        assert!(!reserved.is_dense());
        reserved.reserve(800);
        assert!(reserved.is_dense());
    }

    #[test]
    fn a_vector_is_never_much_larger_than_the_table_it_replaces() {
        // Densities at which the table turns into a vector: never below ~3/8 of the count
        // (where the doubled table is as large), whatever the count.
        for count in [8u32, 100, 1_000, 4_096, 10_000] {
            let mut table: IndexTable<Value> = IndexTable::new(count);
            let mut index = 0;
            while !table.is_dense() && index < count {
                table.get_or_insert_with(index, || [0; 8]);
                index += 1;
            }
            assert!(table.is_dense(), "count {count}");
            assert!(index * 8 >= count * 3 - 8, "dense at {index} of {count}");
        }
    }

    #[test]
    fn both_layouts_hold_the_same_values() {
        // (count, every how many'th index has a value): the last stays a table.
        for (count, every) in [
            (1u32, 1u32),
            (2, 2),
            (7, 2),
            (64, 2),
            (1_000, 2),
            (10_000, 50),
        ] {
            // In a scrambled order (13 is prime to each count), each made twice.
            let indices: Vec<u32> = (0..count)
                .filter(|i| i % every == 0)
                .map(|i| (i * 13) % count)
                .collect();
            let table = filled(count, indices.iter().chain(&indices).copied());
            let mut expected: Vec<u32> = indices.clone();
            expected.sort_unstable();
            assert_eq!(table.len(), expected.len(), "count {count}");
            assert_eq!(table.is_dense(), count <= 1_000, "count {count}");
            let mut seen: Vec<(u32, u64)> = table.iter().map(|(i, v)| (i, v[0])).collect();
            seen.sort_unstable();
            assert_eq!(seen, expected.iter().map(|&i| (i, 2)).collect::<Vec<_>>());
            let mut table = table;
            for index in 0..count {
                assert_eq!(
                    table.contains(index),
                    expected.binary_search(&index).is_ok()
                );
                assert_eq!(table.get_mut(index).is_some(), table.contains(index));
            }
            assert!(table.get(count).is_none());
            assert_eq!(table.values_mut().count(), expected.len());
            table.clear();
            assert!(table.is_empty());
            assert_eq!(table.iter().count(), 0);
        }
    }
}
