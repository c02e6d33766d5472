//! Test support: node environments on the current arbiter, probe actors that record what the
//! actor under test sends and answer as scripted, a scripted driver, and virtual-time helpers.
//!
//! Tests run under `#[actix::test]` with `tokio::time::pause()`: every actor sits on the test's
//! arbiter, so [`advance`] moves every timer deterministically.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use std::any::TypeId;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;

use actix::dev::{MessageResponse, OneshotSender, ToEnvelope};
use actix::prelude::*;
use tokio::sync::oneshot;

use crate::actors::resource_manager::driver::{DriverError, WorkerDriver, WorkerRequest};
use crate::base::clock::ManualClock;
use crate::base::ids::{LeaderSessionId, ResourceId};
use crate::env::events::EventSink;
use crate::env::{CurrentArbiterSpawner, NodeEnv, Spawner};
use crate::messages::job_manager::*;
use crate::messages::reply::{Answer, Reply};
use crate::messages::resource_manager::*;
use crate::messages::task_manager::*;
use crate::messages::*;
use crate::rpc::directory::{LocalActor, LocalDirectory};

/// An environment whose spawner keeps everything on the current arbiter (so a paused clock
/// governs every timer), with a fresh local directory.
pub fn env(node: &str, seed: u64) -> NodeEnv {
    env_with_spawner(node, seed, Arc::new(CurrentArbiterSpawner))
}

/// Like [`env`], with TaskManagers placed by `spawner`.
pub fn env_with_spawner(node: &str, seed: u64, spawner: Arc<dyn Spawner>) -> NodeEnv {
    NodeEnv::new(
        node,
        seed,
        Arc::new(ManualClock::new(1_000_000)),
        spawner,
        Arc::new(LocalDirectory::new()),
        EventSink::new(1024),
    )
}

/// Lets `ms` milliseconds of virtual time pass, running everything due meanwhile (the clock must
/// be paused). `advance(0)` would not yield, so the minimum is one millisecond.
pub async fn advance(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms.max(1))).await;
}

/// Lets the actors process what is in flight (one millisecond of virtual time).
pub async fn settle() {
    advance(1).await;
}

/// Blocking I/O that waits until the test runs it ([`HeldIo::run_held`]): a disk as slow as
/// the test wants, to show who waits for it.
#[derive(Default)]
pub struct HeldIo {
    held: Mutex<Vec<crate::env::blocking_io::IoWork>>,
}

impl std::fmt::Debug for HeldIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldIo")
            .field("held", &self.held())
            .finish()
    }
}

impl HeldIo {
    /// How many pieces of work wait.
    pub fn held(&self) -> usize {
        lock(&self.held).len()
    }

    /// Runs every piece of work that waits, on this thread.
    pub fn run_held(&self) {
        let held = std::mem::take(&mut *lock(&self.held));
        for work in held {
            work();
        }
    }
}

impl crate::env::blocking_io::BlockingIo for HeldIo {
    fn execute(&self, work: crate::env::blocking_io::IoWork) {
        lock(&self.held).push(work);
    }
}

/// Production task threads, with blocking I/O held by a [`HeldIo`].
#[derive(Debug)]
pub struct HeldIoRunner {
    tasks: crate::env::ThreadTaskRunner,
    io: Arc<HeldIo>,
}

impl HeldIoRunner {
    pub fn new(io: Arc<HeldIo>) -> Self {
        Self {
            tasks: crate::env::ThreadTaskRunner::default(),
            io,
        }
    }
}

impl crate::env::TaskRunner for HeldIoRunner {
    fn run(&self, name: String, task: crate::env::TaskBody) {
        self.tasks.run(name, task);
    }

