//! Remote actors: the node endpoint, remote proxies and inbound dispatch (DESIGN §4).
//!
//! This module owns a node's presence on the network: the listener, one `Connection` per peer
//! node (dialled on demand with bounded, backed-off attempts, or accepted), the dispatch of what
//! peers send to this node's actors, and the proxies through which this node's actors reach
//! actors elsewhere. It never decides anything for an actor: an actor sees a remote peer exactly
//! as it sees a local one, as a gateway of `Recipient`s.
//!
//! ```text
//!  actor ── Recipient<M>::send ──▶ RemoteProxy<W> (an actor on the caller's arbiter)
//!     M::Result = ()  → Envelope::Tell  (fire and forget; a send error is logged and fails the send)
//!     otherwise       → Envelope::Ask   → Reply → Answer::from_reply → M::Result
//!          │  connection to ActorAddress.node: live one, or dial (one shared attempt per peer,
//!          ▼  DIAL_ATTEMPTS tries with exponential backoff, on the endpoint's arbiter)
//!  Connection ═══ TCP ═══ Connection ─ Inbound ─▶ serve (one task per connection)
//!                                                  └─ dispatch: LocalDirectory[target]
//!                                                     └─ wire enum.deliver(gateway) (queued in
//!                                                        order; the answer awaited in its own task)
//!                                                        └─ Ask: connection.reply(correlation, …)
//! ```
//!
//! # How a failure reaches the caller
//!
//! A handler cannot return an `actix::MailboxError` itself, so each proxy handler answers with a
//! [`RemoteResponse`]: on success it sends `M::Result` to the caller; on any failure (the peer
//! unreachable or refusing the handshake, the connection going down while the ask waits, the
//! transport's ask timeout, an unknown target or closed mailbox on the peer, reported as
//! [`Reply::Failed`]) it drops the caller's reply channel, so `Recipient::send(m).await` is
//! `Err(actix::MailboxError::Closed)` **as soon as the failure is known**: at once when a connection
//! dies (pending asks fail on `PeerDown`), after at most the dial backoff for an unreachable peer.
//! `Err(MailboxError::Timeout)` only ever comes from the caller's own `.timeout(..)`. The cause
//! is logged here, with its chain.
//!
//! # Connections
//!
//! Connections are keyed by the peer's node id, which is its advertised `host:port` (the node
//! part of its actors' addresses). A node is dialled by that id and must prove exactly that id
//! (the handshake refuses anyone else, before this node proves anything), so whoever holds an
//! address cannot pass for another node. Outgoing connections are made on the endpoint's arbiter
//! (the one [`NodeEndpoint::bind`] ran on), so a proxy on a TaskManager's arbiter that stops
//! does not take the connection with it. If two nodes dial each other at once both connections
//! may be kept and serve; each side sends on the one it keeps in its map, and a side whose dial
//! was refused (the other already held a live connection) sends on the one it accepted. A new
//! connection claiming an id this node already holds a live connection with is refused unless
//! the held one is proven dead: a frame read from it within half the accept timeout proves it
//! alive (a busy peer's data keeps coming when its answer to a probe would wait behind that
//! data), else it must answer a probe (a `Ping` its peer's connection answers by itself)
//! within as long again, else it is closed and the newcomer (a restarted node, a node whose
//! network came back) takes over.
//!
//! # Before and after authentication
//!
//! An accepted stream is nobody until its handshake succeeds: it gets `accept_timeout` for TLS
//! and the handshake, counts against `MAX_ACCEPTING_PER_SOURCE` and `MAX_ACCEPTING` (`accept`), and is
//! the first to be dropped for a newcomer while it has sent nothing (so idle sockets cannot keep
//! a talking peer out). An authenticated peer is still checked: an envelope naming another node
//! as its sender, or a message only this process may send
//! ([`Payload::local_only`](crate::messages::payload::Payload::local_only)), closes the
//! connection, and at most `max_inbound_in_flight` of its messages are handled at once.
//! Every handshake draws its nonce from a generator forked (with a full 256-bit seed) from the
//! endpoint's one long-lived [`NodeRng`], which the [`Network`] provides: the operating system's
//! entropy over TCP, the node's seed only in the simulation.

