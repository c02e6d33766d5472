//! Joining spilled partition pairs: in memory if the build partition fits, else split again,
//! else a block nested loop.
//!
//! For each pair (partition 0 first):
//!
//! 1. **Fits**: the build partition is loaded into a table and the probe partition streamed
//!    past it.
//! 2. **Too large**: both partitions are split with the next level's hash function and the
//!    sub-pairs joined in turn (recursively). Probe records whose build sub-partition is empty
//!    are dropped (inner) or kept to be answered `(left, None)` (outer).
//! 3. **Cannot be split** — every build record went to the same sub-partition (one huge key,
//!    or keys that collide under every level's hash), or [`MAX_LEVEL`] was reached: a
//!    **block nested loop**. The build partition is read once, a budget-sized block at a time;
//!    for each block the whole probe partition is streamed past it. An outer join remembers
//!    which probe records matched in any block (one bit each, charged to the budget) and
//!    answers the others with a last pass.

use std::hash::Hash;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::operators::memory::budget::Meter;
use crate::operators::memory::error::SpillError;
use crate::operators::memory::join::table::{BuildTable, ProbeCursor};
use crate::operators::memory::join::{JoinKeys, JoinKind, Pairs};
use crate::operators::memory::options::SpillOptions;
use crate::operators::memory::partition::{MAX_LEVEL, Partitioner};
use crate::operators::memory::spill_dir::SpillFile;
use crate::operators::memory::spill_file::SpillReader;
use crate::operators::memory::stats::SpillStats;

type Row<L, R> = (L, Option<R>);

/// One partition pair to join. `build` is `None` only for an outer join's probe records that
/// cannot match; `level` is the level that splits the pair if it is too large.
pub(crate) struct PairJob {
    build: Option<SpillFile>,
    probe: SpillFile,
    level: u32,
}

impl PairJob {
    pub(crate) fn new(build: Option<SpillFile>, probe: SpillFile, level: u32) -> Self {
        Self {
            build,
            probe,
            level,
        }
    }
}

/// The rows of a spilled join's partition pairs, as `Result<(L, Option<R>), SpillError>` (see
/// [`JoinProbe::finish`](crate::operators::memory::JoinProbe::finish)). An error ends it.
pub struct JoinRemainder<K, L, R> {
    kind: JoinKind,
    keys: Arc<JoinKeys<K, L, R>>,
    options: SpillOptions,
    meter: Meter,
    /// Pairs still to join; the last is next.
    jobs: Vec<PairJob>,
    state: State<K, L, R>,
    stats: SpillStats,
    failed: bool,
}

enum State<K, L, R> {
    Idle,
    /// The build partition is in `table`; the probe partition streams past it.
    Probing {
        table: BuildTable<K, R>,
        probe: SpillReader<L>,
        cursor: ProbeCursor<L>,
    },
    /// Outer join, probe records that cannot match.
    Unmatched(SpillReader<L>),
    BlockNested(Box<BlockNested<K, L, R>>),
}

