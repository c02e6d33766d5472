//! The producer side of the data connections (Flink's `PartitionRequestServerHandler` and
//! `PartitionRequestQueue`): [`PartitionRequestServer`] keeps, per consumer TaskManager
//! connection, every channel it subscribed with its position and credit, and answers the
//! connection's standing [`PollPartitionData`] with whatever its channels have.
//!
//! A consumer TaskManager names the partitions it reads here once per producer list (a set),
//! and a gate subscribes to its subpartition of every partition of a set at once. Nothing is
//! kept per channel until its subpartition gets data (the store tells the set's reader): from
//! then on the channel is served one by one, listening on its subpartition through the
//! connection's one [`ReadyQueue`] when it has caught up. How each partition of a set ends
//! (finished, failed, released) is told once per partition and connection
//! ([`PartitionNotice`]): the consumer finishes every channel of it that had no data. So a
//! silent, empty or finished channel costs no message and no memory of its own, and an
//! all-to-all job of P = 10,000 (10⁸ channels) costs per TaskManager pair what it has
//! partitions there. An answer carries at most [`FETCH_BYTES`] of data and about
//! [`NOTICE_BYTES`] of notices (the rest follow with the next answers); a poll with nothing to
//! say is held at most [`FETCH_HOLD`] (well inside the transport's ask timeout) and answered
//! empty, and the consumer polls again.
//!
//! The answer's buffers are taken after the connection's lock is let go, and when any is on disk,
//! on the store's I/O threads ([`crate::env::blocking_io`]): the TaskManager actor that serves the
//! poll keeps heartbeating and deploying however slow the disk. A large blocking channel's next
//! answer is read there at once, while this one travels (`read_ahead`).
//!
//! A channel without credit whose set subscription has eager room left (a gate in the floating
//! mode, see `input_gate::credit`) is sent its buffers at once if they fit the room, marked with
//! the bytes they took; otherwise it announces its backlog and waits for credit. The room comes
//! back as the gate reports what it consumed.
//!
//! An answer lost on the way (the consumer's next poll says it did not get it: an ask timed out
//! while this TaskManager or the consumer's was too busy to answer or read in time) is sent
//! again as it was, so no channel fails for it, pipelined ones included (their buffers moved
//! out of the partition with the answer). Each connection keeps its last non-empty answer until
//! the consumer's next poll acknowledges it: at most one answer's budget per connection, shared
//! buffers (no copies).

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::futures::Notified;
use tokio::time::Instant;

use super::buffer::Buffer;
use super::input_gate::PARTITION_REQUEST_TIMEOUT;
use super::partition::EndState;
use super::partition::{PendingRead, PlannedFetch, ReadyQueue, ResultPartitionManager, Unreadable};
use crate::base::hash::FixedHashMap;
use crate::base::ids::DataConnectionId;
use crate::env::blocking_io::offload;
use crate::messages::task_manager::{
    ChannelResponse, PartitionData, PartitionEnd, PartitionNotice, PartitionRequest,
    PartitionRequests, PollPartitionData,
};
use crate::messages::{ActorAddress, ResultPartitionId};
use answer_budget::AnswerBudget;
use read_ahead::{MAX_AHEAD, ReadAhead, Taken};

mod answer_budget;
mod read_ahead;

/// Bytes one answer carries at most (one buffer more, so every answer makes progress).
pub const FETCH_BYTES: usize = 1 << 20;

/// About the most bytes of notices one answer carries (with [`FETCH_BYTES`] of data and
/// [`CHANNEL_BYTES`] of channel entries, below the transport's largest message, 16 MiB); the
/// rest go with the next answers, which follow at once. At P = 10,000 with 2,000 records per
/// source the notices of a TaskManager's 2,500 partitions, each listing ~1,800 subpartitions
/// with data, did not fit one message (issue 32).
pub const NOTICE_BYTES: usize = 3 << 20;

/// About the most bytes of channel entries besides their data one answer carries (keys,
/// positions, buffer lengths, failure reasons; see `answer_budget`).
pub const CHANNEL_BYTES: usize = 2 << 20;

const _: () = assert!(
    FETCH_BYTES + NOTICE_BYTES + CHANNEL_BYTES <= crate::transport::frame::DEFAULT_MAX_FRAME / 2,
    "an answer must fit a frame with room for framing"
);

// An answer's data may pass FETCH_BYTES by one buffer, at most the largest record.
const _: () = assert!(
    FETCH_BYTES + NOTICE_BYTES + CHANNEL_BYTES + super::MAX_RECORD_BYTES
        <= crate::transport::frame::DEFAULT_MAX_FRAME * 7 / 8,
    "an answer with the largest record must fit a frame with room for framing"
);

