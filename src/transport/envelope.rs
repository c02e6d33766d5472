//! The envelope: the one value that crosses the wire after the handshake (DESIGN §4, §8).
//!
//! An envelope names the actor it is for on the receiving node (`target`), who sent it, whether
//! it is a tell, an ask or the reply to an ask (matched by `correlation`), and carries either the
//! receiving actor's protocol enum or a [`Reply`]. Every transport, the TCP one and the simulated
//! one alike, moves envelopes encoded by [`Envelope::encode`], so the simulation exercises the real
//! codec.
//!
//! This module owns the envelope's shape, its encoding through [`crate::base::codec`], and the check
//! that a decoded envelope is internally consistent (a JobManager message addressed to the
//! JobManager, a reply carrying a reply). It never dispatches, tracks correlation ids or times
//! asks out: those live above the transport boundary. It never names bincode either.

use std::fmt;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::actors::{job_manager, resource_manager};
use crate::base::codec::{self, CodecError};
use crate::base::ids::JobId;
use crate::job::states::JobStatus;
use crate::messages::ActorAddress;
use crate::messages::common::Acknowledge;
use crate::messages::job_manager::{
    HeartbeatResponse, IdleTaskManagersReleased, JobDetails, JobError, JobManagerMessage,
    JobManagerStatus, JobSummary, RegistrationResponse, ResourceManagerHeartbeatResponse,
};
use crate::messages::resource_manager::{
    RegisterResourceManagerSuccessful, ResourceManagerMessage, ResourceManagerStatus,
    SetPoolSizeError,
};
use crate::messages::task_manager::{
    PartitionData, TaskManagerMessage, TaskManagerStatus, TaskSubmissionError,
};

/// The prefix of every TaskManager's actor name (`taskmanager/<resource id>`, see
/// [`TaskManager::name_of`](crate::actors::task_manager::TaskManager::name_of)): a node may host
/// many TaskManagers, so the target names which one.
pub const TASK_MANAGER_PREFIX: &str = "taskmanager/";

/// One message between two nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// The actor's name on the receiving node: `jobmanager`, `resourcemanager` or
    /// `taskmanager/<resource id>`. For a reply, the name of the actor that asked.
    pub target: String,
    /// Who sent it, when the receiver may need to answer or fence by address; `None` for a
    /// sender that is not an addressable actor (a client, a one-off ask).
    pub sender: Option<ActorAddress>,
    /// Pairs a reply with its ask; chosen by the asking node, unique among its open asks. Tells
    /// carry 0 by convention, and the receiver ignores it.
    pub correlation: u64,
    /// Tell, ask or reply.
    pub kind: EnvelopeKind,
    /// The message or the answer.
    pub payload: Payload,
}

/// What the receiver owes the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EnvelopeKind {
    /// Fire and forget: no reply is sent, whatever the message's answer type.
    Tell,
    /// The sender waits for a [`EnvelopeKind::Reply`] with the same correlation id.
    Ask,
    /// The answer to an ask.
    Reply,
}

impl fmt::Display for EnvelopeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Tell => "tell",
            Self::Ask => "ask",
            Self::Reply => "reply",
        })
    }
}

/// What an envelope carries: the receiving actor's wire enum, or a reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Payload {
    /// A message for the JobManager.
    JobManager(JobManagerMessage),
    /// A message for the resource manager.
    ResourceManager(ResourceManagerMessage),
    /// A message for a TaskManager.
    TaskManager(TaskManagerMessage),
    /// The answer to an ask.
    Reply(Reply),
}

impl Payload {
    /// Which kind of payload this is, for validation and for error messages that must not
    /// print a whole (possibly huge) message.
    pub fn kind(&self) -> PayloadKind {
        match self {
            Self::JobManager(_) => PayloadKind::JobManager,
            Self::ResourceManager(_) => PayloadKind::ResourceManager,
            Self::TaskManager(_) => PayloadKind::TaskManager,
            Self::Reply(_) => PayloadKind::Reply,
        }
    }
}

impl From<JobManagerMessage> for Payload {
    fn from(message: JobManagerMessage) -> Self {
        Self::JobManager(message)
    }
}

impl From<ResourceManagerMessage> for Payload {
    fn from(message: ResourceManagerMessage) -> Self {
        Self::ResourceManager(message)
    }
}

impl From<TaskManagerMessage> for Payload {
    fn from(message: TaskManagerMessage) -> Self {
        Self::TaskManager(message)
    }
}

