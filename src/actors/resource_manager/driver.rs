//! What the resource manager asks of whoever starts its workers: Flink's
//! `ResourceManagerDriver`, as a trait the resource manager holds. The implementations (in
//! process, local processes, commands, standalone) live in [`crate::drivers`], above the actors,
//! with the factory that picks one from the configuration.
//!
//! Drivers are called from inside the resource manager actor and must not block: a start is
//! requested synchronously, and its outcome comes back later as `WorkerStarted` /
//! `WorkerFailed` / `WorkerTerminated` through the resource manager's gateway, and a driver
//! that finds workers a previous leader started reports them as `WorkersRecovered`. The trait never
//! mentions an in-process actor, so process and remote drivers fit it too.

use std::collections::BTreeMap;

use crate::base::ids::{LeaderSessionId, ResourceId};
use crate::messages::ActorAddress;
use crate::messages::resource_manager::ResourceManagerGateway;

/// One worker to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerRequest {
    /// The id the worker registers with (chosen by the resource manager).
    pub resource_id: ResourceId,
    /// The JobManager leader it registers at.
    pub job_manager: ActorAddress,
    /// That leader's session, when known.
    pub leader_session_id: Option<LeaderSessionId>,
}

/// Why a driver could not even try to start a worker.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// This driver never starts workers (standalone). Not retryable.
    #[error("the {driver} driver does not start workers; start TaskManagers yourself")]
    CannotStartWorkers {
        /// The driver's name.
        driver: &'static str,
    },
    /// Starting failed at once (a spawn error). Retryable after a backoff.
    #[error("cannot start worker {resource_id}")]
    Spawn {
        /// The worker.
        resource_id: ResourceId,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
}

/// Starts and stops workers for the resource manager.
pub trait WorkerDriver: Send {
    /// The driver's name in status reports (`in_process`, `standalone`, ...).
    fn name(&self) -> &'static str;

    /// Called once when the resource manager starts, with the gateway to report events to.
    fn initialize(&mut self, resource_manager: ResourceManagerGateway);

    /// Whether [`request_worker`](Self::request_worker) can start anything. A driver that
    /// cannot also never releases workers: it does not own them.
    fn can_start_workers(&self) -> bool;

    /// Whether a TaskManager this driver did not start counts as a started worker when it
    /// registers (standalone: every TaskManager does; managed drivers: only their own).
    fn adopts_unknown_workers(&self) -> bool;

    /// Whether the driver reports, once, the workers a previous leader started that still run
    /// (`WorkersRecovered`, maybe empty): the resource manager starts no worker before that
    /// report (or the registration timeout), as Flink's active resource manager waits for
    /// `onPreviousAttemptWorkersRecovered`.
    fn recovers_workers(&self) -> bool {
        false
    }

    /// Whether a request may wait in an external queue for as long as that queue decides (a
    /// Slurm job PENDING for resources): the registration timeout then runs from
    /// `WorkerStarted`, not from the request, so a queued request is not cancelled and asked
    /// again behind everyone else.
    fn requests_queue(&self) -> bool {
        false
    }

    /// Starts a worker. `Ok` means the start is under way: `WorkerStarted` or `WorkerFailed`
    /// follows.
    fn request_worker(&mut self, request: WorkerRequest) -> Result<(), DriverError>;

    /// Stops a worker (cancels it, if still starting). Unknown ids are ignored. No
    /// `WorkerTerminated` follows a release.
    fn release_worker(&mut self, resource_id: &ResourceId);

    /// Stops every worker and waits until they are gone.
    fn shutdown(&mut self);

    /// A new JobManager leader: tell the workers this driver runs, if it can reach them (leader
    /// retrieval for drivers whose workers cannot watch a leader election themselves).
    fn leader_changed(&mut self, _job_manager: &ActorAddress, _leader_session_id: LeaderSessionId) {
    }

    /// What the driver knows of each of its workers beyond the pool's state (a Slurm job id and
    /// state), for `flint pool-size`. Empty by default.
    fn describe_workers(&self) -> BTreeMap<ResourceId, String> {
        BTreeMap::new()
    }
}
