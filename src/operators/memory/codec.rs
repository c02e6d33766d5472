//! The one place records become bytes and back, and the one place that names bincode.
//!
//! Two encodings of the same serde data model, for two different jobs:
//!
//! - **Spill encoding** ([`encode_into`], [`decode`]): bincode 2.0.1's standard configuration
//!   (little endian, varint integers) with a size limit, as Flint's network codec uses. Varints
//!   make spill files smaller, and spill files are written and read once or twice each.
//! - **Footprint** ([`footprint`]): the size of the *fixed-width* encoding, computed without
//!   writing anything. It is the memory estimate's measure of a record's content: a fixed-width
//!   `u64` is 8 bytes as in memory, where a varint can be 1, so a `Vec<u64>` of small numbers is
//!   not underestimated eightfold; a string or sequence is its length field (8 bytes, standing in
//!   for the pointer/capacity of its header) plus its contents. See `budget.rs` for how it is
//!   used.
//!
//! bincode 2.0.1 is pinned: 3.x is an empty tombstone release and the crate is marked
//! unmaintained (RUSTSEC-2025-0141). Swapping the format touches only this file.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The largest encoded record, in bytes. A record's length prefix is checked against it before
/// anything is allocated, so a corrupt length cannot make a reader allocate gigabytes; decoding
/// never allocates past it either, whatever a length inside the bytes claims.
pub const MAX_RECORD_SIZE: usize = 256 * 1024 * 1024;

type SpillConfig = bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Varint,
    bincode::config::Limit<MAX_RECORD_SIZE>,
>;

type FootprintConfig = bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Fixint,
    bincode::config::NoLimit,
>;

const fn spill_config() -> SpillConfig {
    bincode::config::standard().with_limit::<MAX_RECORD_SIZE>()
}

const fn footprint_config() -> FootprintConfig {
    bincode::config::standard().with_fixed_int_encoding()
}

/// Why a record could not be encoded or decoded. Neither is retryable: the value or the bytes
/// are wrong.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The value cannot be represented (its `Serialize` failed, or it serializes a sequence of
    /// unknown length, which bincode cannot encode).
    #[error("cannot encode record")]
    Encode(#[source] bincode::error::EncodeError),
    /// The encoded record would be over [`MAX_RECORD_SIZE`].
    #[error("encoded record is {size} bytes, over the {MAX_RECORD_SIZE}-byte limit")]
    TooLarge {
        /// The encoded size.
        size: usize,
    },
    /// The bytes are not a valid record of the expected type.
    #[error("cannot decode record")]
    Decode(#[source] bincode::error::DecodeError),
    /// A valid record was followed by bytes that belong to nothing: the length prefix and the
    /// record disagree, so the file is corrupt or was written for another type.
    #[error("{trailing} unexpected bytes after a {consumed}-byte record")]
    TrailingBytes {
        /// Bytes the record used.
        consumed: usize,
        /// Bytes left over.
        trailing: usize,
    },
}

/// Appends the spill encoding of `value` to `out`; returns the bytes written.
pub fn encode_into<T: Serialize>(value: &T, out: &mut Vec<u8>) -> Result<usize, CodecError> {
    let written = bincode::serde::encode_into_std_write(value, out, spill_config())
        .map_err(CodecError::Encode)?;
    if written > MAX_RECORD_SIZE {
        return Err(CodecError::TooLarge { size: written });
    }
    Ok(written)
}

/// Decodes a record that must fill `bytes` exactly.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let (value, consumed) =
        bincode::serde::decode_from_slice(bytes, spill_config()).map_err(CodecError::Decode)?;
    if consumed != bytes.len() {
        return Err(CodecError::TrailingBytes {
            consumed,
            trailing: bytes.len() - consumed,
        });
    }
    Ok(value)
}

/// The size of `value`'s fixed-width encoding: the measure of its content that the memory
/// estimate charges (module docs). Costs one walk over the value, no allocation.
pub fn footprint<T: Serialize + ?Sized>(value: &T) -> Result<usize, CodecError> {
    let mut size = bincode::enc::write::SizeWriter::default();
    bincode::serde::encode_into_writer(value, &mut size, footprint_config())
        .map_err(CodecError::Encode)?;
    Ok(size.bytes_written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let value = (7u64, String::from("seven"), vec![1u8, 2, 3], Some(-3i32));
        let mut out = Vec::new();
        let written = encode_into(&value, &mut out).unwrap();
        assert_eq!(written, out.len());
        let back: (u64, String, Vec<u8>, Option<i32>) = decode(&out).unwrap();
        assert_eq!(back, value);
    }

    #[test]
    fn trailing_bytes_are_an_error() {
        let mut out = Vec::new();
        encode_into(&5u32, &mut out).unwrap();
        out.push(0);
        assert!(matches!(
            decode::<u32>(&out),
            Err(CodecError::TrailingBytes { trailing: 1, .. })
        ));
    }

    #[test]
    fn footprint_counts_integers_at_full_width() {
        // Varint would encode each small u64 in 1 byte; in memory each is 8.
        let numbers = vec![1u64; 100];
        assert_eq!(footprint(&numbers).unwrap(), 8 + 100 * 8);
        assert_eq!(footprint("abc").unwrap(), 8 + 3);
    }
}
