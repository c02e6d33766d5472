//! Cluster configuration: Flink's key names and defaults, from one TOML file, `FLINT_*`
//! environment variables and flags, validated before anything starts.
//!
//! - [`keys`]: the registry — every key once, with its kind, default and doc. Parsing, errors,
//!   `flint config --show`, the environment variables' names and the tests all go through it.
//! - `kind`: what each kind of key accepts, read alike from every source.
//! - `sources`: layered loading, later wins: defaults < the file (`--config`, else
//!   `FLINT_CONFIG`) < `FLINT_<KEY>` variables < flags ([`ConfigSources`] → [`LoadedConfig`],
//!   with each value's [`Origin`]).
//! - `show`: a configuration written back as TOML (`flint config --show`, and the file the
//!   JobManager hands its TaskManager children).
//! - `error`, `suggest`: the messages, and the closest known name to a mistyped one.
//!
//! In the file, keys are dotted names, written in sections or as dotted keys alike:
//!
//! ```toml
//! slot.request.timeout = "5min"   # a dotted key (before the first section)
//! [heartbeat]
//! interval = "10s"                # heartbeat.interval
//! timeout = 50000                 # milliseconds
//! [resourcemanager]
//! pool-size = 4
//! ```
//!
//! `flint.toml` at the repository root lists every key with its default. Durations are integers
//! (milliseconds, as Flink writes them) or text with a unit (`"500ms"`, `"10s"`, `"5min"`); sizes
//! are bytes or text with a unit (`"64mb"`). An environment variable or a flag is written as the
//! file's value would be (`FLINT_HEARTBEAT_INTERVAL=10s`). An invalid value is a
//! [`ConfigError`] naming the key, the value, its source and what the key accepts; an unknown key
//! names the closest known one.
//!
//! [`ClusterConfig`] itself is plain data: code builds one from [`ClusterConfig::default`] and
//! field updates and checks it with [`ClusterConfig::validate`]. It has no serde derives on
//! purpose: the registry is the one reader and writer of its text form.

use std::path::PathBuf;
use std::time::Duration;

use crate::base::ids::ClusterId;

mod error;
pub mod high_availability;
pub mod keys;
mod kind;
mod show;
pub mod slurm;
mod sources;
mod suggest;

pub use error::{ConfigError, ConfigWarning, InvalidValue, Origin};
pub use high_availability::{HighAvailabilityConfig, HighAvailabilityKind};
pub use show::{Secrets, render};
pub use slurm::SlurmConfig;
pub use sources::{
    CONFIG_FILE_ENV, ConfigSources, FlagOverride, LoadedConfig, NOT_CONFIG_PREFIXES,
    NOT_CONFIG_VARS,
};

/// The largest pool size accepted at all: beyond it a value is surely a typo.
pub const POOL_SIZE_LIMIT: u32 = 100_000;

/// Declares a configuration choice: an enum whose values have names in the configuration, with
/// `ALL`, `NAMES`, `name` and `from_name`, which the key registry's `Kind::Choice` reads.
macro_rules! choice {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$variant_meta:meta])* $variant:ident = $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub enum $name {
            $( $(#[$variant_meta])* $variant, )+
        }

        impl $name {
            /// Every value, in the order of [`NAMES`](Self::NAMES).
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];
            /// Their names in the configuration.
            pub const NAMES: &'static [&'static str] = &[$($text),+];

            /// Its name in the configuration.
            pub fn name(self) -> &'static str {
                match self {
                    $( Self::$variant => $text, )+
                }
            }

            /// The value named `name` (as in the configuration).
            pub fn from_name(name: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|kind| kind.name() == name)
            }
        }
    };
}
pub(crate) use choice;

