//! The operators that hold records: aggregation (with a combiner before the exchange), grouping,
//! joins, co-groups, sorts, first-n and top-k, and a broadcast side input. Each keeps within its
//! share of the task's managed memory and spills to the task's directory past it
//! ([`crate::operators::memory`]); results are the same whatever the budget.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::os::unix::fs::DirBuilderExt;
use std::sync::Arc;

use crate::base::hash::FixedHashMap;
use crate::operators::OperatorError;
use crate::operators::memory::{
    ExternalSorter, JoinKind, MemoryBudget, SortOrder, SpillDir, SpillError, SpillOptions,
    SpillingHashAggregator, SpillingHashJoin,
};

use super::data::{Data, Key};
use super::plan::{Instance, MemoryNode, NodeContext, NodeRuntime};
use super::runtime::{BoxPush, Ctx, Outputs, Push, downstream, erase};

/// A spill error as the task's failure, naming the node.
fn spilled(node: &str) -> impl Fn(SpillError) -> OperatorError + '_ {
    move |error| OperatorError::Operator {
        context: format!("{node}: cannot hold or spill its records"),
        source: Box::new(error),
    }
}

/// The spill options of one node's instance: its memory share and a private directory in the
/// task's (made only if it has one: a task without a directory cannot spill and its budget is
/// unlimited).
fn options(cx: &NodeContext, share: u64) -> Result<SpillOptions, OperatorError> {
    let Some(dir) = &cx.spill_dir else {
        return Ok(SpillOptions::new(
            MemoryBudget::unlimited(),
            SpillDir::create_in(&std::env::temp_dir()).map_err(spilled(&cx.node))?,
        ));
    };
    let budget = MemoryBudget::new(usize::try_from(share).unwrap_or(usize::MAX).max(1 << 20));
    // The TaskManager's directory inside the process's private working directory is made when
    // first needed (as its partitions' spill files do), 0700.
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| OperatorError::Io {
            what: format!(
                "{}: cannot create the task's working directory {}",
                cx.node,
                dir.display()
            ),
            source,
        })?;
    let dir = SpillDir::create_in(dir).map_err(spilled(&cx.node))?;
    Ok(SpillOptions::new(budget, dir))
}

/// A one-input node that holds records.
pub(crate) fn memory_node<T, U, F>(make: F) -> Arc<dyn NodeRuntime>
where
    T: Data,
    U: Data,
    F: Fn(&NodeContext, BoxPush<U>) -> Result<BoxPush<T>, OperatorError> + Send + Sync + 'static,
{
    Arc::new(MemoryNode(move |cx: &NodeContext, outputs: Outputs| {
        let push = make(cx, downstream::<U>(outputs))?;
        Ok(Instance::Ports(vec![erase(push)]))
    }))
}

/// A user's key extractor.
pub(crate) type KeyFn<T, K> = Arc<dyn Fn(&T) -> K + Send + Sync>;

/// The combiner before a keyed exchange (Flink's combinable reduce), for records whose key a
/// user function extracts: the key is taken out and the record folded in by [`PairCombine`].
pub(crate) struct Combine<T, K, A> {
    pub key: KeyFn<T, K>,
    pub pairs: PairCombine<K, T, A>,
}

impl<T, K: Key, A> Push<T> for Combine<T, K, A> {
    fn push(&mut self, record: T, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        let key = (self.key)(&record);
        self.pairs.push((key, record), cx)
    }

    fn end(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        self.pairs.end(cx)
    }
}

/// The combiner of `(key, value)` pairs: partial aggregates per key in a bounded table, flushed
/// downstream whenever it is full and at the end. It never spills: a flush is always a correct
/// partial result. The key is looked up by reference and moved into the table on its first
/// record, so it is never cloned (per record, a key extractor returning an owned `String`
/// costs an allocation).
pub(crate) struct PairCombine<K, V, A> {
    create: Arc<dyn Fn(V) -> A + Send + Sync>,
    add: Arc<dyn Fn(&mut A, V) + Send + Sync>,
    table: FixedHashMap<K, A>,
    next: BoxPush<(K, A)>,
}

