//! The one place values become bytes and back.
//!
//! bincode 2.0.1 (pinned: 3.x is an empty tombstone release and RUSTSEC-2025-0141 marks the crate
//! unmaintained) with its serde bridge, varint integers and a size limit. Nothing else in the
//! crate names bincode, so swapping it (postcard and wincode are the candidates) touches only
//! this file.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Serialize, Serializer};

/// The largest encoded message, in bytes. Decoding never allocates past it, whatever a length
/// field inside the bytes claims; the transport's frame limit (configurable) sits below it.
pub const MAX_MESSAGE_SIZE: usize = 16 * 1024 * 1024;

type Config = bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Varint,
    bincode::config::Limit<MAX_MESSAGE_SIZE>,
>;

const fn config() -> Config {
    bincode::config::standard().with_limit::<MAX_MESSAGE_SIZE>()
}

/// Why a value could not be encoded or decoded. Neither is retryable: the bytes or the value
/// are wrong.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The value cannot be represented (a serde error while encoding).
    #[error("cannot encode message")]
    Encode(#[source] bincode::error::EncodeError),
    /// The encoded value would be over [`MAX_MESSAGE_SIZE`].
    #[error("encoded message is {size} bytes, over the {MAX_MESSAGE_SIZE}-byte limit")]
    TooLarge {
        /// The encoded size.
        size: usize,
    },
    /// The bytes are not a valid message (garbage, truncated, or a length over the limit).
    #[error("cannot decode message")]
    Decode(#[source] bincode::error::DecodeError),
    /// A valid message was followed by bytes that belong to nothing.
    #[error("{trailing} unexpected bytes after a {consumed}-byte message")]
    TrailingBytes {
        /// Bytes the message used.
        consumed: usize,
        /// Bytes left over.
        trailing: usize,
    },
}

/// Encodes a value.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, CodecError> {
    let bytes = bincode::serde::encode_to_vec(value, config()).map_err(CodecError::Encode)?;
    if bytes.len() > MAX_MESSAGE_SIZE {
        return Err(CodecError::TooLarge { size: bytes.len() });
    }
    Ok(bytes)
}

/// Decodes a value that must fill `bytes` exactly.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let (value, consumed) =
        bincode::serde::decode_from_slice(bytes, config()).map_err(CodecError::Decode)?;
    if consumed != bytes.len() {
        return Err(CodecError::TrailingBytes {
            consumed,
            trailing: bytes.len() - consumed,
        });
    }
    Ok(value)
}

/// Appends a value's encoding to `out` (a network buffer collects records this way: one
/// allocation per buffer, not per record); returns the bytes written.
pub fn encode_into<T: Serialize>(value: &T, out: &mut Vec<u8>) -> Result<usize, CodecError> {
    bincode::serde::encode_into_std_write(value, out, config()).map_err(CodecError::Encode)
}

/// Decodes the value at the start of `bytes`; returns it and the bytes it used (the rest may be
/// further values: the records of a network buffer).
pub fn decode_prefix<T: DeserializeOwned>(bytes: &[u8]) -> Result<(T, usize), CodecError> {
    bincode::serde::decode_from_slice(bytes, config()).map_err(CodecError::Decode)
}

/// Byte strings an encoding left out, each with the position in the output where it belongs:
/// the output with each inserted at its position is the plain encoding.
pub type Detached = Vec<(usize, Bytes)>;

thread_local! {
    /// Set while [`encode_detaching`] or [`encoded_size_detaching`] runs on this thread.
    static DETACHING: RefCell<Option<Detaching>> = const { RefCell::new(None) };
}

struct Detaching {
    /// Byte strings shorter than this are written in place.
    min: usize,
    /// The output's length after its last write (kept by the writer): where a byte string left
    /// out belongs.
    written: Rc<Cell<usize>>,
    detached: Detached,
}

/// Runs `encode` with the thread in detaching mode, and takes it out again whatever happens
/// (a panicking `Serialize` included). The mode does not nest: no `Serialize` of a message
/// encodes with this module while the transport encodes the message (an inner encoding would
/// leave its byte strings out too).
fn detaching<R>(min: usize, written: Rc<Cell<usize>>, encode: impl FnOnce() -> R) -> (R, Detached) {
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            DETACHING.with(|cell| *cell.borrow_mut() = None);
        }
    }
    let previous = DETACHING.with(|cell| {
        cell.replace(Some(Detaching {
            min,
            written,
            detached: Vec::new(),
        }))
    });
    debug_assert!(previous.is_none(), "detaching encodings do not nest");
    let leave = Leave;
    let result = encode();
    let mine = DETACHING.with(|cell| cell.replace(None));
    drop(leave);
    (result, mine.map(|mine| mine.detached).unwrap_or_default())
}

/// A byte string a message may carry by reference: a network buffer's bytes. Encoded as plain
/// bytes, except inside [`encode_detaching`], where one of its `min` bytes or more is written as
/// its length alone (bincode's varint length prefix of a byte string is the varint `u64`) and
/// handed back to be sent from its own memory: a data answer of a megabyte is not copied into
/// its frame.
pub struct SharedBytes<'a>(pub &'a Bytes);