/// Everything a cluster is started with.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClusterConfig {
    /// `[cluster]`: identity and TaskManager registration.
    pub cluster: ClusterSection,
    /// `[heartbeat]`: liveness between JobManager and TaskManagers.
    pub heartbeat: HeartbeatConfig,
    /// `[resourcemanager]`: the worker pool.
    pub resourcemanager: ResourceManagerConfig,
    /// `[taskmanager]`: each worker.
    pub taskmanager: TaskManagerConfig,
    /// `[task]`: how tasks are run (their cancellation).
    pub task: TaskConfig,
    /// `[job]`: what a job's operators may touch.
    pub job: JobSection,
    /// `[jobstore]`: how long ended jobs stay visible.
    pub jobstore: JobStoreConfig,
    /// `[slot]`: slot requests.
    pub slot: SlotConfig,
    /// `[jobmanager.scheduler]`: the scheduler's policies.
    pub jobmanager: JobManagerSection,
    /// `[transport]`: how nodes talk to each other.
    pub transport: TransportConfig,
    /// `[rest]`: the JobManager's REST API and dashboard (and where clients find it).
    pub rest: RestConfig,
    /// `[high-availability]`: standby JobManagers and job recovery through ZooKeeper.
    pub high_availability: HighAvailabilityConfig,
    /// `[execution.batch.job-recovery]`: what of a batch job survives a leader failover.
    pub batch_job_recovery: BatchJobRecoveryConfig,
    /// `[blob]`: job artifacts.
    pub blob: BlobConfig,
    /// `[slurm]`: the `slurm` driver's job options.
    pub slurm: SlurmConfig,
    /// Seed of every node's RNG; `None` draws one from the OS. Set it to replay a run.
    pub seed: Option<u64>,
}

/// `[cluster]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterSection {
    /// `cluster.id`: TaskManagers of another cluster are refused.
    pub id: ClusterId,
    /// `[cluster.registration]`.
    pub registration: RegistrationConfig,
}

impl Default for ClusterSection {
    fn default() -> Self {
        Self {
            id: ClusterId::new("default"),
            registration: RegistrationConfig::default(),
        }
    }
}

/// `[cluster.registration]`: how a TaskManager retries registration (Flink's defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RegistrationConfig {
    /// `cluster.registration.initial-timeout`: the first attempt's timeout; each timed-out
    /// attempt doubles it.
    pub initial_timeout: Duration,
    /// `cluster.registration.max-timeout`: the cap of that doubling.
    pub max_timeout: Duration,
    /// `cluster.registration.error-delay`: the pause after an error (the JobManager unreachable).
    pub error_delay: Duration,
}

impl Default for RegistrationConfig {
    fn default() -> Self {
        Self {
            initial_timeout: Duration::from_millis(100),
            max_timeout: Duration::from_secs(30),
            error_delay: Duration::from_secs(10),
        }
    }
}

/// `[heartbeat]` (Flink's defaults: 10 s interval, 50 s timeout).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HeartbeatConfig {
    /// `heartbeat.interval`: how often a TaskManager reports.
    pub interval: Duration,
    /// `heartbeat.timeout`: silence after which a peer counts as lost.
    pub timeout: Duration,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(10),
            timeout: Duration::from_secs(50),
        }
    }
}

/// `[execution.batch.job-recovery]` (Flink's keys, FLIP-383): with high availability, a new
/// leader keeps the finished regions of a recovered batch job whose results the TaskManagers
/// that come back still hold, and reruns only the rest. On by default in Flint (off in Flink,
/// where it is new): it costs one append per flush interval while a job runs, and a failover
/// that finds nothing reruns exactly what it reran without it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchJobRecoveryConfig {
    /// `execution.batch.job-recovery.enabled`.
    pub enabled: bool,
    /// `execution.batch.job-recovery.previous-worker.recovery.timeout`: how long a new leader
    /// waits for the TaskManagers holding a recovered job's finished results to register
    /// before it reruns what they held.
    pub previous_worker_recovery_timeout: Duration,
}

impl Default for BatchJobRecoveryConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            previous_worker_recovery_timeout: Duration::from_secs(30),
        }
    }
}

/// `[blob]`: the artifacts jobs ship with them (Flink's blob service).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlobConfig {
    /// `blob.max-size`: the largest artifact the JobManager accepts.
    pub max_size: u64,
    /// `blob.cache-linger`: how long a TaskManager keeps a job's artifacts after its last task
    /// there ended.
    pub cache_linger: Duration,
}

impl Default for BlobConfig {
    fn default() -> Self {
        Self {
            max_size: 1 << 30,
            cache_linger: Duration::from_secs(60),
        }
    }
}

