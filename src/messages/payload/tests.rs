use std::collections::BTreeSet;

use futures_util::StreamExt;
use tokio_util::codec::FramedRead;

use bytes::Bytes;

use super::*;
use crate::actors::task_manager::TaskManager;
use crate::base::address::{JOB_MANAGER, RESOURCE_MANAGER};
use crate::base::ids::*;
use crate::base::rng::NodeRng;
use crate::job::states::JobStatus;
use crate::messages::common::*;
use crate::messages::job_manager::*;
use crate::messages::reply::*;
use crate::messages::resource_manager::*;
use crate::messages::task_manager::*;
use crate::messages::tests::{
    address, job_details, job_manager_samples, job_manager_status, job_summary, resource,
    resource_manager_samples, session, task_manager_samples,
};
use crate::operators::{Record, Value};
use crate::transport::envelope::{EnvelopeError, EnvelopeKind};
use crate::transport::frame::FrameCodec;

// ---- samples: the messages' come from src/messages/tests.rs ----

fn reply_samples() -> Vec<Reply> {
    vec![
        ().into_reply(),
        Ok::<_, BlobFetchError>(BlobChunk {
            size: 3,
            bytes: crate::messages::buffer::Buffer::new(0, bytes::Bytes::from_static(b"abc")),
        })
        .into_reply(),
        Err::<BlobChunk, _>(BlobFetchError::NotFound(
            crate::base::blob_key::BlobKey::of(b"x"),
        ))
        .into_reply(),
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
        Result::<JobResults, JobError>::Ok(JobResults {
            status: Some(JobStatus::Finished),
            vertices: [(
                "collect".to_owned(),
                vec![Some(Bytes::from_static(b"abc")), None],
            )]
            .into(),
        })
        .into_reply(),
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
            driver_workers: Default::default(),
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
            spill: Default::default(),
            network: Default::default(),
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
                    buffers: vec![
                        vec![Record {
                            key: "word".into(),
                            value: Value::Int(3),
                        }]
                        .into(),
                    ],
                    next_buffer: 1,
                    finished: true,
                    backlog: 0,
                    eager: 0,
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
        M::RequestJobResults(m) => answer_of(m),
        M::ListJobs(m) => answer_of(m),
        M::UpdateTaskExecutionStates(m) => answer_of(m),
        M::DisconnectTaskManager(m) => answer_of(m),
        M::GetJobManagerStatus(m) => answer_of(m),
        M::FetchBlob(m) => answer_of(m),
    }
}

fn resource_manager_answer(message: &ResourceManagerMessage) -> &'static str {
    use ResourceManagerMessage as M;
    match message {
        M::CheckAndAllocateContainers(m) => answer_of(m),
        M::SetWorkerPoolSize(m) => answer_of(m),
        M::DeclareResourceRequirements(m) => answer_of(m),
        M::ReleaseResource(m) => answer_of(m),
        M::NotifyResourceStarted(m) => answer_of(m),
        M::NewLeaderAvailable(m) => answer_of(m),
        M::TriggerRegistrationAtJobManager(m) => answer_of(m),
        M::RegisterResourceManagerSuccessful(m) => answer_of(m),
        M::WorkerStarted(m) => answer_of(m),
        M::WorkerFailed(m) => answer_of(m),
        M::WorkerTerminated(m) => answer_of(m),
        M::WorkersRecovered(m) => answer_of(m),
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
        M::ReleasePartitions(m) => answer_of(m),
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
        Reply::RequestJobResults(_) => "RequestJobResults",
        Reply::ListJobs(_) => "ListJobs",
        Reply::FetchBlob(_) => "FetchBlob",
        Reply::SetWorkerPoolSize(_) => "SetWorkerPoolSize",
        Reply::ResourceManagerStatus(_) => "ResourceManagerStatus",
        Reply::TaskManagerStatus(_) => "TaskManagerStatus",
        Reply::SubmitTasks(_) => "SubmitTasks",
        Reply::PartitionData(_) => "PartitionData",
        Reply::Failed(_) => "Failed",
    }
}

const REPLY_VARIANTS: usize = 20;

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
    assert_eq!(job_manager_samples().len(), 15);
    assert_eq!(resource_manager_samples().len(), 14);
    assert_eq!(task_manager_samples().len(), 9);
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
        both(JOB_MANAGER, message.into());
    }
    for message in resource_manager_samples() {
        both(RESOURCE_MANAGER, message.into());
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
    assert_eq!(envelopes.len(), 2 * (15 + 14 + 9) + reply_samples().len());
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

fn mismatch(envelope: &Envelope) -> (String, EnvelopeKind, &'static str) {
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
            "JobManager message"
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
        ..tell(JOB_MANAGER, JobManagerMessage::from(ListJobs))
    };
    assert_eq!(
        mismatch(&envelope),
        (
            JOB_MANAGER.into(),
            EnvelopeKind::Reply,
            "JobManager message"
        )
    );
}

#[test]
fn an_ask_carrying_a_reply_is_a_mismatch() {
    let envelope = ask(RESOURCE_MANAGER, 3, Acknowledge.into_reply());
    assert_eq!(
        mismatch(&envelope),
        (RESOURCE_MANAGER.into(), EnvelopeKind::Ask, "reply")
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
    assert_eq!(mismatch(&envelope).2, "TaskManager message");
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
            // Compared as bytes: a mutated float may decode to NaN, never equal to itself.
            let decoded = Envelope::decode(&again).expect("and decodes");
            assert_eq!(decoded.encode().expect("encodes again"), again);
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
