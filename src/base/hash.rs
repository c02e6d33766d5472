//! The project's hashes, all fixed (no per-run seed): [`fnv1a`] where a value must hash the
//! same in every process and release (routing records, vertex ids), [`FixedHashMap`] for the
//! lookup indices of the JobManager's hot paths.
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

/// See the module docs.
#[allow(clippy::disallowed_types)] // a fixed hasher: deterministic, see above
pub type FixedHashSet<K> = std::collections::HashSet<K, rustc_hash::FxBuildHasher>;

/// FNV-1a: a stable hash (std's `DefaultHasher` may change between releases).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_published_test_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
