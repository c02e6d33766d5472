//! The connection handshake: what two nodes say to each other before any envelope.
//!
//! This module owns proving, in both directions, that the peer speaks our protocol version,
//! belongs to our cluster, knows the shared cluster secret and is the node the dialler meant to
//! reach, bound to this one connection so a recorded, reflected or relayed proof is worthless.
//! It must never read a byte past the handshake (the steady-state frame codec takes the stream
//! over exactly where the acceptor's verdict ends, so there is no read-ahead buffer here), never
//! draw a nonce from anything but the caller's [`NodeRng`], never prove anything as the dialler
//! before the dialled node has proved itself, and never wait without the handshake timeout.
//!
//! # Protocol
//!
//! ```text
//!  initiator (dialled D)                                        acceptor (node id A)
//!      │ ── Hello { version, cluster_id, id_i, nonce_i } ──────────▶ │   both Hellos at once
//!      │ ── Dial { node_id: D } ───────────────────────────────────▶ │
//!      │ ◀── Hello { version, cluster_id, id_a, nonce_a } ────────── │
//!      │  checks: version, cluster,                                   │  checks: version, cluster,
//!      │  id_a ≠ id_i, id_a == D                                      │  id_i ≠ A, D == A
//!      │ ◀─────────────────────────────────────── Proof { mac_a } ── │  only once both checks pass
//!      │  verify mac_a, then prove                                    │
//!      │ ── Proof { mac_i } ───────────────────────────────────────▶ │  verify mac_i; admit id_i?
//!      │ ◀──────────────────────── Verdict(Welcome | Refused(why)) ── │
//!  Established { id_a }                                  Established { id_i }
//!
//!  mac_i = HMAC-SHA256(secret, "flint-handshake-v3" ‖ 'I' ‖ transcript)
//!  mac_a = HMAC-SHA256(secret, "flint-handshake-v3" ‖ 'A' ‖ transcript)
//!  transcript = id(id_i) ‖ id(id_a) ‖ nonce_i ‖ nonce_a ‖ id(cluster_id)
//!  id(x) = x's length as 8 bytes big-endian ‖ x's UTF-8 bytes
//! ```
//!
//! - **The dialler proves last, and only to whom it dialled.** A node that dials `D` refuses a
//!   peer calling itself anything but `D`, and sends its proof only after the peer's proof of
//!   the secret over that id and both nonces verified. Issue 34's relay (an attacker that a node
//!   dials forwards the handshake to some other live node `Y` and holds an authenticated
//!   connection to each) therefore fails twice: `Y` refuses a `Dial` naming another node before
//!   proving anything, and the dialler refuses `Y`'s id before proving anything. Only the node
//!   that *is* `D` can complete a handshake dialled to `D`; an attacker on the path between the
//!   two real nodes is what TLS is for (below).
//! - The **transcript is in connection order** (initiator first, acceptor second), not in
//!   prover/verifier order, and the **role byte** says which end proves. An initiator's proof is
//!   therefore never an acceptor's proof, on this connection or any other.
//! - A peer **claiming our own node id is refused** before any proof is made. Together with the
//!   fixed order this stops cross-connection reflection: to use our acceptor proof (made for a
//!   peer claiming `c` on a connection it opened) as the proof a node we dialled owes us, `(c,
//!   us)` would have to equal `(us, D)`, which needs `c` to be `us`.
//! - **Both nonces** make every proof specific to one connection: a proof recorded from another
//!   handshake is refused as long as our nonce is fresh. The nonces come from the network's nonce
//!   source ([`Network::nonce_rng`](super::network::Network::nonce_rng)): the operating
//!   system's entropy in production, never the configuration's `seed` (a replayed run would
//!   replay its nonces); only the deterministic simulation draws them from its seeded generator.
//! - The node ids and the cluster id are **length-prefixed** so no two different
//!   `(initiator, acceptor, cluster)` triples hash the same bytes (`"ab" ‖ "c"` vs `"a" ‖ "bc"`).
//! - **The acceptor admits, then says so.** Once the initiator has proved its id, the acceptor's
//!   owner decides whether to take the connection ([`accept`]'s `admit`: the endpoint refuses a
//!   second connection claiming an id it already holds, unless the first is proven dead) and the
//!   verdict travels back, so a refused dialler knows why instead of seeing its frames vanish.
//! - **The `Hello` never changes shape** (version first): a peer of any other version decodes
//!   ours and we decode theirs, so both sides name the two versions instead of calling the other
//!   malformed. What a version adds travels in messages of its own (`Dial`, `Verdict`).
//!
//! Each message travels in a tiny frame of its own: a 4-byte big-endian length, then the
//! [`crate::base::codec`] encoding of a [`HandshakeMessage`]. A length over [`MAX_HANDSHAKE_MESSAGE`] is
//! refused before anything is allocated for it.
//!
//! # What the handshake does not do
//!
//! It authenticates the two ends at the moment of connecting; it neither encrypts nor
//! authenticates the frames that follow, and it sends the cluster id and node id in the clear to
//! whoever connects. Someone who can rewrite traffic on the path between two real nodes can
//! relay a genuine handshake between *them* and then inject frames: that is what the TLS option
//! (DESIGN §4) is for. With [`Secret::insecure`] anyone can compute a proof; the handshake then
//! only catches misconfiguration (wrong cluster, version or node), never an attacker.

