//! Answers on the wire: every ask's answer type travels as one variant of [`Reply`] and comes
//! back out of it through [`Answer`]. A new ask whose answer is a new type adds one line to the
//! `replies!` list below; nothing in the transport changes.

use serde::{Deserialize, Serialize};

use crate::base::ids::JobId;
use crate::job::states::JobStatus;
use crate::messages::common::Acknowledge;
use crate::messages::job_manager::{
    BlobChunk, BlobFetchError, HeartbeatResponse, IdleTaskManagersReleased, JobDetails, JobError,
    JobManagerStatus, JobResults, JobSummary, RegistrationResponse,
    ResourceManagerHeartbeatResponse,
};
use crate::messages::resource_manager::{
    RegisterResourceManagerSuccessful, ResourceManagerStatus, SetPoolSizeError,
};
use crate::messages::task_manager::{PartitionData, TaskManagerStatus, TaskSubmissionError};

/// An answer type of the protocol: it travels as one [`Reply`] variant and comes back out of it.
///
/// Every ask's `Message::Result` implements it (a test checks each message of the three wire
/// enums), so a remote proxy can answer any ask generically. Each answer type has exactly one
/// variant: two variants of the same type would be two conflicting impls, which do not compile.
pub trait Answer: Sized {
    /// The name of this type's [`Reply`] variant (as [`Reply::name`] gives it).
    const REPLY: &'static str;

    /// Wraps the answer for the wire.
    fn into_reply(self) -> Reply;

    /// Unwraps an answer that arrived, or says why it is not one of this type.
    fn from_reply(reply: Reply) -> Result<Self, ReplyError>;
}

/// Why a [`Reply`] does not hold the answer an ask waits for. Neither is retryable as is: the
/// ask failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    /// The remote side could not deliver the ask (unknown target, mailbox closed).
    #[error("the remote actor could not answer: {0}")]
    Failed(String),
    /// A reply of another type arrived: the peer answered a different ask under this
    /// correlation id, a protocol violation.
    #[error("expected a {expected} reply, got a {got} reply")]
    Unexpected {
        /// The variant the ask waits for.
        expected: &'static str,
        /// The variant that arrived.
        got: &'static str,
    },
}

/// Declares [`Reply`] with one variant per answer type, and each type's [`Answer`] impl.
macro_rules! replies {
    ( $( $(#[$meta:meta])* $variant:ident($answer:ty), )+ ) => {
        /// The answer to an ask: one variant per answer type of every ask in the three
        /// protocols, plus [`Reply::Failed`] when there is no answer to give.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        pub enum Reply {
            $( $(#[$meta])* $variant($answer), )+
            /// The remote node could not get an answer from the actor (unknown target, mailbox
            /// closed); the text says which, for the asker's log.
            Failed(String),
        }

        impl Reply {
            /// The variant's name, for logs and [`ReplyError::Unexpected`].
            pub fn name(&self) -> &'static str {
                match self {
                    $( Self::$variant(_) => stringify!($variant), )+
                    Self::Failed(_) => "Failed",
                }
            }
        }

        $(
            impl Answer for $answer {
                const REPLY: &'static str = stringify!($variant);

                fn into_reply(self) -> Reply {
                    Reply::$variant(self)
                }

                fn from_reply(reply: Reply) -> Result<Self, ReplyError> {
                    match reply {
                        Reply::$variant(answer) => Ok(answer),
                        Reply::Failed(reason) => Err(ReplyError::Failed(reason)),
                        other => Err(ReplyError::Unexpected {
                            expected: stringify!($variant),
                            got: other.name(),
                        }),
                    }
                }
            }
        )+
    };
}

replies! {
    /// For asks answered with `()`: the receiver handled the message.
    Unit(()),
    /// A receipt (`NotifyResourceStarted`, `StopCluster`).
    Acknowledge(Acknowledge),
    /// To `RegisterTaskManager`.
    RegistrationResponse(RegistrationResponse),
    /// To `RegisterResourceManager`.
    RegisterResourceManagerSuccessful(RegisterResourceManagerSuccessful),
    /// To a TaskManager's `Heartbeat`.
    HeartbeatResponse(HeartbeatResponse),
    /// To `ReleaseIdleTaskManagers`.
    IdleTaskManagersReleased(IdleTaskManagersReleased),
    /// To `ResourceManagerHeartbeat`.
    ResourceManagerHeartbeatResponse(ResourceManagerHeartbeatResponse),
    /// To `GetJobManagerStatus`.
    JobManagerStatus(JobManagerStatus),
    /// To `SubmitJob`: the new job's id.
    SubmitJob(Result<JobId, JobError>),
    /// To `CancelJob`: the job's status after cancelling.
    CancelJob(Result<JobStatus, JobError>),
    /// To `RequestJobStatus`.
    RequestJobStatus(Result<JobDetails, JobError>),
    /// To `RequestJobResults`.
    RequestJobResults(Result<JobResults, JobError>),
    /// To `ListJobs`.
    ListJobs(Vec<JobSummary>),
    /// To `FetchBlob`.
    FetchBlob(Result<BlobChunk, BlobFetchError>),
    /// To `SetWorkerPoolSize`.
    SetWorkerPoolSize(Result<Acknowledge, SetPoolSizeError>),
    /// To `GetResourceManagerStatus`.
    ResourceManagerStatus(ResourceManagerStatus),
    /// To `GetTaskManagerStatus`.
    TaskManagerStatus(TaskManagerStatus),
    /// To `SubmitTasks`: per task, in order.
    SubmitTasks(Vec<Result<(), TaskSubmissionError>>),
    /// To `PollPartitionData`.
    PartitionData(PartitionData),
}
