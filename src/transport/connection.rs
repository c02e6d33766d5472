//! One established connection to one peer: the handshake, then envelopes both ways.
//!
//! This module owns a byte stream from the moment it is connected until it is dropped: it shakes
//! hands on it, then moves [`Envelope`]s over it, pairs each reply with the ask it answers, and
//! fails every open ask the moment the stream ends. It is generic over `AsyncRead + AsyncWrite`
//! (TCP, TLS, `tokio::io::duplex` in tests; DESIGN §8). It never dispatches an envelope to an
//! actor (that is the node's dispatcher, fed through `inbound`), never reconnects (the transport
//! above does, with backoff), never panics or grows without bound on anything a peer sends, and
//! never makes a caller wait for queue space: a full queue is an error to the sender.
//!
//! # Life of a connection
//!
//! ```text
//!  dial(stream, dialled, config, rng, inbound) / accept(stream, config, rng, admit, inbound)
//!    │ handshake::initiate / accept, within config.handshake.timeout
//!    ├── fails ──▶ Err(ConnectionError::Handshake), the stream is dropped (closed)
//!    ▼
//!  Connection (a cheap handle)                     two tasks on the current arbiter (spawn_local)
//!    tell / ask / reply ─ encode ─▶ outbound queue ─▶ writer: coalesce small, write_all, flush ─▶ stream
//!      (full: QueueFull, at once)    (bounded)
//!    ask: correlation id ─▶ pending asks ◀── Reply ── reader: frame ─▶ Envelope::decode ◀─ stream
//!          (bounded; timeout                               │
//!           or cancel removes it)              Ask / Tell ─┴─▶ inbound: Inbound::Envelope
//!    ▼                                                          (awaited: backpressure)
//!  the first of: peer EOF, read or write error, bad frame, invalid envelope, close(reason),
//!  every handle dropped, inbound receiver dropped
//!    ▼
//!  closing (once; the first reason wins and is logged):
//!    every pending ask fails with PeerDown { peer, reason }        (at once, not at its timeout)
//!    both tasks stop, the stream is dropped                         (the peer sees EOF)
//!    inbound gets Inbound::PeerDown { peer, reason }                (the last item of this peer)
//!    closed() resolves with the reason; tell / ask / reply return Closed
//! ```
//!
//! # Why the work is split this way
//!
//! - **Envelopes are encoded by the caller** of [`Connection::tell`], not by the writer, so an
//!   envelope that cannot be encoded or is over the frame limit is an error to the one sender
//!   that made it, and the connection stays up.
//! - **Asks are sent eagerly**, when [`Connection::ask`] is called rather than when its future
//!   is first polled, so tells and asks leave in the order they were made, and the timeout runs
//!   from that moment.
//! - **The reader awaits `inbound`**: a slow dispatcher stops the reader, which stops reading the
//!   stream, which fills the peer's queue, which the peer's senders see as
//!   [`ConnectionError::QueueFull`]. Memory stays bounded end to end. Replies queue behind
//!   inbound asks and tells while the reader waits; an ask that waits too long times out.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::BytesMut;
use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::codec::FramedRead;

use super::envelope::{Envelope, EnvelopeError, EnvelopeKind, Frame, Payload};
use super::frame::{DEFAULT_MAX_FRAME, FrameCodec, FrameError, HEADER_LEN, OutFrame, SegmentsBuf};
use super::handshake::{self, HandshakeConfig, HandshakeError};
use crate::base::address::ActorAddress;
use crate::base::codec::CodecError;
use crate::base::error_chain::ErrorChain as Chain;
use crate::base::latch::Latch;
use crate::base::rng::NodeRng;
use crate::transport::metrics::TransportMetrics;

/// Which end of the connection this node is: the side that connected out shakes hands as the
/// initiator, the side that accepted as the acceptor. It is the handshake's [`Role`]
/// (re-exported, not copied), since it decides exactly one thing: the role byte of our proof.
///
/// [`Role`]: super::handshake::Role
pub use super::handshake::Role as Side;

/// The default bound on open asks per connection: far more than any node has in flight, yet a
/// peer that never answers cannot make the map of waiting asks grow past it.
pub const DEFAULT_MAX_PENDING_ASKS: usize = 65_536;

/// The default outbound queue, in envelopes: enough to ride out a burst (a job's deployment)
/// without making senders handle [`ConnectionError::QueueFull`] in normal operation.
pub const DEFAULT_OUTBOUND_QUEUE: usize = 1024;

/// How long an ask may wait for its reply (Flink's `akka.ask.timeout`): the transport's
/// default, and the timeout every actor puts on its asks, local or remote.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(10);

