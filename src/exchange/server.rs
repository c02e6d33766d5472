//! The producer side of the data connections (Flink's `PartitionRequestServerHandler` and
//! `PartitionRequestQueue`): [`PartitionRequestServer`] keeps, per consumer TaskManager
//! connection, every channel it subscribed with its position and credit, and answers the
//! connection's standing [`PollPartitionData`] with whatever its channels have.
//!
//! A channel is subscribed once. From then on nothing is sent for it until it has news: a
//! subscription with nothing to read listens on its subpartition through the connection's one
//! [`ReadyQueue`], so a producer TaskManager waits on one thing per connection, and a silent,
//! empty or finished channel costs no message of its own — the end of a thousand channels
//! travels in one answer. An answer carries at most [`FETCH_BYTES`]; a poll with nothing to
//! say is held at most [`FETCH_HOLD`] (well inside the transport's ask timeout) and answered
//! empty, and the consumer polls again.
//!
//! An answer lost on the way (the consumer's next poll says it did not get it) is served again
//! from where it started: a retained (blocking) batch is read again, a pipelined one was moved
//! out and is gone, so that channel fails and its region restarts, never reads a gap.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::input_gate::PARTITION_REQUEST_TIMEOUT;
use super::partition::{Fetch, PartitionStore, ReadyQueue};
use crate::fixed_hash::FixedHashMap;
use crate::messages::ids::DataConnectionId;
use crate::messages::task_manager::{
    ChannelResponse, PartitionData, PartitionRequest, PartitionRequests, PollPartitionData,
};
use crate::messages::{ActorAddress, ResultPartitionId};

/// Bytes one answer carries at most (one batch more, so every answer makes progress).
pub const FETCH_BYTES: usize = 1 << 20;

/// How long a poll that finds nothing new is held before it is answered with no news: far
/// inside the transport's ask timeout, so a silent channel never looks like a dead peer.
pub const FETCH_HOLD: Duration = Duration::from_secs(2);

const _: () = assert!(FETCH_HOLD.as_millis() * 4 <= crate::node::ASK_TIMEOUT.as_millis());

/// A connection without a poll or request for this long is forgotten.
pub const IDLE_CONNECTION: Duration = Duration::from_secs(60);

/// Every data connection consumers opened to this TaskManager. Shared by the TaskManager
/// actor (which applies requests and starts polls) and the polls it holds.
#[derive(Debug, Default)]
pub struct PartitionRequestServer {
    connections: Mutex<FixedHashMap<(ActorAddress, DataConnectionId), Arc<ServerConnection>>>,
}

#[derive(Debug, Default)]
struct ServerConnection {
    ready: Arc<ReadyQueue>,
    /// Ends a held poll when a newer one arrives.
    superseded: tokio::sync::Notify,
    state: Mutex<ConnectionState>,
}

#[derive(Debug, Default)]
struct ConnectionState {
    /// The last [`PartitionRequests`] round applied.
    applied: u64,
    subscriptions: FixedHashMap<u64, Subscription>,
    /// Subscriptions whose partition is not here yet (its producer is being deployed).
    awaiting: Vec<u64>,
    /// The newest poll seen.
    poll: u64,
    /// The last non-empty answer's number.
    seq: u64,
    /// The subscriptions as they were before the last non-empty answer, to serve again if it
    /// is lost.
    last_answer: Vec<(u64, Subscription)>,
    last_used: Option<Instant>,
}

#[derive(Debug, Clone, Copy)]
struct Subscription {
    partition: ResultPartitionId,
    subpartition: u32,
    next_batch: u64,
    /// Buffers the consumer granted in all (it sends the running total, so a lost or repeated
    /// grant cannot leave the two sides disagreeing).
    granted: u64,
    /// Buffers sent in all.
    sent: u64,
    /// The partition was here once: missing now means released.
    seen: bool,
    /// Its key is registered with the store (it comes back through the ready queue).
    listening: bool,
    since: Instant,
}

