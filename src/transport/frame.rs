//! Length-prefixed frames: a 4-byte big-endian payload length, then the payload.
//!
//! This module owns the cut between a byte stream and whole messages, and nothing above it: it
//! never looks inside a payload (that is [`super::envelope`]'s job) and never decides what to do
//! with a broken connection (the session above it closes the connection on any decode error).
//!
//! # Why the limit is checked before allocating
//!
//! The length prefix is the first thing a peer controls, and it arrives before the peer has been
//! authenticated. If the decoder reserved buffer space for whatever length it read, four bytes
//! (`ff ff ff ff`) would make this node reserve 4 GiB per connection: a handful of connections,
//! or one garbled byte on the wire, would take the node down. So the decoder compares the claimed
//! length with the configured limit first, refuses a frame over it with [`FrameError::TooLarge`]
//! without touching the buffer, and only then reserves space, never more than the one frame it
//! is waiting for. Memory per connection is therefore bounded by the limit, whatever arrives.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use crate::base::codec::{Detached, MAX_MESSAGE_SIZE};

/// The default largest frame payload, in bytes: large enough for any message the codec accepts
/// (a job graph, a batch of records), small enough that a connection cannot pin much memory.
pub const DEFAULT_MAX_FRAME: usize = 16 * 1024 * 1024;

// A frame must be able to hold the largest encodable message, no more: a larger limit would only
// let a peer make us buffer bytes the codec then refuses.
const _: () = assert!(DEFAULT_MAX_FRAME <= MAX_MESSAGE_SIZE);

/// Bytes in the length prefix.
pub(crate) const HEADER_LEN: usize = 4;

/// Why a frame could not be read or written.
///
/// None is retryable on the same connection. Read-side errors ([`closes_connection`] is true)
/// mean the byte stream can no longer be trusted to be in step with the peer: the connection is
/// closed with this error logged as the reason (the transport may reconnect). Write-side refusals
/// leave the connection usable: nothing was written, only that one payload is refused.
///
/// [`closes_connection`]: FrameError::closes_connection
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// An inbound frame claims more bytes than the limit. Nothing was allocated for it.
    #[error("inbound frame of {length} bytes is over the {max}-byte limit")]
    TooLarge {
        /// The length the prefix claims.
        length: usize,
        /// The configured limit.
        max: usize,
    },
    /// An inbound frame has a zero length. No message encodes to nothing, so this is garbage
    /// (or a peer speaking another protocol), not a keep-alive.
    #[error("inbound frame is empty")]
    Empty,
    /// The connection ended in the middle of a frame.
    #[error("connection closed in the middle of a frame ({buffered} bytes buffered)")]
    Truncated {
        /// Bytes of the unfinished frame (with its prefix) that did arrive.
        buffered: usize,
    },
    /// An outbound payload is over the limit; the peer would refuse it, so it is not sent.
    #[error("outbound payload of {length} bytes is over the {max}-byte frame limit")]
    PayloadTooLarge {
        /// The payload's length.
        length: usize,
        /// The configured limit.
        max: usize,
    },
    /// An outbound payload is empty; the peer would take it for garbage, so it is not sent.
    #[error("outbound payload is empty")]
    EmptyPayload,
    /// Reading or writing the connection failed.
    #[error("connection i/o failed")]
    Io(#[from] std::io::Error),
}

impl FrameError {
    /// Whether the connection must be closed: true for everything the decoder or the socket
    /// reports, false for an outbound payload that was refused before anything was written.
    pub fn closes_connection(&self) -> bool {
        match self {
            Self::TooLarge { .. } | Self::Empty | Self::Truncated { .. } | Self::Io(_) => true,
            Self::PayloadTooLarge { .. } | Self::EmptyPayload => false,
        }
    }
}

/// Code that speaks `std::io` (a plain `AsyncRead` adapter, a TLS layer) sees protocol
/// violations as `InvalidData`, the conventional "the peer sent garbage" kind.
impl From<FrameError> for std::io::Error {
    fn from(error: FrameError) -> Self {
        match error {
            FrameError::Io(error) => error,
            FrameError::Truncated { .. } => {
                std::io::Error::new(std::io::ErrorKind::UnexpectedEof, error)
            }
            FrameError::PayloadTooLarge { .. } | FrameError::EmptyPayload => {
                std::io::Error::new(std::io::ErrorKind::InvalidInput, error)
            }
            FrameError::TooLarge { .. } | FrameError::Empty => {
                std::io::Error::new(std::io::ErrorKind::InvalidData, error)
            }
        }
    }
}