/// The writer stops coalescing once a batch holds this many bytes, so one `write_all` never
/// needs a buffer much larger than this (plus one frame).
const BATCH_BYTES: usize = 64 * 1024;

/// A frame this large is written from its own bytes rather than copied into the batch: the copy
/// would cost more than the syscall it saves.
const DIRECT_BYTES: usize = 16 * 1024;

/// Byte strings an envelope carries (network buffers) of this size or more are sent from their
/// own memory behind its bytes ([`OutFrame::Segments`]) rather than copied into its frame:
/// across processes the copy was a tenth of the actor threads' time reading a blocking shuffle.
const DETACH_BYTES: usize = 4 * 1024;

/// How one connection behaves. Both ends should agree on `max_frame`: a frame one side may send
/// and the other refuses closes the connection.
#[derive(Debug, Clone)]
pub struct ConnectionConfig {
    /// Who this node is and how it proves it; see [`handshake`].
    pub handshake: HandshakeConfig,
    /// The largest frame payload read or written, in bytes (clamped as [`FrameCodec::new`]
    /// does). Checked before allocating, so it bounds what a peer can make us buffer.
    pub max_frame: usize,
    /// Envelopes that may wait to be written (at least 1). Beyond it a send fails with
    /// [`ConnectionError::QueueFull`]: backpressure, never unbounded memory.
    pub outbound_queue: usize,
    /// How long an ask waits for its reply before failing with [`ConnectionError::Timeout`].
    pub ask_timeout: Duration,
    /// Asks that may wait for replies at once. Beyond it an ask fails with
    /// [`ConnectionError::QueueFull`], so a peer that never answers cannot grow the map.
    pub max_pending_asks: usize,
    /// The counters this connection adds its envelopes and frame bytes to (the endpoint's,
    /// shared by all its connections, for `/metrics`).
    pub metrics: TransportMetrics,
}

impl ConnectionConfig {
    /// The defaults ([`DEFAULT_MAX_FRAME`], [`DEFAULT_OUTBOUND_QUEUE`], [`ASK_TIMEOUT`],
    /// [`DEFAULT_MAX_PENDING_ASKS`]) around a node's handshake settings, so callers only spell
    /// out what they change.
    pub fn new(handshake: HandshakeConfig) -> Self {
        Self {
            handshake,
            max_frame: DEFAULT_MAX_FRAME,
            outbound_queue: DEFAULT_OUTBOUND_QUEUE,
            ask_timeout: ASK_TIMEOUT,
            max_pending_asks: DEFAULT_MAX_PENDING_ASKS,
            metrics: TransportMetrics::new(),
        }
    }
}

/// What a connection hands to the node's dispatcher, in the order it happened.
#[derive(Debug)]
// Nearly every item is an envelope; `PeerDown` comes once per connection. Boxing the envelope
// would cost an allocation per message to shrink a variant that is almost never used.
pub enum Inbound<P> {
    /// The peer sent a tell or an ask (never a reply: replies complete this connection's asks).
    /// An ask is answered with [`Connection::reply`] and the envelope's correlation id.
    Envelope {
        /// The peer's node id, as proven in the handshake.
        peer: String,
        /// The validated envelope.
        envelope: Envelope<P>,
    },
    /// The connection ended; nothing more comes from it. The dispatcher treats it as a fast
    /// failure signal (the heartbeat need not wait for its timeout).
    PeerDown {
        /// The peer's node id.
        peer: String,
        /// Why the connection ended.
        reason: CloseReason,
    },
}

/// Why a connection ended. Cheap to clone (the errors are shared), because one reason goes to
/// every pending ask, to the dispatcher and to every [`Connection::closed`] waiter.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CloseReason {
    /// The peer closed the stream cleanly, between two frames.
    #[error("the peer closed the connection")]
    PeerClosed,
    /// Reading failed: an oversized, empty or truncated frame, or an I/O error. The stream can
    /// no longer be trusted to be in step with the peer.
    #[error("cannot read from the peer")]
    Read(#[source] Arc<FrameError>),
    /// The peer sent a frame that is not a valid envelope (garbage, or parts that disagree).
    #[error("the peer sent an invalid envelope")]
    Envelope(#[source] Arc<EnvelopeError>),
    /// Writing to the stream failed.
    #[error("cannot write to the peer")]
    Write(#[source] Arc<io::Error>),
    /// This node closed the connection with [`Connection::close`].
    #[error("closed by this node: {reason}")]
    Local {
        /// What the caller gave as the reason.
        reason: String,
    },
    /// Every [`Connection`] handle was dropped: nobody can send on it or close it any more, so
    /// it is closed rather than left reading forever.
    #[error("every handle to the connection was dropped")]
    Released,
    /// The receiver of `inbound` was dropped: nothing would handle what the peer sends.
    #[error("the inbound dispatcher is gone")]
    DispatcherGone,
}

impl CloseReason {
    /// Whether the peer misbehaved or the stream broke (as opposed to an orderly close by
    /// either side): those are logged as warnings.
    fn is_fault(&self) -> bool {
        matches!(
            self,
            Self::Read(_) | Self::Envelope(_) | Self::Write(_) | Self::DispatcherGone
        )
    }
}

/// Which bounded queue refused a send, for [`ConnectionError::QueueFull`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundedQueue {
    /// Envelopes waiting to be written ([`ConnectionConfig::outbound_queue`]).
    Outbound,
    /// Asks waiting for replies ([`ConnectionConfig::max_pending_asks`]).
    PendingAsks,
}

impl fmt::Display for BoundedQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Outbound => "outbound queue",
            Self::PendingAsks => "pending asks",
        })
    }
}

