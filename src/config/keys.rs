//! The key registry: every configuration key, once, with its dotted name (Flink's), what it
//! accepts, its one-line doc and where its value lives in [`ClusterConfig`].
//!
//! Everything that deals in keys goes through this table — reading the file, the `FLINT_*`
//! variables and the flags, the error messages, `flint config --show`, the child TaskManagers'
//! configuration file and the test that `flint.toml` documents every key — so a key added here
//! is known everywhere, and a key missing here is read nowhere.

use std::path::PathBuf;

use super::kind::{Field, Kind};
use super::{
    ClusterConfig, DriverKind, HighAvailabilityKind, POOL_SIZE_LIMIT, RegionOrderKind,
    SlotSelectionKind,
};
use crate::base::ids::ClusterId;
use crate::messages::job_manager::MAX_SLOTS_PER_TASK_MANAGER;
use crate::transport::tls::TlsConfig;

/// The prefix of every configuration variable: `FLINT_` + the key upper-cased, `.` and `-` as `_`.
pub const ENV_PREFIX: &str = "FLINT_";

/// The most `taskmanager.compute-threads`: a bound, not a reservation (no thread starts for a
/// permit), so generous.
const MAX_COMPUTE_THREADS: u64 = 1 << 20;

/// One configuration key.
pub struct Key {
    /// The dotted name, as in the file (`heartbeat.interval`).
    pub name: &'static str,
    /// What the key does, in one line.
    pub doc: &'static str,
    /// Whether its value is a secret: never printed, never written to the TaskManagers' file.
    pub secret: bool,
    pub(crate) kind: Kind,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("name", &self.name)
            .field("kind", &self.kind.name())
            .finish_non_exhaustive()
    }
}

impl Key {
    /// The environment variable that sets it: `FLINT_HEARTBEAT_INTERVAL`.
    pub fn env_var(&self) -> String {
        let mut var = String::from(ENV_PREFIX);
        var.extend(self.name.chars().map(|c| match c {
            '.' | '-' => '_',
            c => c.to_ascii_uppercase(),
        }));
        var
    }

    /// The kind of value: `duration`, `integer`, `size`, `port`, `string`, `path`, `enum`, `list`.
    pub fn kind_name(&self) -> &'static str {
        self.kind.name()
    }

    /// What it accepts, e.g. `a whole number from 1 to 4096`.
    pub fn accepts(&self) -> String {
        self.kind.describe()
    }

    /// Whether it may be unset (it has no default value).
    pub fn is_optional(&self) -> bool {
        self.kind.is_optional()
    }

    /// Its value in `config`, in TOML syntax (secrets included); `None` when unset.
    pub fn value(&self, config: &ClusterConfig) -> Option<String> {
        self.kind.render(config)
    }

    /// Its default, in TOML syntax; `None` for an optional key.
    pub fn default_value(&self) -> Option<String> {
        self.value(&ClusterConfig::default())
    }
}

/// Every key, grouped by section, in the order `flint config --show` prints them.
pub fn keys() -> &'static [Key] {
    &KEYS
}

/// Keys earlier versions had, with what became of them: accepted in a file or a `-D` flag with a
/// warning (an old configuration keeps working), never set.
pub const RETIRED: &[(&str, &str)] = &[(
    "cluster.registration.refused-registration-delay",
    "a TaskManager the JobManager refuses now stops with the reason instead of trying again",
)];

/// What became of `name`, if it is a retired key.
pub fn retired(name: &str) -> Option<&'static str> {
    RETIRED
        .iter()
        .find(|(key, _)| *key == name)
        .map(|(_, why)| *why)
}

/// The key named `name` (dotted, as in the file).
pub fn find(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|key| key.name == name)
}

/// The key the environment variable `var` sets (`FLINT_HEARTBEAT_INTERVAL`).
pub fn find_env(var: &str) -> Option<&'static Key> {
    KEYS.iter().find(|key| key.env_var() == var)
}