use std::any::TypeId;
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::io;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use actix::dev::{MessageResponse, OneshotSender};
use actix::{Actor, Context, Handler, Message};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

use crate::base::backoff::ExponentialBackoff;
use crate::base::error_chain::ErrorChain as Chain;
use crate::base::executor::NodeExecutor;
use crate::base::ids::ClusterId;
use crate::base::latch::Latch;
use crate::base::rng::NodeRng;
use crate::messages::ActorAddress;
use crate::messages::job_manager::{JobManagerGateway, JobManagerMessage};
use crate::messages::payload::{Envelope, Payload, PayloadKind};
use crate::messages::reply::{Answer, Reply, ReplyError};
use crate::messages::resource_manager::{ResourceManagerGateway, ResourceManagerMessage};
use crate::messages::task_manager::{TaskManagerGateway, TaskManagerMessage};
use crate::rpc::directory::{LocalActor, LocalDirectory, Resolver};
use crate::transport::connection::{
    self, ASK_TIMEOUT, ConnectionConfig, ConnectionError, DEFAULT_MAX_PENDING_ASKS,
    DEFAULT_OUTBOUND_QUEUE, Side,
};
use crate::transport::envelope::{self, EnvelopeKind};
use crate::transport::frame::DEFAULT_MAX_FRAME;
use crate::transport::handshake::{HandshakeConfig, HandshakeError, Secret};
use crate::transport::metrics::TransportMetrics;
use crate::transport::network::{BoxStream, Listener, Network, TcpNetwork};
use crate::transport::network::{DialError, EndpointError};
use crate::transport::tls::{Tls, TlsError};

/// A connection carrying Flint's protocol.
type Connection = connection::Connection<Payload>;

/// What a connection hands to the endpoint.
type Inbound = connection::Inbound<Payload>;

/// Tries to connect to a peer per need (an ask or tell that finds no live connection). Bounded,
/// so an unreachable peer fails the ask instead of hanging it.
pub const DIAL_ATTEMPTS: u32 = 4;

/// The pause after the first failed dial; it doubles after each further failure.
pub const DIAL_BACKOFF_INITIAL: Duration = Duration::from_millis(50);

/// The longest pause between two dials.
pub const DIAL_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// Inbound envelopes a connection may hand to its dispatcher before its reader waits
/// (backpressure onto the peer, see [`connection`]).
const INBOUND_QUEUE: usize = 256;

/// The default bound on asks and tells of one connection handled at once. Beyond it the
/// connection's dispatch waits (and with it the reader: backpressure onto the peer) instead of
/// spawning tasks without bound.
pub const DEFAULT_MAX_INBOUND_IN_FLIGHT: usize = 256;

/// The default pre-authentication deadline: an accepted stream must finish TLS and the handshake
/// within it (each), far less than a dialler's patience, since until then the peer is nobody.
pub const DEFAULT_ACCEPT_TIMEOUT: Duration = Duration::from_secs(2);

