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
use crate::env::task_blocking::{Cancellation, block_on};
use crate::exchange::buffer_pool::Floor;
use crate::exchange::client::{Grouping, NetworkClient};
use crate::exchange::input_gate::{GateEvent, GateStats, InputGate, PRODUCER_CANCELLED};
use crate::exchange::metrics::TaskIoMetrics;
use crate::exchange::partition::ResultPartitionManager;
use crate::exchange::writer::{ResultPartitionWriter, WriterStats};
use crate::exchange::{BufferReader, ExchangeError, NetworkSettings};
use crate::job::states::ExecutionState;
use crate::messages::ResultPartitionId;
use crate::messages::deployment::TaskDeploymentDescriptor;
use crate::operators::registry::OperatorSpec;
use crate::operators::{
    InputEvent, OperatorError, OperatorRegistry, Record, TaskContext, TaskInputs, TaskIo,
    TaskOutputs,
};

use crate::base::error_chain::{ErrorChain, clipped};
pub use crate::exchange::input_gate::PARTITION_REQUEST_TIMEOUT;
pub use crate::exchange::server::{FETCH_BYTES, FETCH_HOLD};

/// The longest failure reason a task reports (cut, and marked, beyond): see [`clipped`].
pub const MAX_FAILURE_REASON: usize = 16 << 10;

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
    /// What it sent back for the JobManager (a `collect()` sink's records), if anything.
    pub result: Option<Vec<u8>>,
    /// It failed in a way every attempt would (an invalid operator configuration, a record
    /// over [`crate::exchange::MAX_RECORD_BYTES`]): the JobManager fails the job instead of
    /// restarting it.
    pub unrecoverable: bool,
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
    /// The input gate's floor of network buffers, reserved when the task was accepted.
    pub gate_floor: Floor,
    /// Set (and any wait woken) by `CancelTasks`.
    pub cancelled: Arc<Cancellation>,
    /// What the task's exchange does, read by the TaskManager while it runs.
    pub metrics: Arc<TaskIoMetrics>,
    /// Wall time, for the backpressured time.
    pub clock: Arc<dyn Clock>,
    /// The TaskManager's private working directory: where the task's operators spill.
    pub working_dir: std::path::PathBuf,
    /// The task's share of managed memory (`taskmanager.memory.managed.size` / slots), bytes.
    pub managed_memory: u64,
    /// The job's artifacts, as the TaskManager's cache fetches them: the task waits for each
    /// before its operator runs.
    pub artifacts: Vec<super::blob_cache::ArtifactHandle>,
}