impl From<Reply> for Payload {
    fn from(reply: Reply) -> Self {
        Self::Reply(reply)
    }
}

/// The variant of a [`Payload`], without its contents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PayloadKind {
    /// A [`JobManagerMessage`].
    JobManager,
    /// A [`ResourceManagerMessage`].
    ResourceManager,
    /// A [`TaskManagerMessage`].
    TaskManager,
    /// A [`Reply`].
    Reply,
}

impl PayloadKind {
    /// The protocol an actor named `target` speaks, or `None` for a name no actor kind has.
    pub fn of_target(target: &str) -> Option<Self> {
        if target == job_manager::NAME {
            Some(Self::JobManager)
        } else if target == resource_manager::NAME {
            Some(Self::ResourceManager)
        } else if target
            .strip_prefix(TASK_MANAGER_PREFIX)
            .is_some_and(|id| !id.is_empty())
        {
            Some(Self::TaskManager)
        } else {
            None
        }
    }
}

impl fmt::Display for PayloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::JobManager => "JobManager message",
            Self::ResourceManager => "ResourceManager message",
            Self::TaskManager => "TaskManager message",
            Self::Reply => "reply",
        })
    }
}

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
    /// To `ListJobs`.
    ListJobs(Vec<JobSummary>),
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

/// Why bytes are not a valid envelope. Never retryable: the peer sent something this node cannot
/// trust, so the connection that carried it is closed with this error as the logged reason.
#[derive(Debug, thiserror::Error)]
pub enum EnvelopeError {
    /// The bytes do not decode (garbage, truncated, trailing bytes, a length over the limit).
    #[error("cannot decode envelope")]
    Codec(#[from] CodecError),
    /// The envelope decodes but its parts disagree: a message addressed to an actor that does
    /// not speak its protocol, a reply without a [`Reply`], or a [`Reply`] sent as a tell or ask.
    #[error("an envelope ({kind}) to `{}` cannot carry a {payload}", clip(.target))]
    Mismatch {
        /// The target named.
        target: String,
        /// The envelope's kind.
        kind: EnvelopeKind,
        /// What it carried.
        payload: PayloadKind,
    },
}

/// A target for an error message: a peer may send a megabyte of name, the log needs a line.
fn clip(target: &str) -> &str {
    const MAX: usize = 80;
    if target.len() <= MAX {
        return target;
    }
    let mut end = MAX;
    while !target.is_char_boundary(end) {
        end -= 1;
    }
    &target[..end]
}

impl Envelope {
    /// Encodes the envelope for one frame. It does not [`validate`](Self::validate): a sender
    /// builds envelopes from typed values, and the receiver checks anyway.
    pub fn encode(&self) -> Result<Bytes, CodecError> {
        codec::encode(self).map(Bytes::from)
    }

    /// Appends the envelope's encoding to `out` (the transport writes it behind a frame's
    /// prefix this way, without a copy); fails as [`Self::encode`] does.
    pub fn encode_into(&self, out: &mut Vec<u8>) -> Result<(), CodecError> {
        let size = codec::encoded_size(self)?;
        if size > codec::MAX_MESSAGE_SIZE {
            return Err(CodecError::TooLarge { size });
        }
        out.reserve(size);
        codec::encode_into(self, out).map(drop)
    }

    /// Decodes one frame's payload and checks the envelope is consistent (see
    /// [`validate`](Self::validate)), so the dispatcher above never sees a mismatched one.
    pub fn decode(bytes: &[u8]) -> Result<Envelope, EnvelopeError> {
        let envelope: Envelope = codec::decode(bytes)?;
        envelope.validate()?;
        Ok(envelope)
    }

