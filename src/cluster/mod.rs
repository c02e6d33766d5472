//! Whole clusters: the embedded [`minicluster::MiniCluster`] (a JobManager, its resource manager
//! and in-process TaskManagers in one process) and the JobManager process's HA
//! [`leader_loop`] (contend for leadership, run a JobManager node while leading, recover the
//! stored jobs, step down when the leadership is lost).

pub mod embedded;
pub mod leader_loop;
pub mod minicluster;
