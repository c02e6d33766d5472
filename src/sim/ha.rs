//! The high-availability family of the cluster simulation: several JobManager nodes, each
//! running the real leader loop ([`run_leader_loop`]) with a
//! [`SimLeaderElection`](super::coordination::SimLeaderElection) of one [`SimCoordination`],
//! TaskManagers that follow the published leader through
//! [`SimLeaderRetrieval`](super::coordination::SimLeaderRetrieval) (re-registering on
//! `NewLeaderAvailable`), and job graphs kept by the real [`JobGraphStore`] — its files in the
//! run's scratch directory (`ha-storage/`, removed with it), its pointers in the simulated
//! coordination service.
//!
//! ```text
//!  seed ─▶ HaScenario: jobs, JobManagers cut from the coordination service (shorter or longer
//!          than the session timeout), paused past it (its coordination client starved after it
//!          resumes), killed (and booted again); TaskManager crashes, pauses, cuts,
//!          resets ─▶ fault phase ─▶ quiet phase
//!  jobmanager-0:6123 … jobmanager-N:6123   run_leader_loop(SimLeaderElection, store, switch)
//!  tm-K:6121                                follow_leader(SimLeaderRetrieval) ─▶ TaskManager
//! ```
//!
//! A client submits to whichever JobManager leads (its REST switch says so) and counts the job
//! as submitted once the JobManager answers, which it does only once the graph is in the store
//! (as `POST /jobs` answers).
//!
//! What is checked, after every cluster event, action and 50 ms:
//! - **(a) at most one JobManager acts as leader.** Acting means: leading (its switch serves,
//!   its JobManager and resource manager run) more than [`STEP_DOWN`] of running time after its
//!   leadership ended at the coordination service; or a TaskManager starting an attempt under
//!   a leader session later than the grace (`STEP_DOWN` and the network's slow tail: a
//!   deployment in flight) after a later leadership was granted. Whatever a deposed leader
//!   still sends must be refused by fencing.
//!
//!   Acting is judged where it leaves the node, too: a `SubmitTasks` frame written under a
//!   leader session at or after a later leadership was granted, or a worker asked of the
//!   driver then, is a violation. That is what the [`LeadershipLease`](crate::ha::lease)
//!   rules out: a JobManager node paused past its session runs its actors' queued messages the
//!   instant it resumes, before its leader loop sees the leadership is gone; with the lease
//!   lapsed they wait (before the lease, seeds 31 and 261 of the first sweeps asked for a worker
//!   and deployed that way). Deployments written before and delivered after are traced and
//!   counted ([`HaReport::deposed_deployments`]), not judged: no leader can recall a frame in
//!   flight, the TaskManagers' fencing and per-attempt commits handle them.
//! - **(b) no job has attempts of two leader sessions running at once**, beyond the moment
//!   TaskManagers need to hear of the new leader: TaskManagers say which session their running
//!   attempts belong to (one drops its work when it registers at another leader), and one that
//!   has been running for [`RETRIEVAL_GRACE`] since the newest of those sessions was published
//!   must not run an older one's attempts of the same job. No TaskManager hears of a new
//!   leader at the instant it is elected, so a deposed leader's attempts on a TaskManager that
//!   has not heard yet cannot be helped (a sink that commits per attempt must cope); a
//!   TaskManager that goes on with them after it could have heard is a bug.
//! - **(d) a job whose result was kept never runs again**: once a check saw a job terminal at
//!   a leader whose job result store holds its result, no JobManager writes a deployment of it
//!   (judged on the frames, as (a)). A new leader finds such a job's graph when the old one died
//!   between keeping the result and removing the graph; it must finish the cleanup instead.
//! - **(e) the published leader holds the latch**: the session that published the leader is
//!   the one whose latch node is the lowest (the election's winner). The election model
//!   ([`SimLeaderElection`](super::coordination::SimLeaderElection)) confirms as the ZooKeeper
//!   one does: only while its own latch node exists, never over another live session's leader
//!   node; [`HaAction::ExpireSessionAtConfirm`] loses a session at that moment.
//! - **(f) finished work that survived is not run again** (batch job recovery): in a seed
//!   without TaskManager or network faults and without frame loss (so every finished result
//!   survives every failover), a leader whose leadership was granted after a check saw a batch
//!   job's subtask in the job's event log as finished (attempt A) never deploys that subtask
//!   again. The log is read from the store's directory, the deployments from the frames.
//! - **ids are not reused**: no two submissions get one job id, no worker is asked for twice.
//! - **(g) collected records outlive their leader**: at the end, a typed join the leader says
//!   FINISHED is answered by `RequestJobResults` with exactly its expected lines, whichever
//!   leader it ended under (a job that ended under an earlier one is answered from the job
//!   result store).
//!
//! And at the end of the quiet phase **(c)**: exactly one JobManager leads, the one the service
//! publishes; every job that was submitted (and stored) and not seen terminal is known to it —
//! recovered with the same id — and reached a terminal state, and every job whose result was kept
//! is answered with the state it ended in (from the job result store); its pool is back at its size,
//! every started worker registered. A FINISHED WordCount wrote the exact count.
//!
//! [`Broken`] switches on a deliberately broken rule; the tests show each invariant catching
//! one. What this module must never do: judge by anything but what the actors answered and the
//! coordination service recorded.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::cluster::SimCluster;
use super::coordination::SimCoordination;
use super::driver::{DriverCommand, SimDriver};
use super::host::NodeHost;
use super::invariants::{self, JobManagerSnapshot};
use super::jobs::{self, JobSpec};
use super::network::{CrashKind, NetParams, SimNetwork};
use super::scenario::{Action, JobKind, Scenario, Target};
use super::trace::Trace;
use super::{SimReport, sim_config};
use crate::actors::resource_manager::driver::WorkerDriver;
use crate::base::ids::{ExecutionAttemptId, JobId, LeaderSessionId, ResourceId};
use crate::base::rng::NodeRng;
use crate::cluster::leader_loop::{LeaderTerms, run_leader_loop};
use crate::env::events::EventSink;
use crate::ha::JobGraphStore;
use crate::job::states::JobStatus;
use crate::messages::job_manager::{CancelJob, GetJobManagerStatus, RequestJobStatus, SubmitJob};
use crate::messages::resource_manager::{GetResourceManagerStatus, SetWorkerPoolSize};
use crate::messages::task_manager::GetTaskManagerStatus;
use crate::rest::Gateways;
use crate::rest::leader::LeaderSwitch;
use crate::rpc::endpoint::NodeEndpoint;

