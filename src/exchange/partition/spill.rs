//! Spilling: a blocking partition's buffers written to one spill file per partition (Flink's
//! sort-merge blocking shuffle writes one data file per partition too), every subpartition's
//! buffers appended as they come, each buffer one subpartition's records; the partition's index
//! is the place of each buffer, kept in memory with its subpartition ([`Stored::Spilled`]). So
//! a TaskManager has one spill file open per partition being written, whatever the number of
//! subpartitions, and none once its producer finished: reads open the file per fetch.
//! Buffers are read back, outside any lock, by the fetches planned under it.

use super::read_buffers::READ_BUFFERS;
use super::*;

impl ResultPartition {
    /// Appends one buffer (of one subpartition) to the partition's spill file as a frame: the
    /// [`FRAME_HEADER`], then the buffer's bytes.
    pub(super) fn spill(
        &mut self,
        buffer: &Buffer,
        working_dir: &Path,
        disk: &Arc<SpillDisk>,
        next_file: impl FnOnce() -> u64,
    ) -> Result<Stored, PartitionError> {
        let id = self.id;
        let payload = buffer.bytes();
        let len = u32::try_from(payload.len()).map_err(|_| PartitionError::Encode {
            id,
            source: CodecError::TooLarge {
                size: payload.len(),
            },
        })?;
        let spill = match &mut self.spill {
            Some(spill) => spill,
            empty @ None => empty.insert(SpillFile::create(
                id,
                working_dir,
                disk.clone(),
                working_dir.join(format!(
                    "partition-{:032x}-{}-{}.spill",
                    id.producer.as_u128(),
                    id.edge,
                    next_file()
                )),
            )?),
        };
        let mut header = [0u8; FRAME_HEADER];
        header[..4].copy_from_slice(&len.to_le_bytes());
        header[4..].copy_from_slice(&buffer.records().to_le_bytes());
        let frame_len = (FRAME_HEADER + payload.len()) as u64;
        let spill_error = |source| PartitionError::Spill {
            id,
            path: spill.path.clone(),
            source,
        };
        spill.disk.take(frame_len).map_err(spill_error)?;
        let written = match spill.file.as_mut() {
            Some(file) => write_frame(file, &header, payload),
            None => Err(io::Error::other(
                "the spill file was closed: its producer finished",
            )),
        };
        if let Err(error) = written {
            // The frame is not in `len`, which the file frees when deleted: free it now (a
            // torn tail nobody reads goes with the file).
            spill.disk.free(frame_len);
            return Err(spill_error(error));
        }
        let offset = spill.len;
        spill.len += frame_len;
        Ok(Stored::Spilled {
            offset,
            len: payload.len(),
            bytes: buffer.len(),
        })
    }
}

/// A frame's header: the payload's length and the buffer's record count, each a little-endian
/// `u32`; the buffer's bytes follow as they are (no encoding: written and read without a copy
/// of our own).
const FRAME_HEADER: usize = 8;