impl Serialize for SharedBytes<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let len = self.0.len();
        let detach = DETACHING.with(|cell| {
            cell.borrow()
                .as_ref()
                .is_some_and(|detaching| len >= detaching.min)
        });
        if !detach {
            return serializer.serialize_bytes(self.0);
        }
        let ok = serializer.serialize_u64(len as u64)?;
        DETACHING.with(|cell| {
            if let Some(detaching) = cell.borrow_mut().as_mut() {
                let at = detaching.written.get();
                detaching.detached.push((at, self.0.clone()));
            }
        });
        Ok(ok)
    }
}

/// Appends to a `Vec` and keeps its length where the detaching mode reads it.
struct TrackingWriter<'a> {
    out: &'a mut Vec<u8>,
    written: Rc<Cell<usize>>,
}

impl bincode::enc::write::Writer for TrackingWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> Result<(), bincode::error::EncodeError> {
        self.out.extend_from_slice(bytes);
        self.written.set(self.out.len());
        Ok(())
    }
}

/// Appends a value's encoding to `out` without the [`SharedBytes`] of `min` bytes or more,
/// which it answers with their positions in `out`.
pub fn encode_detaching<T: Serialize>(
    value: &T,
    out: &mut Vec<u8>,
    min: usize,
) -> Result<Detached, CodecError> {
    let written = Rc::new(Cell::new(out.len()));
    let writer = TrackingWriter {
        out,
        written: Rc::clone(&written),
    };
    let (encoded, detached) = detaching(min, written, || {
        bincode::serde::encode_into_writer(value, writer, config())
    });
    encoded.map_err(CodecError::Encode)?;
    Ok(detached)
}

/// What [`encode_detaching`] would write in place and leave out, in bytes, without writing (to
/// reserve room for a large message at once instead of growing a buffer, and copying it, as it
/// is written).
pub fn encoded_size_detaching<T: Serialize>(
    value: &T,
    min: usize,
) -> Result<(usize, usize), CodecError> {
    let (size, detached) = detaching(min, Rc::default(), || {
        let mut size = bincode::enc::write::SizeWriter::default();
        bincode::serde::encode_into_writer(value, &mut size, config()).map(|()| size.bytes_written)
    });
    let left_out = detached.iter().map(|(_, bytes)| bytes.len()).sum();
    Ok((size.map_err(CodecError::Encode)?, left_out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Carrier<'a> {
        before: u64,
        strings: Vec<(u32, SharedBytes<'a>)>,
        after: String,
    }

    fn joined(mut out: Vec<u8>, detached: Detached) -> Vec<u8> {
        for (at, bytes) in detached.into_iter().rev() {
            out.splice(at..at, bytes.iter().copied());
        }
        out
    }

    /// The output with every left-out byte string put back where it belongs is the plain
    /// encoding, whatever their sizes (a length prefix of one byte and of three), and the mode
    /// ends with the call.
    #[test]
    fn a_detached_encoding_joined_is_the_plain_encoding() {
        let strings: Vec<Bytes> = [0usize, 5, 127, 128, 300, 70_000, 16, 4_096]
            .iter()
            .enumerate()
            .map(|(n, &len)| Bytes::from(vec![n as u8 + 1; len]))
            .collect();
        let carrier = Carrier {
            before: 1 << 40,
            strings: strings
                .iter()
                .enumerate()
                .map(|(n, bytes)| (n as u32, SharedBytes(bytes)))
                .collect(),
            after: "the end".to_owned(),
        };
        let plain = encode(&carrier).unwrap();
        for min in [1, 100, 128, 4_096, usize::MAX] {
            let mut out = b"prefix".to_vec();
            let detached = encode_detaching(&carrier, &mut out, min).unwrap();
            let expected = strings.iter().filter(|b| b.len() >= min).count();
            assert_eq!(detached.len(), expected, "min {min}");
            let (in_place, left_out) = encoded_size_detaching(&carrier, min).unwrap();
            assert_eq!(in_place, out.len() - 6, "min {min}");
            assert_eq!(
                left_out,
                detached.iter().map(|(_, b)| b.len()).sum::<usize>()
            );
            assert_eq!(&joined(out, detached)[6..], &plain[..], "min {min}");
        }
        // Outside the mode, everything is written in place, also after a value that panicked
        // while it was encoded in it.
        struct Panics;
        impl Serialize for Panics {
            fn serialize<S: Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
                panic!("cannot encode");
            }
        }
        let panicked = std::panic::catch_unwind(|| encode_detaching(&Panics, &mut Vec::new(), 1));
        assert!(panicked.is_err());
        assert_eq!(encode(&carrier).unwrap(), plain);
        let mut out = Vec::new();
        encode_into(&carrier, &mut out).unwrap();
        assert_eq!(out, plain);
    }
}