/// How long a JobManager may go on leading, while it runs, after its leadership ended at the
/// coordination service: its election client notices within a tick of running, and stopping
/// its actors takes a few more.
pub const STEP_DOWN: Duration = Duration::from_millis(250);

/// How long a running TaskManager may go on running a deposed leader's attempts after the next
/// leader was published: its leader retrieval sees it within a tick, and it drops the old
/// leader's work as it registers at the new one.
pub const RETRIEVAL_GRACE: Duration = Duration::from_millis(100);

/// How far over the scenario's pool an operator may resize it (`resourcemanager.max-pool-size`).
const POOL_HEADROOM: u32 = 2;

/// A rule broken on purpose, to see an invariant catch it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Broken {
    /// Nothing: the code as it is.
    #[default]
    Nothing,
    /// Election clients doubt their session only after ten session timeouts (the service
    /// expires it after one): a JobManager cut from the service goes on leading. Caught by (a).
    LateDoubt,
    /// TaskManagers learn of a change of leader only 10 s after the new one is published: the
    /// ones already running keep the deposed leader's attempts while the new leader runs the
    /// recovered job on the workers it started. Caught by (b).
    LateRetrieval,
    /// The job graph store forgets the graphs it is given (a JobManager that runs a job without
    /// persisting it): a new leader cannot recover them. Caught by (c).
    NoPersist,
    /// Lease renewals promise an hour: a JobManager node paused past its session deploys and
    /// starts workers the instant it resumes, while another leads. Caught by (a).
    EndlessLease,
    /// The coordination service forgets the pool size an operator set: a new leader starts
    /// from the configured size. Caught by (c).
    PoolSizeForgotten,
    /// The election's `confirm` publishes even when its session lost the latch (opening a new
    /// session, as Flint's did before): a JobManager whose session expired between winning and
    /// publishing leads without the latch while another wins it. Caught by (e).
    ConfirmWithoutLatch,
    /// Each JobManager keeps job results on its own disk (gone with its leadership) and job
    /// graphs can never be removed from the store (a storage error the cleanup retries): a new
    /// leader finds every ended job's graph with nothing to say it ended. Caught by (d) (batch
    /// job recovery off in this run: its event log would let the new leader take the whole job
    /// back instead of running it).
    NoJobResults,
    /// A new leader does not wait for the TaskManagers that hold a recovered batch job's
    /// finished results (`previous-worker.recovery.timeout` = 0): it reruns the first stage
    /// they kept. Caught by (f).
    NoPreviousWorkerWait,
    /// The job result store keeps a job's result but not what its tasks sent back (the files
    /// are removed as soon as a check sees the result kept): a later leader answers a finished
    /// join's `collect()` with nothing. Caught by (g).
    NoCollectedRecords,
}

/// How one HA run is shaped.
#[derive(Debug, Clone)]
pub struct HaOptions {
    /// The seed everything derives from.
    pub seed: u64,
    /// JobManager nodes contending for leadership.
    pub job_managers: usize,
    /// The coordination service's session timeout.
    pub session_timeout: Duration,
    /// Keep the trace's lines (to print a replay).
    pub keep_trace: bool,
    /// How long the quiet phase may take to converge before liveness fails.
    pub quiet_deadline: Duration,
    /// Run this scenario instead of drawing one from the seed.
    pub scenario: Option<HaScenario>,
    /// A rule broken on purpose.
    pub broken: Broken,
    /// Quick jobs already in the job graph store when the run starts (an earlier leader's).
    pub stored_jobs: usize,
    /// How long reading one job graph pointer takes.
    pub store_read_latency: Duration,
}

