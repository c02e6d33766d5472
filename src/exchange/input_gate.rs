//! The consumer side of a task: [`InputGate`] reads every input channel of the task (all its
//! incoming edges, as Flink's union gate) and hands out whichever buffer arrives first — it never
//! waits on one channel while another has data.
//!
//! Channels are subscribed group by group through this TaskManager's [`NetworkClient`] (one
//! data connection per producer TaskManager, shared by every task here; one subscription per
//! producer TaskManager and incoming edge), and their news arrives in the gate's [`GateInbox`]:
//! data channel by channel, and how each partition ended once for all the channels that had no
//! data. Channels on this TaskManager end the same way, through its connection to itself
//! (direct calls of its partition server), so that 2,500 local channels of a gate that stay
//! empty cost one notice per partition, not 2,500 reads and wake-ups; but a local channel that
//! gets data (the store tells the gate, which reads its subpartition index of the edge here) is
//! read straight from the [`ResultPartitionManager`] (Flink's `LocalInputChannel`: a buffer moves, it
//! is not copied, and no other thread stands between producer and consumer). The gate keeps
//! state only for channels that got data, and one bit per channel for the finished ones, so a
//! gate of 10,000 channels that mostly stay empty is small.
//!
//! Credit-based flow control (see `credit`): a channel has `buffers-per-channel` exclusive
//! buffers, and the gate `floating-buffers-per-gate` more, lent to channels whose producer
//! reports a backlog — or, for a gate whose channels' exclusive buffers would not fit its share
//! of the TaskManager's network buffers, only floating ones, lent to channels whose producer
//! announced a backlog. A channel is read only while it has credit (buffers received and not yet consumed count
//! against it; a remote channel's producer sends only within the credit the gate granted), so
//! a fast producer fills at most its consumer's buffers and its own subpartition's capacity,
//! then waits: backpressure, not memory.
//!
//! Waiting has no time limit. A channel fails only when its producer is really gone, and the
//! error names the producer's TaskManager and the reason: the data connection broke and
//! [`RECONNECT_ATTEMPTS`](super::client::RECONNECT_ATTEMPTS) asks in a row could not get
//! through, the partition was released or failed there, or it never appeared within
//! [`PARTITION_REQUEST_TIMEOUT`] (the producer's TaskManager waits that long for it).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;

use super::NetworkSettings;
use super::buffer::Buffer;
use super::buffer_pool::Floor;
use super::client::{
    ClientSet, Delivery, GateInbox, Grouping, Leaving, NetworkClient, PartitionRequestClient,
    channel_key,
};
use super::error::ExchangeError;
use super::metrics::TaskIoMetrics;
use super::partition::{Fetch, ReadyQueue, ResultPartitionManager};
use super::server::FETCH_BYTES;
use crate::base::hash::FixedHashMap;
use crate::base::index_table::IndexTable;
use crate::env::TaskBlocker;
use crate::env::task_blocking::{Cancellation, block_on};
use crate::messages::deployment::InputGateDeploymentDescriptor;
use crate::messages::task_manager::{ChannelResponse, PartitionEnd, PartitionRequest};
use crate::messages::{ActorAddress, ResultPartitionId};

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
    /// Channels were still open: the task stopped reading before every input ended.
    pub ended_early: bool,
}

/// The channels of one incoming edge whose partitions are on one TaskManager: numbered
/// `base..base + partitions.len()` in the gate.
struct Group {
    base: u32,
    /// The input (incoming edge, in the descriptor's order) its channels belong to.
    input: u32,
    partitions: Arc<Vec<ResultPartitionId>>,
    subpartition: u32,
    /// Its data connection (an index into the gate's).
    connection: u32,
    /// The set it reads there.
    set: Arc<ClientSet>,
    /// On this TaskManager: where its partitions are looked up, and its edge.
    local: Option<(Arc<Grouping>, usize, u32)>,
    /// Bytes of buffers sent without credit that it consumed in all (told the producer as a
    /// running total), and how many of them were told.
    eager_returned: u64,
    eager_told: u64,
}

