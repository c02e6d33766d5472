//! Clusters: the embedded mini-cluster and the JobManager process's leader loop.

pub mod leader_loop;
pub mod minicluster;
