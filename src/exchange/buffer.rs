//! Network buffers (Flink's `Buffer`): records serialized back to back, up to
//! `taskmanager.network.buffer-size` bytes.
//!
//! A producer's task thread serializes each record once, into its subpartition's
//! [`BufferBuilder`]; from then on the buffer is bytes. The store, a local consumer and a data
//! connection hand it on by reference count (`Bytes`: in-process a buffer moves without being
//! copied), the wire carries it as one byte string, and the consumer's task thread decodes its
//! records with a [`BufferReader`]. So neither TaskManager's actor thread — which serves every
//! data connection — ever touches a record.

use crate::base::codec::{self, CodecError};
pub use crate::messages::buffer::Buffer;
use crate::operators::Record;
use bytes::Bytes;
use serde::de::DeserializeOwned;

/// Why a buffer's records could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum BufferError {
    /// The bytes at `offset` are not a record (a garbled buffer).
    #[error("record {index} of a {len}-byte buffer (at byte {offset}) cannot be decoded")]
    Garbled {
        /// Which record.
        index: u32,
        /// Where it starts.
        offset: usize,
        /// The buffer's size.
        len: usize,
        /// The decoder's complaint.
        #[source]
        source: CodecError,
    },
    /// The bytes end before (or go on after) the records the buffer claims.
    #[error("a {len}-byte buffer claims {claimed} records but holds {found}")]
    WrongCount {
        /// Records claimed.
        claimed: u32,
        /// Records found.
        found: u32,
        /// The buffer's size.
        len: usize,
    },
}

impl Buffer {
    /// A buffer of `records` (tests and tools; producers use a [`BufferBuilder`]).
    pub fn from_records(records: &[Record]) -> Result<Self, CodecError> {
        let mut builder = BufferBuilder::default();
        let mut scratch = Vec::new();
        for record in records {
            scratch.clear();
            codec::encode_into(record, &mut scratch)?;
            builder.push_encoded(&scratch, usize::MAX);
        }
        Ok(builder.finish())
    }

    /// Reads its records one by one.
    pub fn reader(self) -> BufferReader {
        BufferReader {
            buffer: self,
            offset: 0,
            read: 0,
        }
    }

    /// Every record at once (tests and tools; task threads read with [`reader`](Self::reader)).
    pub fn to_records(&self) -> Result<Vec<Record>, BufferError> {
        let mut reader = self.clone().reader();
        // A record takes at least a byte: a garbled count cannot make this allocate more.
        let mut records = Vec::with_capacity((self.records() as usize).min(self.len()));
        while let Some(record) = reader.next_record()? {
            records.push(record);
        }
        Ok(records)
    }
}

/// Tests build and compare buffers as their records.
#[cfg(test)]
impl From<Vec<Record>> for Buffer {
    fn from(records: Vec<Record>) -> Self {
        Self::from_records(&records).expect("records encode")
    }
}

#[cfg(test)]
impl PartialEq<Vec<Record>> for Buffer {
    fn eq(&self, records: &Vec<Record>) -> bool {
        self.to_records().is_ok_and(|mine| &mine == records)
    }
}

/// Collects one subpartition's records until the buffer is full.
#[derive(Debug, Default)]
pub struct BufferBuilder {
    bytes: Vec<u8>,
    records: u32,
    /// The capacity the last buffer grew to: the next starts there, so a subpartition that
    /// fills buffers allocates each once instead of doubling its way up every time (the
    /// reallocations were a sixth of a fast producer's thread).
    warm: usize,
}

impl BufferBuilder {
    /// Appends one record's encoding. The allocation doubles as it fills, up to `buffer_size`
    /// (so a subpartition that gets one small record does not hold a whole buffer's memory).
    pub fn push_encoded(&mut self, encoded: &[u8], buffer_size: usize) {
        let needed = self.bytes.len() + encoded.len();
        if needed > self.bytes.capacity() {
            let grown = (self.bytes.capacity() * 2)
                .max(256)
                .max(self.warm)
                .min(buffer_size)
                .max(needed);
            self.bytes.reserve_exact(grown - self.bytes.len());
        }
        self.bytes.extend_from_slice(encoded);
        self.records += 1;
    }

    /// Bytes collected so far.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether no record was collected since the last [`finish`](Self::finish).
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// The buffer collected so far; the builder starts over empty. A buffer using less than
    /// half its allocation (a subpartition's last, cut short) gives the rest back: a queued
    /// buffer holds about its bytes, which is what the network buffer pool counts it as.
    pub fn finish(&mut self) -> Buffer {
        let records = std::mem::take(&mut self.records);
        self.warm = self.bytes.capacity();
        let mut bytes = std::mem::take(&mut self.bytes);
        if bytes.capacity() > bytes.len().saturating_mul(2) {
            bytes.shrink_to_fit();
        }
        Buffer::new(records, Bytes::from(bytes))
    }
}

/// A buffer being read, record by record.
#[derive(Debug, Default)]
pub struct BufferReader {
    buffer: Buffer,
    offset: usize,
    read: u32,
}