/// Why establishing a connection, or sending or asking on one, failed. See
/// [`is_retryable`](Self::is_retryable).
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    /// The handshake failed; the stream was dropped.
    #[error("connection handshake failed")]
    Handshake(#[from] HandshakeError),
    /// A bounded queue is full: the peer (or the stream) is slower than the senders.
    #[error("the {queue} to {peer} is full ({capacity})")]
    QueueFull {
        /// The peer's node id.
        peer: String,
        /// Which queue.
        queue: BoundedQueue,
        /// Its capacity.
        capacity: usize,
    },
    /// The connection had already ended when the send or ask was made.
    #[error("the connection to {peer} is closed")]
    Closed {
        /// The peer's node id.
        peer: String,
    },
    /// The connection ended while the ask waited for its reply.
    #[error("the connection to {peer} went down while an ask waited")]
    PeerDown {
        /// The peer's node id.
        peer: String,
        /// Why it ended.
        #[source]
        reason: CloseReason,
    },
    /// No reply arrived within the ask timeout. The peer may still have handled the ask.
    #[error("no reply from {peer} within {after:?}")]
    Timeout {
        /// The peer's node id.
        peer: String,
        /// The configured ask timeout.
        after: Duration,
    },
    /// The envelope cannot be encoded; nothing was sent.
    #[error("cannot encode an envelope for {peer}")]
    Encode {
        /// The peer's node id.
        peer: String,
        /// The codec's refusal.
        #[source]
        source: CodecError,
    },
    /// The encoded envelope does not fit a frame (over `max_frame`); nothing was sent.
    #[error("an envelope for {peer} does not fit a frame")]
    Frame {
        /// The peer's node id.
        peer: String,
        /// The frame codec's refusal.
        #[source]
        source: FrameError,
    },
}

impl ConnectionError {
    /// Whether trying again later may succeed: after the queue drains, or over a new connection
    /// (the transport reconnects with backoff). It says nothing about safety: an ask that timed
    /// out or whose connection went down may have been handled already.
    ///
    /// A handshake error is as retryable as [`HandshakeError::is_retryable`] says; an envelope
    /// that cannot be encoded or framed never is.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Handshake(error) => error.is_retryable(),
            Self::QueueFull { .. }
            | Self::Closed { .. }
            | Self::PeerDown { .. }
            | Self::Timeout { .. } => true,
            Self::Encode { .. } | Self::Frame { .. } => false,
        }
    }
}

/// Shakes hands on `stream` as the side that dialled the node `dialled`, then runs the
/// connection in two tasks on the current arbiter (`tokio::task::spawn_local`: the stream need
/// not be `Send`, and a paused test clock governs the connection's timers). Must be called
/// inside a `LocalSet` (an actix arbiter). A peer that is not `dialled` is refused before this
/// node proves anything ([`handshake`]).
///
/// `rng` must be the node's one long-lived generator for connections (see
/// [`handshake::initiate`]). Everything the peer sends that is not a reply goes to `inbound`,
/// ending with one [`Inbound::PeerDown`].
///
/// # Panics
///
/// Outside a `LocalSet`, as `spawn_local` does: a programming error in the node's setup, never
/// something a peer can cause.
pub async fn dial<S, P>(
    mut stream: S,
    dialled: &str,
    config: ConnectionConfig,
    rng: &mut NodeRng,
    inbound: mpsc::Sender<Inbound<P>>,
) -> Result<Connection<P>, ConnectionError>
where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
    P: Payload,
{
    let established = handshake::initiate(&mut stream, &config.handshake, dialled, rng).await?;
    Ok(start(stream, Side::Initiator, established, config, inbound))
}

