//! Operators: the code tasks run, looked up by name in an [`OperatorRegistry`].
//!
//! An operator is created once per subtask by its factory from the vertex's configuration, then
//! run on a task thread (never an actor's) with a [`TaskIo`]: records in from every input, records
//! out to the task's result partition. Records are small and self-describing ([`Record`]) so they
//! can cross the network; an all-to-all edge routes a record by its key.

use serde::{Deserialize, Serialize};

/// One record: a key (used to route records over all-to-all edges; empty if unused) and a value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Record {
    /// Routes the record over an all-to-all edge.
    pub key: String,
    /// The payload.
    pub value: Value,
}

/// A record's payload.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Value {
    /// Nothing.
    Unit,
    /// A number.
    Int(i64),
    /// Text.
    Text(String),
}

/// Why an operator stopped early.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// The task was cancelled; not a failure.
    #[error("cancelled")]
    Cancelled,
    /// The operator's configuration is wrong: every attempt would fail alike, so the job
    /// fails at once instead of restarting (the task reports it `unrecoverable`).
    #[error("invalid configuration for operator `{operator}`: {message}")]
    Config {
        /// The operator.
        operator: String,
        /// What is wrong.
        message: String,
    },
    /// Reading or writing a file failed.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The operator failed on purpose or on bad data.
    #[error("{0}")]
    Failed(String),
    /// An input could not be read (its producer is gone).
    #[error("input unavailable: {0}")]
    InputUnavailable(String),
    /// The task's data exchange failed (an input or an output), with the exchange's error and
    /// its chain.
    #[error(transparent)]
    Exchange(Box<dyn std::error::Error + Send + Sync>),
    /// An operator's own machinery failed (spilling, a file format), with the error's chain.
    #[error("{context}")]
    Operator {
        /// What the operator was doing, naming it.
        context: String,
        /// The error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A result partition this task reads does not exist (any more) where its producer ran:
    /// released, lost with its TaskManager's state, or its TaskManager is gone. Flink's
    /// `PartitionNotFoundException`: the JobManager reruns the producer's region with ours.
    #[error("input unavailable: {message}")]
    PartitionNotFound {
        /// The missing partition.
        partition: crate::messages::ResultPartitionId,
        /// Where it was looked for and what was found.
        message: String,
    },
}

/// What a running task gives its operator.
///
/// Built-in operators read and write [`Record`]s with [`next`](Self::next) and
/// [`emit`](Self::emit). Operators of typed programs (`crate::api`) work a level lower, on the
/// exchange's buffers, through [`split`](Self::split): they decode their inputs' records as
/// the types their producers wrote and route their own outputs.
pub trait TaskIo {
    /// This subtask's index, from 0.
    fn subtask(&self) -> u32;
    /// How many subtasks the vertex has.
    fn parallelism(&self) -> u32;
    /// 0 for the first execution attempt of this subtask, then 1, 2, ... after restarts.
    fn attempt_number(&self) -> u32;
    /// The next input record (from any input), or `None` when every input has finished.
    /// Returns `Err(Cancelled)` once the task is cancelled.
    fn next(&mut self) -> Result<Option<Record>, OperatorError>;
    /// [`next`](Self::next) with the input (incoming edge, in the job graph's order) the record
    /// came from, for operators that tell their inputs apart (a join). The default says 0.
    fn next_with_input(&mut self) -> Result<Option<(usize, Record)>, OperatorError> {
        Ok(self.next()?.map(|record| (0, record)))
    }
    /// Sends a record downstream.
    fn emit(&mut self, record: Record) -> Result<(), OperatorError>;
    /// Whether the task has been cancelled (long-running operators check it).
    fn is_cancelled(&self) -> bool;
    /// Waits `duration` (cut short with `Err(Cancelled)` by a cancellation). Operators use this
    /// instead of `std::thread::sleep` so a simulation can run it in virtual time.
    fn sleep(&mut self, duration: std::time::Duration) -> Result<(), OperatorError>;
    /// Waits `duration` without looking at the task's cancellation: how a task stuck in a call
    /// that cannot see it (a blocking read, a long native call) behaves. The `ignore-cancel`
    /// operator uses it to test the TaskManager's cancellation watchdog
    /// (`task.cancellation.*`). `Err(Cancelled)` only once the task's runner is gone (its node
    /// crashed). The default waits cancellably, as [`sleep`](Self::sleep).
    fn sleep_ignoring_cancel(
        &mut self,
        duration: std::time::Duration,
    ) -> Result<(), OperatorError> {
        self.sleep(duration)
    }
    /// Runs `f`, which blocks outside the task's waits (on a condition variable, a pipe, a
    /// blocking call), without counting as computing: the task's
    /// [compute permit](crate::env::compute_permits) goes to another task meanwhile. Plain
    /// waits need none of this: [`next`](Self::next), [`emit`](Self::emit) and
    /// [`sleep`](Self::sleep) give the permit back while they wait.
    fn block_in_place(&mut self, f: &mut dyn FnMut()) {
        f();
    }
    /// The task's inputs and outputs apart, so an operator can read one while it writes the
    /// other (a chain pushes what it reads straight through to its outputs).
    fn split(&mut self) -> (&mut dyn TaskInputs, &mut dyn TaskOutputs) {
        unsupported_split()
    }
    /// What the task knows about itself beyond its index: its vertex, its private directory
    /// for spill files, its share of managed memory.
    fn context(&self) -> TaskContext {
        TaskContext::default()
    }
    /// Hands the task's result to the JobManager with its final state (what `collect()` sends
    /// back to the client). A task has at most one; a later one replaces it. At most
    /// `MAX_TASK_RESULT_BYTES` (8 MiB): the final report is one message.
    fn set_result(&mut self, _result: Vec<u8>) -> Result<(), OperatorError> {
        Err(OperatorError::Failed(
            "this task cannot send a result to the JobManager".into(),
        ))
    }
}

