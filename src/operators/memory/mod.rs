//! Managed memory: bounded-memory building blocks for batch operators.
//!
//! Flink gives each slot a share of the TaskManager's managed memory
//! (`taskmanager.memory.managed.size`; here [`TaskContext::managed_memory`](super::TaskContext::managed_memory))
//! and its batch operators — sort, hash aggregation, hash join — stay within it by spilling to
//! disk. This module is that layer for Flint:
//!
//! - [`MemoryBudget`]: the bytes one operator may hold, and how records are charged against
//!   it (`budget.rs`).
//! - [`SpillDir`]: a private directory in the task's working directory
//!   ([`TaskContext::spill_dir`](super::TaskContext::spill_dir)); every spill file is deleted when its
//!   owner is dropped.
//! - [`ExternalSorter`] (and [`GroupReducer`] on top of it): sorts in memory, or writes sorted
//!   runs and merges them with a bounded fan-in.
//! - [`SpillingHashAggregator`]: hash aggregation with Grace partitioning of partial aggregates.
//! - [`SpillingHashJoin`]: inner and left outer equi-join, in memory or Grace hash join with
//!   recursive repartitioning and a block nested loop for what cannot be split.
//!
//! Every operator is given a [`SpillOptions`] (budget, directory, tuning), pushes records one at
//! a time, and returns its output as an iterator of `Result<_, SpillError>`. The operators block
//! (plain `std::fs` IO): they run on the task's thread, never on an actor's event loop.
//!
//! ```no_run
//! use flint::operators::TaskContext;
//! use flint::operators::memory::{ExternalSorter, MemoryBudget, SpillDir, SpillOptions};
//!
//! fn sort_lines(context: &TaskContext, lines: Vec<String>) -> Result<(), Box<dyn std::error::Error>> {
//!     // The task's share of managed memory, split among its memory-consuming operators (2).
//!     let share = usize::try_from(context.managed_memory).unwrap_or(usize::MAX);
//!     let budget = MemoryBudget::new(share).split(2);
//!     let task_dir = context.spill_dir.clone().unwrap_or_else(std::env::temp_dir);
//!     let options = SpillOptions::new(budget, SpillDir::create_in(&task_dir)?);
//!     let mut sorter = ExternalSorter::new(options, |line: &String| line.len());
//!     sorter.push_all(lines)?;
//!     for line in sorter.finish()? {
//!         println!("{}", line?);
//!     }
//!     Ok(())
//! }
//! ```
//!
//! **Determinism.** Output order depends only on the input, the hash seed and the budget: no
//! hash table here is seeded per process. The tables and the Grace partitioning levels hash
//! with this module's own seeded hasher (`hash.rs`), which is a different thing from
//! [`crate::base::hash`]: that one is a single fixed function (FNV for stable routing, Fx for
//! the JobManager's indices), where Grace partitioning needs a family of unrelated functions,
//! one per level, so that keys colliding at one level separate at the next.

#![warn(missing_docs)]
// Library code proves its invariants instead of unwrapping (tests may unwrap).
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod aggregate;
mod budget;
mod codec;
mod error;
mod hash;
mod join;
mod options;
mod partition;
mod sort;
mod spill_dir;
mod spill_file;
mod stats;

use std::sync::Arc;

pub use aggregate::{AggregateOutput, SpillingHashAggregator};
pub use budget::{DEFAULT_ENTRY_OVERHEAD, MemoryBudget};
pub use codec::MAX_RECORD_SIZE;
pub use error::SpillError;
pub use join::{JoinKind, JoinProbe, JoinRemainder, JoinStream, Matches, Pairs, SpillingHashJoin};
pub use options::{
    DEFAULT_HASH_SEED, DEFAULT_MAX_FAN_IN, DEFAULT_PARTITIONS, MAX_IO_BUFFER, MIN_IO_BUFFER,
    SpillOptions,
};
pub use sort::{ExternalSorter, Group, GroupReducer, SortOrder, SortedIter};
pub use spill_dir::SpillDir;
pub use stats::SpillStats;

/// A user's key extractor, shared between an operator and its output.
pub(crate) type KeyFn<T, K> = Arc<dyn Fn(&T) -> K + Send + Sync>;

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send<T: Send>() {}

    /// Operators and their outputs move to the task's thread.
    #[test]
    fn operators_and_outputs_are_send() {
        assert_send::<ExternalSorter<String, u64>>();
        assert_send::<SortedIter<String, u64>>();
        assert_send::<GroupReducer<String, u64>>();
        assert_send::<SpillingHashAggregator<String, u64, Vec<u8>>>();
        assert_send::<AggregateOutput<u64, Vec<u8>>>();
        assert_send::<SpillingHashJoin<u64, String, String>>();
        assert_send::<JoinProbe<u64, String, String>>();
        assert_send::<JoinRemainder<u64, String, String>>();
        assert_send::<SpillDir>();
    }
}
