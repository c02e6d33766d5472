//! The aggregator's in-memory table: one accumulator per key, charged against the budget.

use std::hash::Hash;

use crate::operators::memory::budget::table_bytes;
use crate::operators::memory::hash::{FixedHashMap, FixedState};

/// A key's accumulator and the charge of its current footprint, so that a change in size after
/// `add` or `merge` can be charged as a difference.
pub(crate) struct Slot<A> {
    pub(crate) acc: A,
    charge: usize,
}

/// What [`AggTable::update_existing`] did.
pub(crate) enum Update<V> {
    /// The key was in the table; `grew`: its accumulator's charge went up.
    Updated { grew: bool },
    /// The key was not in the table: the value, back.
    Missing(V),
}

/// Key → accumulator, with the bytes held: the table at its capacity plus each entry's charge
/// (key footprint + entry overhead, which never change, and the accumulator's footprint).
pub(crate) struct AggTable<K, A> {
    map: FixedHashMap<K, Slot<A>>,
    charged: usize,
    limit: usize,
}

impl<K: Hash + Eq, A> AggTable<K, A> {
    pub(crate) fn new(limit: usize, seed: u64) -> Self {
        Self {
            map: FixedHashMap::with_hasher(FixedState::for_tables(seed)),
            charged: 0,
            limit,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    fn table_bytes(&self, growing: bool) -> usize {
        table_bytes::<(K, Slot<A>)>(self.map.capacity(), growing)
    }

    /// Whether a new key with charges `key_charge` (its footprint and the entry overhead) and
    /// `acc_charge` fits, counting the table's growth if it is full.
    pub(crate) fn fits_new(&self, key_charge: usize, acc_charge: usize) -> bool {
        // hashbrown grows when an insert finds no free slot left; without removals that is
        // exactly when len == capacity.
        let growing = self.map.len() == self.map.capacity();
        self.table_bytes(growing)
            .saturating_add(self.charged)
            .saturating_add(key_charge)
            .saturating_add(acc_charge)
            <= self.limit
    }

    /// Whether the table holds more than its limit (after an accumulator grew).
    pub(crate) fn over_limit(&self) -> bool {
        self.table_bytes(false).saturating_add(self.charged) > self.limit
    }

    /// If `key` is in the table, applies `update` to its accumulator with `value` and
    /// re-charges it with `measure`'s new footprint: `Updated { grew }`. Otherwise hands `value`
    /// back.
    pub(crate) fn update_existing<V, E>(
        &mut self,
        key: &K,
        value: V,
        update: impl FnOnce(&mut A, V),
        measure: impl FnOnce(&A) -> Result<usize, E>,
    ) -> Result<Update<V>, E> {
        let Some(slot) = self.map.get_mut(key) else {
            return Ok(Update::Missing(value));
        };
        update(&mut slot.acc, value);
        let charge = measure(&slot.acc)?;
        let old = std::mem::replace(&mut slot.charge, charge);
        self.charged = self.charged.saturating_sub(old).saturating_add(charge);
        Ok(Update::Updated { grew: charge > old })
    }

    /// Inserts a key that is not in the table (the caller looked it up).
    pub(crate) fn insert_new(&mut self, key: K, acc: A, key_charge: usize, acc_charge: usize) {
        self.charged = self
            .charged
            .saturating_add(key_charge)
            .saturating_add(acc_charge);
        self.map.insert(
            key,
            Slot {
                acc,
                charge: acc_charge,
            },
        );
    }

    /// Takes every entry out, keeping the table's allocation (it is charged at capacity, so
    /// reusing it costs nothing more).
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = (K, A)> + '_ {
        self.charged = 0;
        self.map.drain().map(|(key, slot)| (key, slot.acc))
    }

    /// Every entry, in the table's (deterministic) order.
    pub(crate) fn into_entries(self) -> std::collections::hash_map::IntoIter<K, Slot<A>> {
        self.map.into_iter()
    }
}
