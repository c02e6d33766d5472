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

/// A frame with byte strings left out is, its segments joined, the frame of the whole payload;
/// its prefix counts what was left out, and the limit applies to the whole.
#[test]
fn a_frame_in_segments_joined_is_the_frame_of_the_whole_payload() {
    let codec = FrameCodec::new(64);
    let buffers = [
        Bytes::from_static(b"0123456789"),
        Bytes::from_static(b"abc"),
    ];
    let whole = codec
        .frame_with(|out| {
            out.extend_from_slice(b"head");
            out.extend_from_slice(&buffers[0]);
            out.extend_from_slice(b"middle");
            out.extend_from_slice(&buffers[1]);
            Ok::<(), ()>(())
        })
        .expect("encodes")
        .expect("fits");
    let segmented = codec
        .frame_detached_with(|out| {
            out.extend_from_slice(b"head");
            let first = out.len();
            out.extend_from_slice(b"middle");
            let second = out.len();
            Ok::<_, ()>(vec![
                (first, buffers[0].clone()),
                (second, buffers[1].clone()),
            ])
        })
        .expect("encodes")
        .expect("fits");
    // The prefix, "head", a buffer, "middle", the other buffer (nothing after it).
    assert!(
        matches!(&segmented, OutFrame::Segments { parts, len } if parts.len() == 4 && *len == whole.len())
    );
    assert_eq!(segmented.to_bytes(), whole);
    let mut buf = match segmented {
        OutFrame::Segments { parts, len } => SegmentsBuf::new(parts, len),
        OutFrame::Whole(_) => unreachable!(),
    };
    // Read out in odd steps across the pieces' edges, as a writer taking part of a write does.
    let mut read = Vec::new();
    while buf.has_remaining() {
        let step = buf.chunk().len().min(3);
        read.extend_from_slice(&buf.chunk()[..step]);
        buf.advance(step);
    }
    assert_eq!(read, whole);
    let nothing_left_out = codec
        .frame_detached_with(|out| {
            out.extend_from_slice(b"payload");
            Ok::<_, ()>(Vec::new())
        })
        .expect("encodes")
        .expect("fits");
    assert!(matches!(nothing_left_out, OutFrame::Whole(_)));
    let too_large = codec.frame_detached_with(|out| {
        out.extend_from_slice(b"head");
        Ok::<_, ()>(vec![(4, Bytes::from(vec![0u8; 61]))])
    });
    assert!(matches!(
        too_large,
        Ok(Err(FrameError::PayloadTooLarge {
            length: 65,
            max: 64
        }))
    ));
}