/// `[jobstore]` (Flink's keys and defaults): ended jobs stay visible to the status API (and
/// `flint list`) until they are this old or this many are kept, whichever comes first, so a
/// long-running JobManager's memory does not grow with the jobs it ever ran.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobStoreConfig {
    /// `jobstore.expiration-time`: an ended job is forgotten this long after it ended.
    pub expiration_time: Duration,
    /// `jobstore.max-capacity`: at most this many ended jobs are kept (the oldest ended go
    /// first).
    pub max_capacity: u32,
}

impl Default for JobStoreConfig {
    fn default() -> Self {
        Self {
            expiration_time: Duration::from_secs(3600),
            max_capacity: 1000,
        }
    }
}

/// `[job]`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JobSection {
    /// `job.allowed-paths`: the directories a TaskManager process lets file sources and sinks
    /// read and write (after resolving links and refusing `..`); empty (the default) allows
    /// whatever the TaskManager's user can reach, as in Flink. See [`crate::env::files`].
    pub allowed_paths: Vec<String>,
}

/// `[task]`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TaskConfig {
    /// `[task.cancellation]`.
    pub cancellation: CancellationConfig,
}

/// `[task.cancellation]` (Flink's keys and defaults): cancellation is cooperative, but a task
/// that ignores it cannot keep a slot, a restart or a cancel waiting forever.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CancellationConfig {
    /// `task.cancellation.interval`: a cancelled task still running is interrupted again this
    /// often (its cancellation flag set and its current wait woken).
    pub interval: Duration,
    /// `task.cancellation.timeout`: a task still running this long after its cancellation
    /// fails its TaskManager (the process exits and the resource manager replaces it). Unlike
    /// Flink's, it cannot be turned off (durations here are above zero): set it long instead.
    pub timeout: Duration,
}

impl Default for CancellationConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(30),
            timeout: Duration::from_secs(180),
        }
    }
}

/// `[resourcemanager]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceManagerConfig {
    /// `resourcemanager.pool-size`: the designated number of TaskManagers.
    pub pool_size: u32,
    /// `resourcemanager.max-pool-size`: no request may take the pool beyond it.
    pub max_pool_size: u32,
    /// `resourcemanager.max-workers-per-job`: the TaskManagers one job's demand may ask for
    /// beyond what it holds, so one submission cannot take the whole pool.
    pub max_workers_per_job: u32,
    /// `resourcemanager.check-interval`: how often the pool is compared with its size.
    pub check_interval: Duration,
    /// `resourcemanager.taskmanager-registration`.
    pub taskmanager_registration: WorkerRegistrationConfig,
    /// `resourcemanager.start-worker`.
    pub start_worker: StartWorkerConfig,
    /// `resourcemanager.registration`: how the RM retries registering at the JobManager.
    pub registration: BackoffConfig,
    /// `resourcemanager.taskmanager-timeout` (Flink's, 30 s): after the pool grew for demand,
    /// how long TaskManagers beyond the configured pool size may sit idle before they go.
    pub taskmanager_timeout: Duration,
    /// `resourcemanager.driver`: how the `flint jobmanager` process gets workers (the embedded
    /// cluster always runs them in-process).
    pub driver: DriverKind,
    /// `[resourcemanager.command]`: the `command` driver's template and hosts.
    pub command: CommandConfig,
}

choice! {
    /// `resourcemanager.driver`.
    pub enum DriverKind {
        /// `local_process`: `flint taskmanager` children on the JobManager's machine.
        #[default]
        LocalProcess = "local_process",
        /// `command`: a command template run over a host list, round-robin (`ssh {host} flint
        /// taskmanager ...`).
        Command = "command",
        /// `slurm`: one Slurm job per worker (`sbatch`), followed with `squeue`.
        Slurm = "slurm",
        /// `standalone`: nothing is started; TaskManagers started elsewhere register themselves.
        Standalone = "standalone",
    }
}

