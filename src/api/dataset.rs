//! [`DataSet`]: a typed collection of records a program transforms (Flink's DataSet API, in
//! Rust idioms: closures, iterators, serde types). Every method declares an operator in the
//! program's plan and returns the dataset it produces; nothing runs until
//! [`Env::execute`](super::Env::execute).

use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::Arc;

use super::data::{Data, Key};
use super::env::Env;
use super::keyed::{self, KeyFn};
use super::keys::KeyHash;
use super::ops::{self, Filter, FlatMap, Map};
use super::plan::{Node, NodeRuntime, Ship, TypedEdge};
use super::sinks;

/// The bound of [`DataSet::collect`]: 16 MiB of encoded records over all its subtasks.
pub const DEFAULT_COLLECT_BOUND: usize = 16 << 20;

/// A typed collection of records, produced by one operator of the program's plan.
///
/// Cloning a dataset does not copy anything: both handles name the same operator, whose output
/// then goes to every operator that reads it.
pub struct DataSet<T> {
    pub(crate) env: Env,
    pub(crate) node: usize,
    _records: PhantomData<fn() -> T>,
}

impl<T> Clone for DataSet<T> {
    fn clone(&self) -> Self {
        Self {
            env: self.env.clone(),
            node: self.node,
            _records: PhantomData,
        }
    }
}

/// The sort order of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Smallest first.
    Ascending,
    /// Largest first.
    Descending,
}

impl<T: Data> DataSet<T> {
    pub(crate) fn new(env: Env, node: usize) -> Self {
        Self {
            env,
            node,
            _records: PhantomData,
        }
    }

    /// Declares an operator reading this dataset through `edge`; returns its output.
    pub(crate) fn then<U: Data>(
        &self,
        name: &str,
        runtime: Arc<dyn NodeRuntime>,
        ship: Ship,
        edge: Arc<dyn super::plan::EdgeRuntime>,
    ) -> DataSet<U> {
        let node = self.env.add_node(Node::new(name, runtime));
        self.env.connect(self.node, node, ship, edge);
        DataSet::new(self.env.clone(), node)
    }

    /// Declares a one-input operator connected forward (chained when it can be). It keeps its
    /// input's partitions (and subtasks) unless the program sets its parallelism, as a Dask or
    /// Spark map does: a sink after a sort writes one part file per sorted range.
    fn forward<U: Data>(&self, name: &str, runtime: Arc<dyn NodeRuntime>) -> DataSet<U> {
        let next: DataSet<U> = self.then(name, runtime, Ship::Forward, TypedEdge::<T>::plain());
        self.env
            .with_node(next.node, |node| node.follows_input = true);
        next
    }

    // ---- per-operator settings ----

    /// Names the operator (vertices, the REST API and errors show it).
    pub fn name(self, name: impl Into<String>) -> Self {
        self.env
            .with_node(self.node, |node| node.name = name.into());
        self
    }

    /// Runs the operator as `parallelism` subtasks (otherwise its input's for a record-at-a-time
    /// operator or sink, the environment's default for sources and operators that repartition).
    pub fn parallelism(self, parallelism: u32) -> Self {
        self.env.with_node(self.node, |node| {
            node.parallelism = Some(parallelism.max(1))
        });
        self
    }

    /// Puts the operator in slot sharing group `group`: operators of different groups never
    /// share a slot.
    pub fn slot_sharing_group(self, group: impl Into<String>) -> Self {
        self.env
            .with_node(self.node, |node| node.sharing = Some(group.into()));
        self
    }

    /// Makes the exchanges out of this operator blocking: its consumers start once it has
    /// finished, and its results are kept until they have read them (a batch shuffle).
    pub fn blocking(self) -> Self {
        self.env.with_node(self.node, |node| node.blocking = true);
        self
    }

    // ---- record at a time ----

    /// Each record turned into one record.
    pub fn map<U: Data>(&self, f: impl Fn(T) -> U + Send + Sync + 'static) -> DataSet<U> {
        let f: Arc<dyn Fn(T) -> U + Send + Sync> = Arc::new(f);
        self.forward(
            "map",
            ops::one_input::<T, U, _>(move |_, next| Ok(Box::new(Map { f: f.clone(), next }))),
        )
    }