impl<K, V, A> PairCombine<K, V, A> {
    /// A combiner of [`COMBINE_CAPACITY`] keys that starts an aggregate with `create`, folds
    /// into it with `add` and sends pairs to `next`.
    pub fn new(
        create: Arc<dyn Fn(V) -> A + Send + Sync>,
        add: Arc<dyn Fn(&mut A, V) + Send + Sync>,
        next: BoxPush<(K, A)>,
    ) -> Self {
        Self {
            create,
            add,
            table: FixedHashMap::default(),
            next,
        }
    }
}

/// Sends a combiner's partial aggregates on and empties its table. The table starts small
/// again: keeping its allocation (`drain`) made TPC-H Q18, whose combiner flushes ~20 times,
/// 12 % slower (2 paired runs of `benches/tpch_cluster.rs`): a full-size table is touched
/// across megabytes from its first insert on.
pub(crate) fn flush<K, A>(
    table: &mut FixedHashMap<K, A>,
    next: &mut BoxPush<(K, A)>,
    cx: &mut Ctx<'_>,
) -> Result<(), OperatorError> {
    for entry in std::mem::take(table) {
        next.push(entry, cx)?;
    }
    Ok(())
}

impl<K: Key, V, A> Push<(K, V)> for PairCombine<K, V, A> {
    fn push(&mut self, (key, value): (K, V), cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        // Below capacity a new key cannot make it flush: one probe finds or places it.
        if self.table.len() < COMBINE_CAPACITY {
            match self.table.entry(key) {
                std::collections::hash_map::Entry::Occupied(mut entry) => {
                    (self.add)(entry.get_mut(), value);
                }
                std::collections::hash_map::Entry::Vacant(entry) => {
                    entry.insert((self.create)(value));
                }
            }
            return Ok(());
        }
        match self.table.get_mut(&key) {
            Some(acc) => (self.add)(acc, value),
            None => {
                if self.table.len() >= COMBINE_CAPACITY {
                    flush(&mut self.table, &mut self.next, cx)?;
                }
                self.table.insert(key, (self.create)(value));
            }
        }
        Ok(())
    }

    fn end(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        flush(&mut self.table, &mut self.next, cx)?;
        self.next.end(cx)
    }
}

/// The combiner's table size: enough keys to collapse most repetition, small enough to stay far
/// below a slot's memory (its entries are not measured).
pub(crate) const COMBINE_CAPACITY: usize = 1 << 16;

/// The final aggregation after a keyed exchange: partial aggregates merged per key (spilling
/// past the node's memory), each key's result pushed once at the end.
pub(crate) struct Aggregate<K, A> {
    pub table: Option<SpillingHashAggregator<(K, A), K, Option<A>>>,
    pub node: String,
    pub next: BoxPush<(K, A)>,
}

impl<K: Key, A: Data> Push<(K, A)> for Aggregate<K, A> {
    fn push(&mut self, record: (K, A), _: &mut Ctx<'_>) -> Result<(), OperatorError> {
        if let Some(table) = &mut self.table {
            table.push(record).map_err(spilled(&self.node))?;
        }
        Ok(())
    }

    fn end(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        if let Some(table) = self.table.take() {
            for row in table.finish().map_err(spilled(&self.node))? {
                let (key, acc) = row.map_err(spilled(&self.node))?;
                if let Some(acc) = acc {
                    cx.tick()?;
                    self.next.push((key, acc), cx)?;
                }
            }
        }
        self.next.end(cx)
    }
}

/// A final aggregation node merging partial `(K, A)`s with `merge`.
pub(crate) fn aggregate<K: Key, A: Data>(
    merge: Arc<dyn Fn(&mut A, A) + Send + Sync>,
) -> Arc<dyn NodeRuntime> {
    memory_node::<(K, A), (K, A), _>(move |cx, next| {
        let (add, both) = (merge.clone(), merge.clone());
        let table = SpillingHashAggregator::new(
            options(cx, cx.memory)?,
            |(key, _): &(K, A)| key.clone(),
            || None,
            move |acc: &mut Option<A>, (_, partial): (K, A)| match acc {
                Some(acc) => add(acc, partial),
                None => *acc = Some(partial),
            },
            move |acc: &mut Option<A>, other: Option<A>| match (acc.as_mut(), other) {
                (Some(acc), Some(other)) => both(acc, other),
                (None, other) => *acc = other,
                (_, None) => {}
            },
        );
        Ok(Box::new(Aggregate {
            table: Some(table),
            node: cx.node.clone(),
            next,
        }))
    })
}

