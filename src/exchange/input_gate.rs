//! The consumer side of a task: [`InputGate`] reads every input channel of the task (all its
//! incoming edges, as Flink's union gate) and hands out whichever buffer arrives first — it never
//! waits on one channel while another has data.
//!
//! A channel on this TaskManager is read straight from the [`PartitionStore`] (a pipelined
//! buffer moves, it is not copied); the gate waits on the store's wake-up when it has caught up.
//! Channels on another TaskManager are read through that TaskManager's
//! [`PartitionRequestClient`], one request in flight for all of them.
//!
//! Credit-based flow control: a channel has `buffers-per-channel` exclusive buffers, and the
//! gate `floating-buffers-per-gate` more, lent to channels whose producer reports a backlog. A
//! channel is read only while it has credit (buffers received and not yet consumed count
//! against it), so a fast producer fills at most its consumer's buffers and its own
//! subpartition's capacity, then waits: backpressure, not memory.
//!
//! Waiting has no time limit. A channel fails only when its producer is really gone, and the
//! error names the producer's TaskManager and the reason: the data connection broke and
//! [`RECONNECT_ATTEMPTS`] requests in a row could not get through, the partition was released
//! or failed there, or it never appeared within [`PARTITION_REQUEST_TIMEOUT`].

use std::collections::{BTreeMap, VecDeque};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;

use super::NetworkSettings;
use super::client::{PartitionRequestClient, RECONNECT_ATTEMPTS};
use super::metrics::TaskIoMetrics;
use super::partition::{Fetch, PartitionStore, batch_bytes};
use super::server::FETCH_BYTES;
use crate::env::TaskBlocker;
use crate::messages::deployment::InputGate as GateDescriptor;
use crate::messages::task_manager::{
    ChannelResponse, FetchResponse, SubpartitionRead, TaskManagerGateway,
};
use crate::messages::{ActorAddress, ResultPartitionId};
use crate::operators::{OperatorError, Record};
use crate::task_blocking::{Cancellation, block_on};

/// How long a consumer keeps asking for a partition its producer has not created yet
/// (deployment is concurrent: Flink's `taskmanager.network.request-backoff.max`, 10 s).
pub const PARTITION_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a cancelled producer's partitions fail: its consumers end CANCELED, not FAILED.
pub const PRODUCER_CANCELLED: &str = "producer cancelled";

/// The pause before the first request after a failed one; it doubles after each further one.
const RECONNECT_BACKOFF: Duration = Duration::from_millis(100);

/// What a gate did, for the task's metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GateStats {
    /// Records read.
    pub records_in: u64,
    /// Their estimated bytes.
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
    /// A local wake-up is registered, or a remote request carrying it is in flight.
    Waiting,
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
    task_manager: ActorAddress,
    local: bool,
    next_batch: u64,
    state: State,
    /// Buffers received and not yet consumed.
    queued: u32,
    /// The producer's last reported backlog.
    backlog: u64,
    /// The producer's TaskManager has answered for this partition once: from then on an unknown
    /// partition was released, not yet to be deployed.
    seen: bool,
    waited: Duration,
}

type LocalWait = Pin<Box<dyn Future<Output = usize> + Send>>;
type RemoteAnswer = (
    ActorAddress,
    Vec<usize>,
    Result<FetchResponse, actix::MailboxError>,
);
type RemoteWait = Pin<Box<dyn Future<Output = RemoteAnswer> + Send>>;

enum Event {
    Local(usize),
    Remote(RemoteAnswer),
    Cancelled,
}

/// See the module docs.
pub struct InputGate {
    store: Arc<PartitionStore>,
    settings: NetworkSettings,
    cancellation: Arc<Cancellation>,
    channels: Vec<Channel>,
    clients: BTreeMap<ActorAddress, PartitionRequestClient>,
    queue: VecDeque<(usize, Vec<Record>)>,
    /// Channels not finished.
    open: usize,
    /// Floating buffers lent out (buffers queued beyond their channel's exclusive ones).
    floating_used: u32,
    /// Local channels to read now.
    to_fetch: VecDeque<usize>,
    local_waits: FuturesUnordered<LocalWait>,
    remote_waits: FuturesUnordered<RemoteWait>,
    retry_backoff: Duration,
    stats: GateStats,
    metrics: Arc<TaskIoMetrics>,
}

