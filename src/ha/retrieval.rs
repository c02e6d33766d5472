//! Leader retrieval, in the shape of Flink's `LeaderRetrievalService`: whoever needs the
//! JobManager (a TaskManager, a client) is told the current leader and every change of it.

use std::future::Future;

use super::{HaError, LeaderInformation};

/// See the module docs.
pub trait LeaderRetrievalService {
    /// The next leader after the one last returned: at once on the first call if a leader is
    /// published, else when one is. `Ok(None)` means the leader went away (none published). An
    /// error means the coordination service failed; calling again starts over with a fresh
    /// session.
    fn next_leader(&mut self) -> impl Future<Output = Result<Option<LeaderInformation>, HaError>>;
}
