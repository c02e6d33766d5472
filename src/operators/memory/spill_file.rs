//! The spill file format, and typed writers and readers of it.
//!
//! A spill file is a sequence of records, each a little-endian `u32` length followed by that
//! many bytes of the record's spill encoding (`codec.rs`). Nothing else: no header, no
//! checksum. The file lives only as long as the operator that wrote it, on the machine that
//! wrote it, in a directory only this user can enter; the reader checks what can go wrong on
//! such a file — truncation, a length over the limit, a different record count than was
//! written, bytes after the last record — and names the file and offset when it finds it.
//!
//! IO is buffered on both sides with a buffer whose size the caller takes from the memory
//! budget (`options.rs`), because an operator may have dozens of these open at once.

use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Write};
use std::marker::PhantomData;
use std::path::PathBuf;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::operators::memory::codec::{self, MAX_RECORD_SIZE};
use crate::operators::memory::error::SpillError;
use crate::operators::memory::spill_dir::{SpillDir, SpillFile};

/// Bytes of a record's length prefix.
const PREFIX_LEN: usize = 4;

/// A scratch encoding buffer that grew past this for one large record is shrunk back, so that
/// a single outsized record does not pin its size for the writer's lifetime.
const SCRATCH_KEEP: usize = 1024 * 1024;

/// Writes records of type `T` to a new spill file. Dropping it before [`finish`](Self::finish)
/// (an error, a panic) deletes the file.
pub(crate) struct SpillWriter<T> {
    out: BufWriter<File>,
    scratch: Vec<u8>,
    records: u64,
    bytes: u64,
    /// Declared last: dropped after `out` flushed what it could, and deletes the file.
    owner: SpillFile,
    _record: PhantomData<fn(&T)>,
}

impl<T: Serialize> SpillWriter<T> {
    /// Creates a new spill file named after `label` in `dir`, written through a buffer of
    /// `buffer` bytes.
    pub(crate) fn create(dir: &SpillDir, label: &str, buffer: usize) -> Result<Self, SpillError> {
        let (owner, file) = dir.create_file(label)?;
        Ok(Self {
            out: BufWriter::with_capacity(buffer, file),
            scratch: Vec::new(),
            records: 0,
            bytes: 0,
            owner,
            _record: PhantomData,
        })
    }

    /// Appends one record.
    pub(crate) fn write(&mut self, record: &T) -> Result<(), SpillError> {
        self.scratch.clear();
        let len =
            codec::encode_into(record, &mut self.scratch).map_err(|source| SpillError::Encode {
                path: self.owner.path().to_owned(),
                source,
            })?;
        // `encode_into` refuses anything over MAX_RECORD_SIZE, which is below u32::MAX.
        let prefix = u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes();
        self.out
            .write_all(&prefix)
            .and_then(|()| self.out.write_all(&self.scratch))
            .map_err(|source| SpillError::Io {
                action: "write",
                path: self.owner.path().to_owned(),
                source,
            })?;
        if self.scratch.capacity() > SCRATCH_KEEP {
            self.scratch = Vec::new();
        }
        self.records += 1;
        self.bytes += (PREFIX_LEN + len) as u64;
        Ok(())
    }

    /// Flushes the buffer and hands over the complete file. No `fsync`: a spill file is read
    /// back by this process or not at all, so the page cache is as good as the disk.
    pub(crate) fn finish(mut self) -> Result<SpillFile, SpillError> {
        self.out.flush().map_err(|source| SpillError::Io {
            action: "flush",
            path: self.owner.path().to_owned(),
            source,
        })?;
        let Self {
            out,
            records,
            bytes,
            mut owner,
            ..
        } = self;
        // Flushed above: dropping the writer only closes the file.
        drop(out);
        owner.set_contents(records, bytes);
        Ok(owner)
    }
}

impl SpillFile {
    /// Opens the file for reading from the start; the file stays (a block nested loop join
    /// reads its probe partition once per block).
    pub(crate) fn open<T>(&self, buffer: usize) -> Result<SpillReader<T>, SpillError> {
        SpillReader::new(self, buffer)
    }

    /// Opens the file for a single read; it is deleted when the reader is dropped, so disk
    /// space is returned as soon as a merge or partition is done with it.
    pub(crate) fn into_reader<T>(self, buffer: usize) -> Result<SpillReader<T>, SpillError> {
        let reader = SpillReader::new(&self, buffer)?;
        Ok(reader.owning(self))
    }
}

/// Reads the records of a spill file, in the order they were written, as
/// `Result<T, SpillError>`; stops after the first error.
pub(crate) struct SpillReader<T> {
    path: PathBuf,
    input: BufReader<File>,
    /// Where the next record's length prefix starts.
    offset: u64,
    /// Records written to the file that have not been read yet.
    remaining: u64,
    scratch: Vec<u8>,
    done: bool,
    /// Deletes the file when the reader is dropped, for readers that own it.
    _owner: Option<SpillFile>,
    _record: PhantomData<fn() -> T>,
}

