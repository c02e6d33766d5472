//! The subpartitions of a finished result partition that had data
//! ([`PartitionEnd::Finished`](super::task_manager::PartitionEnd)).
//!
//! Every input gate reading the partition asks whether its one subpartition is in it, three
//! times per notice (the client counting what wakes the gate, the gate counting, the gate
//! finishing the channel): 3 × 10⁶ asks at P = 1,000. A sorted list answered each by a binary
//! search over 4 KB, a branch mispredicted and a cache line missed per step; a bit set answers
//! with one load. It is kept as the ascending list when that is smaller (a few subpartitions of
//! a wide partition, or indices a peer made up), so a decoded set never costs more than twice
//! the list's memory. Encoded as the ascending `Vec<u32>` it replaced: the wire did not change.

use std::fmt;
use std::sync::Arc;

use serde::de::{SeqAccess, Visitor};
use serde::ser::SerializeSeq;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A set of subpartition indices; cloning shares it.
#[derive(Clone)]
pub struct SubpartitionSet {
    repr: Repr,
    len: u32,
}

#[derive(Clone)]
enum Repr {
    /// Bit `i` of word `i / 64`; the last word is not zero.
    Bits(Arc<[u64]>),
    /// Ascending, no duplicates.
    Sorted(Arc<[u32]>),
}

/// Bit sets up to this many words are kept even for few members (128 bytes).
const SMALL_WORDS: usize = 16;

impl SubpartitionSet {
    /// The set of `indices`, in any order, duplicates ignored.
    fn from_indices(mut indices: Vec<u32>) -> Self {
        let Some(&max) = indices.iter().max() else {
            return Self {
                repr: Repr::Sorted(Arc::from([])),
                len: 0,
            };
        };
        let words = max as usize / 64 + 1;
        if words <= indices.len().max(SMALL_WORDS) {
            let mut bits = vec![0u64; words];
            let mut len = 0;
            for index in indices {
                let (word, bit) = (index as usize / 64, 1u64 << (index % 64));
                len += u32::from(bits[word] & bit == 0);
                bits[word] |= bit;
            }
            Self {
                repr: Repr::Bits(bits.into()),
                len,
            }
        } else {
            indices.sort_unstable();
            indices.dedup();
            Self {
                len: indices.len() as u32,
                repr: Repr::Sorted(indices.into()),
            }
        }
    }

    /// Whether `subpartition` is in the set.
    pub fn contains(&self, subpartition: u32) -> bool {
        match &self.repr {
            Repr::Bits(bits) => bits
                .get(subpartition as usize / 64)
                .is_some_and(|word| word & (1 << (subpartition % 64)) != 0),
            Repr::Sorted(list) => list.binary_search(&subpartition).is_ok(),
        }
    }

    /// How many subpartitions it holds.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The subpartitions, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        let (bits, list): (&[u64], &[u32]) = match &self.repr {
            Repr::Bits(bits) => (bits, &[]),
            Repr::Sorted(list) => (&[], list),
        };
        // Each word's set bits, lowest first, clearing one per step.
        let from_bits = bits.iter().enumerate().flat_map(|(word, &bits)| {
            let nonzero = |bits: u64| (bits != 0).then_some(bits);
            std::iter::successors(nonzero(bits), move |&bits| nonzero(bits & (bits - 1)))
                .map(move |bits| word as u32 * 64 + bits.trailing_zeros())
        });
        from_bits.chain(list.iter().copied())
    }

    /// Whether `other` is this very set, not a copy.
    #[cfg(test)]
    pub(crate) fn shares(&self, other: &Self) -> bool {
        match (&self.repr, &other.repr) {
            (Repr::Bits(a), Repr::Bits(b)) => Arc::ptr_eq(a, b),
            (Repr::Sorted(a), Repr::Sorted(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Whether it is held as a bit set (else as the sorted list).
    #[cfg(test)]
    pub(crate) fn is_bits(&self) -> bool {
        matches!(self.repr, Repr::Bits(_))
    }
}

impl FromIterator<u32> for SubpartitionSet {
    fn from_iter<I: IntoIterator<Item = u32>>(indices: I) -> Self {
        Self::from_indices(indices.into_iter().collect())
    }
}

impl From<Vec<u32>> for SubpartitionSet {
    fn from(indices: Vec<u32>) -> Self {
        Self::from_indices(indices)
    }
}

impl PartialEq for SubpartitionSet {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl Eq for SubpartitionSet {}

impl fmt::Debug for SubpartitionSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl Serialize for SubpartitionSet {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.len()))?;
        for index in self.iter() {
            seq.serialize_element(&index)?;
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for SubpartitionSet {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Indices;
        impl<'de> Visitor<'de> for Indices {
            type Value = SubpartitionSet;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of subpartition indices")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                // The hint is the peer's word: only as much as a frame could hold.
                let mut indices = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
                while let Some(index) = seq.next_element::<u32>()? {
                    indices.push(index);
                }
                Ok(SubpartitionSet::from_indices(indices))
            }
        }
        deserializer.deserialize_seq(Indices)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::codec;

    /// Sets as the list, the bit set or both hold them: empty, dense, sparse, one word, the
    /// edges of a word, huge indices, unsorted with duplicates.
    fn samples() -> Vec<Vec<u32>> {
        vec![
            vec![],
            vec![0],
            vec![63, 64],
            (0..1_000).filter(|i| i % 7 != 3).collect(),
            vec![9_999],
            vec![5, 1, 5, 3, 1],
            (0..1_800).map(|s| u32::MAX - 1_800 + s).collect(),
            (0..100).map(|i| i * 1_000).collect(),
        ]
    }

    #[test]
    fn it_encodes_as_the_ascending_list_it_replaced() {
        for indices in samples() {
            let mut list = indices.clone();
            list.sort_unstable();
            list.dedup();
            let set = SubpartitionSet::from(indices);
            assert_eq!(codec::encode(&set).unwrap(), codec::encode(&list).unwrap());
            let decoded: SubpartitionSet = codec::decode(&codec::encode(&list).unwrap()).unwrap();
            assert_eq!(decoded, set);
            assert_eq!(decoded.iter().collect::<Vec<_>>(), list);
            assert_eq!(decoded.len(), list.len());
        }
    }

    #[test]
    fn it_holds_exactly_its_members() {
        for indices in samples() {
            let set = SubpartitionSet::from(indices.clone());
            let max = indices.iter().max().copied().unwrap_or(0);
            let probes = (0..max.saturating_add(130).min(20_000)).chain([
                max,
                max.saturating_add(1),
                u32::MAX,
            ]);
            for probe in probes {
                assert_eq!(set.contains(probe), indices.contains(&probe), "{probe}");
            }
        }
    }

    #[test]
    fn a_few_far_indices_stay_a_list_and_many_near_ones_a_bit_set() {
        // A peer naming u32::MAX must not make this side allocate 512 MiB.
        let far: SubpartitionSet = codec::decode(&codec::encode(&vec![u32::MAX]).unwrap()).unwrap();
        assert!(!far.is_bits());
        assert!(!SubpartitionSet::from(vec![9_999]).is_bits());
        assert!(SubpartitionSet::from(vec![999]).is_bits());
        assert!(SubpartitionSet::from((0..1_000).collect::<Vec<_>>()).is_bits());
        assert!(SubpartitionSet::from((0..10_000).step_by(64).collect::<Vec<_>>()).is_bits());
    }
}
