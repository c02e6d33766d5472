//! The consumer side of a task: [`InputGate`] reads every input channel of the task (all its
//! incoming edges, as Flink's union gate) and hands out whichever buffer arrives first — it never
//! waits on one channel while another has data.
//!
//! A channel on this TaskManager is read straight from the [`PartitionStore`] (a pipelined
//! buffer moves, it is not copied); the gate waits on the store's wake-up when it has caught up.
//! A channel on another TaskManager is subscribed once through this TaskManager's
//! [`NetworkClient`] (one data connection per producer TaskManager, shared by every task here)
//! and its news arrives in the gate's [`GateInbox`].
//!
//! Credit-based flow control: a channel has `buffers-per-channel` exclusive buffers, and the
//! gate `floating-buffers-per-gate` more, lent to channels whose producer reports a backlog. A
//! channel is read only while it has credit (buffers received and not yet consumed count
//! against it; a remote channel's producer sends only within the credit the gate granted), so
//! a fast producer fills at most its consumer's buffers and its own subpartition's capacity,
//! then waits: backpressure, not memory.
//!
//! Waiting has no time limit. A channel fails only when its producer is really gone, and the
//! error names the producer's TaskManager and the reason: the data connection broke and
//! [`RECONNECT_ATTEMPTS`](super::client::RECONNECT_ATTEMPTS) asks in a row could not get
//! through, the partition was released or failed there, or it never appeared within
//! [`PARTITION_REQUEST_TIMEOUT`].

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;

use super::NetworkSettings;
use super::buffer::Buffer;
use super::client::{DataConnection, Delivery, GateInbox, NetworkClient, channel_key};
use super::metrics::TaskIoMetrics;
use super::partition::{Fetch, PartitionStore};
use super::server::FETCH_BYTES;
use crate::env::TaskBlocker;
use crate::fixed_hash::FixedHashMap;
use crate::messages::deployment::InputGate as GateDescriptor;
use crate::messages::task_manager::{ChannelResponse, PartitionRequest};
use crate::messages::{ActorAddress, ResultPartitionId};
use crate::operators::OperatorError;
use crate::task_blocking::{Cancellation, block_on};

/// How long a consumer keeps asking for a partition its producer has not created yet
/// (deployment is concurrent: Flink's `taskmanager.network.request-backoff.max`, 10 s).
pub const PARTITION_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a cancelled producer's partitions fail: its consumers end CANCELED, not FAILED.
pub const PRODUCER_CANCELLED: &str = "producer cancelled";

/// What a gate did, for the task's metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GateStats {
    /// Records read.
    pub records_in: u64,
    /// Their serialized bytes.
    pub bytes_in: u64,
    /// Buffers received.
    pub buffers_in: u64,
    /// Buffers received and not yet consumed (the gate's buffers in use).
    pub buffers_queued: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// May be read now (has credit).
    Ready,
    /// A local wake-up is registered.
    Waiting,
    /// Remote: subscribed; its news comes through the inbox.
    Subscribed,
    /// No credit left: read again when one of its buffers is consumed.
    NoCredit,
    /// Its partition is not there yet (the producer is being deployed): asked again shortly.
    Retry,
    /// Its producer finished and everything was read.
    Finished,
}

struct Channel {
    partition: ResultPartitionId,
    subpartition: u32,
    /// Its producer TaskManager's data connection (an index into the gate's), or `None` for a
    /// channel read locally.
    connection: Option<u32>,
    local: bool,
    /// Remote: buffers granted in all (the producer is told the running total).
    granted: u64,
    /// Remote: buffers received in all.
    received: u64,
    next_batch: u64,
    state: State,
    /// Buffers received and not yet consumed.
    queued: u32,
    /// The producer's last reported backlog.
    backlog: u64,
    /// Floating buffers the gate lent this channel (its window is its exclusive buffers plus
    /// these).
    floating: u32,
    /// Queued in the gate's `floating_waiters`.
    wants_floating: bool,
    /// The producer's TaskManager has answered for this partition once: from then on an unknown
    /// partition was released, not yet to be deployed.
    seen: bool,
    waited: Duration,
}

