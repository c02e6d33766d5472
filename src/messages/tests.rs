//! Every protocol message and every answer round-trips through the codec.
//!
//! The `*_variant` functions match exhaustively: a new message does not compile until it is given
//! an index there, and the coverage assertions then fail until it has a sample here.

use std::fmt::Debug;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::base::codec::*;
use crate::base::ids::*;
use crate::job::graph::{DistributionPattern, ExchangeMode, JobGraph};
use crate::job::states::{ExecutionState, JobStatus};
use crate::messages::deployment::*;
use crate::messages::job_manager::*;
use crate::messages::resource_manager::*;
use crate::messages::task_manager::*;
use crate::messages::*;
use crate::operators::{Record, Value};

fn round_trip<T: Serialize + DeserializeOwned + PartialEq + Debug>(value: &T) {
    let bytes = encode(value).expect("encodes");
    let back: T = decode(&bytes).expect("decodes");
    assert_eq!(&back, value);
}

pub(crate) fn resource(n: u32) -> ResourceId {
    ResourceId::new(format!("tm-{n}"))
}

pub(crate) fn session() -> LeaderSessionId {
    LeaderSessionId::from_u128(u128::MAX - 5)
}

pub(crate) fn address(name: &str) -> ActorAddress {
    ActorAddress::new("10.0.0.7:6123", name)
}

pub(crate) fn location() -> TaskManagerLocation {
    TaskManagerLocation {
        resource_id: resource(1),
        address: address("taskmanager/tm-1"),
        hostname: "worker-1".into(),
    }
}

pub(crate) fn hardware() -> HardwareDescription {
    HardwareDescription {
        cpu_cores: 2,
        physical_memory_bytes: 24 << 30,
    }
}

pub(crate) fn job_summary() -> JobSummary {
    JobSummary {
        job_id: JobId::from_u128(1),
        name: "wordcount".into(),
        status: JobStatus::Running,
        tasks_finished: 1,
        tasks_total: 8,
        submitted_at_ms: 1,
    }
}

pub(crate) fn job_details() -> JobDetails {
    JobDetails {
        summary: job_summary(),
        status_timestamps: vec![(JobStatus::Created, 1), (JobStatus::Running, 2)],
        failure: None,
        restarts: 1,
        recovered_at_ms: Some(3),
        exceptions: vec![crate::messages::job_manager::JobException {
            timestamp_ms: 2,
            vertex: "source".into(),
            subtask: 0,
            attempt_number: 0,
            resource_id: Some(resource(1)),
            reason: "input unavailable".into(),
            root_cause: true,
        }],
        vertices: vec![VertexDetails {
            name: "source".into(),
            chain: Vec::new(),
            operator: "text-source".into(),
            subtasks: vec![SubtaskDetails {
                subtask: 0,
                attempt_number: 1,
                state: ExecutionState::Running,
                resource_id: Some(resource(1)),
                locality: Some(crate::messages::job_manager::Locality::Local),
                timestamps: vec![(ExecutionState::Created, 1)],
                error: None,
                io: Some(crate::messages::TaskIoSnapshot {
                    records_in: 10,
                    bytes_in: 100,
                    records_out: 9,
                    bytes_out: 90,
                    buffers_in_use: 2,
                    backpressured_ms: 700,
                    back_pressured_time_ms_per_second: 600,
                }),
                restored: true,
            }],
            io: crate::messages::TaskIoSnapshot::default(),
            summary: None,
        }],
        from_job_result_store: false,
        artifacts: Vec::new(),
    }
}

