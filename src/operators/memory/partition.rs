//! Grace partitioning: records split into spill files by the hash of their key.
//!
//! Each recursion level uses an unrelated hash function (`hash.rs`), so a partition that is
//! still too large is split anew. Splitting cannot help a partition that holds one key (or keys
//! that collide under every level's hash); the operators detect that — no sub-partition is
//! smaller than its parent, or [`MAX_LEVEL`] is reached — and fall back to an algorithm that
//! does not need to split.

use std::hash::Hash;

use serde::Serialize;

use crate::operators::memory::error::SpillError;
use crate::operators::memory::hash::FixedState;
use crate::operators::memory::options::SpillOptions;
use crate::operators::memory::spill_dir::{SpillDir, SpillFile};
use crate::operators::memory::spill_file::SpillWriter;

/// The deepest partitioning level. With 32 partitions per level, level 4 has split the input
/// 32^5 ≈ 3.4·10^7 ways; a partition still too large there is not made of many keys, and
/// splitting further would only rewrite it again.
pub(crate) const MAX_LEVEL: u32 = 4;

/// Writes records into one spill file per partition; files are created on first use, so empty
/// partitions cost nothing.
pub(crate) struct Partitioner<T> {
    dir: SpillDir,
    label: &'static str,
    level: u32,
    hash: FixedState,
    buffer: usize,
    writers: Vec<Option<SpillWriter<T>>>,
}

impl<T: Serialize> Partitioner<T> {
    /// A partitioner for level `level`, naming its files after `label`.
    pub(crate) fn new(options: &SpillOptions, label: &'static str, level: u32) -> Self {
        let mut writers = Vec::new();
        writers.resize_with(options.partitions(), || None);
        Self {
            dir: options.dir().clone(),
            label,
            level,
            hash: FixedState::for_level(options.hash_seed(), level),
            buffer: options.io_buffer(),
            writers,
        }
    }

    /// The partition `key` belongs to at this level.
    pub(crate) fn partition_of<K: Hash + ?Sized>(&self, key: &K) -> usize {
        self.hash.partition_of(key, self.writers.len())
    }

    /// Appends `record` to partition `partition` (from [`Self::partition_of`]).
    pub(crate) fn write(&mut self, partition: usize, record: &T) -> Result<(), SpillError> {
        let slot = &mut self.writers[partition];
        let writer = match slot {
            Some(writer) => writer,
            None => slot.insert(SpillWriter::create(
                &self.dir,
                &format!("{}-l{}-p{partition:02}", self.label, self.level),
                self.buffer,
            )?),
        };
        writer.write(record)
    }

    /// Flushes every partition; returns one entry per partition, `None` for those that got no
    /// record.
    pub(crate) fn finish(self) -> Result<Vec<Option<SpillFile>>, SpillError> {
        self.writers
            .into_iter()
            .map(|writer| writer.map(SpillWriter::finish).transpose())
            .collect()
    }
}