#[track_caller]
fn unsupported_split() -> ! {
    panic!("this TaskIo offers no buffer-level access (split)")
}

/// A task's inputs, buffer by buffer.
pub trait TaskInputs {
    /// How many inputs (incoming edges) the task reads, in its descriptor's order.
    fn inputs(&self) -> usize;
    /// The next buffer of whichever input has one, or the end of an input (after its last
    /// buffer); `None` once every input has ended. Waits as long as it takes.
    fn next_event(&mut self) -> Result<Option<InputEvent>, OperatorError>;
}

/// A task's outputs, written record by record in their encoded form.
pub trait TaskOutputs {
    /// How many outputs (outgoing edges) the task writes, in its descriptor's order.
    fn outputs(&self) -> usize;
    /// How many subpartitions (consumer subtasks) output `output` has.
    fn subpartitions(&self, output: usize) -> usize;
    /// Appends one encoded record to subpartition `subpartition` of output `output`, waiting
    /// for room if its consumer is behind (backpressure).
    fn write(
        &mut self,
        output: usize,
        subpartition: usize,
        encoded: &[u8],
    ) -> Result<(), OperatorError>;
    /// Whether the task has been cancelled.
    fn is_cancelled(&self) -> bool;
}

/// One step of a task's input, as [`TaskInputs::next_event`] gives it.
#[derive(Debug)]
pub enum InputEvent {
    /// A buffer of input `input`: records serialized back to back, decoded by the operator.
    Buffer {
        /// Which input (incoming edge).
        input: usize,
        /// Its records.
        buffer: crate::messages::buffer::Buffer,
    },
    /// Input `input` has ended: no buffer of it follows.
    Ended(usize),
}

/// What a task knows about itself, for operators that spill or name themselves in errors.
#[derive(Debug, Clone, Default)]
pub struct TaskContext {
    /// The vertex's name.
    pub vertex: String,
    /// A directory private to this task attempt (0700, created when first used, removed with
    /// the task): where sorts, groupings and joins spill. `None` when the task has none.
    pub spill_dir: Option<std::path::PathBuf>,
    /// This task's share of its TaskManager's managed memory
    /// (`taskmanager.memory.managed.size` / slots), in bytes: what its sorts, groupings and
    /// join build sides hold before they spill.
    pub managed_memory: u64,
    /// The job's artifacts on this TaskManager: name (as the job graph lists it) -> a local
    /// file in the TaskManager's blob cache, fetched and digest-checked before the task
    /// started. Read-only; executable only when the job said so.
    pub artifacts: std::collections::BTreeMap<String, std::path::PathBuf>,
}

/// An operator instance, for one subtask.
pub trait Operator: Send {
    /// Runs to completion: reads all input, emits all output.
    fn run(&mut self, io: &mut dyn TaskIo) -> Result<(), OperatorError>;
}

impl From<crate::env::files::FilesError> for OperatorError {
    fn from(error: crate::env::files::FilesError) -> Self {
        OperatorError::Failed(error.to_string())
    }
}

pub mod builtin;
pub mod memory;
pub mod parquet;
pub mod process;
pub mod registry;
pub(crate) mod text_split;
pub mod types;

pub use registry::{OperatorFactory, OperatorRegistry, OperatorSpec};