/// Group-reduce: every record of a key handed to the user's function together (sorted by key,
/// spilling past the node's memory).
pub(crate) struct GroupReduce<T, K, U, I> {
    pub sorter: Option<ExternalSorter<T, K>>,
    pub key: KeyFn<T, K>,
    pub f: Arc<dyn Fn(&K, &mut dyn Iterator<Item = T>) -> I + Send + Sync>,
    pub node: String,
    pub next: BoxPush<U>,
}

impl<T: Data, K: Key, U, I: IntoIterator<Item = U>> Push<T> for GroupReduce<T, K, U, I> {
    fn push(&mut self, record: T, _: &mut Ctx<'_>) -> Result<(), OperatorError> {
        if let Some(sorter) = &mut self.sorter {
            sorter.push(record).map_err(spilled(&self.node))?;
        }
        Ok(())
    }

    fn end(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        let Some(sorter) = self.sorter.take() else {
            return self.next.end(cx);
        };
        let mut sorted = sorter.finish().map_err(spilled(&self.node))?.peekable();
        let mut failure: Option<OperatorError> = None;
        while let Some(first) = sorted.next() {
            let first = first.map_err(spilled(&self.node))?;
            let key = (self.key)(&first);
            let mut group = GroupIter {
                first: Some(first),
                rest: &mut sorted,
                key: &key,
                key_fn: &self.key,
                failure: &mut failure,
            };
            let out = (self.f)(&key, &mut group);
            // Whatever the function left unread of its group is skipped.
            group.by_ref().for_each(drop);
            for record in out {
                self.next.push(record, cx)?;
            }
            if let Some(error) = failure.take() {
                return Err(error);
            }
            cx.tick()?;
        }
        self.next.end(cx)
    }
}

/// One key's records, read off the sorted stream while they have its key.
struct GroupIter<'a, T, K, S: Iterator<Item = Result<T, SpillError>>> {
    first: Option<T>,
    rest: &'a mut std::iter::Peekable<S>,
    key: &'a K,
    key_fn: &'a KeyFn<T, K>,
    failure: &'a mut Option<OperatorError>,
}

impl<T, K: Eq, S: Iterator<Item = Result<T, SpillError>>> Iterator for GroupIter<'_, T, K, S> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        if let Some(first) = self.first.take() {
            return Some(first);
        }
        match self.rest.peek() {
            Some(Ok(next)) if (self.key_fn)(next) == *self.key => match self.rest.next() {
                Some(Ok(record)) => Some(record),
                _ => None,
            },
            Some(Err(_)) => {
                if let Some(Err(error)) = self.rest.next() {
                    *self.failure = Some(OperatorError::Operator {
                        context: "cannot read a group back".into(),
                        source: Box::new(error),
                    });
                }
                None
            }
            _ => None,
        }
    }
}

/// A group-reduce node.
pub(crate) fn group_reduce<T, K, U, I>(
    key: KeyFn<T, K>,
    f: Arc<dyn Fn(&K, &mut dyn Iterator<Item = T>) -> I + Send + Sync>,
) -> Arc<dyn NodeRuntime>
where
    T: Data,
    K: Key,
    U: Data,
    I: IntoIterator<Item = U> + 'static,
{
    memory_node::<T, U, _>(move |cx, next| {
        let by = key.clone();
        Ok(Box::new(GroupReduce {
            sorter: Some(ExternalSorter::new(
                options(cx, cx.memory)?,
                move |t: &T| by(t),
            )),
            key: key.clone(),
            f: f.clone(),
            node: cx.node.clone(),
            next,
        }))
    })
}