    /// Checks the payload fits the kind and target: a tell or an ask carries the protocol enum
    /// of the actor kind its target names, a reply carries a [`Reply`].
    pub fn validate(&self) -> Result<(), EnvelopeError> {
        let payload = self.payload.kind();
        let consistent = match self.kind {
            EnvelopeKind::Tell | EnvelopeKind::Ask => {
                PayloadKind::of_target(&self.target) == Some(payload)
            }
            EnvelopeKind::Reply => payload == PayloadKind::Reply,
        };
        if consistent {
            Ok(())
        } else {
            Err(EnvelopeError::Mismatch {
                target: self.target.clone(),
                kind: self.kind,
                payload,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use futures_util::StreamExt;
    use tokio_util::codec::FramedRead;

    use super::*;
    use crate::actors::task_manager::TaskManager;
    use crate::base::codec::tests::{
        address, job_details, job_manager_samples, job_manager_status, job_summary, resource,
        resource_manager_samples, session, task_manager_samples,
    };
    use crate::base::ids::*;
    use crate::base::rng::NodeRng;
    use crate::messages::common::*;
    use crate::messages::job_manager::*;
    use crate::messages::resource_manager::*;
    use crate::messages::task_manager::*;
    use crate::operators::{Record, Value};
    use crate::transport::frame::FrameCodec;

    // ---- samples: the messages' come from src/codec/tests.rs ----

    fn reply_samples() -> Vec<Reply> {
        vec![
            ().into_reply(),
            Acknowledge.into_reply(),
            RegistrationResponse::AcknowledgeRegistration(AcknowledgeRegistration {
                instance_id: InstanceId::from_u128(1),
                leader_session_id: session(),
            })
            .into_reply(),
            RegistrationResponse::RefuseRegistration(RefuseRegistration {
                reason: RefusalReason::WrongCluster {
                    expected: ClusterId::new("a"),
                    offered: ClusterId::new("b"),
                },
            })
            .into_reply(),
            RegisterResourceManagerSuccessful {
                leader_session_id: session(),
                job_manager: address("jobmanager"),
                registered: vec![resource(1)],
                required_workers: 2,
            }
            .into_reply(),
            HeartbeatResponse::UnknownTaskManager.into_reply(),
            IdleTaskManagersReleased {
                leader_session_id: session(),
                released: vec![resource(1)],
            }
            .into_reply(),
            ResourceManagerHeartbeatResponse::Acknowledged {
                leader_session_id: session(),
                registered: vec![resource(2)],
                required_workers: 2,
            }
            .into_reply(),
            job_manager_status().into_reply(),
            Result::<JobId, JobError>::Ok(JobId::from_u128(1)).into_reply(),
            Result::<JobId, JobError>::Err(JobError::Rejected("cycle".into())).into_reply(),
            Result::<JobStatus, JobError>::Err(JobError::AlreadyTerminal {
                job_id: JobId::from_u128(1),
                status: JobStatus::Finished,
            })
            .into_reply(),
            Result::<JobDetails, JobError>::Ok(job_details()).into_reply(),
            vec![job_summary()].into_reply(),
            Result::<Acknowledge, SetPoolSizeError>::Err(SetPoolSizeError::AboveMaximum {
                requested: 9,
                max: 8,
            })
            .into_reply(),
            ResourceManagerStatus {
                designated_pool_size: 4,
                demand: 0,
                target_pool_size: 4,
                started: vec![resource(1)],
                pending_requests: 2,
                pending_registration: 1,
                releasing: 0,
                start_failures: 3,
                consecutive_start_failures: 1,
                connected_to_job_manager: true,
                driver: "in_process".into(),
            }
            .into_reply(),
            TaskManagerStatus {
                resource_id: resource(1),
                registration: RegistrationPhase::Registering { attempt: 3 },
                registration_attempts: 4,
                slots_total: 2,
                slots_free: 2,
                leader_session_id: None,
                slots: vec![None, None],
                running: Vec::new(),
                job_partitions: Vec::new(),
            }
            .into_reply(),
            vec![
                Ok(()),
                Err(TaskSubmissionError::Duplicate(
                    ExecutionAttemptId::from_u128(8),
                )),
            ]
            .into_reply(),
            PartitionData {
                seq: 4,
                channels: vec![(
                    (7 << 32) | 3,
                    ChannelResponse::Data {
                        batches: vec![
                            vec![Record {
                                key: "word".into(),
                                value: Value::Int(3),
                            }]
                            .into(),
                        ],
                        next_batch: 1,
                        finished: true,
                        backlog: 0,
                    },
                )],
                notices: Vec::new(),
                forgotten: false,
            }
            .into_reply(),
            Reply::Failed("no actor taskmanager/tm-9 on this node".into()),
        ]
    }

    // ---- coverage: a new message or answer type does not compile until it is handled here ----

    /// The reply variant an ask of `M` is answered with; does not compile unless `M`'s answer
    /// type is an [`Answer`].
    fn answer_of<M>(_: &M) -> &'static str
    where
        M: actix::Message,
        M::Result: Answer,
    {
        <M::Result as Answer>::REPLY
    }

    fn job_manager_answer(message: &JobManagerMessage) -> &'static str {
        use JobManagerMessage as M;
        match message {
            M::RegisterTaskManager(m) => answer_of(m),
            M::RegisterResourceManager(m) => answer_of(m),
            M::ResourceRemoved(m) => answer_of(m),
            M::Heartbeat(m) => answer_of(m),
            M::ReleaseIdleTaskManagers(m) => answer_of(m),
            M::ResourceManagerHeartbeat(m) => answer_of(m),
            M::SubmitJob(m) => answer_of(m),
            M::CancelJob(m) => answer_of(m),
            M::RequestJobStatus(m) => answer_of(m),
            M::ListJobs(m) => answer_of(m),
            M::UpdateTaskExecutionStates(m) => answer_of(m),
            M::DisconnectTaskManager(m) => answer_of(m),
            M::GetJobManagerStatus(m) => answer_of(m),
        }
    }

    fn resource_manager_answer(message: &ResourceManagerMessage) -> &'static str {
        use ResourceManagerMessage as M;
        match message {
            M::CheckAndAllocateContainers(m) => answer_of(m),
            M::SetWorkerPoolSize(m) => answer_of(m),
            M::DeclareResourceRequirements(m) => answer_of(m),
            M::RemoveResource(m) => answer_of(m),
            M::NotifyResourceStarted(m) => answer_of(m),
            M::NewLeaderAvailable(m) => answer_of(m),
            M::TriggerRegistrationAtJobManager(m) => answer_of(m),
            M::RegisterResourceManagerSuccessful(m) => answer_of(m),
            M::WorkerStarted(m) => answer_of(m),
            M::WorkerFailed(m) => answer_of(m),
            M::WorkerTerminated(m) => answer_of(m),
            M::StopCluster(m) => answer_of(m),
            M::GetResourceManagerStatus(m) => answer_of(m),
        }
    }

    fn task_manager_answer(message: &TaskManagerMessage) -> &'static str {
        use TaskManagerMessage as M;
        match message {
            M::NewLeaderAvailable(m) => answer_of(m),
            M::Disconnect(m) => answer_of(m),
            M::GetTaskManagerStatus(m) => answer_of(m),
            M::SubmitTasks(m) => answer_of(m),
            M::CancelTasks(m) => answer_of(m),
            M::ReleaseJobPartitions(m) => answer_of(m),
            M::PartitionRequests(m) => answer_of(m),
            M::PollPartitionData(m) => answer_of(m),
        }
    }

    /// Every variant's name; exhaustive, so a new variant needs a line here (and a sample).
    fn reply_variant(reply: &Reply) -> &'static str {
        match reply {
            Reply::Unit(_) => "Unit",
            Reply::Acknowledge(_) => "Acknowledge",
            Reply::RegistrationResponse(_) => "RegistrationResponse",
            Reply::RegisterResourceManagerSuccessful(_) => "RegisterResourceManagerSuccessful",
            Reply::HeartbeatResponse(_) => "HeartbeatResponse",
            Reply::IdleTaskManagersReleased(_) => "IdleTaskManagersReleased",
            Reply::ResourceManagerHeartbeatResponse(_) => "ResourceManagerHeartbeatResponse",
            Reply::JobManagerStatus(_) => "JobManagerStatus",
            Reply::SubmitJob(_) => "SubmitJob",
            Reply::CancelJob(_) => "CancelJob",
            Reply::RequestJobStatus(_) => "RequestJobStatus",
            Reply::ListJobs(_) => "ListJobs",
            Reply::SetWorkerPoolSize(_) => "SetWorkerPoolSize",
            Reply::ResourceManagerStatus(_) => "ResourceManagerStatus",
            Reply::TaskManagerStatus(_) => "TaskManagerStatus",
            Reply::SubmitTasks(_) => "SubmitTasks",
            Reply::PartitionData(_) => "PartitionData",
            Reply::Failed(_) => "Failed",
        }
    }