    /// The records `f` keeps.
    pub fn filter(&self, f: impl Fn(&T) -> bool + Send + Sync + 'static) -> DataSet<T> {
        let f: Arc<dyn Fn(&T) -> bool + Send + Sync> = Arc::new(f);
        self.forward(
            "filter",
            ops::one_input::<T, T, _>(move |_, next| Ok(Box::new(Filter { f: f.clone(), next }))),
        )
    }

    /// Each record turned into any number of records (whatever `f`'s iterator yields).
    pub fn flat_map<U: Data, I>(&self, f: impl Fn(T) -> I + Send + Sync + 'static) -> DataSet<U>
    where
        I: IntoIterator<Item = U> + 'static,
    {
        let f: Arc<dyn Fn(T) -> I + Send + Sync> = Arc::new(f);
        self.forward(
            "flat_map",
            ops::one_input::<T, U, _>(move |_, next| Ok(Box::new(FlatMap { f: f.clone(), next }))),
        )
    }

    /// `f` emits any number of `(key, value)` pairs per record, the key by reference, and the
    /// values of each key are reduced with `reduce` (associative): a `flat_map` fused with
    /// [`reduce_by_key`](DataSet::reduce_by_key)'s combiner. A key the combiner holds already is
    /// looked up by `&Q` and never made owned, so `f` can build its keys in one reused buffer:
    /// a word count then allocates per distinct word, not per word.
    ///
    /// ```no_run
    /// # use flint::api::{DataSet, Env};
    /// # fn counts(lines: DataSet<String>) -> DataSet<(String, u64)> {
    /// lines.flat_map_reduce_by_key(
    ///     |line: String, emit: &mut dyn FnMut(&str, u64)| {
    ///         let mut word = String::new();
    ///         for token in line.split_whitespace() {
    ///             word.clear();
    ///             word.extend(token.chars().flat_map(char::to_lowercase));
    ///             emit(&word, 1);
    ///         }
    ///     },
    ///     |a, b| a + b,
    /// )
    /// # }
    /// ```
    pub fn flat_map_reduce_by_key<K, Q, A>(
        &self,
        f: impl Fn(T, &mut dyn FnMut(&Q, A)) + Send + Sync + 'static,
        reduce: impl Fn(A, A) -> A + Send + Sync + 'static,
    ) -> DataSet<(K, A)>
    where
        K: Key + std::borrow::Borrow<Q>,
        Q: ?Sized + std::hash::Hash + Eq + ToOwned<Owned = K> + 'static,
        A: Data,
    {
        let f: super::combine::EmitFn<T, Q, A> = Arc::new(f);
        let reduce: Arc<dyn Fn(A, A) -> A + Send + Sync> = Arc::new(reduce);
        let add = reduce.clone();
        let combine: DataSet<(K, Option<A>)> = self.forward(
            "flat_map_reduce_by_key (combine)",
            ops::one_input::<T, (K, Option<A>), _>(move |_, next| {
                Ok(Box::new(super::combine::FlatMapCombine {
                    f: f.clone(),
                    reduce: add.clone(),
                    table: Default::default(),
                    next,
                }))
            }),
        );
        combine.reduced_by_key("flat_map_reduce_by_key", reduce)
    }

    /// This dataset and `others`, together (same type).
    pub fn union(&self, others: &[&DataSet<T>]) -> DataSet<T> {
        let node = self
            .env
            .add_node(Node::new("union", ops::union::<T>(1 + others.len())));
        for input in std::iter::once(self).chain(others.iter().copied()) {
            self.env
                .connect(input.node, node, Ship::Forward, TypedEdge::<T>::plain());
        }
        DataSet::new(self.env.clone(), node)
    }

    // ---- repartitioning ----

    /// Redistributes records round robin over the next operator's subtasks (evens out skew).
    pub fn rebalance(&self) -> DataSet<T> {
        self.then(
            "rebalance",
            ops::identity::<T>(),
            Ship::Rebalance,
            TypedEdge::<T>::plain(),
        )
    }

    /// Sends each record to the subtask `partitioner(record, subtasks)` chooses.
    pub fn partition_custom(
        &self,
        partitioner: impl Fn(&T, usize) -> usize + Send + Sync + 'static,
    ) -> DataSet<T> {
        self.then(
            "partition_custom",
            ops::identity::<T>(),
            Ship::Custom,
            TypedEdge::<T>::custom(Arc::new(partitioner)),
        )
    }

    /// Sends each record to the subtask that owns its key's key group.
    pub fn partition_by_key<K: Key>(
        &self,
        key: impl Fn(&T) -> K + Send + Sync + 'static,
    ) -> DataSet<T> {
        let key: KeyFn<T, K> = Arc::new(key);
        self.then(
            "partition_by_key",
            ops::identity::<T>(),
            Ship::Hash,
            TypedEdge::<T>::hashed(KeyHash::new(key)),
        )
    }

    // ---- keyed ----

    /// Groups the records by `key`: a [`KeyedDataSet`] to aggregate, reduce or group.
    pub fn key_by<K: Key>(
        &self,
        key: impl Fn(&T) -> K + Send + Sync + 'static,
    ) -> KeyedDataSet<T, K> {
        KeyedDataSet {
            input: self.clone(),
            key: Arc::new(key),
        }
    }

    /// The distinct records (each once).
    pub fn distinct(&self) -> DataSet<T>
    where
        T: Key,
    {
        self.key_by(|t: &T| t.clone())
            .reduce(|first, _| first)
            .name("distinct")
    }

    // ---- joins ----

    /// Joins this (left) dataset with `right` on equal keys: see [`Join`]. The right side is
    /// built into a hash table (spilling past its memory), the left probes it: put the larger
    /// input left.
    pub fn join<R: Data + Clone, K: Key>(
        &self,
        right: &DataSet<R>,
        left_key: impl Fn(&T) -> K + Send + Sync + 'static,
        right_key: impl Fn(&R) -> K + Send + Sync + 'static,
    ) -> Join<T, R, K>
    where
        T: Clone,
    {
        Join {
            left: self.clone(),
            right: right.clone(),
            left_key: Arc::new(left_key),
            right_key: Arc::new(right_key),
            broadcast_right: false,
        }
    }

    /// Groups this dataset and `right` by equal keys together: `f` gets each key's records of
    /// both sides (either may be empty), in key order.
    pub fn co_group<R: Data, K: Key, U: Data, I>(
        &self,
        right: &DataSet<R>,
        left_key: impl Fn(&T) -> K + Send + Sync + 'static,
        right_key: impl Fn(&R) -> K + Send + Sync + 'static,
        f: impl Fn(&K, Vec<T>, Vec<R>) -> I + Send + Sync + 'static,
    ) -> DataSet<U>
    where
        I: IntoIterator<Item = U> + 'static,
    {
        let left_key: KeyFn<T, K> = Arc::new(left_key);
        let right_key: KeyFn<R, K> = Arc::new(right_key);
        let node = self.env.add_node(Node::new(
            "co_group",
            keyed::co_group::<K, T, R, U, I>(left_key.clone(), right_key.clone(), Arc::new(f)),
        ));
        self.env.connect(
            self.node,
            node,
            Ship::Hash,
            TypedEdge::<T>::hashed(KeyHash::new(left_key)),
        );
        self.env.connect(
            right.node,
            node,
            Ship::Hash,
            TypedEdge::<R>::hashed(KeyHash::new(right_key)),
        );
        DataSet::new(self.env.clone(), node)
    }

    /// Each record with the whole of `side` (Flink's broadcast set): every subtask gets all of
    /// `side`'s records before it applies `f`. `side` should be small.
    pub fn map_with_broadcast<B: Data, U: Data>(
        &self,
        side: &DataSet<B>,
        f: impl Fn(T, &[B]) -> U + Send + Sync + 'static,
    ) -> DataSet<U> {
        self.flat_map_with_broadcast(side, move |t, b| std::iter::once(f(t, b)))
    }

    /// [`map_with_broadcast`](Self::map_with_broadcast) yielding any number of records.
    pub fn flat_map_with_broadcast<B: Data, U: Data, I>(
        &self,
        side: &DataSet<B>,
        f: impl Fn(T, &[B]) -> I + Send + Sync + 'static,
    ) -> DataSet<U>
    where
        I: IntoIterator<Item = U> + 'static,
    {
        let mut with_side = Node::new(
            "with_broadcast",
            keyed::with_side::<T, B, U, I>(Arc::new(f)),
        );
        with_side.first_input_last = true;
        let node = self.env.add_node(with_side);
        self.env
            .connect(self.node, node, Ship::Forward, TypedEdge::<T>::plain());
        self.env
            .connect(side.node, node, Ship::Broadcast, TypedEdge::<B>::plain());
        DataSet::new(self.env.clone(), node)
    }

    // ---- order ----

    /// Sorts each partition by `key` (stable; spilling past the operator's memory).
    pub fn sort_partition<K: Key>(
        &self,
        key: impl Fn(&T) -> K + Send + Sync + 'static,
        order: Order,
    ) -> DataSet<T> {
        self.forward(
            "sort_partition",
            keyed::sort_partition::<T, K>(Arc::new(key), order == Order::Descending),
        )
    }

    /// All records in `key` order, in one partition (small results: a global sort of a large
    /// dataset should range-partition first, see [`sort_by`](Self::sort_by)).
    pub fn sort_all<K: Key>(
        &self,
        key: impl Fn(&T) -> K + Send + Sync + 'static,
        order: Order,
    ) -> DataSet<T> {
        let sorted: DataSet<T> = self.then(
            "sort_all",
            keyed::sort_partition::<T, K>(Arc::new(key), order == Order::Descending),
            Ship::Gather,
            TypedEdge::<T>::plain(),
        );
        self.env
            .with_node(sorted.node, |node| node.fixed_parallelism = Some(1));
        sorted
    }

    /// A global sort: records range-partitioned by `key` (the split points drawn from a sample
    /// of every subtask's keys) and each range sorted, so partition `i`'s keys all come before
    /// partition `i + 1`'s. The result's partitions, read in order, are sorted.
    pub fn sort_by<K: Key>(
        &self,
        key: impl Fn(&T) -> K + Send + Sync + 'static,
        order: Order,
    ) -> DataSet<T> {
        super::range::sort_by(self, Arc::new(key), order)
    }

    /// The first `n` records (of whichever partitions yield them first), in one partition.
    pub fn first_n(&self, n: usize) -> DataSet<T> {
        let local: DataSet<T> = self.forward(
            "first_n",
            ops::one_input::<T, T, _>(move |_, next| Ok(Box::new(keyed::FirstN { left: n, next }))),
        );
        let global: DataSet<T> = local.then(
            "first_n",
            ops::one_input::<T, T, _>(move |_, next| Ok(Box::new(keyed::FirstN { left: n, next }))),
            Ship::Gather,
            TypedEdge::<T>::plain(),
        );
        self.env
            .with_node(global.node, |node| node.fixed_parallelism = Some(1));
        global
    }

    /// The `n` records with the smallest (`Ascending`) or largest (`Descending`) keys, in key
    /// order, in one partition (each subtask keeps its own top `n`, then one subtask merges).
    pub fn top_k<K: Key>(
        &self,
        n: usize,
        key: impl Fn(&T) -> K + Send + Sync + 'static,
        order: Order,
    ) -> DataSet<T> {
        let key: KeyFn<T, K> = Arc::new(key);
        let descending = order == Order::Descending;
        let local: DataSet<T> =
            self.forward("top_k", keyed::top_k::<T, K>(n, key.clone(), descending));
        let global: DataSet<T> = local.then(
            "top_k",
            keyed::top_k::<T, K>(n, key, descending),
            Ship::Gather,
            TypedEdge::<T>::plain(),
        );
        self.env
            .with_node(global.node, |node| node.fixed_parallelism = Some(1));
        global
    }

    // ---- sinks ----

    /// Sends every record back to the program: after [`Env::execute`](super::Env::execute),
    /// [`JobResult::get`](super::JobResult::get) returns them. Bounded to
    /// [`DEFAULT_COLLECT_BOUND`] bytes of encoded records (at most 8 MiB from each subtask, whose
    /// final report carries them); past it the job fails naming the bound.
    pub fn collect(&self) -> Collected<T> {
        self.collect_bounded(DEFAULT_COLLECT_BOUND)
    }

    /// [`collect`](Self::collect) with a bound of `bytes`.
    pub fn collect_bounded(&self, bytes: usize) -> Collected<T> {
        let sink: DataSet<()> = self.forward("collect", sinks::collect::<T>(bytes));
        // A task sends back one result: a collect sink is a task of its own.
        self.env.with_node(sink.node, |node| node.unchained = true);
        Collected {
            node: sink.node,
            _records: PhantomData,
        }
    }

    /// Runs `f` on every record, on the TaskManagers.
    pub fn for_each(&self, f: impl Fn(T) + Send + Sync + 'static) {
        let _: DataSet<()> = self.forward("for_each", sinks::for_each::<T>(Arc::new(f)));
    }

    /// Writes one line per record (`format`ted) into `dir`, one `part-NNNNN` file per subtask,
    /// each made visible only once complete.
    pub fn write_text(
        &self,
        dir: impl Into<PathBuf>,
        format: impl Fn(&T) -> String + Send + Sync + 'static,
    ) -> DataSet<()> {
        self.forward("write_text", sinks::text::<T>(dir.into(), Arc::new(format)))
    }

    /// Writes the records as CSV (a header of the serde field names, then a row per record)
    /// into `dir`, one `part-NNNNN` file per subtask, each made visible only once complete.
    pub fn write_csv(&self, dir: impl Into<PathBuf>) -> DataSet<()> {
        self.forward("write_csv", sinks::csv::<T>(dir.into()))
    }
}

/// What a [`DataSet::collect`] sink gathers; read it from the [`JobResult`](super::JobResult).
#[derive(Debug)]
pub struct Collected<T> {
    pub(crate) node: usize,
    _records: PhantomData<fn() -> T>,
}

impl<T> Clone for Collected<T> {
    fn clone(&self) -> Self {
        Self {
            node: self.node,
            _records: PhantomData,
        }
    }
}

/// A dataset grouped by a key (see [`DataSet::key_by`]).
pub struct KeyedDataSet<T, K> {
    input: DataSet<T>,
    key: KeyFn<T, K>,
}

impl<T: Data, K: Key> KeyedDataSet<T, K> {
    /// Declares a combiner (chained to the input), the keyed exchange of its partial results,
    /// and the final merge; returns the `(key, accumulator)` pairs.
    fn combined<A: Data>(
        &self,
        name: &str,
        create: Arc<dyn Fn(T) -> A + Send + Sync>,
        add: Arc<dyn Fn(&mut A, T) + Send + Sync>,
        merge: Arc<dyn Fn(&mut A, A) + Send + Sync>,
    ) -> DataSet<(K, A)> {
        let key = self.key.clone();
        let combine: DataSet<(K, A)> = self.input.forward(
            &format!("{name} (combine)"),
            ops::one_input::<T, (K, A), _>(move |_, next| {
                Ok(Box::new(keyed::Combine {
                    key: key.clone(),
                    pairs: keyed::PairCombine::new(create.clone(), add.clone(), next),
                }))
            }),
        );
        combine.merged_by_key(name, merge)
    }