/// `[resourcemanager.command]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CommandConfig {
    /// The program and its arguments, with `{host}`, `{jobmanager}`, `{resource_id}` and
    /// `{slots}` filled in per worker, e.g.
    /// `["ssh", "{host}", "flint", "taskmanager", "--jobmanager", "{jobmanager}", "--resource-id",
    /// "{resource_id}", "--slots", "{slots}"]`.
    pub template: Vec<String>,
    /// The hosts `{host}` takes in turn.
    pub hosts: Vec<String>,
}

/// The default `resourcemanager.max-pool-size` (and `max-workers-per-job`): what one host
/// survives as `local_process` TaskManagers (a process each, with its threads and network
/// buffers); a cluster of many machines raises it.
pub const DEFAULT_MAX_POOL_SIZE: u32 = 64;

impl Default for ResourceManagerConfig {
    fn default() -> Self {
        Self {
            pool_size: 1,
            max_pool_size: DEFAULT_MAX_POOL_SIZE,
            max_workers_per_job: DEFAULT_MAX_POOL_SIZE,
            check_interval: Duration::from_secs(1),
            taskmanager_registration: WorkerRegistrationConfig::default(),
            start_worker: StartWorkerConfig::default(),
            registration: BackoffConfig {
                initial_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(10),
            },
            taskmanager_timeout: Duration::from_secs(30),
            driver: DriverKind::default(),
            command: CommandConfig::default(),
        }
    }
}

/// `[resourcemanager.taskmanager-registration]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkerRegistrationConfig {
    /// `resourcemanager.taskmanager-registration.timeout`: a started worker that has not
    /// registered by then is released and replaced (Flink: 5 min).
    pub timeout: Duration,
}

impl Default for WorkerRegistrationConfig {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(300),
        }
    }
}

/// `[resourcemanager.start-worker]`: the backoff after workers fail to start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StartWorkerConfig {
    /// `resourcemanager.start-worker.initial-backoff`: the pause after the first failure; it
    /// doubles with each consecutive failure.
    pub initial_backoff: Duration,
    /// `resourcemanager.start-worker.max-backoff`: the cap of that doubling.
    pub max_backoff: Duration,
}

impl Default for StartWorkerConfig {
    fn default() -> Self {
        Self {
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(30),
        }
    }
}

/// An exponential backoff: `initial-backoff`, doubling to `max-backoff`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackoffConfig {
    /// The first pause.
    pub initial_backoff: Duration,
    /// The cap.
    pub max_backoff: Duration,
}

/// `[taskmanager]`.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskManagerConfig {
    /// `taskmanager.slots`: slots each TaskManager offers.
    pub slots: u32,
    /// `taskmanager.compute-threads`: task threads of one process that compute at once
    /// ([`ComputePermits`](crate::env::compute_permits::ComputePermits)); 0: two per CPU.
    pub compute_threads: u32,
    /// `taskmanager.working-dir`: where each process makes its private working directory
    /// ([`WorkingDir`](crate::env::working_dir::WorkingDir)), in which TaskManagers spill result
    /// partitions. Default: the system temp directory.
    pub working_dir: Option<PathBuf>,
    /// `taskmanager.spill-threshold`: a result partition above this many bytes spills to disk.
    pub spill_threshold: u64,
    /// `taskmanager.spill-budget`: the most bytes of spilled result partitions a TaskManager
    /// keeps on disk at once (`None`: no limit); a spill past it fails its producer.
    pub spill_budget: Option<u64>,
    /// `taskmanager.memory.managed.size` (Flink's): memory for the sorts, groupings and join
    /// build sides of typed programs, shared out equally among the slots; past its share an
    /// operator spills to the working directory.
    pub managed_memory: u64,
    /// `taskmanager.network.buffer-size`: bytes a producer collects per subpartition before it
    /// hands them over as one buffer.
    pub network_buffer_size: u64,
    /// `taskmanager.network.buffers-per-channel`: exclusive buffers per input channel (the
    /// credit a consumer grants each channel).
    pub network_buffers_per_channel: u32,
    /// `taskmanager.network.floating-buffers-per-gate`: buffers a task's input gate lends to
    /// channels with a backlog.
    pub network_floating_buffers_per_gate: u32,
    /// `taskmanager.network.gate-window`: the bytes a gate of few channels may have in flight
    /// in all when the lent quarter has room.
    pub network_gate_window: u64,
    /// `taskmanager.network.output-window`: the unread bytes a pipelined partition of few
    /// subpartitions may hold in all before its producer waits.
    pub network_output_window: u64,
    /// `taskmanager.network.required-buffers-per-gate`: the most buffers a task's input gate
    /// reserves.
    pub network_required_per_gate: u32,
    /// `taskmanager.network.required-buffers-per-output`: the most buffers a pipelined output
    /// reserves.
    pub network_required_per_output: u32,
    /// `taskmanager.network.memory`: network buffer memory per TaskManager (a hard cap).
    pub network_memory: u64,
}

