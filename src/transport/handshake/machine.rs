//! The handshake as a pure state machine: [`Handshake::on`] is its only transition and does no
//! I/O, so every state × event pair is tested without a connection, and the async driver in the
//! parent module and a simulated transport run the same logic.

use hmac::Mac;

use super::{
    DOMAIN, Dial, Established, HandshakeConfig, HandshakeError, HandshakeMessage, Hello,
    HmacSha256, NONCE_LEN, PROTOCOL_VERSION, Proof, Role, Secret, Verdict,
};
use crate::base::rng::NodeRng;

/// Where a handshake stands. Each state says what the node sends or waits for; the peer's
/// `Hello` is carried from the moment it is checked, since both proofs are computed over it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeState {
    /// Our `Hello` is being sent.
    SendHello,
    /// Initiator: our `Dial` is being sent.
    SendDial,
    /// Waiting for the peer's `Hello`.
    AwaitHello,
    /// Acceptor: waiting for the initiator's `Dial`.
    AwaitDial {
        /// The peer's checked `Hello`.
        peer: Hello,
    },
    /// Our `Proof` is being sent (the acceptor's first, the initiator's once the acceptor's
    /// verified).
    SendProof {
        /// The peer's checked `Hello`.
        peer: Hello,
    },
    /// Waiting for the peer's `Proof`.
    AwaitProof {
        /// The peer's checked `Hello`.
        peer: Hello,
    },
    /// Acceptor: the peer is proven; the owner decides whether to admit it.
    Admitting {
        /// The peer's proven `Hello`.
        peer: Hello,
    },
    /// Acceptor: the verdict is being sent (`refused`: the reason, if it is a refusal).
    SendVerdict {
        /// The peer's proven `Hello`.
        peer: Hello,
        /// `None` for `Welcome`.
        refused: Option<String>,
    },
    /// Initiator: waiting for the acceptor's verdict.
    AwaitVerdict {
        /// The peer's proven `Hello`.
        peer: Hello,
    },
    /// Both sides are proven and the connection admitted; the stream belongs to the
    /// steady-state transport.
    Established,
    /// The handshake failed; the connection must be closed.
    Failed,
}

impl HandshakeState {
    /// The state's name, for [`HandshakeError::OutOfOrder`] and logs.
    pub fn name(&self) -> &'static str {
        match self {
            HandshakeState::SendHello => "SendHello",
            HandshakeState::SendDial => "SendDial",
            HandshakeState::AwaitHello => "AwaitHello",
            HandshakeState::AwaitDial { .. } => "AwaitDial",
            HandshakeState::SendProof { .. } => "SendProof",
            HandshakeState::AwaitProof { .. } => "AwaitProof",
            HandshakeState::Admitting { .. } => "Admitting",
            HandshakeState::SendVerdict { .. } => "SendVerdict",
            HandshakeState::AwaitVerdict { .. } => "AwaitVerdict",
            HandshakeState::Established => "Established",
            HandshakeState::Failed => "Failed",
        }
    }
}

/// What happened: a message of ours went out, one of the peer's came in, or the owner decided
/// on admission.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeEvent {
    /// The message of the last [`HandshakeAction::Send`] was written.
    Sent,
    /// The peer's `Hello` arrived.
    HelloReceived(Hello),
    /// The initiator's `Dial` arrived.
    DialReceived(Dial),
    /// The peer's `Proof` arrived.
    ProofReceived(Proof),
    /// The acceptor's `Verdict` arrived.
    VerdictReceived(Verdict),
    /// The owner's answer to [`HandshakeAction::Admit`] (`Err`: the reason it refuses).
    Admitted(Result<(), String>),
}