/// Runs the task to its end, waiting only through `blocker`. Never panics: operator panics
/// become a FAILED outcome; a blocker whose runner is gone, a CANCELED one.
pub fn run_task(env: TaskEnvironment, blocker: &dyn TaskBlocker) -> TaskOutcome {
    let outputs = env.descriptor.outputs.clone();
    let partitions = env.partitions.clone();
    let cancellation = env.cancelled.clone();
    let mut input = GateStats::default();
    let mut output = WriterStats::default();
    let mut sent = None;
    let result = catch_unwind(AssertUnwindSafe(|| {
        run(env, blocker, &mut input, &mut output, &mut sent)
    }));
    let unavailable_partition = match &result {
        Ok(Err(OperatorError::PartitionNotFound { partition, .. })) => Some(*partition),
        // A producer's side that cannot serve its result (a spill file gone behind its back)
        // has lost it: named too, and the JobManager reruns that producer if it had finished
        // (a producer that failed restarts with its region anyway).
        Ok(Err(OperatorError::Exchange(error))) => match error.downcast_ref() {
            Some(crate::exchange::ExchangeError::ProducerFailed { partition, .. }) => {
                Some(*partition)
            }
            _ => None,
        },
        _ => None,
    };
    // Every attempt would fail alike: an invalid configuration, a record too large to send.
    let unrecoverable = match &result {
        Ok(Err(OperatorError::Config { .. })) => true,
        Ok(Err(OperatorError::Exchange(error))) => matches!(
            error.downcast_ref(),
            Some(crate::exchange::ExchangeError::RecordTooLarge { .. })
        ),
        _ => false,
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
    // It travels to the JobManager, to every consumer in its partitions' end notices, and
    // into the REST views: a user's error of megabytes would not fit the transport.
    let error = error.map(|error| clipped(error, MAX_FAILURE_REASON));
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
        result: sent.filter(|_| state == ExecutionState::Finished),
        unrecoverable: unrecoverable && state == ExecutionState::Failed,
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}

/// Waits until every artifact of the job is in the TaskManager's cache (a cancellation cuts
/// the wait short): their local paths by name, or why one could not be fetched.
fn wait_for_artifacts(
    env: &TaskEnvironment,
    blocker: &dyn TaskBlocker,
) -> Result<std::collections::BTreeMap<String, std::path::PathBuf>, OperatorError> {
    use super::blob_cache::FetchState;
    let mut paths = std::collections::BTreeMap::new();
    for handle in &env.artifacts {
        let latch = handle.state.clone();
        let cancellation = Arc::clone(&env.cancelled);
        let abandoned = format!(
            "artifact `{}`: its fetch ended without a result",
            handle.name
        );
        // `None`: cancelled (or the runner is gone).
        let settled = block_on(blocker, async move {
            let mut settled = std::pin::pin!(latch.wait());
            std::future::poll_fn(|cx| {
                if cancellation.poll_cancelled(cx) {
                    return std::task::Poll::Ready(None);
                }
                // A latch abandoned unset: the fetch was dropped (the TaskManager is stopping).
                (settled.as_mut().poll(cx))
                    .map(|state| Some(state.unwrap_or(FetchState::Failed(abandoned.clone()))))
            })
            .await
        })
        .flatten();
        check_cancelled(&env.cancelled)?;
        match settled {
            None => return Err(OperatorError::Cancelled),
            Some(FetchState::Ready(path)) => {
                paths.insert(handle.name.clone(), path);
            }
            Some(FetchState::Failed(why)) => return Err(OperatorError::Failed(why)),
        }
    }
    Ok(paths)
}

/// Creates the task's output partitions; the TaskManager does it when it accepts the task, so
/// consumers deployed beside the producer find them as early as possible. A blocking one is
/// written to disk; a pipelined one holds
/// at most [`NetworkSettings::output_capacity`] unread buffers per subpartition, and no more in
/// all than its floor (split off `floor`: see [`NetworkSettings::output_floor`]) and what the
/// TaskManager's pool lends it.
pub fn create_outputs(
    partitions: &ResultPartitionManager,
    descriptor: &TaskDeploymentDescriptor,
    network: &NetworkSettings,
    floor: &mut Floor,
) -> Result<(), crate::exchange::partition::PartitionError> {
    for output in &descriptor.outputs {
        if output.retained {
            partitions.create_blocking(output.partition, output.subpartitions)?;
        } else {
            partitions.create_pipelined_within(
                output.partition,
                output.subpartitions,
                network.output_capacity(output.subpartitions),
                floor.split(network.output_floor(output.subpartitions)),
            )?;
        }
    }
    Ok(())
}

fn run(
    mut env: TaskEnvironment,
    blocker: &dyn TaskBlocker,
    input: &mut GateStats,
    output: &mut WriterStats,
    sent: &mut Option<Vec<u8>>,
) -> Result<(), OperatorError> {
    let d = &env.descriptor;
    let spec = OperatorSpec {
        name: &d.operator,
        config: &d.config,
        subtask: d.subtask,
        parallelism: d.parallelism,
    };
    let mut operator = env.registry.create(&spec)?;
    let artifacts = wait_for_artifacts(&env, blocker)?;
    let gate_floor = env.gate_floor.split(u64::MAX);
    let mut io = Io {
        inputs: Inputs {
            gate: InputGate::new(
                &d.inputs,
                &env.groupings,
                &env.data_connections,
                env.partitions.clone(),
                env.network,
                gate_floor,
                env.cancelled.clone(),
                env.metrics.clone(),
            )?,
            blocker,
            cancelled: &env.cancelled,
            reader: BufferReader::default(),
            reader_input: 0,
        },
        outputs: Outputs {
            writer: ResultPartitionWriter::new(
                env.partitions.clone(),
                &d.outputs,
                env.network.buffer_size,
                env.metrics.clone(),
                env.clock.clone(),
            ),
            blocker,
            cancelled: &env.cancelled,
        },
        env: &env,
        blocker,
        result: None,
        artifacts,
    };
    let result = operator
        .run(&mut io)
        .and_then(|()| Ok(io.outputs.writer.flush(blocker, &env.cancelled)?))
        .and_then(|()| Ok(io.outputs.writer.finish()?));
    *input = io.inputs.gate.stats();
    *output = io.outputs.writer.stats();
    *sent = io.result.take();
    result
}

/// What a task gives its operator: its inputs and outputs (apart, see [`TaskIo::split`]).
struct Io<'a> {
    env: &'a TaskEnvironment,
    blocker: &'a dyn TaskBlocker,
    inputs: Inputs<'a>,
    outputs: Outputs<'a>,
    result: Option<Vec<u8>>,
    /// The job's artifacts on this TaskManager, by name.
    artifacts: std::collections::BTreeMap<String, std::path::PathBuf>,
}

