//! `flint run --embedded JOB_FILE`: runs one job file on an embedded cluster and reports how it
//! went. The library side of the command; `src/bin/flint.rs` only parses the command line.
//! `flint run` against a running cluster ([`crate::client`]) shares the report ([`RunReport`]).
//!
//! A run goes through four steps, and each can only fail in its own way:
//!
//! 1. **Check.** The configuration is loaded (file, `FLINT_*` variables, flags: see
//!    [`crate::config`]), the job file is read with its parameters and validated against the
//!    built-in operators, and the job's largest pipelined region is checked to fit the largest
//!    pool allowed (its regions run in waves as slots free). Any problem here is reported
//!    before a single actor starts.
//! 2. **Start.** A [`MiniCluster`] starts with the resolved configuration. Unless set by a flag or
//!    the configuration, the pool holds just enough TaskManagers for the job's peak slots, up
//!    to the largest pool allowed (`ceil(min(peak_slots, max_pool × slots) / slots)`), and each
//!    TaskManager offers [`DEFAULT_SLOTS`] slots.
//! 3. **Watch.** Once the pool is up, the job is submitted and its status polled every
//!    [`POLL_INTERVAL`]; a progress line is printed whenever its status or its number of
//!    finished tasks changes, and a line for each task failure that made it restart
//!    ([`FailureFeed`]). A job still running when the timeout (counted from the cluster's
//!    start) runs out is cancelled.
//! 4. **Report.** The final status, the time taken, the restarts, the time each vertex ran (from
//!    its first subtask deploying to its last finishing), the failure reason of a failed job and,
//!    for a finished one, the directories its `file-sink`s wrote are printed; then the cluster
//!    shuts down.
//!
//! # Exit codes
//!
//! - **0**: the job FINISHED.
//! - **1**: the job FAILED or was CANCELED.
//! - **2**: a usage, configuration or job file error; nothing was started.
//! - **3**: a cluster error: the pool did not come up, an actor stopped answering, the job did
//!   not end within the timeout, or the report could not be written.
//!
//! This module never exits the process and never prints to stderr: it returns a [`RunReport`] or
//! a [`RunError`], and the binary turns those into an exit code and a message.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use tokio::time::Instant;

use crate::base::error_chain::ErrorChain;
use crate::base::ids::JobId;
use crate::cluster::minicluster::{MiniCluster, MiniClusterError};
use crate::config::{ClusterConfig, ConfigError, ConfigSources, FlagOverride};
use crate::job::file::{JobFileError, read_job_file};
use crate::job::graph::JobGraph;
use crate::job::states::{ExecutionState, JobStatus};
use crate::messages::job_manager::{JobDetails, VertexDetails};
use crate::operators::OperatorRegistry;
use crate::operators::builtin::FILE_SINK;
use crate::process::failures::FailureFeed;

/// Exit code: the job FINISHED.
pub const EXIT_FINISHED: u8 = 0;
/// Exit code: the job FAILED or was CANCELED.
pub const EXIT_JOB_FAILED: u8 = 1;
/// Exit code: a usage, configuration or job file error; nothing was started.
pub const EXIT_USAGE: u8 = 2;
/// Exit code: the cluster failed (stopped answering, timed out) or the report could not be
/// written.
pub const EXIT_CLUSTER: u8 = 3;

/// Slots per TaskManager when neither `--slots` nor `taskmanager.slots` in the configuration file
/// says otherwise.
pub const DEFAULT_SLOTS: u32 = 2;

/// How often the job's status is asked for while waiting.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// How long the cluster may take to shut down after the job ended.
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(10);

/// What to run and on what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOptions {
    /// The job file (TOML, see [`crate::job::file`]).
    pub job_file: PathBuf,
    /// The job file's `${name}` parameters.
    pub params: BTreeMap<String, String>,
    /// TaskManagers to start; `None`: the configuration file's `resourcemanager.pool-size`, or
    /// else just enough for the job's peak slots.
    pub pool_size: Option<u32>,
    /// Slots per TaskManager; `None`: the configuration file's `taskmanager.slots`, or else
    /// [`DEFAULT_SLOTS`].
    pub slots: Option<u32>,
    /// A cluster configuration file (TOML, see [`crate::config`]); `None`: `FLINT_CONFIG`, if set.
    pub config: Option<PathBuf>,
    /// The environment the `FLINT_*` configuration variables are read from.
    pub env: Vec<(String, String)>,
    /// Flags that set configuration keys (`-D key=value`); `pool_size` and `slots` win over them.
    pub overrides: Vec<FlagOverride>,
    /// How long the cluster's bring-up and the job together may take; a job still running then
    /// is cancelled and the run fails with [`RunError::TimedOut`].
    pub timeout: Duration,
}

