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
    /// The operator's configuration is wrong (not retryable).
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
}

/// An operator instance, for one subtask.
pub trait Operator: Send {
    /// Runs to completion: reads all input, emits all output.
    fn run(&mut self, io: &mut dyn TaskIo) -> Result<(), OperatorError>;
}

pub mod builtin;
pub mod registry;

pub use registry::{OperatorFactory, OperatorRegistry, OperatorSpec};
