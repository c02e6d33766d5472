//! The consumer side of the data connections: a TaskManager's [`NetworkClient`] holds one
//! [`PartitionRequestClient`] per producer TaskManager its tasks read from (Flink's
//! `PartitionRequestClient`), shared by every input gate of every task here.
//!
//! The partitions of one producer list held by one producer TaskManager are named to it once
//! per connection (a [`ClientSet`], shared by every gate here reading that list); a gate
//! subscribes to its subpartition of a whole set at once and then grants credit, channel by
//! channel, to those that get data. How each partition of a set ended comes once per
//! connection and goes to every gate reading the set. The connection carries what all gates
//! asked for in one [`PartitionRequests`] at a time
//! (numbered, sent again until answered), and keeps one [`PollPartitionData`] in flight while
//! any gate reads there. Each answer's channels go to their gates' [`GateInbox`]es. So the
//! messages between two TaskManagers grow with the data and with how often gates ask, not
//! with channels or tasks: the end of every channel between them may travel in one answer.
//!
//! The TaskManager has a connection to itself too, whose asks are direct calls of its
//! [`PartitionRequestServer`] ([`Peer::Local`]): through it a gate hears how the local
//! partitions it reads ended, one notice per partition like remote ones, so local channels
//! that stay empty cost nothing of their own (the gate reads local data straight from the
//! store).
//!
//! A connection is broken when [`RECONNECT_ATTEMPTS`] asks in a row fail (each re-dials the peer
//! with the transport's own backoff): every gate reading there is told, names the producer's
//! TaskManager and the reason, and fails; the connection starts afresh for later gates.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures_util::task::AtomicWaker;

use crate::base::hash::FixedHashMap;
use crate::base::ids::DataConnectionId;
use crate::base::ids::ProducerListId;
use crate::base::rng::NodeRng;
use crate::messages::ActorAddress;
use crate::messages::ResultPartitionId;
use crate::messages::deployment::ProducerLocation;
use crate::messages::task_manager::{
    ChannelResponse, PartitionData, PartitionEnd, PartitionNotice, PartitionRequest,
    PartitionRequests, PollPartitionData, TaskManagerGateway,
};

use super::partition::ResultPartitionManager;
use super::server::PartitionRequestServer;

/// Asks in a row to a producer's TaskManager that may fail before its data connection counts as
/// broken for good.
pub const RECONNECT_ATTEMPTS: u32 = 3;

/// The pause after the first failed ask; it doubles after each further one.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(100);

/// About the most bytes one round of requests carries; the rest go in the next rounds (a
/// round is sent once the one before it is answered). Far below the transport's largest
/// message (16 MiB): at P = 10,000 the `ReleaseSet`s of 2,500 gates cancelled together came to
/// 17.5 MB in one round, and the connection broke (issue 32).
pub const ROUND_BYTES: usize = 4 << 20;

/// The oldest of `pending` that fit in `budget` bytes (at least one), taken out in order.
fn next_round(pending: &mut Vec<PartitionRequest>, budget: usize) -> Vec<PartitionRequest> {
    // Generous sizes of their encoding: a partition id is at most 22 bytes, a number at most
    // 9 (a varint), an enum tag 1.
    let size = |request: &PartitionRequest| match request {
        PartitionRequest::Set { members, .. } => 32 + 24 * members.len(),
        PartitionRequest::ReleaseSet { members, .. } => 32 + 5 * members.len(),
        _ => 32,
    };
    super::take_within(pending, budget, size)
}

/// Where a data connection's asks go.
#[derive(Debug, Clone)]
pub enum Peer {
    /// Another TaskManager, through the transport.
    Remote(TaskManagerGateway),
    /// This TaskManager's own partitions: its server, called directly (not through its
    /// mailbox, where local data would queue behind deployments).
    Local(Arc<PartitionRequestServer>, Arc<ResultPartitionManager>),
}