    /// Reduces each key's records to one with `f` (associative: it is applied before the
    /// exchange too, as a combiner).
    pub fn reduce(&self, f: impl Fn(T, T) -> T + Send + Sync + 'static) -> DataSet<T> {
        let f = Arc::new(f);
        let (add, merge) = (f.clone(), f);
        let reduced = self.combined::<Option<T>>(
            "reduce",
            Arc::new(|t| Some(t)),
            Arc::new(move |acc: &mut Option<T>, t: T| {
                *acc = Some(match acc.take() {
                    Some(a) => add(a, t),
                    None => t,
                });
            }),
            Arc::new(move |acc: &mut Option<T>, other: Option<T>| {
                *acc = match (acc.take(), other) {
                    (Some(a), Some(b)) => Some(merge(a, b)),
                    (a, b) => a.or(b),
                };
            }),
        );
        reduced.flat_map(|(_, t)| t).name("reduce")
    }

    /// Aggregates each key's records into an accumulator (Flink's `AggregateFunction`): a key's
    /// first record starts one with `create`, `add` folds each record in, and `merge` combines
    /// partial accumulators (from the combiner before the exchange, and from spills). Returns
    /// `(key, accumulator)` per key.
    pub fn aggregate<A: Data>(
        &self,
        create: impl Fn() -> A + Send + Sync + 'static,
        add: impl Fn(&mut A, T) + Send + Sync + 'static,
        merge: impl Fn(&mut A, A) + Send + Sync + 'static,
    ) -> DataSet<(K, A)> {
        let add = Arc::new(add);
        let first = add.clone();
        self.combined(
            "aggregate",
            Arc::new(move |t| {
                let mut acc = create();
                first(&mut acc, t);
                acc
            }),
            add,
            Arc::new(merge),
        )
    }