/// Shakes hands on `stream` as the side that accepted it, admitting the proven peer only if
/// `admit(its id)` says so (see [`handshake::accept`]); otherwise as [`dial`].
pub async fn accept<S, P, A, F>(
    mut stream: S,
    config: ConnectionConfig,
    rng: &mut NodeRng,
    admit: A,
    inbound: mpsc::Sender<Inbound<P>>,
) -> Result<Connection<P>, ConnectionError>
where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
    P: Payload,
    A: FnOnce(String) -> F,
    F: Future<Output = Result<(), String>>,
{
    let established = handshake::accept(&mut stream, &config.handshake, rng, admit).await?;
    Ok(start(stream, Side::Acceptor, established, config, inbound))
}

/// Runs an established connection: its reader and writer tasks, and the handle.
fn start<S, P>(
    stream: S,
    side: Side,
    established: handshake::Established,
    config: ConnectionConfig,
    inbound: mpsc::Sender<Inbound<P>>,
) -> Connection<P>
where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
    P: Payload,
{
    let peer = established.peer_node_id;
    log::info!(
        "{}: connection to {peer} established ({side:?})",
        config.handshake.node_id
    );

    let capacity = config.outbound_queue.max(1);
    let (outbound, queue) = mpsc::channel(capacity);
    let closed = Latch::new();
    let shared = Arc::new(Shared {
        peer,
        codec: FrameCodec::new(config.max_frame),
        outbound_capacity: capacity,
        max_pending_asks: config.max_pending_asks,
        ask_timeout: config.ask_timeout,
        metrics: config.metrics,
        pongs: outbound.downgrade(),
        state: Mutex::new(State {
            pending: BTreeMap::new(),
            next_correlation: 1,
            probes: BTreeMap::new(),
            next_probe: 1,
            closed: None,
        }),
        closed,
        opened: Instant::now(),
        last_frame_ms: AtomicU64::new(0),
    });
    let (reader, writer) = tokio::io::split(stream);
    tokio::task::spawn_local(read_loop(Arc::clone(&shared), reader, inbound));
    tokio::task::spawn_local(write_loop(Arc::clone(&shared), writer, queue));
    Connection { shared, outbound }
}

/// A handle to one established connection. Clones share the connection; when the last clone is
/// dropped the connection closes ([`CloseReason::Released`]).
pub struct Connection<P> {
    shared: Arc<Shared<P>>,
    /// Encoded frames for the writer. The tasks hold no sender, so the queue closing means every
    /// handle is gone.
    outbound: mpsc::Sender<OutFrame>,
}

impl<P> Clone for Connection<P> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            outbound: self.outbound.clone(),
        }
    }
}

impl<P: Payload> fmt::Debug for Connection<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("peer", &self.shared.peer)
            .field("closed", &self.shared.state().closed)
            .finish_non_exhaustive()
    }
}

impl<P: Payload> Connection<P> {
    /// The peer's node id, as it proved it in the handshake: what the transport keys its one
    /// connection per peer by.
    pub fn peer(&self) -> &str {
        &self.shared.peer
    }

    /// Queues `envelope` for the peer, in order with every other send on this connection. It
    /// never waits: a full queue is [`ConnectionError::QueueFull`], so a slow peer slows its
    /// senders down instead of growing memory. Errors are the sender's alone; the connection
    /// stays up. The peer validates the envelope, and closes the connection if it is invalid.
    pub fn tell(&self, envelope: Envelope<P>) -> Result<(), ConnectionError> {
        self.send(&envelope)
    }