/// An ask in flight.
type Ask<T> = Pin<Box<dyn Future<Output = Result<T, actix::MailboxError>>>>;

impl Peer {
    fn requests(&self, requests: PartitionRequests) -> Ask<()> {
        match self {
            Self::Remote(gateway) => {
                let sent = gateway.partition_requests.send(requests);
                Box::pin(async move { sent.await.map(|_acknowledge| ()) })
            }
            Self::Local(server, store) => {
                server.apply(store, requests);
                Box::pin(std::future::ready(Ok(())))
            }
        }
    }

    fn poll(&self, poll: PollPartitionData) -> Ask<PartitionData> {
        match self {
            Self::Remote(gateway) => Box::pin(gateway.poll_partition_data.send(poll)),
            Self::Local(server, store) => {
                let answer = server.poll(store.clone(), poll);
                Box::pin(async move { Ok(answer.await) })
            }
        }
    }
}

/// A channel's key on the wire: its gate's id and its index there.
pub fn channel_key(gate: u32, channel: u32) -> u64 {
    (u64::from(gate) << 32) | u64::from(channel)
}

/// What a gate hears from its data connections.
#[derive(Debug)]
pub enum Delivery {
    /// News for one of its channels, by index.
    Channel(u32, ChannelResponse),
    /// Partitions of the set the gate's channel group `group` reads ended: `(position in the
    /// set, how)`.
    Ended {
        /// The gate's group.
        group: u32,
        /// The partitions.
        notices: Arc<Vec<(u32, PartitionEnd)>>,
        /// How many of them finish a channel of the group that had no data
        /// ([`finished_empty`]): counted once, here, for the wake-up and the gate alike.
        finished_empty: u64,
    },
    /// The data connection to this producer TaskManager broke for good.
    ConnectionLost(ActorAddress, String),
}

/// The partitions of one producer list that live on one producer TaskManager, as gates here
/// read them: named to it once per connection and shared by every gate reading the list.
#[derive(Debug)]
pub struct ClientSet {
    /// Its number on the connection.
    pub number: u32,
    list: Option<ProducerListId>,
    state: Mutex<SetState>,
}

#[derive(Debug, Default)]
struct SetState {
    /// `(gate, the gate's group, its subpartition)` reading it.
    gates: Vec<(u32, u32, u32)>,
    /// How each member ended, once told.
    ended: Vec<Option<PartitionEnd>>,
    /// `ended` as gates joining late take it, shared until the next news: at P = 10,000
    /// every one of a TaskManager's 2,500 gates joins after most producers ended, and a copy
    /// each (O(P) per gate, O(P²) in all) was half the job's time.
    told: Option<Arc<Ended>>,
}

/// A producer list's partitions grouped by the TaskManager holding them, in the order of first
/// appearance: a gate numbers its channels group by group. Computed once per list and
/// TaskManager (an all-to-all list is shared by every consumer of the edge).
#[derive(Debug)]
pub struct Grouping {
    /// `(TaskManager, its partitions in list order)`.
    pub groups: Vec<(ActorAddress, Arc<Vec<ResultPartitionId>>)>,
    /// Per group, each partition's position, built when first asked for (a gate looks a local
    /// partition up when it gets its first data).
    positions: Vec<std::sync::OnceLock<FixedHashMap<ResultPartitionId, u32>>>,
}

/// Groups up to this size find a partition by searching (no index of their own).
const SMALL_GROUP: usize = 16;

impl Grouping {
    fn of(locations: &[ProducerLocation]) -> Self {
        let mut position: FixedHashMap<&ActorAddress, usize> = FixedHashMap::default();
        let mut groups: Vec<(ActorAddress, Vec<ResultPartitionId>)> = Vec::new();
        for location in locations {
            let index = *position.entry(&location.task_manager).or_insert_with(|| {
                groups.push((location.task_manager.clone(), Vec::new()));
                groups.len() - 1
            });
            groups[index].1.push(location.partition);
        }
        Self {
            positions: groups.iter().map(|_| std::sync::OnceLock::new()).collect(),
            groups: groups
                .into_iter()
                .map(|(address, members)| (address, Arc::new(members)))
                .collect(),
        }
    }