/// A command line that cannot be run as it is. Not retryable: the command line must change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    /// A `--param` without `=`.
    #[error("--param `{arg}` is not NAME=VALUE: it has no `=`")]
    ParamWithoutEquals {
        /// The argument as given.
        arg: String,
    },
    /// A `--param` whose name a job file could never use.
    #[error(
        "--param `{arg}` has no valid parameter name before `=`: a name is made of letters, \
         digits, `_`, `-` and `.`"
    )]
    BadParamName {
        /// The argument as given.
        arg: String,
    },
    /// The same parameter given twice (almost always a mistake in a script).
    #[error("--param `{name}` is given twice (`{first}` and `{second}`); give it once")]
    DuplicateParam {
        /// The parameter.
        name: String,
        /// The first value.
        first: String,
        /// The second value.
        second: String,
    },
}

/// Why a run did not produce a report. [`exit_code`](Self::exit_code) says which class it is.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The command line is wrong. Not retryable.
    #[error(transparent)]
    Usage(#[from] UsageError),
    /// The configuration cannot be read or is invalid (names the key, the value and its
    /// source: the file, a variable, a flag such as `--slots 0`). Not retryable.
    #[error(transparent)]
    Config(ConfigError),
    /// The job file cannot be turned into a job. Not retryable: the file or the parameters
    /// must change.
    #[error(transparent)]
    JobFile(#[from] JobFileError),
    /// The job's largest pipelined region needs more slots at once than the largest allowed
    /// pool offers. Not retryable.
    #[error(
        "the job needs {needed} slots at once but the pool can never offer more than {offered} \
         ({} × {}); raise --slots or resourcemanager.max-pool-size, or lower the parallelism",
        count((*.max_pool).into(), "TaskManager", "TaskManagers"),
        count((*.slots).into(), "slot", "slots")
    )]
    TooLarge {
        /// The slots of the job's largest pipelined region.
        needed: u64,
        /// `max_pool × slots`.
        offered: u64,
        /// `resourcemanager.max-pool-size`.
        max_pool: u32,
        /// Slots per TaskManager.
        slots: u32,
    },
    /// The embedded cluster failed: it did not start, refused the job or stopped answering.
    /// Retryable if an ask timed out.
    #[error("the embedded cluster failed")]
    Cluster(#[source] MiniClusterError),
    /// The job did not end in time; it was cancelled. Retryable with a longer timeout.
    #[error(
        "job {job_id} was still {status} after {} ({tasks_finished}/{tasks_total} tasks \
         finished); it was cancelled (raise --timeout to wait longer)",
        humantime::format_duration(*.waited)
    )]
    TimedOut {
        /// The job.
        job_id: JobId,
        /// How long the run waited.
        waited: Duration,
        /// The job's status then.
        status: JobStatus,
        /// Tasks finished then.
        tasks_finished: u32,
        /// All tasks.
        tasks_total: u32,
    },
    /// Progress or the report could not be written (stdout closed). Not retryable.
    #[error("cannot write the run's progress")]
    Output(#[from] std::io::Error),
}

impl RunError {
    /// The process exit code for this error: [`EXIT_USAGE`] when nothing was started,
    /// [`EXIT_CLUSTER`] otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Usage(_) | Self::Config(_) | Self::JobFile(_) | Self::TooLarge { .. } => {
                EXIT_USAGE
            }
            Self::Cluster(_) | Self::TimedOut { .. } | Self::Output(_) => EXIT_CLUSTER,
        }
    }
}

impl From<MiniClusterError> for RunError {
    fn from(error: MiniClusterError) -> Self {
        Self::Cluster(error)
    }
}

/// Parses one `--param NAME=VALUE` (the value may be empty and may contain `=`).
pub fn parse_param(arg: &str) -> Result<(String, String), UsageError> {
    let Some((name, value)) = arg.split_once('=') else {
        return Err(UsageError::ParamWithoutEquals {
            arg: arg.to_owned(),
        });
    };
    // The job file format's rule for parameter names (see `crate::job::file`).
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    if name.is_empty() || !name.chars().all(valid) {
        return Err(UsageError::BadParamName {
            arg: arg.to_owned(),
        });
    }
    Ok((name.to_owned(), value.to_owned()))
}