impl<K, L, R> JoinRemainder<K, L, R>
where
    K: Hash + Eq + Serialize + Send + 'static,
    L: Serialize + DeserializeOwned + Clone + Send + 'static,
    R: Serialize + DeserializeOwned + Clone + Send + 'static,
{
    pub(super) fn new(
        kind: JoinKind,
        keys: Arc<JoinKeys<K, L, R>>,
        options: SpillOptions,
        jobs: Vec<PairJob>,
        stats: SpillStats,
    ) -> Self {
        Self {
            kind,
            keys,
            meter: options.meter(),
            options,
            jobs,
            state: State::Idle,
            stats,
            failed: false,
        }
    }

    /// The matched pairs only, as `(L, R)`: the rows of an inner join.
    pub fn pairs(self) -> Pairs<Self> {
        Pairs(self)
    }

    /// What was spilled, including the work of the output so far.
    pub fn stats(&self) -> &SpillStats {
        &self.stats
    }

    fn outer(&self) -> bool {
        self.kind == JoinKind::LeftOuter
    }

    fn start(&mut self, job: PairJob) -> Result<(), SpillError> {
        let buffer = self.options.io_buffer();
        let Some(build) = job.build else {
            if self.outer() {
                self.state = State::Unmatched(job.probe.into_reader(buffer)?);
            }
            return Ok(());
        };
        if let Some(table) = self.load(&build)? {
            drop(build);
            self.state = State::Probing {
                table,
                probe: job.probe.into_reader(buffer)?,
                cursor: ProbeCursor::empty(),
            };
            return Ok(());
        }
        if job.level <= MAX_LEVEL
            && let Some(pairs) = self.split(&build, &job.probe, job.level)?
        {
            self.jobs.extend(pairs.into_iter().rev());
            return Ok(());
        }
        self.stats.fallbacks += 1;
        self.state = State::BlockNested(Box::new(BlockNested::new(
            build,
            job.probe,
            self.outer(),
            &self.options,
        )?));
        Ok(())
    }

    /// The build partition as a table, or `None` if it does not fit.
    fn load(&self, build: &SpillFile) -> Result<Option<BuildTable<K, R>>, SpillError> {
        let mut table = BuildTable::new(self.options.record_memory(), self.options.hash_seed());
        for row in build.open::<R>(self.options.io_buffer())? {
            let row = row?;
            let key = (self.keys.right)(&row);
            let row_charge = self.meter.entry(&row)?;
            let key_charge = self.meter.content(&key)?;
            if table.try_insert(key, row, row_charge, key_charge).is_err() {
                return Ok(None);
            }
        }
        Ok(Some(table))
    }

    /// Splits a pair at `level`: the sub-pairs, or `None` if the build partition did not split.
    fn split(
        &mut self,
        build: &SpillFile,
        probe: &SpillFile,
        level: u32,
    ) -> Result<Option<Vec<PairJob>>, SpillError> {
        let buffer = self.options.io_buffer();
        let mut parts = Partitioner::new(&self.options, "join-build", level);
        for row in build.open::<R>(buffer)? {
            let row = row?;
            let partition = parts.partition_of(&(self.keys.right)(&row));
            parts.write(partition, &row)?;
        }
        let builds = parts.finish()?;
        builds
            .iter()
            .flatten()
            .for_each(|file| self.stats.wrote(file));
        if builds
            .iter()
            .flatten()
            .any(|part| part.records() == build.records())
        {
            return Ok(None);
        }
        self.stats.max_level = self.stats.max_level.max(level);
        let mut parts = Partitioner::new(&self.options, "join-probe", level);
        for left in probe.open::<L>(buffer)? {
            let left = left?;
            let partition = parts.partition_of(&(self.keys.left)(&left));
            if builds[partition].is_some() || self.outer() {
                parts.write(partition, &left)?;
            }
        }
        let probes = parts.finish()?;
        let mut pairs = Vec::new();
        for (build, probe) in builds.into_iter().zip(probes) {
            if let Some(probe) = probe {
                self.stats.wrote(&probe);
                pairs.push(PairJob::new(build, probe, level + 1));
            }
        }
        Ok(Some(pairs))
    }

    fn next_probing(
        keys: &JoinKeys<K, L, R>,
        outer: bool,
        table: &BuildTable<K, R>,
        probe: &mut SpillReader<L>,
        cursor: &mut ProbeCursor<L>,
    ) -> Option<Result<Row<L, R>, SpillError>> {
        loop {
            if let Some(row) = cursor.step(table, outer) {
                return Some(Ok(row));
            }
            match probe.next()? {
                Ok(left) => {
                    let first = table.first(&(keys.left)(&left));
                    *cursor = ProbeCursor::new(left, first);
                }
                Err(error) => return Some(Err(error)),
            }
        }
    }
}

impl<K, L, R> Iterator for JoinRemainder<K, L, R>
where
    K: Hash + Eq + Serialize + Send + 'static,
    L: Serialize + DeserializeOwned + Clone + Send + 'static,
    R: Serialize + DeserializeOwned + Clone + Send + 'static,
{
    type Item = Result<Row<L, R>, SpillError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        loop {
            let outer = self.outer();
            let next = match &mut self.state {
                State::Idle => {
                    let job = self.jobs.pop()?;
                    match self.start(job) {
                        Ok(()) => continue,
                        Err(error) => Some(Err(error)),
                    }
                }
                State::Probing {
                    table,
                    probe,
                    cursor,
                } => Self::next_probing(&self.keys, outer, table, probe, cursor),
                State::Unmatched(probe) => probe.next().map(|left| left.map(|left| (left, None))),
                State::BlockNested(nested) => nested.next(&self.keys, self.meter),
            };
            match next {
                None => self.state = State::Idle,
                Some(Ok(row)) => return Some(Ok(row)),
                Some(Err(error)) => {
                    // Stop for good, and delete what is left on disk now.
                    self.failed = true;
                    self.state = State::Idle;
                    self.jobs.clear();
                    return Some(Err(error));
                }
            }
        }
    }
}

/// A block nested loop over a build partition that cannot be split (module docs).
struct BlockNested<K, L, R> {
    /// Read once, block by block; owns (and finally deletes) the build partition.
    build: SpillReader<R>,
    /// The build record that did not fit the last block, with its key and charges.
    carry: Option<(K, R, usize, usize)>,
    build_done: bool,
    table: BuildTable<K, R>,
    probe_file: SpillFile,
    /// The current pass over the probe partition.
    probe: Option<SpillReader<L>>,
    /// The index in the probe partition of the next record the pass reads.
    index: u64,
    cursor: ProbeCursor<L>,
    /// The index of the record `cursor` walks, until its match is recorded.
    cursor_index: Option<u64>,
    /// Outer join: which probe records matched in some block.
    matched: Option<Vec<u64>>,
    /// Outer join, after the last block: the pass that answers unmatched records.
    unmatched: Option<SpillReader<L>>,
    buffer: usize,
}

