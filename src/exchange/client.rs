//! The consumer side of the data connections: a TaskManager's [`NetworkClient`] holds one
//! [`DataConnection`] per producer TaskManager its tasks read from (Flink's
//! `PartitionRequestClient`), shared by every input gate of every task here.
//!
//! A gate subscribes each remote channel once and then grants credit as it consumes; the
//! connection carries what all gates asked for in one [`PartitionRequests`] at a time
//! (numbered, sent again until answered), and keeps one [`PollPartitionData`] in flight while
//! any gate reads there. Each answer's channels go to their gates' [`GateInbox`]es. So the
//! messages between two TaskManagers grow with the data and with how often gates ask, not
//! with channels or tasks: the end of every channel between them may travel in one answer.
//!
//! A connection is broken when [`RECONNECT_ATTEMPTS`] asks in a row fail (each re-dials the peer
//! with the transport's own backoff): every gate reading there is told, names the producer's
//! TaskManager and the reason, and fails; the connection starts afresh for later gates.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures_util::task::AtomicWaker;

use crate::env::NodeRng;
use crate::fixed_hash::FixedHashMap;
use crate::messages::ActorAddress;
use crate::messages::ids::DataConnectionId;
use crate::messages::task_manager::{
    ChannelResponse, PartitionRequest, PartitionRequests, PollPartitionData, TaskManagerGateway,
};

/// Asks in a row to a producer's TaskManager that may fail before its data connection counts as
/// broken for good.
pub const RECONNECT_ATTEMPTS: u32 = 3;

/// The pause after the first failed ask; it doubles after each further one.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(100);

/// A channel's key on the wire: its gate's id and its index there.
pub fn channel_key(gate: u32, channel: u32) -> u64 {
    (u64::from(gate) << 32) | u64::from(channel)
}

/// What a gate hears from its data connections.
#[derive(Debug)]
pub enum Delivery {
    /// News for one of its channels, by index.
    Channel(u32, ChannelResponse),
    /// The data connection to this producer TaskManager broke for good.
    ConnectionLost(ActorAddress, String),
}

/// Where a gate's deliveries wait for its task thread.
#[derive(Debug, Default)]
pub struct GateInbox {
    items: Mutex<Vec<Delivery>>,
    waker: AtomicWaker,
    /// The inbox is on its client's list of inboxes to wake.
    queued: AtomicBool,
}

impl GateInbox {
    fn deliver(&self, items: impl IntoIterator<Item = Delivery>) {
        self.put(items);
        self.waker.wake();
    }

    fn put(&self, items: impl IntoIterator<Item = Delivery>) {
        lock(&self.items).extend(items);
    }

    /// Everything delivered so far, oldest first.
    pub fn take(&self) -> Vec<Delivery> {
        std::mem::take(&mut *lock(&self.items))
    }

    /// Ready when something was delivered; registers `cx` to be woken otherwise.
    pub fn poll_ready(&self, cx: &mut std::task::Context<'_>) -> bool {
        self.waker.register(cx.waker());
        !lock(&self.items).is_empty()
    }
}

/// See the module docs. Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct NetworkClient {
    inner: Arc<ClientInner>,
}

#[derive(Debug)]
struct ClientInner {
    local: ActorAddress,
    gates: Mutex<FixedHashMap<u32, Arc<GateInbox>>>,
    next_gate: AtomicU32,
    connections: Mutex<FixedHashMap<ActorAddress, Arc<DataConnection>>>,
    rng: Mutex<NodeRng>,
    /// Inboxes given data since their task threads were last woken (see [`NetworkClient::wake`]).
    to_wake: Mutex<Vec<Arc<GateInbox>>>,
}

/// One consumer TaskManager's connection to one producer TaskManager.
#[derive(Debug)]
pub struct DataConnection {
    /// The producer TaskManager.
    pub address: ActorAddress,
    state: Mutex<ConnectionState>,
    wake: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct ConnectionState {
    /// Requests not sent yet, in order.
    pending: Vec<PartitionRequest>,
    /// Gates reading here: the connection polls while there is one.
    gates: FixedHashMap<u32, ()>,
    closed: bool,
}

impl NetworkClient {
    /// The client of the TaskManager at `local`; `rng` draws its connection ids.
    pub fn new(local: ActorAddress, rng: NodeRng) -> Self {
        Self {
            inner: Arc::new(ClientInner {
                local,
                gates: Mutex::default(),
                next_gate: AtomicU32::new(1),
                connections: Mutex::default(),
                rng: Mutex::new(rng),
                to_wake: Mutex::default(),
            }),
        }
    }

    /// The connection to `address`, if one was opened.
    pub fn connection(&self, address: &ActorAddress) -> Option<Arc<DataConnection>> {
        lock(&self.inner.connections).get(address).cloned()
    }