/// A channel on this TaskManager that got data: read straight from the store. Its partition
/// and subpartition are its group's (not kept here: a wide gate holds a thousand of these).
struct LocalRead {
    next_buffer: u64,
    state: LocalState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LocalState {
    /// May be read now.
    Ready,
    /// Its subpartition's wake-up is registered.
    Waiting,
    /// No credit left: read again when one of its buffers is consumed.
    NoCredit,
}

/// What [`InputGate::next_event`] hands out.
#[derive(Debug)]
pub enum GateEvent {
    /// A buffer of input `input` (the task's incoming edges, in its descriptor's order).
    Buffer {
        /// Which input.
        input: usize,
        /// Its records, serialized.
        buffer: Buffer,
    },
    /// Every channel of this input has finished and its last buffer was handed out.
    InputEnded(usize),
}

/// One input's progress, for telling its end exactly once and after its last buffer.
#[derive(Debug, Clone, Copy, Default)]
struct InputState {
    open: usize,
    queued: usize,
    told: bool,
}

impl InputState {
    fn ended_untold(&self) -> bool {
        self.open == 0 && self.queued == 0 && !self.told
    }
}

/// A channel that got data.
struct Channel {
    /// Its producer TaskManager's data connection (an index into the gate's).
    connection: u32,
    /// Buffers granted in all (the producer is told the running total).
    granted: u64,
    /// Buffers received in all.
    received: u64,
    /// Its producer finished and everything was read.
    finished: bool,
    /// Buffers received and not yet consumed.
    queued: u32,
    /// The producer's last reported backlog.
    backlog: u64,
    /// Floating buffers the gate lent this channel (its window is its exclusive buffers plus
    /// these).
    floating: u32,
    /// Queued in the gate's `floating_waiters`.
    wants_floating: bool,
    /// On this TaskManager: how it is read.
    local: Option<LocalRead>,
}

impl Channel {
    /// A channel that got its first data, with `granted` buffers granted at the subscription.
    fn new(connection: u32, granted: u64, local: Option<LocalRead>) -> Self {
        Self {
            connection,
            granted,
            received: 0,
            finished: false,
            queued: 0,
            backlog: 0,
            floating: 0,
            wants_floating: false,
            local,
        }
    }
}

type LocalWait = Pin<Box<dyn Future<Output = usize> + Send>>;

/// See the module docs.
pub struct InputGate {
    store: Arc<ResultPartitionManager>,
    /// Where the store tells which local partitions got data in a group's subpartition (the
    /// group's number is the key).
    announced: Arc<ReadyQueue>,
    cancellation: Arc<Cancellation>,
    /// The channels that got data, by index (a vector once most did, see [`IndexTable`]).
    channels: IndexTable<Channel>,
    groups: Vec<Group>,
    /// One bit per channel: finished.
    finished: Vec<u64>,
    network: NetworkClient,
    /// This gate's id at the network client, and where its remote news arrives.
    gate_id: u32,
    inbox: Arc<GateInbox>,
    /// The data connections of its channels, each with requests not handed over yet.
    connections: Vec<(Arc<PartitionRequestClient>, Vec<PartitionRequest>)>,
    /// Positions in `connections` with requests queued.
    dirty: Vec<u32>,
    /// Channels not finished.
    open: usize,
    /// Per input: channels not finished, buffers queued, and whether its end was reported.
    inputs: Vec<InputState>,
    /// Of those, the ones that got data (with a state of their own).
    served: usize,
    /// Channels finished empty by the notices taken from the inbox, counted as the client
    /// counts them ([`finished_empty`](super::client::finished_empty)).
    inbox_finished: u64,
    /// Buffers received, with their channel and, for one sent without credit, the eager bytes
    /// consuming it gives back (`Some(0)` for all but the last buffer of an answer).
    queue: VecDeque<(usize, Buffer, Option<u64>)>,
    /// Bytes each set subscription's producer may send without credit.
    eager: u64,
    /// Groups with eager bytes given back to tell now.
    eager_dirty: Vec<u32>,
    /// Its network buffers, and whether its channels have exclusive credit.
    budget: credit::GateBudget,
    /// Floating buffers not lent to any channel.
    floating_free: u32,
    /// Channels whose backlog asks for more floating buffers than they got, oldest first.
    floating_waiters: VecDeque<usize>,
    /// Local channels to read now.
    to_fetch: VecDeque<usize>,
    local_waits: FuturesUnordered<LocalWait>,
    stats: GateStats,
    metrics: Arc<TaskIoMetrics>,
}

impl InputGate {
    /// A gate over every channel of `gates` (their producers grouped by TaskManager in
    /// `groupings`, or here if that is empty), subscribed through `network`, which has a
    /// connection to every producer TaskManager, its own included (opened by the TaskManager
    /// actor before the task starts).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        gates: &[InputGateDeploymentDescriptor],
        groupings: &[Arc<Grouping>],
        network: &NetworkClient,
        store: Arc<ResultPartitionManager>,
        settings: NetworkSettings,
        floor: Floor,
        cancellation: Arc<Cancellation>,
        metrics: Arc<TaskIoMetrics>,
    ) -> Result<Self, ExchangeError> {
        let channels: usize = gates.iter().map(|g| g.producers.locations().len()).sum();
        let (budget, floating_free) = credit::GateBudget::new(floor, &settings, channels);
        let (gate_id, inbox) = network.register_gate();
        let mut gate = Self {
            store,
            announced: Arc::default(),
            cancellation,
            open: 0,
            inputs: vec![InputState::default(); gates.len()],
            channels: IndexTable::new(0),
            groups: Vec::new(),
            finished: Vec::new(),
            network: network.clone(),
            gate_id,
            inbox,
            connections: Vec::new(),
            dirty: Vec::new(),
            served: 0,
            inbox_finished: 0,
            queue: VecDeque::new(),
            eager: 0,
            eager_dirty: Vec::new(),
            budget,
            floating_free,
            floating_waiters: VecDeque::new(),
            to_fetch: VecDeque::new(),
            local_waits: FuturesUnordered::new(),
            stats: GateStats::default(),
            metrics,
        };
        let mut by_address: FixedHashMap<ActorAddress, u32> = FixedHashMap::default();
        let credit = gate.budget.exclusive;
        let mut told = Vec::new();
        let mut wake = Vec::new();
        let mut total = 0u32;
        // Set subscriptions, sent once the eager allowance is split between them.
        let mut subscriptions = Vec::new();
        for (i, descriptor) in gates.iter().enumerate() {
            let grouping = groupings.get(i).cloned().unwrap_or_else(|| {
                network.grouping(descriptor.producers.id(), descriptor.producers.locations())
            });
            for (number, (address, partitions)) in grouping.groups.iter().enumerate() {
                let base = total;
                total += partitions.len() as u32;
                let group = gate.groups.len() as u32;
                let position = match by_address.get(address) {
                    Some(&position) => position,
                    None => {
                        let connection = network.connection(address).ok_or_else(|| {
                            ExchangeError::Unreachable {
                                address: address.clone(),
                                partition: partitions[0],
                            }
                        })?;
                        let position = gate.connections.len() as u32;
                        gate.connections.push((connection, Vec::new()));
                        by_address.insert(address.clone(), position);
                        position
                    }
                };
                let (set, ended) = gate.connections[position as usize].0.join_set(
                    descriptor.producers.id(),
                    descriptor.edge,
                    partitions,
                    gate_id,
                    group,
                    descriptor.subpartition,
                );
                let local = address == network.local();
                if local {
                    // Only the set's notices come through the connection; the data is read here.
                    wake.push(position);
                } else {
                    subscriptions.push((
                        position,
                        channel_key(gate_id, base),
                        set.number,
                        descriptor.subpartition,
                    ));
                }
                gate.inputs[i].open += partitions.len();
                gate.groups.push(Group {
                    base,
                    input: i as u32,
                    partitions: partitions.clone(),
                    subpartition: descriptor.subpartition,
                    connection: position,
                    set,
                    local: local.then(|| (grouping.clone(), number, descriptor.edge)),
                    eager_returned: 0,
                    eager_told: 0,
                });
                if !ended.is_empty() {
                    told.push((group, ended));
                }
            }
        }
        if subscriptions.is_empty() && gate.budget.eager > 0 {
            // Every channel is local: the eager buffer floats again.
            gate.budget.eager = 0;
            gate.floating_free += 1;
        }
        let eager = u32::try_from(gate.budget.eager / subscriptions.len().max(1) as u64)
            .unwrap_or(u32::MAX);
        gate.eager = u64::from(eager);
        for (position, channels, set, subpartition) in subscriptions {
            gate.request(
                position,
                PartitionRequest::SubscribeSet {
                    channels,
                    set,
                    subpartition,
                    credit,
                    eager,
                },
            );
        }
        gate.finished = vec![0; (total as usize).div_ceil(64)];
        // Every index the bit set has room for (a delivery's index is checked against it).
        let indices = u32::try_from(gate.finished.len() * 64).expect("a gate has < 2³² channels");
        gate.channels = IndexTable::new(indices);
        gate.open = total as usize;
        gate.send_requests();
        for position in wake {
            // It names the sets joined (and polls for their notices) from now on.
            gate.connections[position as usize]
                .0
                .submit(gate_id, &mut Vec::new());
        }
        // How partitions of sets other gates read here ended before this one joined.
        for (group, ended) in told {
            gate.ended(group, &ended)?;
        }
        // The local partitions that have data in this gate's subpartitions already; the store
        // tells of the others when they get some.
        for group in 0..gate.groups.len() {
            if let Some((_, _, edge)) = gate.groups[group].local {
                let subpartition = gate.groups[group].subpartition;
                let with_data =
                    gate.store
                        .add_reader(edge, subpartition, &gate.announced, group as u64);
                for partition in with_data {
                    gate.local_data(group, partition);
                }
            }
        }
        Ok(gate)
    }