/// How a node's endpoint listens, proves itself and bounds its connections.
#[derive(Debug, Clone)]
pub struct EndpointConfig {
    /// Where to listen (`127.0.0.1:0` in tests: any free port).
    pub bind: SocketAddr,
    /// The host peers reach this node at, if not the bound IP (which must then not be a
    /// wildcard like `0.0.0.0`: peers dial the node id they see).
    pub advertised_host: Option<String>,
    /// The cluster; peers of other clusters are refused in the handshake.
    pub cluster_id: ClusterId,
    /// A name for logs.
    pub node_name: String,
    /// The shared cluster secret.
    pub secret: Secret,
    /// How long a handshake (and a TCP connect) may take on a connection this node dials.
    pub handshake_timeout: Duration,
    /// The pre-authentication deadline of an accepted stream (TLS, then the handshake, each):
    /// shorter than `handshake_timeout`, because an unauthenticated peer holds a slot meanwhile.
    pub accept_timeout: Duration,
    /// How long an ask waits for its reply.
    pub ask_timeout: Duration,
    /// The largest frame, in bytes; every node of a cluster should agree.
    pub max_frame: usize,
    /// Envelopes that may wait to be written per connection.
    pub outbound_queue: usize,
    /// Asks and tells from one connection handled at once (at least 1); each is given up after
    /// `ask_timeout`.
    pub max_inbound_in_flight: usize,
    /// The node's seed. Only a simulated network seeds the handshake nonces from it; over TCP
    /// they always come from the operating system (see [`Network::nonce_rng`]).
    pub seed: u64,
    /// TLS under the handshake, if set (every node of a cluster must agree).
    pub tls: Option<Tls>,
}

impl EndpointConfig {
    /// The defaults around what every node must choose: where to listen, the cluster, a name,
    /// the secret and a seed.
    pub fn new(
        bind: SocketAddr,
        cluster_id: ClusterId,
        node_name: impl Into<String>,
        secret: Secret,
        seed: u64,
    ) -> Self {
        Self {
            bind,
            advertised_host: None,
            cluster_id,
            node_name: node_name.into(),
            secret,
            handshake_timeout: Duration::from_secs(5),
            accept_timeout: DEFAULT_ACCEPT_TIMEOUT,
            ask_timeout: ASK_TIMEOUT,
            max_frame: DEFAULT_MAX_FRAME,
            outbound_queue: DEFAULT_OUTBOUND_QUEUE,
            max_inbound_in_flight: DEFAULT_MAX_INBOUND_IN_FLIGHT,
            seed,
            tls: None,
        }
    }
}

/// Why a message to a remote actor failed. The caller sees every one of these as
/// `MailboxError::Closed` (see the module docs); this is what the log says.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RemoteError {
    /// This node's endpoint is shut down.
    #[error("the endpoint is shut down")]
    ShutDown,
    /// No connection to the peer could be made. Retryable unless the cause says otherwise (a
    /// handshake refused for the secret or the cluster).
    #[error("cannot reach {peer} (after {attempts} attempts)")]
    Unreachable {
        /// The peer's node id.
        peer: String,
        /// How many dials were made.
        attempts: u32,
        /// The last dial's failure.
        #[source]
        source: Arc<DialError>,
    },
    /// The connection refused the send, went down while the ask waited, or the ask timed out.
    #[error("the message was not answered")]
    Connection(#[source] Arc<ConnectionError>),
    /// The peer answered, but not with the answer (unknown target, closed mailbox there).
    #[error(transparent)]
    Reply(#[from] ReplyError),
}

impl From<ConnectionError> for RemoteError {
    fn from(error: ConnectionError) -> Self {
        Self::Connection(Arc::new(error))
    }
}

/// A dial in progress, or its outcome (`None` until it ends). Waiters share one attempt.
type DialOutcome = Latch<Result<Connection, RemoteError>>;

/// Abandons a dial's outcome if the dial task is dropped unfinished (its node's loop stopped),
/// so its waiters stop waiting and the next request dials again.
struct AbandonOnDrop(DialOutcome);

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        self.0.abandon();
    }
}

/// How a connection is being opened.
enum Opening {
    /// This node dialled the node with this id (and will accept no other).
    Dial(String),
    /// This node accepted it; the peer is admitted by [`Inner::admit_peer`]. How far the peer
    /// got is noted for the admission of newcomers ([`accept::Progress`]).
    Accept(Arc<accept::Progress>),
}

impl Opening {
    fn side(&self) -> Side {
        match self {
            Opening::Dial(_) => Side::Initiator,
            Opening::Accept(_) => Side::Acceptor,
        }
    }
}

