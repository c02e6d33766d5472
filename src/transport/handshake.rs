//! The connection handshake: what two nodes say to each other before any envelope.
//!
//! This module owns proving, in both directions, that the peer speaks our protocol version,
//! belongs to our cluster and knows the shared cluster secret, bound to this one connection so a
//! recorded or reflected proof is worthless. It must never read a byte past the handshake (the
//! steady-state frame codec takes the stream over exactly where the peer's proof ends, so there is
//! no read-ahead buffer here), never draw a nonce from anything but the caller's [`NodeRng`], and
//! never wait without the handshake timeout.
//!
//! # Protocol
//!
//! Both sides run the same steps; only the role byte in the proof differs. Neither side waits for
//! the other before sending its `Hello`, nor before sending its `Proof` once it has the peer's
//! `Hello`, so the handshake costs two round trips at most and cannot deadlock (each message is
//! far smaller than any socket buffer).
//!
//! ```text
//!  initiator (connected out)                                  acceptor (listened)
//!      │ ── Hello { version, cluster_id, node_id_i, nonce_i } ──▶ │
//!      │ ◀── Hello { version, cluster_id, node_id_a, nonce_a } ── │
//!      │   each: version == PROTOCOL_VERSION, cluster ids equal   │
//!      │ ── Proof { mac_i } ────────────────────────────────────▶ │
//!      │ ◀──────────────────────────────────────── Proof { mac_a } │
//!      │   each: verify the peer's mac (constant time)            │
//!  Established { node_id_a }                        Established { node_id_i }
//!
//!  mac_i = HMAC-SHA256(secret, "flint-handshake-v2" ‖ 'I' ‖ transcript)
//!  mac_a = HMAC-SHA256(secret, "flint-handshake-v2" ‖ 'A' ‖ transcript)
//!  transcript = id(node_id_i) ‖ id(node_id_a) ‖ nonce_i ‖ nonce_a ‖ id(cluster_id)
//!  id(x) = x's length as 8 bytes big-endian ‖ x's UTF-8 bytes
//! ```
//!
//! - The **transcript is in connection order** (initiator first, acceptor second), not in
//!   prover/verifier order, and the **role byte** says which end proves. An initiator's proof is
//!   therefore never an acceptor's proof, on this connection or any other.
//! - A peer **claiming our own node id is refused** before any proof is made. Together with the
//!   fixed order this stops cross-connection reflection: an attacker we dial (say, someone
//!   holding the JobManager's port while it is down) who opens a second connection to us and
//!   crosses the two nonces would need our proof as initiator `'I' ‖ id(us) ‖ id(them) ‖ …` to
//!   equal the proof we expect as acceptor `'I' ‖ id(them) ‖ id(us) ‖ …`, which only holds when
//!   `them` is `us`.
//! - **Both nonces** make every proof specific to one connection: a proof recorded from another
//!   handshake is refused as long as our nonce is fresh. The nonces come from the network's nonce
//!   source ([`Network::nonce_rng`](super::network::Network::nonce_rng)): the operating
//!   system's entropy in production, never the configuration's `seed` (a replayed run would
//!   replay its nonces); only the deterministic simulation draws them from its seeded generator.
//! - The node ids and the cluster id are **length-prefixed** so no two different
//!   `(initiator, acceptor, cluster)` triples hash the same bytes (`"ab" ‖ "c"` vs `"a" ‖ "bc"`).
//!
//! Each message travels in a tiny frame of its own: a 4-byte big-endian length, then the
//! [`crate::base::codec`] encoding of a [`HandshakeMessage`]. A length over [`MAX_HANDSHAKE_MESSAGE`] is
//! refused before anything is allocated for it.
//!
//! # What the handshake does not do
//!
//! It authenticates the two ends at the moment of connecting; it neither encrypts nor
//! authenticates the frames that follow, and it sends the cluster id and node id in the clear to
//! whoever connects. Someone who can rewrite traffic on the path can relay a genuine handshake and
//! then inject frames: that is what the TLS option (DESIGN §4) is for. With
//! [`Secret::insecure`] anyone can compute a proof; the handshake then only catches
//! misconfiguration (wrong cluster, wrong version), never an attacker.

use std::fmt;
use std::io;
use std::time::Duration;