    /// Opens a connection to the TaskManager at `address` unless there is one; the returned
    /// future drives it (the TaskManager runs it as a task on its own thread; [`Self::close`]
    /// ends it).
    pub fn connect(
        &self,
        address: &ActorAddress,
        gateway: TaskManagerGateway,
    ) -> Option<impl Future<Output = ()> + use<>> {
        let connection = {
            let mut connections = lock(&self.inner.connections);
            if connections.contains_key(address) {
                return None;
            }
            let connection = Arc::new(DataConnection {
                address: address.clone(),
                state: Mutex::default(),
                wake: tokio::sync::Notify::new(),
            });
            connections.insert(address.clone(), connection.clone());
            connection
        };
        let client = self.clone();
        Some(async move { client.drive(connection, gateway).await })
    }

    /// Stops every connection (the TaskManager stops).
    pub fn close(&self) {
        for connection in lock(&self.inner.connections).values() {
            lock(&connection.state).closed = true;
            connection.wake.notify_one();
        }
    }

    /// A new gate's id and inbox.
    pub fn register_gate(&self) -> (u32, Arc<GateInbox>) {
        let inbox = Arc::new(GateInbox::default());
        let mut gates = lock(&self.inner.gates);
        loop {
            let id = self.inner.next_gate.fetch_add(1, Ordering::Relaxed);
            if id != 0 && !gates.contains_key(&id) {
                gates.insert(id, inbox.clone());
                return (id, inbox);
            }
        }
    }

    /// The gate ended: it is forgotten, its last `cancels` go out.
    pub fn unregister_gate(&self, gate: u32, cancels: Vec<(Arc<DataConnection>, Vec<u64>)>) {
        lock(&self.inner.gates).remove(&gate);
        for (connection, channels) in cancels {
            let mut state = lock(&connection.state);
            state.gates.remove(&gate);
            state.pending.extend(
                channels
                    .into_iter()
                    .map(|channel| PartitionRequest::Cancel { channel }),
            );
            drop(state);
            connection.wake.notify_one();
        }
    }

    /// Puts an answer's channels into their gates' inboxes; [`Self::wake`] wakes the gates.
    fn dispatch(&self, channels: Vec<(u64, ChannelResponse)>) {
        let gates = lock(&self.inner.gates);
        let mut to_wake = lock(&self.inner.to_wake);
        let mut put = |id: u32, items: Vec<Delivery>| {
            if let Some(inbox) = gates.get(&id) {
                inbox.put(items);
                if !inbox.queued.swap(true, Ordering::AcqRel) {
                    to_wake.push(inbox.clone());
                }
            }
        };
        let mut current: Option<(u32, Vec<Delivery>)> = None;
        for (key, response) in channels {
            let gate = (key >> 32) as u32;
            let delivery = Delivery::Channel(key as u32, response);
            match &mut current {
                Some((id, items)) if *id == gate => items.push(delivery),
                _ => {
                    if let Some((id, items)) = current.take() {
                        put(id, items);
                    }
                    current = Some((gate, vec![delivery]));
                }
            }
        }
        if let Some((id, items)) = current {
            put(id, items);
        }
    }

    /// Wakes the task threads of every gate given data since the last call. The connections
    /// call it one scheduler turn after dispatching, so that when the answers of many producer
    /// TaskManagers arrive together a gate's thread is woken once for all of them, not once
    /// per answer: at P = 1,000 over 100 TaskManagers the wake-ups (a futex call and two
    /// context switches each) were a third of an all-to-all job's CPU.
    fn wake(&self) {
        let inboxes = std::mem::take(&mut *lock(&self.inner.to_wake));
        for inbox in inboxes {
            inbox.queued.store(false, Ordering::Release);
            inbox.waker.wake();
        }
    }

    fn new_connection_id(&self) -> DataConnectionId {
        DataConnectionId::generate(&mut lock(&self.inner.rng))
    }

