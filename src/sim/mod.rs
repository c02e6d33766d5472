//! Deterministic simulation of the whole cluster (DESIGN §8).
//!
//! One seed is one run: a JobManager node and the TaskManager nodes its resource manager asks
//! for, all in one actix System on a paused current-thread tokio runtime, each node in its own
//! `LocalSet` ([`host`]) with its own endpoint on a [`network::SimNetwork`] that delays, loses,
//! reorders and cuts the real frames of the real transport. Everything a node does that is not
//! deterministic comes from its `NodeEnv`: an RNG seeded per node and incarnation, the
//! simulation's clock, and the [`lockstep`] task runner, under which task code
//! runs on its own thread but strictly in turn with the simulation, sleeping in virtual time.
//!
//! ```text
//!  seed ─▶ Scenario (pool sizes, jobs, cancels, crashes, restarts, pauses, cuts, resets,
//!          stale-leader messages, driver start failures) ─▶ fault phase ─▶ quiet phase
//!  after every cluster event, action and 50 ms: safety checks     at the end: liveness checks
//!  everything recorded in a Trace ─▶ digest (same seed, same digest)
//! ```
//!
//! `FLINT_SIM_SEED=n cargo test --test simulation -- --nocapture` replays seed `n` and prints
//! its trace; `FLINT_SIM_SEEDS=100000` runs a longer sweep.
//!
//! [`ha`] is the high-availability family: several JobManager nodes on the real leader loop,
//! elected through the simulated [`coordination`] service, TaskManagers following the
//! published leader; its own scenarios and invariants, on the same cluster, network and hosts.

pub mod cluster;
pub mod coordination;
pub mod driver;
pub mod fencing;
pub mod ha;
pub mod host;
pub mod intruder;
pub mod invariants;
pub mod jobs;
pub mod lockstep;
pub mod network;
pub mod program;
pub mod scenario;
pub mod trace;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use tokio::time::Instant;

use self::cluster::SimCluster;
use self::invariants::{Disturbance, JobManagerSnapshot, JobShape};
use self::jobs::JobSpec;
use self::network::{NetStats, SimNetwork};
use self::scenario::{Action, JobKind, Scenario, Shape, Target};
use self::trace::Trace;
use crate::base::ids::{JobId, LeaderSessionId, ResourceId};
use crate::base::rng::NodeRng;
use crate::config::ClusterConfig;
use crate::env::events::{ClusterEvent, EventSink};
use crate::job::states::JobStatus;
use crate::messages::job_manager::{CancelJob, GetJobManagerStatus, RequestJobStatus, SubmitJob};
use crate::messages::resource_manager::{GetResourceManagerStatus, SetWorkerPoolSize};
use crate::messages::task_manager::GetTaskManagerStatus;

/// How one run is shaped.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// The seed everything derives from.
    pub seed: u64,
    /// How big the scenario may get.
    pub shape: Shape,
    /// Keep the trace's lines (to print a replay).
    pub keep_trace: bool,
    /// How long the quiet phase may take to converge before liveness fails.
    pub quiet_deadline: Duration,
    /// Run this scenario instead of drawing one from the seed (a hand-made case; the seed still
    /// drives the network, the nodes and the jobs' data).
    pub scenario: Option<Scenario>,
}

impl SimOptions {
    /// The defaults for `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            shape: Shape::default(),
            keep_trace: false,
            quiet_deadline: Duration::from_secs(180),
            scenario: None,
        }
    }
}

/// What one run did.
#[derive(Debug, Clone)]
pub struct SimReport {
    /// The seed.
    pub seed: u64,
    /// The trace's digest.
    pub digest: String,
    /// Invariants that failed, in order.
    pub violations: Vec<String>,
    /// The trace's lines, if kept.
    pub trace: Vec<String>,
    /// Trace lines recorded.
    pub trace_len: u64,
    /// Virtual time simulated.
    pub simulated: Duration,
    /// Nodes booted (incarnations included).
    pub nodes: u32,
    /// Each submitted job's kind and final status.
    pub jobs: Vec<(JobKind, Option<JobStatus>)>,
    /// Why each FAILED job failed (its kind and the JobManager's reason), in submission order.
    pub failures: Vec<(JobKind, String)>,
    /// The network's counters.
    pub network: NetStats,
}

