//! Cluster events: what the actors did, in words an operator understands.
//!
//! Actors report milestones (a worker requested, started, registered, lost, released) to an
//! [`EventSink`]. Nobody has to listen: with no subscriber an event costs one failed channel send.
//! The demo prints them as a timeline; tests wait on them instead of sleeping; the REST server's
//! long poll (`GET /jobs/{id}?wait=MS`) wakes on `JobTerminated` and then asks the JobManager.
//! Events describe, they never drive: no actor reacts to an event, and a missed one only makes
//! a long poll answer at its deadline.

use std::fmt;

use tokio::sync::broadcast;

use crate::base::ids::{InstanceId, ResourceId};
use crate::messages::RemovalReason;

/// One milestone of the cluster's life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterEvent {
    /// The RM's designated pool size changed.
    PoolResized {
        /// Size before.
        from: u32,
        /// Size now.
        to: u32,
    },
    /// The RM asked its driver for a worker.
    WorkerRequested {
        /// The worker's id, chosen by the RM.
        resource_id: ResourceId,
    },
    /// The driver reports the worker running; it has yet to register.
    WorkerStarted {
        /// The worker.
        resource_id: ResourceId,
    },
    /// The driver could not start a worker.
    WorkerStartFailed {
        /// The worker.
        resource_id: ResourceId,
        /// What the driver said.
        reason: String,
        /// How long the RM waits before asking again.
        backoff_ms: u64,
    },
    /// A TaskManager registered at the JobManager.
    TaskManagerRegistered {
        /// The worker.
        resource_id: ResourceId,
        /// Its registration.
        instance_id: InstanceId,
        /// Slots it offers.
        slots: u32,
    },
    /// The RM counts the worker as started (registered at the JM).
    WorkerRegistered {
        /// The worker.
        resource_id: ResourceId,
    },
    /// The JobManager unregistered a TaskManager.
    TaskManagerLost {
        /// The worker.
        resource_id: ResourceId,
        /// Why.
        reason: RemovalReason,
    },
    /// The RM released a worker through its driver.
    WorkerReleased {
        /// The worker.
        resource_id: ResourceId,
        /// Why.
        reason: RemovalReason,
    },
    /// The RM registered at the JobManager.
    ResourceManagerConnected {
        /// Workers the JM already knew.
        known_workers: usize,
    },
    /// A job reached a final status.
    JobTerminated {
        /// The job.
        job_id: crate::base::ids::JobId,
        /// FINISHED, FAILED or CANCELED.
        status: crate::job::states::JobStatus,
    },
    /// A TaskManager finished registering (from its own side).
    TaskManagerConnected {
        /// The worker.
        resource_id: ResourceId,
        /// Its registration.
        instance_id: InstanceId,
    },
}

impl fmt::Display for ClusterEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PoolResized { from, to } => {
                write!(f, "RM  designated pool size {from} -> {to}")
            }
            Self::WorkerRequested { resource_id } => {
                write!(f, "RM  requested worker {resource_id} from the driver")
            }
            Self::WorkerStarted { resource_id } => {
                write!(
                    f,
                    "RM  worker {resource_id} started, waiting for it to register"
                )
            }
            Self::WorkerStartFailed {
                resource_id,
                reason,
                backoff_ms,
            } => write!(
                f,
                "RM  worker {resource_id} failed to start ({reason}); next try in {backoff_ms} ms"
            ),
            Self::TaskManagerRegistered {
                resource_id,
                instance_id,
                slots,
            } => write!(
                f,
                "JM  TaskManager {resource_id} registered as {instance_id:?} with {slots} slots"
            ),
            Self::WorkerRegistered { resource_id } => {
                write!(f, "RM  worker {resource_id} counts as started")
            }
            Self::TaskManagerLost {
                resource_id,
                reason,
            } => write!(f, "JM  unregistered TaskManager {resource_id}: {reason}"),
            Self::WorkerReleased {
                resource_id,
                reason,
            } => write!(f, "RM  released worker {resource_id}: {reason}"),
            Self::ResourceManagerConnected { known_workers } => write!(
                f,
                "RM  registered at the JobManager ({known_workers} TaskManagers already known)"
            ),
            Self::JobTerminated { job_id, status } => write!(f, "JM  job {job_id} is {status}"),
            Self::TaskManagerConnected {
                resource_id,
                instance_id,
            } => write!(
                f,
                "TM  {resource_id} connected to the JobManager as {instance_id:?}"
            ),
        }
    }
}

/// Where actors report [`ClusterEvent`]s. Cloning shares the channel.
#[derive(Debug, Clone, Default)]
pub struct EventSink(Option<broadcast::Sender<ClusterEvent>>);

impl EventSink {
    /// A sink whose subscribers each buffer up to `capacity` events (older ones are dropped and
    /// the subscriber told it lagged).
    pub fn new(capacity: usize) -> Self {
        Self(Some(broadcast::channel(capacity.max(1)).0))
    }

    /// A sink that drops everything.
    pub fn disabled() -> Self {
        Self(None)
    }

    /// Reports an event; a sink nobody listens to drops it.
    pub fn emit(&self, event: ClusterEvent) {
        log::debug!("event: {event}");
        if let Some(sender) = &self.0 {
            // An error only means nobody is subscribed right now.
            let _ = sender.send(event);
        }
    }

    /// A receiver of every event emitted from now on; `None` for a disabled sink.
    pub fn subscribe(&self) -> Option<broadcast::Receiver<ClusterEvent>> {
        self.0.as_ref().map(broadcast::Sender::subscribe)
    }
}