/// The oldest of `notices` that fit in `budget` bytes (at least one), taken out in order.
fn next_notices(notices: &mut Vec<PartitionNotice>, budget: usize) -> Vec<PartitionNotice> {
    // Generous sizes of their encoding: numbers are varints of at most 5 bytes here.
    let size = |notice: &PartitionNotice| match &notice.end {
        PartitionEnd::Finished { with_data } => 32 + 5 * with_data.len(),
        PartitionEnd::Failed(reason) => 32 + reason.len(),
        PartitionEnd::Released | PartitionEnd::Unknown => 32,
    };
    super::take_within(notices, budget, size)
}

/// How long a poll that finds nothing new is held before it is answered with no news: far
/// inside the transport's ask timeout, so a silent channel never looks like a dead peer.
pub const FETCH_HOLD: Duration = Duration::from_secs(2);

const _: () = assert!(FETCH_HOLD.as_millis() * 4 <= crate::transport::ASK_TIMEOUT.as_millis());

/// A connection without a poll or request for this long is forgotten.
pub const IDLE_CONNECTION: Duration = Duration::from_secs(60);

/// Every data connection consumers opened to this TaskManager. Shared by the TaskManager
/// actor (which applies requests and starts polls) and the polls it holds.
#[derive(Debug)]
pub struct PartitionRequestServer {
    connections: Mutex<FixedHashMap<(ActorAddress, DataConnectionId), Arc<ServerConnection>>>,
    /// About the most bytes of notices one answer carries.
    notice_bytes: usize,
}

impl Default for PartitionRequestServer {
    fn default() -> Self {
        Self::new(NOTICE_BYTES)
    }
}

#[derive(Debug, Default)]
struct ServerConnection {
    ready: Arc<ReadyQueue>,
    /// Ends a held poll when a newer one arrives.
    superseded: tokio::sync::Notify,
    /// Tells a poll waiting to send the last answer again that its buffers are taken.
    answered: tokio::sync::Notify,
    state: Mutex<ConnectionState>,
}

#[derive(Debug, Default)]
struct ConnectionState {
    /// The last [`PartitionRequests`] round applied.
    applied: u64,
    /// The channels served one by one (their subpartition has data), by key.
    subscriptions: FixedHashMap<u64, Subscription>,
    /// The sets the consumer named, by number.
    sets: FixedHashMap<u32, ServerSet>,
    /// The gates' set subscriptions, by the key of their first channel.
    readers: FixedHashMap<u64, SetReader>,
    /// Partitions created here since the last look: sets waiting for members look again.
    created: bool,
    /// Notices not sent yet.
    notices: Vec<PartitionNotice>,
    /// The newest poll seen.
    poll: u64,
    /// The last non-empty answer's number.
    seq: u64,
    /// The last non-empty answer, once its buffers are taken, until the consumer says it got
    /// it: sent again if it was lost.
    sent: Option<PartitionData>,
    last_used: Option<Instant>,
    /// Buffers read ahead for the next answer, by channel (see `read_ahead`).
    ahead: FixedHashMap<u64, ReadAhead>,
}

/// The partitions of one producer list the consumer reads here.
#[derive(Debug)]
struct ServerSet {
    edge: u32,
    members: Arc<Vec<ResultPartitionId>>,
    /// Each member's position; only for sets larger than [`SMALL_SET`] (a small one is
    /// searched: at P = 100 on 100 TaskManagers every set has one member).
    position: Option<FixedHashMap<ResultPartitionId, u32>>,
    /// Per member: it was here once (missing now means released).
    seen: Vec<bool>,
    /// Per member: its end was told.
    told: Vec<bool>,
    /// Members not here yet (their producers are being deployed).
    awaiting: Vec<u32>,
    since: Instant,
}

/// Sets up to this size find a member by searching (no index of their own).
const SMALL_SET: usize = 16;

impl ServerSet {
    /// The position of `partition` in the set.
    fn member(&self, partition: ResultPartitionId) -> Option<u32> {
        match &self.position {
            Some(position) => position.get(&partition).copied(),
            None => self
                .members
                .iter()
                .position(|p| *p == partition)
                .map(|i| i as u32),
        }
    }
}

/// A gate's subscription to a set.
#[derive(Debug, Clone, Copy)]
struct SetReader {
    set: u32,
    subpartition: u32,
    credit: u32,
    /// The bytes its channels may be sent without credit at a time.
    eager: u64,
    /// Of those, sent in all.
    eager_sent: u64,
    /// And given back by the consumer in all.
    eager_returned: u64,
    /// Its channels with a subscription of their own (in `subscriptions`): when it is
    /// cancelled, only these are looked for (at P = 10,000 looking up each of a set's 2,500
    /// members, most of them finished or never served, was 6 % of the job's CPU).
    live: u32,
}