impl HandshakeEvent {
    /// The event's name, for [`HandshakeError::OutOfOrder`] and logs.
    pub fn name(&self) -> &'static str {
        match self {
            HandshakeEvent::Sent => "Sent",
            HandshakeEvent::HelloReceived(_) => "Hello",
            HandshakeEvent::DialReceived(_) => "Dial",
            HandshakeEvent::ProofReceived(_) => "Proof",
            HandshakeEvent::VerdictReceived(_) => "Verdict",
            HandshakeEvent::Admitted(_) => "Admitted",
        }
    }
}

impl From<HandshakeMessage> for HandshakeEvent {
    fn from(message: HandshakeMessage) -> Self {
        match message {
            HandshakeMessage::Hello(hello) => HandshakeEvent::HelloReceived(hello),
            HandshakeMessage::Dial(dial) => HandshakeEvent::DialReceived(dial),
            HandshakeMessage::Proof(proof) => HandshakeEvent::ProofReceived(proof),
            HandshakeMessage::Verdict(verdict) => HandshakeEvent::VerdictReceived(verdict),
        }
    }
}

/// What the driver must do next. The state machine never touches the connection itself.
#[derive(Debug)]
pub enum HandshakeAction {
    /// Write this message, then report [`HandshakeEvent::Sent`].
    Send(HandshakeMessage),
    /// Read the peer's next message and report it.
    Receive,
    /// Acceptor: ask the owner whether to admit the proven peer with this id, and report
    /// [`HandshakeEvent::Admitted`].
    Admit(String),
    /// The handshake succeeded.
    Done(Established),
    /// The handshake failed: close the connection, logging the error.
    Fail(HandshakeError),
}

/// What stays fixed for one handshake: our role, our `Hello` (with our nonce), the secret, and
/// for an initiator the node it dialled.
#[derive(Debug, Clone)]
pub(super) struct Context {
    pub(super) role: Role,
    pub(super) own: Hello,
    pub(super) secret: Secret,
    /// The node id dialled (initiators only).
    pub(super) dialled: Option<String>,
}

/// One handshake as a state machine; see the module docs.
#[derive(Debug, Clone)]
pub struct Handshake {
    context: Context,
    state: HandshakeState,
}

impl Handshake {
    /// The side that dialled the node `dialled`, in [`HandshakeState::SendHello`], its nonce
    /// drawn from `rng`; returns the first action (send our `Hello`).
    pub fn initiator(
        config: &HandshakeConfig,
        dialled: &str,
        rng: &mut NodeRng,
    ) -> (Self, HandshakeAction) {
        Self::start(Role::Initiator, config, Some(dialled.to_owned()), rng)
    }

    /// The side that accepted the connection; otherwise as [`Handshake::initiator`].
    pub fn acceptor(config: &HandshakeConfig, rng: &mut NodeRng) -> (Self, HandshakeAction) {
        Self::start(Role::Acceptor, config, None, rng)
    }