type LocalWait = Pin<Box<dyn Future<Output = usize> + Send>>;

enum Event {
    Local(usize),
    Remote,
    Cancelled,
}

/// See the module docs.
pub struct InputGate {
    store: Arc<PartitionStore>,
    settings: NetworkSettings,
    cancellation: Arc<Cancellation>,
    channels: Vec<Channel>,
    local_address: ActorAddress,
    network: NetworkClient,
    /// This gate's id at the network client, and where its remote news arrives.
    gate_id: u32,
    inbox: Arc<GateInbox>,
    /// The data connections of its remote channels, each with requests not handed over yet.
    connections: Vec<(Arc<DataConnection>, Vec<PartitionRequest>)>,
    /// Positions in `connections` with requests queued.
    dirty: Vec<u32>,
    /// Remote channels subscribed and not finished.
    subscribed: usize,
    /// Local channels whose partition is not there yet.
    retrying: Vec<usize>,
    queue: VecDeque<(usize, Buffer)>,
    /// Channels not finished.
    open: usize,
    /// Floating buffers not lent to any channel.
    floating_free: u32,
    /// Channels whose backlog asks for more floating buffers than they got, oldest first.
    floating_waiters: VecDeque<usize>,
    /// Local channels to read now.
    to_fetch: VecDeque<usize>,
    local_waits: FuturesUnordered<LocalWait>,
    retry_backoff: Duration,
    stats: GateStats,
    metrics: Arc<TaskIoMetrics>,
}

impl InputGate {
    /// A gate over every channel of `gates`; remote ones are subscribed through `network`,
    /// which has a connection to every producer TaskManager other than `local` (opened by the
    /// TaskManager actor before the task starts).
    pub fn new(
        gates: &[GateDescriptor],
        local: &ActorAddress,
        network: &NetworkClient,
        store: Arc<PartitionStore>,
        settings: NetworkSettings,
        cancellation: Arc<Cancellation>,
        metrics: Arc<TaskIoMetrics>,
    ) -> Result<Self, OperatorError> {
        let (gate_id, inbox) = network.register_gate();
        let mut gate = Self {
            store,
            settings,
            cancellation,
            open: 0,
            channels: Vec::new(),
            local_address: local.clone(),
            network: network.clone(),
            gate_id,
            inbox,
            connections: Vec::new(),
            dirty: Vec::new(),
            subscribed: 0,
            retrying: Vec::new(),
            queue: VecDeque::new(),
            floating_free: settings.floating_buffers_per_gate,
            floating_waiters: VecDeque::new(),
            to_fetch: VecDeque::new(),
            local_waits: FuturesUnordered::new(),
            retry_backoff: Duration::from_millis(1),
            stats: GateStats::default(),
            metrics,
        };
        let mut by_address: FixedHashMap<&ActorAddress, u32> = FixedHashMap::default();
        let credit = gate.settings.buffers_per_channel;
        for descriptor in gates {
            for producer in descriptor.producers.locations() {
                let index = gate.channels.len();
                let is_local = producer.task_manager == *local;
                let connection = if is_local {
                    gate.to_fetch.push_back(index);
                    None
                } else {
                    let position = match by_address.get(&producer.task_manager) {
                        Some(&position) => position,
                        None => {
                            let connection =
                                network.connection(&producer.task_manager).ok_or_else(|| {
                                    OperatorError::InputUnavailable(format!(
                                        "cannot reach TaskManager {} holding {}: no data \
                                         connection to it",
                                        producer.task_manager, producer.partition
                                    ))
                                })?;
                            let position = gate.connections.len() as u32;
                            gate.connections.push((connection, Vec::new()));
                            by_address.insert(&producer.task_manager, position);
                            position
                        }
                    };
                    gate.request(
                        position,
                        PartitionRequest::Subscribe {
                            channel: channel_key(gate_id, index as u32),
                            partition: producer.partition,
                            subpartition: descriptor.subpartition,
                            credit,
                        },
                    );
                    gate.subscribed += 1;
                    Some(position)
                };
                gate.channels.push(Channel {
                    partition: producer.partition,
                    subpartition: descriptor.subpartition,
                    connection,
                    local: is_local,
                    granted: if is_local { 0 } else { u64::from(credit) },
                    received: 0,
                    next_batch: 0,
                    state: if is_local {
                        State::Ready
                    } else {
                        State::Subscribed
                    },
                    queued: 0,
                    backlog: 0,
                    floating: 0,
                    wants_floating: false,
                    seen: false,
                    waited: Duration::ZERO,
                });
            }
        }
        gate.open = gate.channels.len();
        gate.send_requests();
        Ok(gate)
    }

