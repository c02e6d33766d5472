//! What the JobManager sends a TaskManager to run one task: the task deployment descriptor.
//!
//! An input gate names the partitions to read (producer attempt, edge, the producer's
//! TaskManager). An all-to-all gate's list of every producer is built once and shared (`Arc`) by
//! all the consumers it is built for, and it travels to each TaskManager once: the first task
//! there that reads it carries it ([`Producers::Listed`]), the others name it
//! ([`Producers::Known`]) and the TaskManager takes it from its cache (Flink's
//! `ShuffleDescriptorsCache`). Deploying P consumers of P producers thus costs O(P) bytes per
//! TaskManager on the wire and O(P) memory, not O(P²). A TaskManager that does not have a named
//! list (its cache dropped it, or the frame that carried it was lost) refuses the task with
//! [`UnknownProducers`](super::task_manager::TaskSubmissionError::UnknownProducers) and the
//! JobManager sends it again with the list.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::common::{ActorAddress, ResultPartitionId};
use crate::base::ids::{AllocationId, ExecutionAttemptId, JobId, ProducerListId};
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
    /// The vertex's name, for logs (shared by the vertex's descriptors, like the operator and
    /// its configuration: deploying P subtasks copies none of them).
    pub vertex_name: Arc<str>,
    /// The subtask index.
    pub subtask: u32,
    /// The vertex's parallelism.
    pub parallelism: u32,
    /// The operator to run.
    pub operator: Arc<str>,
    /// Its configuration.
    pub config: Arc<BTreeMap<String, String>>,
    /// The (shared) slot it runs in.
    pub allocation_id: AllocationId,
    /// One gate per incoming edge.
    pub inputs: Vec<InputGateDeploymentDescriptor>,
    /// One partition per outgoing edge.
    pub outputs: Vec<ResultPartitionDeploymentDescriptor>,
    /// The job's artifacts: the TaskManager fetches each (once) before the task starts and
    /// gives the task their local paths (shared by the job's descriptors).
    pub artifacts: Arc<[crate::job::artifact::JobArtifact]>,
}

/// Where one incoming edge's data comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputGateDeploymentDescriptor {
    /// The edge's index in the job graph.
    pub edge: u32,
    /// Which subpartition of each producer's partition is this consumer's.
    pub subpartition: u32,
    /// The producers, one per producer subtask.
    pub producers: Producers,
}

/// An input gate's producers: listed, or named by a list the TaskManager was sent before.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Producers {
    /// The list itself, under the id a TaskManager caches it by (`None`: a pointwise gate's
    /// own short list, never shared).
    Listed {
        /// The shared list's id.
        id: Option<ProducerListId>,
        /// One location per producer subtask.
        locations: Arc<Vec<ProducerLocation>>,
    },
    /// A list this TaskManager was sent with an earlier task.
    Known(ProducerListId),
}

impl Producers {
    /// A pointwise gate's list (not cached).
    pub fn own(locations: Vec<ProducerLocation>) -> Self {
        Self::Listed {
            id: None,
            locations: Arc::new(locations),
        }
    }

    /// The locations; empty for a [`Known`](Self::Known) list, which a TaskManager replaces by
    /// the list it cached before it runs the task (it refuses the task if it has none).
    pub fn locations(&self) -> &[ProducerLocation] {
        match self {
            Self::Listed { locations, .. } => locations,
            Self::Known(_) => &[],
        }
    }

    /// The id of a shared list, listed or known.
    pub fn id(&self) -> Option<ProducerListId> {
        match self {
            Self::Listed { id, .. } => *id,
            Self::Known(id) => Some(*id),
        }
    }
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
pub struct ResultPartitionDeploymentDescriptor {
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
