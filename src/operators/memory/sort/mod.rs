//! External merge sort: sorted in memory while the budget allows, sorted runs on disk and a
//! k-way merge otherwise.
//!
//! Records are buffered with their keys until the next one would not fit the budget; then the
//! buffer is sorted in place and written as a run. At the end, the runs (reduced by
//! intermediate merge passes to the fan-in, if there are more) and the still-buffered tail are
//! merged as the output is read. Equal keys keep their arrival order.

mod buffer;
mod groups;
mod merge;

use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::operators::memory::KeyFn;
use crate::operators::memory::budget::Meter;
use crate::operators::memory::error::SpillError;
use crate::operators::memory::options::SpillOptions;
use crate::operators::memory::spill_dir::SpillFile;
use crate::operators::memory::spill_file::SpillWriter;
use crate::operators::memory::stats::SpillStats;

use buffer::{Entry, SortBuffer};
pub use groups::{Group, GroupReducer};
use merge::{Merger, Source, reduce_runs};

/// The direction of a sort. For anything else (a compound order, one field descending and the
/// next ascending) make the key a tuple and wrap components in [`std::cmp::Reverse`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SortOrder {
    /// Smallest key first.
    #[default]
    Ascending,
    /// Largest key first (equal keys still in arrival order).
    Descending,
}

/// Sorts records of type `T` by a key `K` within a memory budget, spilling sorted runs when it
/// runs out. Feed it with [`push`](Self::push), then read the result from
/// [`finish`](Self::finish).
///
/// Dropping it (or the iterator) at any point deletes its spill files.
pub struct ExternalSorter<T, K> {
    options: SpillOptions,
    meter: Meter,
    key_fn: KeyFn<T, K>,
    order: SortOrder,
    buffer: SortBuffer<K, T>,
    runs: Vec<SpillFile>,
    stats: SpillStats,
}

impl<T, K> ExternalSorter<T, K>
where
    T: Serialize + DeserializeOwned + Send + 'static,
    K: Ord + Serialize + Send + 'static,
{
    /// A sorter in ascending key order.
    pub fn new(options: SpillOptions, key_fn: impl Fn(&T) -> K + Send + Sync + 'static) -> Self {
        Self::with_key_fn(options, Arc::new(key_fn))
    }

    pub(crate) fn with_key_fn(options: SpillOptions, key_fn: KeyFn<T, K>) -> Self {
        Self {
            meter: options.meter(),
            buffer: SortBuffer::new(options.record_memory()),
            options,
            key_fn,
            order: SortOrder::Ascending,
            runs: Vec::new(),
            stats: SpillStats::default(),
        }
    }

    /// Sorts in `order` instead.
    pub fn with_order(mut self, order: SortOrder) -> Self {
        self.order = order;
        self
    }

    /// Adds a record. Writes a sorted run first if the record does not fit the budget.
    pub fn push(&mut self, record: T) -> Result<(), SpillError> {
        let key = (self.key_fn)(&record);
        let charge = self.meter.entry(&record)? + self.meter.content(&key)?;
        if !self.buffer.fits(charge) && !self.buffer.is_empty() {
            self.spill_run()?;
        }
        self.buffer.push(key, record, charge);
        Ok(())
    }

    /// Adds every record of `records`.
    pub fn push_all(&mut self, records: impl IntoIterator<Item = T>) -> Result<(), SpillError> {
        records.into_iter().try_for_each(|record| self.push(record))
    }

    /// What was spilled so far.
    pub fn stats(&self) -> &SpillStats {
        &self.stats
    }

    fn spill_run(&mut self) -> Result<(), SpillError> {
        self.buffer.sort(self.order);
        let mut run =
            SpillWriter::create(self.options.dir(), "sort-run", self.options.io_buffer())?;
        for entry in self.buffer.drain() {
            run.write(&entry.value)?;
        }
        let run = run.finish()?;
        self.stats.wrote(&run);
        self.runs.push(run);
        Ok(())
    }

    /// Ends the input and returns the records in order.
    ///
    /// With no run on disk, this sorts in memory. Otherwise the buffered tail stays in memory
    /// as the last merge source: it is within the record share of the budget, and the merge's
    /// read buffers within the IO share (`options.rs`), so nothing needs writing. If there are
    /// more runs than the fan-in allows, intermediate passes merge runs here first.
    pub fn finish(mut self) -> Result<SortedIter<T, K>, SpillError> {
        self.buffer.sort(self.order);
        if self.runs.is_empty() {
            return Ok(SortedIter {
                inner: Inner::Memory(self.buffer.into_entries().into_iter()),
                stats: self.stats,
            });
        }
        let tail = (!self.buffer.is_empty()).then_some(self.buffer.into_entries());
        let runs = reduce_runs(
            std::mem::take(&mut self.runs),
            usize::from(tail.is_some()),
            &self.options,
            &self.key_fn,
            self.order,
            &mut self.stats,
        )?;
        let buffer = self.options.io_buffer();
        let mut sources = runs
            .into_iter()
            .map(|run| run.into_reader(buffer).map(Source::Run))
            .collect::<Result<Vec<_>, _>>()?;
        sources.extend(tail.map(|entries| Source::Memory(entries.into_iter())));
        Ok(SortedIter {
            inner: Inner::Merge(Merger::new(sources, self.key_fn, self.order)?),
            stats: self.stats,
        })
    }
}

/// The sorted records of an [`ExternalSorter`], as `Result<T, SpillError>`: an error (a spill
/// file that cannot be read) ends the iteration.
pub struct SortedIter<T, K> {
    inner: Inner<K, T>,
    stats: SpillStats,
}

enum Inner<K, T> {
    Memory(std::vec::IntoIter<Entry<K, T>>),
    Merge(Merger<K, T>),
}

impl<T: DeserializeOwned, K: Ord> SortedIter<T, K> {
    /// The next record with its key (computed once, when the record was pushed or read back).
    pub fn next_keyed(&mut self) -> Option<Result<(K, T), SpillError>> {
        match &mut self.inner {
            Inner::Memory(entries) => entries.next().map(|entry| Ok((entry.key, entry.value))),
            Inner::Merge(merger) => merger.next_keyed(),
        }
    }

    /// What the sorter spilled, including intermediate merge passes.
    pub fn stats(&self) -> &SpillStats {
        &self.stats
    }
}

impl<T: DeserializeOwned, K: Ord> Iterator for SortedIter<T, K> {
    type Item = Result<T, SpillError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_keyed().map(|next| next.map(|(_, value)| value))
    }
}