impl SetReader {
    /// Bytes a channel without credit may be sent now.
    fn eager_room(&self) -> u64 {
        self.eager
            .saturating_sub(self.eager_sent.saturating_sub(self.eager_returned))
    }
}

/// The key a set member's end watch goes by.
fn member_key(set: u32, member: u32) -> u64 {
    (u64::from(set) << 32) | u64::from(member)
}

#[derive(Debug, Clone, Copy)]
struct Subscription {
    /// The key of its set subscription ([`SetReader`]).
    reader: u64,
    partition: ResultPartitionId,
    subpartition: u32,
    next_buffer: u64,
    /// Buffers the consumer granted in all (it sends the running total, so a lost or repeated
    /// grant cannot leave the two sides disagreeing).
    granted: u64,
    /// Buffers sent in all.
    sent: u64,
    /// Its key is registered with the store (it comes back through the ready queue).
    listening: bool,
    /// The consumer knows of buffers waiting here (told with the last data or announced to a
    /// channel without credit), so a channel without credit waits for credit, not for data.
    announced: bool,
    /// This server put its key in the ready queue, so a grant does not put it there again.
    /// Without it a channel whose credit outran the answers' budget (a gate of few channels
    /// with many floating buffers) gained a copy in the queue with every grant, each kept
    /// while the budget ran out first, and every poll walked all of them.
    queued: bool,
}

impl Subscription {
    /// Marks it queued: whether its key is to be pushed (it was neither queued nor listening).
    fn mark_queued(&mut self) -> bool {
        let push = !self.queued && !self.listening;
        self.queued |= push;
        push
    }
}

impl PartitionRequestServer {
    /// A server whose answers carry about `notice_bytes` of notices at most ([`NOTICE_BYTES`];
    /// the simulation makes them tiny).
    pub fn new(notice_bytes: usize) -> Self {
        Self {
            connections: Mutex::default(),
            notice_bytes,
        }
    }

    /// Applies one round of subscriptions and credit (a round applied before is ignored: the
    /// consumer sends a round again until it is answered).
    pub fn apply(&self, store: &ResultPartitionManager, message: PartitionRequests) {
        let connection = self.connection(message.consumer, message.connection);
        let now = Instant::now();
        let mut ready = Vec::new();
        {
            let mut state = lock(&connection.state);
            state.last_used = Some(now);
            if message.round <= state.applied {
                return;
            }
            state.applied = message.round;
            for request in message.requests {
                match request {
                    PartitionRequest::Set { set, edge, members } => {
                        let mut server_set = ServerSet {
                            edge,
                            position: (members.len() > SMALL_SET).then(|| {
                                members
                                    .iter()
                                    .enumerate()
                                    .map(|(i, p)| (*p, i as u32))
                                    .collect()
                            }),
                            seen: vec![false; members.len()],
                            told: vec![false; members.len()],
                            awaiting: Vec::new(),
                            members,
                            since: now,
                        };
                        for (member, partition) in server_set.members.iter().enumerate() {
                            let key = member_key(set, member as u32);
                            match store.watch_end(*partition, &connection.ready, key) {
                                EndState::Producing => server_set.seen[member] = true,
                                EndState::Unknown => server_set.awaiting.push(member as u32),
                                EndState::Finished(_) | EndState::Failed(_) => {
                                    server_set.seen[member] = true;
                                    connection.ready.push_ended(key);
                                }
                            }
                        }
                        state.sets.insert(set, server_set);
                    }
                    PartitionRequest::SubscribeSet {
                        channels,
                        set,
                        subpartition,
                        credit,
                        eager,
                    } => {
                        let Some(server_set) = state.sets.get(&set) else {
                            log::warn!("a subscription names set {set}, which was never named");
                            continue;
                        };
                        let edge = server_set.edge;
                        let with_data =
                            store.add_reader(edge, subpartition, &connection.ready, channels);
                        let found: Vec<(u64, ResultPartitionId)> = with_data
                            .into_iter()
                            .filter_map(|p| {
                                server_set
                                    .member(p)
                                    .map(|member| (channels + u64::from(member), p))
                            })
                            .collect();
                        // (A subscription named again keeps the count of its channels served.)
                        let live = state.readers.get(&channels).map_or(0, |reader| reader.live);
                        state.readers.insert(
                            channels,
                            SetReader {
                                set,
                                subpartition,
                                credit,
                                eager: u64::from(eager),
                                eager_sent: 0,
                                eager_returned: 0,
                                live,
                            },
                        );
                        for (key, partition) in found {
                            state.serve_channel(channels, key, partition, subpartition, credit);
                            if state.queue(key) {
                                ready.push(key);
                            }
                        }
                    }
                    PartitionRequest::Credit { channel, granted } => {
                        if let Some(subscription) = state.subscriptions.get_mut(&channel) {
                            if granted > subscription.granted {
                                subscription.granted = granted;
                                subscription.announced = false;
                            }
                            if subscription.mark_queued() {
                                ready.push(channel);
                            }
                        }
                    }
                    PartitionRequest::EagerReturned { channels, returned } => {
                        // Channels that found no room announced their backlog instead: none
                        // waits for this.
                        if let Some(reader) = state.readers.get_mut(&channels) {
                            reader.eager_returned = reader.eager_returned.max(returned);
                        }
                    }
                    PartitionRequest::Cancel { channel } => {
                        state.remove_subscription(channel);
                    }
                    PartitionRequest::CancelSet { channels } => {
                        let Some(reader) = state.readers.remove(&channels) else {
                            continue;
                        };
                        if let Some(server_set) = state.sets.get(&reader.set) {
                            let (edge, len) = (server_set.edge, server_set.members.len());
                            store.remove_reader(
                                edge,
                                reader.subpartition,
                                &connection.ready,
                                channels,
                            );
                            let mut live = reader.live;
                            for key in channels..channels + len as u64 {
                                if live == 0 {
                                    break;
                                }
                                if state.subscriptions.remove(&key).is_some() {
                                    live -= 1;
                                }
                            }
                        }
                    }
                    PartitionRequest::ForgetSet { set } => {
                        state.sets.remove(&set);
                    }
                    PartitionRequest::ReleaseSet {
                        set,
                        subpartition,
                        members,
                    } => {
                        let Some(server_set) = state.sets.get(&set) else {
                            continue;
                        };
                        for member in members {
                            if let Some(&partition) = server_set.members.get(member as usize) {
                                store.release_subpartition(partition, subpartition);
                            }
                        }
                    }
                }
            }
        }
        connection.ready.push_all(ready);
    }