use std::fmt;
use std::future::Future;
use std::io;
use std::time::Duration;

use hmac::Hmac;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::base::codec::{self, CodecError};
use crate::base::ids::ClusterId;
use crate::base::rng::NodeRng;

mod machine;
pub use machine::{Handshake, HandshakeAction, HandshakeEvent, HandshakeState};

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
/// 9: the dialler names the node it dialled (`Dial`) and proves itself only after that node
///    did; the acceptor ends the handshake with its `Verdict`; every frame after it is tagged
///    (an envelope, or a liveness probe of the connection). A submission can be refused as
///    `JobError::Overloaded` (`jobmanager.max-subtasks`).
/// 10: a gate that ends before its inputs do releases the subpartitions it left unread
///    (`PartitionRequest::ReleaseSet`).
/// 11: a submission can be refused as `JobError::NotPersisted` (its graph not stored); job
///    details carry `from_job_result_store` and each vertex's summary; a running task says
///    whether it is `orphaned` (an earlier JobManager connection's, draining).
/// 12: a TaskManager takes `ReleasePartitions` (results of a running job nobody reads any
///    more, or of superseded attempts).
/// 13: batch job recovery — a TaskManager registers with the finished partitions it kept from
///    an earlier leader (`RegisterTaskManager::partitions`); a subtask's details say whether a
///    new leader took it back (`restored`).
/// 14: a job graph names the artifacts it ships (`JobGraph::artifacts`).
/// 15: a TaskManager fetches a job's artifacts from the JobManager (`FetchBlob`); a task's
///    descriptor names them (`TaskDeploymentDescriptor::artifacts`).
/// 16: a worker driver reports a previous leader's workers (`WorkersRecovered`); the resource
///    manager's status describes the driver's workers (`driver_workers`).
/// 17: a job's results can be unreadable from the job result store
///    (`JobError::ResultsUnreadable`).
/// 18: a task that finished early says so (`TaskExecutionState::ended_early`) and the JobManager
///    releases what its running producers write for it (`ReleasePartitions::subpartitions`).
/// 19: a failed task says whether every attempt would fail alike
///    (`TaskExecutionState::unrecoverable`: an invalid operator configuration, a record too
///    large for the exchange), and the JobManager then fails the job instead of restarting it.
/// 20: a gate without exclusive credit gives each set subscription a few bytes its producer
///    may send without credit (`SubscribeSet::eager`, `ChannelResponse::Data::eager`), and
///    gives them back as it consumes them (`PartitionRequest::EagerReturned`).
pub const PROTOCOL_VERSION: u32 = 20;

