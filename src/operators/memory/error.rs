//! The one error type of the managed-memory operators.
//!
//! Every failure that involves a file names it: an operator's error reaches the task's failure
//! report, and "cannot write spill file /…/000042-sort-run" tells the operator of the cluster
//! which disk filled up, where "No space left on device" alone does not.

use std::io;
use std::path::PathBuf;

use crate::operators::memory::codec::CodecError;

/// Why a spilling operator failed. None is retryable inside the operator: the task fails and
/// Flint's restart strategy decides what happens next. When the error is returned, the operator
/// has already deleted its spill files or deletes them when it is dropped.
#[derive(Debug, thiserror::Error)]
pub enum SpillError {
    /// The private spill directory cannot be created in the task's working directory.
    #[error("cannot create a spill directory in {parent}")]
    CreateDir {
        /// The task's working directory.
        parent: PathBuf,
        /// Why the last attempt failed.
        #[source]
        source: io::Error,
    },
    /// A spill file cannot be created, written, flushed, opened or read.
    #[error("cannot {action} spill file {path}")]
    Io {
        /// What was being done: "create", "write", "flush", "open" or "read".
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A record cannot be encoded into a spill file (its `Serialize` failed or it is over
    /// [`MAX_RECORD_SIZE`](crate::operators::memory::MAX_RECORD_SIZE)).
    #[error("cannot encode a record into spill file {path}")]
    Encode {
        /// The file being written.
        path: PathBuf,
        /// Why.
        #[source]
        source: CodecError,
    },
    /// A record's size cannot be measured for the memory budget (its `Serialize` failed). Raised
    /// when the record arrives, before any file is involved.
    #[error("cannot measure a record for the memory budget")]
    Measure(#[source] CodecError),
    /// A spill file does not hold what was written to it: a record does not decode.
    #[error("cannot decode the record at byte {offset} of spill file {path}")]
    Decode {
        /// The file.
        path: PathBuf,
        /// Where the record's length prefix starts.
        offset: u64,
        /// Why.
        #[source]
        source: CodecError,
    },
    /// A spill file is truncated, has a length prefix over the limit, or holds a different
    /// number of records than were written to it.
    #[error("corrupt spill file {path} at byte {offset}: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where the problem was found.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
}