pub(crate) fn job_manager_status() -> JobManagerStatus {
    JobManagerStatus {
        leader_session_id: session(),
        resource_manager_connected: true,
        task_managers: vec![TaskManagerInfo {
            resource_id: resource(1),
            instance_id: InstanceId::from_u128(3),
            location: location(),
            hardware: hardware(),
            slots_total: 2,
            slots_free: 1,
            fingerprint: Fingerprint::default(),
            registered_at_ms: 1_700_000_000_000,
            last_heartbeat_ms: 1_700_000_001_000,
            spill: crate::messages::SpillUsage {
                live: 10,
                peak: 20,
                total: 30,
            },
            allocated_slots: vec![AllocatedSlotInfo {
                allocation_id: AllocationId::from_u128(9),
                tasks: vec![
                    SlotTaskInfo {
                        job_id: JobId::from_u128(5),
                        vertex: 0,
                        subtask: 1,
                        attempt: Some(SlotTaskAttempt {
                            vertex_name: "source".into(),
                            attempt_number: 1,
                            attempt: ExecutionAttemptId::from_u128(7),
                            state: ExecutionState::Running,
                        }),
                    },
                    SlotTaskInfo {
                        job_id: JobId::from_u128(5),
                        vertex: 1,
                        subtask: 1,
                        attempt: None,
                    },
                ],
            }],
        }],
        heartbeat_timeouts: 1,
        task_restarts: 2,
        blob_bytes_served: 3 << 20,
        mailbox: MailboxFigures {
            max_handle_us: 3,
            longest_handler: "SubmitJob".into(),
            last_delay_us: 4,
            max_delay_us: 5,
        },
        slot_requests_queued: 6,
        slot_request_bulks_queued: 7,
    }
}

/// A TaskManager running one task in slot 1 of 3.
pub(crate) fn task_manager_status(registration: RegistrationPhase) -> TaskManagerStatus {
    TaskManagerStatus {
        resource_id: resource(1),
        registration,
        registration_attempts: 4,
        slots_total: 3,
        slots_free: 2,
        leader_session_id: Some(session()),
        slots: vec![None, Some(AllocationId::from_u128(9)), None],
        running: vec![RunningTaskInfo {
            attempt: ExecutionAttemptId::from_u128(8),
            job_id: JobId::from_u128(5),
            allocation_id: AllocationId::from_u128(9),
            cancel_requested: true,
            orphaned: false,
            io: crate::messages::TaskIoSnapshot {
                records_in: 1,
                bytes_in: 2,
                records_out: 3,
                bytes_out: 4,
                buffers_in_use: 5,
                backpressured_ms: 6,
                back_pressured_time_ms_per_second: 7,
            },
        }],
        job_partitions: vec![(JobId::from_u128(5), 2)],
        spill: crate::messages::SpillUsage {
            live: 1,
            peak: 2,
            total: 3,
        },
        network: Default::default(),
    }
}

pub(crate) fn resource_manager_samples() -> Vec<ResourceManagerMessage> {
    vec![
        CheckAndAllocateContainers.into(),
        SetWorkerPoolSize { size: 7 }.into(),
        DeclareResourceRequirements {
            leader_session_id: session(),
            workers: 9,
        }
        .into(),
        ReleaseResource {
            leader_session_id: session(),
            resource_id: resource(3),
            reason: RemovalReason::HeartbeatTimeout,
        }
        .into(),
        NotifyResourceStarted {
            leader_session_id: session(),
            resource_id: resource(4),
        }
        .into(),
        NewLeaderAvailable {
            address: address("jobmanager"),
            leader_session_id: session(),
        }
        .into(),
        TriggerRegistrationAtJobManager.into(),
        RegisterResourceManagerSuccessful {
            leader_session_id: session(),
            job_manager: address("jobmanager"),
            registered: vec![resource(1), resource(2)],
            required_workers: 3,
        }
        .into(),
        WorkerStarted {
            resource_id: resource(5),
        }
        .into(),
        WorkerFailed {
            resource_id: resource(6),
            reason: "exit status 127".into(),
        }
        .into(),
        WorkerTerminated {
            resource_id: resource(7),
            reason: "killed by signal 9".into(),
        }
        .into(),
        WorkersRecovered {
            resource_ids: vec![resource(8), resource(9)],
        }
        .into(),
        StopCluster.into(),
        GetResourceManagerStatus.into(),
    ]
}

