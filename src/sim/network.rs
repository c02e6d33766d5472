//! The simulated network: in-memory byte streams whose frames the simulation delays, loses,
//! reorders and cuts, in virtual time and from one seeded generator.
//!
//! Every node gets a [`SimNodeNetwork`] (a [`Network`]) naming it. A connection is a pair of
//! [`SimStream`]s. Writers cut what they write into frames (the transport's 4-byte length
//! prefix, used by the handshake and the envelopes alike), and each frame travels on its own:
//!
//! ```text
//!  write ─▶ frames ─▶ (cut link or loss: dropped) ─▶ deliver at now + latency
//!                      FIFO per direction (a reordered frame skips the FIFO clamp)
//!  queue: BTreeMap<(delivery time, sequence), event> ── one scheduler task ──▶ reader's pipe
//! ```
//!
//! Ties break on (delivery time, sequence number), so a seed always gives the same order. A
//! direction holds at most [`NetParams::link_capacity`] frames sent but not yet read: a writer
//! then waits, as on a full TCP window, and the transport's bounded queues take over.
//!
//! **Connection epochs.** A connection ends when either side drops or shuts its stream (the
//! peer reads end of stream after the in-flight frames, like a FIN), when the network resets it
//! (both sides fail at once, in-flight frames are lost) or when a node crashes: a *process*
//! crash closes its streams as the kernel would; a *machine* crash leaves them silent, and the
//! peer only learns of it by its heartbeat timeout or by a reset once the node is back.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use futures_util::future::LocalBoxFuture;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

use super::trace::Trace;
use crate::base::rng::NodeRng;
use crate::transport::network::DialError;
use crate::transport::network::{Bound, BoxStream, Listener, Network};

/// How the links behave. Latency is drawn per frame: usually `base`, with a long tail.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NetParams {
    /// The usual one-way latency (uniform in `[base/2, base]`).
    pub base_latency: Duration,
    /// The slow tail: with `tail_probability` a frame takes up to this long.
    pub tail_latency: Duration,
    /// How often a frame takes the tail.
    pub tail_probability: f64,
    /// How often a frame is lost.
    pub loss: f64,
    /// How often a frame may overtake the frames sent before it on its direction.
    pub reorder: f64,
    /// Frames sent and not yet read, per direction, before a writer waits.
    pub link_capacity: usize,
}

impl Default for NetParams {
    fn default() -> Self {
        Self {
            base_latency: Duration::from_millis(2),
            tail_latency: Duration::from_millis(200),
            tail_probability: 0.01,
            loss: 0.0,
            reorder: 0.0,
            link_capacity: 256,
        }
    }
}

/// How a node went down, for what its peers see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashKind {
    /// The process died: the operating system closes its connections (peers read EOF).
    Process,
    /// The machine died or was cut off: nothing tells the peers.
    Machine,
}

/// The network shared by every node of one simulated cluster.
#[derive(Clone)]
pub struct SimNetwork {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the scheduler when an earlier delivery is queued.
    wake: Notify,
}

struct State {
    rng: NodeRng,
    params: NetParams,
    trace: Trace,
    sequence: u64,
    queue: BTreeMap<(Instant, u64), Event>,
    nodes: BTreeMap<String, NodeState>,
    connections: BTreeMap<u64, ConnectionState>,
    next_connection: u64,
    /// Directions (from, to) that deliver nothing (a partition).
    cut: BTreeSet<(String, String)>,
    frames_sent: u64,
    frames_lost: u64,
    /// Of those, frames carrying a `SubmitTasks` or its answer (see [`carries_deployment`]).
    deployments_lost: u64,
    /// Every task a `SubmitTasks` frame carried, while [`SimNetwork::record_deployments`] is on.
    deployments_sent: Option<Vec<DeploymentSent>>,
    /// Whether `SubmitTasks` frames are counted ([`SimNetwork::count_deployments`]).
    count_deployments: bool,
    deployments: DeploymentCounts,
}