/// What this node has with one peer.
enum PeerSlot {
    /// A connection, with the id of the task that serves it.
    Connected { id: u64, connection: Connection },
    /// A dial is under way.
    Dialing(DialOutcome),
}

/// The endpoint's state, shared by the endpoint handle, the resolver, the proxies and the tasks.
struct Inner {
    config: EndpointConfig,
    local_node: String,
    /// Where byte streams come from: TCP, or the simulated network.
    network: Arc<dyn Network>,
    /// Where connections are dialled and served: the node's loop (the arbiter `bind` ran on).
    executor: NodeExecutor,
    directory: LocalDirectory,
    peers: Mutex<BTreeMap<String, PeerSlot>>,
    /// Gateways of remote actors handed out, by address: one proxy per remote actor.
    proxies: Mutex<BTreeMap<ActorAddress, LocalActor>>,
    /// The one long-lived generator: each handshake forks its nonce stream from it.
    rng: Mutex<NodeRng>,
    next_connection: AtomicU64,
    /// Handshakes in progress on accepted streams.
    accepting: Mutex<Accepting>,
    /// The live accepted connection of each peer: a newer one from the same peer replaces it,
    /// so a peer has at most one accepted connection (and one this node dialled).
    accepted: Mutex<BTreeMap<String, (u64, Connection)>>,
    shutdown: Latch<()>,
    /// What every connection carried, and the connections refused (for `/metrics`).
    metrics: TransportMetrics,
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeEndpoint")
            .field("node", &self.local_node)
            .field("name", &self.config.node_name)
            .finish_non_exhaustive()
    }
}