use hmac::digest::KeyInit;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::base::codec::{self, CodecError};
use crate::base::ids::ClusterId;
use crate::base::rng::NodeRng;

/// The environment variable a node reads the cluster secret from (its bytes, as they are), and
/// through which a JobManager hands it to the TaskManager processes it starts.
pub const SECRET_ENV: &str = "FLINT_SECRET";

/// The handshake protocol version this node speaks. A peer with another version is refused
/// rather than guessed at: the envelopes that follow the handshake would not decode either.
/// 4: a data connection's answers carry byte buffers, not record lists.
/// 5: a TaskManager's heartbeat lists the jobs it holds result partitions of.
/// 6: a data connection subscribes a gate to a set of partitions at once and hears how each
///    partition ended once (`PartitionNotice`), not channel by channel.
/// 7: typed programs — a finished task's state carries what it sends back (`collect()`), a
///    client asks for a job's results (`RequestJobResults`).
/// 8: a TaskManager registers its fingerprint (build and operator identities).
pub const PROTOCOL_VERSION: u32 = 8;

/// The largest handshake message, in bytes (after the length prefix). A `Hello` with a sensible
/// node id is under 200 bytes; the limit stops a peer (or a stray HTTP client) from making us
/// allocate before it has proved anything.
pub const MAX_HANDSHAKE_MESSAGE: usize = 4096;

/// The bytes every proof starts with, so a MAC made here can never be mistaken for a MAC of the
/// same secret made for another purpose (or another version of this protocol).
const DOMAIN: &[u8] = b"flint-handshake-v2";

/// Bytes in a nonce.
const NONCE_LEN: usize = 32;

/// The block size of SHA-256: HMAC's key length after RFC 2104 key preparation.
const HMAC_BLOCK: usize = 64;

type HmacSha256 = Hmac<Sha256>;

/// The shared cluster secret. Its `Debug` never shows the bytes, so it cannot leak through a
/// logged config.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// A secret from its bytes (read from a file or the environment by the caller). Empty bytes
    /// are the same as [`Secret::insecure`].
    pub fn from_bytes(bytes: impl Into<Vec<u8>>) -> Self {
        Self(bytes.into())
    }

    /// The empty secret of the explicit `--insecure` mode: **no authentication at all**, anyone
    /// who can connect can compute every proof. It still runs the very same protocol (there is one
    /// code path to test), so version and cluster checks keep working.
    pub fn insecure() -> Self {
        Self(Vec::new())
    }

    /// The secret's bytes, to hand to a child process through its environment (never its
    /// command line); `None` for the insecure secret.
    pub fn expose(&self) -> Option<&[u8]> {
        (!self.0.is_empty()).then_some(self.0.as_slice())
    }

    /// Whether this is the insecure (empty) secret, so a caller can warn loudly about it.
    pub fn is_insecure(&self) -> bool {
        self.0.is_empty()
    }

    /// The HMAC key prepared as RFC 2104 §2 prescribes: hashed if longer than a block, then
    /// zero-padded to one. Keying HMAC with the prepared block is infallible (`KeyInit::new`),
    /// where keying it with arbitrary bytes returns a `Result` that cannot fail but would need an
    /// unwrap; a test checks the two agree.
    fn hmac_key(&self) -> [u8; HMAC_BLOCK] {
        let mut key = [0u8; HMAC_BLOCK];
        if self.0.len() > HMAC_BLOCK {
            let digest = Sha256::digest(&self.0);
            key[..digest.len()].copy_from_slice(&digest);
        } else {
            key[..self.0.len()].copy_from_slice(&self.0);
        }
        key
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// What a node needs to shake hands: who it is, which cluster, the secret, and how long a peer
/// may take (a peer that stalls must not hold a connection slot forever).
#[derive(Debug, Clone)]
pub struct HandshakeConfig {
    /// This node's cluster; a peer of another cluster is refused.
    pub cluster_id: ClusterId,
    /// This node's id, told to the peer and bound into the proofs.
    pub node_id: String,
    /// The shared cluster secret.
    pub secret: Secret,
    /// The whole handshake must finish within this (both messages both ways).
    pub timeout: Duration,
}

/// Which end of the connection a node is: it decides the role byte of its proof, so that a proof
/// cannot be reflected back to the side that made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The side that connected out.
    Initiator,
    /// The side that accepted the connection.
    Acceptor,
}

