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

use crate::base::codec::MAX_MESSAGE_SIZE;

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

    /// Writes one frame: the prefix, then the payload, with one reservation for both.
    fn write_frame(&self, payload: &[u8], dst: &mut BytesMut) -> Result<(), FrameError> {
        let length = self.check_outbound(payload.len())?;
        dst.reserve(HEADER_LEN + payload.len());
        dst.put_u32(length);
        dst.extend_from_slice(payload);
        Ok(())
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
pub(crate) mod tests {
    use super::*;
    use crate::base::rng::NodeRng;

    fn framed(payloads: &[&[u8]]) -> BytesMut {
        let mut codec = FrameCodec::default();
        let mut buf = BytesMut::new();
        for payload in payloads {
            codec.encode(*payload, &mut buf).expect("encodes");
        }
        buf
    }

    fn drain(codec: &mut FrameCodec, buf: &mut BytesMut) -> Vec<Bytes> {
        let mut frames = Vec::new();
        while let Some(frame) = codec.decode(buf).expect("decodes") {
            frames.push(frame);
        }
        frames
    }

    #[test]
    fn frames_written_back_to_back_decode_in_order() {
        let payloads: [&[u8]; 4] = [b"a", b"hello", &[0u8; 300], b"\x00\xff"];
        let mut buf = framed(&payloads);
        assert_eq!(
            &buf[..HEADER_LEN],
            &[0, 0, 0, 1],
            "big-endian length prefix"
        );
        let frames = drain(&mut FrameCodec::default(), &mut buf);
        assert_eq!(frames, payloads.map(Bytes::copy_from_slice));
        assert!(buf.is_empty());
    }

    #[test]
    fn the_bytes_encoder_writes_what_the_slice_encoder_writes() {
        let mut codec = FrameCodec::default();
        let mut from_bytes = BytesMut::new();
        codec
            .encode(Bytes::from_static(b"same"), &mut from_bytes)
            .expect("encodes");
        assert_eq!(from_bytes, framed(&[b"same"]));
    }

    #[test]
    fn every_split_point_of_two_frames_waits_then_yields_both() {
        let whole = framed(&[b"first frame", b"second"]);
        for split in 0..=whole.len() {
            let mut codec = FrameCodec::default();
            let mut buf = BytesMut::from(&whole[..split]);
            let mut frames = drain(&mut codec, &mut buf);
            if split < HEADER_LEN + 11 {
                assert!(frames.is_empty(), "split {split}: nothing before frame one");
            }
            buf.extend_from_slice(&whole[split..]);
            frames.extend(drain(&mut codec, &mut buf));
            assert_eq!(
                frames,
                [
                    Bytes::from_static(b"first frame"),
                    Bytes::from_static(b"second")
                ],
                "split at {split}"
            );
            assert!(buf.is_empty());
        }
    }

    #[test]
    fn a_partial_frame_reserves_only_that_frame() {
        let mut codec = FrameCodec::new(1000);
        let mut buf = BytesMut::from(&[0u8, 0, 0, 200, 1, 2][..]);
        assert!(codec.decode(&mut buf).expect("waits").is_none());
        assert!(buf.capacity() >= HEADER_LEN + 200);
        assert!(buf.capacity() < 2 * (HEADER_LEN + 200));
    }

    #[test]
    fn a_length_over_the_limit_is_refused_without_allocating() {
        let mut codec = FrameCodec::new(1024);
        let mut buf = BytesMut::with_capacity(16);
        buf.extend_from_slice(&u32::MAX.to_be_bytes());
        buf.extend_from_slice(b"xy");
        let error = codec.decode(&mut buf).expect_err("too large");
        assert!(matches!(
            error,
            FrameError::TooLarge {
                length,
                max: 1024
            } if length == u32::MAX as usize
        ));
        assert!(error.closes_connection());
        assert_eq!(buf.capacity(), 16, "the claimed length was not reserved");

        // One byte over the limit is over; the limit itself is fine.
        let mut over = BytesMut::from(&1025u32.to_be_bytes()[..]);
        assert!(matches!(
            codec.decode(&mut over),
            Err(FrameError::TooLarge { length: 1025, .. })
        ));
        let mut at = BytesMut::from(&1024u32.to_be_bytes()[..]);
        assert!(codec.decode(&mut at).expect("waits").is_none());
    }

    #[test]
    fn a_zero_length_frame_is_an_error() {
        let mut buf = BytesMut::from(&[0u8, 0, 0, 0, 9][..]);
        let error = FrameCodec::default()
            .decode(&mut buf)
            .expect_err("empty frame");
        assert!(matches!(error, FrameError::Empty));
        assert!(error.closes_connection());
        assert_eq!(
            std::io::Error::from(error).kind(),
            std::io::ErrorKind::InvalidData
        );
    }

    #[test]
    fn a_frame_written_in_place_is_the_encoders_frame_and_refused_alike() {
        let codec = FrameCodec::new(8);
        let mut expected = BytesMut::new();
        codec
            .clone()
            .encode(&b"payload"[..], &mut expected)
            .expect("fits");
        let frame = codec
            .frame_with(|out| {
                out.extend_from_slice(b"payload");
                Ok::<(), ()>(())
            })
            .expect("encodes")
            .expect("fits");
        assert_eq!(frame, expected.freeze());
        let too_large = codec.frame_with(|out| {
            out.extend_from_slice(&[0u8; 9]);
            Ok::<(), ()>(())
        });
        assert!(matches!(
            too_large,
            Ok(Err(FrameError::PayloadTooLarge { length: 9, max: 8 }))
        ));
        let empty = codec.frame_with(|_| Ok::<(), ()>(()));
        assert!(matches!(empty, Ok(Err(FrameError::EmptyPayload))));
        assert!(matches!(
            codec.frame_with(|_| Err::<(), _>("cannot")),
            Err("cannot")
        ));
    }

    #[test]
    fn the_encoder_refuses_oversize_and_empty_payloads_and_writes_nothing() {
        let mut codec = FrameCodec::new(8);
        let mut buf = BytesMut::new();
        let error = codec
            .encode(&[0u8; 9][..], &mut buf)
            .expect_err("too large");
        assert!(matches!(
            error,
            FrameError::PayloadTooLarge { length: 9, max: 8 }
        ));
        assert!(!error.closes_connection());
        let error = codec.encode(&[][..], &mut buf).expect_err("empty");
        assert!(matches!(error, FrameError::EmptyPayload));
        assert!(buf.is_empty());
        codec.encode(&[7u8; 8][..], &mut buf).expect("at the limit");
        assert_eq!(buf.len(), HEADER_LEN + 8);
    }

    #[test]
    fn the_limit_is_clamped_to_what_the_codec_can_decode() {
        assert_eq!(FrameCodec::new(usize::MAX).max_frame(), MAX_MESSAGE_SIZE);
        assert_eq!(FrameCodec::new(0).max_frame(), 1);
        assert_eq!(FrameCodec::default().max_frame(), DEFAULT_MAX_FRAME);
    }

    #[test]
    fn eof_inside_a_frame_is_truncation_and_eof_between_frames_is_not() {
        let mut codec = FrameCodec::default();
        let whole = framed(&[b"abc"]);
        let mut cut = BytesMut::from(&whole[..whole.len() - 1]);
        let error = codec.decode_eof(&mut cut).expect_err("truncated");
        assert!(matches!(error, FrameError::Truncated { buffered: 6 }));
        assert_eq!(
            std::io::Error::from(error).kind(),
            std::io::ErrorKind::UnexpectedEof
        );
        let mut buf = whole.clone();
        assert_eq!(
            codec.decode_eof(&mut buf).expect("a frame"),
            Some(Bytes::from_static(b"abc"))
        );
        assert_eq!(codec.decode_eof(&mut buf).expect("clean end"), None);
    }

    /// Feeds `input` to a decoder with limit `max`, in chunks as a socket would deliver it, and
    /// checks the buffer never grew past one frame's worth, whatever the bytes claim.
    pub(crate) fn decode_arbitrary(input: &[u8], max: usize, chunk: usize) -> Vec<Bytes> {
        let mut codec = FrameCodec::new(max);
        let mut buf = BytesMut::new();
        let mut frames = Vec::new();
        // Vec::reserve may double, so a buffer holding at most one frame plus one chunk of
        // not-yet-decoded bytes stays within twice that.
        let bound = 2 * (HEADER_LEN + max + chunk);
        for piece in input.chunks(chunk.max(1)) {
            buf.extend_from_slice(piece);
            loop {
                match codec.decode(&mut buf) {
                    Ok(Some(frame)) => {
                        assert!(!frame.is_empty() && frame.len() <= max);
                        frames.push(frame);
                    }
                    Ok(None) => break,
                    Err(error) => {
                        assert!(error.closes_connection());
                        assert!(buf.capacity() <= bound, "{} > {bound}", buf.capacity());
                        return frames;
                    }
                }
                assert!(buf.capacity() <= bound, "{} > {bound}", buf.capacity());
            }
            assert!(buf.capacity() <= bound, "{} > {bound}", buf.capacity());
        }
        frames
    }

    #[test]
    fn arbitrary_bytes_never_panic_or_allocate_past_the_limit() {
        let mut rng = NodeRng::seed_from_u64(0xf4a3e);
        let mut decoded = 0usize;
        for _ in 0..20_000 {
            let len = (rng.next_u64() % 96) as usize;
            let mut input: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            // Half the time, make the prefix small so frames actually decode and the decoder
            // is exercised past its first frame.
            if rng.next_u64().is_multiple_of(2) && input.len() >= HEADER_LEN {
                input[0] = 0;
                input[1] = 0;
                input[2] = 0;
                input[3] = (rng.next_u64() % 32) as u8;
            }
            let max = [1usize, 16, 64, 1024][(rng.next_u64() % 4) as usize];
            let chunk = 1 + (rng.next_u64() % 16) as usize;
            decoded += decode_arbitrary(&input, max, chunk).len();
        }
        assert!(decoded > 2000, "the generator produced real frames too");
    }
}