/// Locks a mutex whose data stays consistent whatever panicked while it was held (every
/// update is one insert, remove or draw).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Inner {
    fn is_shut_down(&self) -> bool {
        self.shutdown.is_settled()
    }

    fn connection_config(&self, side: Side) -> ConnectionConfig {
        let config = &self.config;
        ConnectionConfig {
            handshake: HandshakeConfig {
                cluster_id: config.cluster_id.clone(),
                node_id: self.local_node.clone(),
                secret: config.secret.clone(),
                timeout: self.handshake_timeout(side),
            },
            max_frame: config.max_frame,
            outbound_queue: config.outbound_queue,
            ask_timeout: config.ask_timeout,
            max_pending_asks: DEFAULT_MAX_PENDING_ASKS,
            metrics: self.metrics.clone(),
        }
    }

    /// How long TLS and the handshake may each take on `side`.
    fn handshake_timeout(&self, side: Side) -> Duration {
        match side {
            Side::Initiator => self.config.handshake_timeout,
            Side::Acceptor => self.config.accept_timeout,
        }
    }

    /// The live connection `peer` opened to this node, if there is one.
    fn live_accepted(&self, peer: &str) -> Option<(u64, Connection)> {
        lock(&self.accepted)
            .get(peer)
            .filter(|(_, connection)| connection.close_reason().is_none())
            .cloned()
    }

    /// The live connection to `peer`, if there is one.
    fn live(&self, peer: &str) -> Option<Connection> {
        match lock(&self.peers).get(peer) {
            Some(PeerSlot::Connected { connection, .. }) if connection.close_reason().is_none() => {
                Some(connection.clone())
            }
            _ => None,
        }
    }

    /// A live connection to `peer`: the one there is, the one being dialled, or a new dial.
    async fn connection(self: &Arc<Self>, peer: &str) -> Result<Connection, RemoteError> {
        if self.is_shut_down() {
            return Err(RemoteError::ShutDown);
        }
        let outcome = {
            let mut peers = lock(&self.peers);
            match peers.get(peer) {
                Some(PeerSlot::Connected { connection, .. })
                    if connection.close_reason().is_none() =>
                {
                    return Ok(connection.clone());
                }
                // A dial whose task still runs (a task that was dropped unfinished, with its
                // arbiter, has dropped its sender: dial again).
                Some(PeerSlot::Dialing(outcome)) if !outcome.is_settled() => outcome.clone(),
                _ => {
                    let outcome = Latch::new();
                    let done = AbandonOnDrop(outcome.clone());
                    peers.insert(peer.to_owned(), PeerSlot::Dialing(outcome.clone()));
                    let endpoint = Arc::clone(self);
                    let target = peer.to_owned();
                    if !self.executor.spawn(move || endpoint.dial(target, done)) {
                        peers.remove(peer);
                        return Err(RemoteError::ShutDown);
                    }
                    outcome
                }
            }
        };
        match outcome.wait().await {
            Some(result) => result,
            // The dial task was dropped unfinished: its arbiter (the endpoint's) stopped.
            None => Err(RemoteError::ShutDown),
        }
    }

    /// Dials `peer` with backoff, records the outcome and tells the waiters.
    async fn dial(self: Arc<Self>, peer: String, done: AbandonOnDrop) {
        let result = tokio::select! {
            biased;
            _ = self.shutdown.wait() => Err(RemoteError::ShutDown),
            result = self.dial_with_backoff(&peer) => result,
        };
        {
            let mut peers = lock(&self.peers);
            match &result {
                Ok((id, connection)) => {
                    peers.insert(
                        peer.clone(),
                        PeerSlot::Connected {
                            id: *id,
                            connection: connection.clone(),
                        },
                    );
                }
                Err(_) => {
                    if matches!(peers.get(&peer), Some(PeerSlot::Dialing(_))) {
                        peers.remove(&peer);
                    }
                }
            }
        }
        // Two nodes that dialled each other at once: the peer may refuse our dial because its
        // own connection to us, accepted here meanwhile, is alive. Send on that one.
        let result = match result {
            Err(error) => match self.live_accepted(&peer) {
                Some((id, connection)) => {
                    log::debug!(
                        "{}: dial to {peer} failed ({}); using its connection to us",
                        self.config.node_name,
                        Chain(&error)
                    );
                    lock(&self.peers).insert(
                        peer.clone(),
                        PeerSlot::Connected {
                            id,
                            connection: connection.clone(),
                        },
                    );
                    Ok((id, connection))
                }
                None => Err(error),
            },
            ok => ok,
        };
        if let Err(error) = &result {
            log::warn!(
                "{}: cannot connect to {peer}: {}",
                self.config.node_name,
                Chain(error)
            );
        }
        done.0.set(result.map(|(_, connection)| connection));
    }

    async fn dial_with_backoff(
        self: &Arc<Self>,
        peer: &str,
    ) -> Result<(u64, Connection), RemoteError> {
        let mut backoff = ExponentialBackoff::new(DIAL_BACKOFF_INITIAL, DIAL_BACKOFF_MAX);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let error = match self.dial_once(peer).await {
                Ok(connected) => return Ok(connected),
                Err(error) => error,
            };
            if !error.is_retryable() || attempt >= DIAL_ATTEMPTS {
                return Err(RemoteError::Unreachable {
                    peer: peer.to_owned(),
                    attempts: attempt,
                    source: Arc::new(error),
                });
            }
            log::debug!(
                "{}: dial {attempt} to {peer} failed: {}",
                self.config.node_name,
                Chain(&error)
            );
            tokio::time::sleep(backoff.next_delay()).await;
        }
    }

    async fn dial_once(self: &Arc<Self>, peer: &str) -> Result<(u64, Connection), DialError> {
        let stream = self
            .network
            .connect(peer, self.config.handshake_timeout)
            .await?;
        self.open(stream, Opening::Dial(peer.to_owned()), peer)
            .await
    }

    /// Opens TLS on `stream` if configured (towards or from `peer`, `host:port`), then
    /// [`establish`](Self::establish)es the connection on it.
    async fn open(
        self: &Arc<Self>,
        stream: BoxStream,
        opening: Opening,
        peer: &str,
    ) -> Result<(u64, Connection), DialError> {
        let Some(tls) = &self.config.tls else {
            return Ok(self.establish(stream, opening).await?);
        };
        let timeout = self.handshake_timeout(opening.side());
        let timed_out = |_| TlsError::Timeout(timeout);
        Ok(match opening {
            Opening::Dial(_) => {
                let stream = tokio::time::timeout(timeout, tls.connect(peer, stream))
                    .await
                    .map_err(timed_out)??;
                self.establish(stream, opening).await?
            }
            Opening::Accept(_) => {
                let stream = tokio::time::timeout(timeout, tls.accept(stream))
                    .await
                    .map_err(timed_out)??;
                self.establish(stream, opening).await?
            }
        })
    }

    /// Shakes hands on `stream` (an accepted peer is admitted by [`admit_peer`](Self::admit_peer)) and
    /// starts the task that serves the connection.
    async fn establish<S>(
        self: &Arc<Self>,
        stream: S,
        opening: Opening,
    ) -> Result<(u64, Connection), ConnectionError>
    where
        S: AsyncRead + AsyncWrite + Unpin + 'static,
    {
        let mut rng = lock(&self.rng).fork_wide();
        let (inbound, received) = mpsc::channel(INBOUND_QUEUE);
        let side = opening.side();
        let config = self.connection_config(side);
        let connection = match opening {
            Opening::Dial(peer) => {
                connection::dial(stream, &peer, config, &mut rng, inbound).await?
            }
            Opening::Accept(progress) => {
                let endpoint = Arc::clone(self);
                let admit = move |peer| endpoint.admit_peer(peer);
                let stream = accept::first_message(stream, progress);
                connection::accept(stream, config, &mut rng, admit, inbound).await?
            }
        };
        let id = self.next_connection.fetch_add(1, Ordering::Relaxed);
        log::info!(
            "{}: connected to {} ({side:?})",
            self.config.node_name,
            connection.peer()
        );
        tokio::task::spawn_local(Arc::clone(self).serve(id, connection.clone(), received));
        Ok((id, connection))
    }

    /// Serves one connection: dispatches what the peer sends until it ends, closes it when the
    /// endpoint shuts down, and forgets it once it is down.
    async fn serve(
        self: Arc<Self>,
        id: u64,
        connection: Connection,
        mut inbound: mpsc::Receiver<Inbound>,
    ) {
        let mut closing = false;
        let in_flight = Arc::new(Semaphore::new(self.config.max_inbound_in_flight.max(1)));
        loop {
            let item = tokio::select! {
                biased;
                _ = self.shutdown.wait(), if !closing => {
                    closing = true;
                    connection.close("the endpoint shut down");
                    continue;
                }
                item = inbound.recv() => item,
            };
            match item {
                Some(Inbound::Envelope { peer, envelope }) => {
                    // Waits while `max_inbound_in_flight` of this peer's messages are handled;
                    // each is bounded by the ask timeout, so the wait is too.
                    let Ok(permit) = Arc::clone(&in_flight).acquire_owned().await else {
                        break; // never closed: unreachable, but ending is the safe answer
                    };
                    self.dispatch(&connection, &peer, envelope, permit);
                }
                Some(Inbound::PeerDown { .. }) | None => break,
            }
        }
        {
            let mut accepted = lock(&self.accepted);
            if matches!(accepted.get(connection.peer()), Some((current, _)) if *current == id) {
                accepted.remove(connection.peer());
            }
        }
        let mut peers = lock(&self.peers);
        if matches!(peers.get(connection.peer()), Some(PeerSlot::Connected { id: current, .. }) if *current == id)
        {
            peers.remove(connection.peer());
        }
    }

    fn shut_down(&self) {
        if !self.shutdown.set(()) {
            return;
        }
        let peers = std::mem::take(&mut *lock(&self.peers));
        for slot in peers.into_values() {
            if let PeerSlot::Connected { connection, .. } = slot {
                connection.close("the endpoint shut down");
            }
        }
        lock(&self.proxies).clear();
        log::info!("{}: endpoint shut down", self.config.node_name);
    }
}