    /// Serves one poll: at once if any channel has news, else when one does, else empty after
    /// [`FETCH_HOLD`] (or at once when a newer poll of the connection arrives).
    pub fn poll(
        &self,
        store: Arc<ResultPartitionManager>,
        message: PollPartitionData,
    ) -> impl Future<Output = PartitionData> + use<> {
        let connection = self.connection(message.consumer.clone(), message.connection);
        let notice_bytes = self.notice_bytes;
        async move { connection.serve(&store, &message, notice_bytes).await }
    }

    /// Partitions were created here: sets waiting for them look again.
    pub fn partitions_created(&self) {
        let connections: Vec<Arc<ServerConnection>> =
            lock(&self.connections).values().cloned().collect();
        for connection in connections {
            let mut state = lock(&connection.state);
            if state.sets.values().any(|set| !set.awaiting.is_empty()) {
                state.created = true;
                drop(state);
                connection.ready.renotify();
            }
        }
    }

    /// Forgets connections that neither polled nor sent requests for [`IDLE_CONNECTION`]: a
    /// consumer TaskManager polls every [`FETCH_HOLD`] while any of its tasks reads here, so
    /// such a one is gone (its tasks failed when the connection broke) or reads nothing here.
    ///
    /// What a forgotten connection still read counts as released by its consumer
    /// ([`ResultPartitionManager::release_subpartition`]; blocking partitions keep everything),
    /// as Flink releases the views of a closed channel: a consumer that ended early and whose
    /// TaskManager died before its release reached here would otherwise leave its pipelined
    /// producer waiting for room for ever (its task counts as finished, so no failover comes).
    pub fn prune(&self, store: &ResultPartitionManager) {
        let now = Instant::now();
        let mut gone = Vec::new();
        lock(&self.connections).retain(|_, connection| {
            let live = lock(&connection.state)
                .last_used
                .is_none_or(|used| now.duration_since(used) < IDLE_CONNECTION);
            if !live {
                gone.push(connection.clone());
            }
            live
        });
        for connection in gone {
            for (partition, subpartition) in lock(&connection.state).read() {
                // Only partitions still here: the release of one never created would wait
                // for it (bounded, but for nothing: a gone job's partitions never come).
                if store.stats(partition).is_some() {
                    store.release_subpartition(partition, subpartition);
                }
            }
        }
        store.prune_watchers();
    }

    /// Bytes sent without credit and not given back yet, over every set subscription.
    #[cfg(test)]
    pub(crate) fn eager_out(&self) -> u64 {
        lock(&self.connections)
            .values()
            .flat_map(|connection| {
                let state = lock(&connection.state);
                state
                    .readers
                    .values()
                    .map(|reader| reader.eager_sent - reader.eager_returned)
                    .collect::<Vec<_>>()
            })
            .sum()
    }