/// Sorts a partition by a key (stable; spilling past the node's memory) and pushes it in
/// order at the end.
pub(crate) struct SortPartition<T, K> {
    pub sorter: Option<ExternalSorter<T, K>>,
    pub node: String,
    pub next: BoxPush<T>,
}

impl<T: Data, K: Key> Push<T> for SortPartition<T, K> {
    fn push(&mut self, record: T, _: &mut Ctx<'_>) -> Result<(), OperatorError> {
        if let Some(sorter) = &mut self.sorter {
            sorter.push(record).map_err(spilled(&self.node))?;
        }
        Ok(())
    }

    fn end(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        if let Some(sorter) = self.sorter.take() {
            for record in sorter.finish().map_err(spilled(&self.node))? {
                cx.tick()?;
                self.next.push(record.map_err(spilled(&self.node))?, cx)?;
            }
        }
        self.next.end(cx)
    }
}

/// A sort-partition node.
pub(crate) fn sort_partition<T: Data, K: Key>(
    key: KeyFn<T, K>,
    descending: bool,
) -> Arc<dyn NodeRuntime> {
    memory_node::<T, T, _>(move |cx, next| {
        let by = key.clone();
        let order = if descending {
            SortOrder::Descending
        } else {
            SortOrder::Ascending
        };
        let sorter =
            ExternalSorter::new(options(cx, cx.memory)?, move |t: &T| by(t)).with_order(order);
        Ok(Box::new(SortPartition {
            sorter: Some(sorter),
            node: cx.node.clone(),
            next,
        }))
    })
}

/// A sort-partition node whose records arrive wrapped: `unwrap` takes each out first (the
/// range tag of a global sort).
pub(crate) fn sort_partition_unwrapping<S: Data, T: Data, K: Key>(
    unwrap: Arc<dyn Fn(S) -> T + Send + Sync>,
    key: KeyFn<T, K>,
    descending: bool,
) -> Arc<dyn NodeRuntime> {
    memory_node::<S, T, _>(move |cx, next| {
        let by = key.clone();
        let order = if descending {
            SortOrder::Descending
        } else {
            SortOrder::Ascending
        };
        let sorter =
            ExternalSorter::new(options(cx, cx.memory)?, move |t: &T| by(t)).with_order(order);
        let sort: BoxPush<T> = Box::new(SortPartition {
            sorter: Some(sorter),
            node: cx.node.clone(),
            next,
        });
        Ok(Box::new(super::ops::Map {
            f: unwrap.clone(),
            next: sort,
        }))
    })
}

/// The first `n` records of a partition.
pub(crate) struct FirstN<T> {
    pub left: usize,
    pub next: BoxPush<T>,
}

impl<T> Push<T> for FirstN<T> {
    fn push(&mut self, record: T, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        if self.left > 0 {
            self.left -= 1;
            self.next.push(record, cx)?;
        }
        Ok(())
    }

    fn end(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        self.next.end(cx)
    }

    fn is_done(&self) -> bool {
        self.left == 0
    }
}

/// An entry of a top-k heap: ordered so the heap's top is the one to drop first.
pub(crate) struct Ranked<T, K> {
    key: K,
    /// Arrival order: ties keep the earlier record.
    seq: u64,
    record: T,
    descending: bool,
}

impl<T, K: Ord> Ranked<T, K> {
    /// Ascending: the largest key (latest on ties) is worst; descending: the smallest.
    fn rank(&self, other: &Self) -> Ordering {
        let by_key = self.key.cmp(&other.key);
        let by_key = if self.descending {
            by_key.reverse()
        } else {
            by_key
        };
        by_key.then(self.seq.cmp(&other.seq))
    }
}

impl<T, K: Ord> PartialEq for Ranked<T, K> {
    fn eq(&self, other: &Self) -> bool {
        self.rank(other) == Ordering::Equal
    }
}

impl<T, K: Ord> Eq for Ranked<T, K> {}

impl<T, K: Ord> PartialOrd for Ranked<T, K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T, K: Ord> Ord for Ranked<T, K> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.rank(other)
    }
}