impl SimReport {
    /// Whether every invariant held.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Runs one seed on a fresh paused runtime on this thread.
///
/// # Panics
///
/// If the runtime cannot be built (out of resources).
pub fn run_seed(options: &SimOptions) -> SimReport {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    let system = actix::System::with_tokio_rt(move || runtime);
    system.block_on(simulate(options.clone()))
}

/// The cluster configuration of a run: Flink's defaults, with heartbeats and timeouts scaled so
/// a run sees several of each within seconds of virtual time.
pub fn sim_config(scenario: &Scenario, seed: u64) -> ClusterConfig {
    let mut config = ClusterConfig::default();
    config.heartbeat.interval = Duration::from_secs(1);
    config.heartbeat.timeout = Duration::from_secs(5);
    config.resourcemanager.pool_size = scenario.initial_pool;
    config.resourcemanager.max_pool_size = scenario.max_pool.max(scenario.initial_pool);
    config.resourcemanager.taskmanager_registration.timeout = Duration::from_secs(20);
    config.taskmanager.slots = scenario.slots;
    config.taskmanager.spill_threshold = 1 << 30;
    config.slot.request.timeout = Duration::from_secs(30);
    config.task.cancellation.interval = Duration::from_secs(1);
    config.task.cancellation.timeout = Duration::from_secs(10);
    config.seed = Some(seed);
    // Both queue orders, the default (backfill) three runs in four, so liveness covers both.
    config.jobmanager.scheduler.region_order = if seed % 4 == 3 {
        crate::config::RegionOrderKind::Fifo
    } else {
        crate::config::RegionOrderKind::Backfill
    };
    config
}

/// Where a run keeps its files: one directory per process, job mix, kind of scenario and seed,
/// so sweeps of different mixes running the same seeds side by side (as `cargo test` does) never
/// share one. It stays the same for the same options, so a replay sees the same paths.
fn scratch_dir(options: &SimOptions) -> PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let kind = if options.scenario.is_some() {
        "custom"
    } else {
        match options.shape.jobs {
            scenario::JobMix::Classic => "classic",
            scenario::JobMix::DataPlane => "data",
            scenario::JobMix::NonCooperative => "non-cooperative",
            scenario::JobMix::Programs => "programs",
        }
    };
    base.join(format!(
        "flint-sim-{}-{kind}-{}",
        std::process::id(),
        options.seed
    ))
}

/// The scratch directories of the runs in progress in this process. Two runs of the same
/// options use the same directory (a regression test of seed N and the sweep that contains N,
/// side by side in one test binary): they take turns, or one run's cleanup would delete the
/// other's files.
static SCRATCH_IN_USE: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
static SCRATCH_RELEASED: std::sync::Condvar = std::sync::Condvar::new();

/// A scratch directory held by one run (see [`SCRATCH_IN_USE`]); released when dropped.
struct ScratchClaim(PathBuf);

impl ScratchClaim {
    /// Waits until no other run of this process uses `dir`, then holds it.
    fn take(dir: PathBuf) -> Self {
        let unpoisoned = std::sync::PoisonError::into_inner;
        let mut in_use = SCRATCH_IN_USE.lock().unwrap_or_else(unpoisoned);
        while in_use.contains(&dir) {
            in_use = SCRATCH_RELEASED.wait(in_use).unwrap_or_else(unpoisoned);
        }
        in_use.push(dir.clone());
        Self(dir)
    }
}

impl Drop for ScratchClaim {
    fn drop(&mut self) {
        let mut in_use = SCRATCH_IN_USE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        in_use.retain(|dir| *dir != self.0);
        drop(in_use);
        SCRATCH_RELEASED.notify_all();
    }
}