    /// Sends `payload` to `target` on the peer as an ask and waits at most the ask timeout for
    /// the reply. The ask is queued when this is called, not when the future is polled, so it
    /// keeps its place among tells; dropping the future forgets the ask (a late reply is then
    /// dropped). Fails with [`ConnectionError::PeerDown`] as soon as the connection ends.
    pub fn ask(
        &self,
        target: String,
        sender: Option<ActorAddress>,
        payload: P,
    ) -> impl Future<Output = Result<P, ConnectionError>> + 'static + use<P> {
        let started = self.start_ask(target, sender, payload);
        async move {
            let (ask, answer, deadline) = started?;
            let answered = match deadline {
                Some(deadline) => tokio::time::timeout_at(deadline, answer).await,
                // A timeout too large to add to the clock: effectively none.
                None => Ok(answer.await),
            };
            let shared = &ask.shared;
            match answered {
                Ok(Ok(Ok(reply))) => Ok(reply),
                Ok(Ok(Err(reason))) => Err(ConnectionError::PeerDown {
                    peer: shared.peer.clone(),
                    reason,
                }),
                // The waiter is only dropped unanswered if the connection state went away,
                // which the `ask` guard prevents; report it as closed all the same.
                Ok(Err(_)) => Err(ConnectionError::Closed {
                    peer: shared.peer.clone(),
                }),
                // Dropping `ask` on return removes the entry: a late reply finds nothing.
                Err(_) => Err(ConnectionError::Timeout {
                    peer: shared.peer.clone(),
                    after: shared.ask_timeout,
                }),
            }
        }
    }

    /// Answers the peer's ask with id `correlation`. Replies are matched by correlation id on
    /// the asking side, so the envelope names no target. Errors as [`tell`](Self::tell).
    pub fn reply(&self, correlation: u64, reply: P) -> Result<(), ConnectionError> {
        self.send(&Envelope {
            target: String::new(),
            sender: None,
            correlation,
            kind: EnvelopeKind::Reply,
            payload: reply,
        })
    }

    /// Closes the connection: pending asks fail with [`ConnectionError::PeerDown`], envelopes
    /// still queued are dropped, and the peer sees the stream end. Closing a closed connection
    /// does nothing (the first reason stays).
    pub fn close(&self, reason: impl Into<String>) {
        self.shared.shut_down(CloseReason::Local {
            reason: reason.into(),
        });
    }

    /// Resolves with the reason once the connection has ended (at once if it has), so an owner
    /// (the peer's session actor) can deregister and reconnect.
    pub fn closed(&self) -> impl Future<Output = CloseReason> + 'static + use<P> {
        let signal = self.shared.closed.clone();
        async move { closing(&signal).await }
    }

    /// Why the connection ended, or `None` while it is up.
    pub fn close_reason(&self) -> Option<CloseReason> {
        self.shared.state().closed.clone()
    }

    /// Whether a frame came from the peer within the last `window`: as sure a sign that the
    /// peer holding this connection is alive as an answered [`probe`](Self::probe), and one
    /// that a peer too busy to answer a probe in time still gives while its data flows.
    pub fn heard_within(&self, window: Duration) -> bool {
        match self.shared.last_frame_ms.load(Ordering::Relaxed) {
            0 => false,
            heard => {
                let last = Duration::from_millis(heard - 1);
                self.close_reason().is_none() && self.shared.opened.elapsed() <= last + window
            }
        }
    }

    /// Whether the peer's end of this connection answers a `Ping` within `patience`: `false`
    /// if the connection is closed or closes meanwhile, the ping cannot be queued, or no `Pong`
    /// comes in time. The peer's connection answers by itself (no actor is asked), so `true`
    /// proves the peer that holds this connection is alive; the endpoint uses it before it lets
    /// a new connection take over an authenticated peer's id.
    pub fn probe(&self, patience: Duration) -> impl Future<Output = bool> + 'static + use<P> {
        let started = self.start_probe();
        let signal = self.shared.closed.clone();
        async move {
            let Some((number, answer, shared)) = started else {
                return false;
            };
            let answered = tokio::select! {
                biased;
                _ = closing(&signal) => false,
                answer = tokio::time::timeout(patience, answer) => matches!(answer, Ok(Ok(()))),
            };
            shared.state().probes.remove(&number);
            answered
        }
    }

    /// Registers a probe and queues its `Ping`; `None` if that is impossible now.
    fn start_probe(&self) -> Option<(u64, oneshot::Receiver<()>, Arc<Shared<P>>)> {
        let shared = &self.shared;
        let (number, answer) = {
            let mut state = shared.state();
            if state.closed.is_some() {
                return None;
            }
            let number = state.next_probe;
            state.next_probe = number.wrapping_add(1);
            let (waiter, answer) = oneshot::channel();
            state.probes.insert(number, waiter);
            (number, answer)
        };
        let frame = shared
            .codec
            .frame_with(|out| {
                out.extend_from_slice(&Frame::<P>::probe(number, false));
                Ok::<(), ()>(())
            })
            .ok()?
            .ok()?;
        if self.outbound.try_send(frame.into()).is_err() {
            shared.state().probes.remove(&number);
            return None;
        }
        Some((number, answer, Arc::clone(shared)))
    }

    /// Asks waiting for replies right now, for metrics and for tests that check the map of
    /// pending asks stays bounded.
    pub fn pending_asks(&self) -> usize {
        self.shared.state().pending.len()
    }

    /// Registers an ask and queues its envelope; the returned guard removes the registration
    /// when dropped, on every path out of the ask's future.
    fn start_ask(
        &self,
        target: String,
        sender: Option<ActorAddress>,
        payload: P,
    ) -> Result<StartedAsk<P>, ConnectionError> {
        let deadline = Instant::now().checked_add(self.shared.ask_timeout);
        let (correlation, answer) = self.shared.register()?;
        let ask = PendingAsk {
            shared: Arc::clone(&self.shared),
            correlation,
        };
        self.send(&Envelope {
            target,
            sender,
            correlation,
            kind: EnvelopeKind::Ask,
            payload,
        })?;
        Ok((ask, answer, deadline))
    }

    /// Encodes and frames `envelope` here, so its errors are the caller's, and queues the frame.
    fn send(&self, envelope: &Envelope<P>) -> Result<(), ConnectionError> {
        let shared = &self.shared;
        if shared.state().closed.is_some() {
            return Err(shared.closed_error());
        }
        let frame = shared
            .codec
            .frame_detached_with(|out| envelope.encode_detaching_into(out, DETACH_BYTES))
            .map_err(|source| ConnectionError::Encode {
                peer: shared.peer.clone(),
                source,
            })?
            .map_err(|source| ConnectionError::Frame {
                peer: shared.peer.clone(),
                source,
            })?;
        let bytes = frame.len() as u64;
        self.outbound
            .try_send(frame)
            .map(|()| {
                shared.metrics.messages_out.increment();
                shared.metrics.bytes_out.add(bytes);
            })
            .map_err(|error| match error {
                mpsc::error::TrySendError::Full(_) => ConnectionError::QueueFull {
                    peer: shared.peer.clone(),
                    queue: BoundedQueue::Outbound,
                    capacity: shared.outbound_capacity,
                },
                mpsc::error::TrySendError::Closed(_) => shared.closed_error(),
            })
    }
}

