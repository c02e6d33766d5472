//! What every spilling operator is given, and how it divides its budget between records and IO
//! buffers.
//!
//! The division: at most a quarter of the budget goes to IO buffers, the rest to records and
//! tables. The buffers must serve the most files an operator has open at once — a merge's
//! inputs plus its output, or a partitioning's outputs plus its input — so the fan-in and the
//! partition count shrink (never below 2) before a buffer drops below [`MIN_IO_BUFFER`]. A
//! buffer never exceeds [`MAX_IO_BUFFER`]: past that, sequential IO gets no faster.
//!
//! Budgets below ~64 KiB cannot hold even two minimal buffers in a quarter; the records then
//! still get half of the budget and the buffers overshoot it slightly. Such budgets are for
//! tests that force spilling, not for production.

use crate::operators::memory::budget::{DEFAULT_ENTRY_OVERHEAD, MemoryBudget, Meter};
use crate::operators::memory::spill_dir::SpillDir;

/// The smallest IO buffer an operator uses.
pub const MIN_IO_BUFFER: usize = 1024;
/// The largest IO buffer an operator uses.
pub const MAX_IO_BUFFER: usize = 64 * 1024;
/// The default bound on spill files merged at once (and so open at once) by the sorter.
pub const DEFAULT_MAX_FAN_IN: usize = 64;
/// The default number of partitions a Grace hash operator splits its input into per level.
pub const DEFAULT_PARTITIONS: usize = 32;
/// The default hash seed. Fixed, so that output order is the same in every run of a job.
pub const DEFAULT_HASH_SEED: u64 = 0x466C_696E_7453_706C; // "FlintSpl"

/// How a spilling operator may use memory and disk. Cheap to clone; the operators of one task
/// share its [`SpillDir`].
#[derive(Clone, Debug)]
pub struct SpillOptions {
    budget: MemoryBudget,
    dir: SpillDir,
    max_fan_in: usize,
    partitions: usize,
    entry_overhead: usize,
    hash_seed: u64,
}

impl SpillOptions {
    /// The defaults: fan-in ≤ [`DEFAULT_MAX_FAN_IN`], [`DEFAULT_PARTITIONS`] partitions, an
    /// entry overhead of [`DEFAULT_ENTRY_OVERHEAD`] bytes, seed [`DEFAULT_HASH_SEED`].
    pub fn new(budget: MemoryBudget, dir: SpillDir) -> Self {
        Self {
            budget,
            dir,
            max_fan_in: DEFAULT_MAX_FAN_IN,
            partitions: DEFAULT_PARTITIONS,
            entry_overhead: DEFAULT_ENTRY_OVERHEAD,
            hash_seed: DEFAULT_HASH_SEED,
        }
    }

    /// Bounds the runs a sorter merges at once (at least 2). Fewer means more merge passes over
    /// the data; more means more open files and smaller buffers.
    pub fn with_max_fan_in(mut self, fan_in: usize) -> Self {
        self.max_fan_in = fan_in.max(2);
        self
    }

    /// The partitions per level of Grace hashing (at least 2).
    pub fn with_partitions(mut self, partitions: usize) -> Self {
        self.partitions = partitions.max(2);
        self
    }

    /// The bytes charged per record beyond its footprint (see `budget.rs`). Raise it for records
    /// made of many small allocations.
    pub fn with_entry_overhead(mut self, bytes: usize) -> Self {
        self.entry_overhead = bytes;
        self
    }

    /// The seed of every hash function the operator uses. Output order depends on it and on
    /// nothing else; a job may derive it from its configuration.
    pub fn with_hash_seed(mut self, seed: u64) -> Self {
        self.hash_seed = seed;
        self
    }

    /// The budget.
    pub fn budget(&self) -> MemoryBudget {
        self.budget
    }

    /// The spill directory.
    pub fn dir(&self) -> &SpillDir {
        &self.dir
    }

    pub(crate) fn hash_seed(&self) -> u64 {
        self.hash_seed
    }

    pub(crate) fn meter(&self) -> Meter {
        Meter::new(self.budget, self.entry_overhead)
    }

    /// How many buffers of [`MIN_IO_BUFFER`] fit the IO quarter of the budget.
    fn min_buffers_affordable(&self) -> usize {
        self.budget.bytes() / 4 / MIN_IO_BUFFER
    }

    /// The runs a sorter merges at once: one buffer is for the merge's output.
    pub(crate) fn fan_in(&self) -> usize {
        self.max_fan_in
            .min(self.min_buffers_affordable().saturating_sub(1))
            .max(2)
    }

    /// The partitions per level of Grace hashing: one buffer is for the partitioning's input.
    pub(crate) fn partitions(&self) -> usize {
        self.partitions
            .min(self.min_buffers_affordable().saturating_sub(1))
            .max(2)
    }

    /// The most files an operator has open at once.
    fn open_files(&self) -> usize {
        self.fan_in().max(self.partitions()) + 1
    }

    /// The size of every IO buffer.
    pub(crate) fn io_buffer(&self) -> usize {
        (self.budget.bytes() / 4 / self.open_files()).clamp(MIN_IO_BUFFER, MAX_IO_BUFFER)
    }

    /// The bytes left for records and tables once the IO buffers are set aside.
    pub(crate) fn record_memory(&self) -> usize {
        let io = self.io_buffer().saturating_mul(self.open_files());
        let budget = self.budget.bytes();
        budget.saturating_sub(io).max(budget / 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(budget: MemoryBudget) -> SpillOptions {
        let parent = std::env::temp_dir();
        SpillOptions::new(budget, SpillDir::create_in(&parent).unwrap())
    }

    #[test]
    fn a_production_budget_gets_full_fan_in_and_large_buffers() {
        let o = options(MemoryBudget::mib(16));
        assert_eq!(o.fan_in(), 64);
        assert_eq!(o.partitions(), 32);
        assert!((60 * 1024..=64 * 1024).contains(&o.io_buffer()));
        assert!(o.record_memory() >= 12 * 1024 * 1024);
    }

    #[test]
    fn a_small_budget_shrinks_fan_in_before_buffers() {
        let o = options(MemoryBudget::new(64 * 1024));
        assert_eq!(o.fan_in(), 15);
        assert_eq!(o.partitions(), 15);
        assert_eq!(o.io_buffer(), 1024);
        assert!(o.record_memory() >= 48 * 1024);
        let tiny = options(MemoryBudget::new(4096));
        assert_eq!((tiny.fan_in(), tiny.partitions()), (2, 2));
        assert_eq!(tiny.record_memory(), 2048);
    }

    #[test]
    fn unlimited_never_overflows() {
        let o = options(MemoryBudget::unlimited());
        assert_eq!(o.fan_in(), 64);
        assert!(o.record_memory() > usize::MAX / 2);
    }
}
