//! Running one task off the TaskManager's thread: the operator, its inputs and its outputs.
//!
//! A task runs on a thread from the node's [`TaskRunner`](crate::env::TaskRunner), never on an
//! actor's, so a busy TaskManager still answers heartbeats. Its outputs go through a
//! [`ResultPartitionWriter`] into the TaskManager's [`ResultPartitionManager`] (forward: the one
//! subpartition; all-to-all: by the record key's hash); its inputs come through one
//! [`InputGate`] over all its channels, local or on other TaskManagers (see
//! [`crate::exchange`]). A pipelined output that its consumer does not keep up with makes the
//! task wait (backpressure); a cancellation wakes any wait. A panic in operator code is caught
//! and reported as a failed task.
//!
//! Every wait (for input, for room in an output, the pause while a producer is being deployed,
//! [`TaskIo::sleep`]) goes through the task's [`TaskBlocker`], never the thread directly, so the
//! simulation can run tasks in virtual time; a blocker whose runner is gone cancels the task.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use crate::base::clock::Clock;
use crate::env::TaskBlocker;
use crate::env::task_blocking::Cancellation;
use crate::exchange::client::{Grouping, NetworkClient};
use crate::exchange::input_gate::{GateStats, InputGate, PRODUCER_CANCELLED};
use crate::exchange::metrics::TaskIoMetrics;
use crate::exchange::partition::ResultPartitionManager;
use crate::exchange::writer::{ResultPartitionWriter, WriterStats};
use crate::exchange::{BufferReader, ExchangeError, NetworkSettings};
use crate::job::states::ExecutionState;
use crate::messages::ResultPartitionId;
use crate::messages::deployment::TaskDeploymentDescriptor;
use crate::operators::registry::OperatorSpec;
use crate::operators::{OperatorError, OperatorRegistry, Record, TaskIo};

use crate::base::error_chain::ErrorChain;
pub use crate::exchange::input_gate::PARTITION_REQUEST_TIMEOUT;
pub use crate::exchange::server::{FETCH_BYTES, FETCH_HOLD};

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskOutcome {
    /// FINISHED, CANCELED or FAILED.
    pub state: ExecutionState,
    /// Why, for a failed task.
    pub error: Option<String>,
    /// The input partition it found missing, if that is why it failed.
    pub unavailable_partition: Option<ResultPartitionId>,
    /// What its gate read.
    pub input: GateStats,
    /// What its writer wrote.
    pub output: WriterStats,
}

/// Everything a task thread needs.
pub struct TaskEnvironment {
    /// What to run.
    pub descriptor: TaskDeploymentDescriptor,
    /// Where outputs go and local inputs come from.
    pub partitions: Arc<ResultPartitionManager>,
    /// The operators this TaskManager knows.
    pub registry: OperatorRegistry,
    /// The TaskManager's data connections; one to every TaskManager holding this task's remote
    /// inputs was opened by the TaskManager actor before the task started.
    pub data_connections: NetworkClient,
    /// Each input's producers grouped by TaskManager, as the TaskManager actor grouped them to
    /// open the connections (empty: the gate groups them).
    pub groupings: Vec<Arc<Grouping>>,
    /// The network buffer settings.
    pub network: NetworkSettings,
    /// Set (and any wait woken) by `CancelTasks`.
    pub cancelled: Arc<Cancellation>,
    /// What the task's exchange does, read by the TaskManager while it runs.
    pub metrics: Arc<TaskIoMetrics>,
    /// Wall time, for the backpressured time.
    pub clock: Arc<dyn Clock>,
}

