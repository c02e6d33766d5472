//! The envelope: the one value that crosses the wire after the handshake (DESIGN §4, §8).
//!
//! An envelope names the actor it is for on the receiving node (`target`), who sent it, whether
//! it is a tell, an ask or the reply to an ask (matched by `correlation`), and carries a payload
//! of the protocol above: the transport is generic over it ([`Payload`]), so it never names a
//! message, an actor kind or an answer type, and a new message never touches it. Every
//! transport, the TCP one and the simulated one alike, moves envelopes encoded by
//! [`Envelope::encode_detaching_into`], so the simulation exercises the real codec.
//!
//! This module owns the envelope's shape, its encoding through [`crate::base::codec`], the check
//! that a decoded envelope is internally consistent (the protocol says which payloads fit which
//! kind and target), and the tag every frame starts with ([`Frame`]): an envelope, or one of the
//! two probes a connection answers by itself (`Ping`, `Pong`), which is how a node tells a live
//! connection from a dead one without asking any actor. It never dispatches, tracks correlation ids or times asks out: those
//! live above the transport boundary. It never names bincode either.

use std::fmt;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::base::address::ActorAddress;
use crate::base::codec::{self, CodecError};

/// What an envelope carries: the protocol above the transport (Flint's is
/// `crate::messages::payload::Payload`). The transport only needs to encode it, to tell a
/// reply from the rest, and to refuse one that does not fit its envelope.
pub trait Payload: Serialize + DeserializeOwned + fmt::Debug + Send + 'static {
    /// Whether this payload may travel in an envelope of `kind` addressed to `target` (a reply
    /// carries the protocol's answer; a tell or an ask carries a message the target speaks).
    fn fits(&self, kind: EnvelopeKind, target: &str) -> bool;

    /// What this payload is, for logs and errors that must not print a whole (possibly huge)
    /// message: the protocol's variant, not its contents.
    fn describe(&self) -> &'static str;
}

/// One message between two nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope<P> {
    /// The actor's name on the receiving node: `jobmanager`, `resourcemanager` or
    /// `taskmanager/<resource id>`. For a reply, the name of the actor that asked.
    pub target: String,
    /// Who sent it, when the receiver may need to answer or fence by address; `None` for a
    /// sender that is not an addressable actor (a client, a one-off ask).
    pub sender: Option<ActorAddress>,
    /// Pairs a reply with its ask; chosen by the asking node, unique among its open asks. Tells
    /// carry 0 by convention, and the receiver ignores it.
    pub correlation: u64,
    /// Tell, ask or reply.
    pub kind: EnvelopeKind,
    /// The message or the answer.
    pub payload: P,
}

/// What the receiver owes the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EnvelopeKind {
    /// Fire and forget: no reply is sent, whatever the message's answer type.
    Tell,
    /// The sender waits for a [`EnvelopeKind::Reply`] with the same correlation id.
    Ask,
    /// The answer to an ask.
    Reply,
}

impl fmt::Display for EnvelopeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Tell => "tell",
            Self::Ask => "ask",
            Self::Reply => "reply",
        })
    }
}