    /// The TaskManager holding `channel`'s partition.
    fn task_manager(&self, channel: &Channel) -> &ActorAddress {
        match channel.connection {
            Some(position) => &self.connections[position as usize].0.address,
            None => &self.local_address,
        }
    }

    /// What it did so far.
    pub fn stats(&self) -> GateStats {
        GateStats {
            buffers_queued: self.queue.len() as u64,
            ..self.stats
        }
    }

    /// The next buffer of whichever channel has one, waiting as long as it takes; `None` once
    /// every channel has finished.
    pub fn next_buffer(
        &mut self,
        blocker: &dyn TaskBlocker,
    ) -> Result<Option<Buffer>, OperatorError> {
        loop {
            if let Some((channel, buffer)) = self.queue.pop_front() {
                self.consumed(channel);
                self.send_requests();
                let (records, bytes) = (u64::from(buffer.records()), buffer.len() as u64);
                self.stats.records_in += records;
                self.stats.bytes_in += bytes;
                self.metrics.read(records, bytes);
                self.metrics.set_buffers_in_use(self.queue.len() as u64);
                return Ok(Some(buffer));
            }
            if self.open == 0 {
                return Ok(None);
            }
            if self.cancellation.is_cancelled() {
                return Err(OperatorError::Cancelled);
            }
            while let Some(channel) = self.to_fetch.pop_front() {
                self.fetch_local(channel)?;
            }
            self.send_requests();
            if !self.queue.is_empty() || self.open == 0 {
                continue;
            }
            if !self.retrying.is_empty() {
                // A producer still being deployed: look again after a short pause (no timer
                // can run inside a task's wait, so the pause is the blocker's).
                if !blocker.sleep(self.retry_backoff) {
                    return Err(OperatorError::Cancelled);
                }
                let pause = self.retry_backoff;
                self.retry_backoff = (self.retry_backoff * 2).min(Duration::from_millis(100));
                for index in std::mem::take(&mut self.retrying) {
                    let channel = &mut self.channels[index];
                    if channel.state == State::Retry {
                        channel.waited += pause;
                        channel.state = State::Ready;
                        self.to_fetch.push_back(index);
                    }
                }
                // Whatever arrived meanwhile is handled before the next pause.
                while let Some(event) = self.poll_now() {
                    self.handle(event)?;
                }
                continue;
            }
            if self.local_waits.is_empty() && self.subscribed == 0 {
                // Every open channel has no credit although no buffer is queued: cannot happen
                // (consuming a buffer restores credit); fail rather than spin.
                let states: Vec<String> = self
                    .channels
                    .iter()
                    .map(|c| {
                        format!(
                            "{}@{}:{:?}/{}",
                            c.partition,
                            self.task_manager(c),
                            c.state,
                            c.queued
                        )
                    })
                    .collect();
                return Err(OperatorError::Failed(format!(
                    "input gate has {} open channels but nothing to wait for: {}",
                    self.open,
                    states.join(", ")
                )));
            }
            let event = self.wait(blocker)?;
            self.handle(event)?;
        }
    }