impl InputGate {
    /// A gate over every channel of `gates`; `peers` are the gateways of the producers'
    /// TaskManagers other than `local` (resolved by the TaskManager actor).
    pub fn new(
        gates: &[GateDescriptor],
        local: &ActorAddress,
        peers: &BTreeMap<ActorAddress, TaskManagerGateway>,
        store: Arc<PartitionStore>,
        settings: NetworkSettings,
        cancellation: Arc<Cancellation>,
        metrics: Arc<TaskIoMetrics>,
    ) -> Result<Self, OperatorError> {
        let mut channels = Vec::new();
        let mut clients: BTreeMap<ActorAddress, PartitionRequestClient> = BTreeMap::new();
        for gate in gates {
            for producer in gate.producers.locations() {
                let index = channels.len();
                let is_local = producer.task_manager == *local;
                if !is_local {
                    let client = match clients.get_mut(&producer.task_manager) {
                        Some(client) => client,
                        None => {
                            let gateway = peers.get(&producer.task_manager).ok_or_else(|| {
                                OperatorError::InputUnavailable(format!(
                                    "cannot reach TaskManager {} holding {}: no gateway to it",
                                    producer.task_manager, producer.partition
                                ))
                            })?;
                            clients.entry(producer.task_manager.clone()).or_insert(
                                PartitionRequestClient::new(
                                    producer.task_manager.clone(),
                                    gateway.clone(),
                                ),
                            )
                        }
                    };
                    client.channels.push(index);
                }
                channels.push(Channel {
                    partition: producer.partition,
                    subpartition: gate.subpartition,
                    task_manager: producer.task_manager.clone(),
                    local: is_local,
                    next_batch: 0,
                    state: State::Ready,
                    queued: 0,
                    backlog: 0,
                    seen: false,
                    waited: Duration::ZERO,
                });
            }
        }
        let to_fetch = channels
            .iter()
            .enumerate()
            .filter(|(_, c)| c.local)
            .map(|(i, _)| i)
            .collect();
        Ok(Self {
            store,
            settings,
            cancellation,
            open: channels.len(),
            channels,
            clients,
            queue: VecDeque::new(),
            floating_used: 0,
            to_fetch,
            local_waits: FuturesUnordered::new(),
            remote_waits: FuturesUnordered::new(),
            retry_backoff: Duration::from_millis(1),
            stats: GateStats::default(),
            metrics,
        })
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
    ) -> Result<Option<Vec<Record>>, OperatorError> {
        loop {
            if let Some((channel, buffer)) = self.queue.pop_front() {
                self.consumed(channel);
                let bytes = batch_bytes(&buffer) as u64;
                self.stats.records_in += buffer.len() as u64;
                self.stats.bytes_in += bytes;
                self.metrics.read(buffer.len() as u64, bytes);
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
            let retrying = self.channels.iter().any(|c| c.state == State::Retry);
            if retrying {
                // A producer still being deployed: look again after a short pause (no timer
                // can run inside a task's wait, so the pause is the blocker's).
                if !blocker.sleep(self.retry_backoff) {
                    return Err(OperatorError::Cancelled);
                }
                let pause = self.retry_backoff;
                self.retry_backoff = (self.retry_backoff * 2).min(Duration::from_millis(100));
                for index in 0..self.channels.len() {
                    let channel = &mut self.channels[index];
                    if channel.state == State::Retry {
                        channel.waited += pause;
                        channel.state = State::Ready;
                        if channel.local {
                            self.to_fetch.push_back(index);
                        }
                    }
                }
                // Whatever arrived meanwhile is handled before the next pause.
                while let Some(event) = self.poll_now() {
                    self.handle(event, blocker)?;
                }
                continue;
            }
            if self.local_waits.is_empty() && self.remote_waits.is_empty() {
                // Every open channel has no credit although no buffer is queued: cannot happen
                // (consuming a buffer restores credit); fail rather than spin.
                let states: Vec<String> = self
                    .channels
                    .iter()
                    .map(|c| {
                        format!(
                            "{}@{}:{:?}/{}",
                            c.partition, c.task_manager, c.state, c.queued
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
            self.handle(event, blocker)?;
        }
    }

    /// A buffer of `channel` was consumed: its credit grows back.
    fn consumed(&mut self, index: usize) {
        let exclusive = self.settings.buffers_per_channel;
        let channel = &mut self.channels[index];
        channel.queued = channel.queued.saturating_sub(1);
        if channel.queued >= exclusive {
            self.floating_used = self.floating_used.saturating_sub(1);
        }
        if channel.state == State::NoCredit {
            channel.state = State::Ready;
            if channel.local {
                self.to_fetch.push_back(index);
            }
        }
    }

    /// Buffers `channel` may receive now: its free exclusive ones, plus one floating buffer
    /// while the gate has one and the channel has a backlog (or no exclusive one left).
    fn credit(&mut self, index: usize) -> u32 {
        let exclusive = self.settings.buffers_per_channel;
        let channel = &self.channels[index];
        let mut credit = exclusive.saturating_sub(channel.queued);
        if (channel.backlog > 0 || credit == 0)
            && self.floating_used < self.settings.floating_buffers_per_gate
        {
            credit += 1;
        }
        credit
    }

    fn receive(&mut self, index: usize, buffers: Vec<Vec<Record>>) {
        let exclusive = self.settings.buffers_per_channel;
        for buffer in buffers {
            if buffer.is_empty() {
                continue;
            }
            let channel = &mut self.channels[index];
            if channel.queued >= exclusive {
                self.floating_used += 1;
            }
            channel.queued += 1;
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
        };
        self.apply(index, response)
    }

    /// Sends a request to every producer TaskManager that has none in flight, for its channels
    /// with credit.
    fn send_requests(&mut self) {
        let addresses: Vec<ActorAddress> = self
            .clients
            .iter()
            .filter(|(_, client)| !client.in_flight)
            .map(|(address, _)| address.clone())
            .collect();
        for address in addresses {
            let Some(channel_indices) = self.clients.get(&address).map(|c| c.channels.clone())
            else {
                continue;
            };
            let mut reads = Vec::new();
            let mut asked = Vec::new();
            for index in channel_indices {
                if self.channels[index].state != State::Ready {
                    continue;
                }
                let credit = self.credit(index);
                let channel = &mut self.channels[index];
                if credit == 0 {
                    channel.state = State::NoCredit;
                    continue;
                }
                channel.state = State::Waiting;
                reads.push(SubpartitionRead {
                    partition: channel.partition,
                    subpartition: channel.subpartition,
                    from_batch: channel.next_batch,
                    credit,
                });
                asked.push(index);
            }
            if reads.is_empty() {
                continue;
            }
            let Some(client) = self.clients.get_mut(&address) else {
                continue;
            };
            let answer = client.request(reads);
            self.remote_waits
                .push(Box::pin(async move { (address, asked, answer.await) }));
        }
    }

    /// Waits for the first local wake-up, remote answer or cancellation.
    fn wait(&mut self, blocker: &dyn TaskBlocker) -> Result<Event, OperatorError> {
        let mut local = std::mem::take(&mut self.local_waits);
        let mut remote = std::mem::take(&mut self.remote_waits);
        let cancellation = Arc::clone(&self.cancellation);
        let waited = block_on(blocker, async move {
            let event = std::future::poll_fn(|cx| {
                if cancellation.poll_cancelled(cx) {
                    return Poll::Ready(Event::Cancelled);
                }
                if let Poll::Ready(Some(index)) = local.poll_next_unpin(cx) {
                    return Poll::Ready(Event::Local(index));
                }
                if let Poll::Ready(Some(answer)) = remote.poll_next_unpin(cx) {
                    return Poll::Ready(Event::Remote(answer));
                }
                Poll::Pending
            })
            .await;
            (local, remote, event)
        });
        let Some((local, remote, event)) = waited else {
            return Err(OperatorError::Cancelled);
        };
        self.local_waits = local;
        self.remote_waits = remote;
        Ok(event)
    }

    /// An event that is already there, without waiting.
    fn poll_now(&mut self) -> Option<Event> {
        use futures_util::FutureExt;
        if let Some(Some(index)) = self.local_waits.next().now_or_never() {
            return Some(Event::Local(index));
        }
        if let Some(Some(answer)) = self.remote_waits.next().now_or_never() {
            return Some(Event::Remote(answer));
        }
        None
    }

    fn handle(&mut self, event: Event, blocker: &dyn TaskBlocker) -> Result<(), OperatorError> {
        match event {
            Event::Cancelled => Err(OperatorError::Cancelled),
            Event::Local(index) => {
                if self.channels[index].state == State::Waiting {
                    self.channels[index].state = State::Ready;
                    self.to_fetch.push_back(index);
                }
                Ok(())
            }
            Event::Remote((address, asked, answer)) => {
                let Some(client) = self.clients.get_mut(&address) else {
                    return Ok(());
                };
                client.in_flight = false;
                let response = match answer {
                    Ok(response) => {
                        client.failures = 0;
                        response
                    }
                    Err(_) => {
                        // The transport has logged the cause. Asking again is safe: a
                        // pipelined buffer lost with the broken connection is refused by the
                        // producer's TaskManager, never read as empty.
                        client.failures += 1;
                        let failures = client.failures;
                        for &index in &asked {
                            if self.channels[index].state == State::Waiting {
                                self.channels[index].state = State::Ready;
                            }
                        }
                        if failures >= RECONNECT_ATTEMPTS {
                            let Some(partition) =
                                asked.first().map(|&i| self.channels[i].partition)
                            else {
                                return Err(OperatorError::InputUnavailable(format!(
                                    "the data connection to TaskManager {address} broke"
                                )));
                            };
                            return Err(OperatorError::PartitionNotFound {
                                partition,
                                message: format!(
                                    "TaskManager {address} holding {partition} is gone: the data \
                                     connection broke and could not be re-established ({failures} \
                                     attempts; connection reset or TaskManager unreachable)"
                                ),
                            });
                        }
                        if !blocker.sleep(RECONNECT_BACKOFF * 2u32.pow(failures - 1)) {
                            return Err(OperatorError::Cancelled);
                        }
                        return Ok(());
                    }
                };
                let mut answered = vec![false; asked.len()];
                for (position, channel_response) in response.channels {
                    let Some(&index) = asked.get(position as usize) else {
                        continue; // not one we asked for: ignore
                    };
                    answered[position as usize] = true;
                    self.apply(index, channel_response)?;
                }
                // No news for the others within the hold: ask again.
                for (position, &index) in asked.iter().enumerate() {
                    if !answered[position] && self.channels[index].state == State::Waiting {
                        self.channels[index].state = State::Ready;
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
                if finished {
                    channel.state = State::Finished;
                    self.open -= 1;
                } else {
                    channel.state = State::Ready;
                    if channel.local {
                        self.to_fetch.push_back(index);
                    }
                }
                self.receive(index, batches);
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
                    channel.partition, channel.task_manager
                )))
            }
            ChannelResponse::Unknown => {
                let channel = &mut self.channels[index];
                if channel.seen {
                    Err(OperatorError::PartitionNotFound {
                        partition: channel.partition,
                        message: format!(
                            "{} on TaskManager {} was released",
                            channel.partition, channel.task_manager
                        ),
                    })
                } else if channel.waited < PARTITION_REQUEST_TIMEOUT {
                    channel.state = State::Retry;
                    Ok(())
                } else {
                    Err(OperatorError::PartitionNotFound {
                        partition: channel.partition,
                        message: format!(
                            "{} is not on TaskManager {} (waited {:?})",
                            channel.partition, channel.task_manager, channel.waited
                        ),
                    })
                }
            }
        }
    }
}
