//! The producer side of a task: [`ResultPartitionWriter`] routes each record to its consumer's
//! subpartition, collects it into that subpartition's buffer, and hands a full buffer
//! (`taskmanager.network.buffer-size` bytes) to the [`PartitionStore`] — waiting, when a
//! pipelined subpartition is full, until its consumer takes one. That wait is backpressure: it
//! is counted per task, and it ends early when the partition fails or is released (which is how
//! a cancelled producer is woken).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use super::metrics::TaskIoMetrics;
use super::partition::{PartitionStore, Space, record_bytes};
use crate::env::{Clock, TaskBlocker, fnv1a};
use crate::job::graph::DistributionPattern;
use crate::messages::deployment::OutputPartition;
use crate::operators::{OperatorError, Record};
use crate::task_blocking::{Cancellation, block_on};

/// What a writer did, for the task's metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Records emitted (counted once per output they went to).
    pub records_out: u64,
    /// Their estimated bytes.
    pub bytes_out: u64,
    /// Buffers handed to the store.
    pub buffers_out: u64,
    /// Times the producer found a subpartition full and waited.
    pub backpressured_waits: u64,
}

/// One output's buffers: records collected per subpartition and their estimated bytes.
struct Output {
    partition: OutputPartition,
    buffers: Vec<Vec<Record>>,
    bytes: Vec<usize>,
}

/// See the module docs.
pub struct ResultPartitionWriter {
    store: Arc<PartitionStore>,
    outputs: Vec<Output>,
    buffer_size: usize,
    stats: WriterStats,
    metrics: Arc<TaskIoMetrics>,
    clock: Arc<dyn Clock>,
}

impl ResultPartitionWriter {
    /// A writer for `outputs` into `store`, cutting buffers at `buffer_size` estimated bytes,
    /// counting into `metrics` (its waits timed by `clock`).
    pub fn new(
        store: Arc<PartitionStore>,
        outputs: &[OutputPartition],
        buffer_size: usize,
        metrics: Arc<TaskIoMetrics>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let outputs = outputs
            .iter()
            .map(|&partition| Output {
                partition,
                buffers: vec![Vec::new(); partition.subpartitions as usize],
                bytes: vec![0; partition.subpartitions as usize],
            })
            .collect();
        Self {
            store,
            outputs,
            buffer_size: buffer_size.max(1),
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
    pub fn route(output: &OutputPartition, record: &Record) -> usize {
        match output.pattern {
            DistributionPattern::Forward => 0,
            DistributionPattern::AllToAll => {
                (fnv1a(record.key.as_bytes()) % u64::from(output.subpartitions.max(1))) as usize
            }
        }
    }

    /// Writes `record` to every output; a full buffer goes to the store, waiting for room.
    pub fn emit(
        &mut self,
        record: Record,
        blocker: &dyn TaskBlocker,
        cancelled: &Arc<Cancellation>,
    ) -> Result<(), OperatorError> {
        let last = self.outputs.len().saturating_sub(1);
        let mut record = Some(record);
        for index in 0..self.outputs.len() {
            // Every output but the last gets a copy; the last one the record itself.
            let record = if index == last {
                match record.take() {
                    Some(record) => record,
                    None => break,
                }
            } else {
                match &record {
                    Some(record) => record.clone(),
                    None => break,
                }
            };
            let output = &mut self.outputs[index];
            let sub = Self::route(&output.partition, &record);
            let bytes = record_bytes(&record);
            self.stats.records_out += 1;
            self.stats.bytes_out += bytes as u64;
            self.metrics.wrote(bytes as u64);
            output.buffers[sub].push(record);
            output.bytes[sub] += bytes;
            if output.bytes[sub] >= self.buffer_size {
                self.hand_over(index, sub, blocker, cancelled)?;
            }
        }
        Ok(())
    }

    /// Hands every non-empty buffer to the store (at the end of the task).
    pub fn flush(
        &mut self,
        blocker: &dyn TaskBlocker,
        cancelled: &Arc<Cancellation>,
    ) -> Result<(), OperatorError> {
        for index in 0..self.outputs.len() {
            for sub in 0..self.outputs[index].buffers.len() {
                if !self.outputs[index].buffers[sub].is_empty() {
                    self.hand_over(index, sub, blocker, cancelled)?;
                }
            }
        }
        Ok(())
    }

    /// Marks every output finished.
    pub fn finish(&self) -> Result<(), OperatorError> {
        for output in &self.outputs {
            self.store
                .finish(output.partition.partition)
                .map_err(|e| OperatorError::Failed(e.to_string()))?;
        }
        Ok(())
    }

    fn hand_over(
        &mut self,
        index: usize,
        sub: usize,
        blocker: &dyn TaskBlocker,
        cancelled: &Arc<Cancellation>,
    ) -> Result<(), OperatorError> {
        let id = self.outputs[index].partition.partition;
        let subpartition = sub as u32;
        let failed = |error: super::PartitionError| {
            if cancelled.is_cancelled() {
                OperatorError::Cancelled
            } else {
                OperatorError::Failed(error.to_string())
            }
        };
        loop {
            match self.store.reserve(id, subpartition).map_err(failed)? {
                Space::Available => break,
                Space::Full(mut room) => {
                    self.stats.backpressured_waits += 1;
                    // Woken when the consumer takes a buffer, the partition fails or goes
                    // (reserve tells which), or the task is cancelled.
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
                    if woken.is_none() {
                        return Err(OperatorError::Cancelled);
                    }
                }
            }
            if cancelled.is_cancelled() {
                return Err(OperatorError::Cancelled);
            }
        }
        let output = &mut self.outputs[index];
        let buffer = std::mem::take(&mut output.buffers[sub]);
        output.bytes[sub] = 0;
        self.store
            .append(id, subpartition, buffer)
            .map_err(failed)?;
        self.stats.buffers_out += 1;
        if cancelled.is_cancelled() {
            return Err(OperatorError::Cancelled);
        }
        Ok(())
    }
}
