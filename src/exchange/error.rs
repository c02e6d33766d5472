//! Why a task's data exchange failed: one enum for the exchange, so the task runtime sees the
//! cause with its chain instead of a string, and can tell a cancellation or a missing input
//! partition (which reruns the producer) from a failure.

use super::buffer::BufferError;
use super::partition::PartitionError;
use crate::base::codec::CodecError;
use crate::messages::ActorAddress;
use crate::messages::common::ResultPartitionId;
use crate::operators::OperatorError;

/// See the module docs. None is retryable within the task; the task's restart strategy decides.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// The task was cancelled (or its producer was, so it is being cancelled too); not a
    /// failure.
    #[error("cancelled")]
    Cancelled,
    /// No data connection to the TaskManager holding an input could be made.
    #[error(
        "input unavailable: cannot reach TaskManager {address} holding {partition}: no data connection to it"
    )]
    Unreachable {
        /// The TaskManager.
        address: ActorAddress,
        /// The partition it holds.
        partition: ResultPartitionId,
    },
    /// An input's producer failed; the reason is the producer's, as its TaskManager reported it.
    #[error("input unavailable: {partition} on TaskManager {address} failed: {reason}")]
    ProducerFailed {
        /// The producer's partition.
        partition: ResultPartitionId,
        /// Its TaskManager.
        address: ActorAddress,
        /// Why, as the producer's side said.
        reason: String,
    },
    /// An input partition does not exist (any more) where its producer ran: released, lost
    /// with its TaskManager, or its TaskManager is gone. The JobManager reruns its producer.
    #[error("input unavailable: {message}")]
    PartitionNotFound {
        /// The missing partition.
        partition: ResultPartitionId,
        /// Where it was looked for and what was found.
        message: String,
    },
    /// A record could not be serialized into a buffer (over the codec's limit, or a value serde
    /// refuses).
    #[error("cannot serialize a record")]
    Serialize(#[source] CodecError),
    /// A record is larger than any buffer the exchange carries between TaskManagers
    /// ([`super::MAX_RECORD_BYTES`]). Every attempt would write it again: the job fails.
    #[error(
        "a record of {bytes} bytes is larger than the largest the exchange carries ({max} bytes); \
         split it into smaller records"
    )]
    RecordTooLarge {
        /// The record's encoded size.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// A buffer that arrived cannot be read back into records.
    #[error("an input buffer is garbled")]
    Garbled(#[from] BufferError),
    /// This task's own result partition refused a buffer or its end (it failed or was released).
    #[error("cannot write result partition")]
    Partition(#[from] PartitionError),
}

/// A task's exchange error as its operator returns it: cancellations and missing partitions
/// keep their meaning (the runtime treats them apart), everything else keeps its chain.
impl From<ExchangeError> for OperatorError {
    fn from(error: ExchangeError) -> Self {
        match error {
            ExchangeError::Cancelled => Self::Cancelled,
            ExchangeError::PartitionNotFound { partition, message } => {
                Self::PartitionNotFound { partition, message }
            }
            other => Self::Exchange(Box::new(other)),
        }
    }
}