    /// Counts each key's records: `(key, count)`.
    pub fn count(&self) -> DataSet<(K, u64)> {
        self.aggregate(|| 0u64, |n, _| *n += 1, |n, m| *n += m)
            .name("count")
    }

    /// Folds each key's records, in arrival order, into `init()` with `f` (not mergeable: no
    /// combiner; every record crosses the exchange). Returns `(key, accumulator)` per key.
    pub fn fold<A: Data>(
        &self,
        init: impl Fn() -> A + Send + Sync + 'static,
        f: impl Fn(&mut A, T) + Send + Sync + 'static,
    ) -> DataSet<(K, A)> {
        let (init, f): (
            Arc<dyn Fn() -> A + Send + Sync>,
            Arc<dyn Fn(&mut A, T) + Send + Sync>,
        ) = (Arc::new(init), Arc::new(f));
        self.group_reduce(move |key: &K, records| {
            let mut acc = init();
            for record in records {
                f(&mut acc, record);
            }
            std::iter::once((key.clone(), acc))
        })
        .name("fold")
    }

    /// Hands all of each key's records to `f` together (as an iterator, in arrival order; a
    /// group may exceed memory: it is sorted, spilling, and read back), in key order.
    pub fn group_reduce<U: Data, I>(
        &self,
        f: impl Fn(&K, &mut dyn Iterator<Item = T>) -> I + Send + Sync + 'static,
    ) -> DataSet<U>
    where
        I: IntoIterator<Item = U> + 'static,
    {
        let key = self.key.clone();
        self.input.then(
            "group_reduce",
            keyed::group_reduce::<T, K, U, I>(key.clone(), Arc::new(f)),
            Ship::Hash,
            TypedEdge::<T>::hashed(KeyHash::new(key)),
        )
    }