    /// Runs one connection: sends requests and keeps a poll in flight while gates read there.
    async fn drive(self, connection: Arc<DataConnection>, gateway: TaskManagerGateway) {
        let mut id = self.new_connection_id();
        // Request rounds sent and acknowledged, polls sent, last non-empty answer received.
        let (mut round, mut acknowledged, mut poll, mut received) = (0u64, 0u64, 0u64, 0u64);
        let mut unanswered: Option<PartitionRequests> = None;
        let mut request_in_flight = None;
        let mut poll_in_flight = None;
        let mut failures = 0u32;
        loop {
            let polling = {
                let mut state = lock(&connection.state);
                if state.closed {
                    return;
                }
                let idle = state.gates.is_empty() && state.pending.is_empty();
                if idle
                    && round > 0
                    && unanswered.is_none()
                    && request_in_flight.is_none()
                    && poll_in_flight.is_none()
                {
                    // Nobody reads there any more: the next reader starts a fresh connection,
                    // so the producer may forget this one.
                    id = self.new_connection_id();
                    (round, acknowledged, poll, received) = (0, 0, 0, 0);
                }
                if unanswered.is_none() && !state.pending.is_empty() {
                    round += 1;
                    unanswered = Some(PartitionRequests {
                        consumer: self.inner.local.clone(),
                        connection: id,
                        round,
                        requests: std::mem::take(&mut state.pending),
                    });
                }
                !state.gates.is_empty()
            };
            if request_in_flight.is_none()
                && let Some(requests) = &unanswered
            {
                request_in_flight =
                    Some(Box::pin(gateway.partition_requests.send(requests.clone())));
            }
            if poll_in_flight.is_none() && polling {
                poll += 1;
                poll_in_flight = Some(Box::pin(gateway.poll_partition_data.send(
                    PollPartitionData {
                        consumer: self.inner.local.clone(),
                        connection: id,
                        poll,
                        received,
                        acknowledged,
                    },
                )));
            }
            // Biased: an unbiased select picks at random, and the simulation must replay.
            let outcome = tokio::select! {
                biased;
                () = connection.wake.notified() => Ok(()),
                answer = async { request_in_flight.as_mut().expect("guarded").await },
                    if request_in_flight.is_some() =>
                {
                    request_in_flight = None;
                    answer
                        .map(|_acknowledge| {
                            acknowledged = unanswered.take().map_or(acknowledged, |r| r.round);
                            failures = 0;
                        })
                        .map_err(Broken::Ask)
                }
                answer = async { poll_in_flight.as_mut().expect("guarded").await },
                    if poll_in_flight.is_some() =>
                {
                    poll_in_flight = None;
                    match answer {
                        Ok(data) if data.forgotten => {
                            Err(Broken::Forgotten)
                        }
                        Ok(data) => {
                            failures = 0;
                            if !data.channels.is_empty() {
                                received = data.seq;
                                self.dispatch(data.channels);
                                // Other connections' answers that arrived together are
                                // dispatched in this turn; their gates are woken once after.
                                tokio::task::yield_now().await;
                                self.wake();
                            }
                            Ok(())
                        }
                        Err(error) => Err(Broken::Ask(error)),
                    }
                }
            };
            let reason = match outcome {
                Ok(()) => continue,
                Err(Broken::Ask(error)) => {
                    failures += 1;
                    if failures < RECONNECT_ATTEMPTS {
                        tokio::time::sleep(RECONNECT_BACKOFF * 2u32.pow(failures - 1)).await;
                        continue;
                    }
                    // The transport's error (a closed mailbox, a timeout) is logged here; the
                    // gates say what it means.
                    log::warn!(
                        "data connection to {} broke after {failures} failed asks: {error}",
                        connection.address
                    );
                    format!(
                        "the data connection broke and could not be re-established ({failures} \
                         attempts; connection reset or TaskManager unreachable)"
                    )
                }
                Err(Broken::Forgotten) => "it no longer knows this TaskManager's subscriptions \
                     (it restarted, and its partitions with it)"
                    .to_owned(),
            };
            // Broken for good: every gate reading there fails; later gates start afresh.
            let gates: Vec<u32> = {
                let mut state = lock(&connection.state);
                state.pending.clear();
                std::mem::take(&mut state.gates).into_keys().collect()
            };
            {
                let inboxes = lock(&self.inner.gates);
                for gate in gates {
                    if let Some(inbox) = inboxes.get(&gate) {
                        inbox.deliver([Delivery::ConnectionLost(
                            connection.address.clone(),
                            reason.clone(),
                        )]);
                    }
                }
            }
            id = self.new_connection_id();
            (round, acknowledged, poll, received, failures) = (0, 0, 0, 0, 0);
            unanswered = None;
            request_in_flight = None;
            poll_in_flight = None;
        }
    }
}

/// Why a connection gives up.
enum Broken {
    /// An ask failed (one of [`RECONNECT_ATTEMPTS`] in a row).
    Ask(actix::MailboxError),
    /// The producer's TaskManager does not know the connection's acknowledged subscriptions.
    Forgotten,
}

impl DataConnection {
    /// Queues `requests` of `gate` (which reads here from now on) and wakes the connection.
    pub fn submit(&self, gate: u32, requests: &mut Vec<PartitionRequest>) {
        let mut state = lock(&self.state);
        state.gates.insert(gate, ());
        state.pending.append(requests);
        drop(state);
        self.wake.notify_one();
    }
}

/// Takes a lock even if a thread panicked while holding it.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