fn resource_manager_variant(message: &ResourceManagerMessage) -> usize {
    use ResourceManagerMessage as M;
    match message {
        M::CheckAndAllocateContainers(_) => 0,
        M::SetWorkerPoolSize(_) => 1,
        M::DeclareResourceRequirements(_) => 2,
        M::ReleaseResource(_) => 3,
        M::NotifyResourceStarted(_) => 4,
        M::NewLeaderAvailable(_) => 5,
        M::TriggerRegistrationAtJobManager(_) => 6,
        M::RegisterResourceManagerSuccessful(_) => 7,
        M::WorkerStarted(_) => 8,
        M::WorkerFailed(_) => 9,
        M::WorkerTerminated(_) => 10,
        M::StopCluster(_) => 11,
        M::GetResourceManagerStatus(_) => 12,
        M::WorkersRecovered(_) => 13,
    }
}

pub(crate) fn job_manager_samples() -> Vec<JobManagerMessage> {
    vec![
        RegisterTaskManager {
            cluster_id: ClusterId::new("prod"),
            resource_id: resource(1),
            location: location(),
            hardware: hardware(),
            number_of_slots: 4,
            session: TaskManagerSessionId::from_u128(11),
            fingerprint: Fingerprint {
                build: "0123456789ab".into(),
                operators: vec!["map".into(), "program:tpch@0123456789ab".into()],
            },
            partitions: vec![(
                crate::base::ids::JobId::from_u128(3),
                vec![ResultPartitionId {
                    producer: crate::base::ids::ExecutionAttemptId::from_u128(4),
                    edge: 1,
                }],
            )],
        }
        .into(),
        RegisterResourceManager {
            leader_session_id: session(),
            resource_manager: address("resourcemanager"),
            designated_pool_size: 4,
            max_pool_size: 10,
        }
        .into(),
        ResourceRemoved {
            leader_session_id: session(),
            resource_id: resource(2),
            reason: RemovalReason::Terminated,
        }
        .into(),
        Heartbeat {
            resource_id: resource(1),
            instance_id: InstanceId::from_u128(9),
            report: HeartbeatReport {
                slots_total: 4,
                slots_free: 3,
                running: vec![],
                io: vec![],
                partitions_of: vec![],
                spill: Default::default(),
            },
        }
        .into(),
        ReleaseIdleTaskManagers {
            count: 2,
            pending: vec![resource(8)],
        }
        .into(),
        ResourceManagerHeartbeat {
            resource_manager: address("resourcemanager"),
            designated_pool_size: 4,
            max_pool_size: 10,
        }
        .into(),
        GetJobManagerStatus.into(),
        SubmitJob::new(job_graph()).into(),
        CancelJob {
            job_id: JobId::from_u128(5),
        }
        .into(),
        RequestJobStatus {
            job_id: JobId::from_u128(5),
        }
        .into(),
        RequestJobResults {
            job_id: JobId::from_u128(5),
        }
        .into(),
        ListJobs.into(),
        FetchBlob {
            digest: crate::base::blob_key::BlobKey::of(b"artifact"),
            offset: 1 << 20,
            length: 4096,
        }
        .into(),
        UpdateTaskExecutionStates {
            states: vec![
                TaskExecutionState {
                    ended_early: false,
                    unrecoverable: true,
                    job_id: JobId::from_u128(5),
                    attempt: ExecutionAttemptId::from_u128(6),
                    state: ExecutionState::Failed,
                    error: Some("boom".into()),
                    unavailable_partition: Some(ResultPartitionId {
                        producer: ExecutionAttemptId::from_u128(7),
                        edge: 1,
                    }),
                    io: Some(crate::messages::TaskIoSnapshot::default()),
                    result: Some(bytes::Bytes::from_static(b"records")),
                },
                TaskExecutionState {
                    ended_early: false,
                    unrecoverable: false,
                    job_id: JobId::from_u128(5),
                    attempt: ExecutionAttemptId::from_u128(8),
                    state: ExecutionState::Running,
                    error: None,
                    unavailable_partition: None,
                    io: None,
                    result: None,
                },
            ],
        }
        .into(),
        DisconnectTaskManager {
            resource_id: resource(1),
            instance_id: InstanceId::from_u128(2),
        }
        .into(),
    ]
}

