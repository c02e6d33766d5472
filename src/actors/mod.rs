//! The actors, one folder each, with their pure decision logic beside them (testable without a
//! running system) and `node`, which starts them the one way every kind of node does.
//!
//! | actor | its parts |
//! | --- | --- |
//! | [`resource_manager::FlinkResourceManager`] | [`resource_manager::worker_pool::WorkerPool`] (pool arithmetic), the [`resource_manager::driver::WorkerDriver`] it asks for workers, its connection to the leader |
//! | [`job_manager::JobManager`] | [`job_manager::instance_manager::InstanceManager`], [`job_manager::heartbeat_monitor::HeartbeatMonitor`], the slot [`job_manager::scheduler::Scheduler`] and its strategies, one [`job_manager::execution_graph::ExecutionGraph`] per job |
//! | [`task_manager::TaskManager`] | [`task_manager::registration::Registration`], [`task_manager::slot_table::SlotTable`], its connection to the leader, [`task_manager::task_runtime`] (one task off the actor's thread) |

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