/// A task as a `SubmitTasks` frame carried it when written (the HA family judges who still
/// deployed when).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeploymentSent {
    /// When it was written.
    pub at: Instant,
    /// The node that wrote it.
    pub from: String,
    /// The node it was written to.
    pub to: String,
    /// The leader session it was sent under.
    pub leader_session_id: crate::base::ids::LeaderSessionId,
    /// The attempt it deploys.
    pub attempt: crate::base::ids::ExecutionAttemptId,
    /// The attempt's job.
    pub job_id: crate::base::ids::JobId,
    /// Its vertex's name.
    pub vertex: std::sync::Arc<str>,
    /// Its subtask.
    pub subtask: u32,
}

#[derive(Default)]
struct NodeState {
    listener: Option<mpsc::UnboundedSender<(SimStream, String)>>,
    /// Whether the node runs (crashed nodes accept and answer nothing).
    up: bool,
    /// A machine crash: its connections say nothing when dropped.
    silent: bool,
}

struct ConnectionState {
    /// The nodes at each end (0 dialled, 1 accepted).
    nodes: [String; 2],
    /// What each end reads.
    pipes: [Pipe; 2],
    /// The last FIFO delivery time towards each end.
    last_delivery: [Instant; 2],
    /// Ends that no longer exist (dropped, or their node crashed).
    gone: [bool; 2],
}

#[derive(Default)]
struct Pipe {
    frames: VecDeque<Bytes>,
    /// Frames sent towards this end and not read yet (bounded by `link_capacity`).
    in_flight: usize,
    end: Option<Ending>,
    reader: Option<Waker>,
    /// The peer's writer, waiting for room in this direction.
    writer: Option<Waker>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Eof,
    Reset,
}

enum Event {
    Frame {
        connection: u64,
        to: usize,
        frame: Bytes,
    },
    End {
        connection: u64,
        to: usize,
        ending: Ending,
    },
    Accept {
        node: String,
        stream: SimStream,
        from: String,
    },
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared.state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl fmt::Debug for SimNetwork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SimNetwork")
    }
}

/// What the network did, for reports and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Frames written.
    pub frames_sent: u64,
    /// Frames lost (loss or a cut link).
    pub frames_lost: u64,
    /// Of those, frames carrying a `SubmitTasks` or its answer: the JobManager fails that
    /// deployment when its ask times out — a failure the run caused, which the job-outcome
    /// invariant counts as a disturbance (over TCP a frame is never lost alone; here it may be).
    pub deployments_lost: u64,
    /// Connections made.
    pub connections: u64,
    /// Tasks in `SubmitTasks` frames, while [`SimNetwork::count_deployments`] is on.
    pub deployments: DeploymentCounts,
}

/// What the `SubmitTasks` frames written carried (issue 11, item 5: producer lists travel once
/// per TaskManager).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeploymentCounts {
    /// Tasks in the `SubmitTasks` frames written.
    pub sent: u64,
    /// Of those, the ones with an input gate naming a producer list sent before.
    pub naming_lists: u64,
    /// Answers refusing a task for a producer list its TaskManager did not have.
    pub unknown_lists: u64,
}