impl BufferReader {
    /// The next record; `None` after the last. A garbled buffer is an error, never a panic.
    pub fn next_record(&mut self) -> Result<Option<Record>, BufferError> {
        self.next_value()
    }

    /// The next record, decoded as a `T` (the type its producer wrote: the buffer does not
    /// say); `None` after the last. Bytes that are not a `T` are an error, never a panic.
    pub fn next_value<T: DeserializeOwned>(&mut self) -> Result<Option<T>, BufferError> {
        let len = self.buffer.len();
        if self.read == self.buffer.records() {
            return if self.offset == len {
                Ok(None)
            } else {
                Err(self.wrong_count())
            };
        }
        if self.offset == len {
            return Err(self.wrong_count());
        }
        let (value, used) = codec::decode_prefix::<T>(&self.buffer.bytes()[self.offset..])
            .map_err(|source| BufferError::Garbled {
                index: self.read,
                offset: self.offset,
                len,
                source,
            })?;
        self.offset += used;
        self.read += 1;
        Ok(Some(value))
    }

    /// Whether every record was read.
    pub fn is_done(&self) -> bool {
        self.read == self.buffer.records()
    }

    fn wrong_count(&self) -> BufferError {
        BufferError::WrongCount {
            claimed: self.buffer.records(),
            found: self.read,
            len: self.buffer.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::Value;

    #[test]
    fn a_buffer_round_trips_through_the_codec_and_json() {
        let buffer = Buffer::from((0..5).map(record).collect::<Vec<_>>());
        let decoded: Buffer =
            crate::base::codec::decode(&crate::base::codec::encode(&buffer).expect("encodes"))
                .expect("decodes");
        assert_eq!(decoded, buffer);
        let json: Buffer =
            serde_json::from_str(&serde_json::to_string(&buffer).expect("json")).expect("back");
        assert_eq!(json, buffer);
    }

    fn record(i: i64) -> Record {
        Record {
            key: format!("k{i}"),
            value: Value::Text("x".repeat(i as usize)),
        }
    }

    #[test]
    fn records_come_back_in_order() {
        let records: Vec<Record> = (0..50).map(record).collect();
        let buffer = Buffer::from_records(&records).unwrap();
        assert_eq!(buffer.records(), 50);
        assert_eq!(buffer.to_records().unwrap(), records);
        // Over the wire too, and a clone shares the bytes.
        let copy: Buffer = codec::decode(&codec::encode(&buffer).unwrap()).unwrap();
        assert_eq!(copy, buffer);
        assert_eq!(buffer.clone().bytes().as_ptr(), buffer.bytes().as_ptr());
    }

    #[test]
    fn the_builder_grows_to_the_buffer_size_and_starts_over() {
        let mut builder = BufferBuilder::default();
        let mut scratch = Vec::new();
        codec::encode_into(&record(100), &mut scratch).unwrap();
        builder.push_encoded(&scratch, 1_000);
        assert!(
            builder.bytes.capacity() < 1_000,
            "one small record, a small allocation"
        );
        for _ in 0..8 {
            builder.push_encoded(&scratch, 1_000);
        }
        assert!(
            builder.bytes.capacity() <= 1_000,
            "never past the buffer size"
        );
        let grown = builder.bytes.capacity();
        let buffer = builder.finish();
        assert_eq!(buffer.records(), 9);
        assert!(builder.is_empty());
        assert_eq!(builder.bytes.len(), 0);
        // The next buffer starts at the size the last one grew to: one allocation, no doubling.
        builder.push_encoded(&scratch, 1_000);
        assert_eq!(builder.bytes.capacity(), grown);
        for _ in 0..8 {
            builder.push_encoded(&scratch, 1_000);
        }
        assert_eq!(builder.bytes.capacity(), grown, "no reallocation");
        builder.finish();
        // A record larger than a buffer travels alone; the next buffer is no larger than one.
        builder.push_encoded(&[7; 5_000], 1_000);
        builder.finish();
        builder.push_encoded(&scratch, 1_000);
        assert!(builder.bytes.capacity() <= 1_000);
    }

    #[test]
    fn a_garbled_buffer_is_an_error_not_a_panic() {
        let records: Vec<Record> = (0..3).map(record).collect();
        let good = Buffer::from_records(&records).unwrap();
        let truncated = Buffer::new(3, good.bytes().slice(..good.len() - 1));
        assert!(matches!(
            truncated.to_records(),
            Err(BufferError::Garbled { index: 2, .. })
        ));
        let overclaimed = Buffer::new(4, good.bytes().clone());
        assert!(matches!(
            overclaimed.to_records(),
            Err(BufferError::WrongCount {
                claimed: 4,
                found: 3,
                ..
            })
        ));
        let underclaimed = Buffer::new(2, good.bytes().clone());
        assert!(matches!(
            underclaimed.to_records(),
            Err(BufferError::WrongCount {
                claimed: 2,
                found: 2,
                ..
            })
        ));
        let garbage = Buffer::new(1, Bytes::from_static(&[0xff; 16]));
        assert!(garbage.to_records().is_err());
    }
}