/// A node's presence on the network: the listener, the connections to its peers, dispatch of
/// inbound envelopes to its actors. Dropping it shuts it down.
#[derive(Debug)]
pub struct NodeEndpoint {
    inner: Arc<Inner>,
}

impl NodeEndpoint {
    /// Listens on `config.bind` and starts accepting on the current arbiter. The returned
    /// resolver goes into the node's `NodeEnv`: actors register through it and reach remote
    /// actors through it.
    ///
    /// # Panics
    ///
    /// Outside an actix arbiter (a `System` or `#[actix::test]`), as `actix::spawn` does.
    pub async fn bind(
        config: EndpointConfig,
    ) -> Result<(NodeEndpoint, Arc<RemoteResolver>), EndpointError> {
        Self::bind_on(
            config,
            Arc::new(TcpNetwork),
            NodeExecutor::current_arbiter(),
        )
        .await
    }

    /// Like [`bind`](Self::bind), on any [`Network`], with the node's background work on
    /// `executor` (the simulation gives each node its own network handle and `LocalSet`).
    pub async fn bind_on(
        config: EndpointConfig,
        network: Arc<dyn Network>,
        executor: NodeExecutor,
    ) -> Result<(NodeEndpoint, Arc<RemoteResolver>), EndpointError> {
        let (local_node, listener) = network
            .bind(config.bind, config.advertised_host.clone())
            .await?;
        if config.secret.is_insecure() {
            log::warn!(
                "{}: the cluster secret is empty: any peer that can connect is trusted",
                config.node_name
            );
        }
        let rng = network.nonce_rng(config.seed);
        let inner = Arc::new(Inner {
            local_node,
            network,
            executor,
            directory: LocalDirectory::new(),
            peers: Mutex::new(BTreeMap::new()),
            proxies: Mutex::new(BTreeMap::new()),
            rng: Mutex::new(rng),
            next_connection: AtomicU64::new(1),
            accepting: Mutex::new(Accepting::default()),
            accepted: Mutex::new(BTreeMap::new()),
            shutdown: Latch::new(),
            metrics: TransportMetrics::new(),
            config,
        });
        log::info!(
            "{}: listening on {} as {}",
            inner.config.node_name,
            inner.config.bind,
            inner.local_node
        );
        tokio::task::spawn_local(Arc::clone(&inner).accept_loop(listener));
        let resolver = Arc::new(RemoteResolver {
            inner: Arc::clone(&inner),
        });
        Ok((NodeEndpoint { inner }, resolver))
    }