impl SimNetwork {
    /// A network drawing latencies and losses from `rng`, recording to `trace`.
    pub fn new(rng: NodeRng, params: NetParams, trace: Trace) -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    rng,
                    params,
                    trace,
                    sequence: 0,
                    queue: BTreeMap::new(),
                    nodes: BTreeMap::new(),
                    connections: BTreeMap::new(),
                    next_connection: 1,
                    cut: BTreeSet::new(),
                    frames_sent: 0,
                    frames_lost: 0,
                    deployments_lost: 0,
                    deployments_sent: None,
                    count_deployments: false,
                    deployments: DeploymentCounts::default(),
                }),
                wake: Notify::new(),
            }),
        }
    }

    /// The network as the node `node` (`host:port`) sees it.
    pub fn node(&self, node: &str) -> SimNodeNetwork {
        SimNodeNetwork {
            network: self.clone(),
            node: node.to_owned(),
        }
    }

    /// Changes loss and reordering (the quiet phase turns them off).
    pub fn set_params(&self, params: NetParams) {
        lock(&self.shared).params = params;
    }

    /// The links' behaviour now.
    pub fn params(&self) -> NetParams {
        lock(&self.shared).params
    }

    /// From now on, every task a `SubmitTasks` frame carries is kept for [`take_deployments_sent`]
    /// (each frame decoded: only the HA family pays for it).
    ///
    /// [`take_deployments_sent`]: Self::take_deployments_sent
    pub fn record_deployments(&self) {
        lock(&self.shared)
            .deployments_sent
            .get_or_insert_with(Vec::new);
    }

    /// From now on, tasks in `SubmitTasks` frames and their refusals for unknown producer lists are
    /// counted in [`NetStats::deployments`] (each frame decoded).
    pub fn count_deployments(&self) {
        lock(&self.shared).count_deployments = true;
    }

    /// The tasks in `SubmitTasks` frames written since the last call.
    pub fn take_deployments_sent(&self) -> Vec<DeploymentSent> {
        lock(&self.shared)
            .deployments_sent
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Counters so far.
    pub fn stats(&self) -> NetStats {
        let state = lock(&self.shared);
        NetStats {
            frames_sent: state.frames_sent,
            frames_lost: state.frames_lost,
            deployments_lost: state.deployments_lost,
            connections: state.next_connection - 1,
            deployments: state.deployments,
        }
    }

    /// Cuts (`true`) or heals the direction `from` → `to`.
    pub fn cut(&self, from: &str, to: &str, cut: bool) {
        let mut state = lock(&self.shared);
        let key = (from.to_owned(), to.to_owned());
        if cut {
            state.cut.insert(key);
        } else {
            state.cut.remove(&key);
        }
    }

    /// Heals every cut link.
    pub fn heal_all(&self) {
        lock(&self.shared).cut.clear();
    }

    /// Marks `node` down before its tasks are dropped. A machine crash keeps its streams from
    /// telling their peers anything.
    pub fn node_down(&self, node: &str, kind: CrashKind) {
        let mut state = lock(&self.shared);
        let entry = state.nodes.entry(node.to_owned()).or_default();
        entry.up = false;
        entry.silent = kind == CrashKind::Machine;
        entry.listener = None;
    }

    /// `node` is back (a new incarnation): peers still holding connections to its previous
    /// incarnation get a reset, as TCP answers a stale segment.
    pub fn node_up(&self, node: &str) {
        let mut state = lock(&self.shared);
        let entry = state.nodes.entry(node.to_owned()).or_default();
        entry.up = true;
        entry.silent = false;
        let stale: Vec<(u64, usize)> = state
            .connections
            .iter()
            .filter_map(|(id, c)| {
                let end = c.nodes.iter().position(|n| n == node)?;
                (c.gone[end] && !c.gone[1 - end]).then_some((*id, 1 - end))
            })
            .collect();
        for (connection, to) in stale {
            let at = Instant::now() + state.latency();
            state.schedule(
                at,
                Event::End {
                    connection,
                    to,
                    ending: Ending::Reset,
                },
            );
        }
        drop(state);
        self.shared.wake.notify_one();
    }

    /// Resets the `index`-th open connection (in id order, modulo their number) at once on
    /// both sides; returns the nodes it joined, or `None` if none is open.
    pub fn reset_connection(&self, index: u64) -> Option<(String, String)> {
        let mut state = lock(&self.shared);
        let open: Vec<u64> = state
            .connections
            .iter()
            .filter(|(_, c)| !c.gone[0] && !c.gone[1] && c.pipes.iter().all(|p| p.end.is_none()))
            .map(|(id, _)| *id)
            .collect();
        if open.is_empty() {
            return None;
        }
        let id = open[(index % open.len() as u64) as usize];
        let connection = state.connections.get_mut(&id)?;
        for pipe in &mut connection.pipes {
            pipe.end = Some(Ending::Reset);
            pipe.frames.clear();
            pipe.in_flight = 0;
            wake(&mut pipe.reader);
            wake(&mut pipe.writer);
        }
        Some((connection.nodes[0].clone(), connection.nodes[1].clone()))
    }

    /// Delivers queued events as their time comes, forever. Spawn it once, on the root of the
    /// simulation (outside every node).
    pub async fn run(self) {
        loop {
            let next = lock(&self.shared).queue.keys().next().map(|(at, _)| *at);
            match next {
                None => self.shared.wake.notified().await,
                Some(at) if at > Instant::now() => {
                    tokio::select! {
                        biased;
                        () = self.shared.wake.notified() => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                Some(_) => self.deliver_due(),
            }
        }
    }

    fn deliver_due(&self) {
        let now = Instant::now();
        loop {
            let mut state = lock(&self.shared);
            let Some(entry) = state.queue.first_entry() else {
                return;
            };
            if entry.key().0 > now {
                return;
            }
            let event = entry.remove();
            match event {
                Event::Frame {
                    connection,
                    to,
                    frame,
                } => state.deliver_frame(connection, to, frame),
                Event::End {
                    connection,
                    to,
                    ending,
                } => {
                    if let Some(c) = state.connections.get_mut(&connection) {
                        let pipe = &mut c.pipes[to];
                        if pipe.end.is_none() {
                            pipe.end = Some(ending);
                        }
                        wake(&mut pipe.reader);
                        wake(&mut pipe.writer);
                    }
                }
                Event::Accept { node, stream, from } => {
                    let listener = state
                        .nodes
                        .get(&node)
                        .filter(|n| n.up)
                        .and_then(|n| n.listener.clone());
                    let refused = match listener {
                        Some(listener) => listener.send((stream, from)).err().map(|e| e.0.0),
                        None => Some(stream),
                    };
                    if let Some(mut stream) = refused {
                        // Nobody listens: the dialler reads a reset, not an orderly end (the
                        // dropped end must not send one).
                        stream.shut = true;
                        let at = now + state.latency();
                        state.schedule(
                            at,
                            Event::End {
                                connection: stream.connection,
                                to: 0,
                                ending: Ending::Reset,
                            },
                        );
                        // Its drop takes the lock.
                        drop(state);
                        drop(stream);
                    }
                }
            }
        }
    }
}

fn wake(waker: &mut Option<Waker>) {
    if let Some(waker) = waker.take() {
        waker.wake();
    }
}

impl State {
    fn schedule(&mut self, at: Instant, event: Event) {
        self.sequence += 1;
        self.queue.insert((at, self.sequence), event);
    }

    fn chance(&mut self, probability: f64) -> bool {
        probability > 0.0 && (self.rng.next_u64() as f64 / u64::MAX as f64) < probability
    }

    fn between(&mut self, low: Duration, high: Duration) -> Duration {
        let span = high.saturating_sub(low).as_micros() as u64;
        low + Duration::from_micros(if span == 0 {
            0
        } else {
            self.rng.next_u64() % (span + 1)
        })
    }

    fn latency(&mut self) -> Duration {
        let params = self.params;
        if self.chance(params.tail_probability) {
            self.between(params.base_latency, params.tail_latency)
        } else {
            self.between(params.base_latency / 2, params.base_latency)
        }
    }

    fn is_cut(&self, from: &str, to: &str) -> bool {
        self.cut.contains(&(from.to_owned(), to.to_owned()))
    }

    /// Records and counts the tasks of a `SubmitTasks` frame (or their refusals for an unknown
    /// list).
    fn note_deployment(&mut self, frame: &[u8], src: &str, dst: &str) {
        use crate::messages::deployment::Producers;
        use crate::messages::payload::Payload;
        use crate::messages::reply::Reply;
        use crate::messages::task_manager::{TaskManagerMessage, TaskSubmissionError};
        let Some(envelope) = envelope_of(frame) else {
            return;
        };
        match envelope.payload {
            Payload::TaskManager(TaskManagerMessage::SubmitTasks(submit)) => {
                for descriptor in &submit.descriptors {
                    self.deployments.sent += 1;
                    let naming = descriptor
                        .inputs
                        .iter()
                        .any(|gate| matches!(gate.producers, Producers::Known(_)));
                    self.deployments.naming_lists += u64::from(naming);
                    if let Some(sent) = &mut self.deployments_sent {
                        sent.push(DeploymentSent {
                            at: Instant::now(),
                            from: src.to_owned(),
                            to: dst.to_owned(),
                            leader_session_id: submit.leader_session_id,
                            attempt: descriptor.attempt,
                            job_id: descriptor.job_id,
                            vertex: descriptor.vertex_name.clone(),
                            subtask: descriptor.subtask,
                        });
                    }
                }
            }
            Payload::Reply(Reply::SubmitTasks(answers)) => {
                let unknown = answers
                    .iter()
                    .filter(|a| matches!(a, Err(TaskSubmissionError::UnknownProducers(_))))
                    .count();
                self.deployments.unknown_lists += unknown as u64;
            }
            _ => {}
        }
    }

    /// A frame written by end `from` of `connection`.
    fn send(&mut self, connection: u64, from: usize, frame: Bytes) {
        self.frames_sent += 1;
        let to = 1 - from;
        let Some(c) = self.connections.get(&connection) else {
            return;
        };
        let (src, dst) = (c.nodes[from].clone(), c.nodes[to].clone());
        if self.count_deployments || self.deployments_sent.is_some() {
            self.note_deployment(&frame, &src, &dst);
        }
        let lost = self.is_cut(&src, &dst) || {
            let loss = self.params.loss;
            self.chance(loss)
        };
        if lost {
            self.frames_lost += 1;
            if carries_deployment(&frame) {
                self.deployments_lost += 1;
            }
            self.trace.record(format!(
                "net lost {src}->{dst} #{connection} {}B",
                frame.len()
            ));
            return;
        }
        let latency = self.latency();
        let reorder = {
            let p = self.params.reorder;
            self.chance(p)
        };
        let Some(c) = self.connections.get_mut(&connection) else {
            return;
        };
        let mut at = Instant::now() + latency;
        if !reorder {
            at = at.max(c.last_delivery[to]);
            c.last_delivery[to] = at;
        }
        c.pipes[to].in_flight += 1;
        let delay = at.saturating_duration_since(Instant::now());
        self.trace.record(format!(
            "net {src}->{dst} #{connection} {}B +{}us",
            frame.len(),
            delay.as_micros()
        ));
        self.schedule(
            at,
            Event::Frame {
                connection,
                to,
                frame,
            },
        );
    }

    fn deliver_frame(&mut self, connection: u64, to: usize, frame: Bytes) {
        let Some(c) = self.connections.get_mut(&connection) else {
            return;
        };
        let pipe = &mut c.pipes[to];
        if c.gone[to] || pipe.end.is_some() {
            pipe.in_flight = pipe.in_flight.saturating_sub(1);
            wake(&mut pipe.writer);
            return;
        }
        pipe.frames.push_back(frame);
        wake(&mut pipe.reader);
    }
}

/// One node's view of the [`SimNetwork`].
#[derive(Clone)]
pub struct SimNodeNetwork {
    network: SimNetwork,
    node: String,
}

impl fmt::Debug for SimNodeNetwork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SimNodeNetwork({})", self.node)
    }
}