    /// The first record of each key.
    pub fn distinct(&self) -> DataSet<T> {
        self.reduce(|first, _| first).name("distinct")
    }
}

impl<K: Key, A: Data> DataSet<(K, A)> {
    /// The keyed exchange of a combiner's partial `(key, accumulator)`s and their final merge
    /// with `merge`.
    fn merged_by_key(
        &self,
        name: &str,
        merge: Arc<dyn Fn(&mut A, A) + Send + Sync>,
    ) -> DataSet<(K, A)> {
        self.then(
            name,
            keyed::aggregate::<K, A>(merge),
            Ship::Hash,
            TypedEdge::<(K, A)>::hashed(KeyHash::first()),
        )
    }

    /// Reduces the values of each key with `f` (associative: it is applied before the exchange
    /// too, as a combiner), one `(key, value)` per key: Spark's `reduceByKey`, Flink's
    /// `groupBy(0).reduce`. Unlike [`key_by`](Self::key_by)`(|(k, _)| k.clone())` and
    /// [`KeyedDataSet::reduce`], the pair's own key is used where it lies and never cloned:
    /// cheaper for keys that own memory, such as a `String` per word.
    ///
    /// ```no_run
    /// # use flint::api::Env;
    /// # fn counts(env: &Env) {
    /// let counts = env
    ///     .from_collection(vec![("a".to_string(), 1u64), ("b".into(), 1), ("a".into(), 1)])
    ///     .reduce_by_key(|a, b| a + b); // ("a", 2), ("b", 1)
    /// # }
    /// ```
    pub fn reduce_by_key(&self, f: impl Fn(A, A) -> A + Send + Sync + 'static) -> DataSet<(K, A)> {
        let f: Arc<dyn Fn(A, A) -> A + Send + Sync> = Arc::new(f);
        let (add, merge) = (f.clone(), f);
        let add: Arc<dyn Fn(&mut Option<A>, A) + Send + Sync> =
            Arc::new(move |acc: &mut Option<A>, value: A| {
                *acc = Some(match acc.take() {
                    Some(a) => add(a, value),
                    None => value,
                });
            });
        let combine: DataSet<(K, Option<A>)> = self.forward(
            "reduce_by_key (combine)",
            ops::one_input::<(K, A), (K, Option<A>), _>(move |_, next| {
                Ok(Box::new(keyed::PairCombine::new(
                    Arc::new(|value| Some(value)),
                    add.clone(),
                    next,
                )))
            }),
        );
        combine.reduced_by_key("reduce_by_key", merge)
    }
}

impl<K: Key, A: Data> DataSet<(K, Option<A>)> {
    /// The keyed exchange of a combiner's partial `(key, Some(value))`s and their final
    /// reduction with `reduce`.
    fn reduced_by_key(
        &self,
        name: &str,
        reduce: Arc<dyn Fn(A, A) -> A + Send + Sync>,
    ) -> DataSet<(K, A)> {
        self.merged_by_key(
            name,
            Arc::new(move |acc: &mut Option<A>, other: Option<A>| {
                *acc = match (acc.take(), other) {
                    (Some(a), Some(b)) => Some(reduce(a, b)),
                    (a, b) => a.or(b),
                };
            }),
        )
        .flat_map(|(key, value)| value.map(|value| (key, value)))
        .name(name)
    }
}

/// A join of two datasets on equal keys (see [`DataSet::join`]).
pub struct Join<L, R, K> {
    left: DataSet<L>,
    right: DataSet<R>,
    left_key: KeyFn<L, K>,
    right_key: KeyFn<R, K>,
    broadcast_right: bool,
}

impl<L: Data + Clone, R: Data + Clone, K: Key> Join<L, R, K> {
    /// Sends the whole right side to every subtask of the join instead of hash-partitioning
    /// both sides (a broadcast hash join: for a small right side, the left side is not shuffled).
    pub fn broadcast_right(mut self) -> Self {
        self.broadcast_right = true;
        self
    }