    /// A buffer of `channel` was consumed: its credit grows back (or a floating buffer it no
    /// longer needs goes back to the gate).
    fn consumed(&mut self, index: usize) {
        let channel = &mut self.channels[index];
        channel.queued = channel.queued.saturating_sub(1);
        if channel.state == State::NoCredit {
            channel.state = State::Ready;
            if channel.local {
                self.to_fetch.push_back(index);
            }
        }
        self.settle(index);
    }

    /// Buffers `index` holds or may still receive: queued ones plus credit the producer has not
    /// used yet.
    fn in_use(&self, index: usize) -> u32 {
        let channel = &self.channels[index];
        let outstanding = if channel.state == State::Subscribed {
            u32::try_from(channel.granted.saturating_sub(channel.received)).unwrap_or(u32::MAX)
        } else {
            0
        };
        channel.queued.saturating_add(outstanding)
    }

    /// Lends floating buffers to a channel with a backlog, or takes back those it has no use
    /// for (Flink's `RemoteInputChannel`: required buffers = backlog + exclusive), then grants
    /// whatever credit its window has room for. Freed floating buffers go to the channels
    /// waiting for them, oldest first.
    fn settle(&mut self, index: usize) {
        self.settle_one(index);
        while self.floating_free > 0 {
            let Some(waiter) = self.floating_waiters.pop_front() else {
                break;
            };
            self.channels[waiter].wants_floating = false;
            self.settle_one(waiter);
        }
    }

    fn settle_one(&mut self, index: usize) {
        let exclusive = self.settings.buffers_per_channel;
        let in_use = self.in_use(index);
        let free = self.floating_free;
        let channel = &mut self.channels[index];
        let wanted = if channel.state == State::Finished {
            0
        } else {
            u32::try_from(channel.backlog)
                .unwrap_or(u32::MAX)
                .min(self.settings.floating_buffers_per_gate)
        };
        if channel.floating > wanted {
            // Only what the window has free: credit granted cannot be taken back.
            let unused = (exclusive + channel.floating).saturating_sub(in_use);
            let back = (channel.floating - wanted).min(unused);
            channel.floating -= back;
            self.floating_free += back;
        } else if channel.floating < wanted {
            let lent = (wanted - channel.floating).min(free);
            channel.floating += lent;
            self.floating_free -= lent;
            if channel.floating < wanted && !channel.wants_floating {
                channel.wants_floating = true;
                self.floating_waiters.push_back(index);
            }
        }
        self.grant(index);
    }

    /// Tells a remote channel's producer of the buffers it may send now, if more than it knows.
    fn grant(&mut self, index: usize) {
        let channel = &self.channels[index];
        let Some(position) = channel.connection else {
            return;
        };
        if channel.state != State::Subscribed {
            return;
        }
        let credit = self.credit(index);
        if credit == 0 {
            return;
        }
        let channel = &mut self.channels[index];
        channel.granted += u64::from(credit);
        let granted = channel.granted;
        self.request(
            position,
            PartitionRequest::Credit {
                channel: channel_key(self.gate_id, index as u32),
                granted,
            },
        );
    }

    /// Queues a request for the connection at `position`, handed over at the next
    /// [`send_requests`](Self::send_requests).
    fn request(&mut self, position: u32, request: PartitionRequest) {
        let requests = &mut self.connections[position as usize].1;
        if requests.is_empty() {
            self.dirty.push(position);
        }
        requests.push(request);
    }

    /// Buffers `channel` may receive now: its window (exclusive buffers plus the floating ones
    /// lent to it) less those it holds or was promised.
    fn credit(&self, index: usize) -> u32 {
        (self.settings.buffers_per_channel + self.channels[index].floating)
            .saturating_sub(self.in_use(index))
    }

