//! What may flow between operators and what may key them.

use std::hash::Hash;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// A record type: anything serde can encode and decode, sendable to a task's thread. Records are
/// serialized once where they leave a task (the exchange's buffers, through
/// [`crate::base::codec`]) and decoded by the consumer; within a chain they move by value.
pub trait Data: Serialize + DeserializeOwned + Send + 'static {}

impl<T: Serialize + DeserializeOwned + Send + 'static> Data for T {}

/// A key: a [`Data`] that can be hashed, compared and ordered (grouping spills by sorting, and a
/// group's output order is the key's), and cloned (a key travels with each group).
///
/// Keys route records by their canonical encoding's hash, never by `Hash` (whose values may
/// differ between builds and platforms): equal keys go to the same subtask in every process.
pub trait Key: Data + Hash + Eq + Ord + Clone + Sync {}

impl<K: Data + Hash + Eq + Ord + Clone + Sync> Key for K {}

/// An `f64` that is a [`Key`]: equal, hashed and ordered by [`f64::total_cmp`] (so NaN has a
/// place, and `-0.0` sorts before `0.0`). For ranking by a computed amount (`top_k` by revenue).
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct OrderedF64(pub f64);

impl PartialEq for OrderedF64 {
    fn eq(&self, other: &Self) -> bool {
        self.0.total_cmp(&other.0).is_eq()
    }
}

impl Eq for OrderedF64 {}

impl PartialOrd for OrderedF64 {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OrderedF64 {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl std::hash::Hash for OrderedF64 {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.to_bits().hash(state);
    }
}