    fn connection(&self, consumer: ActorAddress, id: DataConnectionId) -> Arc<ServerConnection> {
        lock(&self.connections)
            .entry((consumer, id))
            .or_default()
            .clone()
    }
}

impl ConnectionState {
    /// Every subpartition this connection's consumer subscribed to and has not cancelled: its
    /// channels, and the subpartition of every member of the sets its gates read.
    fn read(&self) -> Vec<(ResultPartitionId, u32)> {
        let mut read: Vec<(ResultPartitionId, u32)> = self
            .subscriptions
            .values()
            .map(|subscription| (subscription.partition, subscription.subpartition))
            .collect();
        for reader in self.readers.values() {
            if let Some(set) = self.sets.get(&reader.set) {
                read.extend(
                    set.members
                        .iter()
                        .map(|&member| (member, reader.subpartition)),
                );
            }
        }
        read.sort_unstable();
        read.dedup();
        read
    }
}

impl ServerConnection {
    async fn serve(
        &self,
        store: &ResultPartitionManager,
        message: &PollPartitionData,
        notice_bytes: usize,
    ) -> PartitionData {
        let (poll, received) = (message.poll, message.received);
        let (seq, superseded) = {
            let mut state = lock(&self.state);
            state.last_used = Some(Instant::now());
            if state.applied < message.acknowledged {
                // Rounds were acknowledged that this TaskManager never applied: it is a new
                // incarnation at the old address, and the subscriptions went with the old one.
                return PartitionData {
                    seq: state.seq,
                    channels: Vec::new(),
                    notices: Vec::new(),
                    forgotten: true,
                };
            }
            if poll < state.poll {
                return PartitionData {
                    seq: state.seq,
                    channels: Vec::new(),
                    notices: Vec::new(),
                    forgotten: false,
                };
            }
            if poll > state.poll {
                state.poll = poll;
                self.superseded.notify_waiters();
            }
            // Created under the lock, after this poll's own notice: only a newer poll (which
            // needs the lock to publish its number) wakes it.
            let superseded = Box::pin(self.superseded.notified());
            let seq = state.seq;
            if received >= seq {
                state.sent = None; // it got the last one
            }
            (seq, superseded)
        };
        let mut superseded = superseded;
        if received < seq {
            return self.send_again(poll, seq, superseded).await;
        }
        let hold = tokio::time::sleep(FETCH_HOLD);
        tokio::pin!(hold);
        let mut held_out = false;
        loop {
            let answer = {
                let mut state = lock(&self.state);
                if state.poll != poll {
                    drop(state);
                    // A wake-up this poll took belongs to the newer one.
                    self.ready.renotify();
                    return PartitionData {
                        seq,
                        channels: Vec::new(),
                        notices: Vec::new(),
                        forgotten: false,
                    };
                }
                if held_out || std::mem::take(&mut state.created) {
                    // Sets still waiting for members look again (and time out).
                    state.look_for_awaited(store, &self.ready);
                }
                let (planned, budget) = state.collect(store, &self.ready);
                let notices = next_notices(&mut state.notices, notice_bytes);
                let news = !planned.is_empty() || !notices.is_empty();
                if news {
                    state.seq += 1;
                }
                (news || held_out).then_some((news, state.seq, planned, budget, notices))
            };
            if let Some((news, seq, planned, budget, notices)) = answer {
                // The connection's lock is free while the buffers are read.
                let channels = self.read(store, planned, budget).await;
                let answer = PartitionData {
                    seq,
                    channels,
                    notices,
                    forgotten: false,
                };
                if news {
                    let mut state = lock(&self.state);
                    if state.seq == seq {
                        state.sent = Some(answer.clone());
                    }
                    // Under the lock: a poll waiting to send it again registered under it.
                    self.answered.notify_waiters();
                }
                return answer;
            }
            tokio::select! {
                biased;
                () = &mut superseded => {}
                () = self.ready.wait() => {}
                () = &mut hold, if !held_out => held_out = true,
            }
        }
    }

    /// The last non-empty answer `seq` again, which the consumer did not get: as soon as the
    /// poll that made it has taken its buffers. Empty if a newer poll comes or none within
    /// [`FETCH_HOLD`] (the consumer polls again).
    async fn send_again(
        &self,
        poll: u64,
        seq: u64,
        mut superseded: Pin<Box<Notified<'_>>>,
    ) -> PartitionData {
        let empty = PartitionData {
            seq,
            channels: Vec::new(),
            notices: Vec::new(),
            forgotten: false,
        };
        let hold = tokio::time::sleep(FETCH_HOLD);
        tokio::pin!(hold);
        loop {
            let answered = {
                let state = lock(&self.state);
                if state.poll != poll {
                    return empty;
                }
                if let Some(answer) = state.sent.as_ref().filter(|answer| answer.seq == seq) {
                    return answer.clone();
                }
                // Created under the lock, before the answer can be stored and told.
                Box::pin(self.answered.notified())
            };
            tokio::select! {
                biased;
                () = &mut superseded => {}
                () = answered => {}
                () = &mut hold => return empty,
            }
        }
    }