/// The `tokio_util` codec for length-prefixed frames, both directions of a connection.
///
/// Use it with `tokio_util::codec::Framed` over any `AsyncRead + AsyncWrite` (TCP, TLS,
/// `tokio::io::duplex` in tests). A decoded item is one payload, without its prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameCodec {
    max_frame: usize,
}

impl FrameCodec {
    /// A codec accepting payloads of 1 to `max_frame` bytes. `max_frame` is clamped to
    /// `1..=`[`MAX_MESSAGE_SIZE`]: a frame larger than the codec accepts could never be decoded
    /// into a message, so allowing it would only let a peer make us buffer useless bytes.
    pub fn new(max_frame: usize) -> Self {
        Self {
            max_frame: max_frame.clamp(1, MAX_MESSAGE_SIZE),
        }
    }

    /// The largest payload this codec reads or writes, in bytes.
    pub fn max_frame(&self) -> usize {
        self.max_frame
    }

    /// Checks an outbound payload's length, so nothing the peer would refuse is written.
    fn check_outbound(&self, length: usize) -> Result<u32, FrameError> {
        if length == 0 {
            return Err(FrameError::EmptyPayload);
        }
        if length > self.max_frame {
            return Err(FrameError::PayloadTooLarge {
                length,
                max: self.max_frame,
            });
        }
        // `max_frame` <= MAX_MESSAGE_SIZE (16 MiB) < u32::MAX, so this cannot fail; the error
        // arm keeps it total anyway.
        u32::try_from(length).map_err(|_| FrameError::PayloadTooLarge {
            length,
            max: self.max_frame,
        })
    }

    /// One frame whose payload `encode` appends to the buffer it is given (after room for the
    /// prefix), so a message is written once, not encoded and then copied behind its prefix:
    /// a data connection's answers carry a megabyte each. The outer error is the encoder's;
    /// the inner one refuses a payload the peer would refuse, as [`Encoder::encode`] does.
    pub fn frame_with<E>(
        &self,
        encode: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<Result<Bytes, FrameError>, E> {
        let mut frame = vec![0u8; HEADER_LEN];
        encode(&mut frame)?;
        Ok(self.check_outbound(frame.len() - HEADER_LEN).map(|length| {
            frame[..HEADER_LEN].copy_from_slice(&length.to_be_bytes());
            Bytes::from(frame)
        }))
    }

    /// Like [`frame_with`](Self::frame_with), for a payload `encode` writes with byte strings
    /// left out ([`crate::base::codec::encode_detaching`]): the frame is its bytes with each put
    /// back at its position, and its prefix counts them.
    pub fn frame_detached_with<E>(
        &self,
        encode: impl FnOnce(&mut Vec<u8>) -> Result<Detached, E>,
    ) -> Result<Result<OutFrame, FrameError>, E> {
        let mut frame = vec![0u8; HEADER_LEN];
        let detached = encode(&mut frame)?;
        let left_out: usize = detached.iter().map(|(_, bytes)| bytes.len()).sum();
        Ok(self
            .check_outbound(frame.len() - HEADER_LEN + left_out)
            .map(|length| {
                frame[..HEADER_LEN].copy_from_slice(&length.to_be_bytes());
                OutFrame::joining(Bytes::from(frame), detached)
            }))
    }

    /// Writes one frame: the prefix, then the payload, with one reservation for both.
    fn write_frame(&self, payload: &[u8], dst: &mut BytesMut) -> Result<(), FrameError> {
        let length = self.check_outbound(payload.len())?;
        dst.reserve(HEADER_LEN + payload.len());
        dst.put_u32(length);
        dst.extend_from_slice(payload);
        Ok(())
    }
}

/// One frame on its way out: whole, or as segments to write in order, its own bytes and
/// between them the byte strings it carries by reference (network buffers), sent with vectored
/// writes from their own memory instead of copied into the frame.
#[derive(Debug, Clone)]
pub enum OutFrame {
    /// The frame's bytes.
    Whole(Bytes),
    /// The frame's bytes in pieces, none empty; `len` in all.
    Segments {
        /// The pieces, in order.
        parts: Vec<Bytes>,
        /// Their bytes in all.
        len: usize,
    },
}

impl OutFrame {
    /// `frame` with each of `detached` inserted at its position.
    fn joining(frame: Bytes, detached: Detached) -> Self {
        if detached.is_empty() {
            return Self::Whole(frame);
        }
        let mut parts = Vec::with_capacity(2 * detached.len() + 1);
        let mut from = 0;
        for (at, bytes) in detached {
            parts.push(frame.slice(from..at));
            parts.push(bytes);
            from = at;
        }
        parts.push(frame.slice(from..));
        parts.retain(|part| !part.is_empty());
        let len = parts.iter().map(Bytes::len).sum();
        Self::Segments { parts, len }
    }