    /// The `host:port` other nodes reach this one at: the node part of its actors' addresses.
    pub fn local_node(&self) -> String {
        self.inner.local_node.clone()
    }

    /// Stops listening and closes every connection: pending asks on both sides fail at once, and
    /// every later message through this node's proxies fails with [`RemoteError::ShutDown`].
    /// Idempotent.
    pub fn shutdown(&self) {
        self.inner.shut_down();
    }

    /// The endpoint's counters: envelopes and bytes over all its connections, and refused
    /// inbound connections. Clones share the counters, so the REST API reads them live.
    pub fn metrics(&self) -> TransportMetrics {
        self.inner.metrics.clone()
    }

    /// The peers this node has a live connection to, for status and tests.
    pub fn connected_peers(&self) -> Vec<String> {
        lock(&self.inner.peers)
            .iter()
            .filter_map(|(peer, slot)| match slot {
                PeerSlot::Connected { connection, .. } if connection.close_reason().is_none() => {
                    Some(peer.clone())
                }
                _ => None,
            })
            .collect()
    }
}

impl Drop for NodeEndpoint {
    fn drop(&mut self) {
        self.inner.shut_down();
    }
}

mod accept;
use accept::Accepting;
mod dispatch;
mod proxy;

pub use proxy::{
    JobManagerProxy, RemoteProxy, RemoteResolver, RemoteResponse, ResourceManagerProxy,
    TaskManagerProxy,
};

#[cfg(test)]
mod tests;