    fn io(&self) -> Arc<dyn crate::env::blocking_io::BlockingIo> {
        self.io.clone()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How a probe answers an ask.
pub enum Script<R> {
    /// At once, with this value.
    Answer(R),
    /// Never (the asker's timeout fires).
    Silent,
    /// When the test says so: see [`Held`].
    Hold(Held<R>),
}

impl<R: Clone> Clone for Script<R> {
    fn clone(&self) -> Self {
        match self {
            Self::Answer(r) => Self::Answer(r.clone()),
            Self::Silent => Self::Silent,
            Self::Hold(h) => Self::Hold(h.clone()),
        }
    }
}

/// Asks a probe holds until the test answers them, oldest first.
pub struct Held<R>(Arc<Mutex<Vec<oneshot::Sender<R>>>>);

impl<R> Clone for Held<R> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<R> Default for Held<R> {
    fn default() -> Self {
        Self(Arc::default())
    }
}

impl<R> Held<R> {
    /// How many asks are held (answered or not).
    pub fn len(&self) -> usize {
        lock(&self.0).len()
    }

    /// Answers the `index`-th held ask (0 = the first ever held).
    pub fn answer(&self, index: usize, value: R) {
        let mut held = lock(&self.0);
        let (sender, _) = oneshot::channel();
        let sender = std::mem::replace(&mut held[index], sender);
        let _ = sender.send(value);
    }
}

impl<R: Clone + Answer + 'static> Script<R> {
    fn answer(&self) -> ProbeAnswer {
        match self {
            Self::Answer(value) => ProbeAnswer::Now(value.clone().into_reply()),
            Self::Silent => ProbeAnswer::Never,
            Self::Hold(held) => {
                let (sender, receiver) = oneshot::channel();
                lock(&held.0).push(sender);
                ProbeAnswer::Later(Box::pin(async move {
                    match receiver.await {
                        Ok(value) => value.into_reply(),
                        Err(_) => std::future::pending().await,
                    }
                }))
            }
        }
    }
}

/// Everything a probe received, in order.
pub struct Recorded<T>(Arc<Mutex<Vec<T>>>);

impl<T> Clone for Recorded<T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<T> Default for Recorded<T> {
    fn default() -> Self {
        Self(Arc::default())
    }
}

impl<T: Clone> Recorded<T> {
    fn push(&self, value: T) {
        lock(&self.0).push(value);
    }

    /// Every message so far.
    pub fn all(&self) -> Vec<T> {
        lock(&self.0).clone()
    }

    /// The messages matching `pick`.
    pub fn filter<U>(&self, pick: impl Fn(&T) -> Option<U>) -> Vec<U> {
        lock(&self.0).iter().filter_map(pick).collect()
    }
}

/// Registers a probe in `env`'s directory under `address`.
fn register(env: &NodeEnv, address: &ActorAddress, actor: LocalActor) {
    env.resolver.register(address.clone(), actor);
}

/// What a probe answers one message with.
#[allow(clippy::large_enum_variant)] // a test probe's answer, made a few times per test
pub enum ProbeAnswer {
    /// At once.
    Now(Reply),
    /// When the future resolves.
    Later(Pin<Box<dyn Future<Output = Reply>>>),
    /// Never: the asker's own timeout fires.
    Never,
}

/// A probe's response to a message `M`: the [`ProbeAnswer`] turned into `M`'s answer type. An
/// answer given at once is sent in the same turn, as `MessageResult` would.
pub struct ProbeResponse<R>(ProbeAnswer, PhantomData<fn() -> R>);

impl<R: Answer + 'static> ProbeResponse<R> {
    /// `answer`, or for a message nobody scripted: `()` at once for a tell, never for an ask.
    fn new(answer: Option<ProbeAnswer>) -> Self {
        let answer = answer.unwrap_or_else(|| {
            if TypeId::of::<R>() == TypeId::of::<()>() {
                ProbeAnswer::Now(().into_reply())
            } else {
                ProbeAnswer::Never
            }
        });
        Self(answer, PhantomData)
    }
}

fn unwrap_reply<R: Answer>(reply: Reply) -> R {
    R::from_reply(reply)
        .unwrap_or_else(|error| panic!("a probe scripted the wrong answer: {error}"))
}

impl<A, M, R> MessageResponse<A, M> for ProbeResponse<R>
where
    A: Actor,
    M: Message<Result = R>,
    R: Answer + 'static,
{
    fn handle(self, _: &mut A::Context, tx: Option<OneshotSender<R>>) {
        let Some(tx) = tx else { return };
        match self.0 {
            ProbeAnswer::Now(reply) => drop(tx.send(unwrap_reply(reply))),
            ProbeAnswer::Later(reply) => {
                actix::spawn(async move { drop(tx.send(unwrap_reply(reply.await))) });
            }
            ProbeAnswer::Never => {
                // Held, not dropped: the asker waits (until its timeout), as for a peer that
                // never answers, instead of seeing a closed mailbox.
                actix::spawn(async move {
                    let _held = tx;
                    std::future::pending::<()>().await;
                });
            }
        }
    }
}