/// Writes header and payload with as few system calls as the kernel allows (one, usually).
fn write_frame(file: &mut File, header: &[u8], payload: &[u8]) -> io::Result<()> {
    let mut slices = [io::IoSlice::new(header), io::IoSlice::new(payload)];
    let mut slices = &mut slices[..];
    while !slices.is_empty() {
        match file.write_vectored(slices) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(written) => io::IoSlice::advance_slices(&mut slices, written),
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

/// One buffer, in memory or at a place in the partition's spill file.
pub(super) enum Stored {
    Memory(Buffer),
    Spilled {
        /// Where its frame (4-byte little-endian length, then the encoded buffer) starts.
        offset: u64,
        /// The encoded length.
        len: usize,
        /// The buffer's size.
        bytes: usize,
    },
}

impl Stored {
    /// The buffer's size, also used for fetch budgets so both kinds weigh the same.
    pub(super) fn bytes(&self) -> usize {
        match self {
            Self::Memory(buffer) => buffer.len(),
            Self::Spilled { bytes, .. } => *bytes,
        }
    }
}

/// The spilled bytes a store holds on disk, against its budget
/// (`taskmanager.spill-budget`): a frame is counted before it is written, and a file's frames
/// are freed when it is deleted.
#[derive(Debug)]
pub struct SpillDisk {
    /// `u64::MAX`: no limit.
    budget: u64,
    /// Where spill files are deleted: a release on the TaskManager's actor thread only hands
    /// them over.
    io: Arc<dyn BlockingIo>,
    live: AtomicU64,
    peak: AtomicU64,
    total: AtomicU64,
}

impl SpillDisk {
    pub(super) fn new(budget: Option<u64>, io: Arc<dyn BlockingIo>) -> Self {
        Self {
            budget: budget.unwrap_or(u64::MAX),
            io,
            live: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            total: AtomicU64::new(0),
        }
    }

    /// Counts `bytes` about to be written, unless that would pass the budget.
    fn take(&self, bytes: u64) -> io::Result<()> {
        let live = self.live.fetch_add(bytes, Ordering::AcqRel) + bytes;
        if live > self.budget {
            self.live.fetch_sub(bytes, Ordering::AcqRel);
            return Err(io::Error::new(
                io::ErrorKind::StorageFull,
                format!(
                    "the TaskManager's spill budget of {} bytes (`taskmanager.spill-budget`) \
                     is used up: {} bytes of result partitions are spilled",
                    self.budget,
                    live - bytes
                ),
            ));
        }
        self.peak.fetch_max(live, Ordering::AcqRel);
        self.total.fetch_add(bytes, Ordering::Relaxed);
        Ok(())
    }

    fn free(&self, bytes: u64) {
        self.live.fetch_sub(bytes, Ordering::AcqRel);
    }

    pub(super) fn io(&self) -> &Arc<dyn BlockingIo> {
        &self.io
    }

    pub(super) fn usage(&self) -> SpillUsage {
        SpillUsage {
            live: self.live.load(Ordering::Acquire),
            peak: self.peak.load(Ordering::Acquire),
            total: self.total.load(Ordering::Relaxed),
        }
    }
}

/// An append-only spill file, deleted (and its bytes freed from the [`SpillDisk`]) when dropped:
/// the bytes at once, the file on the disk's [`BlockingIo`] (unlinking and closing a large file
/// frees its blocks, which takes a while).
pub(super) struct SpillFile {
    pub(super) path: PathBuf,
    /// For writing; `None` once its producer finished (readers open the file themselves).
    file: Option<File>,
    /// Bytes written so far: the next frame's offset.
    pub(super) len: u64,
    disk: Arc<SpillDisk>,
}

impl SpillFile {
    pub(super) fn create(
        id: ResultPartitionId,
        working_dir: &Path,
        disk: Arc<SpillDisk>,
        path: PathBuf,
    ) -> Result<Self, PartitionError> {
        // Inside the process's private working directory; made 0700 if this is its first
        // spill, and the file 0600, new, never through a planted link (crate::env::working_dir).
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(working_dir)
            .map_err(|source| PartitionError::Spill {
                id,
                path: working_dir.to_path_buf(),
                source,
            })?;
        let file = crate::env::working_dir::create_private_file(&path).map_err(|source| {
            PartitionError::Spill {
                id,
                path: path.clone(),
                source,
            }
        })?;
        Ok(Self {
            path,
            file: Some(file),
            len: 0,
            disk,
        })
    }
}

impl SpillFile {
    /// Closes the file for writing: nothing more is written, and a finished partition holds no
    /// open file.
    pub(super) fn close(&mut self) {
        self.file = None;
    }
}

impl Drop for SpillFile {
    fn drop(&mut self) {
        self.disk.free(self.len);
        let (path, file) = (std::mem::take(&mut self.path), self.file.take());
        self.disk.io.execute(Box::new(move || {
            if let Err(err) = fs::remove_file(&path)
                && err.kind() != io::ErrorKind::NotFound
            {
                log::warn!("cannot delete spill file `{}`: {err}", path.display());
            }
            drop(file);
        }));
    }
}

pub(super) enum PlannedBuffer {
    Memory(Buffer),
    Spilled { offset: u64, len: usize },
}

/// What a fetch returns, decided under the lock; spilled buffers still to be read.
pub(super) struct FetchPlan {
    /// The subpartition it reads.
    pub(super) subpartition: u32,
    pub(super) spill_path: Option<PathBuf>,
    pub(super) items: Vec<PlannedBuffer>,
    /// The buffers' size.
    pub(super) bytes: usize,
    pub(super) next_buffer: u64,
    pub(super) finished: bool,
    /// Buffers stored after these.
    pub(super) backlog: u64,
    /// It took every buffer there and the partition is not finished: its listener was
    /// registered for the next one (or the end) in the same look.
    pub(super) listening: bool,
}

/// Why reading a spilled buffer back failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum ReadError {
    #[error("cannot read `{}`", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("`{}` is corrupt at offset {offset}: frame length {found}, expected {expected}", path.display())]
    Corrupt {
        path: PathBuf,
        offset: u64,
        found: u32,
        expected: usize,
    },
    #[error("spilled buffer without a spill file")]
    NoSpillFile,
}

impl FetchPlan {
    /// Nothing more to read: the subpartition ended at `next_buffer`.
    pub(super) fn end(subpartition: u32, next_buffer: u64) -> Self {
        Self {
            subpartition,
            spill_path: None,
            items: Vec::new(),
            bytes: 0,
            next_buffer,
            finished: true,
            backlog: 0,
            listening: false,
        }
    }

    /// Whether reading it touches the disk.
    pub(super) fn needs_disk(&self) -> bool {
        self.items
            .iter()
            .any(|item| matches!(item, PlannedBuffer::Spilled { .. }))
    }

    /// Takes the planned buffers, reading spilled ones from disk: one open per fetch, every
    /// spilled frame into one allocation the buffers share (a fetch is at most about a
    /// megabyte; the allocation is recycled, see [`super::read_buffers`]), one positioned read
    /// per run of frames that lie back to back in the file.
    pub(super) fn read(self) -> Result<Vec<Buffer>, ReadError> {
        // Each spilled frame's place in the file and its length, in order.
        let frames: Vec<(u64, usize)> = self
            .items
            .iter()
            .filter_map(|item| match item {
                PlannedBuffer::Spilled { offset, len } => Some((*offset, FRAME_HEADER + len)),
                PlannedBuffer::Memory(_) => None,
            })
            .collect();
        let mut read = READ_BUFFERS.take(frames.iter().map(|(_, len)| len).sum());
        if !frames.is_empty() {
            let path = self.spill_path.as_ref().ok_or(ReadError::NoSpillFile)?;
            let io_error = |source| ReadError::Io {
                path: path.clone(),
                source,
            };
            let file = File::open(path).map_err(io_error)?;
            let (mut start, mut at) = (0, 0);
            while start < frames.len() {
                // The run of frames from `start` that follow each other in the file.
                let (offset, mut run) = frames[start];
                let mut end = start + 1;
                while end < frames.len() && frames[end].0 == offset + run as u64 {
                    run += frames[end].1;
                    end += 1;
                }
                file.read_exact_at(&mut read[at..at + run], offset)
                    .map_err(io_error)?;
                (start, at) = (end, at + run);
            }
        }
        let read = READ_BUFFERS.share(read);
        let mut at = 0;
        let mut buffers = Vec::with_capacity(self.items.len());
        for item in self.items {
            match item {
                PlannedBuffer::Memory(buffer) => buffers.push(buffer),
                PlannedBuffer::Spilled { offset, len } => {
                    let field = |from: usize| {
                        let bytes: [u8; 4] = read[from..from + 4].try_into().expect("4 bytes");
                        u32::from_le_bytes(bytes)
                    };
                    let (found, records) = (field(at), field(at + 4));
                    if found as usize != len {
                        return Err(ReadError::Corrupt {
                            path: self.spill_path.clone().unwrap_or_default(),
                            offset,
                            found,
                            expected: len,
                        });
                    }
                    let payload = at + FRAME_HEADER;
                    buffers.push(Buffer::new(records, read.slice(payload..payload + len)));
                    at = payload + len;
                }
            }
        }
        Ok(buffers)
    }
}
