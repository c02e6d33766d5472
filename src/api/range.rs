//! A global sort by sampled range partitioning (Flink's `partitionByRange` + `sortPartition`):
//!
//! ```text
//!  input ─┬─ sample (chained: a reservoir of keys per subtask) ─▶ split points (1 subtask) ─┐
//!         │                                                                     broadcast │
//!         └─ tag each record with its range (held until the split points arrive) ◀─────────┘
//!              ─ custom partitioning by range ─▶ sort each range ─▶ ranges in order
//! ```
//!
//! A record's range is its position among up to [`SPLIT_POINTS`] quantiles of the sample,
//! scaled to a fixed resolution, so the number of ranges (the sort's parallelism) may change
//! after the plan is declared.

use std::sync::Arc;

use crate::operators::OperatorError;

use super::data::{Data, Key};
use super::dataset::{DataSet, Order};
use super::keyed::KeyFn;
use super::ops;
use super::plan::{Ship, TypedEdge};
use super::runtime::{BoxPush, Ctx, Push};

/// Keys each sampling subtask keeps.
pub(crate) const SAMPLE_SIZE: usize = 1000;

/// Quantiles the split points are drawn at (at most).
pub(crate) const SPLIT_POINTS: usize = 4096;

/// A range's position scaled to this many steps: `range * n >> RESOLUTION_BITS` is its
/// partition of `n`.
const RESOLUTION_BITS: u32 = 20;

/// A reservoir sample of a partition's keys (Vitter's algorithm R, with a generator seeded by
/// the subtask so runs repeat).
struct Reservoir<T, K> {
    key: KeyFn<T, K>,
    sample: Vec<K>,
    seen: u64,
    state: u64,
    next: BoxPush<K>,
}

impl<T, K> Reservoir<T, K> {
    fn random(&mut self) -> u64 {
        // SplitMix64.
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl<T, K> Push<T> for Reservoir<T, K> {
    fn push(&mut self, record: T, _: &mut Ctx<'_>) -> Result<(), OperatorError> {
        self.seen += 1;
        if self.sample.len() < SAMPLE_SIZE {
            self.sample.push((self.key)(&record));
        } else {
            let slot = (self.random() % self.seen) as usize;
            if slot < SAMPLE_SIZE {
                self.sample[slot] = (self.key)(&record);
            }
        }
        Ok(())
    }

    fn end(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        for key in std::mem::take(&mut self.sample) {
            self.next.push(key, cx)?;
        }
        self.next.end(cx)
    }
}

/// Collects every subtask's sample and pushes the split points (quantiles, ascending).
struct SplitPoints<K> {
    keys: Vec<K>,
    next: BoxPush<Vec<K>>,
}

impl<K: Ord + Clone> Push<K> for SplitPoints<K> {
    fn push(&mut self, key: K, _: &mut Ctx<'_>) -> Result<(), OperatorError> {
        self.keys.push(key);
        Ok(())
    }

    fn end(&mut self, cx: &mut Ctx<'_>) -> Result<(), OperatorError> {
        let mut keys = std::mem::take(&mut self.keys);
        keys.sort_unstable();
        let points = SPLIT_POINTS.min(keys.len());
        let quantiles: Vec<K> = (1..=points)
            .map(|i| i * keys.len() / (points + 1))
            .filter_map(|at| keys.get(at).cloned())
            .collect();
        self.next.push(quantiles, cx)?;
        self.next.end(cx)
    }
}

/// See the module docs.
pub(crate) fn sort_by<T: Data, K: Key>(
    input: &DataSet<T>,
    key: KeyFn<T, K>,
    order: Order,
) -> DataSet<T> {
    let sample_key = key.clone();
    let samples: DataSet<K> = input.then(
        "sort_by (sample)",
        ops::one_input::<T, K, _>(move |cx, next| {
            Ok(Box::new(Reservoir {
                key: sample_key.clone(),
                sample: Vec::new(),
                seen: 0,
                state: u64::from(cx.subtask) ^ 0x5EED,
                next,
            }))
        }),
        Ship::Forward,
        TypedEdge::<T>::plain(),
    );
    let points: DataSet<Vec<K>> = samples.then(
        "sort_by (split points)",
        ops::one_input::<K, Vec<K>, _>(|_, next| {
            Ok(Box::new(SplitPoints {
                keys: Vec::new(),
                next,
            }))
        }),
        Ship::Gather,
        TypedEdge::<K>::plain(),
    );
    input
        .env
        .with_node(points.node, |node| node.fixed_parallelism = Some(1));
    let range_key = key.clone();
    let descending = order == Order::Descending;
    let tagged: DataSet<(u32, T)> = input
        .map_with_broadcast(&points, move |record: T, points: &[Vec<K>]| {
            let quantiles = points.first().map(Vec::as_slice).unwrap_or(&[]);
            let position = quantiles.partition_point(|q| *q <= range_key(&record));
            let ranges = quantiles.len() + 1;
            let position = if descending {
                ranges - 1 - position
            } else {
                position
            };
            let scaled = ((position as u64) << RESOLUTION_BITS) / ranges as u64;
            (scaled as u32, record)
        })
        .name("sort_by (range)");
    let scaled_range: Arc<dyn Fn(&(u32, T), usize) -> usize + Send + Sync> =
        Arc::new(|(scaled, _): &(u32, T), partitions: usize| {
            ((u64::from(*scaled) * partitions as u64) >> RESOLUTION_BITS) as usize
        });
    tagged.then(
        "sort_by",
        super::keyed::sort_partition_unwrapping::<(u32, T), T, K>(
            Arc::new(|(_, record)| record),
            key,
            descending,
        ),
        Ship::Custom,
        TypedEdge::<(u32, T)>::custom(scaled_range),
    )
}
