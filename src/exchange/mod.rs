//! Data exchange between tasks (Flink's network stack, in Flint's terms).
//!
//! ```text
//!  producer task ─ ResultPartitionWriter ─ routes, cuts buffers ─▶ ResultPartitionManager
//!                   (waits for room: backpressure)                  (one subpartition per
//!                                                                    consumer; pipelined:
//!                                                                    bounded, never spilled)
//!  consumer task ◀─ InputGate ◀─ local channels with data: straight from the store (moved)
//!                     (credit)  ◀─ GateInbox ◀─ client::NetworkClient, one PartitionRequestClient per
//!                                  producer TaskManager shared by every task here:
//!                                  PartitionRequests (subscribe once, credit) and one
//!                                  PollPartitionData in flight ─▶ server::PartitionRequestServer
//!                                  (the subscriptions; the store pushes their keys when ready);
//!                                  one to this TaskManager itself (client::Peer::Local, direct
//!                                  calls) tells how local partitions ended, one notice each
//! ```
//!
//! Waiting for data has no time limit: a producer may stay silent as long as it runs. The
//! producer's TaskManager holds a poll at most [`server::FETCH_HOLD`] (well inside the
//! transport's ask timeout) and answers with no news, and the connection polls again.
//!
//! **Every wait in the exchange, and what ends it** (a wait that ends in a failure fails the
//! task with the reason given; every one also ends at once when the task is cancelled):
//!
//! | who waits | for | ends when |
//! | --- | --- | --- |
//! | a consumer's gate | data or the end of a running producer | the producer writes, finishes, fails or is released; its TaskManager is lost (the data connection breaks: [`client::RECONNECT_ATTEMPTS`] asks of at most [`crate::transport::ASK_TIMEOUT`] each, then the channel fails) |
//! | a consumer's gate | a partition its producer has not created yet | it is created, else after [`input_gate::PARTITION_REQUEST_TIMEOUT`] (10 s) the channel fails ("... is not on TaskManager ... (waited 10s)") |
//! | a producer's writer | room in a full pipelined subpartition (backpressure) | its consumer takes buffers, or ends early and releases the subpartition (writes there are then discarded), or the partition fails or is released |
//! | the producer's TaskManager | news for a held poll | news arrives, a newer poll comes, or after [`server::FETCH_HOLD`] (answered empty) |
//! | the producer's TaskManager | a data connection's next poll | forgotten after [`server::IDLE_CONNECTION`] without one |
//! | a held poll (not the actor: it keeps running) | its spilled buffers, read on the [`crate::env::blocking_io`] threads | the reads end (an error fails the channel with it); a disk that never answers leaves the consumer's ask to time out after [`crate::transport::ASK_TIMEOUT`] and the connection fails as above |
//!
//! A task's network memory is never waited for: a deployment that does not fit is refused at
//! once, naming `taskmanager.network.memory`.

pub mod buffer;
pub mod client;
pub mod error;
pub mod input_gate;
pub mod metrics;
pub mod partition;
pub mod server;
pub mod writer;

pub use buffer::{Buffer, BufferBuilder, BufferError, BufferReader};
pub use error::ExchangeError;
pub use partition::{Fetch, PartitionError, PartitionStats, ResultPartitionManager};

/// The unread buffers a pipelined subpartition holds before its producer waits (Flink's
/// `taskmanager.network.memory.max-buffers-per-channel`, 10): room enough that a producer and
/// its consumer rarely wait for each other buffer by buffer, bounded so a slow consumer slows
/// its producer instead of filling memory or disk.
pub const MAX_BUFFERS_PER_SUBPARTITION: u32 = 10;

/// A TaskManager's network buffer settings (`taskmanager.network.*`), validated by the
/// configuration (every value above zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetworkSettings {
    /// `taskmanager.network.buffer-size`: the bytes a producer collects for one subpartition
    /// before it hands them over as one buffer.
    pub buffer_size: usize,
    /// `taskmanager.network.buffers-per-channel`: a consumer's exclusive buffers per input
    /// channel (its credit).
    pub buffers_per_channel: u32,
    /// `taskmanager.network.floating-buffers-per-gate`: buffers a consumer lends to whichever
    /// channel has a backlog.
    pub floating_buffers_per_gate: u32,
    /// `taskmanager.network.memory`: the network buffer memory of one TaskManager; a task whose
    /// buffers do not fit next to the running ones' is refused, naming the setting.
    pub memory: u64,
}

impl Default for NetworkSettings {
    /// Flink's defaults: 32 KiB buffers, 2 per channel, 8 floating per gate; 64 MiB per
    /// TaskManager.
    fn default() -> Self {
        Self {
            buffer_size: 32 << 10,
            buffers_per_channel: 2,
            floating_buffers_per_gate: 8,
            memory: 64 << 20,
        }
    }
}

impl NetworkSettings {
    /// The network memory a task reserves, as Flink counts its required buffers: its gate's
    /// (exclusive per channel plus the floating ones) and one per pipelined subpartition plus
    /// one, each `buffer_size`. A subpartition may hold up to [`MAX_BUFFERS_PER_SUBPARTITION`]
    /// while its consumer lags: like Flink's `max-buffers-per-channel`, that is a cap, not a
    /// reservation.
    pub fn task_memory(&self, input_channels: usize, pipelined_subpartitions: usize) -> u64 {
        let per_channel = u64::from(self.buffers_per_channel);
        let buffers = (input_channels as u64)
            .saturating_mul(per_channel)
            .saturating_add(if input_channels > 0 {
                u64::from(self.floating_buffers_per_gate)
            } else {
                0
            })
            .saturating_add(if pipelined_subpartitions > 0 {
                pipelined_subpartitions as u64 + 1
            } else {
                0
            });
        buffers.saturating_mul(self.buffer_size as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_reserves_flinks_required_buffers() {
        let network = NetworkSettings::default();
        let kib32 = 32 << 10;
        // A source of 100 consumers: one buffer per subpartition plus one.
        assert_eq!(network.task_memory(0, 100), 101 * kib32);
        // A sink of 100 producers: 2 exclusive per channel plus 8 floating.
        assert_eq!(network.task_memory(100, 0), 208 * kib32);
        // All-to-all at P = 1,000 does not fit Flink's 64 MiB default, as in Flink.
        assert!(network.task_memory(1_000, 1_000) > network.memory);
        assert_eq!(network.task_memory(0, 0), 0);
    }
}