/// The `n` records with the smallest (or largest) keys of a partition, pushed in key order at
/// the end; O(n) memory.
pub(crate) struct TopK<T, K> {
    pub n: usize,
    pub key: KeyFn<T, K>,
    pub descending: bool,
    pub heap: BinaryHeap<Ranked<T, K>>,
    pub seq: u64,
    pub next: BoxPush<T>,
}

impl<T, K: Key> Push<T> for TopK<T, K> {
    fn push(&mut self, record: T, _: &mut Ctx<'_>) -> Result<(), OperatorError> {
        if self.n == 0 {
            return Ok(());
        }
        let entry = Ranked {
            key: (self.key)(&record),
            seq: self.seq,
            record,
            descending: self.descending,
        };
        self.seq += 1;
        if self.heap.len() < self.n {
            self.heap.push(entry);
        } else if self.heap.peek().is_some_and(|worst| entry < *worst) {
            self.heap.pop();
            self.heap.push(entry);
        }
        Ok(())
    }

    fn end(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        for entry in std::mem::take(&mut self.heap).into_sorted_vec() {
            self.next.push(entry.record, cx)?;
        }
        self.next.end(cx)
    }
}

/// A top-k node.
pub(crate) fn top_k<T: Data, K: Key>(
    n: usize,
    key: KeyFn<T, K>,
    descending: bool,
) -> Arc<dyn NodeRuntime> {
    super::ops::one_input::<T, T, _>(move |_, next| {
        Ok(Box::new(TopK {
            n,
            key: key.clone(),
            descending,
            heap: BinaryHeap::new(),
            seq: 0,
            next,
        }))
    })
}

/// Records of one input held (spilling past their memory) until another input has ended: the
/// probe records of a join that arrive before its build side is complete, the main records of
/// an operator with a broadcast side input.
pub(crate) struct Held<T> {
    pub sorter: Option<ExternalSorter<T, ()>>,
    pub count: u64,
}

impl<T: Data> Held<T> {
    fn new(options: SpillOptions) -> Self {
        Self {
            sorter: Some(ExternalSorter::new(options, |_: &T| ())),
            count: 0,
        }
    }

    fn hold(&mut self, record: T, node: &str) -> Result<(), OperatorError> {
        self.count += 1;
        match &mut self.sorter {
            Some(sorter) => sorter.push(record).map_err(spilled(node)),
            None => Ok(()),
        }
    }

    /// Every held record, in arrival order (a stable sort by `()`).
    fn release(&mut self, node: &str) -> Result<Vec<Result<T, SpillError>>, OperatorError> {
        match self.sorter.take() {
            Some(sorter) if self.count > 0 => Ok(sorter.finish().map_err(spilled(node))?.collect()),
            _ => Ok(Vec::new()),
        }
    }
}

/// A two-input operator's shared state: the ports are two pushes onto it.
pub(crate) type Shared<S> = std::rc::Rc<std::cell::RefCell<S>>;

/// A hash join: the right input builds a table (spilling to a Grace hash join past the node's
/// memory), the left probes it. Left records that arrive before the right input has ended are
/// held (and spill) until it has.
pub(crate) struct Join<K, L, R, U> {
    pub build: Option<SpillingHashJoin<K, L, R>>,
    pub probe: Option<crate::operators::memory::JoinProbe<K, L, R>>,
    pub early: Held<L>,
    pub left_ended: bool,
    pub right_ended: bool,
    pub f: Arc<dyn Fn(L, Option<R>) -> Option<U> + Send + Sync>,
    pub node: String,
    pub next: BoxPush<U>,
}