/// The largest handshake message, in bytes (after the length prefix). A `Hello` with a sensible
/// node id is under 200 bytes; the limit stops a peer (or a stray HTTP client) from making us
/// allocate before it has proved anything.
pub const MAX_HANDSHAKE_MESSAGE: usize = 4096;

/// The acceptor's byte-rate floor under each handshake message it receives (issue 34): a
/// message must arrive in full within [`MESSAGE_GRACE`] plus its length at [`RATE_FLOOR`], or
/// the connection is dropped ([`HandshakeError::TooSlow`]). A real dialler sends its `Hello`
/// and `Dial` the moment it connects and its `Proof` one round trip later, so it is never near
/// the floor; a peer that drips bytes, or stalls after its `Hello`, gives its pre-authentication
/// slot back after about half a second instead of holding it for the whole handshake timeout.
/// Only the acceptor applies it: the dialler's wait for the `Verdict` includes the acceptor's
/// admission, which may probe an old connection first.
pub const MESSAGE_GRACE: Duration = Duration::from_millis(500);

/// See [`MESSAGE_GRACE`]: bytes per second.
pub const RATE_FLOOR: u64 = 16 * 1024;

/// The longest reason a refusing acceptor's `Verdict` carries (longer ones are cut): it ends up
/// in the dialler's log.
pub const MAX_REFUSAL_REASON: usize = 256;

/// The bytes every proof starts with, so a MAC made here can never be mistaken for a MAC of the
/// same secret made for another purpose (or another version of this protocol).
const DOMAIN: &[u8] = b"flint-handshake-v3";

/// Bytes in a nonce.
const NONCE_LEN: usize = 32;

/// The block size of SHA-256: HMAC's key length after RFC 2104 key preparation.
const HMAC_BLOCK: usize = 64;

pub(crate) type HmacSha256 = Hmac<Sha256>;

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

    /// A fresh HMAC-SHA256 keyed with this secret, for whatever else the cluster secret
    /// authenticates (the znodes of [`crate::ha::signed`]); each use starts with a domain of
    /// its own, so no MAC made for one purpose passes for another.
    pub(crate) fn mac(&self) -> HmacSha256 {
        <HmacSha256 as hmac::digest::KeyInit>::new(&self.hmac_key().into())
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
    /// The whole handshake must finish within this (every message both ways, and the
    /// acceptor's admission).
    pub timeout: Duration,
}

/// Which end of the connection a node is: it decides the role byte of its proof, so that a proof
/// cannot be reflected back to the side that made it, and who proves first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The side that connected out: it names the node it dialled and proves last.
    Initiator,
    /// The side that accepted the connection: it proves first and gives the verdict.
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

/// The first message of each side: who it is, and the nonce the peer's proof must cover. Its
/// shape is frozen across protocol versions (see the module docs).
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

/// The initiator's second message: the node id it meant to reach, so a node that receives a
/// connection meant for another refuses it before proving anything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dial {
    /// The id the initiator dialled (the node part of the address it connected to).
    pub node_id: String,
}

/// Proof that the sender knows the cluster secret, for this connection only (see the module
/// docs for what the MAC covers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proof {
    /// HMAC-SHA256 over the domain, the sender's role byte, both nonces, both node ids and the
    /// cluster id.
    pub mac: [u8; 32],
}

/// The acceptor's last word: whether it takes the connection it has just authenticated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    /// The connection is admitted: frames may follow.
    Welcome,
    /// The connection is refused, and why (at most [`MAX_REFUSAL_REASON`] bytes).
    Refused(String),
}

/// Everything that travels during the handshake; one enum so a message in the wrong place
/// decodes and is refused as out of order rather than misread. `Hello` stays the first variant
/// in every version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HandshakeMessage {
    /// Both sides, first.
    Hello(Hello),
    /// Both sides: the acceptor's first, the initiator's once the acceptor's verified.
    Proof(Proof),
    /// The initiator, right after its `Hello`.
    Dial(Dial),
    /// The acceptor, last.
    Verdict(Verdict),
}