pub(crate) fn job_graph() -> JobGraph {
    let mut builder = JobGraph::builder("wordcount");
    let source = builder
        .vertex("source", "text-source", 2)
        .config("path", "/data/in.txt")
        .index();
    let sink = builder
        .vertex("sink", "file-sink", 2)
        .co_location_group("c")
        .index();
    builder.edge(
        source,
        sink,
        DistributionPattern::AllToAll,
        ExchangeMode::Blocking,
    );
    builder.build(|_| true).expect("a valid graph")
}

pub(crate) fn descriptor() -> TaskDeploymentDescriptor {
    let partition = ResultPartitionId {
        producer: ExecutionAttemptId::from_u128(7),
        edge: 0,
    };
    TaskDeploymentDescriptor {
        job_id: JobId::from_u128(5),
        attempt: ExecutionAttemptId::from_u128(8),
        attempt_number: 1,
        vertex_name: "sink".into(),
        subtask: 1,
        parallelism: 2,
        operator: "file-sink".into(),
        config: std::sync::Arc::new([("path".to_owned(), "/out".to_owned())].into()),
        allocation_id: AllocationId::from_u128(9),
        inputs: vec![
            InputGateDeploymentDescriptor {
                edge: 0,
                subpartition: 1,
                producers: Producers::Listed {
                    id: Some(ProducerListId::from_u128(17)),
                    locations: std::sync::Arc::new(vec![ProducerLocation {
                        partition,
                        task_manager: address("taskmanager/tm-1"),
                    }]),
                },
            },
            InputGateDeploymentDescriptor {
                edge: 1,
                subpartition: 1,
                producers: Producers::Known(ProducerListId::from_u128(18)),
            },
        ],
        outputs: vec![ResultPartitionDeploymentDescriptor {
            partition,
            pattern: DistributionPattern::Forward,
            subpartitions: 1,
            retained: false,
        }],
        artifacts: std::sync::Arc::from([crate::job::artifact::JobArtifact {
            name: "tokenize.py".into(),
            digest: crate::base::blob_key::BlobKey::of(b"print()"),
            size: 7,
            executable: true,
        }]),
    }
}

fn job_manager_variant(message: &JobManagerMessage) -> usize {
    use JobManagerMessage as M;
    match message {
        M::RegisterTaskManager(_) => 0,
        M::RegisterResourceManager(_) => 1,
        M::ResourceRemoved(_) => 2,
        M::Heartbeat(_) => 3,
        M::ReleaseIdleTaskManagers(_) => 4,
        M::ResourceManagerHeartbeat(_) => 5,
        M::GetJobManagerStatus(_) => 6,
        M::SubmitJob(_) => 7,
        M::CancelJob(_) => 8,
        M::RequestJobStatus(_) => 9,
        M::ListJobs(_) => 10,
        M::UpdateTaskExecutionStates(_) => 11,
        M::DisconnectTaskManager(_) => 12,
        M::RequestJobResults(_) => 13,
        M::FetchBlob(_) => 14,
    }
}

