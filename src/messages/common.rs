//! Types shared by several actors' protocols.

use std::fmt;

use actix::Message;
use serde::{Deserialize, Serialize};

use crate::base::ids::{LeaderSessionId, ResourceId};

pub use crate::base::address::ActorAddress;

/// Where a TaskManager runs and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskManagerLocation {
    /// The worker.
    pub resource_id: ResourceId,
    /// Its TaskManager actor.
    pub address: ActorAddress,
    /// The host it runs on (for locality).
    pub hostname: String,
}

/// What a TaskManager's machine offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HardwareDescription {
    /// CPU cores visible to the TaskManager.
    pub cpu_cores: u32,
    /// Physical memory of the machine, in bytes (0 if unknown).
    pub physical_memory_bytes: u64,
}

/// A receipt: the message arrived. What it changed is the receiver's business.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Acknowledge;

/// Why a worker left the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum RemovalReason {
    /// The JobManager heard nothing from it within the heartbeat timeout.
    HeartbeatTimeout,
    /// The pool shrank and the worker was idle.
    Idle,
    /// The driver saw it end (a process exit).
    Terminated,
    /// A message to it could not be delivered: it is gone.
    Unreachable,
    /// It announced that it is stopping.
    Left,
    /// It was started but never registered within the registration timeout.
    RegistrationTimeout,
    /// The pool shrank before it registered.
    NoLongerNeeded,
    /// A newer instance with the same resource id registered.
    Replaced,
    /// The cluster is stopping.
    ClusterStopped,
}

impl fmt::Display for RemovalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::HeartbeatTimeout => "heartbeat timed out",
            Self::Idle => "idle while the pool shrinks",
            Self::Terminated => "worker terminated",
            Self::Unreachable => "unreachable",
            Self::Left => "left the cluster",
            Self::RegistrationTimeout => "never registered within the registration timeout",
            Self::NoLongerNeeded => "no longer needed after the pool shrank",
            Self::Replaced => "replaced by a newer instance",
            Self::ClusterStopped => "cluster stopping",
        })
    }
}

/// Leader retrieval: a (new) JobManager leader is at `address` with session `leader_session_id`.
/// The resource manager and the TaskManagers forget the old leader and register at this one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Message)]
#[rtype(result = "()")]
pub struct NewLeaderAvailable {
    /// The new leader's JobManager actor.
    pub address: ActorAddress,
    /// Its fencing token.
    pub leader_session_id: LeaderSessionId,
}

/// Checks a fenced message's session against the leader the receiver knows. A stale message is
/// logged with `what` and must then be dropped by the caller.
pub fn is_current_leader(
    current: Option<LeaderSessionId>,
    received: LeaderSessionId,
    receiver: &str,
    what: &str,
) -> bool {
    match current {
        Some(current) if current == received => true,
        Some(current) => {
            log::warn!(
                "{receiver}: dropped {what} from stale leader session {received} (current leader session is {current})"
            );
            false
        }
        None => {
            log::warn!(
                "{receiver}: dropped {what} from leader session {received}: no leader is known"
            );
            false
        }
    }
}

/// One result partition: the output of one execution attempt of a producer subtask over one of
/// its vertex's outgoing edges. It has one subpartition per consumer subtask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ResultPartitionId {
    /// The producing execution attempt.
    pub producer: crate::base::ids::ExecutionAttemptId,
    /// The index of the edge in the job graph.
    pub edge: u32,
}

/// What a TaskManager's result partitions spilled, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpillUsage {
    /// On disk now.
    pub live: u64,
    /// The most on disk at once since the TaskManager started.
    pub peak: u64,
    /// Written since it started.
    pub total: u64,
}

/// A TaskManager's network buffer pool, in buffers (see `exchange::buffer_pool`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkBufferUsage {
    /// Buffers in all (`taskmanager.network.memory` / `buffer-size`).
    pub total: u64,
    /// Of them, the part floors come from.
    pub floor_limit: u64,
    /// Buffers reserved as floors now.
    pub reserved: u64,
    /// Buffers lent beyond floors now.
    pub lent: u64,
    /// The most lent at once.
    pub peak_lent: u64,
}

impl fmt::Display for ResultPartitionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.producer, self.edge)
    }
}

/// What a task's exchange did so far, with its backpressure rate: reported in heartbeats and
/// shown per subtask (sampled from the exchange's `TaskIoMetrics`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskIoSnapshot {
    /// Records read from its inputs.
    pub records_in: u64,
    /// Their serialized bytes.
    pub bytes_in: u64,
    /// Records written to its outputs (once per output).
    pub records_out: u64,
    /// Their serialized bytes.
    pub bytes_out: u64,
    /// Input buffers received and not yet consumed.
    pub buffers_in_use: u64,
    /// Milliseconds it waited for room in a full output, in all.
    pub backpressured_ms: u64,
    /// Of the last sampling interval, the milliseconds per second it was backpressured (Flink's
    /// `backPressuredTimeMsPerSecond`, 0 to 1000).
    pub back_pressured_time_ms_per_second: u64,
}