/// A finished handshake: the peer is of our cluster and version, knows the secret, and (for an
/// initiator) is the node it dialled.
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
    #[error(
        "peer speaks handshake protocol version {theirs}, this node speaks version {ours}: run \
         the same Flint version on every node"
    )]
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
    /// Initiator: the node that answered is not the one dialled (a relay to another node, a
    /// node that moved, or an address that is not the node's advertised id). Not retryable.
    #[error(
        "dialled {dialled}, but the node that answered calls itself {claimed}: refused before \
         proving anything (a relay, or an address that is not that node's advertised id: dial \
         nodes by the host:port they advertise)"
    )]
    WrongPeer {
        /// The id dialled.
        dialled: String,
        /// The id the peer claimed.
        claimed: String,
    },
    /// Acceptor: the connection was dialled to another node (relayed here). Not retryable.
    #[error(
        "a peer calling itself {peer} dialled {dialled}, not this node: refused before proving \
         anything (a relay, or a peer with a stale address)"
    )]
    NotDialled {
        /// The id the peer claimed.
        peer: String,
        /// The id it dialled.
        dialled: String,
    },
    /// Initiator: the acceptor authenticated us, then refused the connection. Not retryable as
    /// is: the reason says what must change first.
    #[error("the peer refused the connection: {reason}")]
    RefusedByPeer {
        /// The acceptor's reason, cut to [`MAX_REFUSAL_REASON`].
        reason: String,
    },
    /// Acceptor: the owner did not admit the authenticated peer (the verdict was sent). Not
    /// retryable as is.
    #[error("refused {peer}: {reason}")]
    NotAdmitted {
        /// The peer's proven id.
        peer: String,
        /// Why.
        reason: String,
    },
    /// The handshake did not finish in time (the peer is slow, stuck, or not a Flint node).
    /// Retryable.
    #[error("handshake did not finish within {after:?}")]
    Timeout {
        /// The configured timeout.
        after: Duration,
    },
    /// Acceptor: a handshake message did not arrive at the byte-rate floor (see
    /// [`MESSAGE_GRACE`]): the peer drips, stalls, or is not a Flint node. Retryable.
    #[error("the peer sent a handshake message too slowly (not within {allowed:?})")]
    TooSlow {
        /// The time the message was allowed.
        allowed: Duration,
    },
    /// The peer closed the connection before the handshake finished (it may have refused us).
    /// Retryable.
    #[error("peer closed the connection during the handshake")]
    Closed,
    /// A handshake message is not a valid handshake message (garbage, or not a Flint peer). Not
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
            HandshakeError::Timeout { .. }
                | HandshakeError::TooSlow { .. }
                | HandshakeError::Closed
                | HandshakeError::Io(_)
        )
    }
}

/// A refusal reason as it may travel: at most [`MAX_REFUSAL_REASON`] bytes, on a character
/// boundary, control characters replaced (it is printed in the dialler's log).
fn clip_reason(reason: &str) -> String {
    let mut end = reason.len().min(MAX_REFUSAL_REASON);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    reason[..end]
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// Shakes hands as the side that connected out, to the node `dialled` (the node id it
/// connected to). On success the stream is positioned right after the acceptor's verdict,
/// ready for the steady-state frames.
///
/// `rng` must be the node's long-lived generator for connections (not one re-created per
/// connection from the same seed): the nonce drawn from it is what makes a recorded proof
/// useless.
pub async fn initiate<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    config: &HandshakeConfig,
    dialled: &str,
    rng: &mut NodeRng,
) -> Result<Established, HandshakeError> {
    let (machine, first) = Handshake::initiator(config, dialled, rng);
    run(stream, config, machine, first, no_admission, false).await
}

/// An initiator never admits anyone; its machine never asks.
async fn no_admission(peer: String) -> Result<(), String> {
    Err(format!("an initiator was asked to admit {peer}"))
}