/// A job the run submitted.
struct Submitted {
    spec: JobSpec,
    shape: JobShape,
    id: Option<JobId>,
    /// Whether the JobManager answered the submission (a refused job has no id).
    answered: bool,
}

struct Run {
    cluster: SimCluster,
    jobs: Rc<RefCell<Vec<Submitted>>>,
    violations: Vec<String>,
    rng: NodeRng,
    /// Since when (virtual) each worker has been missing from the JobManager's registrations.
    unregistered_since: BTreeMap<ResourceId, Duration>,
    /// The pool size the operator (the scenario) set last.
    operator_pool: u32,
    /// Everything so far that may have failed a task: what a FAILED job is judged against.
    disturbances: Vec<Disturbance>,
    /// Deployments lost by the network so far that are counted in `disturbances`.
    deployments_lost_seen: u64,
    /// The intruders started, each with its task and what became of it.
    intruders: Vec<intruder::Started>,
}

/// How long after a fault ends it may still fail a task: heartbeat and registration timeouts
/// noticing it, updates retried, restarts placed on a TaskManager that is about to be lost.
const DISTURBANCE_GRACE: Duration = Duration::from_secs(30);

async fn simulate(options: SimOptions) -> SimReport {
    let start = Instant::now();
    let trace = Trace::new(options.keep_trace);
    let mut rng = NodeRng::seed_from_u64(options.seed);
    let mut scenario_rng = rng.fork();
    let scenario = match &options.scenario {
        Some(scenario) => scenario.clone(),
        None => Scenario::generate(&mut scenario_rng, options.shape),
    };
    trace.record(format!(
        "scenario pool {} (max {}), {} slots, {:?}",
        scenario.initial_pool, scenario.max_pool, scenario.slots, scenario.net
    ));
    let network = SimNetwork::new(rng.fork(), scenario.net, trace.clone());
    tokio::task::spawn_local(network.clone().run());
    if options.shape.jobs == scenario::JobMix::DataPlane {
        network.count_deployments();
    }
    let events = EventSink::new(4096);
    let mut event_stream = events.subscribe().expect("an enabled sink");
    let claim = ScratchClaim::take(scratch_dir(&options));
    let scratch = claim.0.clone();
    let mut config = sim_config(&scenario, options.seed);
    if options.shape.jobs == scenario::JobMix::DataPlane {
        // Network buffers of 64 B or 512 B in two seeds of three (a job's few kilobytes then
        // span dozens of buffers, so producers wait for credit, channels report backlogs and
        // borrow floating buffers, all under the faults); Flink's defaults in the third.
        let variant = (options.seed % 3) as usize;
        config.taskmanager.network_buffer_size = [64, 512, 32 << 10][variant];
        config.taskmanager.network_buffers_per_channel = [1, 2, 2][variant];
        config.taskmanager.network_floating_buffers_per_gate = [1, 2, 8][variant];
        // With Flink's defaults, gates of few channels take the wide window in half of those
        // seeds (the pools of the small buffers never have room for it).
        if variant == 2 && (options.seed / 3).is_multiple_of(2) {
            config.taskmanager.network_gate_window = 32 << 10;
        }
        // Pipelined outputs of few subpartitions hold their share of the 4 MiB output window
        // in half of the seeds (with the small buffers, as much as the pool lends); Flink's ten
        // buffers per subpartition in the other half, so producers wait on a full subpartition.
        if (options.seed / 12).is_multiple_of(2) {
            config.taskmanager.network_output_window = 1;
        }
        // With the small buffers, a pool of 160 (120 for floors, 40 to lend): wide gates take
        // the floating mode (credit lent on announced backlogs), producers wait for lent
        // buffers, and a deployment may be refused for floors that do not fit.
        if variant < 2 {
            config.taskmanager.network_memory = 160 * config.taskmanager.network_buffer_size;
        }
        // Gates in the floating mode keep one buffer of a floor of two as their producers'
        // eager allowance (channels' small buffers go without credit): in half of the seeds
        // their floor is one buffer, so every channel announces its backlog and waits for
        // credit, as before the allowance.
        if (options.seed / 6).is_multiple_of(2) {
            config.taskmanager.network_required_per_gate = 1;
        }
    }
    let mut cluster = SimCluster::new(
        options.seed,
        config,
        network.clone(),
        trace.clone(),
        events,
        scratch.clone(),
    );
    // Half of the programs seeds run TaskManagers of two builds: the program's tasks may go
    // only where its operators are (checked by `slots_consistent`).
    if options.shape.jobs == scenario::JobMix::Programs && options.seed % 2 == 1 {
        cluster = cluster.with_two_builds();
    }
    // Half of the data-plane seeds (across the buffer variants) cut request rounds and answers
    // into messages of a few requests or notices each.
    if options.shape.jobs == scenario::JobMix::DataPlane && (options.seed / 3).is_multiple_of(2) {
        cluster = cluster.with_tiny_messages();
    }
    cluster.boot_job_manager().await;
    let mut run = Run {
        cluster: cluster.clone(),
        jobs: Rc::new(RefCell::new(Vec::new())),
        violations: Vec::new(),
        rng: rng.fork(),
        unregistered_since: BTreeMap::new(),
        operator_pool: scenario.initial_pool,
        disturbances: Vec::new(),
        deployments_lost_seen: 0,
        intruders: Vec::new(),
    };

    // The fault phase: actions at their times, a safety check after each, after every cluster
    // event and every 50 ms.
    let check_every = Duration::from_millis(50);
    let fault_end = start + scenario.fault_phase;
    let mut next_check = start + check_every;
    let mut steps = scenario.steps.iter().peekable();
    loop {
        let next_step = steps.peek().map_or(fault_end, |s| start + s.at);
        let wake = next_step.min(next_check).min(fault_end);
        tokio::select! {
            biased;
            event = event_stream.recv() => {
                match event {
                    Ok(event) => {
                        run.note_event(&event);
                        trace.record(format!("event {event}"));
                    }
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
        while let Some(step) = steps.next_if(|s| start + s.at <= now) {
            run.apply(&step.action).await;
            run.check_safety().await;
        }
        if now >= next_check {
            run.check_safety().await;
            next_check = now + check_every;
        }
    }

    // The quiet phase: faults off; the cluster must converge and every job end.
    cluster.quiet();
    let deadline = Instant::now() + options.quiet_deadline;
    let mut last_failure;
    loop {
        tokio::select! {
            biased;
            event = event_stream.recv() => {
                if let Ok(event) = event {
                    run.note_event(&event);
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
            run.violation(format!(
                "liveness: not converged {:?} after the faults stopped: {last_failure}",
                options.quiet_deadline
            ));
            break;
        }
    }
    run.check_intruders().await;
    let (jobs, failures) = run.final_statuses().await;

    let simulated = start.elapsed();
    trace.record("end");
    let report = SimReport {
        seed: options.seed,
        digest: trace.digest(),
        violations: run.violations.clone(),
        trace: trace.lines(),
        trace_len: trace.len(),
        simulated,
        nodes: cluster.nodes_booted(),
        jobs,
        failures,
        network: network.stats(),
    };
    cluster.tear_down();
    let _ = std::fs::remove_dir_all(&scratch);
    drop(claim);
    report
}

impl Run {
    fn violation(&mut self, what: String) {
        let line = format!("VIOLATION at {:?}: {what}", self.cluster.now());
        self.cluster.trace.record(&line);
        if self.violations.len() < 20 {
            self.violations.push(line);
        }
    }

    /// Every intruder was dropped (or could not connect), none admitted; waits for those still
    /// trying (each gives up after [`intruder::INTRUDER_PATIENCE`]).
    async fn check_intruders(&mut self) {
        for (n, (task, outcome)) in std::mem::take(&mut self.intruders).into_iter().enumerate() {
            let _ = task.await;
            let outcome = outcome.get();
            self.cluster
                .trace
                .record(format!("intruder {n}: {outcome:?}"));
            match outcome {
                Some(intruder::Outcome::NoConnection | intruder::Outcome::Dropped(_)) => {}
                other => self.violation(format!(
                    "intruder {n} without the secret was not dropped by the JobManager: {other:?}"
                )),
            }
        }
    }

    /// A TaskManager the JobManager lost may fail tasks.
    fn note_event(&mut self, event: &ClusterEvent) {
        if let ClusterEvent::TaskManagerLost { .. } = event {
            self.disturbed(Duration::ZERO);
        }
    }

    /// Something that may fail tasks began now and lasts `duration`.
    fn disturbed(&mut self, duration: Duration) {
        let from_ms = self.cluster.now_ms();
        let until_ms = from_ms + (duration + DISTURBANCE_GRACE).as_millis() as u64;
        self.disturbances.push(Disturbance { from_ms, until_ms });
    }

    async fn apply(&mut self, action: &Action) {
        match action {
            // A shrink may release a TaskManager holding results a job still reads.
            Action::SetPoolSize(_) | Action::Crash { .. } | Action::ResetConnection(_) => {
                self.disturbed(Duration::ZERO)
            }
            Action::Pause { duration, .. } | Action::Partition { duration, .. } => {
                self.disturbed(*duration)
            }
            Action::Submit { .. }
            | Action::Cancel(_)
            | Action::Restart(_)
            | Action::StaleLeader(_)
            | Action::StartFailures(_)
            | Action::Intrude(_) => {}
        }
        let cluster = self.cluster.clone();
        let handles = cluster.job_manager();
        match action {
            Action::SetPoolSize(size) => {
                cluster.trace.record(format!("action pool size {size}"));
                self.operator_pool = *size;
                let rm = handles.resource_manager.clone();
                let trace = cluster.trace.clone();
                let size = *size;
                tokio::task::spawn_local(async move {
                    let answer = rm.send(SetWorkerPoolSize { size }).await;
                    trace.record(format!("answer pool size {size}: {answer:?}"));
                });
            }
            Action::Submit { kind, parallelism } => {
                let index = self.jobs.borrow().len();
                let dir = cluster.scratch.join(format!("job-{index}"));
                let spec = match jobs::build(*kind, *parallelism, &mut self.rng, &dir) {
                    Ok(spec) => spec,
                    Err(error) => {
                        self.violation(format!("cannot build a {kind:?} job: {error}"));
                        return;
                    }
                };
                // Uploaded first, as `flint run --artifact` does.
                for file in &spec.artifacts {
                    let stored =
                        crate::env::blob_store::BlobStore::open(&cluster.blob_dir(), u64::MAX)
                            .and_then(|store| {
                                let reader = std::fs::File::open(file).map_err(|source| {
                                    crate::env::blob_store::BlobError::Io {
                                        operation: "open",
                                        path: file.clone(),
                                        source,
                                    }
                                })?;
                                store.put(reader, None)
                            });
                    if let Err(error) = stored {
                        self.violation(format!(
                            "cannot store an artifact of a {kind:?} job: {error}"
                        ));
                        return;
                    }
                }
                cluster.trace.record(format!(
                    "action submit {kind:?} x{parallelism} as job {index}"
                ));
                let graph = spec.graph.clone();
                self.jobs.borrow_mut().push(Submitted {
                    shape: JobShape {
                        misconfigured: *kind == JobKind::Misconfigured,
                        ..JobShape::of(&spec.graph)
                    },
                    spec,
                    id: None,
                    answered: false,
                });
                let jm = handles.job_manager.clone();
                let jobs = Rc::clone(&self.jobs);
                let trace = cluster.trace.clone();
                tokio::task::spawn_local(async move {
                    let answer = jm.send(SubmitJob::new(graph)).await;
                    trace.record(format!("answer submit job {index}: {answer:?}"));
                    let mut jobs = jobs.borrow_mut();
                    jobs[index].answered = answer.is_ok();
                    if let Ok(Ok(id)) = answer {
                        jobs[index].id = Some(id);
                    }
                });
            }
            Action::Cancel(index) => {
                let ids: Vec<JobId> = self.jobs.borrow().iter().filter_map(|j| j.id).collect();
                if ids.is_empty() {
                    return;
                }
                let id = ids[(index % ids.len() as u64) as usize];
                cluster.trace.record(format!("action cancel {id}"));
                let jm = handles.job_manager.clone();
                let trace = cluster.trace.clone();
                tokio::task::spawn_local(async move {
                    let answer = jm.send(CancelJob { job_id: id }).await;
                    trace.record(format!("answer cancel {id}: {answer:?}"));
                });
            }
            Action::Crash { target, kind } => cluster.crash(*target, *kind),
            Action::Restart(index) => cluster.restart(*index).await,
            Action::Pause { target, duration } => {
                let target = match target {
                    Target::JobManager => None,
                    Target::TaskManager(index) => Some(*index),
                };
                cluster.pause(target, *duration);
            }
            Action::Partition {
                target,
                both,
                towards_job_manager,
                duration,
            } => cluster.partition(*target, *both, *towards_job_manager, *duration),
            Action::ResetConnection(index) => {
                if let Some((a, b)) = cluster.network.reset_connection(*index) {
                    cluster.trace.record(format!("fault reset {a} <-> {b}"));
                }
            }
            Action::StaleLeader(index) => self.stale_leader(*index).await,
            Action::Intrude(kind) => {
                let n = self.intruders.len();
                cluster
                    .trace
                    .record(format!("fault intruder {n} ({kind:?}) -> jobmanager"));
                let outcome = Rc::new(std::cell::Cell::new(None));
                let task = tokio::task::spawn_local(intruder::intrude(
                    cluster.network.node(&format!("intruder-{n}:1")),
                    cluster::JOB_MANAGER_NODE.to_owned(),
                    *kind,
                    cluster.config.cluster.id.clone(),
                    self.rng.next_u64(),
                    Rc::clone(&outcome),
                ));
                self.intruders.push((task, outcome));
            }
            Action::StartFailures(share) => {
                cluster
                    .trace
                    .record(format!("fault start failures {share}"));
                cluster.set_start_failures(*share);
            }
        }
    }

    /// A message from a leader session that is not the current one must change nothing: probe
    /// the resource manager and one running TaskManager (see [`fencing`]).
    async fn stale_leader(&mut self, index: u64) {
        let handles = self.cluster.job_manager();
        if !handles.host.is_paused() {
            let stale = LeaderSessionId::generate(&mut self.rng);
            match fencing::probe_resource_manager(&handles.resource_manager, stale, index).await {
                Some(Ok(victim)) => self
                    .cluster
                    .trace
                    .record(format!("fault stale leader ReleaseResource {victim}")),
                Some(Err(violation)) => self.violation(violation),
                None => {}
            }
            if let Err(violation) =
                fencing::probe_job_manager(&handles.job_manager, stale, index).await
            {
                self.violation(violation);
            }
        }
        let task_managers = self.cluster.running_task_managers();
        if task_managers.is_empty() {
            return;
        }
        let (id, tm, _) = &task_managers[(index % task_managers.len() as u64) as usize];
        self.cluster.trace.record(format!(
            "fault stale leader SubmitTasks/CancelTasks/ReleaseJobPartitions {id}"
        ));
        if let Err(violation) = fencing::probe_task_manager(tm, id, &mut self.rng).await {
            self.violation(violation);
        }
    }

    /// The JobManager node's view, asked in one burst: the resource manager's status, then the
    /// JobManager's status and every known job's details back to back.
    async fn snapshot(&self) -> Option<JobManagerSnapshot> {
        let handles = self.cluster.job_manager();
        if handles.host.is_paused() {
            return None;
        }
        let ids: Vec<JobId> = self.jobs.borrow().iter().filter_map(|j| j.id).collect();
        let pool = handles.resource_manager.send(GetResourceManagerStatus);
        let status = handles.job_manager.send(GetJobManagerStatus);
        let details: Vec<_> = ids
            .iter()
            .map(|id| handles.job_manager.send(RequestJobStatus { job_id: *id }))
            .collect();
        let pool = pool.await.ok()?;
        let cluster = status.await.ok()?;
        let mut jobs = Vec::new();
        for answer in details {
            if let Ok(Ok(details)) = answer.await {
                jobs.push(details);
            }
        }
        Some(JobManagerSnapshot {
            pool,
            cluster,
            jobs,
        })
    }

    async fn check_safety(&mut self) {
        self.cluster.reap_stopped_task_managers();
        // A deployment (or its answer) the network lost fails its task at the ask timeout.
        let lost = self.cluster.network.stats().deployments_lost;
        while self.deployments_lost_seen < lost {
            self.deployments_lost_seen += 1;
            self.disturbed(Duration::ZERO);
        }
        let Some(snapshot) = self.snapshot().await else {
            return;
        };
        let max = self.cluster.config.resourcemanager.max_pool_size;
        if let Err(what) = invariants::pool_within_bounds(&snapshot.pool, max) {
            self.violation(what);
        }
        if let Err(what) = invariants::slots_consistent(&snapshot, &self.shapes()) {
            self.violation(what);
        }
        self.check_slot_tables(&snapshot).await;
        self.check_orphans(&snapshot).await;
    }

    /// Each submitted job's shape, by the id the JobManager gave it.
    fn shapes(&self) -> BTreeMap<JobId, JobShape> {
        self.jobs
            .borrow()
            .iter()
            .filter_map(|j| Some((j.id?, j.shape.clone())))
            .collect()
    }

    /// Every running TaskManager registered at the JobManager agrees with it on its slots, and
    /// none that says it is registered still runs a task of an earlier connection (drain, then
    /// free: it registers again only once those have ended).
    async fn check_slot_tables(&mut self, snapshot: &JobManagerSnapshot) {
        let registered = snapshot.registered();
        for (id, task_manager, _) in self.cluster.running_task_managers() {
            let Ok(status) = task_manager.send(GetTaskManagerStatus).await else {
                continue;
            };
            if let Err(what) = invariants::drained_before_registering(&status) {
                self.violation(what);
            }
            if !registered.contains(&id) {
                continue;
            }
            if let Err(what) = invariants::slot_tables_agree(&snapshot.cluster, &status) {
                self.violation(what);
            }
        }
    }

    /// No TaskManager keeps work the JobManager gave up on: one that has been running, yet not
    /// registered at the JobManager, for longer than its heartbeat timeout (and an interval)
    /// must run no task attempt and hold no slots — except cancelled tasks of its earlier
    /// connection still draining, for at most the cancellation watchdog's timeout more (then
    /// the watchdog fails the TaskManager).
    async fn check_orphans(&mut self, snapshot: &JobManagerSnapshot) {
        let now = self.cluster.now();
        let heartbeat = self.cluster.config.heartbeat;
        let grace = invariants::orphan_grace(heartbeat.interval, heartbeat.timeout);
        let cancellation = self.cluster.config.task.cancellation;
        let drain_grace = grace + cancellation.timeout + cancellation.interval;
        let registered = snapshot.registered();
        let running = self.cluster.running_task_managers();
        self.unregistered_since
            .retain(|id, _| running.iter().any(|(r, _, _)| r == id));
        for (id, task_manager, running_since) in running {
            if registered.contains(&id) {
                self.unregistered_since.remove(&id);
                continue;
            }
            let since = *self.unregistered_since.entry(id.clone()).or_insert(now);
            if now.saturating_sub(since.max(running_since)) <= grace {
                continue;
            }
            let Ok(status) = task_manager.send(GetTaskManagerStatus).await else {
                continue;
            };
            let draining = now.saturating_sub(since.max(running_since)) <= drain_grace;
            let live: Vec<_> = status.running.iter().filter(|t| !t.orphaned).collect();
            if draining && live.is_empty() && !status.running.is_empty() {
                continue; // its earlier connection's cancelled tasks may still end
            }
            if let Some(task) = live.first().copied().or(status.running.first()) {
                self.violation(format!(
                    "{id} still runs {} (and {} more) {:?} after the JobManager dropped it",
                    task.attempt,
                    status.running.len() - 1,
                    now.saturating_sub(since)
                ));
            } else if status.slots_free < status.slots_total {
                self.violation(format!(
                    "{id} holds {} slots {:?} after the JobManager dropped it",
                    status.slots_total - status.slots_free,
                    now.saturating_sub(since)
                ));
            }
        }
    }

    async fn check_liveness(&mut self) -> Result<(), String> {
        let snapshot = self
            .snapshot()
            .await
            .ok_or("the JobManager does not answer")?;
        invariants::pool_converged(&snapshot)?;
        invariants::operator_size_kept(&snapshot.pool, self.operator_pool)?;
        let pending = self.jobs.borrow().iter().filter(|j| !j.answered).count();
        if pending > 0 {
            return Err(format!("{pending} submissions unanswered"));
        }
        invariants::jobs_ended(&snapshot.jobs, &self.shapes(), &self.disturbances)?;
        let registered = snapshot.registered();
        for (id, task_manager, _) in self.cluster.running_task_managers() {
            if !registered.contains(&id) {
                continue;
            }
            let status = task_manager
                .send(GetTaskManagerStatus)
                .await
                .map_err(|_| format!("{id} does not answer"))?;
            invariants::partitions_released(&snapshot.jobs, &status)?;
            invariants::network_buffers_returned(&status)?;
        }
        Ok(())
    }

    /// Each job's final status (asked once per job) and each FAILED job's reason, and for
    /// every FINISHED WordCount that it wrote exactly the sequential count of its input.
    async fn final_statuses(
        &mut self,
    ) -> (Vec<(JobKind, Option<JobStatus>)>, Vec<(JobKind, String)>) {
        let handles = self.cluster.job_manager();
        let jobs: Vec<(Option<JobId>, JobSpec)> = self
            .jobs
            .borrow()
            .iter()
            .map(|j| (j.id, j.spec.clone()))
            .collect();
        let mut out = Vec::new();
        let mut failures = Vec::new();
        for (id, JobSpec { kind, files, .. }) in jobs {
            let details = match id {
                Some(id) => match handles
                    .job_manager
                    .send(RequestJobStatus { job_id: id })
                    .await
                {
                    Ok(Ok(details)) => Some(details),
                    _ => None,
                },
                None => None,
            };
            let status = details.as_ref().map(|d| d.summary.status);
            self.cluster
                .trace
                .record(format!("job {kind:?} {id:?}: {status:?}"));
            if status == Some(JobStatus::Finished)
                && let Some((input, output)) = &files
                && let Err(what) = jobs::check_output(kind, input, output)
            {
                self.violation(format!("{kind:?} job {id:?}: {what}"));
            }
            // A finished join's collected lines are exact too.
            if status == Some(JobStatus::Finished)
                && kind == JobKind::TypedJoin
                && let (Some(id), Some((expected, _))) = (id, &files)
            {
                let checked = match handles
                    .job_manager
                    .send(crate::messages::job_manager::RequestJobResults { job_id: id })
                    .await
                {
                    Ok(Ok(results)) => jobs::check_collected(expected, &results),
                    _ => Err("its results were not answered".to_owned()),
                };
                if let Err(what) = checked {
                    self.violation(format!("{kind:?} job {id}: {what}"));
                }
            }
            if status == Some(JobStatus::Failed) {
                let reason = details.and_then(|d| d.failure).unwrap_or_default();
                failures.push((kind, reason));
            }
            out.push((kind, status));
        }
        (out, failures)
    }
}