/// Whether `path` is a section: a prefix of keys, written as a TOML table (`heartbeat`,
/// `resourcemanager.start-worker`).
pub(crate) fn is_section(path: &str) -> bool {
    KEYS.iter().any(|key| {
        key.name
            .strip_prefix(path)
            .is_some_and(|rest| rest.starts_with('.'))
    })
}

/// Every section name (`cluster`, `cluster.registration`, ...), for suggestions.
pub(crate) fn sections() -> impl Iterator<Item = &'static str> {
    let mut names: Vec<&'static str> = KEYS
        .iter()
        .flat_map(|key| key.name.match_indices('.').map(|(at, _)| &key.name[..at]))
        .collect();
    names.sort_unstable();
    names.dedup();
    names.into_iter()
}

/// A `u32` field's value from a checked range (whose bounds fit `u32`, as a test proves).
fn narrow(value: u64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// `[transport.tls]`, made on the first of its keys; an empty path marks a file not given (the
/// rule that all three go together names it).
fn tls(config: &mut ClusterConfig) -> &mut TlsConfig {
    config.transport.tls.get_or_insert_with(|| TlsConfig {
        cert: PathBuf::new(),
        key: PathBuf::new(),
        ca: PathBuf::new(),
    })
}

/// A `[transport.tls]` file as an optional key: unset when TLS is off or the path is empty.
fn tls_path(config: &ClusterConfig, pick: fn(&TlsConfig) -> &PathBuf) -> Option<PathBuf> {
    let path = pick(config.transport.tls.as_ref()?);
    (!path.as_os_str().is_empty()).then(|| path.clone())
}

/// A duration key over a field path of `ClusterConfig`.
macro_rules! duration {
    ($($field:ident).+) => {
        Kind::Duration(Field {
            get: |c| c.$($field).+,
            set: |c, v| c.$($field).+ = v,
        })
    };
}

static KEYS: [Key; 73] = [
    // [cluster]
    Key {
        name: "cluster.id",
        doc: "The cluster's name: TaskManagers of another cluster are refused.",
        secret: false,
        kind: Kind::Text(Field {
            get: |c| c.cluster.id.as_str().to_owned(),
            set: |c, v| c.cluster.id = ClusterId::new(v),
        }),
    },
    Key {
        name: "cluster.registration.initial-timeout",
        doc: "A TaskManager's first registration attempt times out after this; each timeout doubles it.",
        secret: false,
        kind: duration!(cluster.registration.initial_timeout),
    },
    Key {
        name: "cluster.registration.max-timeout",
        doc: "The cap of that doubling.",
        secret: false,
        kind: duration!(cluster.registration.max_timeout),
    },
    Key {
        name: "cluster.registration.error-delay",
        doc: "A TaskManager that could not reach the JobManager tries again after this.",
        secret: false,
        kind: duration!(cluster.registration.error_delay),
    },
    // [heartbeat]
    Key {
        name: "heartbeat.interval",
        doc: "How often a TaskManager (and the resource manager) reports to the JobManager.",
        secret: false,
        kind: duration!(heartbeat.interval),
    },
    Key {
        name: "heartbeat.timeout",
        doc: "Silence after which a peer counts as lost (its tasks fail over, its worker is replaced).",
        secret: false,
        kind: duration!(heartbeat.timeout),
    },
    // [jobstore]
    Key {
        name: "jobstore.expiration-time",
        doc: "An ended job stays visible this long after it ended.",
        secret: false,
        kind: duration!(jobstore.expiration_time),
    },
    Key {
        name: "jobstore.max-capacity",
        doc: "At most this many ended jobs stay visible (the oldest ended go first).",
        secret: false,
        kind: Kind::Integer {
            min: 1,
            max: 1_000_000,
            field: Field {
                get: |c| c.jobstore.max_capacity.into(),
                set: |c, v| c.jobstore.max_capacity = narrow(v),
            },
        },
    },
    // [blob]
    Key {
        name: "blob.max-size",
        doc: "The largest artifact the JobManager accepts (flint run --artifact, POST /artifacts); a larger upload is refused and nothing of it stored.",
        secret: false,
        kind: Kind::Bytes(Field {
            get: |c| c.blob.max_size,
            set: |c, v| c.blob.max_size = v,
        }),
    },
    Key {
        name: "blob.cache-linger",
        doc: "How long a TaskManager keeps a job's artifacts after the job's last task there ended (the next wave or a resubmission fetches nothing); then they are deleted unless another job uses them.",
        secret: false,
        kind: duration!(blob.cache_linger),
    },
    // [execution.batch.job-recovery]
    Key {
        name: "execution.batch.job-recovery.enabled",
        doc: "With high availability, a new leader reruns only the regions of a batch job whose finished results did not survive the failover.",
        secret: false,
        kind: Kind::Bool(Field {
            get: |c| c.batch_job_recovery.enabled,
            set: |c, v| c.batch_job_recovery.enabled = v,
        }),
    },
    Key {
        name: "execution.batch.job-recovery.previous-worker.recovery.timeout",
        doc: "How long a new leader waits for the TaskManagers holding a recovered job's finished results.",
        secret: false,
        kind: duration!(batch_job_recovery.previous_worker_recovery_timeout),
    },
    // [job]
    Key {
        name: "job.allowed-paths",
        doc: "Directories a TaskManager process lets file sources and sinks use; empty: anywhere its user can.",
        secret: false,
        kind: Kind::List(Field {
            get: |c| c.job.allowed_paths.clone(),
            set: |c, v| c.job.allowed_paths = v,
        }),
    },
    // [task.cancellation]
    Key {
        name: "task.cancellation.interval",
        doc: "A cancelled task that has not stopped is interrupted again this often.",
        secret: false,
        kind: duration!(task.cancellation.interval),
    },
    Key {
        name: "task.cancellation.timeout",
        doc: "A task still running this long after its cancellation fails its TaskManager.",
        secret: false,
        kind: duration!(task.cancellation.timeout),
    },
    // [resourcemanager]
    Key {
        name: "resourcemanager.pool-size",
        doc: "The designated number of TaskManagers the resource manager keeps running.",
        secret: false,
        kind: Kind::Integer {
            min: 0,
            max: POOL_SIZE_LIMIT as u64,
            field: Field {
                get: |c| c.resourcemanager.pool_size.into(),
                set: |c, v| c.resourcemanager.pool_size = narrow(v),
            },
        },
    },
    Key {
        name: "resourcemanager.max-pool-size",
        doc: "No request (a job's demand, the CLI, the REST API) may take the pool beyond this.",
        secret: false,
        kind: Kind::Integer {
            min: 1,
            max: POOL_SIZE_LIMIT as u64,
            field: Field {
                get: |c| c.resourcemanager.max_pool_size.into(),
                set: |c, v| c.resourcemanager.max_pool_size = narrow(v),
            },
        },
    },
    Key {
        name: "resourcemanager.max-workers-per-job",
        doc: "The TaskManagers one job's demand may ask for beyond the slots it holds (the pool growth one submission can cause).",
        secret: false,
        kind: Kind::Integer {
            min: 1,
            max: POOL_SIZE_LIMIT as u64,
            field: Field {
                get: |c| c.resourcemanager.max_workers_per_job.into(),
                set: |c, v| c.resourcemanager.max_workers_per_job = narrow(v),
            },
        },
    },
    Key {
        name: "jobmanager.max-jobs",
        doc: "The unfinished jobs a JobManager holds at most; a submission beyond it is refused (503).",
        secret: false,
        kind: Kind::Integer {
            min: 1,
            max: u32::MAX as u64,
            field: Field {
                get: |c| c.jobmanager.max_jobs,
                set: |c, v| c.jobmanager.max_jobs = v,
            },
        },
    },
    Key {
        name: "jobmanager.max-subtasks",
        doc: "The subtasks of unfinished jobs a JobManager holds at most; a submission beyond it is refused (503).",
        secret: false,
        kind: Kind::Integer {
            min: 1,
            max: u32::MAX as u64,
            field: Field {
                get: |c| c.jobmanager.max_subtasks,
                set: |c, v| c.jobmanager.max_subtasks = v,
            },
        },
    },
    Key {
        name: "resourcemanager.check-interval",
        doc: "How often the pool is compared with its designated size.",
        secret: false,
        kind: duration!(resourcemanager.check_interval),
    },
    Key {
        name: "resourcemanager.taskmanager-registration.timeout",
        doc: "A started worker that has not registered by then is released and replaced.",
        secret: false,
        kind: duration!(resourcemanager.taskmanager_registration.timeout),
    },
    Key {
        name: "resourcemanager.start-worker.initial-backoff",
        doc: "The pause after a worker failed to start; it doubles with each failure in a row.",
        secret: false,
        kind: duration!(resourcemanager.start_worker.initial_backoff),
    },
    Key {
        name: "resourcemanager.start-worker.max-backoff",
        doc: "The cap of that doubling.",
        secret: false,
        kind: duration!(resourcemanager.start_worker.max_backoff),
    },
    Key {
        name: "resourcemanager.registration.initial-backoff",
        doc: "The resource manager retries registering at the JobManager after this, doubling.",
        secret: false,
        kind: duration!(resourcemanager.registration.initial_backoff),
    },
    Key {
        name: "resourcemanager.registration.max-backoff",
        doc: "The cap of that doubling.",
        secret: false,
        kind: duration!(resourcemanager.registration.max_backoff),
    },
    Key {
        name: "resourcemanager.taskmanager-timeout",
        doc: "After the pool grew for a job's demand, how long extra TaskManagers may idle before they go.",
        secret: false,
        kind: duration!(resourcemanager.taskmanager_timeout),
    },
    Key {
        name: "resourcemanager.driver",
        doc: "How `flint jobmanager` gets workers: child processes, a command over hosts, or none.",
        secret: false,
        kind: Kind::Choice {
            values: DriverKind::NAMES,
            field: Field {
                get: |c| c.resourcemanager.driver.name(),
                set: |c, v| {
                    if let Some(driver) = DriverKind::from_name(v) {
                        c.resourcemanager.driver = driver;
                    }
                },
            },
        },
    },
    Key {
        name: "resourcemanager.command.template",
        doc: "The `command` driver's program and arguments; {host}, {jobmanager}, {resource_id}, {slots} are filled in.",
        secret: false,
        kind: Kind::List(Field {
            get: |c| c.resourcemanager.command.template.clone(),
            set: |c, v| c.resourcemanager.command.template = v,
        }),
    },
    Key {
        name: "resourcemanager.command.hosts",
        doc: "The hosts the `command` driver starts workers on, in turn.",
        secret: false,
        kind: Kind::List(Field {
            get: |c| c.resourcemanager.command.hosts.clone(),
            set: |c, v| c.resourcemanager.command.hosts = v,
        }),
    },
    // [slurm]
    Key {
        name: "slurm.partition",
        doc: "The Slurm partition worker jobs run in (sbatch --partition); unset: the default one.",
        secret: false,
        kind: Kind::OptionalText(Field {
            get: |c| c.slurm.partition.clone(),
            set: |c, v| c.slurm.partition = v,
        }),
    },
    Key {
        name: "slurm.account",
        doc: "The Slurm account worker jobs are charged to (sbatch --account); unset: the user's default.",
        secret: false,
        kind: Kind::OptionalText(Field {
            get: |c| c.slurm.account.clone(),
            set: |c, v| c.slurm.account = v,
        }),
    },
    Key {
        name: "slurm.time-limit",
        doc: "A worker job's time limit in Slurm's format (sbatch --time: 90, 1:30:00, 2-00:00:00); unset: the partition's.",
        secret: false,
        kind: Kind::OptionalText(Field {
            get: |c| c.slurm.time_limit.clone(),
            set: |c, v| c.slurm.time_limit = v,
        }),
    },
    Key {
        name: "slurm.cpus-per-worker",
        doc: "CPUs each worker job asks for (sbatch --cpus-per-task); unset: taskmanager.slots.",
        secret: false,
        kind: Kind::OptionalInteger(Field {
            get: |c| c.slurm.cpus_per_worker,
            set: |c, v| c.slurm.cpus_per_worker = v,
        }),
    },
    Key {
        name: "slurm.memory-per-worker",
        doc: "Memory each worker job asks for (sbatch --mem); unset: the partition's default.",
        secret: false,
        kind: Kind::OptionalBytes(Field {
            get: |c| c.slurm.memory_per_worker,
            set: |c, v| c.slurm.memory_per_worker = v,
        }),
    },
    Key {
        name: "slurm.sbatch-options",
        doc: "Further sbatch arguments for every worker job, as given (--qos=high, --output=...).",
        secret: false,
        kind: Kind::List(Field {
            get: |c| c.slurm.sbatch_options.clone(),
            set: |c, v| c.slurm.sbatch_options = v,
        }),
    },
    Key {
        name: "slurm.taskmanager-command",
        doc: "What a worker job runs; {jobmanager}, {resource_id}, {slots} are filled in. Empty: this binary's taskmanager.",
        secret: false,
        kind: Kind::List(Field {
            get: |c| c.slurm.taskmanager_command.clone(),
            set: |c, v| c.slurm.taskmanager_command = v,
        }),
    },
    Key {
        name: "slurm.poll-interval",
        doc: "How often one squeue call follows every worker job of the cluster.",
        secret: false,
        kind: duration!(slurm.poll_interval),
    },
    // [taskmanager]
    Key {
        name: "taskmanager.slots",
        doc: "Slots each TaskManager offers: how many tasks (or slot-sharing groups) it runs at once.",
        secret: false,
        kind: Kind::Integer {
            min: 1,
            max: MAX_SLOTS_PER_TASK_MANAGER as u64,
            field: Field {
                get: |c| c.taskmanager.slots.into(),
                set: |c, v| c.taskmanager.slots = narrow(v),
            },
        },
    },
    Key {
        name: "taskmanager.compute-threads",
        doc: "Task threads of one process that compute at once; the others wait in line (a task waiting for input or room does not count). 0: two per CPU.",
        secret: false,
        kind: Kind::Integer {
            min: 0,
            max: MAX_COMPUTE_THREADS,
            field: Field {
                get: |c| c.taskmanager.compute_threads.into(),
                set: |c, v| c.taskmanager.compute_threads = narrow(v),
            },
        },
    },
    Key {
        name: "taskmanager.working-dir",
        doc: "Where each process makes its private (0700) working directory: spilled partitions, the children's config; default: the system temp directory.",
        secret: false,
        kind: Kind::OptionalPath(Field {
            get: |c| c.taskmanager.working_dir.clone(),
            set: |c, v| c.taskmanager.working_dir = v,
        }),
    },
    Key {
        name: "taskmanager.memory.managed.size",
        doc: "Memory for the sorts, groupings and join build sides of typed programs, shared out equally among the slots; past its share an operator spills to the working directory.",
        secret: false,
        kind: Kind::Bytes(Field {
            get: |c| c.taskmanager.managed_memory,
            set: |c, v| c.taskmanager.managed_memory = v,
        }),
    },
    Key {
        name: "taskmanager.spill-threshold",
        doc: "A result partition larger than this spills to disk.",
        secret: false,
        kind: Kind::Bytes(Field {
            get: |c| c.taskmanager.spill_threshold,
            set: |c, v| c.taskmanager.spill_threshold = v,
        }),
    },
    Key {
        name: "taskmanager.spill-budget",
        doc: "The most bytes of spilled result partitions a TaskManager keeps on disk at once (unset: no limit); a task whose spill would pass it fails, naming this key.",
        secret: false,
        kind: Kind::OptionalBytes(Field {
            get: |c| c.taskmanager.spill_budget,
            set: |c, v| c.taskmanager.spill_budget = v,
        }),
    },
    Key {
        name: "taskmanager.network.buffer-size",
        doc: "Bytes a producer collects for one consumer before handing them over as one network buffer (at most 8mb: every buffer must fit one message between TaskManagers; a record larger than a buffer travels alone, up to the same 8 MiB).",
        secret: false,
        kind: Kind::Bytes(Field {
            get: |c| c.taskmanager.network_buffer_size,
            set: |c, v| c.taskmanager.network_buffer_size = v,
        }),
    },
    Key {
        name: "taskmanager.network.buffers-per-channel",
        doc: "Exclusive network buffers per input channel: the credit a consumer grants each of its channels.",
        secret: false,
        kind: Kind::Integer {
            min: 1,
            max: 1024,
            field: Field {
                get: |c| c.taskmanager.network_buffers_per_channel.into(),
                set: |c, v| c.taskmanager.network_buffers_per_channel = narrow(v),
            },
        },
    },
    Key {
        name: "taskmanager.network.floating-buffers-per-gate",
        doc: "Network buffers a task's input gate lends to whichever channel has a backlog.",
        secret: false,
        kind: Kind::Integer {
            min: 1,
            max: 65_536,
            field: Field {
                get: |c| c.taskmanager.network_floating_buffers_per_gate.into(),
                set: |c, v| c.taskmanager.network_floating_buffers_per_gate = narrow(v),
            },
        },
    },
    Key {
        name: "taskmanager.network.gate-window",
        doc: "Network buffer bytes a task's input gate of few channels may have in flight in all, exclusive and floating, borrowed from the TaskManager's lent quarter while at most half of it is out with them: across processes a channel reads about one window per round trip, so a gate reading few channels of gigabytes needs more than its exclusive and floating buffers. At most those (e.g. 320kb with the defaults): those only.",
        secret: false,
        kind: Kind::Bytes(Field {
            get: |c| c.taskmanager.network_gate_window,
            set: |c, v| c.taskmanager.network_gate_window = v,
        }),
    },
    Key {
        name: "taskmanager.network.output-window",
        doc: "Unread bytes a task's pipelined output of few subpartitions may hold in all before its producer waits (each subpartition holds its share, and never fewer than 10 buffers, Flink's max-buffers-per-channel): a data connection keeps one poll in flight, so a channel moves at most what its subpartition holds per round trip. Beyond its floor the producer borrows from the TaskManager's lent quarter and waits when that is out. At most 10 buffers (320kb with the defaults): 10 buffers per subpartition.",
        secret: false,
        kind: Kind::Bytes(Field {
            get: |c| c.taskmanager.network_output_window,
            set: |c, v| c.taskmanager.network_output_window = v,
        }),
    },
    Key {
        name: "taskmanager.network.required-buffers-per-gate",
        doc: "The most network buffers a task's input gate reserves when it is deployed (fewer if its channels need fewer); beyond them it borrows from the TaskManager's lent quarter while any is free.",
        secret: false,
        kind: Kind::Integer {
            min: 1,
            max: 65_536,
            field: Field {
                get: |c| c.taskmanager.network_required_per_gate.into(),
                set: |c, v| c.taskmanager.network_required_per_gate = narrow(v),
            },
        },
    },
    Key {
        name: "taskmanager.network.required-buffers-per-output",
        doc: "The most network buffers a task's pipelined output reserves when it is deployed; beyond them its producer borrows from the TaskManager's lent quarter, and waits when that is empty.",
        secret: false,
        kind: Kind::Integer {
            min: 1,
            max: 65_536,
            field: Field {
                get: |c| c.taskmanager.network_required_per_output.into(),
                set: |c, v| c.taskmanager.network_required_per_output = narrow(v),
            },
        },
    },
    Key {
        name: "taskmanager.network.memory",
        doc: "Network buffer memory of one TaskManager, a hard cap: three quarters for the buffers tasks reserve when deployed (a task whose reservation does not fit is refused), a quarter lent to whichever gate or producer needs more.",
        secret: false,
        kind: Kind::Bytes(Field {
            get: |c| c.taskmanager.network_memory,
            set: |c, v| c.taskmanager.network_memory = v,
        }),
    },
    // [slot]
    Key {
        name: "slot.request.timeout",
        doc: "A task that waited this long for a slot fails with NoResourceAvailable.",
        secret: false,
        kind: duration!(slot.request.timeout),
    },
    // [jobmanager.scheduler]
    Key {
        name: "jobmanager.scheduler.slot-selection",
        doc: "Where a new slot is taken when locality does not decide: the TaskManager with the most free slots, or the fewest.",
        secret: false,
        kind: Kind::Choice {
            values: SlotSelectionKind::NAMES,
            field: Field {
                get: |c| c.jobmanager.scheduler.slot_selection.name(),
                set: |c, v| {
                    if let Some(kind) = SlotSelectionKind::from_name(v) {
                        c.jobmanager.scheduler.slot_selection = kind;
                    }
                },
            },
        },
    },
    Key {
        name: "jobmanager.scheduler.region-order",
        doc: "Which queued region gets slots next: first in, first out, or letting regions that fit overtake a head that does not (a bounded number of times).",
        secret: false,
        kind: Kind::Choice {
            values: RegionOrderKind::NAMES,
            field: Field {
                get: |c| c.jobmanager.scheduler.region_order.name(),
                set: |c, v| {
                    if let Some(kind) = RegionOrderKind::from_name(v) {
                        c.jobmanager.scheduler.region_order = kind;
                    }
                },
            },
        },
    },
    // [transport.tls]
    Key {
        name: "transport.tls.cert",
        doc: "This node's certificate chain (PEM); with key and ca, every connection runs TLS.",
        secret: false,
        kind: Kind::OptionalPath(Field {
            get: |c| tls_path(c, |t| &t.cert),
            set: |c, v| tls(c).cert = v.unwrap_or_default(),
        }),
    },
    Key {
        name: "transport.tls.key",
        doc: "Its private key (PEM).",
        secret: false,
        kind: Kind::OptionalPath(Field {
            get: |c| tls_path(c, |t| &t.key),
            set: |c, v| tls(c).key = v.unwrap_or_default(),
        }),
    },
    Key {
        name: "transport.tls.ca",
        doc: "The CA certificate(s) (PEM) peers' certificates must chain to.",
        secret: false,
        kind: Kind::OptionalPath(Field {
            get: |c| tls_path(c, |t| &t.ca),
            set: |c, v| tls(c).ca = v.unwrap_or_default(),
        }),
    },
    // [rest]
    Key {
        name: "rest.address",
        doc: "The host the REST API and dashboard bind to, and clients connect to.",
        secret: false,
        kind: Kind::Text(Field {
            get: |c| c.rest.address.clone(),
            set: |c, v| c.rest.address = v,
        }),
    },
    Key {
        name: "rest.port",
        doc: "The REST API's port; 0 picks a free one.",
        secret: false,
        kind: Kind::Port(Field {
            get: |c| c.rest.port,
            set: |c, v| c.rest.port = v,
        }),
    },
    Key {
        name: "rest.token",
        doc: "The bearer token every REST endpoint requires (unset: flint jobmanager uses this user's generated token).",
        secret: true,
        kind: Kind::OptionalText(Field {
            get: |c| c.rest.token.clone(),
            set: |c, v| c.rest.token = v,
        }),
    },
    Key {
        name: "rest.token-file",
        doc: "A file holding the REST token (one trailing newline ignored): keeps it off command lines and out of the environment.",
        secret: false,
        kind: Kind::OptionalPath(Field {
            get: |c| c.rest.token_file.clone(),
            set: |c, v| c.rest.token_file = v,
        }),
    },
    Key {
        name: "rest.allowed-hosts",
        doc: "Host names clients may address the REST API by besides its bound address (a DNS name, a proxy's); any other Host header is refused.",
        secret: false,
        kind: Kind::List(Field {
            get: |c| c.rest.allowed_hosts.clone(),
            set: |c, v| c.rest.allowed_hosts = v,
        }),
    },
    Key {
        name: "rest.read-without-token",
        doc: "Serve reads (GET: jobs and their configurations, TaskManagers, /metrics) without the token.",
        secret: false,
        kind: Kind::Bool(Field {
            get: |c| c.rest.read_without_token,
            set: |c, v| c.rest.read_without_token = v,
        }),
    },
    // [high-availability]
    Key {
        name: "high-availability.type",
        doc: "`none`: one JobManager for the cluster's life; `zookeeper`: standby JobManagers elect a leader through ZooKeeper and recover its jobs.",
        secret: false,
        kind: Kind::Choice {
            values: HighAvailabilityKind::NAMES,
            field: Field {
                get: |c| c.high_availability.kind.name(),
                set: |c, v| {
                    if let Some(kind) = HighAvailabilityKind::from_name(v) {
                        c.high_availability.kind = kind;
                    }
                },
            },
        },
    },
    Key {
        name: "high-availability.cluster-id",
        doc: "The JobManagers sharing it elect one leader; unset: cluster.id.",
        secret: false,
        kind: Kind::OptionalText(Field {
            get: |c| c.high_availability.cluster_id.clone(),
            set: |c, v| c.high_availability.cluster_id = v,
        }),
    },
    Key {
        name: "high-availability.storageDir",
        doc: "A directory all JobManagers reach (a shared file system): submitted job graphs are written there, ZooKeeper keeps pointers.",
        secret: false,
        kind: Kind::OptionalPath(Field {
            get: |c| c.high_availability.storage_dir.clone(),
            set: |c, v| c.high_availability.storage_dir = v,
        }),
    },
    Key {
        name: "high-availability.zookeeper.quorum",
        doc: "The ZooKeeper servers, host:port[,host:port...].",
        secret: false,
        kind: Kind::OptionalText(Field {
            get: |c| c.high_availability.quorum.clone(),
            set: |c, v| c.high_availability.quorum = v,
        }),
    },
    Key {
        name: "high-availability.zookeeper.path.root",
        doc: "The znode every Flint cluster's znodes live under.",
        secret: false,
        kind: Kind::Text(Field {
            get: |c| c.high_availability.root.clone(),
            set: |c, v| c.high_availability.root = v,
        }),
    },
    Key {
        name: "high-availability.zookeeper.client.session-timeout",
        doc: "How long ZooKeeper keeps a silent JobManager's session, and so its leadership.",
        secret: false,
        kind: duration!(high_availability.session_timeout),
    },
    Key {
        name: "high-availability.zookeeper.client.auth-file",
        doc: "A file holding user:password: sessions authenticate (digest) and znodes are CREATOR_ALL, closed to other clients.",
        secret: false,
        kind: Kind::OptionalPath(Field {
            get: |c| c.high_availability.auth_file.clone(),
            set: |c, v| c.high_availability.auth_file = v,
        }),
    },
    Key {
        name: "high-availability.zookeeper.client.connection-timeout",
        doc: "How long a process tries to reach the quorum at start before it gives up (exit 2).",
        secret: false,
        kind: duration!(high_availability.connection_timeout),
    },
    // top level
    Key {
        name: "seed",
        doc: "Seed of every node's random numbers; unset draws one. Replays a simulated or embedded run; flint processes ignore it.",
        secret: false,
        kind: Kind::OptionalInteger(Field {
            get: |c| c.seed,
            set: |c, v| c.seed = v,
        }),
    },
];
