//! Equi-join that spills: an in-memory hash join while the build side fits, Grace hash join
//! when it does not.
//!
//! The right input is the build side, the left the probe side: a left outer join keeps every
//! left record. The build side is complete before the first probe record ([`SpillingHashJoin`]
//! becomes a [`JoinProbe`]), and the probe side is a stream:
//!
//! - **In memory**: each probe record's matches are produced as it arrives.
//! - **Spilled**: when a build record does not fit, the build table is written out, hash-
//!   partitioned by key, and the rest of the build side follows it to disk. Probe records are
//!   partitioned the same way as they arrive — except those whose build partition is empty,
//!   which cannot match and are answered at once (dropped, or `(left, None)` for an outer
//!   join). When the probe side ends, each partition pair is joined in memory (`grace.rs`).
//!
//! Output rows are `(L, Option<R>)`: `Some` for a match, `None` only for an unmatched left
//! record of an outer join. `.pairs()` turns them into `(L, R)`.

mod grace;
mod table;

use std::hash::Hash;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::operators::memory::budget::Meter;
use crate::operators::memory::error::SpillError;
use crate::operators::memory::options::SpillOptions;
use crate::operators::memory::partition::Partitioner;
use crate::operators::memory::spill_dir::SpillFile;
use crate::operators::memory::stats::SpillStats;

pub use grace::JoinRemainder;
use grace::PairJob;
use table::{BuildTable, END, ProbeCursor};

/// Which rows a join produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JoinKind {
    /// A row per matching (left, right) pair.
    Inner,
    /// As inner, plus `(left, None)` for each left record without a match.
    LeftOuter,
}

/// The key functions of both sides, shared by the join's phases.
struct JoinKeys<K, L, R> {
    left: Box<dyn Fn(&L) -> K + Send + Sync>,
    right: Box<dyn Fn(&R) -> K + Send + Sync>,
}

/// The build phase of a join: takes the right (build) side, then becomes a [`JoinProbe`] with
/// [`finish_build`](Self::finish_build).
///
/// Dropping it, or any later phase, deletes its spill files.
pub struct SpillingHashJoin<K, L, R> {
    kind: JoinKind,
    keys: Arc<JoinKeys<K, L, R>>,
    options: SpillOptions,
    meter: Meter,
    table: BuildTable<K, R>,
    spill: Option<Partitioner<R>>,
}

impl<K, L, R> SpillingHashJoin<K, L, R>
where
    K: Hash + Eq + Serialize + Send + 'static,
    L: Serialize + DeserializeOwned + Clone + Send + 'static,
    R: Serialize + DeserializeOwned + Clone + Send + 'static,
{
    /// A join of left records keyed by `left_key` with right records keyed by `right_key`.
    pub fn new(
        kind: JoinKind,
        options: SpillOptions,
        left_key: impl Fn(&L) -> K + Send + Sync + 'static,
        right_key: impl Fn(&R) -> K + Send + Sync + 'static,
    ) -> Self {
        Self {
            kind,
            keys: Arc::new(JoinKeys {
                left: Box::new(left_key),
                right: Box::new(right_key),
            }),
            meter: options.meter(),
            table: BuildTable::new(options.record_memory(), options.hash_seed()),
            options,
            spill: None,
        }
    }

    /// Adds a build (right) record. The first record that does not fit turns the join into a
    /// Grace hash join: the table is partitioned to disk, and so is every later build record.
    pub fn build(&mut self, right: R) -> Result<(), SpillError> {
        let key = (self.keys.right)(&right);
        if let Some(spill) = &mut self.spill {
            let partition = spill.partition_of(&key);
            return spill.write(partition, &right);
        }
        let row_charge = self.meter.entry(&right)?;
        let key_charge = self.meter.content(&key)?;
        if let Err((key, right)) = self.table.try_insert(key, right, row_charge, key_charge) {
            let spill = self.spill_table()?;
            let partition = spill.partition_of(&key);
            spill.write(partition, &right)?;
        }
        Ok(())
    }

    /// Adds every record of `rights`.
    pub fn build_all(&mut self, rights: impl IntoIterator<Item = R>) -> Result<(), SpillError> {
        rights.into_iter().try_for_each(|right| self.build(right))
    }

    fn spill_table(&mut self) -> Result<&mut Partitioner<R>, SpillError> {
        let table = std::mem::replace(&mut self.table, BuildTable::new(0, 0));
        let spill = self
            .spill
            .insert(Partitioner::new(&self.options, "join-build", 0));
        for row in table.into_rows() {
            let partition = spill.partition_of(&(self.keys.right)(&row));
            spill.write(partition, &row)?;
        }
        Ok(spill)
    }

    /// Ends the build side.
    pub fn finish_build(self) -> Result<JoinProbe<K, L, R>, SpillError> {
        let mut stats = SpillStats::default();
        let spilled = match self.spill {
            None => None,
            Some(spill) => {
                let build = spill.finish()?;
                build.iter().flatten().for_each(|file| stats.wrote(file));
                Some(SpilledProbe {
                    build,
                    probe: Partitioner::new(&self.options, "join-probe", 0),
                })
            }
        };
        Ok(JoinProbe {
            kind: self.kind,
            keys: self.keys,
            table: self.table,
            spilled,
            options: self.options,
            stats,
        })
    }
}