impl<K, L, R, U> Join<K, L, R, U>
where
    K: Key,
    L: Data + Clone,
    R: Data + Clone,
{
    fn emit(&mut self, rows: Vec<(L, Option<R>)>, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        for (left, right) in rows {
            if let Some(out) = (self.f)(left, right) {
                self.next.push(out, cx)?;
            }
        }
        Ok(())
    }

    /// Emits `left`'s rows straight from the table (no list of them per probe record).
    fn probe_one(&mut self, left: L, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        let Join {
            probe,
            f,
            next,
            node,
            ..
        } = self;
        let Some(probe) = probe else {
            return Ok(());
        };
        for (left, right) in probe.probe(left).map_err(spilled(node))? {
            if let Some(out) = f(left, right) {
                next.push(out, cx)?;
            }
        }
        Ok(())
    }

    fn right_ended(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        self.right_ended = true;
        if let Some(build) = self.build.take() {
            self.probe = Some(build.finish_build().map_err(spilled(&self.node))?);
        }
        let node = self.node.clone();
        for left in self.early.release(&node)? {
            cx.tick()?;
            self.probe_one(left.map_err(spilled(&node))?, cx)?;
        }
        self.maybe_finish(cx)
    }

    fn maybe_finish(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        if !(self.left_ended && self.right_ended) {
            return Ok(());
        }
        if let Some(probe) = self.probe.take() {
            let node = self.node.clone();
            for row in probe.finish().map_err(spilled(&node))? {
                cx.tick()?;
                let row = row.map_err(spilled(&node))?;
                self.emit(vec![row], cx)?;
            }
        }
        self.next.end(cx)
    }
}

struct JoinLeft<K, L, R, U>(Shared<Join<K, L, R, U>>);

struct JoinRight<K, L, R, U>(Shared<Join<K, L, R, U>>);

impl<K: Key, L: Data + Clone, R: Data + Clone, U> Push<L> for JoinLeft<K, L, R, U> {
    fn push(&mut self, record: L, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        let join = &mut *self.0.borrow_mut();
        if join.right_ended {
            join.probe_one(record, cx)
        } else {
            join.early.hold(record, &join.node)
        }
    }

    fn end(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        let mut join = self.0.borrow_mut();
        join.left_ended = true;
        join.maybe_finish(cx)
    }
}

impl<K: Key, L: Data + Clone, R: Data + Clone, U> Push<R> for JoinRight<K, L, R, U> {
    fn push(&mut self, record: R, _: &mut Ctx<'_>) -> Result<(), OperatorError> {
        let join = &mut *self.0.borrow_mut();
        match &mut join.build {
            Some(build) => build.build(record).map_err(spilled(&join.node)),
            None => Ok(()),
        }
    }

    fn end(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        self.0.borrow_mut().right_ended(cx)
    }
}

/// A join node: port 0 the left (probe) input, port 1 the right (build) input.
pub(crate) fn join<K, L, R, U>(
    outer: bool,
    left_key: KeyFn<L, K>,
    right_key: KeyFn<R, K>,
    f: Arc<dyn Fn(L, Option<R>) -> Option<U> + Send + Sync>,
) -> Arc<dyn NodeRuntime>
where
    K: Key,
    L: Data + Clone,
    R: Data + Clone,
    U: Data,
{
    Arc::new(MemoryNode(move |cx: &NodeContext, outputs: Outputs| {
        let kind = if outer {
            JoinKind::LeftOuter
        } else {
            JoinKind::Inner
        };
        let (lk, rk) = (left_key.clone(), right_key.clone());
        let build = SpillingHashJoin::new(
            kind,
            options(cx, cx.memory / 4 * 3)?,
            move |l: &L| lk(l),
            move |r: &R| rk(r),
        );
        let state = std::rc::Rc::new(std::cell::RefCell::new(Join {
            build: Some(build),
            probe: None,
            early: Held::new(options(cx, cx.memory / 4)?),
            left_ended: false,
            right_ended: false,
            f: f.clone(),
            node: cx.node.clone(),
            next: downstream::<U>(outputs),
        }));
        let left: BoxPush<L> = Box::new(JoinLeft(state.clone()));
        let right: BoxPush<R> = Box::new(JoinRight(state));
        Ok(Instance::Ports(vec![erase(left), erase(right)]))
    }))
}

/// A co-group: both inputs sorted by key (spilling past the node's memory), then each key's
/// records of both sides handed to the user's function together, in key order.
pub(crate) struct CoGroup<K, L, R, U, I> {
    pub left: Option<ExternalSorter<L, K>>,
    pub right: Option<ExternalSorter<R, K>>,
    pub left_key: KeyFn<L, K>,
    pub right_key: KeyFn<R, K>,
    pub open: usize,
    pub f: Arc<dyn Fn(&K, Vec<L>, Vec<R>) -> I + Send + Sync>,
    pub node: String,
    pub next: BoxPush<U>,
}