impl Network for SimNodeNetwork {
    fn bind(&self, _bind: SocketAddr, _advertised_host: Option<String>) -> Bound {
        let (sender, receiver) = mpsc::unbounded_channel();
        {
            let mut state = lock(&self.network.shared);
            let entry = state.nodes.entry(self.node.clone()).or_default();
            entry.listener = Some(sender);
            entry.up = true;
            entry.silent = false;
        }
        let node = self.node.clone();
        Box::pin(async move { Ok((node, Box::new(SimListener(receiver)) as Box<dyn Listener>)) })
    }

    /// The node's seeded stream: a simulated run replays its handshakes with everything else.
    fn nonce_rng(&self, node_seed: u64) -> NodeRng {
        NodeRng::seed_from_u64(node_seed)
    }

    fn connect(
        &self,
        peer: &str,
        timeout: Duration,
    ) -> LocalBoxFuture<'static, Result<BoxStream, DialError>> {
        let network = self.network.clone();
        let from = self.node.clone();
        let peer = peer.to_owned();
        Box::pin(async move {
            let (latency, reachable, cut) = {
                let mut state = lock(&network.shared);
                let latency = state.latency();
                let target = state.nodes.get(&peer);
                let reachable = target.is_some_and(|n| n.up && n.listener.is_some());
                let silent = target.is_some_and(|n| n.silent);
                let cut = state.is_cut(&from, &peer) || state.is_cut(&peer, &from) || silent;
                (latency, reachable, cut)
            };
            if cut {
                // The SYN goes nowhere.
                tokio::time::sleep(timeout).await;
                return Err(DialError::ConnectTimeout(timeout));
            }
            if !reachable {
                tokio::time::sleep(latency * 2).await;
                return Err(DialError::Connect(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    format!("nothing listens at {peer}"),
                )));
            }
            let (ours, theirs) = {
                let mut state = lock(&network.shared);
                let id = state.next_connection;
                state.next_connection += 1;
                let now = Instant::now();
                state.connections.insert(
                    id,
                    ConnectionState {
                        nodes: [from.clone(), peer.clone()],
                        pipes: [Pipe::default(), Pipe::default()],
                        last_delivery: [now, now],
                        gone: [false, false],
                    },
                );
                state
                    .trace
                    .record(format!("net connect {from}->{peer} #{id}"));
                let ours = SimStream::new(network.clone(), id, 0);
                let theirs = SimStream::new(network.clone(), id, 1);
                let at = now + latency;
                state.schedule(
                    at,
                    Event::Accept {
                        node: peer.clone(),
                        stream: theirs,
                        from: from.clone(),
                    },
                );
                (ours, at)
            };
            network.shared.wake.notify_one();
            tokio::time::sleep_until(theirs + latency).await;
            Ok(Box::new(ours) as BoxStream)
        })
    }
}

