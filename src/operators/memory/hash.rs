//! Seeded, deterministic hashing: for the in-memory tables and for choosing spill partitions.
//!
//! Why not the standard library's `RandomState`: its seed changes per process, so the order in
//! which a hash table yields its groups would differ between two runs of the same job, and Flint
//! replays runs from a seed. Why not one fixed hash function everywhere: Grace partitioning must
//! split an oversize partition again with a *different* function, and keys that collide fully
//! under one seed must be likely to separate under the next, which rules out hashes such as
//! FxHash whose collisions do not depend on the seed (`(s + a)·K = (s + b)·K` iff `a = b`, for
//! every seed `s`). This one mixes each word into the state with a folded 64×64→128-bit
//! multiply, which is non-linear in the seed.
//!
//! Not [`crate::base::hash`]: that module has the project's *fixed* hashes — FNV-1a where a
//! value must hash alike in every process and release, Fx for the JobManager's indices of
//! generated ids. Neither takes a seed, so neither can give Grace partitioning its family of
//! unrelated functions, one per level. Both modules serve the same rule (DESIGN §8: no
//! per-process seed, so iteration order replays).
//!
//! The seeds are fixed per job ([`SpillOptions::with_hash_seed`](crate::operators::memory::SpillOptions)), so
//! this is not a defence against keys crafted to collide (hash flooding); see the README.

use std::hash::{BuildHasher, Hash, Hasher};

/// The golden ratio in 64 bits: an odd constant with well-spread bits.
const PHI: u64 = 0x9E37_79B9_7F4A_7C15;
/// A second odd constant for the final mix.
const MIX: u64 = 0xD6E8_FEB8_6659_FD93;
/// Added to the job's seed for the in-memory tables, so that they never hash exactly as a
/// partitioning level does (hashbrown takes its control bits from the top of the hash; if those
/// were equal for every key of a partition, every probe would scan a whole group).
const TABLE_SALT: u64 = 0x5EED_7AB1_E000_0001;

/// The full 128-bit product of `a` and `b`, folded to 64 bits.
#[inline]
fn folded_multiply(a: u64, b: u64) -> u64 {
    let full = u128::from(a) * u128::from(b);
    // Truncations are the point: the low and the high half of the product.
    (full as u64) ^ ((full >> 64) as u64)
}

/// SplitMix64's finalizer: turns related seeds (0, 1, 2, ...) into unrelated ones.
#[inline]
fn scramble(mut x: u64) -> u64 {
    x = x.wrapping_add(PHI);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A hasher whose output depends on its seed non-linearly (module docs).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SeededHasher {
    state: u64,
    multiplier: u64,
}

impl SeededHasher {
    fn new(seed: u64) -> Self {
        let seed = scramble(seed);
        Self {
            state: seed,
            // Odd, so the multiply never loses the low bit.
            multiplier: (seed ^ PHI) | 1,
        }
    }

    #[inline]
    fn mix(&mut self, word: u64) {
        self.state = folded_multiply(self.state ^ word, self.multiplier);
    }
}

impl Hasher for SeededHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            // The length keeps "a\0" and "a" apart when both fit one word.
            self.mix(u64::from_le_bytes(word) ^ ((rest.len() as u64) << 59));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.mix(u64::from(i));
    }

    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.mix(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.mix(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.mix(i);
    }

    #[inline]
    fn write_u128(&mut self, i: u128) {
        // Truncations are the point: the two halves.
        self.mix(i as u64);
        self.mix((i >> 64) as u64);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.mix(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        folded_multiply(self.state ^ MIX, self.multiplier ^ MIX)
    }
}

/// Builds [`SeededHasher`]s with one fixed seed: the `S` of the module's hash tables, and the
/// hash function of one partitioning level. Scrambles its seed once, not per hash.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FixedState {
    initial: SeededHasher,
}

impl FixedState {
    fn new(seed: u64) -> Self {
        Self {
            initial: SeededHasher::new(seed),
        }
    }

    /// The state of an in-memory table of a job with hash seed `seed`.
    pub(crate) fn for_tables(seed: u64) -> Self {
        Self::new(seed ^ TABLE_SALT)
    }

    /// The hash function of partitioning level `level` of a job with hash seed `seed`. Each
    /// level's is unrelated to the others' and to the tables'.
    pub(crate) fn for_level(seed: u64, level: u32) -> Self {
        Self::new(seed.wrapping_add(scramble(u64::from(level) + 1)))
    }

    /// The partition of `key` among `partitions`.
    pub(crate) fn partition_of<K: Hash + ?Sized>(&self, key: &K, partitions: usize) -> usize {
        // Multiply-shift range reduction: uses the high bits, no division, no modulo bias
        // worth mentioning for partition counts far below 2^32.
        ((u128::from(self.hash_one(key)) * partitions as u128) >> 64) as usize
    }
}

impl BuildHasher for FixedState {
    type Hasher = SeededHasher;

    #[inline]
    fn build_hasher(&self) -> SeededHasher {
        self.initial
    }
}

/// A hash table whose iteration order depends only on what was inserted (and the job's seed),
/// never on the process: the only kind this module uses.
#[allow(clippy::disallowed_types)] // a fixed, seeded hasher: deterministic, see the module docs
pub(crate) type FixedHashMap<K, V> = std::collections::HashMap<K, V, FixedState>;

#[cfg(test)]
mod tests {
    use super::*;

    fn hash_with(seed: u64, value: &impl Hash) -> u64 {
        FixedState::new(seed).hash_one(value)
    }

    #[test]
    fn hashes_are_deterministic_and_depend_on_the_seed() {
        assert_eq!(hash_with(1, &"key"), hash_with(1, &"key"));
        assert_ne!(hash_with(1, &"key"), hash_with(2, &"key"));
        assert_ne!(hash_with(1, &"a"), hash_with(1, &"a\0"));
    }

    #[test]
    fn partitions_are_balanced_and_levels_are_independent() {
        let n = 16;
        let mut counts = vec![0usize; n];
        let mut same_partition_next_level = 0;
        let (level0, level1) = (FixedState::for_level(7, 0), FixedState::for_level(7, 1));
        for key in 0u64..160_000 {
            let p = level0.partition_of(&key, n);
            counts[p] += 1;
            if level1.partition_of(&key, n) == p {
                same_partition_next_level += 1;
            }
        }
        for count in counts {
            assert!((9_000..11_000).contains(&count), "{count}");
        }
        // Independent levels: about 1/16 of the keys land in the same index again.
        assert!(
            (8_000..12_000).contains(&same_partition_next_level),
            "{same_partition_next_level}"
        );
    }
}
