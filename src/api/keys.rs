//! Key groups (Flink's `KeyGroupRangeAssignment`): a key hashes into one of `max_parallelism`
//! key groups, and a consumer of parallelism `n` takes a contiguous range of them, so that a
//! later rescaling (or keyed state) can move whole key groups. The hash is of the key's
//! canonical encoding, so it is the same in every process, build and platform.

use std::sync::Arc;

use serde::Serialize;

use super::data::Key;
use crate::base::codec;
use crate::base::hash::fnv1a;
use crate::operators::OperatorError;

/// The default max parallelism of a job whose largest vertex has parallelism `parallelism`
/// (Flink's rule): 1.5 × that, rounded up to a power of two, at least 128 and at most 32,768.
pub fn default_max_parallelism(parallelism: u32) -> u32 {
    let wanted = u64::from(parallelism) + u64::from(parallelism / 2);
    wanted.next_power_of_two().clamp(128, 32_768) as u32
}

/// The stable hash of a key: FNV-1a of its canonical encoding, finished with a 64-bit mixer so
/// the low bits (a key group is the hash modulo the max parallelism) depend on every byte.
pub fn hash_key<K: Serialize>(key: &K, scratch: &mut Vec<u8>) -> Result<u64, OperatorError> {
    scratch.clear();
    codec::encode_into(key, scratch)
        .map_err(|e| OperatorError::Failed(format!("cannot encode a key: {e}")))?;
    let mut x = fnv1a(scratch);
    // MurmurHash3's 64-bit finalizer.
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    Ok(x)
}

/// The key group of a hash.
pub fn key_group(hash: u64, max_parallelism: u32) -> u32 {
    (hash % u64::from(max_parallelism.max(1))) as u32
}

/// The consumer subtask (of `parallelism`) that owns the key group of `hash` (Flink's
/// `computeOperatorIndexForKeyGroup`).
pub fn subtask_of_key_group(hash: u64, max_parallelism: u32, parallelism: usize) -> usize {
    let group = u64::from(key_group(hash, max_parallelism));
    (group * parallelism as u64 / u64::from(max_parallelism.max(1))) as usize
}

/// A record's key hash, given its key extractor.
pub(crate) struct KeyHash<T>(
    Arc<dyn Fn(&T, &mut Vec<u8>) -> Result<u64, OperatorError> + Send + Sync>,
);

impl<T> Clone for KeyHash<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T: 'static> KeyHash<T> {
    /// Hashes the key `key` extracts.
    pub fn new<K: Key>(key: Arc<dyn Fn(&T) -> K + Send + Sync>) -> Self {
        Self(Arc::new(move |record, scratch| {
            hash_key(&key(record), scratch)
        }))
    }

    /// The hash of `record`'s key.
    pub fn hash(&self, record: &T, scratch: &mut Vec<u8>) -> Result<u64, OperatorError> {
        (self.0)(record, scratch)
    }
}

impl<K: Key, A: 'static> KeyHash<(K, A)> {
    /// Hashes a pair's first element, its key, where it lies (no clone): the same hash as
    /// [`KeyHash::new`] of a function returning that key.
    pub fn first() -> Self {
        Self(Arc::new(|(key, _): &(K, A), scratch| {
            hash_key(key, scratch)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_max_parallelism_is_flinks() {
        assert_eq!(default_max_parallelism(1), 128);
        assert_eq!(default_max_parallelism(100), 256);
        assert_eq!(default_max_parallelism(10_000), 16_384);
        assert_eq!(default_max_parallelism(100_000), 32_768);
    }

    #[test]
    fn key_groups_split_into_contiguous_ranges_that_cover_every_consumer() {
        let max = 128;
        for parallelism in [1usize, 2, 3, 7, 128] {
            let owners: Vec<usize> = (0..u64::from(max))
                .map(|group| subtask_of_key_group(group, max, parallelism))
                .collect();
            assert!(owners.windows(2).all(|w| w[0] <= w[1]), "contiguous");
            assert_eq!(owners.first(), Some(&0));
            assert_eq!(owners.last(), Some(&(parallelism - 1)));
        }
    }

    #[test]
    fn equal_keys_hash_equally_and_keys_spread_over_groups() {
        let mut scratch = Vec::new();
        let a = hash_key(&("word", 7u32), &mut scratch).unwrap();
        assert_eq!(a, hash_key(&("word", 7u32), &mut scratch).unwrap());
        let mut groups = std::collections::BTreeSet::new();
        for i in 0..10_000u64 {
            groups.insert(key_group(hash_key(&i, &mut scratch).unwrap(), 128));
        }
        assert_eq!(groups.len(), 128, "every key group gets keys");
    }
}
