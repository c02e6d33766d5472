//! The aggregator's in-memory table: one accumulator per key, charged against the budget.

use std::collections::hash_map::Entry;
use std::hash::Hash;

use crate::operators::memory::budget::table_bytes;
use crate::operators::memory::hash::{FixedHashMap, FixedState};

/// A key's accumulator and the charge of its current footprint, so that a change in size after
/// `add` or `merge` can be charged as a difference.
pub(crate) struct Slot<A> {
    pub(crate) acc: A,
    charge: usize,
}

/// What [`AggTable::upsert`] did.
pub(crate) enum Upserted<K, A> {
    /// The key was in the table; `grew`: its accumulator's charge went up.
    Updated { grew: bool },
    /// A new key, placed.
    Inserted,
    /// A new key that does not fit beside the others (the caller spills them, then places it
    /// with [`AggTable::insert_new`]): back, with its new accumulator and their charges.
    DoesNotFit {
        key: K,
        acc: A,
        key_charge: usize,
        acc_charge: usize,
    },
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

    fn table_bytes(&self, growing: bool) -> usize {
        table_bytes::<(K, Slot<A>)>(self.map.capacity(), growing)
    }

    /// Whether the table holds more than its limit (after an accumulator grew).
    pub(crate) fn over_limit(&self) -> bool {
        self.table_bytes(false).saturating_add(self.charged) > self.limit
    }

    /// Folds `value` into `key`'s accumulator with `update`, or starts one with `create` if
    /// the key is new and fits (its charge `key_charge`, the accumulator's `measure`, and the
    /// table's growth if it is full); re-charges what changed. One probe of the table either
    /// way, where a lookup and then an insert probed twice.
    pub(crate) fn upsert<V, E>(
        &mut self,
        key: K,
        value: V,
        update: impl FnOnce(&mut A, V),
        create: impl FnOnce(V) -> A,
        key_charge: impl FnOnce(&K) -> Result<usize, E>,
        measure: impl Fn(&A) -> Result<usize, E>,
    ) -> Result<Upserted<K, A>, E> {
        let (len, capacity) = (self.map.len(), self.map.capacity());
        match self.map.entry(key) {
            Entry::Occupied(mut entry) => {
                let slot = entry.get_mut();
                update(&mut slot.acc, value);
                let charge = measure(&slot.acc)?;
                let old = std::mem::replace(&mut slot.charge, charge);
                self.charged = self.charged.saturating_sub(old).saturating_add(charge);
                Ok(Upserted::Updated { grew: charge > old })
            }
            Entry::Vacant(entry) => {
                let acc = create(value);
                let key_charge = key_charge(entry.key())?;
                let acc_charge = measure(&acc)?;
                // hashbrown grows when an insert finds no free slot left; without removals
                // that is exactly when len == capacity.
                let fits = table_bytes::<(K, Slot<A>)>(capacity, len == capacity)
                    .saturating_add(self.charged)
                    .saturating_add(key_charge)
                    .saturating_add(acc_charge)
                    <= self.limit;
                if !fits && len > 0 {
                    return Ok(Upserted::DoesNotFit {
                        key: entry.into_key(),
                        acc,
                        key_charge,
                        acc_charge,
                    });
                }
                entry.insert(Slot {
                    acc,
                    charge: acc_charge,
                });
                self.charged = self
                    .charged
                    .saturating_add(key_charge)
                    .saturating_add(acc_charge);
                Ok(Upserted::Inserted)
            }
        }
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