/// The task's input gate, and the buffer being read record by record for [`TaskIo::next`]:
/// its records are decoded here, on the task's thread.
struct Inputs<'a> {
    gate: InputGate,
    blocker: &'a dyn TaskBlocker,
    cancelled: &'a Arc<Cancellation>,
    reader: BufferReader,
    /// The input `reader`'s buffer came from.
    reader_input: usize,
}

/// The task's result partition writer.
struct Outputs<'a> {
    writer: ResultPartitionWriter,
    blocker: &'a dyn TaskBlocker,
    cancelled: &'a Arc<Cancellation>,
}

fn check_cancelled(cancelled: &Cancellation) -> Result<(), OperatorError> {
    if cancelled.is_cancelled() {
        Err(OperatorError::Cancelled)
    } else {
        Ok(())
    }
}

impl TaskInputs for Inputs<'_> {
    fn inputs(&self) -> usize {
        self.gate.inputs()
    }

    fn next_event(&mut self) -> Result<Option<InputEvent>, OperatorError> {
        check_cancelled(self.cancelled)?;
        self.blocker.yield_point();
        Ok(self
            .gate
            .next_event(self.blocker)?
            .map(|event| match event {
                GateEvent::Buffer { input, buffer } => InputEvent::Buffer { input, buffer },
                GateEvent::InputEnded(input) => InputEvent::Ended(input),
            }))
    }
}

impl TaskOutputs for Outputs<'_> {
    fn outputs(&self) -> usize {
        self.writer.outputs()
    }

    fn subpartitions(&self, output: usize) -> usize {
        self.writer.subpartitions(output)
    }

    fn write(
        &mut self,
        output: usize,
        subpartition: usize,
        encoded: &[u8],
    ) -> Result<(), OperatorError> {
        self.blocker.yield_point();
        Ok(self
            .writer
            .write(output, subpartition, encoded, self.blocker, self.cancelled)?)
    }

    fn is_cancelled(&self) -> bool {
        self.cancelled.is_cancelled()
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
        Ok(self.next_with_input()?.map(|(_, record)| record))
    }

    fn next_with_input(&mut self) -> Result<Option<(usize, Record)>, OperatorError> {
        let inputs = &mut self.inputs;
        inputs.blocker.yield_point();
        loop {
            let record = inputs.reader.next_record().map_err(ExchangeError::from)?;
            if let Some(record) = record {
                return Ok(Some((inputs.reader_input, record)));
            }
            check_cancelled(inputs.cancelled)?;
            match inputs.gate.next_event(inputs.blocker)? {
                Some(GateEvent::Buffer { input, buffer }) => {
                    inputs.reader = buffer.reader();
                    inputs.reader_input = input;
                }
                Some(GateEvent::InputEnded(_)) => {}
                None => return Ok(None),
            }
        }
    }

    fn emit(&mut self, record: Record) -> Result<(), OperatorError> {
        let outputs = &mut self.outputs;
        outputs.blocker.yield_point();
        if outputs.writer.is_empty() {
            return Ok(()); // a sink: nothing goes downstream
        }
        Ok(outputs
            .writer
            .emit(record, outputs.blocker, outputs.cancelled)?)
    }

    fn is_cancelled(&self) -> bool {
        self.env.cancelled.is_cancelled()
    }

    fn sleep(&mut self, duration: Duration) -> Result<(), OperatorError> {
        // In steps, so a cancellation cuts it short.
        let step = Duration::from_millis(10);
        let mut left = duration;
        while !left.is_zero() {
            check_cancelled(&self.env.cancelled)?;
            let now = left.min(step);
            if !self.blocker.sleep(now) {
                return Err(OperatorError::Cancelled);
            }
            left -= now;
        }
        check_cancelled(&self.env.cancelled)
    }

    fn sleep_ignoring_cancel(&mut self, duration: Duration) -> Result<(), OperatorError> {
        if self.blocker.sleep(duration) {
            Ok(())
        } else {
            Err(OperatorError::Cancelled)
        }
    }

    fn block_in_place(&mut self, f: &mut dyn FnMut()) {
        self.blocker.block_in_place(f);
    }

    fn split(&mut self) -> (&mut dyn TaskInputs, &mut dyn TaskOutputs) {
        (&mut self.inputs, &mut self.outputs)
    }

    fn context(&self) -> TaskContext {
        TaskContext {
            vertex: self.env.descriptor.vertex_name.to_string(),
            spill_dir: Some(self.env.working_dir.clone()),
            managed_memory: self.env.managed_memory,
            artifacts: self.artifacts.clone(),
        }
    }

    fn set_result(&mut self, result: Vec<u8>) -> Result<(), OperatorError> {
        let max = crate::messages::job_manager::MAX_TASK_RESULT_BYTES;
        if result.len() > max {
            return Err(OperatorError::Failed(format!(
                "a task's result travels in its final report: at most {max} bytes, not {}",
                result.len()
            )));
        }
        self.result = Some(result);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