impl Role {
    fn byte(self) -> u8 {
        match self {
            Role::Initiator => b'I',
            Role::Acceptor => b'A',
        }
    }

    fn peer(self) -> Role {
        match self {
            Role::Initiator => Role::Acceptor,
            Role::Acceptor => Role::Initiator,
        }
    }
}

/// The first message of each side: who it is, and the nonce the peer's proof must cover.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// The sender's [`PROTOCOL_VERSION`].
    pub protocol_version: u32,
    /// The sender's cluster.
    pub cluster_id: ClusterId,
    /// The sender's node id.
    pub node_id: String,
    /// Fresh random bytes from the sender's [`NodeRng`]: the peer must prove the secret over them.
    pub nonce: [u8; NONCE_LEN],
}

/// The second message of each side: proof that the sender knows the cluster secret, for this
/// connection only (see the module docs for what the MAC covers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proof {
    /// HMAC-SHA256 over the domain, the sender's role byte, both nonces, both node ids and the
    /// cluster id.
    pub mac: [u8; 32],
}

/// Everything that travels during the handshake; one enum so a message in the wrong place
/// decodes and is refused as out of order rather than misread.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HandshakeMessage {
    /// Step 1.
    Hello(Hello),
    /// Step 3.
    Proof(Proof),
}

/// A finished handshake: the peer is of our cluster and version and knows the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Established {
    /// The node id the peer claimed in its `Hello`, now backed by its proof.
    pub peer_node_id: String,
}

/// Why a handshake failed: logged as the reason the connection was closed, so each message says
/// what was wrong. Only [`is_retryable`](Self::is_retryable) errors are worth reconnecting for.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// The peer speaks another protocol version. Not retryable: one side must be upgraded.
    #[error("peer speaks handshake protocol version {theirs}, this node speaks version {ours}")]
    VersionMismatch {
        /// Our [`PROTOCOL_VERSION`].
        ours: u32,
        /// The peer's.
        theirs: u32,
    },
    /// The peer belongs to another cluster. Not retryable: the configuration is wrong.
    #[error("peer belongs to cluster `{theirs}`, this node to cluster `{ours}`")]
    WrongCluster {
        /// Our cluster.
        ours: ClusterId,
        /// The peer's.
        theirs: ClusterId,
    },
    /// The peer's proof is wrong. Not retryable: it has another secret, or it is replaying or
    /// reflecting a proof.
    #[error(
        "peer's proof of the cluster secret is wrong (a different secret, or a replayed or reflected proof)"
    )]
    BadProof,
    /// The peer claims this node's own node id: a reflection of our own side (or a second node
    /// configured with our address). Not retryable.
    #[error("peer claims this node's own node id `{node_id}`")]
    OwnNodeId {
        /// The id both sides claim.
        node_id: String,
    },
    /// The handshake did not finish in time (the peer is slow, stuck, or not a Flint node).
    /// Retryable.
    #[error("handshake did not finish within {after:?}")]
    Timeout {
        /// The configured timeout.
        after: Duration,
    },
    /// The peer closed the connection before the handshake finished (it may have refused us).
    /// Retryable.
    #[error("peer closed the connection during the handshake")]
    Closed,
    /// A handshake message is not a valid `Hello` or `Proof` (garbage, or not a Flint peer). Not
    /// retryable.
    #[error("malformed handshake message")]
    Malformed(#[source] CodecError),
    /// A handshake message is over [`MAX_HANDSHAKE_MESSAGE`] (a peer's claimed length, or our own
    /// `Hello` with an absurd node id). Not retryable.
    #[error("handshake message of {length} bytes is over the {max}-byte limit")]
    TooLarge {
        /// The length claimed or needed.
        length: usize,
        /// [`MAX_HANDSHAKE_MESSAGE`].
        max: usize,
    },
    /// Reading or writing the connection failed. Retryable.
    #[error("I/O error during the handshake")]
    Io(#[source] io::Error),
    /// A valid message arrived where the protocol does not allow it (e.g. a `Proof` before the
    /// `Hello`). Not retryable: the peer does not follow the protocol.
    #[error("unexpected {message} in handshake state {state}")]
    OutOfOrder {
        /// The state the handshake was in ([`HandshakeState::name`]).
        state: &'static str,
        /// What arrived ([`HandshakeEvent::name`]).
        message: &'static str,
    },
}

impl HandshakeError {
    /// Whether connecting again may succeed without anyone changing anything: a timeout, a
    /// closed connection or an I/O error. The others need a configuration change or are an
    /// attack; retrying them would only hammer the peer.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            HandshakeError::Timeout { .. } | HandshakeError::Closed | HandshakeError::Io(_)
        )
    }
}