    /// The position of `partition` in group `group`.
    pub fn position(&self, group: usize, partition: ResultPartitionId) -> Option<u32> {
        let members = &self.groups[group].1;
        if members.len() <= SMALL_GROUP {
            return members
                .iter()
                .position(|p| *p == partition)
                .map(|i| i as u32);
        }
        self.positions[group]
            .get_or_init(|| {
                members
                    .iter()
                    .enumerate()
                    .map(|(i, p)| (*p, i as u32))
                    .collect()
            })
            .get(&partition)
            .copied()
    }
}

/// Where a gate's deliveries wait for its task thread.
#[derive(Debug, Default)]
pub struct GateInbox {
    items: Mutex<Vec<Delivery>>,
    waker: AtomicWaker,
    /// The inbox is on its client's list of inboxes to wake.
    queued: AtomicBool,
    /// Channels finished empty by the notices delivered so far ([`finished_empty`]).
    finished_empty: AtomicU64,
    /// The gate's thread is woken for notices that only finish empty channels once
    /// `finished_empty` reaches this: when every remote channel it waits for without data is
    /// finished. At P = 10,000 a gate hears from 100 TaskManagers; waking its thread for each
    /// (a futex call and two context switches) was most of the job's time.
    wake_at: AtomicU64,
}

/// How many of `notices` finish a channel of `subpartition` that had no data: counted alike by
/// the client and the gate.
pub fn finished_empty(notices: &[(u32, PartitionEnd)], subpartition: u32) -> u64 {
    notices
        .iter()
        .filter(|(_, end)| match end {
            PartitionEnd::Finished { with_data } => !with_data.contains(subpartition),
            _ => false,
        })
        .count() as u64
}

impl GateInbox {
    fn deliver(&self, items: impl IntoIterator<Item = Delivery>) {
        self.put(items);
        self.waker.wake();
    }

    fn put(&self, items: impl IntoIterator<Item = Delivery>) {
        lock(&self.items).extend(items);
    }

    /// Before the gate's thread waits: wake it for notices that finish empty channels only
    /// once `finished_empty` reaches `at`.
    pub fn wake_at(&self, at: u64) {
        self.wake_at.store(at, Ordering::SeqCst);
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
    connections: Mutex<FixedHashMap<ActorAddress, Arc<PartitionRequestClient>>>,
    rng: Mutex<NodeRng>,
    /// About the most bytes of requests one round carries.
    round_bytes: usize,
    /// Inboxes given data since their task threads were last woken (see [`NetworkClient::wake`]).
    to_wake: Mutex<Vec<Arc<GateInbox>>>,
    /// The groupings of shared producer lists, while a gate uses them.
    groupings: Mutex<FixedHashMap<ProducerListId, std::sync::Weak<Grouping>>>,
}

/// One consumer TaskManager's connection to one producer TaskManager.
#[derive(Debug)]
pub struct PartitionRequestClient {
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
    /// The sets named on this connection, by number.
    sets: FixedHashMap<u32, Arc<ClientSet>>,
    /// The numbers of the sets of shared producer lists.
    shared: FixedHashMap<ProducerListId, u32>,
    next_set: u32,
    closed: bool,
}

impl NetworkClient {
    /// The client of the TaskManager at `local`; `rng` draws its connection ids.
    pub fn new(local: ActorAddress, rng: NodeRng) -> Self {
        Self::with_round_bytes(local, rng, ROUND_BYTES)
    }