    fn receive(&mut self, index: usize, buffers: Vec<Buffer>) {
        for buffer in buffers {
            if buffer.is_empty() {
                continue;
            }
            let channel = &mut self.channels[index];
            channel.queued += 1;
            channel.received += 1;
            self.stats.buffers_in += 1;
            self.queue.push_back((index, buffer));
            self.metrics.set_buffers_in_use(self.queue.len() as u64);
        }
    }

    fn fetch_local(&mut self, index: usize) -> Result<(), OperatorError> {
        if self.channels[index].state != State::Ready {
            return Ok(());
        }
        let credit = self.credit(index);
        if credit == 0 {
            self.channels[index].state = State::NoCredit;
            return Ok(());
        }
        let channel = &self.channels[index];
        let fetch = self.store.fetch_with_credit(
            channel.partition,
            channel.subpartition,
            channel.next_batch,
            FETCH_BYTES,
            credit as usize,
        );
        let response = match fetch {
            Fetch::Ready {
                batches,
                next_batch,
                finished,
            } => ChannelResponse::Data {
                backlog: self
                    .store
                    .backlog(channel.partition, channel.subpartition, next_batch),
                batches,
                next_batch,
                finished,
            },
            Fetch::Pending(wake) => {
                self.channels[index].state = State::Waiting;
                self.channels[index].seen = true;
                self.local_waits.push(Box::pin(async move {
                    // Woken by an append, the end or a failure; a dropped sender (released)
                    // wakes it too: the next fetch tells which.
                    let _ = wake.await;
                    index
                }));
                return Ok(());
            }
            Fetch::Failed(reason) => ChannelResponse::Failed(reason),
            Fetch::Unknown => ChannelResponse::Unknown,
            Fetch::Listening => unreachable!("a local read registers no listener"),
        };
        self.apply(index, response)
    }

    /// Hands the requests gathered since the last time (subscriptions, credit) to their data
    /// connections.
    fn send_requests(&mut self) {
        for position in std::mem::take(&mut self.dirty) {
            let (connection, requests) = &mut self.connections[position as usize];
            if !requests.is_empty() {
                connection.submit(self.gate_id, requests);
            }
        }
    }

    /// Waits for the first local wake-up, remote answer or cancellation.
    fn wait(&mut self, blocker: &dyn TaskBlocker) -> Result<Event, OperatorError> {
        let mut local = std::mem::take(&mut self.local_waits);
        let inbox = Arc::clone(&self.inbox);
        let cancellation = Arc::clone(&self.cancellation);
        let waited = block_on(blocker, async move {
            let event = std::future::poll_fn(|cx| {
                if cancellation.poll_cancelled(cx) {
                    return Poll::Ready(Event::Cancelled);
                }
                if let Poll::Ready(Some(index)) = local.poll_next_unpin(cx) {
                    return Poll::Ready(Event::Local(index));
                }
                if inbox.poll_ready(cx) {
                    return Poll::Ready(Event::Remote);
                }
                Poll::Pending
            })
            .await;
            (local, event)
        });
        let Some((local, event)) = waited else {
            return Err(OperatorError::Cancelled);
        };
        self.local_waits = local;
        Ok(event)
    }

    /// An event that is already there, without waiting.
    fn poll_now(&mut self) -> Option<Event> {
        use futures_util::FutureExt;
        if let Some(Some(index)) = self.local_waits.next().now_or_never() {
            return Some(Event::Local(index));
        }
        let waker = futures_util::task::noop_waker();
        if self
            .inbox
            .poll_ready(&mut std::task::Context::from_waker(&waker))
        {
            return Some(Event::Remote);
        }
        None
    }