    /// Takes the buffers an answer planned: on the store's I/O threads when any is on disk, so
    /// the TaskManager's actor thread, which serves this poll, never waits for the disk. A read
    /// that fails ends its channel. A failure's reason stays within what is left of the
    /// answer's `budget`.
    async fn read(
        &self,
        store: &ResultPartitionManager,
        mut planned: Vec<(u64, Planned)>,
        mut budget: AnswerBudget,
    ) -> Vec<(u64, ChannelResponse)> {
        for (_, planned) in &mut planned {
            planned.wait_ahead().await;
        }
        let on_disk = planned.iter().any(|(_, planned)| planned.needs_disk());
        let taken = if on_disk {
            // Only for the answer if the read panics (the planned channels move into it).
            let keys: Vec<u64> = planned.iter().map(|(key, _)| *key).collect();
            offload(store.io().as_ref(), move || Planned::take_all(planned))
                .await
                .unwrap_or_else(|| {
                    let reason = "the I/O thread reading spilled buffers panicked";
                    log::error!("{reason}");
                    keys.iter()
                        .map(|&key| (key, ChannelResponse::Failed(reason.to_owned()), true))
                        .collect()
                })
        } else {
            Planned::take_all(planned)
        };
        if taken.iter().any(|(_, _, failed)| *failed) {
            let mut state = lock(&self.state);
            for (key, _, failed) in &taken {
                if *failed {
                    state.remove_subscription(*key);
                }
            }
        }
        taken
            .into_iter()
            .map(|(key, response, failed)| match response {
                ChannelResponse::Failed(reason) if failed => (
                    key,
                    ChannelResponse::Failed(budget.failed_after_planning(reason)),
                ),
                response => (key, response),
            })
            .collect()
    }
}

/// One channel of an answer as collected under the connection's lock.
enum Planned {
    /// Decided there.
    Answer(ChannelResponse),
    /// Buffers still to take (from disk, perhaps).
    Read {
        pending: PendingRead,
        backlog: u64,
        /// The eager bytes it takes (0: sent within credit).
        eager: u64,
        /// Its buffers from a read ahead, still coming.
        ahead: Option<Taken>,
        /// Its buffers from a read ahead, read.
        read: Option<Vec<Buffer>>,
    },
}

impl Planned {
    /// Every channel's response, with whether its read failed.
    fn take_all(planned: Vec<(u64, Self)>) -> Vec<(u64, ChannelResponse, bool)> {
        planned
            .into_iter()
            .map(|(key, planned)| {
                let (response, failed) = planned.take();
                (key, response, failed)
            })
            .collect()
    }

    fn needs_disk(&self) -> bool {
        matches!(self, Self::Read { pending, read: None, .. } if pending.needs_disk())
    }

    /// Waits for its buffers read ahead, if any.
    async fn wait_ahead(&mut self) {
        if let Self::Read { ahead, read, .. } = self
            && let Some(taken) = ahead.take()
        {
            *read = taken.buffers().await;
        }
    }

    /// The channel's response, reading its buffers; `true` if it could not read them (the
    /// channel ends).
    fn take(self) -> (ChannelResponse, bool) {
        match self {
            Self::Answer(response) => (response, false),
            Self::Read {
                pending,
                backlog,
                eager,
                read,
                ..
            } => {
                let (next_buffer, finished) = (pending.next_buffer(), pending.finished());
                match read.map_or_else(|| pending.read(), Ok) {
                    Ok(buffers) => (
                        ChannelResponse::Data {
                            buffers,
                            next_buffer,
                            finished,
                            backlog,
                            eager,
                        },
                        false,
                    ),
                    Err(Unreadable::Failed(reason)) => (ChannelResponse::Failed(reason), true),
                    Err(Unreadable::Released) => (ChannelResponse::Released, true),
                }
            }
        }
    }
}

impl ConnectionState {
    /// Serves channel `key` (of `partition`'s `subpartition`) one by one from now on.
    fn serve_channel(
        &mut self,
        reader: u64,
        key: u64,
        partition: ResultPartitionId,
        subpartition: u32,
        credit: u32,
    ) {
        if let std::collections::hash_map::Entry::Vacant(entry) = self.subscriptions.entry(key) {
            entry.insert(Subscription {
                reader,
                partition,
                subpartition,
                next_buffer: 0,
                granted: u64::from(credit),
                sent: 0,
                listening: false,
                announced: false,
                queued: false,
            });
            if let Some(set_reader) = self.readers.get_mut(&reader) {
                set_reader.live += 1;
            }
        }
    }