/// Where a handshake stands. Each state says what the node waits for; the peer's `Hello` is
/// carried from the moment it is checked, since both proofs are computed over it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeState {
    /// Our `Hello` is being sent.
    SendHello,
    /// Waiting for the peer's `Hello`.
    AwaitHello,
    /// Our `Proof` is being sent; the peer's `Hello` has been checked.
    SendProof {
        /// The peer's checked `Hello`.
        peer: Hello,
    },
    /// Waiting for the peer's `Proof`.
    AwaitProof {
        /// The peer's checked `Hello`.
        peer: Hello,
    },
    /// Both sides are proven; the stream belongs to the steady-state transport.
    Established,
    /// The handshake failed; the connection must be closed.
    Failed,
}

impl HandshakeState {
    /// The state's name, for [`HandshakeError::OutOfOrder`] and logs.
    pub fn name(&self) -> &'static str {
        match self {
            HandshakeState::SendHello => "SendHello",
            HandshakeState::AwaitHello => "AwaitHello",
            HandshakeState::SendProof { .. } => "SendProof",
            HandshakeState::AwaitProof { .. } => "AwaitProof",
            HandshakeState::Established => "Established",
            HandshakeState::Failed => "Failed",
        }
    }
}

/// What happened: a message of ours went out, or one of the peer's came in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeEvent {
    /// Our `Hello` was written.
    HelloSent,
    /// The peer's `Hello` arrived.
    HelloReceived(Hello),
    /// Our `Proof` was written.
    ProofSent,
    /// The peer's `Proof` arrived.
    ProofReceived(Proof),
}

impl HandshakeEvent {
    /// The event's name, for [`HandshakeError::OutOfOrder`] and logs.
    pub fn name(&self) -> &'static str {
        match self {
            HandshakeEvent::HelloSent => "HelloSent",
            HandshakeEvent::HelloReceived(_) => "Hello",
            HandshakeEvent::ProofSent => "ProofSent",
            HandshakeEvent::ProofReceived(_) => "Proof",
        }
    }
}

impl From<HandshakeMessage> for HandshakeEvent {
    fn from(message: HandshakeMessage) -> Self {
        match message {
            HandshakeMessage::Hello(hello) => HandshakeEvent::HelloReceived(hello),
            HandshakeMessage::Proof(proof) => HandshakeEvent::ProofReceived(proof),
        }
    }
}

/// What the driver must do next. The state machine never touches the connection itself, so the
/// async functions below and a simulated transport can drive the same logic.
#[derive(Debug)]
pub enum HandshakeAction {
    /// Write this message, then report [`HandshakeEvent::HelloSent`] or
    /// [`HandshakeEvent::ProofSent`].
    Send(HandshakeMessage),
    /// Read the peer's next message and report it.
    Receive,
    /// The handshake succeeded.
    Done(Established),
    /// The handshake failed: close the connection, logging the error.
    Fail(HandshakeError),
}

/// What stays fixed for one handshake: our role, our `Hello` (with our nonce) and the secret.
#[derive(Debug, Clone)]
struct Context {
    role: Role,
    own: Hello,
    secret: Secret,
}

/// One handshake as a state machine: [`Handshake::on`] is its only transition, and it does no
/// I/O, so every state × event pair can be tested without a connection.
#[derive(Debug, Clone)]
pub struct Handshake {
    context: Context,
    state: HandshakeState,
}

impl Handshake {
    /// Starts a handshake in [`HandshakeState::SendHello`], drawing our nonce from `rng`, and
    /// returns the first action (send our `Hello`).
    pub fn new(role: Role, config: &HandshakeConfig, rng: &mut NodeRng) -> (Self, HandshakeAction) {
        let own = Hello {
            protocol_version: PROTOCOL_VERSION,
            cluster_id: config.cluster_id.clone(),
            node_id: config.node_id.clone(),
            nonce: draw_nonce(rng),
        };
        let action = HandshakeAction::Send(HandshakeMessage::Hello(own.clone()));
        let context = Context {
            role,
            own,
            secret: config.secret.clone(),
        };
        let machine = Self {
            context,
            state: HandshakeState::SendHello,
        };
        (machine, action)
    }