impl HaOptions {
    /// The defaults for `seed`: two JobManagers, a 2 s session timeout (the issue's benchmark).
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            job_managers: 2,
            session_timeout: Duration::from_secs(2),
            keep_trace: false,
            quiet_deadline: Duration::from_secs(180),
            stored_jobs: 0,
            store_read_latency: Duration::ZERO,
            scenario: None,
            broken: Broken::Nothing,
        }
    }

    /// The options of seed `seed` in `ha_sweep` (and its replay): three JobManagers one seed
    /// in four, two otherwise.
    pub fn for_sweep(seed: u64) -> Self {
        let mut options = Self::new(seed);
        if seed % 4 == 3 {
            options.job_managers = 3;
        }
        options
    }
}

/// Which JobManager a fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HaTarget {
    /// The one leading at the time (the first JobManager if none leads).
    Leader,
    /// The JobManager `index` modulo their number.
    Any(u64),
}

/// What one HA run did.
#[derive(Debug, Clone)]
pub struct HaReport {
    /// What every run reports.
    pub sim: SimReport,
    /// Leaderships the coordination service granted.
    pub leaderships: usize,
    /// Attempts TaskManagers started for a deposed leader within the grace (tolerated, see
    /// the module docs).
    pub deposed_deployments: u32,
    /// Finished subtasks a new leader took back from the job event log instead of running
    /// them again (batch job recovery), over the final leader's jobs.
    pub restored_tasks: u64,
}

impl HaReport {
    /// Whether every invariant held.
    pub fn passed(&self) -> bool {
        self.sim.passed()
    }
}

/// Runs one HA seed on a fresh paused runtime on this thread.
///
/// # Panics
///
/// If the runtime cannot be built (out of resources).
pub fn run_ha_seed(options: &HaOptions) -> HaReport {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    let system = actix::System::with_tokio_rt(move || runtime);
    system.block_on(simulate(options.clone()))
}

/// One JobManager node.
struct JobManagerHost {
    /// Its node id, `jobmanager-I:6123`.
    node: String,
    /// Its loop while it runs.
    host: Option<NodeHost>,
    /// Its leader loop's switch: which actors lead, if it leads.
    switch: LeaderSwitch,
    /// Boots so far.
    incarnation: u32,
    /// Since when it runs (booted or resumed): a deposed leader is judged from then on.
    running_since: Instant,
}

/// A job the client submitted.
struct HaJob {
    spec: JobSpec,
    id: Option<JobId>,
    answered: bool,
    /// Its graph is in the store (the client's `POST /jobs` succeeded).
    stored: bool,
    /// Some check saw it in a globally terminal state.
    seen_terminal: bool,
    /// When a check first saw it terminal with its result in the job result store of the
    /// leader that said so: from then on it must never be deployed again (d).
    result_kept_at: Option<(Instant, JobStatus)>,
    /// The status a leader last gave it.
    last_status: Option<JobStatus>,
}

/// State shared with the tasks the run spawns (the client's submissions, the drivers).
struct Shared {
    cluster: SimCluster,
    coordination: SimCoordination,
    hosts: RefCell<Vec<JobManagerHost>>,
    jobs: RefCell<Vec<HaJob>>,
    violations: RefCell<Vec<String>>,
    /// Attempts started for a deposed leader within the grace (see the module docs).
    deposed_deployments: RefCell<u32>,
    /// The pool size an operator set and the store kept last, and whether a resize is still
    /// being retried.
    pool_size: RefCell<(Option<u32>, bool)>,
    storage: PathBuf,
    /// Job results are kept per JobManager boot, not in `storage` (broken on purpose).
    local_results: bool,
    /// What jobs' tasks sent back is removed from the job result store (broken on purpose).
    lose_collected: bool,
    /// Each leadership's driver reports the running workers as recovered (see
    /// [`HaScenario::recover_workers`]).
    recover_workers: bool,
    /// Each leadership's driver sends its commands' receiver here.
    drivers: mpsc::UnboundedSender<mpsc::UnboundedReceiver<DriverCommand>>,
}

impl Shared {
    fn violation(&self, what: String) {
        let line = format!("VIOLATION at {:?}: {what}", self.cluster.now());
        self.cluster.trace.record(&line);
        let mut violations = self.violations.borrow_mut();
        if violations.len() < 20 {
            violations.push(line);
        }
    }