    fn handle(&mut self, event: Event) -> Result<(), OperatorError> {
        match event {
            Event::Cancelled => Err(OperatorError::Cancelled),
            Event::Local(index) => {
                if self.channels[index].state == State::Waiting {
                    self.channels[index].state = State::Ready;
                    self.to_fetch.push_back(index);
                }
                Ok(())
            }
            Event::Remote => {
                for delivery in self.inbox.take() {
                    match delivery {
                        Delivery::Channel(index, response) => {
                            let index = index as usize;
                            if self
                                .channels
                                .get(index)
                                .is_some_and(|c| c.state == State::Subscribed)
                            {
                                self.apply(index, response)?;
                            }
                        }
                        Delivery::ConnectionLost(address, reason) => {
                            let open = self.channels.iter().find(|c| {
                                c.state == State::Subscribed
                                    && c.connection.is_some_and(|p| {
                                        self.connections[p as usize].0.address == address
                                    })
                            });
                            if let Some(channel) = open {
                                let partition = channel.partition;
                                return Err(OperatorError::PartitionNotFound {
                                    partition,
                                    message: format!(
                                        "TaskManager {address} holding {partition} is gone: {reason}"
                                    ),
                                });
                            }
                        }
                    }
                }
                Ok(())
            }
        }
    }

    /// Applies one channel's news.
    fn apply(&mut self, index: usize, response: ChannelResponse) -> Result<(), OperatorError> {
        if !matches!(response, ChannelResponse::Unknown) {
            self.channels[index].seen = true;
        }
        match response {
            ChannelResponse::Data {
                batches,
                next_batch,
                finished,
                backlog,
            } => {
                let channel = &mut self.channels[index];
                channel.next_batch = next_batch;
                channel.backlog = backlog;
                let remote = !channel.local;
                if finished {
                    channel.state = State::Finished;
                    self.open -= 1;
                    if remote {
                        self.subscribed -= 1;
                    }
                } else if channel.local {
                    channel.state = State::Ready;
                    self.to_fetch.push_back(index);
                }
                self.receive(index, batches);
                // A backlog may earn floating buffers; the end gives them back.
                self.settle(index);
                Ok(())
            }
            // Flink's CancelTaskException: a consumer whose producer was cancelled is being
            // cancelled with it (its own CancelTask may still be on the way).
            ChannelResponse::Failed(reason) if reason == PRODUCER_CANCELLED => {
                Err(OperatorError::Cancelled)
            }
            ChannelResponse::Failed(reason) => {
                let channel = &self.channels[index];
                Err(OperatorError::InputUnavailable(format!(
                    "{} on TaskManager {} failed: {reason}",
                    channel.partition,
                    self.task_manager(channel)
                )))
            }
            ChannelResponse::Released => {
                let channel = &self.channels[index];
                Err(OperatorError::PartitionNotFound {
                    partition: channel.partition,
                    message: format!(
                        "{} on TaskManager {} was released",
                        channel.partition,
                        self.task_manager(channel)
                    ),
                })
            }
            ChannelResponse::Unknown if !self.channels[index].local => {
                // The producer's TaskManager waited for it as long as a local channel would.
                let channel = &self.channels[index];
                Err(OperatorError::PartitionNotFound {
                    partition: channel.partition,
                    message: format!(
                        "{} is not on TaskManager {} (waited {PARTITION_REQUEST_TIMEOUT:?})",
                        channel.partition,
                        self.task_manager(channel)
                    ),
                })
            }
            ChannelResponse::Unknown => {
                let waited = self.channels[index].waited;
                let message = {
                    let channel = &self.channels[index];
                    if channel.seen {
                        Some(format!(
                            "{} on TaskManager {} was released",
                            channel.partition,
                            self.task_manager(channel)
                        ))
                    } else if waited < PARTITION_REQUEST_TIMEOUT {
                        None
                    } else {
                        Some(format!(
                            "{} is not on TaskManager {} (waited {waited:?})",
                            channel.partition,
                            self.task_manager(channel)
                        ))
                    }
                };
                match message {
                    None => {
                        self.channels[index].state = State::Retry;
                        self.retrying.push(index);
                        Ok(())
                    }
                    Some(message) => Err(OperatorError::PartitionNotFound {
                        partition: self.channels[index].partition,
                        message,
                    }),
                }
            }
        }
    }
}

