//! The unit of data the exchange moves: a network buffer (Flink's `Buffer`), records serialized
//! back to back. The protocol carries it inside `PartitionData`; how records are written into it
//! and read out is the exchange's business (`crate::exchange::buffer`), so this module never
//! names a record type.

use std::fmt;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::base::codec::SharedBytes;

/// Serialized records; cloning shares the bytes.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Buffer {
    records: u32,
    #[serde(deserialize_with = "bytes_from_slice")]
    bytes: Bytes,
}

/// As derived, but the bytes as [`SharedBytes`]: a data connection sends a large buffer from
/// its own memory behind the envelope rather than copying it into the frame.
impl Serialize for Buffer {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut buffer = serializer.serialize_struct("Buffer", 2)?;
        buffer.serialize_field("records", &self.records)?;
        buffer.serialize_field("bytes", &SharedBytes(&self.bytes))?;
        buffer.end()
    }
}

/// Reads a buffer's bytes as a borrowed slice of the frame and copies them once: `Bytes`' own
/// deserializer asks for an owned buffer, which bincode zero-fills before it copies into it.
fn bytes_from_slice<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Bytes, D::Error> {
    struct Visitor;
    impl<'de> serde::de::Visitor<'de> for Visitor {
        type Value = Bytes;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a buffer's bytes")
        }

        fn visit_bytes<E: serde::de::Error>(self, bytes: &[u8]) -> Result<Bytes, E> {
            Ok(Bytes::copy_from_slice(bytes))
        }

        fn visit_byte_buf<E: serde::de::Error>(self, bytes: Vec<u8>) -> Result<Bytes, E> {
            Ok(Bytes::from(bytes))
        }

        /// Formats without a bytes type (JSON) write them as a list of numbers.
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Bytes, A::Error> {
            let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
            while let Some(byte) = seq.next_element::<u8>()? {
                bytes.push(byte);
            }
            Ok(Bytes::from(bytes))
        }
    }
    deserializer.deserialize_bytes(Visitor)
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Buffer({} records, {} bytes)",
            self.records,
            self.bytes.len()
        )
    }
}

impl Buffer {
    /// A buffer of `records` records serialized back to back in `bytes`; the reader checks the
    /// count against the bytes.
    pub fn new(records: u32, bytes: Bytes) -> Self {
        Self { records, bytes }
    }

    /// How many records it holds.
    pub fn records(&self) -> u32 {
        self.records
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether it holds no record.
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// The raw bytes (spill files store them as they are).
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }
}