pub(crate) fn task_manager_samples() -> Vec<TaskManagerMessage> {
    vec![
        NewLeaderAvailable {
            address: address("jobmanager"),
            leader_session_id: session(),
        }
        .into(),
        Disconnect {
            leader_session_id: session(),
            reason: RemovalReason::HeartbeatTimeout,
        }
        .into(),
        GetTaskManagerStatus.into(),
        SubmitTasks {
            leader_session_id: session(),
            descriptors: vec![descriptor(), descriptor()],
        }
        .into(),
        CancelTasks {
            leader_session_id: session(),
            attempts: vec![
                ExecutionAttemptId::from_u128(8),
                ExecutionAttemptId::from_u128(9),
            ],
        }
        .into(),
        ReleaseJobPartitions {
            leader_session_id: session(),
            job_id: JobId::from_u128(5),
        }
        .into(),
        PartitionRequests {
            consumer: ActorAddress::new("127.0.0.1:6121", "taskmanager/tm-2"),
            connection: DataConnectionId::from_u128(12),
            round: 3,
            requests: vec![
                PartitionRequest::Set {
                    set: 3,
                    edge: 0,
                    members: std::sync::Arc::new(vec![ResultPartitionId {
                        producer: ExecutionAttemptId::from_u128(7),
                        edge: 0,
                    }]),
                },
                PartitionRequest::SubscribeSet {
                    channels: (1 << 32) | 4,
                    set: 3,
                    subpartition: 1,
                    credit: 2,
                    eager: 16 << 10,
                },
                PartitionRequest::Credit {
                    channel: (1 << 32) | 4,
                    granted: 9,
                },
                PartitionRequest::EagerReturned {
                    channels: (1 << 32) | 4,
                    returned: 4_096,
                },
                PartitionRequest::Cancel { channel: 5 },
                PartitionRequest::CancelSet { channels: 1 << 32 },
                PartitionRequest::ForgetSet { set: 3 },
                PartitionRequest::ReleaseSet {
                    set: 3,
                    subpartition: 1,
                    members: vec![0, 2],
                },
            ],
        }
        .into(),
        PollPartitionData {
            consumer: ActorAddress::new("127.0.0.1:6121", "taskmanager/tm-2"),
            connection: DataConnectionId::from_u128(12),
            poll: 8,
            received: 6,
            acknowledged: 3,
        }
        .into(),
        ReleasePartitions {
            subpartitions: Vec::new(),
            leader_session_id: session(),
            job_id: JobId::from_u128(5),
            partitions: vec![ResultPartitionId {
                producer: ExecutionAttemptId::from_u128(7),
                edge: 1,
            }],
        }
        .into(),
    ]
}

fn task_manager_variant(message: &TaskManagerMessage) -> usize {
    use TaskManagerMessage as M;
    match message {
        M::NewLeaderAvailable(_) => 0,
        M::Disconnect(_) => 1,
        M::GetTaskManagerStatus(_) => 2,
        M::SubmitTasks(_) => 3,
        M::CancelTasks(_) => 4,
        M::ReleaseJobPartitions(_) => 5,
        M::PartitionRequests(_) => 6,
        M::PollPartitionData(_) => 7,
        M::ReleasePartitions(_) => 8,
    }
}

fn assert_covers<T>(samples: &[T], variant: fn(&T) -> usize, count: usize) {
    let mut seen: Vec<usize> = samples.iter().map(variant).collect();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(
        seen,
        (0..count).collect::<Vec<_>>(),
        "a message has no sample"
    );
}

#[test]
fn every_resource_manager_message_round_trips() {
    let samples = resource_manager_samples();
    assert_covers(&samples, resource_manager_variant, 14);
    samples.iter().for_each(round_trip);
}

#[test]
fn every_job_manager_message_round_trips() {
    let samples = job_manager_samples();
    assert_covers(&samples, job_manager_variant, 15);
    samples.iter().for_each(round_trip);
}

#[test]
fn every_task_manager_message_round_trips() {
    let samples = task_manager_samples();
    assert_covers(&samples, task_manager_variant, 9);
    samples.iter().for_each(round_trip);
}