impl<K, L, R> BlockNested<K, L, R>
where
    K: Hash + Eq + Serialize,
    L: DeserializeOwned + Clone,
    R: DeserializeOwned + Serialize + Clone,
{
    fn new(
        build: SpillFile,
        probe: SpillFile,
        outer: bool,
        options: &SpillOptions,
    ) -> Result<Self, SpillError> {
        let buffer = options.io_buffer();
        let matched = outer.then(|| vec![0u64; probe.records().div_ceil(64) as usize]);
        let bitmap_bytes = matched.as_ref().map_or(0, |bits| bits.len() * 8);
        let mut table = BuildTable::new(0, options.hash_seed());
        // The bitmap comes out of the table's share; past three quarters of it the budget is
        // exceeded rather than the join crawling one build row per block.
        let memory = options.record_memory();
        table.set_limit(memory.saturating_sub(bitmap_bytes).max(memory / 4));
        Ok(Self {
            build: build.into_reader(buffer)?,
            carry: None,
            build_done: false,
            table,
            probe_file: probe,
            probe: None,
            index: 0,
            cursor: ProbeCursor::empty(),
            cursor_index: None,
            matched,
            unmatched: None,
            buffer,
        })
    }

    /// Fills the table with the next block of build records; `false` when there are none.
    fn load_block(&mut self, keys: &JoinKeys<K, L, R>, meter: Meter) -> Result<bool, SpillError> {
        self.table.clear();
        if let Some((key, row, row_charge, key_charge)) = self.carry.take() {
            // An empty table accepts any row.
            let _ = self.table.try_insert(key, row, row_charge, key_charge);
        }
        while !self.build_done {
            let Some(row) = self.build.next() else {
                self.build_done = true;
                break;
            };
            let row = row?;
            let key = (keys.right)(&row);
            let row_charge = meter.entry(&row)?;
            let key_charge = meter.content(&key)?;
            if let Err((key, row)) = self.table.try_insert(key, row, row_charge, key_charge) {
                self.carry = Some((key, row, row_charge, key_charge));
                break;
            }
        }
        Ok(!self.table.is_empty())
    }

    fn next(
        &mut self,
        keys: &JoinKeys<K, L, R>,
        meter: Meter,
    ) -> Option<Result<Row<L, R>, SpillError>> {
        loop {
            if self.unmatched.is_some() {
                return self.next_unmatched();
            }
            if let Some(row) = self.cursor.step(&self.table, false) {
                return Some(Ok(row));
            }
            // The bitmap has a bit for each record of the probe partition, and its reader
            // yields no more records than it holds (it checks the count).
            if let (Some(index), Some(bits)) = (self.cursor_index.take(), &mut self.matched)
                && self.cursor.matched()
            {
                bits[(index / 64) as usize] |= 1 << (index % 64);
            }
            if let Some(probe) = &mut self.probe {
                match probe.next() {
                    Some(Ok(left)) => {
                        let first = self.table.first(&(keys.left)(&left));
                        self.cursor = ProbeCursor::new(left, first);
                        self.cursor_index = Some(self.index);
                        self.index += 1;
                        continue;
                    }
                    Some(Err(error)) => return Some(Err(error)),
                    None => self.probe = None,
                }
            }
            match self.load_block(keys, meter) {
                Ok(true) => {
                    self.index = 0;
                    match self.probe_file.open(self.buffer) {
                        Ok(probe) => self.probe = Some(probe),
                        Err(error) => return Some(Err(error)),
                    }
                }
                Ok(false) => {
                    self.table.clear();
                    // An inner join is done here; an outer one answers the unmatched.
                    self.matched.as_ref()?;
                    self.index = 0;
                    match self.probe_file.open(self.buffer) {
                        Ok(probe) => self.unmatched = Some(probe),
                        Err(error) => return Some(Err(error)),
                    }
                }
                Err(error) => return Some(Err(error)),
            }
        }
    }

    /// The final pass of an outer join: `(left, None)` for each record no block matched.
    fn next_unmatched(&mut self) -> Option<Result<Row<L, R>, SpillError>> {
        loop {
            let left = match self.unmatched.as_mut()?.next()? {
                Ok(left) => left,
                Err(error) => return Some(Err(error)),
            };
            let index = self.index;
            self.index += 1;
            if !self.was_matched(index) {
                return Some(Ok((left, None)));
            }
        }
    }

    /// Whether probe record `index` matched in some block. The bitmap has a bit for each record
    /// the probe partition holds, and its reader yields no more than that (it checks the count).
    fn was_matched(&self, index: u64) -> bool {
        self.matched
            .as_ref()
            .is_some_and(|bits| bits[(index / 64) as usize] & (1 << (index % 64)) != 0)
    }
}