    /// Where JobManager `index` in boot `incarnation` keeps job results: the shared storage,
    /// unless [`Broken::NoJobResults`] keeps them on each boot's own disk.
    fn job_results_dir(&self, index: usize, incarnation: u32) -> PathBuf {
        if self.local_results {
            self.storage
                .join(format!("local-job-results-{index}-{incarnation}"))
        } else {
            self.storage.join("job-result-store")
        }
    }

    /// Whether JobManager `index` (in its current boot) keeps a result of job `id`.
    fn result_kept(&self, index: usize, id: JobId) -> bool {
        let incarnation = self.hosts.borrow()[index].incarnation;
        let dir = self.job_results_dir(index, incarnation);
        dir.join(format!("{id}.json")).is_file() || dir.join(format!("{id}_DIRTY.json")).is_file()
    }

    /// The JobManagers that lead now (running, not paused, their switch serving).
    fn leaders(&self) -> Vec<(usize, Gateways)> {
        self.hosts
            .borrow()
            .iter()
            .enumerate()
            .filter_map(|(i, h)| {
                let host = h.host.as_ref()?;
                if !host.is_up() || host.is_paused() {
                    return None;
                }
                Some((i, h.switch.leading()?))
            })
            .collect()
    }

    fn target(&self, target: HaTarget) -> usize {
        match target {
            HaTarget::Leader => self.leaders().first().map_or(0, |(i, _)| *i),
            HaTarget::Any(index) => (index % self.hosts.borrow().len() as u64) as usize,
        }
    }

    /// Boots (again) the JobManager node `index`: its endpoint, and the leader loop.
    fn boot_job_manager(self: &Rc<Self>, index: usize) {
        let (node, incarnation, switch) = {
            let mut hosts = self.hosts.borrow_mut();
            let host = &mut hosts[index];
            host.incarnation += 1;
            // The process's REST switch is new with it.
            host.switch = LeaderSwitch::new();
            (host.node.clone(), host.incarnation, host.switch.clone())
        };
        let cluster = &self.cluster;
        cluster.network.node_up(&node);
        let seed = cluster.node_seed(&node, incarnation);
        let (host, executor) = NodeHost::start();
        let network = Arc::new(cluster.network.node(&node));
        let config = cluster.endpoint_config("jobmanager", seed);
        let shared = Rc::clone(self);
        let address = node.clone();
        host.spawn(async move {
            let Ok((endpoint, resolver)) = NodeEndpoint::bind_on(config, network, executor).await
            else {
                return;
            };
            let env = shared.cluster.env("jobmanager", seed, resolver);
            let pointers = shared.coordination.job_graph_pointers(index);
            let Ok(store) = JobGraphStore::with_pointers(pointers, &shared.storage) else {
                return;
            };
            let drivers = shared.drivers.clone();
            let recover_workers = shared.recover_workers;
            let make_driver = move || -> Box<dyn WorkerDriver> {
                let (driver, commands) = if recover_workers {
                    SimDriver::recovering()
                } else {
                    SimDriver::adopting()
                };
                let _ = drivers.send(commands);
                Box::new(driver)
            };
            let job_results = shared.job_results_dir(index, incarnation);
            let terms = LeaderTerms {
                config: &shared.cluster.config,
                env,
                rest_url: format!("http://{address}"),
                address,
                make_driver: &make_driver,
                registry: super::program::registry(),
                job_results: &job_results,
                blobs: None,
            };
            let election = shared.coordination.election(index);
            run_leader_loop(election, terms, &store, &switch, std::future::pending()).await;
            drop(endpoint);
        });
        {
            let mut hosts = self.hosts.borrow_mut();
            hosts[index].host = Some(host);
            hosts[index].running_since = Instant::now();
        }
        cluster
            .trace
            .record(format!("boot {node} incarnation {incarnation}"));
    }

    /// Resumes the paused JobManager node `index`.
    fn resume(&self, index: usize, host: &NodeHost) {
        if !host.is_paused() || !host.is_up() {
            return;
        }
        host.resume();
        let node = {
            let mut hosts = self.hosts.borrow_mut();
            hosts[index].running_since = Instant::now();
            hosts[index].node.clone()
        };
        self.cluster.trace.record(format!("resume {node}"));
    }

    /// Serves one leadership's driver: checks what it is asked, then lets the cluster do it.
    async fn serve_driver(self: Rc<Self>, mut commands: mpsc::UnboundedReceiver<DriverCommand>) {
        while let Some(command) = commands.recv().await {
            if let DriverCommand::Start(request) = &command {
                if let Some(session) = request.leader_session_id
                    && let Some(superseded) = self.coordination.superseded_at(session)
                    && superseded <= Instant::now()
                {
                    self.violation(format!(
                        "(a) at most one leader: the resource manager of leader session {session} asked for worker {} {:?} after a later leadership was granted",
                        request.resource_id,
                        Instant::now() - superseded
                    ));
                }
                if self.cluster.worker_phase(&request.resource_id).is_some() {
                    self.violation(format!(
                        "worker id {} asked for twice (a leadership reused another's ids)",
                        request.resource_id
                    ));
                    continue;
                }
            }
            self.cluster.driver_command(command);
        }
    }
}