impl Default for TaskManagerConfig {
    fn default() -> Self {
        let network = crate::exchange::NetworkSettings::default();
        Self {
            slots: 1,
            compute_threads: 0,
            working_dir: None,
            spill_threshold: 64 << 20,
            spill_budget: None,
            managed_memory: 512 << 20,
            network_buffer_size: network.buffer_size as u64,
            network_buffers_per_channel: network.buffers_per_channel,
            network_floating_buffers_per_gate: network.floating_buffers_per_gate,
            network_gate_window: network.gate_window,
            network_output_window: network.output_window,
            network_required_per_gate: network.required_per_gate,
            network_required_per_output: network.required_per_output,
            network_memory: network.memory,
        }
    }
}

impl TaskManagerConfig {
    /// The network buffer settings these keys make.
    pub fn network(&self) -> crate::exchange::NetworkSettings {
        crate::exchange::NetworkSettings {
            buffer_size: usize::try_from(self.network_buffer_size).unwrap_or(usize::MAX),
            buffers_per_channel: self.network_buffers_per_channel,
            floating_buffers_per_gate: self.network_floating_buffers_per_gate,
            gate_window: self.network_gate_window,
            output_window: self.network_output_window,
            required_per_gate: self.network_required_per_gate,
            required_per_output: self.network_required_per_output,
            memory: self.network_memory,
            ..crate::exchange::NetworkSettings::default()
        }
    }
}

/// `[transport]`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TransportConfig {
    /// `[transport.tls]`: TLS under the handshake when set (`cert`, `key`, `ca` PEM paths).
    pub tls: Option<crate::transport::tls::TlsConfig>,
}

/// `[rest]`: the JobManager's HTTP endpoint (REST API, dashboard, metrics). Clients (`flint list`,
/// ...) find the JobManager here too, as Flink's CLI does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestConfig {
    /// `rest.address`: the host the REST endpoint binds to (and clients connect to).
    pub address: String,
    /// `rest.port`: its port; 0 picks a free one (printed at start).
    pub port: u16,
    /// `rest.token`: the bearer token every endpoint requires (reads too, unless
    /// `read_without_token`). Unset (and no `token_file`), `flint jobmanager` uses this user's
    /// generated token (`crate::process::credentials`).
    pub token: Option<String>,
    /// `rest.token-file`: a file holding the token instead (as `--secret-file` holds the
    /// cluster secret), so it appears on no command line and in no environment.
    pub token_file: Option<PathBuf>,
    /// `rest.allowed-hosts`: the names a client may put in the `Host` header besides the bound
    /// address (and `localhost` on loopback). Anything else is refused, so a web page cannot
    /// reach the API by rebinding a name of its own to this address.
    pub allowed_hosts: Vec<String>,
    /// `rest.read-without-token`: serve reads (`GET`: the jobs with their configurations, the
    /// TaskManagers, `/metrics`) to anyone who reaches the port. Off by default: a job graph's
    /// configuration names files and may hold credentials.
    pub read_without_token: bool,
}

impl Default for RestConfig {
    fn default() -> Self {
        Self {
            address: "127.0.0.1".to_owned(),
            port: 8081,
            token: None,
            token_file: None,
            allowed_hosts: Vec::new(),
            read_without_token: false,
        }
    }
}