impl<K, L, R, U, I> CoGroup<K, L, R, U, I>
where
    K: Key,
    L: Data,
    R: Data,
    I: IntoIterator<Item = U>,
{
    /// One input ended: after the last, the groups are formed and pushed.
    fn input_ended(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        self.open -= 1;
        if self.open == 0 {
            self.finish(cx)
        } else {
            Ok(())
        }
    }

    fn finish(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        let node = self.node.clone();
        let (Some(left), Some(right)) = (self.left.take(), self.right.take()) else {
            return self.next.end(cx);
        };
        let mut left = left.finish().map_err(spilled(&node))?.peekable();
        let mut right = right.finish().map_err(spilled(&node))?.peekable();
        loop {
            let lk = match left.peek() {
                Some(Ok(l)) => Some((self.left_key)(l)),
                Some(Err(_)) => return Err(take_error(left.next(), &node)),
                None => None,
            };
            let rk = match right.peek() {
                Some(Ok(r)) => Some((self.right_key)(r)),
                Some(Err(_)) => return Err(take_error(right.next(), &node)),
                None => None,
            };
            let key = match (lk, rk) {
                (None, None) => break,
                (Some(l), None) => l,
                (None, Some(r)) => r,
                (Some(l), Some(r)) => l.min(r),
            };
            let mut lefts = Vec::new();
            while let Some(Ok(l)) = left.peek() {
                if (self.left_key)(l) != key {
                    break;
                }
                if let Some(Ok(l)) = left.next() {
                    lefts.push(l);
                }
            }
            let mut rights = Vec::new();
            while let Some(Ok(r)) = right.peek() {
                if (self.right_key)(r) != key {
                    break;
                }
                if let Some(Ok(r)) = right.next() {
                    rights.push(r);
                }
            }
            cx.tick()?;
            for out in (self.f)(&key, lefts, rights) {
                self.next.push(out, cx)?;
            }
        }
        self.next.end(cx)
    }
}

fn take_error<T>(item: Option<Result<T, SpillError>>, node: &str) -> OperatorError {
    match item {
        Some(Err(error)) => spilled(node)(error),
        _ => OperatorError::Failed(format!("{node}: lost its place in a sorted input")),
    }
}

struct CoGroupLeft<K, L, R, U, I>(Shared<CoGroup<K, L, R, U, I>>);

struct CoGroupRight<K, L, R, U, I>(Shared<CoGroup<K, L, R, U, I>>);

impl<K: Key, L: Data, R: Data, U, I: IntoIterator<Item = U>> Push<L>
    for CoGroupLeft<K, L, R, U, I>
{
    fn push(&mut self, record: L, _: &mut Ctx<'_>) -> Result<(), OperatorError> {
        let state = &mut *self.0.borrow_mut();
        match &mut state.left {
            Some(sorter) => sorter.push(record).map_err(spilled(&state.node)),
            None => Ok(()),
        }
    }

    fn end(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        self.0.borrow_mut().input_ended(cx)
    }
}

impl<K: Key, L: Data, R: Data, U, I: IntoIterator<Item = U>> Push<R>
    for CoGroupRight<K, L, R, U, I>
{
    fn push(&mut self, record: R, _: &mut Ctx<'_>) -> Result<(), OperatorError> {
        let state = &mut *self.0.borrow_mut();
        match &mut state.right {
            Some(sorter) => sorter.push(record).map_err(spilled(&state.node)),
            None => Ok(()),
        }
    }

    fn end(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        self.0.borrow_mut().input_ended(cx)
    }
}

