//! Data exchange between tasks: result partitions held by the producer's TaskManager, read by
//! consumers subpartition by subpartition.

pub mod partition;

pub use partition::{Fetch, PartitionError, PartitionStats, PartitionStore};