    /// [`Self::new`] with rounds of about `round_bytes` of requests at most (the simulation
    /// makes them tiny).
    pub fn with_round_bytes(local: ActorAddress, rng: NodeRng, round_bytes: usize) -> Self {
        Self {
            inner: Arc::new(ClientInner {
                local,
                gates: Mutex::default(),
                next_gate: AtomicU32::new(1),
                connections: Mutex::default(),
                rng: Mutex::new(rng),
                round_bytes,
                to_wake: Mutex::default(),
                groupings: Mutex::default(),
            }),
        }
    }

    /// The TaskManager whose client this is.
    pub fn local(&self) -> &ActorAddress {
        &self.inner.local
    }

    /// The connection to `address`, if one was opened.
    pub fn connection(&self, address: &ActorAddress) -> Option<Arc<PartitionRequestClient>> {
        lock(&self.inner.connections).get(address).cloned()
    }

    /// Opens a connection to the TaskManager at `address` (reached through `peer`) unless there
    /// is one; the returned future drives it (the TaskManager runs it as a task on its own
    /// thread; [`Self::close`] ends it).
    pub fn connect(
        &self,
        address: &ActorAddress,
        peer: Peer,
    ) -> Option<impl Future<Output = ()> + use<>> {
        let connection = {
            let mut connections = lock(&self.inner.connections);
            if connections.contains_key(address) {
                return None;
            }
            let connection = Arc::new(PartitionRequestClient {
                address: address.clone(),
                state: Mutex::default(),
                wake: tokio::sync::Notify::new(),
            });
            connections.insert(address.clone(), connection.clone());
            connection
        };
        let client = self.clone();
        Some(async move { client.drive(connection, peer).await })
    }

    /// Stops every connection (the TaskManager stops).
    pub fn close(&self) {
        for connection in lock(&self.inner.connections).values() {
            lock(&connection.state).closed = true;
            connection.wake.notify_one();
        }
    }