/// What a pending ask receives: the reply, or why the connection ended first.
type Answer<P> = Result<P, CloseReason>;

/// An ask just sent: its registration, where its answer comes, and its deadline (`None`: none).
type StartedAsk<P> = (PendingAsk<P>, oneshot::Receiver<Answer<P>>, Option<Instant>);

/// The state the handles and the two tasks share.
struct Shared<P> {
    peer: String,
    /// For framing outbound envelopes (in the senders) and reading inbound ones.
    codec: FrameCodec,
    outbound_capacity: usize,
    max_pending_asks: usize,
    ask_timeout: Duration,
    metrics: TransportMetrics,
    /// Where the reader queues its `Pong`s: a weak sender, so the queue still closes when the
    /// last handle is dropped.
    pongs: mpsc::WeakSender<OutFrame>,
    state: Mutex<State<P>>,
    /// Publishes the close reason: the tasks stop on it, [`Connection::closed`] waits for it.
    /// `State::closed` is the truth; this follows it.
    closed: Latch<CloseReason>,
    /// When the connection was established, and the last frame read since, in milliseconds
    /// after it plus one (0: none yet; [`Connection::heard_within`]).
    opened: Instant,
    last_frame_ms: AtomicU64,
}

/// What changes under the lock: the open asks and whether the connection has ended. One lock
/// for both makes "refuse new asks once closed" and "fail every open ask on close" atomic.
struct State<P> {
    /// Open asks by correlation id. Bounded by `max_pending_asks`; an entry leaves when its
    /// reply arrives, its ask times out or is dropped, or the connection closes.
    pending: BTreeMap<u64, oneshot::Sender<Answer<P>>>,
    /// The next correlation id to try; 0 is never used (tells carry it).
    next_correlation: u64,
    /// Probes waiting for their `Pong`, by number. An entry leaves when its `Pong` arrives, its
    /// prober stops waiting, or the connection closes.
    probes: BTreeMap<u64, oneshot::Sender<()>>,
    /// The next probe's number.
    next_probe: u64,
    closed: Option<CloseReason>,
}