/// The probe phase of a join: the build side is complete. Either push left records one at a
/// time with [`probe`](Self::probe) and then read the rest from [`finish`](Self::finish), or
/// hand over the whole left input with [`probe_all`](Self::probe_all).
pub struct JoinProbe<K, L, R> {
    kind: JoinKind,
    keys: Arc<JoinKeys<K, L, R>>,
    /// The build side when it fit; empty when spilled.
    table: BuildTable<K, R>,
    spilled: Option<SpilledProbe<L>>,
    options: SpillOptions,
    stats: SpillStats,
}

/// The partitions of a spilled join's two sides.
struct SpilledProbe<L> {
    build: Vec<Option<SpillFile>>,
    probe: Partitioner<L>,
}

impl<K, L, R> JoinProbe<K, L, R>
where
    K: Hash + Eq + Serialize + Send + 'static,
    L: Serialize + DeserializeOwned + Clone + Send + 'static,
    R: Serialize + DeserializeOwned + Clone + Send + 'static,
{
    /// Whether the build side was spilled (probe records are then joined in
    /// [`finish`](Self::finish)'s output).
    pub fn is_spilled(&self) -> bool {
        self.spilled.is_some()
    }

    /// What was spilled so far.
    pub fn stats(&self) -> &SpillStats {
        &self.stats
    }

    fn outer(&self) -> bool {
        self.kind == JoinKind::LeftOuter
    }

    /// Probes with one left record: the rows it produces now. In memory, those are all its
    /// rows. Spilled, they are `(left, None)` if its partition has no build record (outer join),
    /// else nothing: the record waits on disk for [`finish`](Self::finish).
    pub fn probe(&mut self, left: L) -> Result<Matches<'_, K, L, R>, SpillError> {
        let cursor = self.start(left)?;
        Ok(Matches {
            table: &self.table,
            cursor,
            outer: self.outer(),
        })
    }

    fn start(&mut self, left: L) -> Result<ProbeCursor<L>, SpillError> {
        let key = (self.keys.left)(&left);
        let Some(spilled) = &mut self.spilled else {
            return Ok(ProbeCursor::new(left, self.table.first(&key)));
        };
        let partition = spilled.probe.partition_of(&key);
        if spilled.build[partition].is_none() {
            // No build record hashes here: no match, answered now.
            return Ok(ProbeCursor::new(left, END));
        }
        spilled.probe.write(partition, &left)?;
        Ok(ProbeCursor::empty())
    }

    /// Ends the probe side: the rows of the records that waited on disk, partition pair by
    /// partition pair. Empty if nothing was spilled.
    pub fn finish(self) -> Result<JoinRemainder<K, L, R>, SpillError> {
        let mut stats = self.stats;
        let mut jobs = Vec::new();
        if let Some(spilled) = self.spilled {
            let probes = spilled.probe.finish()?;
            for (build, probe) in spilled.build.into_iter().zip(probes) {
                // A build partition without probe records produces nothing (not even for an
                // outer join, which keeps left records only); one without build records had
                // its probe records answered as they came.
                if let (Some(build), Some(probe)) = (build, probe) {
                    stats.wrote(&probe);
                    jobs.push(PairJob::new(Some(build), probe, 1));
                }
            }
        }
        jobs.reverse();
        Ok(JoinRemainder::new(
            self.kind,
            self.keys,
            self.options,
            jobs,
            stats,
        ))
    }

    /// Joins the whole left input; rows come as `left` is read (in memory) or after it ends
    /// (spilled). The iterator pulls from `left` lazily.
    pub fn probe_all<I: IntoIterator<Item = L>>(self, left: I) -> JoinStream<K, L, R, I::IntoIter> {
        JoinStream {
            probe: Some(self),
            input: left.into_iter(),
            cursor: ProbeCursor::empty(),
            remainder: None,
            failed: false,
        }
    }
}