    /// Local `partition` has data in group `group`'s subpartition: its channel is read from
    /// now on (unless the partition is another list's of the same edge).
    fn local_data(&mut self, group: usize, partition: ResultPartitionId) {
        let group = &self.groups[group];
        let Some((grouping, number, _)) = &group.local else {
            return;
        };
        let Some(member) = grouping.position(*number, partition) else {
            return;
        };
        let index = group.base + member;
        if self.is_finished(index) || self.channels.contains(index) {
            return;
        }
        let read = LocalRead {
            next_buffer: 0,
            state: LocalState::Ready,
        };
        self.channels
            .get_or_insert_with(index, || Channel::new(group.connection, 0, Some(read)));
        self.served += 1;
        self.to_fetch.push_back(index as usize);
    }

    /// The group of channel `index`.
    fn group_of(&self, index: u32) -> &Group {
        &self.groups[self.group_number(index)]
    }

    /// The position in `groups` of channel `index`'s group.
    fn group_number(&self, index: u32) -> usize {
        self.groups.partition_point(|g| g.base <= index) - 1
    }

    fn is_finished(&self, index: u32) -> bool {
        self.finished[index as usize / 64] & (1 << (index % 64)) != 0
    }

    /// Channel `index` is done (its producer finished and it read everything).
    fn finish(&mut self, index: u32) {
        let input = self.group_of(index).input as usize;
        if self.mark_finished(index, input)
            && let Some(channel) = self.channels.get_mut(index)
        {
            channel.finished = true;
            self.served -= 1;
        }
    }

