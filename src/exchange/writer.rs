//! The producer side of a task: [`ResultPartitionWriter`] routes each record to its consumer's
//! subpartition, serializes it into that subpartition's [`BufferBuilder`], and hands a full
//! buffer (at most `taskmanager.network.buffer-size` bytes) to the [`ResultPartitionManager`] — waiting, when a
//! pipelined subpartition is full, until its consumer takes one. That wait is backpressure: it
//! is counted per task, and it ends early when the partition fails or is released (which is how
//! a cancelled producer is woken).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use super::buffer::BufferBuilder;
use super::error::ExchangeError;
use super::metrics::TaskIoMetrics;
use super::partition::{ResultPartitionManager, Space};
use crate::base::clock::Clock;
use crate::base::codec;
use crate::base::hash::fnv1a;
use crate::env::TaskBlocker;
use crate::env::task_blocking::{Cancellation, block_on};
use crate::job::graph::DistributionPattern;
use crate::messages::deployment::ResultPartitionDeploymentDescriptor;
use crate::operators::Record;

/// What a writer did, for the task's metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Records emitted (counted once per output they went to).
    pub records_out: u64,
    /// Their serialized bytes.
    pub bytes_out: u64,
    /// Buffers handed to the store.
    pub buffers_out: u64,
    /// Times the producer found a subpartition full and waited.
    pub backpressured_waits: u64,
}

/// One output's buffers, one per subpartition.
struct Output {
    partition: ResultPartitionDeploymentDescriptor,
    buffers: Vec<BufferBuilder>,
}

/// See the module docs.
pub struct ResultPartitionWriter {
    store: Arc<ResultPartitionManager>,
    outputs: Vec<Output>,
    buffer_size: usize,
    /// One record's encoding, reused: a record is serialized once for all its outputs.
    scratch: Vec<u8>,
    stats: WriterStats,
    metrics: Arc<TaskIoMetrics>,
    clock: Arc<dyn Clock>,
}

impl ResultPartitionWriter {
    /// A writer for `outputs` into `store`, cutting buffers at `buffer_size` bytes,
    /// counting into `metrics` (its waits timed by `clock`).
    pub fn new(
        store: Arc<ResultPartitionManager>,
        outputs: &[ResultPartitionDeploymentDescriptor],
        buffer_size: usize,
        metrics: Arc<TaskIoMetrics>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let outputs = outputs
            .iter()
            .map(|&partition| Output {
                partition,
                buffers: (0..partition.subpartitions)
                    .map(|_| BufferBuilder::default())
                    .collect(),
            })
            .collect();
        Self {
            store,
            outputs,
            buffer_size: buffer_size.max(1),
            scratch: Vec::new(),
            stats: WriterStats::default(),
            metrics,
            clock,
        }
    }

    /// What it did so far.
    pub fn stats(&self) -> WriterStats {
        self.stats
    }

    /// Whether the task has outputs at all (a sink has none).
    pub fn is_empty(&self) -> bool {
        self.outputs.is_empty()
    }

    /// The subpartition a record goes to: a key always to the same consumer (FNV-1a, stable).
    pub fn route(output: &ResultPartitionDeploymentDescriptor, record: &Record) -> usize {
        match output.pattern {
            DistributionPattern::Forward => 0,
            DistributionPattern::AllToAll => {
                (fnv1a(record.key.as_bytes()) % u64::from(output.subpartitions.max(1))) as usize
            }
        }
    }