/// Collects parsed `--param`s into the map [`RunOptions::params`] takes; a name given twice is
/// an error.
pub fn collect_params(
    params: impl IntoIterator<Item = (String, String)>,
) -> Result<BTreeMap<String, String>, UsageError> {
    let mut map = BTreeMap::new();
    for (name, value) in params {
        if let Some(first) = map.get(&name) {
            return Err(UsageError::DuplicateParam {
                first: String::clone(first),
                second: value,
                name,
            });
        }
        map.insert(name, value);
    }
    Ok(map)
}

/// How one vertex of the job went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VertexTiming {
    /// The vertex.
    pub name: String,
    /// Its operator.
    pub operator: String,
    /// Its subtasks.
    pub parallelism: u32,
    /// From its first subtask deploying (or running) to its last finishing; `None` unless every
    /// subtask finished.
    pub duration: Option<Duration>,
    /// How many subtasks ended in each state.
    pub states: BTreeMap<ExecutionState, u32>,
}

impl VertexTiming {
    /// The timing of `vertex`, from its subtasks' state timestamps (or, for a job answered
    /// from the job result store, its summary).
    pub fn of(vertex: &VertexDetails) -> Self {
        let summary = vertex.summary();
        Self {
            name: vertex.name.clone(),
            operator: vertex.operator.clone(),
            parallelism: summary.parallelism,
            duration: summary
                .started_at_ms
                .zip(summary.ended_at_ms)
                .map(|(start, end)| Duration::from_millis(end.saturating_sub(start))),
            states: summary.states.into_iter().collect(),
        }
    }
}

/// How the job went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunReport {
    /// The job.
    pub job_id: JobId,
    /// Its name.
    pub name: String,
    /// Its final status: FINISHED, FAILED or CANCELED.
    pub status: JobStatus,
    /// From submission to the final status.
    pub elapsed: Duration,
    /// Tasks finished.
    pub tasks_finished: u32,
    /// All tasks.
    pub tasks_total: u32,
    /// Restarts the job went through.
    pub restarts: u32,
    /// Why it failed, if it did.
    pub failure: Option<String>,
    /// Per vertex, in job graph order.
    pub vertices: Vec<VertexTiming>,
    /// The directories the job's `file-sink`s write to, in job graph order.
    pub outputs: Vec<PathBuf>,
}

impl RunReport {
    /// The report of a job that ended with `details`.
    pub fn new(details: &JobDetails, elapsed: Duration, outputs: Vec<PathBuf>) -> Self {
        Self {
            job_id: details.summary.job_id,
            name: details.summary.name.clone(),
            status: details.summary.status,
            elapsed,
            tasks_finished: details.summary.tasks_finished,
            tasks_total: details.summary.tasks_total,
            restarts: details.restarts,
            failure: details.failure.clone(),
            vertices: details.vertices.iter().map(VertexTiming::of).collect(),
            outputs,
        }
    }

    /// The process exit code: [`EXIT_FINISHED`] or [`EXIT_JOB_FAILED`].
    pub fn exit_code(&self) -> u8 {
        if self.status == JobStatus::Finished {
            EXIT_FINISHED
        } else {
            EXIT_JOB_FAILED
        }
    }