    /// Where the handshake stands.
    pub fn state(&self) -> &HandshakeState {
        &self.state
    }

    /// Feeds one event and returns what to do next. An event the current state does not expect
    /// fails the handshake with [`HandshakeError::OutOfOrder`]; it never panics.
    pub fn on(&mut self, event: HandshakeEvent) -> HandshakeAction {
        let state = std::mem::replace(&mut self.state, HandshakeState::Failed);
        let (next, action) = transition(&self.context, state, event);
        self.state = next;
        action
    }
}

/// The transition function: the whole protocol logic, pure.
fn transition(
    context: &Context,
    state: HandshakeState,
    event: HandshakeEvent,
) -> (HandshakeState, HandshakeAction) {
    use HandshakeEvent as E;
    use HandshakeState as S;
    match (state, event) {
        (S::SendHello, E::HelloSent) => (S::AwaitHello, HandshakeAction::Receive),
        (S::AwaitHello, E::HelloReceived(peer)) => match check_hello(&context.own, &peer) {
            Ok(()) => {
                let mac = proof(&context.secret, context.role, &context.own, &peer).finalize();
                let proof = Proof {
                    mac: mac.into_bytes().into(),
                };
                (
                    S::SendProof { peer },
                    HandshakeAction::Send(HandshakeMessage::Proof(proof)),
                )
            }
            Err(error) => (S::Failed, HandshakeAction::Fail(error)),
        },
        (S::SendProof { peer }, E::ProofSent) => (S::AwaitProof { peer }, HandshakeAction::Receive),
        (S::AwaitProof { peer }, E::ProofReceived(received)) => {
            // The peer proves with its own role byte, over our nonce then its own.
            let expected = proof(&context.secret, context.role.peer(), &peer, &context.own);
            match expected.verify_slice(&received.mac) {
                Ok(()) => (
                    S::Established,
                    HandshakeAction::Done(Established {
                        peer_node_id: peer.node_id,
                    }),
                ),
                Err(_) => (S::Failed, HandshakeAction::Fail(HandshakeError::BadProof)),
            }
        }
        (state, event) => (
            S::Failed,
            HandshakeAction::Fail(HandshakeError::OutOfOrder {
                state: state.name(),
                message: event.name(),
            }),
        ),
    }
}

fn check_hello(own: &Hello, peer: &Hello) -> Result<(), HandshakeError> {
    if peer.protocol_version != own.protocol_version {
        return Err(HandshakeError::VersionMismatch {
            ours: own.protocol_version,
            theirs: peer.protocol_version,
        });
    }
    if peer.cluster_id != own.cluster_id {
        return Err(HandshakeError::WrongCluster {
            ours: own.cluster_id.clone(),
            theirs: peer.cluster_id.clone(),
        });
    }
    if peer.node_id == own.node_id {
        return Err(HandshakeError::OwnNodeId {
            node_id: peer.node_id.clone(),
        });
    }
    Ok(())
}

/// The MAC `prover` (in `role`) must present to `verifier`, not yet finalized so the verifier
/// can compare in constant time. Only called once the cluster ids are known to be equal. The
/// transcript is in connection order whoever proves (see the module docs for why).
fn proof(secret: &Secret, role: Role, prover: &Hello, verifier: &Hello) -> HmacSha256 {
    let (initiator, acceptor) = match role {
        Role::Initiator => (prover, verifier),
        Role::Acceptor => (verifier, prover),
    };
    let mut mac = <HmacSha256 as KeyInit>::new(&secret.hmac_key().into());
    mac.update(DOMAIN);
    mac.update(&[role.byte()]);
    update_field(&mut mac, initiator.node_id.as_bytes());
    update_field(&mut mac, acceptor.node_id.as_bytes());
    mac.update(&initiator.nonce);
    mac.update(&acceptor.nonce);
    update_field(&mut mac, prover.cluster_id.as_str().as_bytes());
    mac
}

/// A variable-length field, length first, so field boundaries cannot shift.
fn update_field(mac: &mut HmacSha256, bytes: &[u8]) {
    mac.update(&(bytes.len() as u64).to_be_bytes());
    mac.update(bytes);
}