#[test]
fn every_answer_round_trips() {
    round_trip(&Acknowledge);
    round_trip(&Result::<Acknowledge, SetPoolSizeError>::Ok(Acknowledge));
    round_trip(&Result::<Acknowledge, SetPoolSizeError>::Err(
        SetPoolSizeError::AboveMaximum {
            requested: 9,
            max: 8,
        },
    ));
    round_trip(&Result::<Acknowledge, SetPoolSizeError>::Err(
        SetPoolSizeError::Stopping,
    ));
    for response in [
        RegistrationResponse::AcknowledgeRegistration(AcknowledgeRegistration {
            instance_id: InstanceId::from_u128(1),
            leader_session_id: session(),
        }),
        RegistrationResponse::AlreadyRegistered(AlreadyRegistered {
            instance_id: InstanceId::from_u128(1),
            leader_session_id: session(),
        }),
        RegistrationResponse::RefuseRegistration(RefuseRegistration {
            reason: RefusalReason::NoSlots,
        }),
        RegistrationResponse::RefuseRegistration(RefuseRegistration {
            reason: RefusalReason::WrongCluster {
                expected: ClusterId::new("a"),
                offered: ClusterId::new("b"),
            },
        }),
        RegistrationResponse::RefuseRegistration(RefuseRegistration {
            reason: RefusalReason::TooManySlots {
                offered: 5000,
                max: 4096,
            },
        }),
        RegistrationResponse::RefuseRegistration(RefuseRegistration {
            reason: RefusalReason::InconsistentResourceId {
                resource_id: resource(1),
                location: resource(2),
            },
        }),
        RegistrationResponse::RefuseRegistration(RefuseRegistration {
            reason: RefusalReason::Unreachable {
                address: address("taskmanager/x"),
            },
        }),
    ] {
        round_trip(&response);
    }
    round_trip(&HeartbeatResponse::Acknowledged);
    round_trip(&Result::<JobId, JobError>::Ok(JobId::from_u128(1)));
    round_trip(&Result::<JobId, JobError>::Err(JobError::Rejected(
        "cycle".into(),
    )));
    round_trip(&Result::<JobStatus, JobError>::Err(
        JobError::AlreadyTerminal {
            job_id: JobId::from_u128(1),
            status: JobStatus::Finished,
        },
    ));
    round_trip(&Result::<(), TaskSubmissionError>::Err(
        TaskSubmissionError::UnknownOperator("x".into()),
    ));
    round_trip(&Result::<(), TaskSubmissionError>::Err(
        TaskSubmissionError::UnknownProducers(ProducerListId::from_u128(18)),
    ));
    round_trip(&PartitionData {
        seq: 3,
        channels: vec![
            (
                0,
                ChannelResponse::Data {
                    buffers: vec![
                        vec![
                            Record {
                                key: "word".into(),
                                value: Value::Int(3),
                            },
                            Record {
                                key: String::new(),
                                value: Value::Text("a line".into()),
                            },
                            Record {
                                key: "u".into(),
                                value: Value::Unit,
                            },
                        ]
                        .into(),
                    ],
                    next_buffer: 1,
                    finished: true,
                    backlog: 0,
                    eager: 0,
                },
            ),
            (
                4,
                ChannelResponse::Data {
                    buffers: Vec::new(),
                    next_buffer: 3,
                    finished: false,
                    backlog: 2,
                    eager: 180,
                },
            ),
            (1, ChannelResponse::Failed("gone".into())),
            (2, ChannelResponse::Released),
            (3, ChannelResponse::Unknown),
        ],
        notices: vec![
            PartitionNotice {
                set: 3,
                member: 0,
                end: PartitionEnd::Finished {
                    with_data: vec![1, 7].into(),
                },
            },
            PartitionNotice {
                set: 3,
                member: 1,
                end: PartitionEnd::Failed("gone".into()),
            },
            PartitionNotice {
                set: 4,
                member: 0,
                end: PartitionEnd::Released,
            },
            PartitionNotice {
                set: 4,
                member: 1,
                end: PartitionEnd::Unknown,
            },
        ],
        forgotten: false,
    });
    round_trip(&PartitionData {
        seq: 0,
        channels: Vec::new(),
        notices: Vec::new(),
        forgotten: true,
    });
    round_trip(&vec![job_summary()]);
    round_trip(&job_details());
    round_trip(&ResourceManagerHeartbeatResponse::Acknowledged {
        leader_session_id: session(),
        registered: vec![resource(2)],
        required_workers: 4,
    });
    round_trip(&ResourceManagerHeartbeatResponse::UnknownResourceManager);
    round_trip(&HeartbeatResponse::UnknownTaskManager);
    round_trip(&IdleTaskManagersReleased {
        leader_session_id: session(),
        released: vec![resource(1)],
    });
    round_trip(&ResourceManagerStatus {
        designated_pool_size: 4,
        demand: 6,
        target_pool_size: 6,
        started: vec![resource(1)],
        pending_requests: 2,
        pending_registration: 1,
        releasing: 1,
        start_failures: 3,
        consecutive_start_failures: 1,
        connected_to_job_manager: true,
        driver: "in_process".into(),
        driver_workers: [(resource(1), "slurm job 4: RUNNING (None)".to_owned())].into(),
    });
    round_trip(&job_manager_status());
    for registration in [
        RegistrationPhase::NoLeader,
        RegistrationPhase::Registering { attempt: 3 },
        RegistrationPhase::WaitingToRetry { attempt: 4 },
        RegistrationPhase::Registered {
            instance_id: InstanceId::from_u128(8),
        },
        RegistrationPhase::Refused,
    ] {
        round_trip(&task_manager_status(registration));
    }
    round_trip(&TaskManagerStatus {
        leader_session_id: None,
        slots: vec![None; 3],
        running: Vec::new(),
        job_partitions: Vec::new(),
        spill: Default::default(),
        network: Default::default(),
        slots_free: 3,
        ..task_manager_status(RegistrationPhase::NoLeader)
    });
}

