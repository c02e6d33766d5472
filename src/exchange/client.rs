//! [`PartitionRequestClient`]: a consumer task's connection to one producer TaskManager (Flink's
//! `PartitionRequestClient`). All of the task's channels on that TaskManager share it: one
//! [`FetchSubpartitions`] in flight at a time carries every channel that has credit, so a
//! silent, empty or finished channel costs nothing extra per round, and the transport's one
//! connection per pair of nodes carries them all.

use crate::messages::ActorAddress;
use crate::messages::task_manager::{FetchSubpartitions, SubpartitionRead, TaskManagerGateway};

/// Asks in a row to a producer's TaskManager that may fail (each one re-dials the peer with the
/// transport's own bounded backoff) before its data connection counts as broken for good.
pub const RECONNECT_ATTEMPTS: u32 = 3;

/// See the module docs.
pub struct PartitionRequestClient {
    /// The producer TaskManager.
    pub address: ActorAddress,
    gateway: TaskManagerGateway,
    /// The gate's indices of the channels read through it.
    pub channels: Vec<usize>,
    /// Whether a request is in flight.
    pub in_flight: bool,
    /// Requests that failed in a row.
    pub failures: u32,
}

impl PartitionRequestClient {
    /// A client of the TaskManager at `address`.
    pub fn new(address: ActorAddress, gateway: TaskManagerGateway) -> Self {
        Self {
            address,
            gateway,
            channels: Vec::new(),
            in_flight: false,
            failures: 0,
        }
    }

    /// Sends `reads` (for the gate's channels `channels`); the answer comes through the
    /// returned future, which owns everything it needs.
    pub fn request(
        &mut self,
        reads: Vec<SubpartitionRead>,
    ) -> impl Future<
        Output = Result<crate::messages::task_manager::FetchResponse, actix::MailboxError>,
    > + Send
    + 'static {
        self.in_flight = true;
        self.gateway
            .fetch_subpartitions
            .send(FetchSubpartitions { reads })
    }
}