fn draw_nonce(rng: &mut NodeRng) -> [u8; NONCE_LEN] {
    let mut nonce = [0u8; NONCE_LEN];
    for chunk in nonce.chunks_exact_mut(8) {
        chunk.copy_from_slice(&rng.next_u64().to_le_bytes());
    }
    nonce
}

/// Shakes hands as the side that connected out. On success the stream is positioned right after
/// the peer's proof, ready for the steady-state frames.
///
/// `rng` must be the node's long-lived generator for connections (not one re-created per
/// connection from the same seed): the nonce drawn from it is what makes a recorded proof
/// useless.
pub async fn initiate<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    config: &HandshakeConfig,
    rng: &mut NodeRng,
) -> Result<Established, HandshakeError> {
    run(Role::Initiator, stream, config, rng).await
}

/// Shakes hands as the side that accepted the connection; otherwise as [`initiate`].
pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    config: &HandshakeConfig,
    rng: &mut NodeRng,
) -> Result<Established, HandshakeError> {
    run(Role::Acceptor, stream, config, rng).await
}

async fn run<S: AsyncRead + AsyncWrite + Unpin>(
    role: Role,
    stream: &mut S,
    config: &HandshakeConfig,
    rng: &mut NodeRng,
) -> Result<Established, HandshakeError> {
    let (machine, first) = Handshake::new(role, config, rng);
    tokio::time::timeout(config.timeout, drive(stream, machine, first))
        .await
        .unwrap_or(Err(HandshakeError::Timeout {
            after: config.timeout,
        }))
}

async fn drive<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    mut machine: Handshake,
    mut action: HandshakeAction,
) -> Result<Established, HandshakeError> {
    loop {
        action = match action {
            HandshakeAction::Send(message) => {
                write_message(stream, &message).await?;
                machine.on(match message {
                    HandshakeMessage::Hello(_) => HandshakeEvent::HelloSent,
                    HandshakeMessage::Proof(_) => HandshakeEvent::ProofSent,
                })
            }
            HandshakeAction::Receive => machine.on(read_message(stream).await?.into()),
            HandshakeAction::Done(established) => return Ok(established),
            HandshakeAction::Fail(error) => return Err(error),
        };
    }
}

/// Writes one length-prefixed message in a single write, so it leaves in one segment.
async fn write_message<S: AsyncWrite + Unpin>(
    stream: &mut S,
    message: &HandshakeMessage,
) -> Result<(), HandshakeError> {
    let body = codec::encode(message).map_err(HandshakeError::Malformed)?;
    let length = u32::try_from(body.len())
        .ok()
        .filter(|_| body.len() <= MAX_HANDSHAKE_MESSAGE)
        .ok_or(HandshakeError::TooLarge {
            length: body.len(),
            max: MAX_HANDSHAKE_MESSAGE,
        })?;
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&length.to_be_bytes());
    frame.extend_from_slice(&body);
    stream.write_all(&frame).await.map_err(io_error)?;
    stream.flush().await.map_err(io_error)
}

/// Reads exactly one length-prefixed message, checking the length before allocating for it, and
/// not one byte more (no read-ahead: what follows belongs to the steady-state codec).
async fn read_message<S: AsyncRead + Unpin>(
    stream: &mut S,
) -> Result<HandshakeMessage, HandshakeError> {
    let mut header = [0u8; 4];
    stream.read_exact(&mut header).await.map_err(io_error)?;
    let length = usize::try_from(u32::from_be_bytes(header)).unwrap_or(usize::MAX);
    if length > MAX_HANDSHAKE_MESSAGE {
        return Err(HandshakeError::TooLarge {
            length,
            max: MAX_HANDSHAKE_MESSAGE,
        });
    }
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await.map_err(io_error)?;
    codec::decode(&body).map_err(HandshakeError::Malformed)
}

/// A connection that ended (EOF mid-message, or a write to a closed peer) is `Closed`; anything
/// else is a real I/O error.
fn io_error(error: io::Error) -> HandshakeError {
    match error.kind() {
        io::ErrorKind::UnexpectedEof
        | io::ErrorKind::BrokenPipe
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted => HandshakeError::Closed,
        _ => HandshakeError::Io(error),
    }
}

#[cfg(test)]
mod tests;