    /// Marks channel `key` queued ([`Subscription::mark_queued`]).
    fn queue(&mut self, key: u64) -> bool {
        self.subscriptions
            .get_mut(&key)
            .is_some_and(Subscription::mark_queued)
    }

    /// Channel `key` is served no more (finished, failed or cancelled).
    fn remove_subscription(&mut self, key: u64) {
        self.ahead.remove(&key);
        if let Some(subscription) = self.subscriptions.remove(&key)
            && let Some(reader) = self.readers.get_mut(&subscription.reader)
        {
            reader.live = reader.live.saturating_sub(1);
        }
    }

    /// Members of sets that were not here: those here now are watched, those that ended are
    /// told, and those awaited longer than [`PARTITION_REQUEST_TIMEOUT`] are told unknown.
    fn look_for_awaited(&mut self, store: &ResultPartitionManager, ready: &ReadyQueue) {
        let now = Instant::now();
        for (&number, set) in &mut self.sets {
            let timed_out = now.duration_since(set.since) >= PARTITION_REQUEST_TIMEOUT;
            let mut awaiting = std::mem::take(&mut set.awaiting);
            awaiting.retain(|&member| {
                match store.end_state(set.members[member as usize]) {
                    EndState::Producing => set.seen[member as usize] = true,
                    EndState::Finished(_) | EndState::Failed(_) => {
                        // Created and ended since the watch: it may have been missed.
                        set.seen[member as usize] = true;
                        ready.push_ended(member_key(number, member));
                    }
                    EndState::Unknown if timed_out => {
                        set.told[member as usize] = true;
                        self.notices.push(PartitionNotice {
                            set: number,
                            member,
                            end: PartitionEnd::Unknown,
                        });
                    }
                    EndState::Unknown => return true,
                }
                false
            });
            set.awaiting = awaiting;
        }
    }

    /// Notices for the set members that ended (each told once).
    fn tell_ended(&mut self, store: &ResultPartitionManager, keys: Vec<u64>) {
        for key in keys {
            let (number, member) = ((key >> 32) as u32, key as u32);
            let Some(set) = self.sets.get_mut(&number) else {
                continue; // forgotten
            };
            let index = member as usize;
            if set.told.get(index).is_none_or(|&told| told) {
                continue;
            }
            let end = match store.end_state(set.members[index]) {
                EndState::Producing => continue,
                EndState::Finished(with_data) => PartitionEnd::Finished { with_data },
                EndState::Failed(reason) => PartitionEnd::Failed(reason),
                EndState::Unknown if set.seen[index] => PartitionEnd::Released,
                // Not created yet: it stays awaited.
                EndState::Unknown => continue,
            };
            set.told[index] = true;
            self.notices.push(PartitionNotice {
                set: number,
                member,
                end,
            });
        }
    }

    /// What the ready subscriptions have, within their credit, [`FETCH_BYTES`] and
    /// [`CHANNEL_BYTES`], with what is left of the answer's budget; notices of ended
    /// partitions go to `self.notices`.
    fn collect(
        &mut self,
        store: &ResultPartitionManager,
        ready: &Arc<ReadyQueue>,
    ) -> (Vec<(u64, Planned)>, AnswerBudget) {
        let items = ready.take_all();
        self.tell_ended(store, items.ended);
        let (mut channels, mut again) = (Vec::new(), Vec::new());
        let mut budget = AnswerBudget::new(FETCH_BYTES, CHANNEL_BYTES);
        let mut out = (&mut channels, &mut again, &mut budget);
        for key in items.keys {
            self.serve_key(store, ready, key, &mut out);
        }
        // Subpartitions of sets that got their first buffer: their channels are served from now
        // on, each read at once, while its subscription is in the cache (at P = 1,000 the
        // look-up of a subscription made long before was 2.6 % of the job's CPU).
        for (reader, partition) in items.announced {
            let Some(&SetReader {
                set,
                subpartition,
                credit,
                ..
            }) = self.readers.get(&reader)
            else {
                continue; // cancelled
            };
            let Some(member) = self.sets.get(&set).and_then(|set| set.member(partition)) else {
                continue; // another set's partition of the edge
            };
            let key = reader + u64::from(member);
            self.serve_channel(reader, key, partition, subpartition, credit);
            self.serve_key(store, ready, key, &mut out);
        }
        if !again.is_empty() {
            ready.push_all(again);
        }
        (channels, budget)
    }