struct SimListener(mpsc::UnboundedReceiver<(SimStream, String)>);

impl Listener for SimListener {
    fn accept(&mut self) -> LocalBoxFuture<'_, io::Result<(BoxStream, String)>> {
        Box::pin(async move {
            match self.0.recv().await {
                Some((stream, from)) => Ok((Box::new(stream) as BoxStream, from)),
                None => std::future::pending().await,
            }
        })
    }
}

/// One end of a simulated connection.
pub struct SimStream {
    network: SimNetwork,
    connection: u64,
    end: usize,
    /// Written bytes not yet a whole frame.
    partial: BytesMut,
    /// What has been read of the first frame in the pipe.
    offset: usize,
    shut: bool,
}

impl SimStream {
    fn new(network: SimNetwork, connection: u64, end: usize) -> Self {
        Self {
            network,
            connection,
            end,
            partial: BytesMut::new(),
            offset: 0,
            shut: false,
        }
    }

    /// Tells the peer this end is finished (after what is in flight), once.
    fn finish(&mut self, state: &mut State) {
        if self.shut {
            return;
        }
        self.shut = true;
        let Some(c) = state.connections.get(&self.connection) else {
            return;
        };
        let to = 1 - self.end;
        let at = c.last_delivery[to].max(Instant::now());
        state.schedule(
            at,
            Event::End {
                connection: self.connection,
                to,
                ending: Ending::Eof,
            },
        );
    }
}