impl Drop for InputGate {
    /// The gate's remote channels still open are cancelled at their producers, and the gate
    /// leaves its data connections.
    fn drop(&mut self) {
        let mut open: Vec<Vec<u64>> = vec![Vec::new(); self.connections.len()];
        for (index, channel) in self.channels.iter().enumerate() {
            if let Some(position) = channel.connection
                && channel.state == State::Subscribed
            {
                open[position as usize].push(channel_key(self.gate_id, index as u32));
            }
        }
        let cancels = std::mem::take(&mut self.connections)
            .into_iter()
            .zip(open)
            .map(|((connection, _), channels)| (connection, channels))
            .collect();
        self.network.unregister_gate(self.gate_id, cancels);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::NodeRng;
    use crate::exchange::partition::tests::AppendRecords;
    use crate::messages::deployment::{ProducerLocation, Producers};
    use crate::messages::ids::ExecutionAttemptId;
    use crate::operators::{Record, Value};
    use crate::task_blocking::ThreadBlocker;

    fn partition(n: u128) -> ResultPartitionId {
        ResultPartitionId {
            producer: ExecutionAttemptId::from_u128(n),
            edge: 0,
        }
    }

    /// Flink's credit model: a channel with a backlog borrows floating buffers up to the
    /// gate's pool and gives them back as its backlog drains; the gate never holds more than
    /// its exclusive buffers plus the pool.
    #[test]
    fn a_backlogged_channel_borrows_floating_buffers_and_gives_them_back() {
        let store = Arc::new(PartitionStore::new(std::env::temp_dir(), usize::MAX));
        let (busy, quiet) = (partition(1), partition(2));
        store.create(busy, 1).unwrap();
        store.create(quiet, 1).unwrap();
        for i in 0..20 {
            let record = Record {
                key: format!("k{i}"),
                value: Value::Int(i),
            };
            store.append_records(busy, 0, vec![record]).unwrap();
        }
        store.append_records(quiet, 0, vec![]).unwrap();
        store.finish(busy).unwrap();
        store.finish(quiet).unwrap();
        let local = ActorAddress::new("local", "taskmanager/tm");
        let settings = NetworkSettings {
            buffers_per_channel: 2,
            floating_buffers_per_gate: 3,
            ..NetworkSettings::default()
        };
        let descriptor = GateDescriptor {
            edge: 0,
            subpartition: 0,
            producers: Producers::own(
                [busy, quiet]
                    .into_iter()
                    .map(|partition| ProducerLocation {
                        partition,
                        task_manager: local.clone(),
                    })
                    .collect(),
            ),
        };
        let mut gate = InputGate::new(
            &[descriptor],
            &local,
            &NetworkClient::new(local.clone(), NodeRng::seed_from_u64(1)),
            store,
            settings,
            Arc::default(),
            Arc::default(),
        )
        .unwrap();
        let mut records = 0;
        let mut most_held = 0;
        while let Some(buffer) = gate.next_buffer(&ThreadBlocker).unwrap() {
            if records == 0 {
                // Two exclusive buffers read, a backlog of 18 reported: all three floating
                // ones lent, and read at once.
                assert_eq!(gate.channels[0].floating, 3);
                assert_eq!(gate.floating_free, 0);
            }
            records += buffer.records();
            // The one just handed out counts until the next call.
            most_held = most_held.max(gate.queue.len() + 1);
        }
        assert_eq!(records, 20);
        assert_eq!(
            most_held,
            2 + 3,
            "the busy channel's exclusive and floating buffers"
        );
        assert_eq!(gate.floating_free, 3, "every floating buffer came back");
        assert!(gate.channels.iter().all(|c| c.floating == 0));
    }
}