    /// Plans channel `key`'s next answer within `out`'s budget (see [`collect`](Self::collect));
    /// past the budget it is only queued again.
    fn serve_key(
        &mut self,
        store: &ResultPartitionManager,
        ready: &Arc<ReadyQueue>,
        key: u64,
        out: &mut Collected<'_>,
    ) {
        let (channels, again, budget) = out;
        if !budget.has_room() {
            again.push(key);
            return;
        }
        let Some(subscription) = self.subscriptions.get_mut(&key) else {
            return; // cancelled, ended, or a duplicate wake-up
        };
        (subscription.listening, subscription.queued) = (false, false);
        let credit = subscription.granted.saturating_sub(subscription.sent);
        if credit == 0 && subscription.announced {
            return; // looked at again when credit comes
        }
        // Without credit, whole buffers that fit the set subscription's eager room go at
        // once; otherwise the store tells the backlog (announced once, so the consumer
        // lends the channel credit: Flink's backlog announcement), or listens for data.
        let read = (
            subscription.partition,
            subscription.subpartition,
            subscription.next_buffer,
        );
        let room = if credit == 0 {
            (self.readers.get(&subscription.reader)).map_or(0, SetReader::eager_room)
        } else {
            0
        };
        let planned = if room > 0 {
            // Within the answer's budget too (a buffer that does not fit it is announced).
            let room = usize::try_from(room).unwrap_or(usize::MAX).min(budget.data);
            store.fetch_eager_or_listen(read, room, ready, key)
        } else {
            store.fetch_or_listen(
                read,
                budget.data,
                usize::try_from(credit).unwrap_or(usize::MAX),
                ready,
                key,
            )
        };
        match planned {
            PlannedFetch::Read(pending) => {
                let ahead = (self.ahead.remove(&key)).and_then(|ahead| ahead.taken_by(&pending));
                budget.take_read(pending.buffers(), pending.bytes());
                let eager = if room > 0 {
                    let bytes = pending.bytes() as u64;
                    if let Some(reader) = self.readers.get_mut(&subscription.reader) {
                        reader.eager_sent += bytes;
                    }
                    bytes
                } else {
                    subscription.sent += pending.buffers() as u64;
                    0
                };
                let (next_buffer, finished) = (pending.next_buffer(), pending.finished());
                subscription.next_buffer = next_buffer;
                let backlog = pending.backlog();
                subscription.announced = backlog > 0;
                if !finished
                    && backlog > 0
                    && pending.needs_disk()
                    && self.ahead.len() < MAX_AHEAD
                    && let Some(next) = store.plan_ahead(
                        (
                            subscription.partition,
                            subscription.subpartition,
                            next_buffer,
                        ),
                        FETCH_BYTES,
                    )
                {
                    self.ahead
                        .insert(key, ReadAhead::start(store.io().as_ref(), next));
                }
                if finished {
                    self.remove_subscription(key);
                } else if pending.listening() {
                    // Woken by the next buffer or the end.
                    subscription.listening = true;
                } else {
                    // More is there already (or fits no credit: it waits for the grant).
                    subscription.queued = true;
                    again.push(key);
                }
                channels.push((
                    key,
                    Planned::Read {
                        pending,
                        backlog,
                        eager,
                        ahead,
                        read: None,
                    },
                ));
            }
            PlannedFetch::Listening | PlannedFetch::Pending(_) => {
                subscription.listening = true;
            }
            PlannedFetch::Backlog(backlog) => {
                subscription.announced = true;
                budget.take_entry(0);
                let next_buffer = subscription.next_buffer;
                channels.push((
                    key,
                    Planned::Answer(ChannelResponse::Data {
                        buffers: Vec::new(),
                        next_buffer,
                        finished: false,
                        backlog,
                        eager: 0,
                    }),
                ));
            }
            PlannedFetch::Failed(reason) => {
                self.remove_subscription(key);
                let reason = budget.failed(reason);
                channels.push((key, Planned::Answer(ChannelResponse::Failed(reason))));
            }
            // It had data, so it was here: it was released.
            PlannedFetch::Unknown => {
                self.remove_subscription(key);
                budget.take_entry(0);
                channels.push((key, Planned::Answer(ChannelResponse::Released)));
            }
        }
    }
}

/// What [`ConnectionState::collect`] gathers: the channels' answers, the keys to look at again,
/// and what is left of the answer's budget.
type Collected<'a> = (
    &'a mut Vec<(u64, Planned)>,
    &'a mut Vec<u64>,
    &'a mut AnswerBudget,
);

/// Takes a lock even if a thread panicked while holding it (every critical section here
/// leaves the state consistent).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