/// `[jobmanager]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobManagerSection {
    /// `[jobmanager.scheduler]`.
    pub scheduler: SchedulerConfig,
    /// `jobmanager.max-subtasks`: the subtasks of unfinished jobs one JobManager holds at most;
    /// a submission beyond it is refused (REST 503) rather than let waiting jobs (about 500
    /// bytes per subtask) exhaust the JobManager's memory. Recovered jobs are never refused.
    pub max_subtasks: u64,
    /// `jobmanager.max-jobs`: the unfinished jobs one JobManager holds at most, whatever their
    /// size (each costs its graphs and bookkeeping beyond its subtasks); refused the same way.
    pub max_jobs: u64,
}

impl Default for JobManagerSection {
    fn default() -> Self {
        Self {
            scheduler: SchedulerConfig::default(),
            max_subtasks: 1_000_000,
            max_jobs: 10_000,
        }
    }
}

/// `[jobmanager.scheduler]`: which of the scheduler's strategies run
/// (`crate::actors::job_manager::scheduler::strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SchedulerConfig {
    /// `jobmanager.scheduler.slot-selection`: where a new slot is taken when locality does not
    /// decide.
    pub slot_selection: SlotSelectionKind,
    /// `jobmanager.scheduler.region-order`: which queued region is placed next.
    pub region_order: RegionOrderKind,
}

choice! {
    /// `jobmanager.scheduler.slot-selection`.
    pub enum SlotSelectionKind {
        /// `spread_out`: the TaskManager with the most free slots (one crash takes few tasks).
        #[default]
        SpreadOut = "spread_out",
        /// `pack`: the TaskManager with the fewest free slots (idle ones can be released sooner).
        Pack = "pack",
    }
}

choice! {
    /// `jobmanager.scheduler.region-order`.
    pub enum RegionOrderKind {
        /// `fifo`: jobs in submission order, each job's regions in order; the head waits until it
        /// fits and nothing overtakes it.
        Fifo = "fifo",
        /// `backfill`: as `fifo`, but bulks that fit may overtake a head that does not (a bounded
        /// number of times per head, so it cannot starve): no slot sits idle while something fits.
        #[default]
        Backfill = "backfill",
    }
}

/// `[slot]`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SlotConfig {
    /// `[slot.request]`.
    pub request: SlotRequestConfig,
}

/// `[slot.request]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlotRequestConfig {
    /// `slot.request.timeout` (Flink's, 5 min): a task that waited this long for a slot fails
    /// with NoResourceAvailable.
    pub timeout: Duration,
}

impl Default for SlotRequestConfig {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(300),
        }
    }
}