    fn declare<U: Data>(
        self,
        name: &str,
        outer: bool,
        f: Arc<dyn Fn(L, Option<R>) -> Option<U> + Send + Sync>,
    ) -> DataSet<U> {
        let env = self.left.env.clone();
        let mut join = Node::new(
            name,
            keyed::join::<K, L, R, U>(outer, self.left_key.clone(), self.right_key.clone(), f),
        );
        join.first_input_last = true;
        let node = env.add_node(join);
        if self.broadcast_right {
            env.connect(self.left.node, node, Ship::Forward, TypedEdge::<L>::plain());
            env.connect(
                self.right.node,
                node,
                Ship::Broadcast,
                TypedEdge::<R>::plain(),
            );
        } else {
            env.connect(
                self.left.node,
                node,
                Ship::Hash,
                TypedEdge::<L>::hashed(KeyHash::new(self.left_key)),
            );
            env.connect(
                self.right.node,
                node,
                Ship::Hash,
                TypedEdge::<R>::hashed(KeyHash::new(self.right_key)),
            );
        }
        DataSet::new(env, node)
    }

    /// The inner join: `f` of every pair of records with equal keys.
    pub fn inner<U: Data>(self, f: impl Fn(L, R) -> U + Send + Sync + 'static) -> DataSet<U> {
        self.declare(
            "join",
            false,
            Arc::new(move |l, r: Option<R>| r.map(|r| f(l, r))),
        )
    }

    /// The left outer join: `f` of every left record with each right record of its key, or
    /// with `None` if there is none.
    pub fn left_outer<U: Data>(
        self,
        f: impl Fn(L, Option<R>) -> U + Send + Sync + 'static,
    ) -> DataSet<U> {
        self.declare("left_outer_join", true, Arc::new(move |l, r| Some(f(l, r))))
    }
}