impl<P: Payload> Shared<P> {
    /// The state. A panic while holding the lock cannot leave it inconsistent (every update is
    /// a single map or field operation), so a poisoned lock is used as is.
    fn state(&self) -> MutexGuard<'_, State<P>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn closed_error(&self) -> ConnectionError {
        ConnectionError::Closed {
            peer: self.peer.clone(),
        }
    }

    /// Opens an ask: a fresh correlation id and the channel its answer comes through.
    fn register(&self) -> Result<(u64, oneshot::Receiver<Answer<P>>), ConnectionError> {
        let mut state = self.state();
        if state.closed.is_some() {
            return Err(self.closed_error());
        }
        if state.pending.len() >= self.max_pending_asks {
            return Err(ConnectionError::QueueFull {
                peer: self.peer.clone(),
                queue: BoundedQueue::PendingAsks,
                capacity: self.max_pending_asks,
            });
        }
        // Skips 0 and any id still open. Terminates: fewer than `max_pending_asks` ids are
        // taken, far fewer than 2^64.
        let mut correlation = state.next_correlation;
        while correlation == 0 || state.pending.contains_key(&correlation) {
            correlation = correlation.wrapping_add(1);
        }
        state.next_correlation = correlation.wrapping_add(1);
        let (waiter, answer) = oneshot::channel();
        state.pending.insert(correlation, waiter);
        Ok((correlation, answer))
    }

    /// Queues the `Pong` for the peer's `Ping(number)`, unless the queue is full or gone (the
    /// peer's probe then goes unanswered, as it would behind a stalled connection).
    fn answer_ping(&self, number: u64) {
        let Some(outbound) = self.pongs.upgrade() else {
            return;
        };
        let framed = self.codec.frame_with(|out| {
            out.extend_from_slice(&Frame::<P>::probe(number, true));
            Ok::<(), ()>(())
        });
        if let Ok(Ok(frame)) = framed
            && outbound.try_send(frame.into()).is_err()
        {
            log::debug!("connection to {}: no room to answer a ping", self.peer);
        }
    }

    /// Hands a reply to the ask it answers. A reply nobody waits for (its ask timed out or was
    /// dropped, or the peer is confused) is dropped: it must not close a healthy connection.
    fn complete(&self, correlation: u64, reply: P) {
        let waiter = self.state().pending.remove(&correlation);
        match waiter {
            // The asker may give up between the removal and this send; nothing to do then.
            Some(waiter) => drop(waiter.send(Ok(reply))),
            None => log::debug!(
                "connection to {}: dropped a {} reply for correlation {correlation}, which no ask awaits (timed out or cancelled)",
                self.peer,
                reply.describe()
            ),
        }
    }

    /// Ends the connection for `reason` unless it has ended already, and returns the reason it
    /// ended for (the first one). Fails every pending ask, then tells the tasks and waiters.
    fn shut_down(&self, reason: CloseReason) -> CloseReason {
        let pending = {
            let mut state = self.state();
            if let Some(first) = &state.closed {
                return first.clone();
            }
            state.closed = Some(reason.clone());
            // Waiting probers see their sender dropped: not answered.
            state.probes.clear();
            std::mem::take(&mut state.pending)
        };
        if reason.is_fault() {
            log::warn!("connection to {} closed: {}", self.peer, Chain(&reason));
        } else {
            log::info!("connection to {} closed: {}", self.peer, Chain(&reason));
        }
        for waiter in pending.into_values() {
            // An asker that already gave up has dropped its receiver; nothing to tell it.
            drop(waiter.send(Err(reason.clone())));
        }
        self.closed.set(reason.clone());
        reason
    }
}

/// An open ask, owned by the ask's future: dropping it (reply, timeout, cancellation) removes
/// the registration, so the map of pending asks only holds asks someone still waits for.
struct PendingAsk<P: Payload> {
    shared: Arc<Shared<P>>,
    correlation: u64,
}

impl<P: Payload> Drop for PendingAsk<P> {
    fn drop(&mut self) {
        self.shared.state().pending.remove(&self.correlation);
    }
}

/// Waits until the connection has ended (at once if it has) and returns why.
async fn closing(signal: &Latch<CloseReason>) -> CloseReason {
    // Never abandoned: only `Shared::shut_down` settles it, with a reason.
    signal.wait().await.unwrap_or(CloseReason::Released)
}