/// Puts `count` quick jobs in the job graph store, as an earlier leader would have: the first
/// leader must recover them all (and (c) checks it did).
async fn store_jobs(shared: &Shared, count: usize, rng: &mut NodeRng) {
    if count == 0 {
        return;
    }
    let pointers = shared.coordination.job_graph_pointers(0);
    let store = match JobGraphStore::with_pointers(pointers, &shared.storage) {
        Ok(store) => store,
        Err(error) => return shared.violation(format!("cannot open the job graph store: {error}")),
    };
    for index in 0..count {
        let dir = shared.cluster.scratch.join(format!("stored-{index}"));
        let spec = match jobs::build(JobKind::Noop, 1, rng, &dir) {
            Ok(spec) => spec,
            Err(error) => return shared.violation(format!("cannot build a stored job: {error}")),
        };
        let id = JobId::generate(rng);
        if let Err(error) = store.put(id, &spec.graph).await {
            return shared.violation(format!("cannot store job {id}: {error}"));
        }
        shared.jobs.borrow_mut().push(HaJob {
            spec,
            id: Some(id),
            answered: true,
            stored: true,
            seen_terminal: false,
            result_kept_at: None,
            last_status: None,
        });
    }
    shared
        .cluster
        .trace
        .record(format!("{count} jobs stored before the first leader"));
}

/// When the run began (the first JobManager's first boot).
fn start_of(shared: &Shared) -> Instant {
    shared
        .hosts
        .borrow()
        .iter()
        .map(|h| h.running_since)
        .min()
        .unwrap_or_else(Instant::now)
}

/// Where a run keeps its files (one directory per process, seed and broken rule).
fn scratch_dir(options: &HaOptions) -> PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    base.join(format!(
        "flint-sim-{}-ha-{:?}-{}-{}",
        std::process::id(),
        options.broken,
        options.scenario.is_some(),
        options.seed
    ))
}

struct HaRun {
    shared: Rc<Shared>,
    rng: NodeRng,
    /// Attempts seen running so far.
    seen_attempts: BTreeSet<ExecutionAttemptId>,
    /// When each TaskManager was last asked for its status.
    last_poll: BTreeMap<ResourceId, Instant>,
    /// How long after a later leadership was granted a TaskManager may still start a deposed
    /// leader's attempt: [`STEP_DOWN`] and the network's slow tail (a deployment in flight).
    accept_grace: Duration,
    /// No TaskManager or network fault and no frame loss: every finished result survives a
    /// failover, so (f) is judged.
    clean: bool,
    /// (f): each batch job's subtasks its event log names finished, with the attempt and when
    /// a check first saw it there.
    logged: BTreeMap<(JobId, String, u32), (ExecutionAttemptId, Instant)>,
    /// When a check first saw each (subtask, attempt) in its job's event log.
    seen_logged: BTreeMap<((JobId, String, u32), ExecutionAttemptId), Instant>,
}