    /// Its bytes in all.
    pub fn len(&self) -> usize {
        match self {
            Self::Whole(frame) => frame.len(),
            Self::Segments { len, .. } => *len,
        }
    }

    /// Whether it has no bytes (never, for a frame: it has a prefix).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its bytes as one (tests).
    #[cfg(test)]
    pub fn to_bytes(&self) -> Bytes {
        match self {
            Self::Whole(frame) => frame.clone(),
            Self::Segments { parts, .. } => parts.concat().into(),
        }
    }
}

impl From<Bytes> for OutFrame {
    fn from(frame: Bytes) -> Self {
        Self::Whole(frame)
    }
}

/// The pieces of [`OutFrame::Segments`] as one [`Buf`], so a writer takes them with vectored
/// writes.
pub(crate) struct SegmentsBuf {
    parts: std::collections::VecDeque<Bytes>,
    remaining: usize,
}

impl SegmentsBuf {
    pub(crate) fn new(parts: Vec<Bytes>, len: usize) -> Self {
        Self {
            parts: parts.into(),
            remaining: len,
        }
    }
}

impl Buf for SegmentsBuf {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        self.parts.front().map_or(&[], |part| part)
    }

    fn advance(&mut self, mut cnt: usize) {
        assert!(cnt <= self.remaining, "advanced past the end");
        self.remaining -= cnt;
        while cnt > 0 {
            let front = self.parts.front_mut().expect("bytes remain");
            if cnt < front.len() {
                front.advance(cnt);
                return;
            }
            cnt -= front.len();
            self.parts.pop_front();
        }
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [std::io::IoSlice<'a>]) -> usize {
        let mut filled = 0;
        for (slot, part) in dst.iter_mut().zip(&self.parts) {
            *slot = std::io::IoSlice::new(part);
            filled += 1;
        }
        filled
    }
}

/// The default limit, [`DEFAULT_MAX_FRAME`].
impl Default for FrameCodec {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_FRAME)
    }
}

impl Decoder for FrameCodec {
    type Item = Bytes;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        let Some(prefix) = src.get(..HEADER_LEN) else {
            return Ok(None);
        };
        let mut prefix_bytes = [0u8; HEADER_LEN];
        prefix_bytes.copy_from_slice(prefix);
        // A u32 always fits a usize on the platforms tokio supports (32 and 64 bits); saturating
        // keeps a hypothetical 16-bit target on the "too large" side rather than wrapping.
        let length = usize::try_from(u32::from_be_bytes(prefix_bytes)).unwrap_or(usize::MAX);

        // Validate before reserving anything: see the module docs.
        if length == 0 {
            return Err(FrameError::Empty);
        }
        if length > self.max_frame {
            return Err(FrameError::TooLarge {
                length,
                max: self.max_frame,
            });
        }

        let frame_len = HEADER_LEN + length;
        if src.len() < frame_len {
            // Room for the rest of this frame only, so the next reads need no reallocation and
            // a slow peer cannot make us hold more than one frame's worth.
            src.reserve(frame_len - src.len());
            return Ok(None);
        }
        src.advance(HEADER_LEN);
        Ok(Some(src.split_to(length).freeze()))
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        match self.decode(src)? {
            Some(frame) => Ok(Some(frame)),
            None if src.is_empty() => Ok(None),
            None => Err(FrameError::Truncated {
                buffered: src.len(),
            }),
        }
    }
}

impl Encoder<Bytes> for FrameCodec {
    type Error = FrameError;

    fn encode(&mut self, payload: Bytes, dst: &mut BytesMut) -> Result<(), FrameError> {
        self.write_frame(&payload, dst)
    }
}

impl Encoder<&[u8]> for FrameCodec {
    type Error = FrameError;

    fn encode(&mut self, payload: &[u8], dst: &mut BytesMut) -> Result<(), FrameError> {
        self.write_frame(payload, dst)
    }
}

#[cfg(test)]
pub(crate) mod tests;
