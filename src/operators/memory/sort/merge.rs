//! The k-way merge of sorted runs, and the intermediate passes that keep its fan-in bounded.
//!
//! A binary heap holds the head record of each source. `std::collections::BinaryHeap` needs
//! `Ord` on its elements and cannot carry the sort order or the tie-break, so this is a small
//! heap of its own with both. Ties go to the source with the lower index: sources are always
//! in arrival order (run 0 holds the earliest records, the in-memory tail the latest, and a
//! pass merges only *adjacent* runs), so the merge is stable.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::operators::memory::KeyFn;
use crate::operators::memory::error::SpillError;
use crate::operators::memory::options::SpillOptions;
use crate::operators::memory::sort::SortOrder;
use crate::operators::memory::sort::buffer::Entry;
use crate::operators::memory::spill_dir::SpillFile;
use crate::operators::memory::spill_file::{SpillReader, SpillWriter};
use crate::operators::memory::stats::SpillStats;

/// Where a merge takes records from.
pub(crate) enum Source<K, T> {
    /// A sorted run on disk; keys are recomputed as records are read.
    Run(SpillReader<T>),
    /// The sorted records that were still in memory when input ended.
    Memory(std::vec::IntoIter<Entry<K, T>>),
}

impl<K, T: DeserializeOwned> Source<K, T> {
    fn next(&mut self, key_fn: &KeyFn<T, K>) -> Option<Result<(K, T), SpillError>> {
        match self {
            Source::Run(reader) => reader
                .next()
                .map(|record| record.map(|value| (key_fn(&value), value))),
            Source::Memory(entries) => entries.next().map(|entry| Ok((entry.key, entry.value))),
        }
    }
}

/// A source's current record, in the heap.
struct Head<K, T> {
    key: K,
    value: T,
    source: usize,
}

/// Merges sorted sources into one sorted stream of `(key, record)`; stops after an error.
pub(crate) struct Merger<K, T> {
    sources: Vec<Source<K, T>>,
    heap: Vec<Head<K, T>>,
    key_fn: KeyFn<T, K>,
    order: SortOrder,
    failed: bool,
}

impl<K: Ord, T: DeserializeOwned> Merger<K, T> {
    /// Starts a merge: reads the first record of every source.
    pub(crate) fn new(
        mut sources: Vec<Source<K, T>>,
        key_fn: KeyFn<T, K>,
        order: SortOrder,
    ) -> Result<Self, SpillError> {
        let mut heap = Vec::with_capacity(sources.len());
        for (index, source) in sources.iter_mut().enumerate() {
            if let Some(first) = source.next(&key_fn) {
                let (key, value) = first?;
                heap.push(Head {
                    key,
                    value,
                    source: index,
                });
            }
        }
        let mut merger = Self {
            sources,
            heap,
            key_fn,
            order,
            failed: false,
        };
        for i in (0..merger.heap.len() / 2).rev() {
            merger.sift_down(i);
        }
        Ok(merger)
    }

    /// The next record in order, with its key.
    pub(crate) fn next_keyed(&mut self) -> Option<Result<(K, T), SpillError>> {
        if self.failed || self.heap.is_empty() {
            return None;
        }
        let source = self.heap[0].source;
        let top = match self.sources[source].next(&self.key_fn) {
            Some(Ok((key, value))) => {
                let top = std::mem::replace(&mut self.heap[0], Head { key, value, source });
                self.sift_down(0);
                top
            }
            None => {
                let top = self.heap.swap_remove(0);
                if !self.heap.is_empty() {
                    self.sift_down(0);
                }
                top
            }
            Some(Err(error)) => {
                // Stop for good, and delete what is left on disk now.
                self.failed = true;
                self.heap.clear();
                self.sources.clear();
                return Some(Err(error));
            }
        };
        Some(Ok((top.key, top.value)))
    }

    /// Whether head `a` comes before head `b`: by key in the sort order, then by source.
    #[inline]
    fn before(&self, a: usize, b: usize) -> bool {
        let (a, b) = (&self.heap[a], &self.heap[b]);
        self.order
            .compare(&a.key, &b.key)
            .then(a.source.cmp(&b.source))
            .is_lt()
    }

    fn sift_down(&mut self, mut i: usize) {
        let len = self.heap.len();
        loop {
            let left = 2 * i + 1;
            if left >= len {
                return;
            }
            let right = left + 1;
            let child = if right < len && self.before(right, left) {
                right
            } else {
                left
            };
            if !self.before(child, i) {
                return;
            }
            self.heap.swap(i, child);
            i = child;
        }
    }
}

/// Merges adjacent groups of `runs` into larger runs until at most `max_sources - extra` are
/// left, so that a final merge of those and `extra` other sources (the in-memory tail) opens at
/// most `max_sources` at once. Each pass merges only as many runs as it must, oldest first,
/// and keeps the runs in arrival order.
pub(crate) fn reduce_runs<K, T>(
    mut runs: Vec<SpillFile>,
    extra: usize,
    options: &SpillOptions,
    key_fn: &KeyFn<T, K>,
    order: SortOrder,
    stats: &mut SpillStats,
) -> Result<Vec<SpillFile>, SpillError>
where
    K: Ord,
    T: Serialize + DeserializeOwned,
{
    let fan_in = options.fan_in();
    let target = fan_in.saturating_sub(extra).max(1);
    while runs.len() > target {
        stats.merge_passes += 1;
        let mut merged = Vec::with_capacity(runs.len() / fan_in + target);
        let mut rest = runs.into_iter();
        loop {
            let left = rest.len();
            if merged.len() + left <= target || left == 0 {
                merged.extend(rest);
                break;
            }
            // Merging g runs into one removes g - 1 of them.
            let excess = merged.len() + left - target;
            let group = (excess + 1).min(fan_in).min(left);
            if group < 2 {
                // One run left: rewriting it alone would change nothing; the next pass merges
                // it with the others.
                merged.extend(rest);
                break;
            }
            let inputs: Vec<SpillFile> = rest.by_ref().take(group).collect();
            let run = merge_to_run(inputs, options, key_fn, order)?;
            stats.wrote(&run);
            merged.push(run);
        }
        runs = merged;
    }
    Ok(runs)
}

/// Merges `inputs` into one new run. Each input is deleted once read.
fn merge_to_run<K, T>(
    inputs: Vec<SpillFile>,
    options: &SpillOptions,
    key_fn: &KeyFn<T, K>,
    order: SortOrder,
) -> Result<SpillFile, SpillError>
where
    K: Ord,
    T: Serialize + DeserializeOwned,
{
    let buffer = options.io_buffer();
    let sources = inputs
        .into_iter()
        .map(|run| run.into_reader(buffer).map(Source::Run))
        .collect::<Result<Vec<_>, _>>()?;
    let mut merger = Merger::new(sources, key_fn.clone(), order)?;
    let mut out = SpillWriter::create(options.dir(), "sort-merged", buffer)?;
    while let Some(next) = merger.next_keyed() {
        let (_, value) = next?;
        out.write(&value)?;
    }
    out.finish()
}