/// The rows one left record produces now (see [`JoinProbe::probe`]).
pub struct Matches<'a, K, L, R> {
    table: &'a BuildTable<K, R>,
    cursor: ProbeCursor<L>,
    outer: bool,
}

impl<K, L: Clone, R: Clone> Iterator for Matches<'_, K, L, R> {
    type Item = (L, Option<R>);

    fn next(&mut self) -> Option<Self::Item> {
        self.cursor.step(self.table, self.outer)
    }
}

/// All rows of a join, as `Result<(L, Option<R>), SpillError>` (see [`JoinProbe::probe_all`]).
/// An error ends it.
pub struct JoinStream<K, L, R, I> {
    probe: Option<JoinProbe<K, L, R>>,
    input: I,
    cursor: ProbeCursor<L>,
    remainder: Option<JoinRemainder<K, L, R>>,
    failed: bool,
}

impl<K, L, R, I> JoinStream<K, L, R, I>
where
    K: Hash + Eq + Serialize + Send + 'static,
    L: Serialize + DeserializeOwned + Clone + Send + 'static,
    R: Serialize + DeserializeOwned + Clone + Send + 'static,
    I: Iterator<Item = L>,
{
    /// The matched pairs only, as `(L, R)`: the rows of an inner join.
    pub fn pairs(self) -> Pairs<Self> {
        Pairs(self)
    }

    /// What was spilled so far.
    pub fn stats(&self) -> SpillStats {
        match (&self.remainder, &self.probe) {
            (Some(remainder), _) => *remainder.stats(),
            (None, Some(probe)) => probe.stats,
            (None, None) => SpillStats::default(),
        }
    }

    fn fail(&mut self, error: SpillError) -> Option<Result<(L, Option<R>), SpillError>> {
        self.failed = true;
        // Drops the partitions now: nothing reads them any more.
        self.probe = None;
        self.remainder = None;
        Some(Err(error))
    }
}

impl<K, L, R, I> Iterator for JoinStream<K, L, R, I>
where
    K: Hash + Eq + Serialize + Send + 'static,
    L: Serialize + DeserializeOwned + Clone + Send + 'static,
    R: Serialize + DeserializeOwned + Clone + Send + 'static,
    I: Iterator<Item = L>,
{
    type Item = Result<(L, Option<R>), SpillError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        loop {
            if let Some(remainder) = &mut self.remainder {
                return remainder.next();
            }
            let probe = self.probe.as_mut()?;
            if let Some(row) = self.cursor.step(&probe.table, probe.outer()) {
                return Some(Ok(row));
            }
            match self.input.next() {
                Some(left) => match probe.start(left) {
                    Ok(cursor) => self.cursor = cursor,
                    Err(error) => return self.fail(error),
                },
                None => {
                    let probe = self.probe.take()?;
                    match probe.finish() {
                        Ok(remainder) => self.remainder = Some(remainder),
                        Err(error) => return self.fail(error),
                    }
                }
            }
        }
    }
}

/// The matched pairs of a join's rows, as `(L, R)`; drops `(left, None)` rows.
pub struct Pairs<I>(I);

impl<I, L, R> Iterator for Pairs<I>
where
    I: Iterator<Item = Result<(L, Option<R>), SpillError>>,
{
    type Item = Result<(L, R), SpillError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.0.next()? {
                Ok((left, Some(right))) => return Some(Ok((left, right))),
                Ok((_, None)) => continue,
                Err(error) => return Some(Err(error)),
            }
        }
    }
}