    /// Prints the report as the CLI shows it.
    pub fn write_to(&self, out: &mut impl Write) -> std::io::Result<()> {
        let restarts = count(self.restarts.into(), "restart", "restarts");
        writeln!(
            out,
            "\nJob `{}` {} in {} ({}/{} tasks finished, {restarts})",
            self.name,
            self.status,
            seconds(self.elapsed),
            self.tasks_finished,
            self.tasks_total,
        )?;
        if let Some(failure) = &self.failure {
            writeln!(out, "Failure: {failure}")?;
        }
        let rows: Vec<[String; 4]> = self
            .vertices
            .iter()
            .map(|v| {
                let time = match v.duration {
                    Some(duration) => seconds(duration),
                    None => v
                        .states
                        .iter()
                        .map(|(state, n)| format!("{n} {state}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                };
                [
                    v.name.clone(),
                    v.operator.clone(),
                    v.parallelism.to_string(),
                    time,
                ]
            })
            .collect();
        let header = ["vertex", "operator", "parallelism", "time"].map(str::to_owned);
        let mut widths = [0; 4];
        for row in std::iter::once(&header).chain(&rows) {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        for row in std::iter::once(&header).chain(&rows) {
            writeln!(
                out,
                "  {:<w0$}  {:<w1$}  {:>w2$}  {}",
                row[0],
                row[1],
                row[2],
                row[3],
                w0 = widths[0],
                w1 = widths[1],
                w2 = widths[2],
            )?;
        }
        // A job that did not finish may have left nothing, or partial files from an attempt.
        if self.status == JobStatus::Finished {
            for output in &self.outputs {
                writeln!(out, "Output: {}", output.display())?;
            }
        }
        Ok(())
    }
}

/// `1 slot`, `2 slots`.
fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `1.23s`.
fn seconds(duration: Duration) -> String {
    format!("{:.2}s", duration.as_secs_f64())
}

/// Which cluster keys the configuration file set explicitly, so its values win over the run's
/// defaults (but not over flags).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct ExplicitKeys {
    pool_size: bool,
    slots: bool,
}

/// Loads the configuration from the file, the environment and the flags (`--pool-size` and
/// `--slots` last), and says which of the two keys the run's defaults must leave alone.
fn load_config(options: &RunOptions) -> Result<(ClusterConfig, ExplicitKeys), RunError> {
    let mut flags = options.overrides.clone();
    if let Some(size) = options.pool_size {
        flags.push(FlagOverride::new(
            "resourcemanager.pool-size",
            size.to_string(),
            "--pool-size",
        ));
    }
    if let Some(slots) = options.slots {
        flags.push(FlagOverride::new(
            "taskmanager.slots",
            slots.to_string(),
            "--slots",
        ));
    }
    let loaded = ConfigSources {
        file: options.config.clone(),
        env: options.env.clone(),
        flags,
    }
    .load()
    .map_err(RunError::Config)?;
    for warning in &loaded.warnings {
        log::warn!("{warning}");
    }
    let explicit = ExplicitKeys {
        pool_size: loaded.is_set("resourcemanager.pool-size"),
        slots: loaded.is_set("taskmanager.slots"),
    };
    Ok((loaded.config, explicit))
}

/// How many slots a job needs: at its peak (every vertex at once) and for its largest pipelined
/// region (what it cannot run without).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotNeeds {
    /// Per slot sharing group, the largest parallelism, summed.
    pub peak: u64,
    /// The slots of the largest pipelined region.
    pub largest_region: u64,
}

impl SlotNeeds {
    /// The needs of a validated graph.
    pub fn of(graph: &JobGraph) -> Self {
        let peak = crate::job::regions::peak_slots(graph);
        // The regions of a validated graph always compute; were they not to, the peak is the
        // safe bound.
        let largest_region = crate::job::regions::largest_region_slots(graph).unwrap_or(peak);
        Self {
            peak,
            largest_region,
        }
    }
}

/// Applies the run's defaults to the keys no source set (slots: [`DEFAULT_SLOTS`]; the pool:
/// just enough for the job's peak slots, up to the largest pool allowed) and checks that the
/// job's largest region fits the largest pool allowed.
fn resolve_config(
    mut config: ClusterConfig,
    explicit: ExplicitKeys,
    needs: SlotNeeds,
) -> Result<ClusterConfig, RunError> {
    if !explicit.slots {
        config.taskmanager.slots = DEFAULT_SLOTS;
    }
    let slots = config.taskmanager.slots;
    let max_pool = config.resourcemanager.max_pool_size;
    let offered = u64::from(max_pool) * u64::from(slots);
    if needs.largest_region > offered {
        return Err(RunError::TooLarge {
            needed: needs.largest_region,
            offered,
            max_pool,
            slots,
        });
    }
    if !explicit.pool_size {
        // Fits in u32: the slots are at most max_pool * slots, so the quotient is <= max_pool.
        let wanted = needs.peak.min(offered);
        config.resourcemanager.pool_size =
            u32::try_from(wanted.div_ceil(u64::from(slots))).unwrap_or(max_pool);
    }
    config.validate().map_err(RunError::Config)?;
    Ok(config)
}

/// The directories the job's `file-sink`s write to (the report's output paths; shared with
/// `flint run` against a cluster, [`crate::client`]).
pub fn sink_outputs(graph: &JobGraph) -> Vec<PathBuf> {
    graph
        .vertices
        .iter()
        .filter(|v| v.operator == FILE_SINK)
        .filter_map(|v| v.config.get("path").map(PathBuf::from))
        .collect()
}

/// Runs the job described by `options` on an embedded cluster, printing progress and the final
/// report to `out`. Must run inside an actix System (`#[actix::main]`). See the module docs for
/// the steps and [`RunError::exit_code`] / [`RunReport::exit_code`] for the outcome.
pub async fn run_embedded(
    options: RunOptions,
    out: &mut impl Write,
) -> Result<RunReport, RunError> {
    let registry = OperatorRegistry::with_builtins();
    let (config, explicit) = load_config(&options)?;
    let graph = read_job_file(&options.job_file, &options.params, |op| {
        registry.contains(op)
    })?;
    let needs = SlotNeeds::of(&graph);
    let peak_slots = needs.peak;
    let config = resolve_config(config, explicit, needs)?;
    let outputs = sink_outputs(&graph);
    let tasks: u64 = graph
        .vertices
        .iter()
        .map(|v| u64::from(v.parallelism))
        .sum();
    writeln!(
        out,
        "Running job `{}` ({}, {}, {} at peak) on an embedded cluster of {} × {}",
        graph.name,
        count(graph.vertices.len() as u64, "vertex", "vertices"),
        count(tasks, "task", "tasks"),
        count(peak_slots, "slot", "slots"),
        count(
            config.resourcemanager.pool_size.into(),
            "TaskManager",
            "TaskManagers"
        ),
        count(config.taskmanager.slots.into(), "slot", "slots"),
    )?;

    let pool_size = config.resourcemanager.pool_size;
    let cluster = MiniCluster::start(config)?;
    let give_up = Instant::now() + options.timeout;
    let outcome = async {
        // Submitted only once the pool is up: the JobManager grows the pool for a job that needs
        // more slots only if the resource manager is connected when the job's demand appears.
        let began = Instant::now();
        let status = cluster.wait_for_pool(pool_size, options.timeout).await?;
        writeln!(
            out,
            "Cluster ready in {}: {}, {}",
            seconds(began.elapsed()),
            count(
                status.registered_task_managers().into(),
                "TaskManager",
                "TaskManagers"
            ),
            count(status.total_slots, "slot", "slots"),
        )?;
        watch(&cluster, graph, give_up, options.timeout, out).await
    }
    .await;
    let reported = outcome.and_then(|(details, elapsed)| {
        let report = RunReport::new(&details, elapsed, outputs);
        report.write_to(out)?;
        Ok(report)
    });
    // The outcome is known: a cluster that does not stop cleanly is worth a warning, not a
    // different exit code (the process ends right after, taking its threads with it).
    match tokio::time::timeout(SHUTDOWN_DEADLINE, cluster.shutdown()).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => log::warn!(
            "the embedded cluster did not shut down cleanly: {}",
            ErrorChain(&error)
        ),
        Err(_) => log::warn!(
            "the embedded cluster did not shut down within {SHUTDOWN_DEADLINE:?}; leaving it"
        ),
    }
    reported
}

/// Submits the job and waits for it to end, printing progress; cancels it if it is still running
/// at `give_up` (`timeout` after the cluster started).
async fn watch(
    cluster: &MiniCluster,
    graph: JobGraph,
    give_up: Instant,
    timeout: Duration,
    out: &mut impl Write,
) -> Result<(JobDetails, Duration), RunError> {
    let job_id = cluster.submit_job(graph).await?;
    let submitted = Instant::now();
    writeln!(out, "Submitted job {job_id}")?;
    let mut shown = None;
    let mut failures = FailureFeed::default();
    loop {
        let details = cluster.job_status(job_id).await?;
        let summary = &details.summary;
        let elapsed = submitted.elapsed();
        for line in failures.new_lines(&details) {
            writeln!(out, "{line}")?;
        }
        let key = (summary.status, summary.tasks_finished);
        if shown != Some(key) {
            writeln!(
                out,
                "{}",
                progress_line(
                    elapsed,
                    summary.status,
                    summary.tasks_finished,
                    summary.tasks_total
                )
            )?;
            out.flush()?;
            shown = Some(key);
        }
        if summary.status.is_globally_terminal() {
            return Ok((details, elapsed));
        }
        if Instant::now() >= give_up {
            if let Err(error) = cluster.cancel_job(job_id).await {
                log::warn!(
                    "could not cancel job {job_id} after the timeout: {}",
                    ErrorChain(&error)
                );
            }
            return Err(RunError::TimedOut {
                job_id,
                waited: timeout,
                status: summary.status,
                tasks_finished: summary.tasks_finished,
                tasks_total: summary.tasks_total,
            });
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// `[  1.2s] RUNNING  5/8 tasks finished`.
pub fn progress_line(elapsed: Duration, status: JobStatus, finished: u32, total: u32) -> String {
    format!(
        "[{:>5.1}s] {:<8} {finished}/{total} tasks finished",
        elapsed.as_secs_f64(),
        status.as_str()
    )
}

#[cfg(test)]
mod tests;