    /// `locations` grouped by TaskManager; a shared list (`id`) is grouped once while gates
    /// use it.
    pub fn grouping(
        &self,
        id: Option<ProducerListId>,
        locations: &[ProducerLocation],
    ) -> Arc<Grouping> {
        let Some(id) = id else {
            return Arc::new(Grouping::of(locations));
        };
        let mut groupings = lock(&self.inner.groupings);
        if let Some(grouping) = groupings.get(&id).and_then(std::sync::Weak::upgrade) {
            return grouping;
        }
        let grouping = Arc::new(Grouping::of(locations));
        if groupings.len() >= 64 {
            groupings.retain(|_, grouping| grouping.strong_count() > 0);
        }
        groupings.insert(id, Arc::downgrade(&grouping));
        grouping
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

    /// The gate ended: it is forgotten, its last requests (cancellations) go out, and it
    /// leaves its sets (a set no gate reads any more is forgotten at the producer).
    pub fn unregister_gate(&self, gate: u32, leaving: Vec<Leaving>) {
        lock(&self.inner.gates).remove(&gate);
        for (connection, requests, sets) in leaving {
            let mut state = lock(&connection.state);
            state.gates.remove(&gate);
            state.pending.extend(requests);
            for set in sets {
                let mut set_state = lock(&set.state);
                set_state.gates.retain(|(g, _, _)| *g != gate);
                let unread = set_state.gates.is_empty();
                drop(set_state);
                // Only if it is still this connection's (a broken one forgot its sets).
                if unread
                    && state
                        .sets
                        .get(&set.number)
                        .is_some_and(|s| Arc::ptr_eq(s, &set))
                {
                    state.sets.remove(&set.number);
                    if let Some(list) = set.list {
                        state.shared.remove(&list);
                    }
                    state
                        .pending
                        .push(PartitionRequest::ForgetSet { set: set.number });
                }
            }
            drop(state);
            connection.wake.notify_one();
        }
    }

    /// Puts an answer's channels and notices into their gates' inboxes; [`Self::wake`] wakes
    /// the gates.
    fn dispatch(
        &self,
        connection: &PartitionRequestClient,
        channels: Vec<(u64, ChannelResponse)>,
        notices: Vec<PartitionNotice>,
    ) {
        // Each set's news once, for every gate reading it.
        let mut by_set: Vec<(Arc<ClientSet>, Ended)> = Vec::new();
        {
            let state = lock(&connection.state);
            for notice in notices {
                let Some(set) = state.sets.get(&notice.set) else {
                    continue; // forgotten
                };
                match by_set.last_mut() {
                    Some((last, news)) if Arc::ptr_eq(last, set) => {
                        news.push((notice.member, notice.end));
                    }
                    _ => by_set.push((set.clone(), vec![(notice.member, notice.end)])),
                }
            }
        }
        let mut ended: Vec<(u32, Delivery, Option<u64>)> = Vec::new();
        for (set, news) in by_set {
            let mut set_state = lock(&set.state);
            let news: Vec<(u32, PartitionEnd)> = news
                .into_iter()
                .filter(|(member, end)| {
                    match set_state.ended.get_mut(*member as usize) {
                        Some(slot @ None) => {
                            *slot = Some(end.clone());
                            set_state.told = None;
                            true
                        }
                        _ => false, // told before (an answer sent again), or out of range
                    }
                })
                .collect();
            if news.is_empty() {
                continue;
            }
            let news = Arc::new(news);
            // Anything but a channel finished empty (a failure) is news at once.
            let urgent = news
                .iter()
                .any(|(_, end)| !matches!(end, PartitionEnd::Finished { .. }));
            for &(gate, group, subpartition) in &set_state.gates {
                let finishing = finished_empty(&news, subpartition);
                ended.push((
                    gate,
                    Delivery::Ended {
                        group,
                        notices: news.clone(),
                        finished_empty: finishing,
                    },
                    if urgent { None } else { Some(finishing) },
                ));
            }
        }
        let gates = lock(&self.inner.gates);
        let mut to_wake = lock(&self.inner.to_wake);
        // `finishing`: the delivery only finishes that many empty channels; the gate is woken
        // for it only once it has all the ones it waits for (see `GateInbox::wake_at`).
        let mut put = |id: u32, items: Vec<Delivery>, finishing: Option<u64>| {
            if let Some(inbox) = gates.get(&id) {
                inbox.put(items);
                if let Some(finishing) = finishing {
                    let total =
                        inbox.finished_empty.fetch_add(finishing, Ordering::SeqCst) + finishing;
                    if total < inbox.wake_at.load(Ordering::SeqCst) {
                        return;
                    }
                }
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
                        put(id, items, None);
                    }
                    current = Some((gate, vec![delivery]));
                }
            }
        }
        if let Some((id, items)) = current {
            put(id, items, None);
        }
        for (id, delivery, finishing) in ended {
            put(id, vec![delivery], finishing);
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

    /// Poll number `poll` of connection `id`.
    fn poll_of(
        &self,
        id: DataConnectionId,
        poll: u64,
        received: u64,
        acknowledged: u64,
    ) -> PollPartitionData {
        PollPartitionData {
            consumer: self.inner.local.clone(),
            connection: id,
            poll,
            received,
            acknowledged,
        }
    }

    /// Runs one connection: sends requests and keeps a poll in flight while gates read there.
    async fn drive(self, connection: Arc<PartitionRequestClient>, peer: Peer) {
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
                        requests: next_round(&mut state.pending, self.inner.round_bytes),
                    });
                }
                !state.gates.is_empty()
            };
            if request_in_flight.is_none()
                && let Some(requests) = &unanswered
            {
                request_in_flight = Some(peer.requests(requests.clone()));
            }
            if poll_in_flight.is_none() && polling {
                poll += 1;
                poll_in_flight = Some(peer.poll(self.poll_of(id, poll, received, acknowledged)));
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
                        .map(|()| {
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
                            if !data.channels.is_empty() || !data.notices.is_empty() {
                                received = data.seq;
                                // The next poll goes before this answer is handed on, so the
                                // producer prepares the next answer meanwhile.
                                if !lock(&connection.state).gates.is_empty() {
                                    poll += 1;
                                    let next = self.poll_of(id, poll, received, acknowledged);
                                    poll_in_flight = Some(peer.poll(next));
                                }
                                self.dispatch(&connection, data.channels, data.notices);
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
                // The producer forgets them with the connection; later gates name them again.
                state.sets.clear();
                state.shared.clear();
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

#[cfg(test)]
impl NetworkClient {
    /// A client of the TaskManager at `local` with its connection to itself, serving `store`,
    /// driven on this thread (an actix runtime): what a TaskManager opens for its local
    /// channels.
    pub(crate) fn reading_locally(
        local: &ActorAddress,
        store: &Arc<ResultPartitionManager>,
    ) -> Self {
        let network = Self::new(local.clone(), NodeRng::seed_from_u64(1));
        let drive = network
            .connect(local, Peer::Local(Arc::default(), store.clone()))
            .expect("a new connection");
        actix::spawn(drive);
        network
    }
}

/// Why a connection gives up.
enum Broken {
    /// An ask failed (one of [`RECONNECT_ATTEMPTS`] in a row).
    Ask(actix::MailboxError),
    /// The producer's TaskManager does not know the connection's acknowledged subscriptions.
    Forgotten,
}

/// How partitions of a set ended: `(position in the set, how)`.
pub type Ended = Vec<(u32, PartitionEnd)>;

/// A gate leaving one connection: the connection, the gate's last requests there, and the sets
/// it read there.
pub type Leaving = (
    Arc<PartitionRequestClient>,
    Vec<PartitionRequest>,
    Vec<Arc<ClientSet>>,
);

impl PartitionRequestClient {
    /// Makes `gate` (its channel group `group`) a reader of the set of `members` of `edge`:
    /// the set of the shared list `list` if one is named here already, else a new one, named to
    /// the producer before any subscription to it. Returns the set and how its members that
    /// ended so far ended.
    pub fn join_set(
        &self,
        list: Option<ProducerListId>,
        edge: u32,
        members: &Arc<Vec<ResultPartitionId>>,
        gate: u32,
        group: u32,
        subpartition: u32,
    ) -> (Arc<ClientSet>, Arc<Ended>) {
        let mut state = lock(&self.state);
        state.gates.insert(gate, ());
        let existing = list
            .and_then(|list| state.shared.get(&list))
            .and_then(|number| state.sets.get(number))
            .cloned();
        let set = match existing {
            Some(set) => set,
            None => {
                state.next_set = state.next_set.wrapping_add(1);
                let number = state.next_set;
                let set = Arc::new(ClientSet {
                    number,
                    list,
                    state: Mutex::new(SetState {
                        gates: Vec::new(),
                        ended: vec![None; members.len()],
                        told: None,
                    }),
                });
                state.sets.insert(number, set.clone());
                if let Some(list) = list {
                    state.shared.insert(list, number);
                }
                state.pending.push(PartitionRequest::Set {
                    set: number,
                    edge,
                    members: members.clone(),
                });
                set
            }
        };
        // The gate joins the set under the connection's lock (then the set's, the order
        // `unregister_gate` takes them in): released in between, the last other reader could
        // leave, see the set unread and forget it at the producer, and this gate would wait
        // for a set nobody serves (issue 32).
        let mut set_state = lock(&set.state);
        set_state.gates.push((gate, group, subpartition));
        let ended = match &set_state.told {
            Some(told) => told.clone(),
            None => {
                let told: Arc<Ended> = Arc::new(
                    (set_state.ended.iter().enumerate())
                        .filter_map(|(member, end)| end.clone().map(|end| (member as u32, end)))
                        .collect(),
                );
                set_state.told = Some(told.clone());
                told
            }
        };
        drop(set_state);
        drop(state);
        (set, ended)
    }

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

#[cfg(test)]
mod tests;