    const REPLY_VARIANTS: usize = 18;

    #[test]
    fn every_reply_variant_has_a_sample_and_answers_some_ask() {
        let samples = reply_samples();
        let sampled: BTreeSet<&str> = samples.iter().map(reply_variant).collect();
        assert_eq!(
            sampled.len(),
            REPLY_VARIANTS,
            "a reply variant has no sample"
        );
        for reply in &samples {
            assert_eq!(reply.name(), reply_variant(reply));
        }

        // Every ask's answer type has a variant (checked at compile time by `answer_of`), and
        // every variant but `Failed` is some ask's answer: none is dead.
        let mut answered: BTreeSet<&str> = BTreeSet::from(["Failed"]);
        answered.extend(job_manager_samples().iter().map(job_manager_answer));
        answered.extend(
            resource_manager_samples()
                .iter()
                .map(resource_manager_answer),
        );
        answered.extend(task_manager_samples().iter().map(task_manager_answer));
        assert_eq!(answered, sampled);
    }

    #[test]
    fn every_message_sample_is_there() {
        // The codec tests check these counts against their own exhaustive matches; here they
        // keep the envelope samples from silently dropping a message.
        assert_eq!(job_manager_samples().len(), 13);
        assert_eq!(resource_manager_samples().len(), 13);
        assert_eq!(task_manager_samples().len(), 8);
    }