#[test]
fn garbage_and_truncation_are_errors_not_panics() {
    let bytes = encode(&JobManagerMessage::from(ReleaseIdleTaskManagers {
        count: 2,
        pending: Vec::new(),
    }))
    .unwrap();
    assert!(matches!(
        decode::<JobManagerMessage>(&[0xff, 0xff, 0xff, 0xff]),
        Err(CodecError::Decode(_))
    ));
    assert!(matches!(
        decode::<JobManagerMessage>(&bytes[..bytes.len() - 1]),
        Err(CodecError::Decode(_))
    ));
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(matches!(
        decode::<JobManagerMessage>(&longer),
        Err(CodecError::TrailingBytes { trailing: 1, .. })
    ));
}

#[test]
fn a_length_claim_over_the_limit_is_refused_before_allocating() {
    // Variant 0 of ResourceManagerMessage is not a string; use a bare Vec<u8> whose varint length
    // claims 2^40 bytes: bincode must refuse it against the limit, not try to allocate.
    let mut bytes = vec![253u8]; // varint marker for a u64
    bytes.extend_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(matches!(
        decode::<Vec<u8>>(&bytes),
        Err(CodecError::Decode(_))
    ));
    assert!(matches!(
        decode::<String>(&bytes),
        Err(CodecError::Decode(_))
    ));
}

#[test]
fn oversized_values_are_refused_when_encoding() {
    let huge = vec![0u8; MAX_MESSAGE_SIZE + 1];
    assert!(matches!(encode(&huge), Err(CodecError::TooLarge { .. })));
}

#[test]
fn random_ids_are_compact_numbers_in_bincode() {
    let id = JobId::from_u128(0xabc);
    let bytes = encode(&id).unwrap();
    assert!(bytes.len() <= 17, "a varint u128, not text");
    round_trip(&id);
}

#[test]
fn a_prepared_submission_sends_its_graph_and_never_its_regions() {
    let prepared = SubmitJob::prepared(job_graph());
    assert!(prepared.regions.is_some(), "a valid graph is analysed");
    let bytes = encode(&prepared).expect("encodes");
    let received: SubmitJob = decode(&bytes).expect("decodes");
    assert_eq!(received, SubmitJob::new(job_graph()));
}
