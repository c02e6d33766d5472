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
//!  establish(stream, side, config, rng, inbound)
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
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::codec::FramedRead;

use super::envelope::{Envelope, EnvelopeError, EnvelopeKind, Payload};
use super::frame::{DEFAULT_MAX_FRAME, FrameCodec, FrameError, HEADER_LEN};
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

/// Shakes hands on `stream` as `side`, then runs the connection in two tasks on the current
/// arbiter (`tokio::task::spawn_local`: the stream need not be `Send`, and a paused test clock
/// governs the connection's timers). Must be called inside a `LocalSet` (an actix arbiter).
///
/// `rng` must be the node's one long-lived generator for connections (see
/// [`handshake::initiate`]). Everything the peer sends that is not a reply goes to `inbound`,
/// ending with one [`Inbound::PeerDown`].
///
/// # Panics
///
/// Outside a `LocalSet`, as `spawn_local` does: a programming error in the node's setup, never
/// something a peer can cause.
pub async fn establish<S, P>(
    mut stream: S,
    side: Side,
    config: ConnectionConfig,
    rng: &mut NodeRng,
    inbound: mpsc::Sender<Inbound<P>>,
) -> Result<Connection<P>, ConnectionError>
where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
    P: Payload,
{
    let established = match side {
        Side::Initiator => handshake::initiate(&mut stream, &config.handshake, rng).await,
        Side::Acceptor => handshake::accept(&mut stream, &config.handshake, rng).await,
    }?;
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
        state: Mutex::new(State {
            pending: BTreeMap::new(),
            next_correlation: 1,
            closed: None,
        }),
        closed,
    });
    let (reader, writer) = tokio::io::split(stream);
    tokio::task::spawn_local(read_loop(Arc::clone(&shared), reader, inbound));
    tokio::task::spawn_local(write_loop(Arc::clone(&shared), writer, queue));
    Ok(Connection { shared, outbound })
}

/// A handle to one established connection. Clones share the connection; when the last clone is
/// dropped the connection closes ([`CloseReason::Released`]).
pub struct Connection<P> {
    shared: Arc<Shared<P>>,
    /// Encoded frames for the writer. The tasks hold no sender, so the queue closing means every
    /// handle is gone.
    outbound: mpsc::Sender<Bytes>,
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
            .frame_with(|out| envelope.encode_into(out))
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
    state: Mutex<State<P>>,
    /// Publishes the close reason: the tasks stop on it, [`Connection::closed`] waits for it.
    /// `State::closed` is the truth; this follows it.
    closed: Latch<CloseReason>,
}

