//! Hash aggregation that spills: Grace partitioning of partial aggregates.
//!
//! Records are folded into a hash table of accumulators (Flink's `AggregateFunction`:
//! `createAccumulator`, `add`, `merge`). When a new key does not fit the budget, the whole table
//! is written out as partial aggregates `(K, A)`, hash-partitioned by key into one spill file
//! per partition, and emptied; the input continues into the empty table. What is spilled is
//! never the records themselves — `T` need not even be serializable — and a key spilled several
//! times is several partials that `merge` combines later.
//!
//! At the end each partition is aggregated on its own (partition 0 first). A partition whose
//! keys do not fit either is split the same way with the next level's hash function; one still
//! too large at [`MAX_LEVEL`](crate::operators::memory::partition) is made of few keys with very large
//! accumulators, and is aggregated by sorting its partials instead (bounded memory whatever the
//! distribution).

mod table;

use std::collections::hash_map;
use std::hash::Hash;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::operators::memory::budget::Meter;
use crate::operators::memory::error::SpillError;
use crate::operators::memory::options::SpillOptions;
use crate::operators::memory::partition::{MAX_LEVEL, Partitioner};
use crate::operators::memory::sort::{ExternalSorter, SortedIter};
use crate::operators::memory::spill_dir::SpillFile;
use crate::operators::memory::stats::SpillStats;

use table::{AggTable, Slot, Upserted};

type MergeFn<A> = Arc<dyn Fn(&mut A, A) + Send + Sync>;
type AddFn<A, T> = Box<dyn Fn(&mut A, T) + Send + Sync>;

/// Groups records of type `T` by a key `K` into accumulators `A`, within a memory budget.
/// Every key is emitted exactly once, with the accumulator of all its records.
///
/// Dropping it (or its output) at any point deletes its spill files.
pub struct SpillingHashAggregator<T, K, A> {
    key_fn: Box<dyn Fn(&T) -> K + Send + Sync>,
    create: Box<dyn Fn() -> A + Send + Sync>,
    add: AddFn<A, T>,
    merge: MergeFn<A>,
    options: SpillOptions,
    stage: Stage<K, A>,
}

impl<T, K, A> SpillingHashAggregator<T, K, A>
where
    T: Send + 'static,
    K: Hash + Eq + Ord + Clone + Serialize + DeserializeOwned + Send + 'static,
    A: Serialize + DeserializeOwned + Send + 'static,
{
    /// An aggregation by `key_fn`: a key's first record gets a `create`d accumulator, every
    /// record is `add`ed to its key's accumulator, and partial accumulators of one key (from
    /// different spills) are combined with `merge`, which must be associative.
    pub fn new(
        options: SpillOptions,
        key_fn: impl Fn(&T) -> K + Send + Sync + 'static,
        create: impl Fn() -> A + Send + Sync + 'static,
        add: impl Fn(&mut A, T) + Send + Sync + 'static,
        merge: impl Fn(&mut A, A) + Send + Sync + 'static,
    ) -> Self {
        Self {
            key_fn: Box::new(key_fn),
            create: Box::new(create),
            add: Box::new(add),
            merge: Arc::new(merge),
            stage: Stage::new(&options, 0),
            options,
        }
    }

    /// Adds a record to its key's accumulator. Spills the table first if the record's key is
    /// new and does not fit, or afterwards if its accumulator grew past the budget.
    pub fn push(&mut self, record: T) -> Result<(), SpillError> {
        let key = (self.key_fn)(&record);
        let (add, create) = (&self.add, &self.create);
        self.stage.upsert(
            key,
            record,
            |acc, record| add(acc, record),
            |record| {
                let mut acc = create();
                add(&mut acc, record);
                acc
            },
        )
    }

    /// Adds every record of `records`.
    pub fn push_all(&mut self, records: impl IntoIterator<Item = T>) -> Result<(), SpillError> {
        records.into_iter().try_for_each(|record| self.push(record))
    }

    /// Ends the input; the output yields every key once with its final accumulator. Without
    /// spilling it comes in the table's order; otherwise partition by partition.
    pub fn finish(self) -> Result<AggregateOutput<K, A>, SpillError> {
        let mut output = AggregateOutput {
            merge: self.merge,
            options: self.options,
            current: Current::Idle,
            pending: Vec::new(),
            stats: SpillStats::default(),
            failed: false,
        };
        output.take_stage(self.stage)?;
        Ok(output)
    }
}