/// Frames in, envelopes out: replies to their asks, asks and tells to `inbound`. Ends on the
/// first bad frame or envelope, at EOF, or when the connection closes; then reports
/// [`Inbound::PeerDown`] as the last thing from this peer.
async fn read_loop<R: AsyncRead + Unpin, P: Payload>(
    shared: Arc<Shared<P>>,
    reader: R,
    inbound: mpsc::Sender<Inbound<P>>,
) {
    let mut frames = FramedRead::new(reader, shared.codec);
    let signal = shared.closed.clone();
    let ended = loop {
        let frame = tokio::select! {
            biased;
            reason = closing(&signal) => break reason,
            frame = frames.next() => frame,
        };
        let envelope = match frame {
            None => break CloseReason::PeerClosed,
            Some(Err(error)) => break CloseReason::Read(Arc::new(error)),
            Some(Ok(bytes)) => {
                let heard = shared.opened.elapsed().as_millis() as u64 + 1;
                shared.last_frame_ms.store(heard, Ordering::Relaxed);
                shared
                    .metrics
                    .bytes_in
                    .add((HEADER_LEN + bytes.len()) as u64);
                match Frame::<P>::decode(&bytes) {
                    Ok(Frame::Envelope(envelope)) => {
                        shared.metrics.messages_in.increment();
                        envelope
                    }
                    Ok(Frame::Ping(number)) => {
                        shared.answer_ping(number);
                        continue;
                    }
                    Ok(Frame::Pong(number)) => {
                        if let Some(waiter) = shared.state().probes.remove(&number) {
                            let _ = waiter.send(());
                        }
                        continue;
                    }
                    Err(error) => break CloseReason::Envelope(Arc::new(error)),
                }
            }
        };
        if envelope.kind == EnvelopeKind::Reply {
            // `Envelope::decode` validated that the payload fits a reply.
            shared.complete(envelope.correlation, envelope.payload);
            continue;
        }
        let item = Inbound::Envelope {
            peer: shared.peer.clone(),
            envelope,
        };
        tokio::select! {
            biased;
            reason = closing(&signal) => break reason,
            sent = inbound.send(item) => {
                if sent.is_err() {
                    break CloseReason::DispatcherGone;
                }
            }
        }
    };
    let reason = shared.shut_down(ended);
    // Release our half of the stream before waiting on the dispatcher, which may be slow.
    drop(frames);
    let down = Inbound::PeerDown {
        peer: shared.peer.clone(),
        reason,
    };
    // A dispatcher that is gone needs no notice.
    drop(inbound.send(down).await);
}

/// Drains the outbound queue: every frame waiting goes out in one go (up to about
/// [`BATCH_BYTES`]); the stream is flushed whenever the queue is momentarily empty, so a burst
/// costs few writes and a lone envelope is not held back.
async fn write_loop<W: AsyncWrite + Unpin, P: Payload>(
    shared: Arc<Shared<P>>,
    mut writer: W,
    mut queue: mpsc::Receiver<OutFrame>,
) {
    let signal = shared.closed.clone();
    let mut batch = BytesMut::new();
    let ended = loop {
        let first = tokio::select! {
            biased;
            reason = closing(&signal) => break reason,
            frame = queue.recv() => match frame {
                Some(frame) => frame,
                // Every handle is gone and everything they queued has been written.
                None => break CloseReason::Released,
            },
        };
        tokio::select! {
            biased;
            reason = closing(&signal) => break reason,
            written = write_frames(&mut writer, first, &mut queue, &mut batch) => {
                if let Err(error) = written {
                    break CloseReason::Write(Arc::new(error));
                }
            }
        }
    };
    shared.shut_down(ended);
}

/// Writes `first` and the frames queued behind it, in order, until about [`BATCH_BYTES`] went
/// out: small frames are copied into `batch` and written together (one syscall for many
/// envelopes), a frame of [`DIRECT_BYTES`] or more is written from its own bytes (a data answer
/// of many buffers is not copied once more; one in segments, its buffers' own memory behind
/// the envelope's bytes, with vectored writes), so `batch` never grows past
/// `BATCH_BYTES + DIRECT_BYTES`. Flushes if the queue is then empty.
async fn write_frames<W: AsyncWrite + Unpin>(
    writer: &mut W,
    first: OutFrame,
    queue: &mut mpsc::Receiver<OutFrame>,
    batch: &mut BytesMut,
) -> io::Result<()> {
    batch.clear();
    let mut taken = 0;
    let mut next = Some(first);
    while let Some(frame) = next {
        taken += frame.len();
        if frame.len() >= DIRECT_BYTES {
            if !batch.is_empty() {
                writer.write_all(batch).await?;
                batch.clear();
            }
            match frame {
                OutFrame::Whole(frame) => writer.write_all(&frame).await?,
                OutFrame::Segments { parts, len } if writer.is_write_vectored() => {
                    writer
                        .write_all_buf(&mut SegmentsBuf::new(parts, len))
                        .await?;
                }
                // A write per piece would send the envelope's few bytes between two buffers
                // as packets of their own: joined, as before segments.
                OutFrame::Segments { parts, .. } => writer.write_all(&parts.concat()).await?,
            }
        } else {
            match frame {
                OutFrame::Whole(frame) => batch.extend_from_slice(&frame),
                OutFrame::Segments { parts, .. } => {
                    for part in parts {
                        batch.extend_from_slice(&part);
                    }
                }
            }
        }
        next = if taken < BATCH_BYTES {
            queue.try_recv().ok()
        } else {
            None
        };
    }
    if !batch.is_empty() {
        writer.write_all(batch).await?;
    }
    if queue.is_empty() {
        writer.flush().await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
