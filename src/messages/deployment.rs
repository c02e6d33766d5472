//! What the JobManager sends a TaskManager to run one task: the task deployment descriptor.
//!
//! An input gate names the partitions to read (producer attempt, edge, the producer's
//! TaskManager); an all-to-all gate lists every producer once and is shared (`Arc`) by all the
//! consumers it is built for, so deploying P consumers of P producers costs O(P) memory in one
//! process, not O(P²).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::common::{ActorAddress, ResultPartitionId};
use super::ids::{AllocationId, ExecutionAttemptId, JobId};
use crate::job::graph::DistributionPattern;

/// Everything a TaskManager needs to run one task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskDeploymentDescriptor {
    /// The job.
    pub job_id: JobId,
    /// This execution attempt.
    pub attempt: ExecutionAttemptId,
    /// 0 for the first attempt of this subtask, then 1, 2, ...
    pub attempt_number: u32,
    /// The vertex's name, for logs.
    pub vertex_name: String,
    /// The subtask index.
    pub subtask: u32,
    /// The vertex's parallelism.
    pub parallelism: u32,
    /// The operator to run.
    pub operator: String,
    /// Its configuration.
    pub config: BTreeMap<String, String>,
    /// The (shared) slot it runs in.
    pub allocation_id: AllocationId,
    /// One gate per incoming edge.
    pub inputs: Vec<InputGate>,
    /// One partition per outgoing edge.
    pub outputs: Vec<OutputPartition>,
}

/// Where one incoming edge's data comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputGate {
    /// The edge's index in the job graph.
    pub edge: u32,
    /// Which subpartition of each producer's partition is this consumer's.
    pub subpartition: u32,
    /// The producers, one per producer subtask.
    pub producers: Arc<Vec<ProducerLocation>>,
}

/// One producer's partition and the TaskManager holding it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerLocation {
    /// The partition.
    pub partition: ResultPartitionId,
    /// The TaskManager actor that serves it.
    pub task_manager: ActorAddress,
}

/// One outgoing edge's result partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputPartition {
    /// The partition this task writes.
    pub partition: ResultPartitionId,
    /// How records are routed to subpartitions.
    pub pattern: DistributionPattern,
    /// One subpartition per consumer subtask.
    pub subpartitions: u32,
    /// Kept after it is read (a blocking result, read again by a restarted consumer), or moved
    /// to its one reader (a pipelined result).
    pub retained: bool,
}