/// Shakes hands as the side that accepted the connection; otherwise as [`initiate`]. Once the
/// peer has proved its id, `admit(id)` decides whether the connection is taken (`Err(reason)`:
/// refused, and the peer told why); it runs within the handshake's timeout.
pub async fn accept<S, A, F>(
    stream: &mut S,
    config: &HandshakeConfig,
    rng: &mut NodeRng,
    admit: A,
) -> Result<Established, HandshakeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
    A: FnOnce(String) -> F,
    F: Future<Output = Result<(), String>>,
{
    let (machine, first) = Handshake::acceptor(config, rng);
    run(stream, config, machine, first, admit, true).await
}

async fn run<S, A, F>(
    stream: &mut S,
    config: &HandshakeConfig,
    machine: Handshake,
    first: HandshakeAction,
    admit: A,
    floor: bool,
) -> Result<Established, HandshakeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
    A: FnOnce(String) -> F,
    F: Future<Output = Result<(), String>>,
{
    tokio::time::timeout(config.timeout, drive(stream, machine, first, admit, floor))
        .await
        .unwrap_or(Err(HandshakeError::Timeout {
            after: config.timeout,
        }))
}

async fn drive<S, A, F>(
    stream: &mut S,
    mut machine: Handshake,
    mut action: HandshakeAction,
    admit: A,
    floor: bool,
) -> Result<Established, HandshakeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
    A: FnOnce(String) -> F,
    F: Future<Output = Result<(), String>>,
{
    let mut admit = Some(admit);
    loop {
        action = match action {
            HandshakeAction::Send(message) => {
                write_message(stream, &message).await?;
                machine.on(HandshakeEvent::Sent)
            }
            HandshakeAction::Receive => machine.on(read_message_by(stream, floor).await?.into()),
            HandshakeAction::Admit(peer) => {
                // The machine asks once per handshake; a second ask finds `None` and refuses.
                let decision = match admit.take() {
                    Some(admit) => admit(peer).await,
                    None => Err("asked to admit twice".to_owned()),
                };
                machine.on(HandshakeEvent::Admitted(
                    decision.map_err(|r| clip_reason(&r)),
                ))
            }
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
#[cfg(test)]
async fn read_message<S: AsyncRead + Unpin>(
    stream: &mut S,
) -> Result<HandshakeMessage, HandshakeError> {
    read_message_by(stream, false).await
}

/// [`read_message`], at the byte-rate floor if `floor` (see [`MESSAGE_GRACE`]): the length
/// within the grace, the whole message within the grace plus its length at [`RATE_FLOOR`].
async fn read_message_by<S: AsyncRead + Unpin>(
    stream: &mut S,
    floor: bool,
) -> Result<HandshakeMessage, HandshakeError> {
    let started = tokio::time::Instant::now();
    let mut header = [0u8; 4];
    within(
        floor,
        started,
        MESSAGE_GRACE,
        stream.read_exact(&mut header),
    )
    .await?;
    let length = usize::try_from(u32::from_be_bytes(header)).unwrap_or(usize::MAX);
    if length > MAX_HANDSHAKE_MESSAGE {
        return Err(HandshakeError::TooLarge {
            length,
            max: MAX_HANDSHAKE_MESSAGE,
        });
    }
    let mut body = vec![0u8; length];
    // `length` is at most MAX_HANDSHAKE_MESSAGE: the product cannot overflow.
    let allowed = MESSAGE_GRACE + Duration::from_micros(length as u64 * 1_000_000 / RATE_FLOOR);
    within(floor, started, allowed, stream.read_exact(&mut body)).await?;
    codec::decode(&body).map_err(HandshakeError::Malformed)
}

/// `read`, by `started + allowed` if `floor`.
async fn within<T>(
    floor: bool,
    started: tokio::time::Instant,
    allowed: Duration,
    read: impl Future<Output = io::Result<T>>,
) -> Result<T, HandshakeError> {
    let done = if floor {
        tokio::time::timeout_at(started + allowed, read)
            .await
            .map_err(|_| HandshakeError::TooSlow { allowed })?
    } else {
        read.await
    };
    done.map_err(io_error)
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