/// Why bytes are not a valid envelope. Never retryable: the peer sent something this node cannot
/// trust, so the connection that carried it is closed with this error as the logged reason.
#[derive(Debug, thiserror::Error)]
pub enum EnvelopeError {
    /// The bytes do not decode (garbage, truncated, trailing bytes, a length over the limit).
    #[error("cannot decode envelope")]
    Codec(#[from] CodecError),
    /// The envelope decodes but its parts disagree: a message addressed to an actor that does
    /// not speak its protocol, a reply without an answer, or an answer sent as a tell or ask.
    #[error("an envelope ({kind}) to `{}` cannot carry a {payload}", clip(.target))]
    Mismatch {
        /// The target named.
        target: String,
        /// The envelope's kind.
        kind: EnvelopeKind,
        /// What it carried ([`Payload::describe`]).
        payload: &'static str,
    },
    /// A probe (`Ping`, `Pong`) where an envelope was expected.
    #[error("a connection probe, not an envelope")]
    Probe,
}

/// A target for an error message: a peer may send a megabyte of name, the log needs a line.
fn clip(target: &str) -> &str {
    const MAX: usize = 80;
    if target.len() <= MAX {
        return target;
    }
    let mut end = MAX;
    while !target.is_char_boundary(end) {
        end -= 1;
    }
    &target[..end]
}

/// What one frame carries after the handshake: an envelope, or a probe of the connection
/// itself. A peer answers a `Ping` with a `Pong` of the same number from its connection's
/// reader, without any actor, so an answer proves the peer's end of *this* connection is alive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Frame<P> {
    /// A message of the protocol above.
    Envelope(Envelope<P>),
    /// "Are you there?", with a number the answer repeats.
    Ping(u64),
    /// The answer to the `Ping` with this number.
    Pong(u64),
}

/// [`Frame`] by reference, for encoding an envelope without moving it: serde encodes both the
/// same way (the variant's index, then its contents).
#[derive(Serialize)]
enum FrameRef<'a, P> {
    Envelope(&'a Envelope<P>),
    Ping(u64),
    Pong(u64),
}

impl<P: Payload> Frame<P> {
    /// Decodes one frame's payload; an envelope is checked as [`Envelope::decode`] does.
    pub fn decode(bytes: &[u8]) -> Result<Self, EnvelopeError> {
        let frame: Self = codec::decode(bytes)?;
        if let Frame::Envelope(envelope) = &frame {
            envelope.validate()?;
        }
        Ok(frame)
    }

    /// The bytes of a `Ping(n)` (`pong`: false) or `Pong(n)` frame's payload.
    pub fn probe(n: u64, pong: bool) -> Vec<u8> {
        let frame: FrameRef<'_, P> = if pong {
            FrameRef::Pong(n)
        } else {
            FrameRef::Ping(n)
        };
        // Two small integers always encode.
        codec::encode(&frame).unwrap_or_default()
    }
}

impl<P: Payload> Envelope<P> {
    /// Encodes the envelope for one frame (tagged as [`Frame::Envelope`]). It does not
    /// [`validate`](Self::validate): a sender builds envelopes from typed values, and the
    /// receiver checks anyway.
    pub fn encode(&self) -> Result<Bytes, CodecError> {
        codec::encode(&FrameRef::Envelope(self)).map(Bytes::from)
    }

    /// Appends the envelope's frame encoding to `out` (the transport writes it behind a frame's
    /// prefix this way, without a copy), except the byte strings of `min` bytes or more it
    /// carries (network buffers), which it answers with their positions in `out`
    /// ([`codec::encode_detaching`]): the transport sends them from their own memory. Fails as
    /// [`Self::encode`] does.
    pub fn encode_detaching_into(
        &self,
        out: &mut Vec<u8>,
        min: usize,
    ) -> Result<codec::Detached, CodecError> {
        let frame = FrameRef::Envelope(self);
        let (in_place, left_out) = codec::encoded_size_detaching(&frame, min)?;
        let size = in_place + left_out;
        if size > codec::MAX_MESSAGE_SIZE {
            return Err(CodecError::TooLarge { size });
        }
        out.reserve(in_place);
        codec::encode_detaching(&frame, out, min)
    }

    /// Decodes one frame's payload, which must be an envelope, and checks it is consistent (see
    /// [`validate`](Self::validate)), so the dispatcher above never sees a mismatched one.
    pub fn decode(bytes: &[u8]) -> Result<Self, EnvelopeError> {
        match Frame::decode(bytes)? {
            Frame::Envelope(envelope) => Ok(envelope),
            Frame::Ping(_) | Frame::Pong(_) => Err(EnvelopeError::Probe),
        }
    }

