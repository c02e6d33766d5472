//! The one place values become bytes and back.
//!
//! bincode 2.0.1 (pinned: 3.x is an empty tombstone release and RUSTSEC-2025-0141 marks the crate
//! unmaintained) with its serde bridge, varint integers and a size limit. Nothing else in the
//! crate names bincode, so swapping it (postcard and wincode are the candidates) touches only
//! this file.

use serde::Serialize;
use serde::de::DeserializeOwned;

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

/// The bytes `value` encodes to, without writing them (to reserve room for a large message at
/// once instead of growing a buffer, and copying it, as it is written).
pub fn encoded_size<T: Serialize>(value: &T) -> Result<usize, CodecError> {
    let mut size = bincode::enc::write::SizeWriter::default();
    bincode::serde::encode_into_writer(value, &mut size, config()).map_err(CodecError::Encode)?;
    Ok(size.bytes_written)
}

/// Decodes the value at the start of `bytes`; returns it and the bytes it used (the rest may be
/// further values: the records of a network buffer).
pub fn decode_prefix<T: DeserializeOwned>(bytes: &[u8]) -> Result<(T, usize), CodecError> {
    bincode::serde::decode_from_slice(bytes, config()).map_err(CodecError::Decode)
}