impl AsyncRead for SimStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let mut state = lock(&this.network.shared);
        let Some(c) = state.connections.get_mut(&this.connection) else {
            return Poll::Ready(Ok(()));
        };
        let pipe = &mut c.pipes[this.end];
        if let Some(frame) = pipe.frames.front() {
            let rest = &frame[this.offset..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            this.offset += n;
            if this.offset == frame.len() {
                pipe.frames.pop_front();
                this.offset = 0;
                pipe.in_flight = pipe.in_flight.saturating_sub(1);
                wake(&mut pipe.writer);
            }
            return Poll::Ready(Ok(()));
        }
        match pipe.end {
            Some(Ending::Eof) => Poll::Ready(Ok(())),
            Some(Ending::Reset) => Poll::Ready(Err(io::ErrorKind::ConnectionReset.into())),
            None => {
                pipe.reader = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl AsyncWrite for SimStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let network = this.network.clone();
        let mut state = lock(&network.shared);
        let capacity = state.params.link_capacity;
        let Some(c) = state.connections.get_mut(&this.connection) else {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        };
        let to = 1 - this.end;
        if this.shut
            || c.pipes[this.end].end == Some(Ending::Reset)
            || c.pipes[to].end == Some(Ending::Reset)
        {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        if c.pipes[to].in_flight >= capacity {
            c.pipes[to].writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        this.partial.extend_from_slice(buf);
        while this.partial.len() >= 4 {
            let length = (&this.partial[..4]).get_u32() as usize;
            if this.partial.len() < 4 + length {
                break;
            }
            let frame = this.partial.split_to(4 + length).freeze();
            state.send(this.connection, this.end, frame);
        }
        drop(state);
        network.shared.wake.notify_one();
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let network = this.network.clone();
        let mut state = lock(&network.shared);
        this.finish(&mut state);
        drop(state);
        network.shared.wake.notify_one();
        Poll::Ready(Ok(()))
    }
}

impl Drop for SimStream {
    fn drop(&mut self) {
        let network = self.network.clone();
        let mut state = lock(&network.shared);
        let Some(c) = state.connections.get_mut(&self.connection) else {
            return;
        };
        c.gone[self.end] = true;
        c.pipes[self.end].frames.clear();
        let node = c.nodes[self.end].clone();
        let both_gone = c.gone[0] && c.gone[1];
        let silent = state.nodes.get(&node).is_some_and(|n| n.silent);
        if !silent {
            self.finish(&mut state);
        }
        if both_gone {
            state.connections.remove(&self.connection);
        }
        drop(state);
        network.shared.wake.notify_one();
    }
}

/// A transport frame's envelope (length prefix and envelope), decoded with the real codec, read
/// only; `None` for handshake frames and anything else that is not one.
fn envelope_of(frame: &[u8]) -> Option<crate::messages::payload::Envelope> {
    let body = frame.get(crate::transport::frame::HEADER_LEN..)?;
    crate::messages::payload::Envelope::decode(body).ok()
}

/// Whether a transport frame carries a `SubmitTasks` or its answer.
fn carries_deployment(frame: &[u8]) -> bool {
    use crate::messages::payload::Payload;
    use crate::messages::reply::Reply;
    envelope_of(frame).is_some_and(|envelope| {
        matches!(
            envelope.payload,
            Payload::TaskManager(crate::messages::task_manager::TaskManagerMessage::SubmitTasks(_))
                | Payload::Reply(Reply::SubmitTasks(_))
        )
    })
}