    /// Channel `index` of input `input` finished without data: it has no state of its own
    /// (only a channel that got data has one), so no look-up — at P = 10,000 a notice finishes
    /// thousands of channels at once.
    fn finish_empty(&mut self, index: u32, input: usize) {
        self.mark_finished(index, input);
        debug_assert!(
            !self.channels.contains(index),
            "channel {index} got data, but its partition ended without data for it"
        );
    }

    /// Sets channel `index`'s finished bit; whether it was open.
    fn mark_finished(&mut self, index: u32, input: usize) -> bool {
        let word = &mut self.finished[index as usize / 64];
        let bit = 1 << (index % 64);
        if *word & bit != 0 {
            return false;
        }
        *word |= bit;
        self.open -= 1;
        self.inputs[input].open -= 1;
        true
    }

    /// Partitions of group `group`'s set ended: its channels that had no data are finished, and
    /// one whose partition failed or is gone fails the gate.
    fn ended(&mut self, group: u32, notices: &[(u32, PartitionEnd)]) -> Result<(), ExchangeError> {
        let (base, subpartition, input) = {
            let group = &self.groups[group as usize];
            (group.base, group.subpartition, group.input as usize)
        };
        for (member, end) in notices {
            let index = base + member;
            if self.is_finished(index) {
                continue;
            }
            match end {
                PartitionEnd::Finished { with_data } => {
                    if !with_data.contains(subpartition) {
                        self.finish_empty(index, input);
                    }
                    // Otherwise its data and its end come channel by channel.
                }
                PartitionEnd::Failed(reason) => {
                    return Err(self.lost(index, ChannelResponse::Failed(reason.clone())));
                }
                PartitionEnd::Released => return Err(self.lost(index, ChannelResponse::Released)),
                PartitionEnd::Unknown => return Err(self.lost(index, ChannelResponse::Unknown)),
            }
        }
        Ok(())
    }