impl PartitionRequestServer {
    /// Applies one round of subscriptions and credit (a round applied before is ignored: the
    /// consumer sends a round again until it is answered).
    pub fn apply(&self, message: PartitionRequests) {
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
                    PartitionRequest::Subscribe {
                        channel,
                        partition,
                        subpartition,
                        credit,
                    } => {
                        state.subscriptions.insert(
                            channel,
                            Subscription {
                                partition,
                                subpartition,
                                next_batch: 0,
                                granted: u64::from(credit),
                                sent: 0,
                                seen: false,
                                listening: false,
                                since: now,
                            },
                        );
                        ready.push(channel);
                    }
                    PartitionRequest::Credit { channel, granted } => {
                        if let Some(subscription) = state.subscriptions.get_mut(&channel) {
                            subscription.granted = subscription.granted.max(granted);
                            if !subscription.listening {
                                ready.push(channel);
                            }
                        }
                    }
                    PartitionRequest::Cancel { channel } => {
                        state.subscriptions.remove(&channel);
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
        store: Arc<PartitionStore>,
        message: PollPartitionData,
    ) -> impl Future<Output = PartitionData> + use<> {
        let connection = self.connection(message.consumer.clone(), message.connection);
        async move { connection.serve(&store, &message).await }
    }

    /// Partitions were created here: subscriptions waiting for them look again.
    pub fn partitions_created(&self) {
        let connections: Vec<Arc<ServerConnection>> =
            lock(&self.connections).values().cloned().collect();
        for connection in connections {
            let awaiting = std::mem::take(&mut lock(&connection.state).awaiting);
            connection.ready.push_all(awaiting);
        }
    }

    /// Forgets connections that neither polled nor sent requests for [`IDLE_CONNECTION`]: a
    /// consumer TaskManager polls every [`FETCH_HOLD`] while any of its tasks reads here, so
    /// such a one is gone (its tasks failed when the connection broke) or reads nothing here.
    pub fn prune(&self) {
        let now = Instant::now();
        lock(&self.connections).retain(|_, connection| {
            lock(&connection.state)
                .last_used
                .is_none_or(|used| now.duration_since(used) < IDLE_CONNECTION)
        });
    }

    fn connection(&self, consumer: ActorAddress, id: DataConnectionId) -> Arc<ServerConnection> {
        lock(&self.connections)
            .entry((consumer, id))
            .or_default()
            .clone()
    }
}

impl ServerConnection {
    async fn serve(&self, store: &PartitionStore, message: &PollPartitionData) -> PartitionData {
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
                    forgotten: true,
                };
            }
            if poll < state.poll {
                return PartitionData {
                    seq: state.seq,
                    channels: Vec::new(),
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
            if received < seq {
                // The last answer was lost: serve its channels again from where it started.
                let lost = std::mem::take(&mut state.last_answer);
                let keys: Vec<u64> = lost.iter().map(|(key, _)| *key).collect();
                // A channel read twice in it goes back to its first position; credit granted
                // since stays.
                for (key, before) in lost.into_iter().rev() {
                    let granted = state
                        .subscriptions
                        .get(&key)
                        .map_or(before.granted, |now| now.granted.max(before.granted));
                    state
                        .subscriptions
                        .insert(key, Subscription { granted, ..before });
                }
                drop(state);
                self.ready.push_all(keys);
            } else {
                state.last_answer.clear();
            }
            (seq, superseded)
        };
        let mut superseded = superseded;
        let hold = tokio::time::sleep(FETCH_HOLD);
        tokio::pin!(hold);
        let mut held_out = false;
        loop {
            {
                let mut state = lock(&self.state);
                if state.poll != poll {
                    drop(state);
                    // A wake-up this poll took belongs to the newer one.
                    self.ready.renotify();
                    return PartitionData {
                        seq,
                        channels: Vec::new(),
                        forgotten: false,
                    };
                }
                if held_out {
                    // Subscriptions still waiting for their partition look again, to time out.
                    let awaiting = std::mem::take(&mut state.awaiting);
                    self.ready.push_all(awaiting);
                }
                let channels = state.collect(store, &self.ready);
                if !channels.is_empty() || held_out {
                    if !channels.is_empty() {
                        state.seq += 1;
                    }
                    return PartitionData {
                        seq: state.seq,
                        channels,
                        forgotten: false,
                    };
                }
            }
            tokio::select! {
                biased;
                () = &mut superseded => {}
                () = self.ready.wait() => {}
                () = &mut hold, if !held_out => held_out = true,
            }
        }
    }
}

impl ConnectionState {
    /// What the ready subscriptions have, within their credit and [`FETCH_BYTES`].
    fn collect(
        &mut self,
        store: &PartitionStore,
        ready: &Arc<ReadyQueue>,
    ) -> Vec<(u64, ChannelResponse)> {
        let now = Instant::now();
        let keys = ready.take();
        let mut channels = Vec::new();
        let mut again = Vec::new();
        let mut budget = FETCH_BYTES;
        for (position, &key) in keys.iter().enumerate() {
            if budget == 0 {
                again.extend_from_slice(&keys[position..]);
                break;
            }
            let Some(subscription) = self.subscriptions.get_mut(&key) else {
                continue; // cancelled, ended, or a duplicate wake-up
            };
            subscription.listening = false;
            let credit = subscription.granted.saturating_sub(subscription.sent);
            if credit == 0 {
                continue; // looked at again when credit comes
            }
            let before = *subscription;
            let read = (
                subscription.partition,
                subscription.subpartition,
                subscription.next_batch,
            );
            let fetch = store.fetch_or_listen(
                read,
                budget,
                usize::try_from(credit).unwrap_or(usize::MAX),
                ready,
                key,
            );
            match fetch {
                Fetch::Ready {
                    batches,
                    next_batch,
                    finished,
                } => {
                    let bytes: usize = batches.iter().map(super::Buffer::len).sum();
                    budget = budget.saturating_sub(bytes);
                    subscription.sent += batches.len() as u64;
                    subscription.next_batch = next_batch;
                    subscription.seen = true;
                    let backlog = if finished {
                        0
                    } else {
                        store.backlog(read.0, read.1, next_batch)
                    };
                    self.last_answer.push((key, before));
                    if finished {
                        self.subscriptions.remove(&key);
                    } else {
                        // More may be there already, or the next read listens.
                        again.push(key);
                    }
                    channels.push((
                        key,
                        ChannelResponse::Data {
                            batches,
                            next_batch,
                            finished,
                            backlog,
                        },
                    ));
                }
                Fetch::Listening | Fetch::Pending(_) => {
                    subscription.listening = true;
                    subscription.seen = true;
                }
                Fetch::Failed(reason) => {
                    self.last_answer.push((key, before));
                    self.subscriptions.remove(&key);
                    channels.push((key, ChannelResponse::Failed(reason)));
                }
                Fetch::Unknown if subscription.seen => {
                    self.last_answer.push((key, before));
                    self.subscriptions.remove(&key);
                    channels.push((key, ChannelResponse::Released));
                }
                Fetch::Unknown => {
                    if now.duration_since(subscription.since) >= PARTITION_REQUEST_TIMEOUT {
                        self.last_answer.push((key, before));
                        self.subscriptions.remove(&key);
                        channels.push((key, ChannelResponse::Unknown));
                    } else {
                        self.awaiting.push(key);
                    }
                }
            }
        }
        if !again.is_empty() {
            ready.push_all(again);
        }
        channels
    }
}

/// Takes a lock even if a thread panicked while holding it (every critical section here
/// leaves the state consistent).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
