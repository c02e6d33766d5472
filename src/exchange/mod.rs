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
//! | a producer's writer | room in a full pipelined subpartition (backpressure) | its consumer takes buffers, or ends early and releases the subpartition (writes there are then discarded; the JobManager sends the same release when the task reports FINISHED early, in case the consumer's own was lost with its TaskManager, and repeats it every 5 s while the producer runs, in case its own was lost), or its consumer's data connection is forgotten after [`server::IDLE_CONNECTION`] (its TaskManager died: what it read counts as released), or the partition fails or is released |
//! | the producer's TaskManager | news for a held poll | news arrives, a newer poll comes, or after [`server::FETCH_HOLD`] (answered empty) |
//! | the producer's TaskManager | a data connection's next poll | forgotten after [`server::IDLE_CONNECTION`] without one |
//! | a poll whose consumer lost the last answer | that answer's buffers, still being taken by the poll that made it | they are taken (the answer is sent again as it was), a newer poll comes, or after [`server::FETCH_HOLD`] (answered empty; the consumer polls again) |
//! | a held poll (not the actor: it keeps running) | its spilled buffers, read on the [`crate::env::blocking_io`] threads, by it or ahead of it by the answer before (`server::read_ahead`) | the reads end (an error fails the channel with it; a read ahead that fails or panics is read again by the poll); a disk that never answers leaves the consumer's ask to time out after [`crate::transport::ASK_TIMEOUT`] and the connection fails as above |
//!
//! | a producer's writer | a network buffer, when its output's floor and the TaskManager's lent buffers are all in use ([`buffer_pool`]) | a consumer takes a buffer of its output, or any lent buffer of the TaskManager comes back |
//!
//! A task's floor of network buffers is never waited for: a deployment whose floor does not
//! fit is refused at once, naming `taskmanager.network.memory`.

pub mod buffer;
pub mod buffer_pool;
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

/// The largest record (encoded) a task may write: a record larger than a network buffer
/// travels as a buffer of its own, and every buffer must fit one message between TaskManagers
/// with a full answer's other data, notices and channel entries beside it
/// ([`server::FETCH_BYTES`], [`server::NOTICE_BYTES`], [`server::CHANNEL_BYTES`], the
/// transport's 16 MiB frame). A larger one fails its task at
/// once, naming both sizes ([`ExchangeError::RecordTooLarge`]), instead of breaking the data
/// connection that would carry it. `taskmanager.network.buffer-size` is bounded by it too.
pub const MAX_RECORD_BYTES: usize = 8 << 20;

/// The unread buffers a pipelined subpartition holds before its producer waits (Flink's
/// `taskmanager.network.memory.max-buffers-per-channel`, 10), unless its partition's
/// [`output_window`](NetworkSettings::output_window) gives it more: room enough that a producer
/// and its consumer rarely wait for each other buffer by buffer, bounded so a slow consumer
/// slows its producer instead of filling memory or disk.
pub const MAX_BUFFERS_PER_SUBPARTITION: u32 = 10;

/// A TaskManager's network buffer settings (`taskmanager.network.*`), validated by the
/// configuration (every value above zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetworkSettings {
    /// `taskmanager.network.buffer-size`: the bytes a producer collects for one subpartition
    /// before it hands them over as one buffer.
    pub buffer_size: usize,
    /// `taskmanager.network.buffers-per-channel`: a consumer's exclusive buffers per input
    /// channel (its credit), when its gate can have them (see [`buffer_pool`]).
    pub buffers_per_channel: u32,
    /// `taskmanager.network.floating-buffers-per-gate`: buffers a consumer lends to whichever
    /// channel has a backlog.
    pub floating_buffers_per_gate: u32,
    /// `taskmanager.network.gate-window`: the bytes a gate of few channels may have in flight
    /// in all, exclusive and floating, when the lent quarter has room (see
    /// [`Self::wide_floating`]).
    pub gate_window: u64,
    /// `taskmanager.network.output-window`: the unread bytes a pipelined partition of few
    /// subpartitions may hold in all before its producer waits (see
    /// [`Self::output_capacity`]).
    pub output_window: u64,
    /// `taskmanager.network.required-buffers-per-gate`: the most buffers a task's input gate
    /// reserves (its floor; Flink's `read-buffer.required-per-gate.max`).
    pub required_per_gate: u32,
    /// `taskmanager.network.required-buffers-per-output`: the most buffers a pipelined output
    /// reserves.
    pub required_per_output: u32,
    /// `taskmanager.network.memory`: the network buffer memory of one TaskManager, a hard cap
    /// ([`buffer_pool::NetworkBufferPool`]).
    pub memory: u64,
    /// About the most bytes of requests one round to a producer carries
    /// ([`client::ROUND_BYTES`]). Not a configuration key: the simulation shrinks it (and
    /// [`Self::notice_bytes`]) so that its few-kilobyte jobs are cut into many rounds and
    /// answers, as P = 10,000 jobs are with the real bounds.
    pub round_bytes: usize,
    /// About the most bytes of notices one answer carries ([`server::NOTICE_BYTES`]).
    pub notice_bytes: usize,
}

impl Default for NetworkSettings {
    /// Flink's 32 KiB buffers, 2 per channel and 8 floating per gate (a gate of few channels:
    /// up to a 4 MiB window while the lent quarter has room; a pipelined partition of few
    /// subpartitions: 4 MiB unread); floors of at most 2
    /// buffers per gate and per pipelined output, so that a TaskManager of 2,500 slots running
    /// a producer and a consumer in each fits; 512 MiB per TaskManager (Flink's default is a
    /// tenth of the process, at most 1 GiB).
    fn default() -> Self {
        Self {
            buffer_size: 32 << 10,
            buffers_per_channel: 2,
            floating_buffers_per_gate: 8,
            gate_window: 4 << 20,
            output_window: 4 << 20,
            required_per_gate: 2,
            required_per_output: 2,
            memory: 512 << 20,
            round_bytes: client::ROUND_BYTES,
            notice_bytes: server::NOTICE_BYTES,
        }
    }
}