    /// Writes `record` to every output, routed by its key ([`route`](Self::route)); a buffer
    /// that would pass the buffer size goes to the store first, waiting for room. A record
    /// larger than a buffer travels alone.
    pub fn emit(
        &mut self,
        record: Record,
        blocker: &dyn TaskBlocker,
        cancelled: &Arc<Cancellation>,
    ) -> Result<(), ExchangeError> {
        if self.outputs.is_empty() {
            return Ok(());
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let encoded = codec::encode_into(&record, &mut scratch).map_err(ExchangeError::Serialize);
        let written = encoded.and_then(|_| {
            for output in 0..self.outputs.len() {
                let sub = Self::route(&self.outputs[output].partition, &record);
                self.write(output, sub, &scratch, blocker, cancelled)?;
            }
            Ok(())
        });
        self.scratch = scratch;
        written
    }

    /// How many outputs (outgoing edges) the task writes.
    pub fn outputs(&self) -> usize {
        self.outputs.len()
    }

    /// How many subpartitions (consumer subtasks) output `output` has.
    pub fn subpartitions(&self, output: usize) -> usize {
        self.outputs[output].buffers.len()
    }

    /// Appends one record's encoding (`encoded`, as [`codec::encode_into`] writes it) to
    /// subpartition `sub` of output `output`; a buffer that would pass the buffer size goes to
    /// the store first, waiting for room. A record larger than a buffer travels alone; one over
    /// [`super::MAX_RECORD_BYTES`] is refused. The caller routes: the exchange never looks
    /// inside a record.
    pub fn write(
        &mut self,
        output: usize,
        sub: usize,
        encoded: &[u8],
        blocker: &dyn TaskBlocker,
        cancelled: &Arc<Cancellation>,
    ) -> Result<(), ExchangeError> {
        let bytes = encoded.len();
        if bytes > super::MAX_RECORD_BYTES {
            return Err(ExchangeError::RecordTooLarge {
                bytes,
                max: super::MAX_RECORD_BYTES,
            });
        }
        let filled = self.outputs[output].buffers[sub].len();
        if filled > 0 && filled + bytes > self.buffer_size {
            self.hand_over(output, sub, blocker, cancelled)?;
        }
        self.outputs[output].buffers[sub].push_encoded(encoded, self.buffer_size);
        self.stats.records_out += 1;
        self.stats.bytes_out += bytes as u64;
        self.metrics.wrote(bytes as u64);
        if self.outputs[output].buffers[sub].len() >= self.buffer_size {
            self.hand_over(output, sub, blocker, cancelled)?;
        }
        Ok(())
    }

    /// Hands every non-empty buffer to the store (at the end of the task), an output's all at
    /// once ([`ResultPartitionManager::append_all`]): at P = 1,000 a producer ends with a
    /// buffer for most of its 1,000 subpartitions, and each alone took the partition's lock
    /// twice and the store's readers once.
    pub fn flush(
        &mut self,
        blocker: &dyn TaskBlocker,
        cancelled: &Arc<Cancellation>,
    ) -> Result<(), ExchangeError> {
        for index in 0..self.outputs.len() {
            let id = self.outputs[index].partition.partition;
            let mut pending: std::collections::VecDeque<(u32, super::Buffer)> =
                (self.outputs[index].buffers.iter_mut())
                    .enumerate()
                    .filter(|(_, builder)| !builder.is_empty())
                    .map(|(sub, builder)| (sub as u32, builder.finish()))
                    .collect();
            while !pending.is_empty() {
                let (appended, full) = self
                    .store
                    .append_all(id, &mut pending)
                    .map_err(|error| self.failed(cancelled, error))?;
                self.stats.buffers_out += appended as u64;
                if let Some(room) = full {
                    self.wait_for(room, blocker, cancelled)?;
                }
            }
            if cancelled.is_cancelled() {
                return Err(ExchangeError::Cancelled);
            }
        }
        Ok(())
    }

    /// Marks every output finished.
    pub fn finish(&self) -> Result<(), ExchangeError> {
        for output in &self.outputs {
            self.store.finish(output.partition.partition)?;
        }
        Ok(())
    }

    fn hand_over(
        &mut self,
        index: usize,
        sub: usize,
        blocker: &dyn TaskBlocker,
        cancelled: &Arc<Cancellation>,
    ) -> Result<(), ExchangeError> {
        let id = self.outputs[index].partition.partition;
        let subpartition = sub as u32;
        let bytes = self.outputs[index].buffers[sub].len();
        loop {
            match self
                .store
                .reserve(id, subpartition, bytes)
                .map_err(|error| self.failed(cancelled, error))?
            {
                Space::Available => break,
                Space::Full(room) => self.wait_for(room, blocker, cancelled)?,
            }
            if cancelled.is_cancelled() {
                return Err(ExchangeError::Cancelled);
            }
        }
        let buffer = self.outputs[index].buffers[sub].finish();
        self.store
            .append(id, subpartition, buffer)
            .map_err(|error| self.failed(cancelled, error))?;
        self.stats.buffers_out += 1;
        if cancelled.is_cancelled() {
            return Err(ExchangeError::Cancelled);
        }
        Ok(())
    }

    /// A store error, or `Cancelled` when the task was cancelled (which fails its partition).
    fn failed(&self, cancelled: &Cancellation, error: super::PartitionError) -> ExchangeError {
        if cancelled.is_cancelled() {
            ExchangeError::Cancelled
        } else {
            ExchangeError::Partition(error)
        }
    }

    /// Waits for `room` (backpressure, counted): woken when the consumer takes a buffer, the
    /// partition fails or goes (the next reserve tells which), or the task is cancelled.
    fn wait_for(
        &mut self,
        mut room: super::partition::Room,
        blocker: &dyn TaskBlocker,
        cancelled: &Arc<Cancellation>,
    ) -> Result<(), ExchangeError> {
        self.stats.backpressured_waits += 1;
        let cancellation = Arc::clone(cancelled);
        self.metrics.backpressure_began(self.clock.now_millis());
        let woken = block_on(
            blocker,
            std::future::poll_fn(move |cx| {
                if cancellation.poll_cancelled(cx) {
                    return Poll::Ready(());
                }
                Pin::new(&mut room).poll(cx).map(|_| ())
            }),
        );
        self.metrics.backpressure_ended(self.clock.now_millis());
        match woken {
            Some(()) if !cancelled.is_cancelled() => Ok(()),
            _ => Err(ExchangeError::Cancelled),
        }
    }
}