/// A co-group node: port 0 the left input, port 1 the right.
pub(crate) fn co_group<K, L, R, U, I>(
    left_key: KeyFn<L, K>,
    right_key: KeyFn<R, K>,
    f: Arc<dyn Fn(&K, Vec<L>, Vec<R>) -> I + Send + Sync>,
) -> Arc<dyn NodeRuntime>
where
    K: Key,
    L: Data,
    R: Data,
    U: Data,
    I: IntoIterator<Item = U> + 'static,
{
    Arc::new(MemoryNode(move |cx: &NodeContext, outputs: Outputs| {
        let (lk, rk) = (left_key.clone(), right_key.clone());
        let state = std::rc::Rc::new(std::cell::RefCell::new(CoGroup {
            left: Some(ExternalSorter::new(
                options(cx, cx.memory / 2)?,
                move |l: &L| lk(l),
            )),
            right: Some(ExternalSorter::new(
                options(cx, cx.memory / 2)?,
                move |r: &R| rk(r),
            )),
            left_key: left_key.clone(),
            right_key: right_key.clone(),
            open: 2,
            f: f.clone(),
            node: cx.node.clone(),
            next: downstream::<U>(outputs),
        }));
        let left: BoxPush<L> = Box::new(CoGroupLeft(state.clone()));
        let right: BoxPush<R> = Box::new(CoGroupRight(state));
        Ok(Instance::Ports(vec![erase(left), erase(right)]))
    }))
}

/// An operator with a broadcast side input: the side's records (every subtask gets all of them)
/// are collected first; main records that arrive before the side input ended are held (and
/// spill), then everything goes through the user's function with the whole side.
pub(crate) struct WithSide<T, B, U, I> {
    pub side: Vec<B>,
    pub side_ended: bool,
    pub main_ended: bool,
    pub early: Held<T>,
    pub f: Arc<dyn Fn(T, &[B]) -> I + Send + Sync>,
    pub node: String,
    pub next: BoxPush<U>,
}

impl<T: Data, B, U, I: IntoIterator<Item = U>> WithSide<T, B, U, I> {
    fn apply(&mut self, record: T, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        for out in (self.f)(record, &self.side) {
            self.next.push(out, cx)?;
        }
        Ok(())
    }
}

struct SideMain<T, B, U, I>(Shared<WithSide<T, B, U, I>>);

struct SideInput<T, B, U, I>(Shared<WithSide<T, B, U, I>>);

impl<T: Data, B, U, I: IntoIterator<Item = U>> Push<T> for SideMain<T, B, U, I> {
    fn push(&mut self, record: T, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        let state = &mut *self.0.borrow_mut();
        if state.side_ended {
            state.apply(record, cx)
        } else {
            state.early.hold(record, &state.node)
        }
    }

    fn end(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        let mut state = self.0.borrow_mut();
        state.main_ended = true;
        if state.side_ended {
            state.next.end(cx)?;
        }
        Ok(())
    }
}

impl<T: Data, B, U, I: IntoIterator<Item = U>> Push<B> for SideInput<T, B, U, I> {
    fn push(&mut self, record: B, _: &mut Ctx<'_>) -> Result<(), OperatorError> {
        self.0.borrow_mut().side.push(record);
        Ok(())
    }

    fn end(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        let mut state = self.0.borrow_mut();
        state.side_ended = true;
        let node = state.node.clone();
        for record in state.early.release(&node)? {
            cx.tick()?;
            state.apply(record.map_err(spilled(&node))?, cx)?;
        }
        if state.main_ended {
            state.next.end(cx)?;
        }
        Ok(())
    }
}

/// An operator with a broadcast side input: port 0 the main input, port 1 the side.
pub(crate) fn with_side<T, B, U, I>(
    f: Arc<dyn Fn(T, &[B]) -> I + Send + Sync>,
) -> Arc<dyn NodeRuntime>
where
    T: Data,
    B: Data,
    U: Data,
    I: IntoIterator<Item = U> + 'static,
{
    Arc::new(MemoryNode(move |cx: &NodeContext, outputs: Outputs| {
        let state = std::rc::Rc::new(std::cell::RefCell::new(WithSide {
            side: Vec::new(),
            side_ended: false,
            main_ended: false,
            early: Held::new(options(cx, cx.memory)?),
            f: f.clone(),
            node: cx.node.clone(),
            next: downstream::<U>(outputs),
        }));
        let main: BoxPush<T> = Box::new(SideMain(state.clone()));
        let side: BoxPush<B> = Box::new(SideInput(state));
        Ok(Instance::Ports(vec![erase(main), erase(side)]))
    }))
}
