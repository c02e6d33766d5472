//! What an operator did with the disk: for metrics, tests and tuning.

use crate::operators::memory::spill_dir::SpillFile;

/// Counters of one operator's spilling, cumulative over its life (including the output
/// iterator's recursive work). All zero when everything fit in memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpillStats {
    /// Spill files written (runs, merged runs, partitions).
    pub files: u64,
    /// Records written to spill files, counting every rewrite.
    pub records: u64,
    /// Bytes written to spill files, counting every rewrite.
    pub bytes: u64,
    /// Sorter: intermediate merge passes (0 when the runs fit one final merge).
    pub merge_passes: u32,
    /// Grace hashing: the deepest partitioning level used (0 = only the first split).
    pub max_level: u32,
    /// Grace hashing: partitions handled by the fallback for what hashing cannot split (sorted
    /// aggregation; block nested loop join).
    pub fallbacks: u32,
}

impl SpillStats {
    pub(crate) fn wrote(&mut self, file: &SpillFile) {
        self.files += 1;
        self.records += file.records();
        self.bytes += file.bytes();
    }

    /// Adds another operator's counters (a nested sorter's).
    pub(crate) fn absorb(&mut self, other: &SpillStats) {
        self.files += other.files;
        self.records += other.records;
        self.bytes += other.bytes;
        self.merge_passes += other.merge_passes;
        self.max_level = self.max_level.max(other.max_level);
        self.fallbacks += other.fallbacks;
    }

    /// Whether anything was written to disk.
    pub fn spilled(&self) -> bool {
        self.files > 0
    }
}