/// Implements the one handler of a probe: every message of its protocol is recorded, then
/// answered as the probe's `answer` says (a new message of the protocol needs no change here).
macro_rules! probe {
    ($probe:ident, $wire:ident) => {
        impl<M> Handler<M> for $probe
        where
            M: Message + Into<$wire> + 'static,
            M::Result: Answer + 'static,
        {
            type Result = ProbeResponse<M::Result>;

            fn handle(&mut self, msg: M, _: &mut Context<Self>) -> Self::Result {
                let wire: $wire = msg.into();
                let answer = self.answer(&wire);
                self.received.push(wire);
                ProbeResponse::new(answer)
            }
        }
    };
}

/// How a [`JobManagerProbe`] answers.
#[derive(Clone)]
pub struct JobManagerScripts {
    /// `RegisterTaskManager`.
    pub register_task_manager: Script<RegistrationResponse>,
    /// `RegisterResourceManager`.
    pub register_resource_manager: Script<RegisterResourceManagerSuccessful>,
    /// `Heartbeat`.
    pub heartbeat: Script<HeartbeatResponse>,
    /// `ReleaseIdleTaskManagers`.
    pub release_idle_task_managers: Script<IdleTaskManagersReleased>,
    /// `ResourceManagerHeartbeat`.
    pub resource_manager_heartbeat: Script<ResourceManagerHeartbeatResponse>,
    /// `GetJobManagerStatus`.
    pub get_status: Script<JobManagerStatus>,
}

/// A stand-in JobManager.
pub struct JobManagerProbe {
    received: Recorded<JobManagerMessage>,
    scripts: Arc<Mutex<JobManagerScripts>>,
}

impl Actor for JobManagerProbe {
    type Context = Context<Self>;
}

probe!(JobManagerProbe, JobManagerMessage);

impl JobManagerProbe {
    fn answer(&self, message: &JobManagerMessage) -> Option<ProbeAnswer> {
        use JobManagerMessage as M;
        let scripts = lock(&self.scripts);
        let now = |reply: Reply| Some(ProbeAnswer::Now(reply));
        match message {
            M::RegisterTaskManager(_) => Some(scripts.register_task_manager.answer()),
            M::RegisterResourceManager(_) => Some(scripts.register_resource_manager.answer()),
            M::Heartbeat(_) => Some(scripts.heartbeat.answer()),
            M::ReleaseIdleTaskManagers(_) => Some(scripts.release_idle_task_managers.answer()),
            M::GetJobManagerStatus(_) => Some(scripts.get_status.answer()),
            M::ResourceManagerHeartbeat(_) => Some(scripts.resource_manager_heartbeat.answer()),
            M::UpdateTaskExecutionStates(_) | M::DisconnectTaskManager(_) => {
                now(Acknowledge.into_reply())
            }
            M::SubmitJob(_) => now(Err::<crate::base::ids::JobId, _>(JobError::Rejected(
                "a probe runs no jobs".into(),
            ))
            .into_reply()),
            M::CancelJob(m) => now(
                Err::<crate::job::states::JobStatus, _>(JobError::UnknownJob(m.job_id))
                    .into_reply(),
            ),
            M::RequestJobStatus(m) => {
                now(Err::<JobDetails, _>(JobError::UnknownJob(m.job_id)).into_reply())
            }
            M::ListJobs(_) => now(Vec::<JobSummary>::new().into_reply()),
            _ => None,
        }
    }
}

impl Handler<crate::actors::Shutdown> for JobManagerProbe {
    type Result = ();

