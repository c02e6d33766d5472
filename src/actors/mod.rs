//! The actors, one per file, with their pure decision logic beside them.
//!
//! | actor | decision logic it delegates to |
//! | --- | --- |
//! | [`resource_manager::FlinkResourceManager`] | [`worker_pool::WorkerPool`] |
//! | [`job_manager::JobManager`] | [`instance_manager::InstanceManager`], [`heartbeat_monitor::HeartbeatMonitor`] |
//! | [`task_manager::TaskManager`] | [`registration::Registration`], [`slot_table::SlotTable`] |

pub mod job_manager;
pub mod mailbox_stats;
pub mod node;
pub mod resource_manager;
pub mod task_manager;

/// Stop the actor (a local control message, never sent over the wire: remote peers leave
/// through the protocol).
#[derive(Debug, Clone, Copy, actix::Message)]
#[rtype(result = "()")]
pub struct Shutdown;