    /// The partition of channel `index` and the TaskManager holding it.
    fn producer(&self, index: u32) -> (ResultPartitionId, &ActorAddress) {
        let group = self.group_of(index);
        let partition = group.partitions[(index - group.base) as usize];
        (
            partition,
            &self.connections[group.connection as usize].0.address,
        )
    }

    /// Why the gate fails: the producer of channel `index` failed, was released or never
    /// appeared.
    fn lost(&self, index: u32, response: ChannelResponse) -> ExchangeError {
        let (partition, address) = self.producer(index);
        match response {
            // Flink's CancelTaskException: a consumer whose producer was cancelled is being
            // cancelled with it (its own CancelTasks may still be on the way).
            ChannelResponse::Failed(reason) if reason == PRODUCER_CANCELLED => {
                ExchangeError::Cancelled
            }
            ChannelResponse::Failed(reason) => ExchangeError::ProducerFailed {
                partition,
                address: address.clone(),
                reason,
            },
            ChannelResponse::Unknown => ExchangeError::PartitionNotFound {
                partition,
                message: format!(
                    "{partition} is not on TaskManager {address} (waited \
                     {PARTITION_REQUEST_TIMEOUT:?})"
                ),
            },
            ChannelResponse::Released | ChannelResponse::Data { .. } => {
                ExchangeError::PartitionNotFound {
                    partition,
                    message: format!("{partition} on TaskManager {address} was released"),
                }
            }
        }
    }

    fn ch(&self, index: usize) -> &Channel {
        self.channels
            .get(index as u32)
            .expect("a channel with state")
    }

    fn ch_mut(&mut self, index: usize) -> &mut Channel {
        self.channels
            .get_mut(index as u32)
            .expect("a channel with state")
    }

    /// What it did so far.
    pub fn stats(&self) -> GateStats {
        GateStats {
            buffers_queued: self.queue.len() as u64,
            ended_early: self.open > 0,
            ..self.stats
        }
    }

    /// The next buffer of whichever channel has one, waiting as long as it takes; `None` once
    /// every channel has finished. Which input a buffer came from, and when an input ended, is
    /// [`next_event`](Self::next_event)'s.
    pub fn next_buffer(
        &mut self,
        blocker: &dyn TaskBlocker,
    ) -> Result<Option<Buffer>, ExchangeError> {
        loop {
            match self.next_event(blocker)? {
                Some(GateEvent::Buffer { buffer, .. }) => return Ok(Some(buffer)),
                Some(GateEvent::InputEnded(_)) => {}
                None => return Ok(None),
            }
        }
    }