    fn handle(&mut self, _: crate::actors::Shutdown, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

/// The test's side of a [`JobManagerProbe`].
#[derive(Clone)]
pub struct JobManagerProbeHandle {
    /// What it received.
    pub received: Recorded<JobManagerMessage>,
    scripts: Arc<Mutex<JobManagerScripts>>,
    /// Its address.
    pub address: ActorAddress,
    addr: Addr<JobManagerProbe>,
}

impl JobManagerProbeHandle {
    /// Stops the probe: asks to it fail from now on, as to a JobManager that died.
    pub async fn stop(&self) {
        let _ = self.addr.send(crate::actors::Shutdown).await;
    }

    /// Starts a probe at `local/<name>` in `env`'s directory answering as leader `session`:
    /// registrations are acknowledged, heartbeats acknowledged, nothing is released.
    pub fn start(env: &NodeEnv, name: &str, session: LeaderSessionId) -> Self {
        let address = env.address_of(name);
        let scripts = Arc::new(Mutex::new(JobManagerScripts {
            register_task_manager: Script::Answer(RegistrationResponse::AcknowledgeRegistration(
                AcknowledgeRegistration {
                    instance_id: crate::base::ids::InstanceId::from_u128(1),
                    leader_session_id: session,
                },
            )),
            register_resource_manager: Script::Answer(RegisterResourceManagerSuccessful {
                leader_session_id: session,
                job_manager: address.clone(),
                registered: Vec::new(),
                required_workers: 0,
            }),
            heartbeat: Script::Answer(HeartbeatResponse::Acknowledged),
            release_idle_task_managers: Script::Answer(IdleTaskManagersReleased {
                leader_session_id: session,
                released: Vec::new(),
            }),
            resource_manager_heartbeat: Script::Answer(
                ResourceManagerHeartbeatResponse::Acknowledged {
                    leader_session_id: session,
                    registered: Vec::new(),
                    required_workers: 0,
                },
            ),
            get_status: Script::Silent,
        }));
        let received = Recorded::default();
        let addr = JobManagerProbe {
            received: received.clone(),
            scripts: scripts.clone(),
        }
        .start();
        register(
            env,
            &address,
            LocalActor::JobManager(JobManagerGateway::of(&addr)),
        );
        Self {
            received,
            scripts,
            address,
            addr,
        }
    }

    /// Changes how it answers.
    pub fn script(&self, change: impl FnOnce(&mut JobManagerScripts)) {
        change(&mut lock(&self.scripts));
    }
}

/// How a [`ResourceManagerProbe`] answers.
#[derive(Clone)]
pub struct ResourceManagerScripts {
    /// `NotifyResourceStarted`.
    pub notify_resource_started: Script<Acknowledge>,
}

/// A stand-in resource manager.
pub struct ResourceManagerProbe {
    received: Recorded<ResourceManagerMessage>,
    scripts: Arc<Mutex<ResourceManagerScripts>>,
}

impl Actor for ResourceManagerProbe {
    type Context = Context<Self>;
}

probe!(ResourceManagerProbe, ResourceManagerMessage);

impl ResourceManagerProbe {
    fn answer(&self, message: &ResourceManagerMessage) -> Option<ProbeAnswer> {
        use ResourceManagerMessage as M;
        match message {
            M::NotifyResourceStarted(_) => {
                Some(lock(&self.scripts).notify_resource_started.answer())
            }
            M::SetWorkerPoolSize(_) => Some(ProbeAnswer::Now(
                Ok::<_, SetPoolSizeError>(Acknowledge).into_reply(),
            )),
            M::StopCluster(_) => Some(ProbeAnswer::Now(Acknowledge.into_reply())),
            _ => None,
        }
    }
}

/// The test's side of a [`ResourceManagerProbe`].
#[derive(Clone)]
pub struct ResourceManagerProbeHandle {
    /// What it received.
    pub received: Recorded<ResourceManagerMessage>,
    scripts: Arc<Mutex<ResourceManagerScripts>>,
    /// Its address.
    pub address: ActorAddress,
    /// Its gateway.
    pub gateway: ResourceManagerGateway,
}

impl ResourceManagerProbeHandle {
    /// Starts a probe at `local/resourcemanager` that acknowledges everything.
    pub fn start(env: &NodeEnv) -> Self {
        let address = env.address_of("resourcemanager");
        let scripts = Arc::new(Mutex::new(ResourceManagerScripts {
            notify_resource_started: Script::Answer(Acknowledge),
        }));
        let received = Recorded::default();
        let addr = ResourceManagerProbe {
            received: received.clone(),
            scripts: scripts.clone(),
        }
        .start();
        let gateway = ResourceManagerGateway::of(&addr);
        register(env, &address, LocalActor::ResourceManager(gateway.clone()));
        Self {
            received,
            scripts,
            address,
            gateway,
        }
    }

    /// Changes how it answers.
    pub fn script(&self, change: impl FnOnce(&mut ResourceManagerScripts)) {
        change(&mut lock(&self.scripts));
    }
}

/// A stand-in TaskManager.
pub struct TaskManagerProbe {
    received: Recorded<TaskManagerMessage>,
    /// Refuses every task that names a producer list instead of carrying it, as a TaskManager
    /// whose cache dropped it (see [`TaskManagerProbeHandle::forget_producer_lists`]).
    forgets_producer_lists: Arc<std::sync::atomic::AtomicBool>,
}

impl Actor for TaskManagerProbe {
    type Context = Context<Self>;
}

probe!(TaskManagerProbe, TaskManagerMessage);

impl TaskManagerProbe {
    fn answer(&self, message: &TaskManagerMessage) -> Option<ProbeAnswer> {
        use TaskManagerMessage as M;
        let now = |reply: Reply| Some(ProbeAnswer::Now(reply));
        match message {
            M::SubmitTasks(submit) => now(self.submitted(submit).into_reply()),
            M::PartitionRequests(_) => now(Acknowledge.into_reply()),
            M::PollPartitionData(poll) => now(self.no_partitions(poll).into_reply()),
            _ => None,
        }
    }

    /// Takes every task, or (with `forgets_producer_lists`) refuses those naming a list.
    fn submitted(&self, msg: &SubmitTasks) -> Vec<Result<(), TaskSubmissionError>> {
        let forgets = self
            .forgets_producer_lists
            .load(std::sync::atomic::Ordering::Relaxed);
        msg.descriptors
            .iter()
            .map(|descriptor| {
                let named = descriptor
                    .inputs
                    .iter()
                    .find_map(|gate| match gate.producers {
                        crate::messages::deployment::Producers::Known(id) => Some(id),
                        _ => None,
                    });
                match named {
                    Some(id) if forgets => Err(TaskSubmissionError::UnknownProducers(id)),
                    _ => Ok(()),
                }
            })
            .collect()
    }

    /// A probe holds no partitions: every partition of every set named so far is answered
    /// `Unknown`.
    fn no_partitions(&self, msg: &PollPartitionData) -> PartitionData {
        let notices: Vec<PartitionNotice> = self
            .received
            .all()
            .iter()
            .filter_map(|m| match m {
                TaskManagerMessage::PartitionRequests(r) if r.connection == msg.connection => {
                    Some(r.requests.clone())
                }
                _ => None,
            })
            .flatten()
            .flat_map(|request| match request {
                PartitionRequest::Set { set, members, .. } => (0..members.len() as u32)
                    .map(|member| PartitionNotice {
                        set,
                        member,
                        end: PartitionEnd::Unknown,
                    })
                    .collect(),
                _ => Vec::new(),
            })
            .collect();
        PartitionData {
            seq: msg.received + 1,
            channels: Vec::new(),
            notices,
            forgotten: false,
        }
    }
}

/// The test's side of a [`TaskManagerProbe`].
#[derive(Clone)]
pub struct TaskManagerProbeHandle {
    /// What it received.
    pub received: Recorded<TaskManagerMessage>,
    /// Its address.
    pub address: ActorAddress,
    addr: Addr<TaskManagerProbe>,
    forgets_producer_lists: Arc<std::sync::atomic::AtomicBool>,
}

impl Handler<crate::actors::Shutdown> for TaskManagerProbe {
    type Result = ();

    fn handle(&mut self, _: crate::actors::Shutdown, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

impl TaskManagerProbeHandle {
    /// Every task it was sent, in order, over all its `SubmitTasks`.
    pub fn submitted(&self) -> Vec<crate::messages::deployment::TaskDeploymentDescriptor> {
        self.received
            .filter(|m| match m {
                TaskManagerMessage::SubmitTasks(s) => Some(s.descriptors.clone()),
                _ => None,
            })
            .into_iter()
            .flatten()
            .collect()
    }

    /// Its gateway (the same actor the directory resolves it to).
    pub fn gateway(&self) -> TaskManagerGateway {
        TaskManagerGateway::of(&self.addr)
    }

    /// Stops the probe: messages to it fail from now on, as to a TaskManager that died.
    pub async fn stop(&self) {
        let _ = self.addr.send(crate::actors::Shutdown).await;
    }

    /// From now on, refuses every task that names a producer list instead of carrying it
    /// (`UnknownProducers`), as a TaskManager that keeps none.
    pub fn forget_producer_lists(&self) {
        self.forgets_producer_lists
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Starts a probe at `local/taskmanager/<resource_id>`.
    pub fn start(env: &NodeEnv, resource_id: &ResourceId) -> Self {
        let address = env.address_of(&format!("taskmanager/{resource_id}"));
        let received = Recorded::default();
        let forgets_producer_lists = Arc::default();
        let addr = TaskManagerProbe {
            received: received.clone(),
            forgets_producer_lists: Arc::clone(&forgets_producer_lists),
        }
        .start();
        register(
            env,
            &address,
            LocalActor::TaskManager(TaskManagerGateway::of(&addr)),
        );
        Self {
            received,
            address,
            addr,
            forgets_producer_lists,
        }
    }
}

/// What the resource manager asked of a [`ScriptedDriver`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriverCall {
    /// `request_worker`.
    Request(WorkerRequest),
    /// `release_worker`.
    Release(ResourceId),
    /// `shutdown`.
    Shutdown,
    /// `leader_changed`.
    LeaderChanged(ActorAddress, LeaderSessionId),
}

/// A driver that records calls and starts nothing; the test plays the driver's part by sending
/// `WorkerStarted` / `WorkerFailed` / `WorkerTerminated` itself.
pub struct ScriptedDriver {
    calls: Recorded<DriverCall>,
    can_start: bool,
    adopts: bool,
    /// Whether it says it reports recovered workers (the test sends `WorkersRecovered`).
    pub recovers: bool,
    /// Whether it says its requests may queue (the test sends `WorkerStarted` when it likes).
    pub queues: bool,
    fail_requests: Arc<Mutex<bool>>,
}

/// The test's side of a [`ScriptedDriver`].
#[derive(Clone)]
pub struct DriverHandle {
    /// Every call, in order.
    pub calls: Recorded<DriverCall>,
    fail_requests: Arc<Mutex<bool>>,
}

impl DriverHandle {
    /// The resource ids requested so far.
    pub fn requested(&self) -> Vec<ResourceId> {
        self.calls.filter(|c| match c {
            DriverCall::Request(r) => Some(r.resource_id.clone()),
            _ => None,
        })
    }

    /// The resource ids released so far.
    pub fn released(&self) -> Vec<ResourceId> {
        self.calls.filter(|c| match c {
            DriverCall::Release(id) => Some(id.clone()),
            _ => None,
        })
    }

    /// Makes `request_worker` fail at once (a spawn error) or succeed.
    pub fn fail_requests(&self, fail: bool) {
        *lock(&self.fail_requests) = fail;
    }
}

impl ScriptedDriver {
    /// A driver that can start workers (`managed`) like `in_process`, or cannot and adopts
    /// everything like `standalone`.
    pub fn new(managed: bool) -> (Self, DriverHandle) {
        let calls = Recorded::default();
        let fail_requests = Arc::new(Mutex::new(false));
        (
            Self {
                calls: calls.clone(),
                can_start: managed,
                adopts: !managed,
                recovers: false,
                queues: false,
                fail_requests: fail_requests.clone(),
            },
            DriverHandle {
                calls,
                fail_requests,
            },
        )
    }
}

impl WorkerDriver for ScriptedDriver {
    fn name(&self) -> &'static str {
        "scripted"
    }

    fn initialize(&mut self, _resource_manager: ResourceManagerGateway) {}

    fn can_start_workers(&self) -> bool {
        self.can_start
    }

    fn adopts_unknown_workers(&self) -> bool {
        self.adopts
    }

    fn recovers_workers(&self) -> bool {
        self.recovers
    }

    fn requests_queue(&self) -> bool {
        self.queues
    }

    fn request_worker(&mut self, request: WorkerRequest) -> Result<(), DriverError> {
        if !self.can_start {
            return Err(DriverError::CannotStartWorkers {
                driver: self.name(),
            });
        }
        let resource_id = request.resource_id.clone();
        self.calls.push(DriverCall::Request(request));
        if *lock(&self.fail_requests) {
            return Err(DriverError::Spawn {
                resource_id,
                source: std::io::Error::other("scripted spawn failure"),
            });
        }
        Ok(())
    }

    fn release_worker(&mut self, resource_id: &ResourceId) {
        self.calls.push(DriverCall::Release(resource_id.clone()));
    }

    fn shutdown(&mut self) {
        self.calls.push(DriverCall::Shutdown);
    }

    fn leader_changed(&mut self, job_manager: &ActorAddress, leader_session_id: LeaderSessionId) {
        self.calls.push(DriverCall::LeaderChanged(
            job_manager.clone(),
            leader_session_id,
        ));
    }
}

/// Sends a message and waits for its answer (panics if the actor is gone: a test bug).
pub async fn ask<A, M>(addr: &Addr<A>, msg: M) -> M::Result
where
    A: Actor + Handler<M>,
    A::Context: ToEnvelope<A, M>,
    M: Message + Send + 'static,
    M::Result: Send,
{
    addr.send(msg).await.expect("the actor under test is alive")
}