    // ---- round trips ----

    fn tell(target: &str, payload: impl Into<Payload>) -> Envelope {
        Envelope {
            target: target.into(),
            sender: Some(address("jobmanager")),
            correlation: 0,
            kind: EnvelopeKind::Tell,
            payload: payload.into(),
        }
    }

    fn ask(target: &str, correlation: u64, payload: impl Into<Payload>) -> Envelope {
        Envelope {
            kind: EnvelopeKind::Ask,
            correlation,
            sender: None,
            ..tell(target, payload)
        }
    }

    fn reply(correlation: u64, reply: Reply) -> Envelope {
        Envelope {
            kind: EnvelopeKind::Reply,
            correlation,
            ..tell("resourcemanager", reply)
        }
    }

    /// One valid envelope of every message (as a tell and as an ask) and every reply sample.
    fn envelope_samples() -> Vec<Envelope> {
        let mut envelopes = Vec::new();
        let mut correlation = 1;
        let mut both = |target: &str, payload: Payload| {
            envelopes.push(tell(target, payload.clone()));
            envelopes.push(ask(target, correlation, payload));
            correlation += 1;
        };
        for message in job_manager_samples() {
            both(job_manager::NAME, message.into());
        }
        for message in resource_manager_samples() {
            both(resource_manager::NAME, message.into());
        }
        for message in task_manager_samples() {
            both(&TaskManager::name_of(&resource(1)), message.into());
        }
        for (n, sample) in reply_samples().into_iter().enumerate() {
            envelopes.push(reply(u64::MAX - n as u64, sample));
        }
        envelopes
    }

    #[test]
    fn every_payload_kind_and_reply_round_trips() {
        let envelopes = envelope_samples();
        assert_eq!(envelopes.len(), 2 * (13 + 13 + 8) + reply_samples().len());
        for envelope in &envelopes {
            let bytes = envelope.encode().expect("encodes");
            assert_eq!(&Envelope::decode(&bytes).expect("decodes"), envelope);
        }
    }

    #[test]
    fn answers_come_back_out_of_their_reply() {
        let status = Result::<JobStatus, JobError>::Ok(JobStatus::Canceled);
        let reply = status.clone().into_reply();
        assert_eq!(reply.name(), "CancelJob");
        assert_eq!(Result::<JobStatus, JobError>::from_reply(reply), Ok(status));
        assert_eq!(<()>::from_reply(Reply::Unit(())), Ok(()));
        assert_eq!(
            HeartbeatResponse::from_reply(Acknowledge.into_reply()),
            Err(ReplyError::Unexpected {
                expected: "HeartbeatResponse",
                got: "Acknowledge",
            })
        );
        assert_eq!(
            Acknowledge::from_reply(Reply::Failed("mailbox closed".into())),
            Err(ReplyError::Failed("mailbox closed".into()))
        );
    }

    // ---- validation ----

    fn mismatch(envelope: &Envelope) -> (String, EnvelopeKind, PayloadKind) {
        let bytes = envelope.encode().expect("encodes anyway");
        match Envelope::decode(&bytes) {
            Err(EnvelopeError::Mismatch {
                target,
                kind,
                payload,
            }) => (target, kind, payload),
            other => panic!("expected a mismatch, got {other:?}"),
        }
    }