/// One level of aggregation: a table, and the partitions it spilled to.
struct Stage<K, A> {
    table: AggTable<K, A>,
    spill: Option<Partitioner<(K, A)>>,
    level: u32,
    meter: Meter,
    options: SpillOptions,
    stats: SpillStats,
}

/// What a stage holds at its end.
enum StageEnd<K, A> {
    /// Everything fit: the final accumulators.
    InMemory(AggTable<K, A>),
    /// The stage spilled: its non-empty partitions, to be aggregated at the next level.
    Partitions(Vec<SpillFile>),
}

impl<K, A> Stage<K, A>
where
    K: Hash + Eq + Serialize,
    A: Serialize,
{
    fn new(options: &SpillOptions, level: u32) -> Self {
        Self {
            table: AggTable::new(options.record_memory(), options.hash_seed()),
            spill: None,
            level,
            meter: options.meter(),
            options: options.clone(),
            stats: SpillStats::default(),
        }
    }

    /// Folds `value` into `key`'s accumulator: `update` if the key is in the table, else a
    /// new accumulator from `create`.
    fn upsert<V>(
        &mut self,
        key: K,
        value: V,
        update: impl FnOnce(&mut A, V),
        create: impl FnOnce(V) -> A,
    ) -> Result<(), SpillError> {
        let meter = self.meter;
        match self.table.upsert(
            key,
            value,
            update,
            create,
            |key| meter.entry(key),
            |acc| meter.content(acc),
        )? {
            Upserted::Updated { grew } => {
                // One accumulator over the budget on its own cannot be helped by spilling it
                // (it would come back whole); two or more can.
                if grew && self.table.len() >= 2 && self.table.over_limit() {
                    self.spill()?;
                }
            }
            Upserted::Inserted => {}
            Upserted::DoesNotFit {
                key,
                acc,
                key_charge,
                acc_charge,
            } => {
                self.spill()?;
                self.table.insert_new(key, acc, key_charge, acc_charge);
            }
        }
        Ok(())
    }

    /// Writes every accumulator to its partition and empties the table.
    fn spill(&mut self) -> Result<(), SpillError> {
        let spill = self
            .spill
            .get_or_insert_with(|| Partitioner::new(&self.options, "agg", self.level));
        for (key, acc) in self.table.drain() {
            let partition = spill.partition_of(&key);
            spill.write(partition, &(key, acc))?;
        }
        Ok(())
    }

    fn finish(mut self) -> Result<(StageEnd<K, A>, SpillStats), SpillError> {
        if self.spill.is_none() {
            return Ok((StageEnd::InMemory(self.table), self.stats));
        }
        self.spill()?;
        let Self {
            table,
            spill,
            mut stats,
            level,
            ..
        } = self;
        // Free the table before anything reads a partition.
        drop(table);
        let mut files = Vec::new();
        for file in spill
            .map(Partitioner::finish)
            .transpose()?
            .into_iter()
            .flatten()
            .flatten()
        {
            stats.wrote(&file);
            files.push(file);
        }
        stats.max_level = stats.max_level.max(level);
        Ok((StageEnd::Partitions(files), stats))
    }
}

/// The result of a [`SpillingHashAggregator`]: every key once, with its accumulator, as
/// `Result<(K, A), SpillError>`. Spilled partitions are aggregated as the output is read; an
/// error ends it.
pub struct AggregateOutput<K, A> {
    merge: MergeFn<A>,
    options: SpillOptions,
    current: Current<K, A>,
    /// Partitions still to aggregate, with the level that aggregates them; the last is next.
    pending: Vec<(SpillFile, u32)>,
    stats: SpillStats,
    failed: bool,
}