    /// The next buffer of whichever channel has one, with the input it belongs to, or the end
    /// of an input (after its last buffer); waits as long as it takes; `None` once every channel
    /// has finished and every input's end was told.
    pub fn next_event(
        &mut self,
        blocker: &dyn TaskBlocker,
    ) -> Result<Option<GateEvent>, ExchangeError> {
        loop {
            if let Some((channel, buffer, eager)) = self.queue.pop_front() {
                let input = self.group_of(channel as u32).input as usize;
                self.inputs[input].queued -= 1;
                match eager {
                    None => self.consumed(channel),
                    Some(bytes) => self.eager_consumed(channel, bytes),
                }
                self.send_requests();
                let (records, bytes) = (u64::from(buffer.records()), buffer.len() as u64);
                self.stats.records_in += records;
                self.stats.bytes_in += bytes;
                self.metrics.read(records, bytes);
                self.metrics.set_buffers_in_use(self.queue.len() as u64);
                return Ok(Some(GateEvent::Buffer { input, buffer }));
            }
            if let Some(input) = self.inputs.iter().position(InputState::ended_untold) {
                self.inputs[input].told = true;
                return Ok(Some(GateEvent::InputEnded(input)));
            }
            if self.open == 0 {
                return Ok(None);
            }
            if self.cancellation.is_cancelled() {
                return Err(ExchangeError::Cancelled);
            }
            for (group, partition) in self.announced.take_all().announced {
                self.local_data(group as usize, partition);
            }
            while let Some(channel) = self.to_fetch.pop_front() {
                self.fetch_local(channel)?;
            }
            self.tell_eager();
            self.send_requests();
            if !self.queue.is_empty() || self.open == 0 {
                continue;
            }
            if let Some(index) = self.wait(blocker)?
                && let Some(read) = self.ch_mut(index).local.as_mut()
                && read.state == LocalState::Waiting
            {
                read.state = LocalState::Ready;
                self.to_fetch.push_back(index);
            }
            self.take_inbox()?;
        }
    }