    #[test]
    fn a_job_manager_message_to_a_task_manager_is_a_mismatch() {
        let envelope = tell("taskmanager/tm-1", JobManagerMessage::from(ListJobs));
        assert_eq!(
            mismatch(&envelope),
            (
                "taskmanager/tm-1".into(),
                EnvelopeKind::Tell,
                PayloadKind::JobManager
            )
        );
        let error = Envelope::decode(&envelope.encode().expect("encodes")).expect_err("mismatch");
        assert_eq!(
            error.to_string(),
            "an envelope (tell) to `taskmanager/tm-1` cannot carry a JobManager message"
        );
    }

    #[test]
    fn a_reply_carrying_a_protocol_message_is_a_mismatch() {
        let envelope = Envelope {
            kind: EnvelopeKind::Reply,
            ..tell(job_manager::NAME, JobManagerMessage::from(ListJobs))
        };
        assert_eq!(
            mismatch(&envelope),
            (
                job_manager::NAME.into(),
                EnvelopeKind::Reply,
                PayloadKind::JobManager
            )
        );
    }

    #[test]
    fn an_ask_carrying_a_reply_is_a_mismatch() {
        let envelope = ask(resource_manager::NAME, 3, Acknowledge.into_reply());
        assert_eq!(
            mismatch(&envelope),
            (
                resource_manager::NAME.into(),
                EnvelopeKind::Ask,
                PayloadKind::Reply
            )
        );
    }

    #[test]
    fn targets_name_their_protocol() {
        assert_eq!(
            PayloadKind::of_target("jobmanager"),
            Some(PayloadKind::JobManager)
        );
        assert_eq!(
            PayloadKind::of_target("resourcemanager"),
            Some(PayloadKind::ResourceManager)
        );
        assert_eq!(
            PayloadKind::of_target(&TaskManager::name_of(&resource(3))),
            Some(PayloadKind::TaskManager)
        );
        for unknown in [
            "",
            "taskmanager/",
            "taskmanager",
            "JobManager",
            "jobmanager/x",
        ] {
            assert_eq!(PayloadKind::of_target(unknown), None, "{unknown:?}");
        }
        let envelope = tell(
            "taskmanager/",
            TaskManagerMessage::from(GetTaskManagerStatus),
        );
        assert_eq!(mismatch(&envelope).2, PayloadKind::TaskManager);
    }

    #[test]
    fn a_huge_target_is_clipped_in_the_error_message() {
        let target = format!("{}é", "x".repeat(79));
        let envelope = tell(&target, JobManagerMessage::from(ListJobs));
        let error = envelope.validate().expect_err("mismatch");
        let text = error.to_string();
        assert!(text.contains(&format!("`{}`", "x".repeat(79))), "{text}");
    }

    // ---- arbitrary and mutated input ----

    fn below(rng: &mut NodeRng, n: usize) -> usize {
        (rng.next_u64() % n as u64) as usize
    }

    /// Decodes `bytes`; a success must be a valid envelope that round-trips.
    fn decode_checked(bytes: &[u8]) -> bool {
        match Envelope::decode(bytes) {
            Ok(envelope) => {
                assert!(envelope.validate().is_ok());
                let again = envelope.encode().expect("a decoded envelope encodes");
                assert_eq!(Envelope::decode(&again).expect("and decodes"), envelope);
                true
            }
            Err(_) => false,
        }
    }

    #[test]
    fn arbitrary_and_mutated_bytes_are_errors_never_panics() {
        let mut rng = NodeRng::seed_from_u64(0x0e7e_109e);
        let valid: Vec<Vec<u8>> = envelope_samples()
            .iter()
            .map(|envelope| envelope.encode().expect("encodes").to_vec())
            .collect();
        let mut decoded = 0;
        for iteration in 0..20_000 {
            let bytes: Vec<u8> = if iteration % 4 == 0 {
                // Random lengths and contents.
                let len = below(&mut rng, 200);
                (0..len).map(|_| rng.next_u64() as u8).collect()
            } else {
                let mut bytes = valid[below(&mut rng, valid.len())].clone();
                match below(&mut rng, 4) {
                    0 => {
                        for _ in 0..=below(&mut rng, 4) {
                            let at = below(&mut rng, bytes.len());
                            bytes[at] ^= 1 << below(&mut rng, 8);
                        }
                    }
                    1 => bytes.truncate(below(&mut rng, bytes.len())),
                    2 => {
                        for _ in 0..=below(&mut rng, 8) {
                            bytes.push(rng.next_u64() as u8);
                        }
                    }
                    _ => {
                        // A byte set to a varint marker or a large value: length claims.
                        let at = below(&mut rng, bytes.len());
                        bytes[at] = [0xfb, 0xfc, 0xfd, 0xfe, 0xff][below(&mut rng, 5)];
                    }
                }
                bytes
            };
            decoded += usize::from(decode_checked(&bytes));

            // The same bytes as a frame, and the raw bytes as a stream, through the decoder.
            let mut stream = Vec::with_capacity(bytes.len() + 4);
            if let Ok(length) = u32::try_from(bytes.len()) {
                stream.extend_from_slice(&length.to_be_bytes());
            }
            stream.extend_from_slice(&bytes);
            let chunk = 1 + below(&mut rng, 64);
            for frame in crate::transport::frame::tests::decode_arbitrary(&stream, 1024, chunk) {
                decode_checked(&frame);
            }
            crate::transport::frame::tests::decode_arbitrary(&bytes, 256, chunk);
        }
        // Most mutations break the envelope; some (a flipped bit in a number) do not.
        assert!(
            decoded > 0 && decoded < 10_000,
            "{decoded} mutations decoded"
        );
    }