/// What changes under the lock: the open asks and whether the connection has ended. One lock
/// for both makes "refuse new asks once closed" and "fail every open ask on close" atomic.
struct State<P> {
    /// Open asks by correlation id. Bounded by `max_pending_asks`; an entry leaves when its
    /// reply arrives, its ask times out or is dropped, or the connection closes.
    pending: BTreeMap<u64, oneshot::Sender<Answer<P>>>,
    /// The next correlation id to try; 0 is never used (tells carry it).
    next_correlation: u64,
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
                shared
                    .metrics
                    .bytes_in
                    .add((HEADER_LEN + bytes.len()) as u64);
                match Envelope::<P>::decode(&bytes) {
                    Ok(envelope) => {
                        shared.metrics.messages_in.increment();
                        envelope
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
    mut queue: mpsc::Receiver<Bytes>,
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
/// of many buffers is not copied once more), so `batch` never grows past
/// `BATCH_BYTES + DIRECT_BYTES`. Flushes if the queue is then empty.
async fn write_frames<W: AsyncWrite + Unpin>(
    writer: &mut W,
    first: Bytes,
    queue: &mut mpsc::Receiver<Bytes>,
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
            writer.write_all(&frame).await?;
        } else {
            batch.extend_from_slice(&frame);
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
mod tests {
    use futures_util::future::join_all;
    use tokio::io::{AsyncReadExt, DuplexStream, duplex};
    use tokio_util::codec::Encoder;

    use super::*;
    use crate::base::address::JOB_MANAGER;
    use crate::base::ids::{ClusterId, JobId};
    use crate::messages::job_manager::{JobError, JobManagerMessage, RequestJobStatus};
    use crate::messages::payload::{Envelope, Payload};
    use crate::messages::reply::Reply;
    use crate::transport::handshake::Secret;

    /// The connection under test carries Flint's protocol.
    type Connection = super::Connection<Payload>;
    type Inbound = super::Inbound<Payload>;

    const SECRET: &[u8] = b"correct horse battery staple";
    const TEST_ASK_TIMEOUT: Duration = Duration::from_secs(30);
    const MAX_FRAME: usize = 64 * 1024;
    /// Far more than any test writes before the other side reads.
    const PIPE: usize = 64 * 1024;
    /// How long a test waits for something that should happen at once. Every test runs on the
    /// paused clock, so a hang turns into a failure after this much virtual time.
    const PATIENCE: Duration = Duration::from_secs(3600);

    fn handshake_config(node: &str) -> HandshakeConfig {
        HandshakeConfig {
            cluster_id: ClusterId::new("test-cluster"),
            node_id: node.to_owned(),
            secret: Secret::from_bytes(SECRET),
            timeout: Duration::from_secs(5),
        }
    }

    fn config(node: &str) -> ConnectionConfig {
        ConnectionConfig {
            max_frame: MAX_FRAME,
            outbound_queue: 16,
            ask_timeout: TEST_ASK_TIMEOUT,
            max_pending_asks: 1024,
            ..ConnectionConfig::new(handshake_config(node))
        }
    }

    /// A message that carries a number, so order and matching can be checked.
    fn status(n: u128) -> Payload {
        JobManagerMessage::from(RequestJobStatus {
            job_id: JobId::from_u128(n),
        })
        .into()
    }

    fn job_of(payload: &Payload) -> u128 {
        match payload {
            Payload::JobManager(JobManagerMessage::RequestJobStatus(request)) => {
                request.job_id.as_u128()
            }
            other => panic!("expected a RequestJobStatus, got {other:?}"),
        }
    }

    /// An answer that carries the number back.
    fn answer(n: u128) -> Payload {
        Payload::Reply(Reply::RequestJobStatus(Err(JobError::UnknownJob(
            JobId::from_u128(n),
        ))))
    }

    fn answered(reply: &Payload) -> u128 {
        match reply {
            Payload::Reply(Reply::RequestJobStatus(Err(JobError::UnknownJob(job_id)))) => {
                job_id.as_u128()
            }
            other => panic!("expected an UnknownJob answer, got {other:?}"),
        }
    }

    fn tell_of(n: u128) -> Envelope {
        Envelope {
            target: JOB_MANAGER.into(),
            sender: Some(ActorAddress::new("a", "taskmanager/tm-1")),
            correlation: 0,
            kind: EnvelopeKind::Tell,
            payload: status(n),
        }
    }

    /// One end of a connection under test: its handle and what its dispatcher receives.
    struct End {
        conn: Connection,
        inbound: mpsc::Receiver<Inbound>,
    }

    impl End {
        async fn next(&mut self) -> Inbound {
            tokio::time::timeout(PATIENCE, self.inbound.recv())
                .await
                .expect("something arrives")
                .expect("the connection reports PeerDown before its sender goes")
        }

        async fn next_envelope(&mut self) -> Envelope {
            match self.next().await {
                Inbound::Envelope { peer, envelope } => {
                    assert_eq!(peer, self.conn.peer());
                    envelope
                }
                other => panic!("expected an envelope, got {other:?}"),
            }
        }

        async fn peer_down(&mut self) -> CloseReason {
            match self.next().await {
                Inbound::PeerDown { peer, reason } => {
                    assert_eq!(peer, self.conn.peer());
                    reason
                }
                other => panic!("expected PeerDown, got {other:?}"),
            }
        }
    }

    /// `establish` on both ends of a duplex pipe at once: "a" initiates, "b" accepts.
    async fn establish_pair(
        a: ConnectionConfig,
        b: ConnectionConfig,
    ) -> (Result<End, ConnectionError>, Result<End, ConnectionError>) {
        let (near, far) = duplex(PIPE);
        let (a_sink, a_inbound) = mpsc::channel(8);
        let (b_sink, b_inbound) = mpsc::channel(8);
        let (mut a_rng, mut b_rng) = (NodeRng::seed_from_u64(1), NodeRng::seed_from_u64(2));
        let (a, b) = tokio::join!(
            establish(near, Side::Initiator, a, &mut a_rng, a_sink),
            establish(far, Side::Acceptor, b, &mut b_rng, b_sink),
        );
        (
            a.map(|conn| End {
                conn,
                inbound: a_inbound,
            }),
            b.map(|conn| End {
                conn,
                inbound: b_inbound,
            }),
        )
    }

    async fn pair_with(a: ConnectionConfig) -> (End, End) {
        let (a, b) = establish_pair(a, config("b")).await;
        (a.expect("a established"), b.expect("b established"))
    }

    async fn pair() -> (End, End) {
        pair_with(config("a")).await
    }

    /// A connection ("a", the acceptor) whose peer is driven by hand: the test shook hands
    /// with `handshake::initiate` itself and owns the raw stream, positioned after the proof.
    async fn raw_peer(config: ConnectionConfig, pipe: usize) -> (End, DuplexStream) {
        let (near, mut raw) = duplex(pipe);
        let (sink, inbound) = mpsc::channel(8);
        let (mut ours, mut theirs) = (NodeRng::seed_from_u64(1), NodeRng::seed_from_u64(2));
        let hand = handshake_config("raw");
        let (conn, shaken) = tokio::join!(
            establish(near, Side::Acceptor, config, &mut ours, sink),
            handshake::initiate(&mut raw, &hand, &mut theirs),
        );
        assert_eq!(shaken.expect("raw handshake").peer_node_id, "a");
        let conn = conn.expect("a established");
        assert_eq!(conn.peer(), "raw");
        (End { conn, inbound }, raw)
    }

    /// Lets the connection's tasks run until they block.
    async fn settle() {
        for _ in 0..32 {
            tokio::task::yield_now().await;
        }
    }

    fn ask_of(
        conn: &Connection,
        n: u128,
    ) -> impl Future<Output = Result<Payload, ConnectionError>> + use<> {
        conn.ask(JOB_MANAGER.into(), None, status(n))
    }

    // ---- handshake ----

    #[actix::test]
    async fn both_sides_learn_the_others_node_id() {
        tokio::time::pause();
        let (a, b) = pair().await;
        assert_eq!(a.conn.peer(), "b");
        assert_eq!(b.conn.peer(), "a");
        assert!(a.conn.close_reason().is_none());
        assert!(b.conn.close_reason().is_none());
    }

    #[actix::test]
    async fn a_wrong_secret_fails_both_sides_with_a_handshake_error() {
        tokio::time::pause();
        let mut other = config("b");
        other.handshake.secret = Secret::from_bytes(b"another secret".to_vec());
        let (a, b) = establish_pair(config("a"), other).await;
        for result in [a.map(|_| ()), b.map(|_| ())] {
            match result {
                Err(error @ ConnectionError::Handshake(HandshakeError::BadProof)) => {
                    assert!(!error.is_retryable());
                }
                other => panic!("expected a BadProof handshake error, got {other:?}"),
            }
        }
    }

    // ---- asks and tells ----

    #[actix::test]
    async fn envelopes_and_frame_bytes_are_counted_on_both_sides() {
        tokio::time::pause();
        let (a_metrics, b_metrics) = (TransportMetrics::new(), TransportMetrics::new());
        let (a, b) = establish_pair(
            ConnectionConfig {
                metrics: a_metrics.clone(),
                ..config("a")
            },
            ConnectionConfig {
                metrics: b_metrics.clone(),
                ..config("b")
            },
        )
        .await;
        let (a, mut b) = (a.expect("a established"), b.expect("b established"));
        assert_eq!(
            a_metrics.messages_out.get(),
            0,
            "handshakes are not envelopes"
        );

        a.conn.tell(tell_of(1)).expect("queued");
        let asked = ask_of(&a.conn, 2);
        b.next_envelope().await;
        let ask = b.next_envelope().await;
        b.conn.reply(ask.correlation, answer(2)).expect("queued");
        assert_eq!(answered(&asked.await.expect("the reply")), 2);

        let frame = |envelope: &Envelope| (HEADER_LEN + envelope.encode().unwrap().len()) as u64;
        let sent = frame(&tell_of(1)) + frame(&ask);
        assert_eq!(
            (a_metrics.messages_out.get(), a_metrics.bytes_out.get()),
            (2, sent)
        );
        assert_eq!(
            (b_metrics.messages_in.get(), b_metrics.bytes_in.get()),
            (2, sent)
        );
        assert_eq!(b_metrics.messages_out.get(), 1, "the reply");
        assert_eq!(a_metrics.messages_in.get(), 1, "the reply");
        assert_eq!(a_metrics.bytes_in.get(), b_metrics.bytes_out.get());
        assert!(a_metrics.bytes_in.get() > HEADER_LEN as u64);
    }

    #[actix::test]
    async fn an_ask_reaches_the_remote_actor_and_its_reply_comes_back() {
        tokio::time::pause();
        let (a, mut b) = pair().await;
        let sender = ActorAddress::new("a", "taskmanager/tm-1");
        // Not polled yet: the ask leaves when it is made.
        let asked = a
            .conn
            .ask(JOB_MANAGER.into(), Some(sender.clone()), status(7));
        assert_eq!(a.conn.pending_asks(), 1);

        let envelope = b.next_envelope().await;
        assert_eq!(envelope.target, JOB_MANAGER);
        assert_eq!(envelope.kind, EnvelopeKind::Ask);
        assert_eq!(envelope.payload, status(7));
        assert_eq!(envelope.sender, Some(sender));
        assert_ne!(envelope.correlation, 0, "0 is the tells' correlation");
        b.conn
            .reply(envelope.correlation, answer(7))
            .expect("queued");

        assert_eq!(asked.await.expect("answered"), answer(7));
        assert_eq!(a.conn.pending_asks(), 0);
    }

    #[actix::test]
    async fn a_hundred_concurrent_asks_answered_out_of_order_are_matched_by_correlation() {
        tokio::time::pause();
        // Room for every ask and every reply at once: this test is about matching, not
        // backpressure.
        let roomy = |node| ConnectionConfig {
            outbound_queue: 128,
            ..config(node)
        };
        let (a, b) = establish_pair(roomy("a"), roomy("b")).await;
        let (a, mut b) = (a.expect("a established"), b.expect("b established"));
        let asks: Vec<_> = (0..100).map(|n| ask_of(&a.conn, n)).collect();
        assert_eq!(a.conn.pending_asks(), 100);

        let mut received = Vec::new();
        for _ in 0..100 {
            let envelope = b.next_envelope().await;
            assert_eq!(envelope.kind, EnvelopeKind::Ask);
            received.push((envelope.correlation, job_of(&envelope.payload)));
        }
        let correlations: std::collections::BTreeSet<u64> = received
            .iter()
            .map(|(correlation, _)| *correlation)
            .collect();
        assert_eq!(
            correlations.len(),
            100,
            "every ask has its own correlation id"
        );

        // Answer in a seeded shuffled order.
        let mut rng = NodeRng::seed_from_u64(0x5eed);
        for i in (1..received.len()).rev() {
            let j = (rng.next_u64() % (i as u64 + 1)) as usize;
            received.swap(i, j);
        }
        assert_ne!(received[0].1, 0, "the shuffle moved something");
        for (correlation, n) in &received {
            b.conn.reply(*correlation, answer(*n)).expect("queued");
        }

        let replies = tokio::time::timeout(PATIENCE, join_all(asks))
            .await
            .expect("every ask answered");
        for (n, reply) in replies.into_iter().enumerate() {
            assert_eq!(answered(&reply.expect("answered")), n as u128);
        }
        assert_eq!(a.conn.pending_asks(), 0);
    }

    #[actix::test]
    async fn a_thousand_tells_arrive_in_order_through_small_queues() {
        tokio::time::pause();
        let (a, mut b) = pair().await;
        let mut refused = 0;
        let sending = async {
            for n in 0..1000 {
                loop {
                    match a.conn.tell(tell_of(n)) {
                        Ok(()) => break,
                        Err(ConnectionError::QueueFull { .. }) => {
                            refused += 1;
                            tokio::task::yield_now().await;
                        }
                        Err(error) => panic!("tell {n}: {error}"),
                    }
                }
            }
        };
        let receiving = async {
            for n in 0..1000 {
                let envelope = b.next_envelope().await;
                assert_eq!(envelope, tell_of(n));
            }
        };
        tokio::join!(sending, receiving);
        assert!(refused > 0, "the 16-envelope queue pushed back");
    }

    /// Frames of [`DIRECT_BYTES`] and more skip the batch; they must still go out in order
    /// with the small ones around them.
    #[actix::test]
    async fn large_frames_written_directly_keep_their_place_among_small_ones() {
        tokio::time::pause();
        let (a, mut b) = pair().await;
        let large = |n: u128| Envelope {
            sender: Some(ActorAddress::new(
                "a",
                "x".repeat(DIRECT_BYTES + n as usize),
            )),
            ..tell_of(n)
        };
        let sent: Vec<Envelope> = (0..40)
            .map(|n| if n % 3 == 1 { large(n) } else { tell_of(n) })
            .collect();
        assert!(sent[1].encode().expect("encodes").len() >= DIRECT_BYTES);
        let sending = async {
            for envelope in &sent {
                loop {
                    match a.conn.tell(envelope.clone()) {
                        Ok(()) => break,
                        Err(ConnectionError::QueueFull { .. }) => tokio::task::yield_now().await,
                        Err(error) => panic!("tell: {error}"),
                    }
                }
            }
        };
        let receiving = async {
            for envelope in &sent {
                assert_eq!(&b.next_envelope().await, envelope);
            }
        };
        tokio::join!(sending, receiving);
    }

    #[actix::test]
    async fn an_unanswered_ask_times_out_and_its_late_reply_is_dropped() {
        tokio::time::pause();
        let (a, mut b) = pair().await;
        let started = Instant::now();
        let result = ask_of(&a.conn, 1).await;
        match result {
            Err(ref error @ ConnectionError::Timeout { ref peer, after }) => {
                assert_eq!((peer.as_str(), after), ("b", TEST_ASK_TIMEOUT));
                assert!(error.is_retryable());
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
        let waited = started.elapsed();
        assert!(
            waited >= TEST_ASK_TIMEOUT && waited < TEST_ASK_TIMEOUT + Duration::from_secs(1),
            "{waited:?}"
        );
        assert_eq!(a.conn.pending_asks(), 0, "the timed-out ask is forgotten");

        // The remote actor answers late, and someone answers an ask that never was.
        let late = b.next_envelope().await;
        b.conn.reply(late.correlation, answer(1)).expect("queued");
        b.conn.reply(424_242, answer(2)).expect("queued");

        // Both are dropped; the connection stays up and keeps working. Replies travel in
        // order, so by the time this one is answered the late ones have been handled.
        let again = ask_of(&a.conn, 3);
        let envelope = b.next_envelope().await;
        assert_ne!(envelope.correlation, late.correlation);
        b.conn
            .reply(envelope.correlation, answer(3))
            .expect("queued");
        assert_eq!(answered(&again.await.expect("answered")), 3);
        assert!(a.conn.close_reason().is_none());
        assert_eq!(a.conn.pending_asks(), 0);
    }

    #[actix::test]
    async fn asks_beyond_the_pending_bound_are_refused_and_a_dropped_ask_frees_its_slot() {
        tokio::time::pause();
        let (a, _b) = pair_with(ConnectionConfig {
            max_pending_asks: 2,
            ..config("a")
        })
        .await;
        let first = ask_of(&a.conn, 1);
        let _second = ask_of(&a.conn, 2);
        match ask_of(&a.conn, 3).await {
            Err(
                ref error @ ConnectionError::QueueFull {
                    queue: BoundedQueue::PendingAsks,
                    capacity: 2,
                    ..
                },
            ) => assert!(error.is_retryable()),
            other => panic!("expected QueueFull, got {other:?}"),
        }
        assert_eq!(a.conn.pending_asks(), 2);
        drop(first);
        assert_eq!(a.conn.pending_asks(), 1, "a cancelled ask leaves the map");
        let _fourth = ask_of(&a.conn, 4);
        assert_eq!(a.conn.pending_asks(), 2);
    }

    #[actix::test]
    async fn an_envelope_over_the_frame_limit_is_the_senders_error_only() {
        tokio::time::pause();
        let (a, b) = pair_with(ConnectionConfig {
            max_frame: 16,
            ..config("a")
        })
        .await;
        match a.conn.tell(tell_of(1)) {
            Err(
                ref error @ ConnectionError::Frame {
                    source: FrameError::PayloadTooLarge { max: 16, .. },
                    ..
                },
            ) => assert!(!error.is_retryable()),
            other => panic!("expected a frame error, got {other:?}"),
        }
        assert!(matches!(
            ask_of(&a.conn, 1).await,
            Err(ConnectionError::Frame { .. })
        ));
        assert_eq!(a.conn.pending_asks(), 0, "the refused ask is not left open");
        assert!(a.conn.close_reason().is_none());
        // Envelopes that fit still flow: a reply to an ask "b" never made, which "b" drops.
        let reply_sized = Envelope {
            target: String::new(),
            sender: None,
            correlation: 0,
            kind: EnvelopeKind::Reply,
            payload: Payload::Reply(Reply::Unit(())),
        };
        assert!(reply_sized.encode().expect("encodes").len() <= 16);
        a.conn
            .reply(5, Payload::Reply(Reply::Unit(())))
            .expect("fits");
        settle().await;
        assert!(a.conn.close_reason().is_none());
        assert!(b.conn.close_reason().is_none());
    }

    // ---- the connection ending ----

    #[actix::test]
    async fn a_peer_that_closes_fails_pending_asks_at_once() {
        tokio::time::pause();
        let (mut a, mut b) = pair().await;
        let asked = ask_of(&a.conn, 1);
        let envelope = b.next_envelope().await;
        assert_eq!(envelope.kind, EnvelopeKind::Ask);

        let started = Instant::now();
        b.conn.close("test is over");
        let result = tokio::time::timeout(PATIENCE, asked).await.expect("fails");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "failed at once, not at the {TEST_ASK_TIMEOUT:?} ask timeout"
        );
        match result {
            Err(
                ref error @ ConnectionError::PeerDown {
                    ref peer,
                    reason: CloseReason::PeerClosed,
                },
            ) => {
                assert_eq!(peer, "b");
                assert!(error.is_retryable());
            }
            other => panic!("expected PeerDown, got {other:?}"),
        }
        assert!(matches!(a.peer_down().await, CloseReason::PeerClosed));
        assert!(matches!(a.conn.closed().await, CloseReason::PeerClosed));
        assert!(matches!(
            a.conn.tell(tell_of(2)),
            Err(ConnectionError::Closed { ref peer }) if peer == "b"
        ));
        assert!(matches!(
            ask_of(&a.conn, 3).await,
            Err(ConnectionError::Closed { .. })
        ));
        assert!(matches!(
            a.conn.reply(1, Payload::Reply(Reply::Unit(()))),
            Err(ConnectionError::Closed { .. })
        ));

        // The closing side knows its own reason, and refuses sends too.
        let local = |reason: &CloseReason| matches!(reason, CloseReason::Local { reason } if reason == "test is over");
        assert!(local(&b.conn.closed().await));
        assert!(local(&b.peer_down().await));
        assert!(matches!(
            b.conn.tell(tell_of(4)),
            Err(ConnectionError::Closed { .. })
        ));
        // Closing again changes nothing.
        b.conn.close("again");
        assert!(local(&b.conn.close_reason().expect("closed")));
    }

    #[actix::test]
    async fn a_peer_whose_stream_drops_is_reported_down() {
        tokio::time::pause();
        let (mut a, raw) = raw_peer(config("a"), PIPE).await;
        let asked = ask_of(&a.conn, 1);
        drop(raw);
        let reason = a.peer_down().await;
        // Reading sees EOF or writing the ask sees the broken pipe, whichever runs first.
        assert!(
            matches!(reason, CloseReason::PeerClosed | CloseReason::Write(_)),
            "{reason:?}"
        );
        assert!(matches!(asked.await, Err(ConnectionError::PeerDown { .. })));
        assert!(matches!(
            a.conn.tell(tell_of(2)),
            Err(ConnectionError::Closed { .. })
        ));
    }

    #[actix::test]
    async fn dropping_every_handle_closes_the_connection() {
        tokio::time::pause();
        let (a, mut b) = pair().await;
        let End {
            conn,
            inbound: mut a_inbound,
        } = a;
        let clone = conn.clone();
        drop(conn);
        settle().await;
        assert!(clone.close_reason().is_none(), "a clone keeps it open");
        drop(clone);
        assert!(matches!(b.peer_down().await, CloseReason::PeerClosed));
        match a_inbound.recv().await {
            Some(Inbound::PeerDown {
                reason: CloseReason::Released,
                ..
            }) => {}
            other => panic!("expected PeerDown(Released), got {other:?}"),
        }
    }

    #[actix::test]
    async fn a_dispatcher_that_is_gone_closes_the_connection() {
        tokio::time::pause();
        let (mut a, b) = pair().await;
        let End {
            conn: b_conn,
            inbound,
        } = b;
        drop(inbound);
        a.conn.tell(tell_of(1)).expect("queued");
        assert!(matches!(a.peer_down().await, CloseReason::PeerClosed));
        assert!(matches!(b_conn.closed().await, CloseReason::DispatcherGone));
    }

    // ---- a peer that sends garbage ----

    /// Asks something on `a`, lets `send_garbage` write to the raw stream, and checks the
    /// connection closes with PeerDown for both the ask and the dispatcher, and returns why.
    async fn after_garbage(
        config: ConnectionConfig,
        send_garbage: impl AsyncFnOnce(DuplexStream),
    ) -> CloseReason {
        let (mut a, mut raw) = raw_peer(config, PIPE).await;
        let asked = ask_of(&a.conn, 1);
        // The raw peer reads the ask first, so the garbage (not a write into a pipe the peer
        // has dropped) is what closes the connection.
        let mut frames = FramedRead::new(&mut raw, FrameCodec::new(MAX_FRAME));
        let frame = tokio::time::timeout(PATIENCE, frames.next())
            .await
            .expect("the ask arrives")
            .expect("a frame")
            .expect("well formed");
        assert_eq!(
            Envelope::decode(&frame).expect("an envelope").kind,
            EnvelopeKind::Ask
        );
        assert!(frames.read_buffer().is_empty());
        drop(frames);
        send_garbage(raw).await;
        let reason = a.peer_down().await;
        match asked.await {
            Err(ConnectionError::PeerDown { reason: failed, .. }) => {
                assert_eq!(failed.to_string(), reason.to_string());
            }
            other => panic!("expected PeerDown, got {other:?}"),
        }
        assert!(matches!(
            a.conn.tell(tell_of(2)),
            Err(ConnectionError::Closed { .. })
        ));
        assert_eq!(a.conn.closed().await.to_string(), reason.to_string());
        reason
    }

    /// Writes `bytes` and keeps the stream open until the connection has closed it, so the
    /// reason is the bytes and not an EOF.
    async fn write_and_wait(mut raw: DuplexStream, bytes: Vec<u8>) {
        use tokio::io::AsyncWriteExt;
        raw.write_all(&bytes).await.expect("written");
        let mut sink = Vec::new();
        // Ends when `a` drops its end: everything `a` wrote, then EOF.
        tokio::time::timeout(PATIENCE, raw.read_to_end(&mut sink))
            .await
            .expect("a closes its end")
            .expect("reads");
    }

    #[actix::test]
    async fn a_frame_of_random_bytes_closes_the_connection() {
        tokio::time::pause();
        let mut rng = NodeRng::seed_from_u64(0x9a4b);
        let mut garbage = 64u32.to_be_bytes().to_vec();
        garbage.extend((0..64).map(|_| rng.next_u64() as u8));
        let reason =
            after_garbage(config("a"), async |raw| write_and_wait(raw, garbage).await).await;
        assert!(
            matches!(reason, CloseReason::Envelope(ref error) if matches!(**error, EnvelopeError::Codec(_))),
            "{reason:?}"
        );
    }

    #[actix::test]
    async fn random_bytes_then_eof_close_the_connection_without_a_panic() {
        tokio::time::pause();
        for seed in 0..16 {
            let mut rng = NodeRng::seed_from_u64(seed);
            let garbage: Vec<u8> = (0..256).map(|_| rng.next_u64() as u8).collect();
            let reason = after_garbage(config("a"), async |mut raw: DuplexStream| {
                use tokio::io::AsyncWriteExt;
                raw.write_all(&garbage).await.expect("written");
            })
            .await;
            assert!(
                matches!(reason, CloseReason::Read(_) | CloseReason::Envelope(_)),
                "seed {seed}: {reason:?}"
            );
        }
    }

    #[actix::test]
    async fn an_oversized_length_prefix_closes_the_connection() {
        tokio::time::pause();
        let reason = after_garbage(config("a"), async |raw| {
            write_and_wait(raw, u32::MAX.to_be_bytes().to_vec()).await
        })
        .await;
        match reason {
            CloseReason::Read(ref error) => assert!(
                matches!(**error, FrameError::TooLarge { length, max: MAX_FRAME } if length == u32::MAX as usize),
                "{error:?}"
            ),
            other => panic!("expected a read error, got {other:?}"),
        }
        assert!(reason.is_fault());
        assert!(
            Chain(&reason)
                .to_string()
                .contains("over the 65536-byte limit"),
            "the logged line names the cause: {}",
            Chain(&reason)
        );
    }

    #[actix::test]
    async fn a_frame_cut_short_by_eof_closes_as_truncated() {
        tokio::time::pause();
        let reason = after_garbage(config("a"), async |mut raw: DuplexStream| {
            use tokio::io::AsyncWriteExt;
            raw.write_all(&[0, 0, 0, 100, 1, 2, 3])
                .await
                .expect("written");
        })
        .await;
        assert!(
            matches!(reason, CloseReason::Read(ref error) if matches!(**error, FrameError::Truncated { buffered: 7 })),
            "{reason:?}"
        );
    }

    #[actix::test]
    async fn an_envelope_that_fails_validation_closes_the_connection() {
        tokio::time::pause();
        // A JobManager message addressed to a TaskManager: it decodes, but does not validate.
        let mismatched = Envelope {
            target: "taskmanager/tm-1".into(),
            ..tell_of(1)
        };
        let mut frame = BytesMut::new();
        FrameCodec::new(MAX_FRAME)
            .encode(mismatched.encode().expect("encodes"), &mut frame)
            .expect("frames");
        let reason = after_garbage(config("a"), async |raw| {
            write_and_wait(raw, frame.to_vec()).await
        })
        .await;
        assert!(
            matches!(reason, CloseReason::Envelope(ref error) if matches!(**error, EnvelopeError::Mismatch { .. })),
            "{reason:?}"
        );
    }

    // ---- backpressure ----

    #[actix::test]
    async fn a_writer_blocked_by_a_peer_that_does_not_read_fills_the_queue() {
        tokio::time::pause();
        let (a, mut raw) = raw_peer(
            ConnectionConfig {
                outbound_queue: 1,
                ..config("a")
            },
            512,
        )
        .await;
        let mut sent = 0;
        let refused = loop {
            match a.conn.tell(tell_of(sent)) {
                Ok(()) => sent += 1,
                Err(error) => break error,
            }
            settle().await;
            assert!(sent < 1000, "the writer never blocked");
        };
        match refused {
            ConnectionError::QueueFull {
                ref peer,
                queue: BoundedQueue::Outbound,
                capacity: 1,
            } => {
                assert_eq!(peer, "raw");
                assert!(refused.is_retryable());
            }
            other => panic!("expected QueueFull, got {other:?}"),
        }
        assert!(sent > 2, "the pipe took a few before it filled ({sent})");
        // Still full however long the writer gets: it waits for the peer, not for us.
        settle().await;
        assert!(matches!(
            a.conn.tell(tell_of(sent)),
            Err(ConnectionError::QueueFull { .. })
        ));
        assert!(
            a.conn.close_reason().is_none(),
            "backpressure is not a failure"
        );

        // Once the peer reads, everything accepted arrives in order, and there is room again.
        let mut frames = FramedRead::new(&mut raw, FrameCodec::new(MAX_FRAME));
        for n in 0..sent {
            let frame = tokio::time::timeout(PATIENCE, frames.next())
                .await
                .expect("arrives")
                .expect("a frame")
                .expect("well formed");
            assert_eq!(Envelope::decode(&frame).expect("an envelope"), tell_of(n));
        }
        a.conn.tell(tell_of(sent)).expect("room again");
    }

    // ---- errors ----

    #[test]
    fn only_errors_a_later_try_can_fix_are_retryable() {
        let peer = || "b".to_owned();
        let codec_error = crate::base::codec::decode::<Envelope>(&[0xff]).expect_err("garbage");
        let cases = [
            (
                ConnectionError::Handshake(HandshakeError::Closed),
                true,
                "connection handshake failed",
            ),
            (
                ConnectionError::Handshake(HandshakeError::BadProof),
                false,
                "connection handshake failed",
            ),
            (
                ConnectionError::QueueFull {
                    peer: peer(),
                    queue: BoundedQueue::Outbound,
                    capacity: 16,
                },
                true,
                "the outbound queue to b is full (16)",
            ),
            (
                ConnectionError::Closed { peer: peer() },
                true,
                "the connection to b is closed",
            ),
            (
                ConnectionError::PeerDown {
                    peer: peer(),
                    reason: CloseReason::PeerClosed,
                },
                true,
                "the connection to b went down",
            ),
            (
                ConnectionError::Timeout {
                    peer: peer(),
                    after: TEST_ASK_TIMEOUT,
                },
                true,
                "no reply from b within 30s",
            ),
            (
                ConnectionError::Encode {
                    peer: peer(),
                    source: codec_error,
                },
                false,
                "cannot encode an envelope for b",
            ),
            (
                ConnectionError::Frame {
                    peer: peer(),
                    source: FrameError::EmptyPayload,
                },
                false,
                "does not fit a frame",
            ),
        ];
        for (error, retryable, text) in cases {
            assert_eq!(error.is_retryable(), retryable, "{error:?}");
            assert!(error.to_string().contains(text), "{error} / {text}");
        }
        let down = ConnectionError::PeerDown {
            peer: peer(),
            reason: CloseReason::Local {
                reason: "shutting down".into(),
            },
        };
        assert_eq!(
            Chain(&down).to_string(),
            "the connection to b went down while an ask waited: closed by this node: shutting down"
        );
    }
}