    /// Checks the payload fits the kind and target ([`Payload::fits`]).
    pub fn validate(&self) -> Result<(), EnvelopeError> {
        if self.payload.fits(self.kind, &self.target) {
            Ok(())
        } else {
            Err(EnvelopeError::Mismatch {
                target: self.target.clone(),
                kind: self.kind,
                payload: self.payload.describe(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A protocol of two words, enough to test the envelope without Flint's.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    enum Word {
        Hello(String),
        Answer(u32),
    }

    impl Payload for Word {
        fn fits(&self, kind: EnvelopeKind, target: &str) -> bool {
            match self {
                Self::Hello(_) => kind != EnvelopeKind::Reply && target == "greeter",
                Self::Answer(_) => kind == EnvelopeKind::Reply,
            }
        }

        fn describe(&self) -> &'static str {
            match self {
                Self::Hello(_) => "hello",
                Self::Answer(_) => "answer",
            }
        }
    }

    fn envelope(target: &str, kind: EnvelopeKind, payload: Word) -> Envelope<Word> {
        Envelope {
            target: target.to_owned(),
            sender: Some(ActorAddress::new("a:1", "x")),
            correlation: 7,
            kind,
            payload,
        }
    }

    #[test]
    fn an_envelope_round_trips_through_encode_detaching_into_and_decode() {
        let sent = envelope("greeter", EnvelopeKind::Ask, Word::Hello("hi".into()));
        let mut bytes = Vec::new();
        let detached = sent.encode_detaching_into(&mut bytes, usize::MAX).unwrap();
        assert!(detached.is_empty());
        assert_eq!(Envelope::<Word>::decode(&bytes).unwrap(), sent);
        assert_eq!(sent.encode().unwrap(), Bytes::from(bytes));
    }

    #[test]
    fn a_payload_that_does_not_fit_its_envelope_is_a_mismatch_naming_it() {
        for wrong in [
            envelope("greeter", EnvelopeKind::Reply, Word::Hello("hi".into())),
            envelope("stranger", EnvelopeKind::Tell, Word::Hello("hi".into())),
            envelope("greeter", EnvelopeKind::Ask, Word::Answer(1)),
        ] {
            let bytes = wrong.encode().unwrap();
            match Envelope::<Word>::decode(&bytes) {
                Err(EnvelopeError::Mismatch {
                    target,
                    kind,
                    payload,
                }) => {
                    assert_eq!(
                        (target, kind, payload),
                        (wrong.target.clone(), wrong.kind, wrong.payload.describe())
                    );
                }
                other => panic!("{wrong:?} decoded as {other:?}"),
            }
        }
    }

    #[test]
    fn a_huge_target_is_clipped_in_the_error_message() {
        let wrong = envelope(&"é".repeat(1000), EnvelopeKind::Tell, Word::Answer(1));
        let message = wrong.validate().unwrap_err().to_string();
        assert!(message.len() < 200, "{message}");
    }

    #[test]
    fn probes_are_frames_of_their_own_never_envelopes() {
        for (n, pong) in [(0, false), (7, true), (u64::MAX, false)] {
            let bytes = Frame::<Word>::probe(n, pong);
            let expected = if pong { Frame::Pong(n) } else { Frame::Ping(n) };
            assert_eq!(Frame::<Word>::decode(&bytes).unwrap(), expected);
            assert!(matches!(
                Envelope::<Word>::decode(&bytes),
                Err(EnvelopeError::Probe)
            ));
        }
        let sent = envelope("greeter", EnvelopeKind::Tell, Word::Hello("hi".into()));
        let bytes = sent.encode().unwrap();
        assert_eq!(
            Frame::<Word>::decode(&bytes).unwrap(),
            Frame::Envelope(sent)
        );
    }

    #[test]
    fn garbage_is_a_codec_error_never_a_panic() {
        for bytes in [&[][..], &[0xff][..], &[0, 1, 2, 3, 4, 5, 6, 7][..]] {
            assert!(Envelope::<Word>::decode(bytes).is_err());
        }
    }
}
