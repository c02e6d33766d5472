//! Lookup indices of the JobManager's hot paths: a hash map with a fixed hash function.
//!
//! The project bans `HashMap` because its default hasher draws a random seed per run, so its
//! iteration order differs between runs and a simulation seed would not replay. A fixed
//! hasher ([`rustc_hash::FxBuildHasher`]: no seed) gives the same order for the same inserts,
//! and it hashes the 16-byte random ids that key these indices in a few instructions. Use it
//! for indices looked up by id on every task event (an ordered `BTreeMap` of 10⁴ random keys
//! costs a cache miss per level there); keep `BTreeMap` wherever the order is read.
//!
//! Only for keys the cluster generates: Fx is no defence against keys chosen to collide. Keys
//! that come from user data (the words of a WordCount) use std's keyed SipHash with a fixed
//! key instead (`operators::builtin::WordCounts`).

/// See the module docs.
#[allow(clippy::disallowed_types)] // a fixed hasher: deterministic, see above
pub type FixedHashMap<K, V> = std::collections::HashMap<K, V, rustc_hash::FxBuildHasher>;