impl<T> SpillReader<T> {
    fn new(file: &SpillFile, buffer: usize) -> Result<Self, SpillError> {
        let path = file.path().to_owned();
        let handle = File::open(&path).map_err(|source| SpillError::Io {
            action: "open",
            path: path.clone(),
            source,
        })?;
        Ok(Self {
            path,
            input: BufReader::with_capacity(buffer, handle),
            offset: 0,
            remaining: file.records(),
            scratch: Vec::new(),
            done: false,
            _owner: None,
            _record: PhantomData,
        })
    }

    fn owning(mut self, owner: SpillFile) -> Self {
        self._owner = Some(owner);
        self
    }

    fn corrupt(&self, reason: String) -> SpillError {
        SpillError::Corrupt {
            path: self.path.clone(),
            offset: self.offset,
            reason,
        }
    }

    fn io_error(&self, source: io::Error) -> SpillError {
        SpillError::Io {
            action: "read",
            path: self.path.clone(),
            source,
        }
    }

    /// After the last record written: the file must end here.
    fn check_end(&mut self) -> Result<(), SpillError> {
        match self.input.fill_buf() {
            Ok([]) => Ok(()),
            Ok(_) => Err(self.corrupt("bytes after the last record".to_owned())),
            Err(error) => Err(self.io_error(error)),
        }
    }
}

impl<T: DeserializeOwned> SpillReader<T> {
    fn read_record(&mut self) -> Result<T, SpillError> {
        let mut prefix = [0u8; PREFIX_LEN];
        if let Err(error) = self.input.read_exact_or_eof(&mut prefix) {
            return Err(match error {
                ReadError::Eof => self.corrupt(format!(
                    "truncated: {} of the records written are missing",
                    self.remaining
                )),
                ReadError::Io(error) => self.io_error(error),
            });
        }
        let len = u32::from_le_bytes(prefix) as usize;
        if len > MAX_RECORD_SIZE {
            return Err(self.corrupt(format!(
                "a record length of {len} bytes is over the {MAX_RECORD_SIZE}-byte limit"
            )));
        }
        let body_offset = self.offset;
        // The common case decodes straight from the read buffer, without a copy.
        let buffered = match self.input.fill_buf() {
            Ok(buffered) => buffered,
            Err(source) => {
                return Err(SpillError::Io {
                    action: "read",
                    path: self.path.clone(),
                    source,
                });
            }
        };
        let decoded = if buffered.len() >= len {
            let decoded = codec::decode(&buffered[..len]);
            self.input.consume(len);
            decoded
        } else {
            self.scratch.resize(len, 0);
            match self.input.read_exact_or_eof(&mut self.scratch) {
                Ok(()) => {}
                Err(ReadError::Eof) => {
                    return Err(self.corrupt("truncated inside a record".to_owned()));
                }
                Err(ReadError::Io(error)) => return Err(self.io_error(error)),
            }
            let decoded = codec::decode(&self.scratch);
            if self.scratch.capacity() > SCRATCH_KEEP {
                self.scratch = Vec::new();
            }
            decoded
        };
        let record = decoded.map_err(|source| SpillError::Decode {
            path: self.path.clone(),
            offset: body_offset,
            source,
        })?;
        self.offset += (PREFIX_LEN + len) as u64;
        self.remaining -= 1;
        Ok(record)
    }
}

impl<T: DeserializeOwned> Iterator for SpillReader<T> {
    type Item = Result<T, SpillError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if self.remaining == 0 {
            self.done = true;
            return self.check_end().err().map(Err);
        }
        let result = self.read_record();
        if result.is_err() {
            self.done = true;
        }
        Some(result)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.done {
            return (0, Some(0));
        }
        let remaining = usize::try_from(self.remaining).unwrap_or(usize::MAX);
        (0, Some(remaining))
    }
}

enum ReadError {
    /// The file ended before the bytes did.
    Eof,
    Io(io::Error),
}

trait ReadExactOrEof {
    fn read_exact_or_eof(&mut self, buf: &mut [u8]) -> Result<(), ReadError>;
}

impl<R: io::Read> ReadExactOrEof for R {
    fn read_exact_or_eof(&mut self, buf: &mut [u8]) -> Result<(), ReadError> {
        self.read_exact(buf).map_err(|error| {
            if error.kind() == io::ErrorKind::UnexpectedEof {
                ReadError::Eof
            } else {
                ReadError::Io(error)
            }
        })
    }
}

#[cfg(test)]
mod tests;