impl ClusterConfig {
    /// Reads and validates a TOML configuration over the defaults (no environment, no flags:
    /// [`ConfigSources`] layers those).
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        let mut layers = sources::Layers::new();
        layers
            .apply_file(text, std::path::Path::new("(text)"))
            .map_err(ConfigError::without_origin)?;
        layers.config.validate()?;
        Ok(layers.config)
    }

    /// The configuration as a TOML file that reads back as the same configuration, secrets left
    /// out: what the JobManager hands its TaskManager children, which serve no REST API.
    pub fn to_toml_without_secrets(&self) -> String {
        render(self, None, Secrets::Omit)
    }

    /// `name`'s value as a configuration file would show it (for an error naming it).
    fn shown(&self, name: &str) -> String {
        keys::find(name)
            .and_then(|key| key.value(self))
            .unwrap_or_default()
    }

    /// Checks every value against what its key accepts, then the rules across keys.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for key in keys::keys() {
            if key.kind.check(self).is_err() {
                let value = key.value(self).unwrap_or_default();
                return Err(ConfigError::invalid(key.name, value, key.accepts()));
            }
        }
        let rm = &self.resourcemanager;
        if rm.pool_size > rm.max_pool_size {
            return Err(ConfigError::invalid(
                "resourcemanager.pool-size",
                rm.pool_size.to_string(),
                format!(
                    "a whole number from 0 to resourcemanager.max-pool-size ({})",
                    rm.max_pool_size
                ),
            )
            .because_of("resourcemanager.max-pool-size"));
        }
        if self.taskmanager.network_buffer_size > crate::exchange::MAX_RECORD_BYTES as u64 {
            return Err(ConfigError::invalid(
                "taskmanager.network.buffer-size",
                self.shown("taskmanager.network.buffer-size"),
                format!(
                    "at most {} bytes (8mb): every network buffer must fit one message between \
                     TaskManagers",
                    crate::exchange::MAX_RECORD_BYTES
                ),
            ));
        }
        let network = self.taskmanager.network();
        // One task with one input channel and one output, with room to lend beside it.
        let one_task = network.bytes((network.gate_floor(1) + network.output_floor(1)) * 4 / 3 + 1);
        if self.taskmanager.network_memory < one_task {
            return Err(ConfigError::invalid(
                "taskmanager.network.memory",
                self.shown("taskmanager.network.memory"),
                format!(
                    "at least the guaranteed buffers of one task with one input and one output \
                     channel, and a quarter more to lend ({one_task} bytes at this buffer-size)"
                ),
            )
            .because_of("taskmanager.network.buffer-size"));
        }
        let cancellation = self.task.cancellation;
        if cancellation.timeout < cancellation.interval {
            return Err(ConfigError::invalid(
                "task.cancellation.timeout",
                show(cancellation.timeout),
                format!(
                    "at least task.cancellation.interval ({})",
                    show(cancellation.interval)
                ),
            )
            .because_of("task.cancellation.interval"));
        }
        if self.heartbeat.timeout <= self.heartbeat.interval {
            return Err(ConfigError::invalid(
                "heartbeat.timeout",
                show(self.heartbeat.timeout),
                format!(
                    "more than heartbeat.interval ({})",
                    show(self.heartbeat.interval)
                ),
            )
            .because_of("heartbeat.interval"));
        }
        if rm.driver == DriverKind::Command {
            if rm.command.template.is_empty() {
                return Err(ConfigError::invalid(
                    "resourcemanager.command.template",
                    "[]",
                    "the program and its arguments when resourcemanager.driver is \"command\", \
                     e.g. [\"ssh\", \"{host}\", \"flint\", \"taskmanager\", ...]",
                )
                .because_of("resourcemanager.driver"));
            }
            if rm.command.hosts.is_empty() {
                return Err(ConfigError::invalid(
                    "resourcemanager.command.hosts",
                    "[]",
                    "at least one host when resourcemanager.driver is \"command\"",
                )
                .because_of("resourcemanager.driver"));
            }
        }
        ordered(
            "resourcemanager.start-worker.initial-backoff",
            "resourcemanager.start-worker.max-backoff",
            rm.start_worker.initial_backoff,
            rm.start_worker.max_backoff,
        )?;
        ordered(
            "resourcemanager.registration.initial-backoff",
            "resourcemanager.registration.max-backoff",
            rm.registration.initial_backoff,
            rm.registration.max_backoff,
        )?;
        ordered(
            "cluster.registration.initial-timeout",
            "cluster.registration.max-timeout",
            self.cluster.registration.initial_timeout,
            self.cluster.registration.max_timeout,
        )?;
        self.high_availability.validate()?;
        if let Some(tls) = &self.transport.tls {
            let files = [
                ("transport.tls.cert", &tls.cert),
                ("transport.tls.key", &tls.key),
                ("transport.tls.ca", &tls.ca),
            ];
            let given = files.iter().find(|(_, p)| !p.as_os_str().is_empty());
            if let Some((missing, _)) = files.iter().find(|(_, p)| p.as_os_str().is_empty()) {
                let error = ConfigError::invalid(
                    missing,
                    "(not set)",
                    "a path: transport.tls.cert, transport.tls.key and transport.tls.ca go together",
                );
                return Err(match given {
                    Some((given, _)) => error.because_of(given),
                    None => error,
                });
            }
        }
        Ok(())
    }
}

/// A duration as the file writes it.
fn show(duration: Duration) -> String {
    kind::quote(&kind::format_duration(duration))
}

/// A backoff's cap is at least its first pause.
fn ordered(
    initial_key: &'static str,
    max_key: &'static str,
    initial: Duration,
    max: Duration,
) -> Result<(), ConfigError> {
    if max < initial {
        return Err(ConfigError::invalid(
            max_key,
            show(max),
            format!("at least {initial_key} ({})", show(initial)),
        )
        .because_of(initial_key));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