    /// How many inputs (incoming edges) the gate reads.
    pub fn inputs(&self) -> usize {
        self.inputs.len()
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

    /// Queues the buffers of channel `index`: within its credit, or (`eager` > 0) sent without
    /// credit, taking `eager` bytes of its set subscription's allowance until the last of them
    /// is consumed.
    fn receive(&mut self, index: usize, buffers: Vec<Buffer>, eager: u64) {
        let last = buffers.iter().rposition(|buffer| !buffer.is_empty());
        if eager > 0 && last.is_none() {
            self.eager_consumed(index, eager);
        }
        for (position, buffer) in buffers.into_iter().enumerate() {
            if buffer.is_empty() {
                continue;
            }
            let held = if eager > 0 {
                Some(if Some(position) == last { eager } else { 0 })
            } else {
                let channel = self
                    .channels
                    .get_mut(index as u32)
                    .expect("a channel with state");
                channel.queued += 1;
                channel.received += 1;
                None
            };
            self.stats.buffers_in += 1;
            let input = self.group_of(index as u32).input as usize;
            self.inputs[input].queued += 1;
            self.queue.push_back((index, buffer, held));
            self.metrics.set_buffers_in_use(self.queue.len() as u64);
        }
    }

    /// A buffer of channel `index` sent without credit was consumed: `bytes` of its set
    /// subscription's eager allowance go back (told with the next requests).
    fn eager_consumed(&mut self, index: usize, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let number = self.group_number(index as u32);
        let group = &mut self.groups[number];
        let untold = group.eager_returned - group.eager_told;
        group.eager_returned += bytes;
        // Told once a quarter of the allowance is back (or the gate waits: `tell_eager`),
        // not for every small buffer.
        let quarter = (self.eager / 4).max(1);
        if untold < quarter && untold + bytes >= quarter {
            self.eager_dirty.push(number as u32);
        }
    }

    /// Every eager byte consumed is told (the gate is about to wait: its producers may be
    /// waiting for room).
    fn tell_eager(&mut self) {
        for (number, group) in self.groups.iter().enumerate() {
            if group.eager_returned > group.eager_told
                && !self.eager_dirty.contains(&(number as u32))
            {
                self.eager_dirty.push(number as u32);
            }
        }
    }

    /// Hands the requests gathered since the last time (subscriptions, credit) to their data
    /// connections.
    fn send_requests(&mut self) {
        for number in std::mem::take(&mut self.eager_dirty) {
            let group = &mut self.groups[number as usize];
            group.eager_told = group.eager_returned;
            let (position, returned) = (group.connection, group.eager_returned);
            let channels = channel_key(self.gate_id, group.base);
            self.request(
                position,
                PartitionRequest::EagerReturned { channels, returned },
            );
        }
        for position in std::mem::take(&mut self.dirty) {
            let (connection, requests) = &mut self.connections[position as usize];
            if !requests.is_empty() {
                connection.submit(self.gate_id, requests);
            }
        }
    }

    /// Reads local channel `index` from the store, within its credit.
    fn fetch_local(&mut self, index: usize) -> Result<(), ExchangeError> {
        let credit = self.credit(index);
        let channel = self.ch_mut(index);
        let finished = channel.finished;
        let Some(read) = channel.local.as_mut() else {
            return Ok(());
        };
        if finished || read.state != LocalState::Ready {
            return Ok(());
        }
        let from = read.next_buffer;
        let (partition, _) = self.producer(index as u32);
        let subpartition = self.group_of(index as u32).subpartition;
        let fetch = self.store.fetch_with_credit(
            partition,
            subpartition,
            from,
            FETCH_BYTES,
            credit as usize,
        );
        match fetch {
            Fetch::Ready {
                buffers,
                next_buffer,
                finished,
                backlog,
            } => {
                let channel = self.ch_mut(index);
                channel.backlog = backlog;
                if let Some(read) = channel.local.as_mut() {
                    read.next_buffer = next_buffer;
                }
                if finished {
                    self.finish(index as u32);
                } else {
                    // More may be there already (read once the queue is empty).
                    self.to_fetch.push_back(index);
                }
                self.receive(index, buffers, 0);
                // A backlog may earn floating buffers; the end gives them back.
                self.settle(index);
                Ok(())
            }
            Fetch::Pending(wake) => {
                if let Some(read) = self.ch_mut(index).local.as_mut() {
                    read.state = LocalState::Waiting;
                }
                self.local_waits.push(Box::pin(async move {
                    // Woken by an append, the end or a failure; a dropped sender (released)
                    // wakes it too: the next fetch tells which.
                    let _ = wake.await;
                    index
                }));
                Ok(())
            }
            Fetch::Backlog(backlog) => {
                // No credit: lent some for the backlog, it is read again (or waits for some).
                let channel = self.ch_mut(index);
                channel.backlog = backlog;
                if let Some(read) = channel.local.as_mut() {
                    read.state = LocalState::NoCredit;
                }
                self.settle(index);
                Ok(())
            }
            Fetch::Failed(reason) => Err(self.lost(index as u32, ChannelResponse::Failed(reason))),
            // It had data, so it was here: it was released.
            Fetch::Unknown => Err(self.lost(index as u32, ChannelResponse::Released)),
            Fetch::Listening => unreachable!("a local read registers no listener"),
        }
    }

    /// Waits until a local channel's wake-up fires (`Some(index)`), something was delivered or
    /// announced (`None`), or the task is cancelled.
    fn wait(&mut self, blocker: &dyn TaskBlocker) -> Result<Option<usize>, ExchangeError> {
        // Notices that only finish empty channels wake this thread once they finish all the
        // channels it waits for without data; anything else wakes it at once.
        self.inbox
            .wake_at(self.inbox_finished + (self.open - self.served) as u64);
        let mut local = std::mem::take(&mut self.local_waits);
        let inbox = Arc::clone(&self.inbox);
        let announced = Arc::clone(&self.announced);
        let cancellation = Arc::clone(&self.cancellation);
        let waited = block_on(blocker, async move {
            let mut news = std::pin::pin!(announced.wait());
            let event = std::future::poll_fn(|cx| {
                if cancellation.poll_cancelled(cx) {
                    return Poll::Ready(Err(ExchangeError::Cancelled));
                }
                if let Poll::Ready(Some(index)) = local.poll_next_unpin(cx) {
                    return Poll::Ready(Ok(Some(index)));
                }
                if news.as_mut().poll(cx).is_ready() || inbox.poll_ready(cx) {
                    return Poll::Ready(Ok(None));
                }
                Poll::Pending
            })
            .await;
            (local, event)
        });
        let Some((local, event)) = waited else {
            return Err(ExchangeError::Cancelled);
        };
        self.local_waits = local;
        event
    }

    /// Applies everything delivered to the inbox.
    fn take_inbox(&mut self) -> Result<(), ExchangeError> {
        let deliveries = self.inbox.take();
        // Room for every channel of the batch at once, not table after table as the first
        // data of a wide gate's channels comes in (each larger table was fresh pages: at
        // P = 1,000 the faults were 5 % of the job's CPU). Never past the gate's channels.
        let news = deliveries
            .iter()
            .filter(|delivery| matches!(delivery, Delivery::Channel(..)))
            .count();
        let unserved = self.finished.len() * 64 - self.channels.len();
        self.channels.reserve(news.min(unserved));
        for delivery in deliveries {
            match delivery {
                Delivery::Channel(index, response) => {
                    if index as usize >= self.finished.len() * 64 || self.is_finished(index) {
                        continue;
                    }
                    if !self.channels.contains(index) {
                        // Its first data: from now on it has a state of its own.
                        let group = self.group_of(index);
                        if group.local.is_some() {
                            continue; // read here, never served through the connection
                        }
                        let connection = group.connection;
                        let granted = u64::from(self.budget.exclusive);
                        self.channels
                            .get_or_insert_with(index, || Channel::new(connection, granted, None));
                        self.served += 1;
                    }
                    self.apply(index as usize, response)?;
                }
                Delivery::Ended {
                    group,
                    notices,
                    finished_empty,
                } => {
                    self.inbox_finished += finished_empty;
                    self.ended(group, &notices)?;
                }
                Delivery::ConnectionLost(address, reason) => {
                    let open = self.groups.iter().find_map(|group| {
                        if self.connections[group.connection as usize].0.address != address {
                            return None;
                        }
                        (0..group.partitions.len() as u32)
                            .find(|member| !self.is_finished(group.base + member))
                            .map(|member| group.partitions[member as usize])
                    });
                    if let Some(partition) = open {
                        return Err(ExchangeError::PartitionNotFound {
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

    /// Applies one channel's news.
    fn apply(&mut self, index: usize, response: ChannelResponse) -> Result<(), ExchangeError> {
        match response {
            ChannelResponse::Data {
                buffers,
                finished,
                backlog,
                eager,
                ..
            } => {
                self.ch_mut(index).backlog = backlog;
                if finished {
                    self.finish(index as u32);
                }
                self.receive(index, buffers, eager);
                // A backlog may earn floating buffers; the end gives them back.
                self.settle(index);
                Ok(())
            }
            ChannelResponse::Failed(_) | ChannelResponse::Released | ChannelResponse::Unknown => {
                Err(self.lost(index as u32, response))
            }
        }
    }
}

impl Drop for InputGate {
    /// The gate's remote channels still open are cancelled at their producers, and the gate
    /// leaves its sets and data connections. Ended before every channel did (an operator that
    /// stops reading early, a failure, a cancel), it releases the subpartitions it left unread,
    /// so their producers discard what they still write instead of waiting for room for ever.
    fn drop(&mut self) {
        let early = self.open > 0;
        let mut leaving: Vec<Leaving> = std::mem::take(&mut self.connections)
            .into_iter()
            .map(|(connection, _)| (connection, Vec::new(), Vec::new()))
            .collect();
        for (index, channel) in self.channels.iter() {
            if !channel.finished && channel.local.is_none() {
                leaving[channel.connection as usize]
                    .1
                    .push(PartitionRequest::Cancel {
                        channel: channel_key(self.gate_id, index),
                    });
            }
        }
        for (number, group) in self.groups.iter().enumerate() {
            let (_, requests, sets) = &mut leaving[group.connection as usize];
            let unread: Vec<u32> = if early {
                (0..group.partitions.len() as u32)
                    .filter(|&member| !self.is_finished(group.base + member))
                    .collect()
            } else {
                Vec::new()
            };
            match group.local {
                Some((_, _, edge)) => {
                    for &member in &unread {
                        self.store.release_subpartition(
                            group.partitions[member as usize],
                            group.subpartition,
                        );
                    }
                    self.store.remove_reader(
                        edge,
                        group.subpartition,
                        &self.announced,
                        number as u64,
                    );
                }
                None => {
                    if !unread.is_empty() {
                        requests.push(PartitionRequest::ReleaseSet {
                            set: group.set.number,
                            subpartition: group.subpartition,
                            members: unread,
                        });
                    }
                    requests.push(PartitionRequest::CancelSet {
                        channels: channel_key(self.gate_id, group.base),
                    });
                }
            }
            sets.push(group.set.clone());
        }
        self.network.unregister_gate(self.gate_id, leaving);
    }
}

mod credit;
#[cfg(test)]
mod tests;