enum Current<K, A> {
    Idle,
    /// A partition (or the whole input) that fit in memory.
    Table(hash_map::IntoIter<K, Slot<A>>),
    /// A partition too large for hashing, sorted: equal keys are adjacent.
    Sorted {
        partials: SortedIter<(K, A), K>,
        lookahead: Option<(K, A)>,
    },
}

impl<K, A> AggregateOutput<K, A>
where
    K: Hash + Eq + Ord + Clone + Serialize + DeserializeOwned + Send + 'static,
    A: Serialize + DeserializeOwned + Send + 'static,
{
    /// What was spilled, including the work of the output so far.
    pub fn stats(&self) -> &SpillStats {
        &self.stats
    }

    fn take_stage(&mut self, stage: Stage<K, A>) -> Result<(), SpillError> {
        let level = stage.level;
        let (end, stats) = stage.finish()?;
        self.stats.absorb(&stats);
        match end {
            StageEnd::InMemory(table) => self.current = Current::Table(table.into_entries()),
            StageEnd::Partitions(files) => self
                .pending
                .extend(files.into_iter().rev().map(|file| (file, level + 1))),
        }
        Ok(())
    }

    /// Aggregates one spilled partition: by hashing at `level`, or by sorting past MAX_LEVEL.
    fn aggregate_partition(&mut self, file: SpillFile, level: u32) -> Result<(), SpillError> {
        let partials = file.into_reader::<(K, A)>(self.options.io_buffer())?;
        if level > MAX_LEVEL {
            self.stats.fallbacks += 1;
            let mut sorter =
                ExternalSorter::new(self.options.clone(), |partial: &(K, A)| partial.0.clone());
            for partial in partials {
                sorter.push(partial?)?;
            }
            let sorted = sorter.finish()?;
            self.stats.absorb(sorted.stats());
            self.current = Current::Sorted {
                partials: sorted,
                lookahead: None,
            };
            return Ok(());
        }
        let mut stage = Stage::new(&self.options, level);
        let merge = &self.merge;
        for partial in partials {
            let (key, acc) = partial?;
            stage.upsert(key, acc, |into, acc| merge(into, acc), |acc| acc)?;
        }
        self.take_stage(stage)
    }

    fn next_sorted(
        merge: &MergeFn<A>,
        partials: &mut SortedIter<(K, A), K>,
        lookahead: &mut Option<(K, A)>,
    ) -> Option<Result<(K, A), SpillError>> {
        let (key, mut acc) = match lookahead.take() {
            Some(first) => first,
            None => match partials.next()? {
                Ok(first) => first,
                Err(error) => return Some(Err(error)),
            },
        };
        loop {
            match partials.next() {
                Some(Ok((next_key, next_acc))) if next_key == key => merge(&mut acc, next_acc),
                Some(Ok(next)) => {
                    *lookahead = Some(next);
                    break;
                }
                Some(Err(error)) => return Some(Err(error)),
                None => break,
            }
        }
        Some(Ok((key, acc)))
    }
}

impl<K, A> Iterator for AggregateOutput<K, A>
where
    K: Hash + Eq + Ord + Clone + Serialize + DeserializeOwned + Send + 'static,
    A: Serialize + DeserializeOwned + Send + 'static,
{
    type Item = Result<(K, A), SpillError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        loop {
            let next = match &mut self.current {
                Current::Table(entries) => entries.next().map(|(key, slot)| Ok((key, slot.acc))),
                Current::Sorted {
                    partials,
                    lookahead,
                } => Self::next_sorted(&self.merge, partials, lookahead),
                Current::Idle => {
                    let (file, level) = self.pending.pop()?;
                    match self.aggregate_partition(file, level) {
                        Ok(()) => continue,
                        Err(error) => Some(Err(error)),
                    }
                }
            };
            match next {
                None => self.current = Current::Idle,
                Some(Ok(item)) => return Some(Ok(item)),
                Some(Err(error)) => {
                    // Stop for good, and delete what is left on disk now.
                    self.failed = true;
                    self.current = Current::Idle;
                    self.pending.clear();
                    return Some(Err(error));
                }
            }
        }
    }
}