    // ---- over a real pipe ----

    /// Writes frames as the transport's write loop will: encoded into one buffer and written in
    /// batches. (`futures_util` is built without its `sink` feature, so `SinkExt` on a `Framed`
    /// is not available; the decoder side goes through `FramedRead` as the read loop will.)
    async fn write_frames(
        pipe: &mut tokio::io::DuplexStream,
        mut codec: FrameCodec,
        frames: impl IntoIterator<Item = Bytes>,
    ) {
        use tokio::io::AsyncWriteExt;
        use tokio_util::codec::Encoder;

        let mut batch = bytes::BytesMut::new();
        for frame in frames {
            codec.encode(frame, &mut batch).expect("within the limit");
            if batch.len() >= 8 * 1024 {
                pipe.write_all_buf(&mut batch).await.expect("writes");
            }
        }
        pipe.write_all_buf(&mut batch).await.expect("writes");
        pipe.shutdown().await.expect("shuts down");
    }

    #[tokio::test]
    async fn a_thousand_envelopes_cross_a_duplex_pipe_intact_and_in_order() {
        let (mut near, far) = tokio::io::duplex(4096);
        let mut receiver = FramedRead::new(far, FrameCodec::default());
        let samples = envelope_samples();
        let sent: Vec<Envelope> = (0..1000u64)
            .map(|n| {
                let mut envelope = samples[n as usize % samples.len()].clone();
                envelope.correlation = n;
                envelope
            })
            .collect();

        let send = write_frames(
            &mut near,
            FrameCodec::default(),
            sent.iter()
                .map(|envelope| envelope.encode().expect("encodes")),
        );
        let receive = async {
            let mut received = Vec::new();
            while let Some(frame) = receiver.next().await {
                received.push(Envelope::decode(&frame.expect("a frame")).expect("an envelope"));
            }
            received
        };
        let ((), received) = tokio::join!(send, receive);
        assert_eq!(received.len(), sent.len());
        assert!(received == sent, "every envelope intact and in order");
    }

    #[tokio::test]
    async fn an_oversized_frame_ends_the_stream_with_an_error() {
        let (mut near, far) = tokio::io::duplex(64);
        let mut receiver = FramedRead::new(far, FrameCodec::new(10));
        write_frames(
            &mut near,
            FrameCodec::new(100),
            [Bytes::from_static(&[1u8; 50])],
        )
        .await;
        let error = receiver
            .next()
            .await
            .expect("an item")
            .expect_err("over the receiver's limit");
        assert!(matches!(
            error,
            crate::transport::frame::FrameError::TooLarge {
                length: 50,
                max: 10
            }
        ));
        assert!(error.closes_connection());
        assert!(receiver.next().await.is_none(), "nothing after the error");
    }

    #[tokio::test]
    async fn a_pipe_closed_mid_frame_is_truncation() {
        use tokio::io::AsyncWriteExt;

        let (mut near, far) = tokio::io::duplex(64);
        let mut receiver = FramedRead::new(far, FrameCodec::default());
        near.write_all(&[0, 0, 0, 9, 1, 2]).await.expect("writes");
        near.shutdown().await.expect("shuts down");
        let error = receiver
            .next()
            .await
            .expect("an item")
            .expect_err("truncated");
        assert!(matches!(
            error,
            crate::transport::frame::FrameError::Truncated { buffered: 6 }
        ));
    }
}