    fn start(
        role: Role,
        config: &HandshakeConfig,
        dialled: Option<String>,
        rng: &mut NodeRng,
    ) -> (Self, HandshakeAction) {
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
            dialled,
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
pub(super) fn transition(
    context: &Context,
    state: HandshakeState,
    event: HandshakeEvent,
) -> (HandshakeState, HandshakeAction) {
    use HandshakeAction as A;
    use HandshakeEvent as E;
    use HandshakeState as S;
    let fail = |error| (S::Failed, A::Fail(error));
    match (state, event, context.role) {
        (S::SendHello, E::Sent, Role::Initiator) => {
            let dialled = context.dialled.clone().unwrap_or_default();
            (
                S::SendDial,
                A::Send(HandshakeMessage::Dial(Dial { node_id: dialled })),
            )
        }
        (S::SendHello, E::Sent, Role::Acceptor) | (S::SendDial, E::Sent, Role::Initiator) => {
            (S::AwaitHello, A::Receive)
        }
        (S::AwaitHello, E::HelloReceived(peer), role) => {
            if let Err(error) = check_hello(context, &peer) {
                return fail(error);
            }
            match role {
                // The dialler waits for the acceptor's proof before proving anything.
                Role::Initiator => (S::AwaitProof { peer }, A::Receive),
                Role::Acceptor => (S::AwaitDial { peer }, A::Receive),
            }
        }
        (S::AwaitDial { peer }, E::DialReceived(dial), Role::Acceptor) => {
            if dial.node_id != context.own.node_id {
                return fail(HandshakeError::NotDialled {
                    peer: peer.node_id,
                    dialled: dial.node_id,
                });
            }
            let proof = own_proof(context, &peer);
            (S::SendProof { peer }, A::Send(proof))
        }
        (S::SendProof { peer }, E::Sent, Role::Acceptor) => (S::AwaitProof { peer }, A::Receive),
        (S::SendProof { peer }, E::Sent, Role::Initiator) => (S::AwaitVerdict { peer }, A::Receive),
        (S::AwaitProof { peer }, E::ProofReceived(received), role) => {
            // The peer proves with its own role byte, over the transcript in connection order.
            let expected = proof(&context.secret, role.peer(), &peer, &context.own);
            if expected.verify_slice(&received.mac).is_err() {
                return fail(HandshakeError::BadProof);
            }
            match role {
                Role::Initiator => {
                    let proof = own_proof(context, &peer);
                    (S::SendProof { peer }, A::Send(proof))
                }
                Role::Acceptor => {
                    let id = peer.node_id.clone();
                    (S::Admitting { peer }, A::Admit(id))
                }
            }
        }
        (S::Admitting { peer }, E::Admitted(decision), Role::Acceptor) => {
            let (refused, verdict) = match decision {
                Ok(()) => (None, Verdict::Welcome),
                Err(reason) => (Some(reason.clone()), Verdict::Refused(reason)),
            };
            (
                S::SendVerdict { peer, refused },
                A::Send(HandshakeMessage::Verdict(verdict)),
            )
        }
        (S::SendVerdict { peer, refused }, E::Sent, Role::Acceptor) => match refused {
            None => (S::Established, done(peer)),
            Some(reason) => fail(HandshakeError::NotAdmitted {
                peer: peer.node_id,
                reason,
            }),
        },
        (S::AwaitVerdict { peer }, E::VerdictReceived(verdict), Role::Initiator) => match verdict {
            Verdict::Welcome => (S::Established, done(peer)),
            Verdict::Refused(reason) => fail(HandshakeError::RefusedByPeer {
                reason: super::clip_reason(&reason),
            }),
        },
        (state, event, _) => fail(HandshakeError::OutOfOrder {
            state: state.name(),
            message: event.name(),
        }),
    }
}

fn done(peer: Hello) -> HandshakeAction {
    HandshakeAction::Done(Established {
        peer_node_id: peer.node_id,
    })
}

fn check_hello(context: &Context, peer: &Hello) -> Result<(), HandshakeError> {
    let own = &context.own;
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
    if let Some(dialled) = &context.dialled
        && peer.node_id != *dialled
    {
        return Err(HandshakeError::WrongPeer {
            dialled: dialled.clone(),
            claimed: peer.node_id.clone(),
        });
    }
    Ok(())
}

/// Our proof to `peer`, as a message.
fn own_proof(context: &Context, peer: &Hello) -> HandshakeMessage {
    let mac = proof(&context.secret, context.role, &context.own, peer).finalize();
    HandshakeMessage::Proof(Proof {
        mac: mac.into_bytes().into(),
    })
}

/// The MAC `prover` (in `role`) must present to `verifier`, not yet finalized so the verifier
/// can compare in constant time. Only called once the cluster ids are known to be equal. The
/// transcript is in connection order whoever proves (see the module docs for why).
pub(super) fn proof(secret: &Secret, role: Role, prover: &Hello, verifier: &Hello) -> HmacSha256 {
    let (initiator, acceptor) = match role {
        Role::Initiator => (prover, verifier),
        Role::Acceptor => (verifier, prover),
    };
    let mut mac = secret.mac();
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