async fn simulate(options: HaOptions) -> HaReport {
    let start = Instant::now();
    let trace = Trace::new(options.keep_trace);
    let mut rng = NodeRng::seed_from_u64(options.seed ^ 0x4841_5f53_494d);
    let mut scenario_rng = rng.fork();
    let scenario = match &options.scenario {
        Some(scenario) => scenario.clone(),
        None => HaScenario::generate(&mut scenario_rng, options.session_timeout),
    };
    trace.record(format!(
        "ha scenario: {} JobManagers, session timeout {:?}, pool {}, {} slots, {:?}, broken: {:?}",
        options.job_managers,
        options.session_timeout,
        scenario.pool,
        scenario.slots,
        scenario.net,
        options.broken
    ));
    let network = SimNetwork::new(rng.fork(), scenario.net, trace.clone());
    network.record_deployments();
    tokio::task::spawn_local(network.clone().run());
    let mut coordination = SimCoordination::new(options.session_timeout);
    match options.broken {
        Broken::LateDoubt => {
            coordination = coordination.with_client_doubt_after(options.session_timeout * 10)
        }
        Broken::LateRetrieval => {
            coordination = coordination.with_retrieval_delay(Duration::from_secs(10))
        }
        Broken::EndlessLease => {
            coordination = coordination.with_lease_length(Duration::from_secs(3600))
        }
        Broken::PoolSizeForgotten => coordination = coordination.forgetting_pool_size(),
        Broken::NoPersist => coordination = coordination.forgetting_job_graphs(),
        Broken::NoJobResults => coordination = coordination.failing_job_graph_removals(),
        Broken::ConfirmWithoutLatch => coordination = coordination.confirming_without_latch(),
        Broken::Nothing | Broken::NoPreviousWorkerWait | Broken::NoCollectedRecords => {}
    }
    coordination = coordination.with_read_latency(options.store_read_latency);
    tokio::task::spawn_local(coordination.clone().run());
    let events = EventSink::new(4096);
    let mut event_stream = events.subscribe().expect("an enabled sink");
    let scratch = scratch_dir(&options);
    let config_scenario = Scenario {
        initial_pool: scenario.pool,
        max_pool: scenario.pool + POOL_HEADROOM,
        slots: scenario.slots,
        net: scenario.net,
        fault_phase: scenario.fault_phase,
        steps: Vec::new(),
    };
    let mut config = sim_config(&config_scenario, options.seed);
    match options.broken {
        Broken::NoPreviousWorkerWait => {
            config.batch_job_recovery.previous_worker_recovery_timeout = Duration::ZERO;
        }
        // The event log names every region of an ended job, so a new leader would take the
        // whole job back rather than run it: without it, (d) judges the result store alone.
        Broken::NoJobResults => config.batch_job_recovery.enabled = false,
        _ => {}
    }
    let cluster = SimCluster::new(
        options.seed,
        config,
        network.clone(),
        trace.clone(),
        events,
        scratch.clone(),
    )
    .with_leader_retrieval(coordination.clone());
    let (drivers, mut driver_commands) = mpsc::unbounded_channel();
    let shared = Rc::new(Shared {
        cluster: cluster.clone(),
        coordination: coordination.clone(),
        hosts: RefCell::new(
            (0..options.job_managers)
                .map(|i| JobManagerHost {
                    node: format!("jobmanager-{i}:6123"),
                    host: None,
                    switch: LeaderSwitch::new(),
                    incarnation: 0,
                    running_since: start,
                })
                .collect(),
        ),
        jobs: RefCell::new(Vec::new()),
        violations: RefCell::new(Vec::new()),
        deposed_deployments: RefCell::new(0),
        pool_size: RefCell::new((None, false)),
        storage: scratch.join("ha-storage"),
        local_results: options.broken == Broken::NoJobResults,
        lose_collected: options.broken == Broken::NoCollectedRecords,
        recover_workers: scenario.recover_workers,
        drivers,
    });
    store_jobs(&shared, options.stored_jobs, &mut rng).await;
    // Each leadership's driver is served on the simulation's root, not on the JobManager's
    // node: the workers it boots must not die with that node.
    let serving = Rc::clone(&shared);
    tokio::task::spawn_local(async move {
        while let Some(commands) = driver_commands.recv().await {
            tokio::task::spawn_local(Rc::clone(&serving).serve_driver(commands));
        }
    });
    for index in 0..options.job_managers {
        shared.boot_job_manager(index);
    }
    let mut run = HaRun {
        shared: Rc::clone(&shared),
        rng: rng.fork(),
        seen_attempts: BTreeSet::new(),
        last_poll: BTreeMap::new(),
        accept_grace: STEP_DOWN + scenario.net.tail_latency + scenario.net.base_latency,
        clean: scenario.net.loss == 0.0
            && !(scenario.steps.iter()).any(|(_, action)| matches!(action, HaAction::Cluster(_))),
        logged: BTreeMap::new(),
        seen_logged: BTreeMap::new(),
    };

    // The fault phase.
    let check_every = Duration::from_millis(50);
    let fault_end = start + scenario.fault_phase;
    let mut next_check = start + check_every;
    let mut steps = scenario.steps.iter().peekable();
    loop {
        let next_step = steps.peek().map_or(fault_end, |(at, _)| start + *at);
        let wake = next_step.min(next_check).min(fault_end);
        tokio::select! {
            biased;
            event = event_stream.recv() => {
                match event {
                    Ok(event) => trace.record(format!("event {event}")),
                    Err(error) => trace.record(format!("event stream: {error}")),
                }
                run.check_safety().await;
                continue;
            }
            () = tokio::time::sleep_until(wake) => {}
        }
        let now = Instant::now();
        if now >= fault_end {
            break;
        }
        while let Some((_, action)) = steps.next_if(|(at, _)| start + *at <= now) {
            run.apply(action).await;
            run.check_safety().await;
        }
        if now >= next_check {
            run.check_safety().await;
            next_check = now + check_every;
        }
    }

    // The quiet phase: every JobManager reaches the service, links heal, nodes resume.
    for index in 0..options.job_managers {
        coordination.partition(index, false);
    }
    cluster.quiet();
    let paused: Vec<(usize, NodeHost)> = shared
        .hosts
        .borrow()
        .iter()
        .enumerate()
        .filter_map(|(i, h)| Some((i, h.host.clone()?)))
        .filter(|(_, host)| host.is_paused())
        .collect();
    for (index, host) in paused {
        shared.resume(index, &host);
    }
    let deadline = Instant::now() + options.quiet_deadline;
    let mut last_failure;
    loop {
        tokio::select! {
            biased;
            event = event_stream.recv() => {
                if let Ok(event) = event {
                    trace.record(format!("event {event}"));
                }
                continue;
            }
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
        run.check_safety().await;
        match run.check_liveness().await {
            Ok(()) => break,
            Err(failure) => last_failure = failure,
        }
        if Instant::now() >= deadline {
            shared.violation(format!(
                "(c) liveness: not converged {:?} after the faults stopped: {last_failure}",
                options.quiet_deadline
            ));
            break;
        }
    }
    let (jobs, failures, restored_tasks) = run.final_statuses().await;
    let leaderships = coordination.leaderships();
    for record in &leaderships {
        trace.record(format!(
            "leadership of jobmanager-{} (session {}): granted at {:?}, ended at {:?}, leader session {:?}",
            record.contender,
            record.session,
            record.granted_at - start,
            record.ended_at.map(|at| at - start),
            record.leader_session_id
        ));
    }
    trace.record("end");
    let nodes = cluster.nodes_booted() - 1
        + shared
            .hosts
            .borrow()
            .iter()
            .map(|h| h.incarnation)
            .sum::<u32>();
    let report = HaReport {
        sim: SimReport {
            seed: options.seed,
            digest: trace.digest(),
            violations: shared.violations.borrow().clone(),
            trace: trace.lines(),
            trace_len: trace.len(),
            simulated: start.elapsed(),
            nodes,
            jobs,
            failures,
            network: network.stats(),
        },
        leaderships: leaderships.len(),
        deposed_deployments: *shared.deposed_deployments.borrow(),
        restored_tasks,
    };
    let hosts: Vec<NodeHost> = shared
        .hosts
        .borrow_mut()
        .iter_mut()
        .filter_map(|h| h.host.take())
        .collect();
    for host in hosts {
        host.crash();
    }
    cluster.tear_down();
    let _ = std::fs::remove_dir_all(&scratch);
    report
}

impl HaRun {
    async fn apply(&mut self, action: &HaAction) {
        let shared = Rc::clone(&self.shared);
        let cluster = shared.cluster.clone();
        match action {
            HaAction::Submit { kind, parallelism } => self.submit(*kind, *parallelism),
            HaAction::Cancel(index) => {
                let ids: Vec<JobId> = shared.jobs.borrow().iter().filter_map(|j| j.id).collect();
                let Some((_, leader)) = shared.leaders().into_iter().next() else {
                    return;
                };
                if ids.is_empty() {
                    return;
                }
                let id = ids[(index % ids.len() as u64) as usize];
                cluster.trace.record(format!("action cancel {id}"));
                let trace = cluster.trace.clone();
                tokio::task::spawn_local(async move {
                    let answer = leader.job_manager.cancel_job.send(CancelJob { job_id: id });
                    trace.record(format!("answer cancel {id}: {:?}", answer.await));
                });
            }
            HaAction::SetPoolSize(size) => self.set_pool_size(*size),
            HaAction::CutFromCoordination { target, duration } => {
                let index = shared.target(*target);
                shared.coordination.partition(index, true);
                cluster.trace.record(format!(
                    "fault cut jobmanager-{index} from the coordination service for {duration:?}"
                ));
                let duration = *duration;
                tokio::task::spawn_local(async move {
                    tokio::time::sleep(duration).await;
                    shared.coordination.partition(index, false);
                    shared.cluster.trace.record(format!(
                        "heal jobmanager-{index} and the coordination service"
                    ));
                });
            }
            HaAction::Pause {
                target,
                duration,
                client_lag,
            } => {
                let index = shared.target(*target);
                let Some(host) = shared.hosts.borrow()[index].host.clone() else {
                    return;
                };
                if host.is_paused() {
                    return;
                }
                host.pause();
                cluster.trace.record(format!(
                    "fault pause jobmanager-{index} for {duration:?}, its coordination client {client_lag:?} longer"
                ));
                let (duration, client_lag) = (*duration, *client_lag);
                shared
                    .coordination
                    .starve(index, Instant::now() + duration + client_lag);
                tokio::task::spawn_local(async move {
                    tokio::time::sleep(duration).await;
                    shared.resume(index, &host);
                });
            }
            HaAction::Kill {
                target,
                restart_after,
            } => {
                let index = shared.target(*target);
                let (host, node) = {
                    let mut hosts = shared.hosts.borrow_mut();
                    (hosts[index].host.take(), hosts[index].node.clone())
                };
                let Some(host) = host else {
                    return;
                };
                cluster.network.node_down(&node, CrashKind::Process);
                host.crash();
                cluster.trace.record(format!(
                    "fault kill {node}, booting again in {restart_after:?}"
                ));
                let restart_after = *restart_after;
                tokio::task::spawn_local(async move {
                    tokio::time::sleep(restart_after).await;
                    shared.boot_job_manager(index);
                });
            }
            HaAction::ExpireSessionAtConfirm(target) => {
                let index = shared.target(*target);
                shared.coordination.expire_session_at_next_confirm(index);
                cluster.trace.record(format!(
                    "fault jobmanager-{index}'s session expires at its next confirm"
                ));
            }
            HaAction::Cluster(action) => match action {
                Action::Crash { target, kind } => cluster.crash(*target, *kind),
                Action::Restart(index) => cluster.restart(*index).await,
                Action::Pause {
                    target: Target::TaskManager(index),
                    duration,
                } => cluster.pause(Some(*index), *duration),
                Action::Partition {
                    target,
                    both,
                    towards_job_manager,
                    duration,
                } => {
                    let leader = shared.target(HaTarget::Leader);
                    let jm = shared.hosts.borrow()[leader].node.clone();
                    cluster.partition_from(&jm, *target, *both, *towards_job_manager, *duration);
                }
                Action::ResetConnection(index) => {
                    if let Some((a, b)) = cluster.network.reset_connection(*index) {
                        cluster.trace.record(format!("fault reset {a} <-> {b}"));
                    }
                }
                other => cluster
                    .trace
                    .record(format!("action {other:?} is not part of the HA family")),
            },
        }
    }

    /// An operator's `PUT /cluster/pool-size`, retried at whoever leads (as the 503 says) until
    /// the store kept it.
    fn set_pool_size(&mut self, size: u32) {
        let shared = Rc::clone(&self.shared);
        shared
            .cluster
            .trace
            .record(format!("action pool size {size}"));
        shared.pool_size.borrow_mut().1 = true;
        tokio::task::spawn_local(async move {
            let give_up = Instant::now() + Duration::from_secs(60);
            let outcome = loop {
                if Instant::now() >= give_up {
                    break "given up after 60 s".to_owned();
                }
                let Some((contender, leader)) = shared.leaders().into_iter().next() else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let set = leader
                    .resource_manager
                    .set_worker_pool_size
                    .send(SetWorkerPoolSize { size })
                    .await;
                if !matches!(set, Ok(Ok(_))) {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                let pointers = shared.coordination.job_graph_pointers(contender);
                let kept = match JobGraphStore::with_pointers(pointers, &shared.storage) {
                    Ok(store) => store.put_pool_size(size).await,
                    Err(error) => Err(error),
                };
                match kept {
                    Ok(()) => {
                        shared.pool_size.borrow_mut().0 = Some(size);
                        break format!("set and kept by jobmanager-{contender}");
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                }
            };
            shared.pool_size.borrow_mut().1 = false;
            shared
                .cluster
                .trace
                .record(format!("answer pool size {size}: {outcome}"));
        });
    }

    /// Builds the job and hands it to a client task: wait for a leader, submit (answered once
    /// the graph is stored, as `POST /jobs` is).
    fn submit(&mut self, kind: JobKind, parallelism: u32) {
        let shared = Rc::clone(&self.shared);
        let index = shared.jobs.borrow().len();
        let dir = shared.cluster.scratch.join(format!("job-{index}"));
        let spec = match jobs::build(kind, parallelism, &mut self.rng, &dir) {
            Ok(spec) => spec,
            Err(error) => {
                shared.violation(format!("cannot build a {kind:?} job: {error}"));
                return;
            }
        };
        shared.cluster.trace.record(format!(
            "action submit {kind:?} x{parallelism} as job {index}"
        ));
        let graph = spec.graph.clone();
        shared.jobs.borrow_mut().push(HaJob {
            spec,
            id: None,
            answered: false,
            stored: false,
            seen_terminal: false,
            result_kept_at: None,
            last_status: None,
        });
        tokio::task::spawn_local(async move {
            let give_up = Instant::now() + Duration::from_secs(60);
            let (contender, leader) = loop {
                if let Some(leader) = shared.leaders().into_iter().next() {
                    break leader;
                }
                if Instant::now() >= give_up {
                    shared
                        .cluster
                        .trace
                        .record(format!("submit job {index}: no leader for 60 s"));
                    shared.jobs.borrow_mut()[index].answered = true;
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            let answer = leader
                .job_manager
                .submit_job
                .send(SubmitJob::new(graph.clone()))
                .await;
            let trace = shared.cluster.trace.clone();
            trace.record(format!(
                "answer submit job {index} by jobmanager-{contender}: {answer:?}"
            ));
            let Ok(Ok(id)) = answer else {
                shared.jobs.borrow_mut()[index].answered = true;
                return;
            };
            if shared.jobs.borrow().iter().any(|j| j.id == Some(id)) {
                shared.violation(format!(
                    "job id {id} given to two submissions (a leadership reused another's ids)"
                ));
            }
            // Answered once the JobManager stored the graph (`POST /jobs` answers then).
            let mut jobs = shared.jobs.borrow_mut();
            jobs[index].id = Some(id);
            jobs[index].answered = true;
            jobs[index].stored = true;
        });
    }
}

mod checks;
mod scenario;

pub use scenario::{HaAction, HaScenario};

#[cfg(test)]
mod tests;