impl NetworkSettings {
    /// The buffers a gate of `channels` would use with every channel's exclusive credit:
    /// Flink's required buffers before FLIP-266 capped them.
    pub fn gate_need(&self, channels: usize) -> u64 {
        if channels == 0 {
            return 0;
        }
        self.exclusive_buffers(channels)
            .saturating_add(u64::from(self.floating_buffers_per_gate))
    }

    /// The exclusive buffers of a gate of `channels` channels: `buffers-per-channel` each.
    pub fn exclusive_buffers(&self, channels: usize) -> u64 {
        (channels as u64).saturating_mul(u64::from(self.buffers_per_channel))
    }

    /// The floating buffers a gate of `channels` channels has when it gets its
    /// [`gate_window`](Self::gate_window): what the window holds beyond the channels'
    /// exclusive buffers, never fewer than `floating-buffers-per-gate`. Across processes a
    /// channel reads about one window per round trip of its data connection, so a gate of
    /// few channels that each carry gigabytes (a batch job's consumer) needs a wider one than
    /// the ten buffers of Flink's defaults to keep its connection busy.
    pub fn wide_floating(&self, channels: usize) -> u32 {
        let window = self.gate_window / (self.buffer_size.max(1) as u64);
        u32::try_from(window.saturating_sub(self.exclusive_buffers(channels)))
            .unwrap_or(u32::MAX)
            .max(self.floating_buffers_per_gate)
    }

    /// The unread buffers each subpartition of a pipelined partition of `subpartitions` holds
    /// before its producer waits: Flink's [`MAX_BUFFERS_PER_SUBPARTITION`], or its share of the
    /// [`output_window`](Self::output_window) when that is more. A data connection keeps one
    /// poll in flight, so a channel moves at most what its subpartition holds per round trip:
    /// with ten buffers a producer → consumer pair across processes ran at ~0.4–0.5 of raw
    /// TCP. The pool still caps the whole (a producer borrows beyond its floor and waits when
    /// the lent quarter is out); a partition of 13 subpartitions or more keeps ten each.
    pub fn output_capacity(&self, subpartitions: u32) -> usize {
        let window = self.output_window / (self.buffer_size.max(1) as u64);
        let share = window / u64::from(subpartitions.max(1));
        usize::try_from(share.max(u64::from(MAX_BUFFERS_PER_SUBPARTITION))).unwrap_or(usize::MAX)
    }

    /// The floor of a gate of `channels` channels (0 without any).
    pub fn gate_floor(&self, channels: usize) -> u64 {
        self.gate_need(channels)
            .min(u64::from(self.required_per_gate))
    }

    /// The floor of a pipelined output of `subpartitions`: one buffer per subpartition plus one
    /// (Flink's), at most `required-buffers-per-output`.
    pub fn output_floor(&self, subpartitions: u32) -> u64 {
        (u64::from(subpartitions) + 1).min(u64::from(self.required_per_output))
    }

    /// Bytes of `buffers` buffers.
    pub fn bytes(&self, buffers: u64) -> u64 {
        buffers.saturating_mul(self.buffer_size as u64)
    }
}

/// Takes the oldest of `items` whose `size`s add up to at most `budget` (at least one, so
/// every message makes progress), in order: how requests and notices are cut into messages
/// that fit the transport's largest one.
fn take_within<T>(items: &mut Vec<T>, budget: usize, size: impl Fn(&T) -> usize) -> Vec<T> {
    let mut bytes = 0;
    let fit = items
        .iter()
        .take_while(|item| {
            bytes += size(item);
            bytes <= budget
        })
        .count()
        .max(1);
    if fit >= items.len() {
        std::mem::take(items)
    } else {
        items.drain(..fit).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floors_are_capped_so_wide_tasks_fit() {
        let network = NetworkSettings::default();
        assert_eq!(network.gate_need(100), 208);
        assert_eq!(network.gate_floor(100), 2);
        assert_eq!(network.gate_floor(0), 0);
        assert_eq!(network.output_floor(1), 2);
        assert_eq!(network.output_floor(10_000), 2);
        // 2,500 producers and 2,500 consumers of an all-to-all at P = 10,000 on one
        // TaskManager fit the floors' three quarters of the default memory.
        let floors = 2_500 * (network.gate_floor(10_000) + network.output_floor(10_000));
        assert!(network.bytes(floors) <= network.memory / 4 * 3);
    }

    /// A pipelined output of few subpartitions holds its share of the 4 MiB window; a wide one,
    /// or any with a window of ten buffers or less, Flink's ten per subpartition.
    #[test]
    fn outputs_of_few_subpartitions_hold_their_share_of_the_window() {
        let network = NetworkSettings::default();
        assert_eq!(network.output_capacity(1), 128);
        assert_eq!(network.output_capacity(2), 64);
        assert_eq!(network.output_capacity(12), 10);
        assert_eq!(network.output_capacity(13), 10);
        assert_eq!(network.output_capacity(10_000), 10);
        assert_eq!(network.output_capacity(0), 128);
        let flink = NetworkSettings {
            output_window: 320 << 10,
            ..network
        };
        assert_eq!(flink.output_capacity(1), 10);
        let tiny = NetworkSettings {
            output_window: 1,
            ..network
        };
        assert_eq!(tiny.output_capacity(1), 10);
    }
}
