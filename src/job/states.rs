//! (placeholder until the states module lands: the two enums only)

use serde::{Deserialize, Serialize};

/// Flink's execution states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ExecutionState {
    /// .
    Created,
    /// .
    Scheduled,
    /// .
    Deploying,
    /// .
    Running,
    /// .
    Finished,
    /// .
    Canceling,
    /// .
    Canceled,
    /// .
    Failed,
}

/// Flink's job states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum JobStatus {
    /// .
    Created,
    /// .
    Running,
    /// .
    Failing,
    /// .
    Failed,
    /// .
    Cancelling,
    /// .
    Canceled,
    /// .
    Finished,
    /// .
    Restarting,
}