/// Runs the task to its end, waiting only through `blocker`. Never panics: operator panics
/// become a FAILED outcome; a blocker whose runner is gone, a CANCELED one.
pub fn run_task(env: TaskEnvironment, blocker: &dyn TaskBlocker) -> TaskOutcome {
    let outputs = env.descriptor.outputs.clone();
    let partitions = env.partitions.clone();
    let cancellation = env.cancelled.clone();
    let mut input = GateStats::default();
    let mut output = WriterStats::default();
    let result = catch_unwind(AssertUnwindSafe(|| {
        run(env, blocker, &mut input, &mut output)
    }));
    let unavailable_partition = match &result {
        Ok(Err(OperatorError::PartitionNotFound { partition, .. })) => Some(*partition),
        _ => None,
    };
    let (state, error) = match result {
        Ok(Ok(())) => (ExecutionState::Finished, None),
        Ok(Err(OperatorError::Cancelled)) => (ExecutionState::Canceled, None),
        // A cancelled task whose input failed because its producer was cancelled too (or any
        // error on its way out) was cancelled, not failed.
        Ok(Err(_)) if cancellation.is_cancelled() => (ExecutionState::Canceled, None),
        Ok(Err(error)) => (ExecutionState::Failed, Some(ErrorChain(&error).to_string())),
        Err(panic) => (
            ExecutionState::Failed,
            Some(format!("task panicked: {}", panic_message(panic.as_ref()))),
        ),
    };
    if state != ExecutionState::Finished {
        let reason = error
            .clone()
            .unwrap_or_else(|| PRODUCER_CANCELLED.to_owned());
        for output in &outputs {
            // A partition never created (the task failed first) has nothing to fail.
            let _ = partitions.fail(output.partition, reason.clone());
        }
    }
    TaskOutcome {
        state,
        error,
        unavailable_partition: unavailable_partition.filter(|_| state == ExecutionState::Failed),
        input,
        output,
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

/// Creates the task's output partitions; the TaskManager does it when it accepts the task, so
/// consumers deployed beside the producer find them as early as possible. A blocking one is
/// written to disk; a pipelined one holds
/// at most [`MAX_BUFFERS_PER_SUBPARTITION`](crate::exchange::MAX_BUFFERS_PER_SUBPARTITION)
/// unread buffers per subpartition.
pub fn create_outputs(
    partitions: &ResultPartitionManager,
    descriptor: &TaskDeploymentDescriptor,
) -> Result<(), crate::exchange::partition::PartitionError> {
    for output in &descriptor.outputs {
        if output.retained {
            partitions.create_blocking(output.partition, output.subpartitions)?;
        } else {
            partitions.create_pipelined(
                output.partition,
                output.subpartitions,
                crate::exchange::MAX_BUFFERS_PER_SUBPARTITION as usize,
            )?;
        }
    }
    Ok(())
}

fn run(
    env: TaskEnvironment,
    blocker: &dyn TaskBlocker,
    input: &mut GateStats,
    output: &mut WriterStats,
) -> Result<(), OperatorError> {
    let d = &env.descriptor;
    let spec = OperatorSpec {
        name: &d.operator,
        config: &d.config,
        subtask: d.subtask,
        parallelism: d.parallelism,
    };
    let mut operator = env.registry.create(&spec)?;
    let mut io = Io {
        gate: InputGate::new(
            &d.inputs,
            &env.groupings,
            &env.data_connections,
            env.partitions.clone(),
            env.network,
            env.cancelled.clone(),
            env.metrics.clone(),
        )?,
        writer: ResultPartitionWriter::new(
            env.partitions.clone(),
            &d.outputs,
            env.network.buffer_size,
            env.metrics.clone(),
            env.clock.clone(),
        ),
        env: &env,
        blocker,
        reader: BufferReader::default(),
    };
    let result = operator
        .run(&mut io)
        .and_then(|()| Ok(io.writer.flush(blocker, &env.cancelled)?))
        .and_then(|()| Ok(io.writer.finish()?));
    *input = io.gate.stats();
    *output = io.writer.stats();
    result
}

struct Io<'a> {
    env: &'a TaskEnvironment,
    blocker: &'a dyn TaskBlocker,
    gate: InputGate,
    writer: ResultPartitionWriter,
    /// The buffer being read: its records are decoded here, on the task's thread, one by one.
    reader: BufferReader,
}

impl Io<'_> {
    fn check_cancelled(&self) -> Result<(), OperatorError> {
        if self.env.cancelled.is_cancelled() {
            Err(OperatorError::Cancelled)
        } else {
            Ok(())
        }
    }
}

impl TaskIo for Io<'_> {
    fn subtask(&self) -> u32 {
        self.env.descriptor.subtask
    }

    fn parallelism(&self) -> u32 {
        self.env.descriptor.parallelism
    }

    fn attempt_number(&self) -> u32 {
        self.env.descriptor.attempt_number
    }

    fn next(&mut self) -> Result<Option<Record>, OperatorError> {
        loop {
            let record = self.reader.next_record().map_err(ExchangeError::from)?;
            if record.is_some() {
                return Ok(record);
            }
            self.check_cancelled()?;
            match self.gate.next_buffer(self.blocker)? {
                Some(buffer) => self.reader = buffer.reader(),
                None => return Ok(None),
            }
        }
    }

    fn emit(&mut self, record: Record) -> Result<(), OperatorError> {
        if self.writer.is_empty() {
            return Ok(()); // a sink: nothing goes downstream
        }
        Ok(self
            .writer
            .emit(record, self.blocker, &self.env.cancelled)?)
    }

    fn is_cancelled(&self) -> bool {
        self.env.cancelled.is_cancelled()
    }

    fn sleep(&mut self, duration: Duration) -> Result<(), OperatorError> {
        // In steps, so a cancellation cuts it short.
        let step = Duration::from_millis(10);
        let mut left = duration;
        while !left.is_zero() {
            self.check_cancelled()?;
            let now = left.min(step);
            if !self.blocker.sleep(now) {
                return Err(OperatorError::Cancelled);
            }
            left -= now;
        }
        self.check_cancelled()
    }

    fn sleep_ignoring_cancel(&mut self, duration: Duration) -> Result<(), OperatorError> {
        if self.blocker.sleep(duration) {
            Ok(())
        } else {
            Err(OperatorError::Cancelled)
        }
    }
}

#[cfg(test)]
mod tests;
