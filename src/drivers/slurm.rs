//! The Slurm driver: each worker is one Slurm batch job running a TaskManager, so Flint's pool
//! lives inside an HPC cluster's queue, as dask-jobqueue's and Ray's Slurm clusters do.
//!
//! It talks to Slurm through its command-line tools, which every Slurm installation has and
//! whose `--parsable` / `--format` output has been stable for a decade: `sbatch --parsable`
//! submits (the script on stdin), one `squeue --states=all --name=...` call per
//! `slurm.poll-interval` follows every job of the cluster, `scancel` stops one. (`slurmrestd`
//! would need a JWT or a unix-socket setup of its own, and its API version changes with every
//! Slurm release.)
//!
//! Every job is named `flint-<cluster.id>` and carries its worker's resource id as its comment:
//! after a JobManager restart or a leader change, the first poll finds the jobs of the
//! cluster that are not this driver's own. Running ones are adopted (reported to the resource
//! manager as recovered workers, which must register within the registration timeout or are
//! released and cancelled); queued ones are cancelled, as the new leader asks for its own.
//!
//! What a Slurm state means for the pool is [`state::STATES`]: queued jobs stay pending
//! requests, a running job is `WorkerStarted`, an ended one `WorkerFailed` (it never ran: a
//! start failure, backed off) or `WorkerTerminated` (a lost worker, replaced).
//!
//! Production-only: this module starts OS processes (the simulation uses another driver).

pub mod state;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::AsyncWriteExt;

use super::local_process::{INHERITED_ENV, ProcessTemplate};
use super::{DriverError, WorkerDriver, WorkerRequest};
use crate::base::ids::ResourceId;
use crate::config::SlurmConfig;
use crate::messages::resource_manager::{
    ResourceManagerGateway, WorkerFailed, WorkerStarted, WorkerTerminated, WorkersRecovered,
};
use state::{Event, Phase};

/// How long one `sbatch`, `squeue` or `scancel` may take before it counts as failed (Slurm's
/// tools retry an unreachable controller for `MessageTimeout` and more).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// The variables besides [`INHERITED_ENV`] that Slurm's tools need to find their cluster.
const SLURM_ENV: &[&str] = &["SLURM_CONF"];

/// Everything a submission needs, fixed for the driver's life.
#[derive(Debug, Clone)]
pub struct SlurmSubmission {
    /// `flint-<cluster.id>` (characters Slurm's lists would split on replaced).
    pub job_name: String,
    /// The `sbatch` options besides the name and comment.
    pub options: Vec<String>,
    /// What each job runs.
    pub template: ProcessTemplate,
    /// How often `squeue` is asked.
    pub poll_interval: Duration,
}

impl SlurmSubmission {
    /// The submission `config` describes for a cluster called `cluster_id`, running `template`.
    pub fn new(
        cluster_id: &str,
        config: &SlurmConfig,
        slots: u32,
        template: ProcessTemplate,
    ) -> Self {
        let job_name = format!("flint-{cluster_id}")
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let mut options = vec![
            "--no-requeue".to_owned(),
            format!(
                "--cpus-per-task={}",
                config.cpus_per_worker.unwrap_or(u64::from(slots))
            ),
        ];
        if let Some(memory) = config.memory_per_worker {
            options.push(format!("--mem={}M", memory.div_ceil(1 << 20)));
        }
        for (flag, value) in [
            ("--partition", &config.partition),
            ("--account", &config.account),
            ("--time", &config.time_limit),
        ] {
            if let Some(value) = value {
                options.push(format!("{flag}={value}"));
            }
        }
        options.extend(config.sbatch_options.iter().cloned());
        Self {
            job_name,
            options,
            template,
            poll_interval: config.poll_interval,
        }
    }

    /// The batch script of one worker: `exec` of its command, each word single-quoted.
    fn script(&self, request: &WorkerRequest) -> String {
        let mut script = String::from("#!/bin/sh\nexec");
        let program = self.template.program.display().to_string();
        for word in std::iter::once(program).chain(self.template.arguments(request, "")) {
            let _ = write!(script, " '{}'", word.replace('\'', r"'\''"));
        }
        script.push('\n');
        script
    }
}

/// One worker job as the driver knows it.
#[derive(Debug, Clone)]
struct Job {
    /// Slurm's id, once `sbatch` answered.
    id: Option<u64>,
    /// The poll count when the id became known: a poll that started earlier cannot have
    /// listed it.
    known_at: u64,
    /// Whether the resource manager heard it is up.
    reported_up: bool,
    /// Slurm's last state and reason, for `flint pool-size`.
    seen: String,
}

#[derive(Debug, Default)]
struct Jobs {
    by_worker: BTreeMap<ResourceId, Job>,
    polls: u64,
    /// Whether the first poll (the reconciliation) is done.
    reconciled: bool,
    stopped: bool,
}

/// One row of `squeue`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueRow {
    /// The job id.
    pub id: u64,
    /// Its state (`PENDING`, `RUNNING`, ...).
    pub state: String,
    /// Its comment: the worker's resource id.
    pub comment: String,
    /// Slurm's reason (`Resources`, `None`, ...).
    pub reason: String,
}

/// `squeue`'s format: fields split by `|`, which neither states nor reasons contain (the
/// comment, last, keeps any).
const SQUEUE_FORMAT: &str = "%i|%T|%r|%k";

/// Parses `squeue -h -o SQUEUE_FORMAT` output; lines that do not parse are skipped.
pub fn parse_queue(output: &str) -> Vec<QueueRow> {
    output
        .lines()
        .filter_map(|line| {
            let mut fields = line.trim().splitn(4, '|');
            let id = fields.next()?.trim().parse().ok()?;
            let state = fields.next()?.trim().to_owned();
            let reason = fields.next()?.trim().to_owned();
            // squeue prints an empty comment as `(null)`.
            let comment = match fields.next().unwrap_or("").trim() {
                "(null)" => String::new(),
                comment => comment.to_owned(),
            };
            Some(QueueRow {
                id,
                state,
                comment,
                reason,
            })
        })
        .collect()
}

/// What one poll tells the resource manager, and the jobs it cancels.
#[derive(Debug, Default, PartialEq, Eq)]
struct Outcome {
    started: Vec<ResourceId>,
    failed: Vec<(ResourceId, String)>,
    terminated: Vec<(ResourceId, String)>,
    /// After the first poll: the workers adopted (maybe none), for `WorkersRecovered`.
    recovered: Option<Vec<ResourceId>>,
    cancel: Vec<u64>,
}

impl Jobs {
    /// Applies poll number `poll`'s rows to the jobs.
    fn apply(&mut self, poll: u64, rows: &[QueueRow]) -> Outcome {
        let mut outcome = Outcome::default();
        let by_id: BTreeMap<u64, &QueueRow> = rows.iter().map(|row| (row.id, row)).collect();
        if !self.reconciled {
            self.reconciled = true;
            let recovered = outcome.recovered.insert(Vec::new());
            let ours: Vec<u64> = self.by_worker.values().filter_map(|job| job.id).collect();
            for row in rows.iter().filter(|row| !ours.contains(&row.id)) {
                let resource_id = ResourceId::new(row.comment.clone());
                match state::phase(&row.state) {
                    Some(Phase::Up) if !row.comment.is_empty() => {
                        log::info!(
                            "slurm driver: adopting worker {resource_id} (Slurm job {}, {}) of a previous leader",
                            row.id,
                            row.state
                        );
                        self.by_worker.insert(
                            resource_id.clone(),
                            Job {
                                id: Some(row.id),
                                known_at: 0,
                                reported_up: true,
                                seen: row.state.clone(),
                            },
                        );
                        recovered.push(resource_id);
                    }
                    Some(Phase::Ended) => {}
                    _ => {
                        log::info!(
                            "slurm driver: cancelling Slurm job {} ({}) of a previous leader",
                            row.id,
                            row.state
                        );
                        outcome.cancel.push(row.id);
                    }
                }
            }
        }
        let mut ended = Vec::new();
        for (resource_id, job) in &mut self.by_worker {
            let Some(id) = job.id else { continue };
            let (phase, described) = match by_id.get(&id) {
                Some(row) => {
                    job.seen = format!("{} ({})", row.state, row.reason);
                    let phase = state::phase(&row.state).unwrap_or_else(|| {
                        log::warn!(
                            "slurm driver: Slurm job {id} is in state {}, unknown to this driver; treating it as queued",
                            row.state
                        );
                        Phase::Waiting
                    });
                    (
                        phase,
                        format!("Slurm job {id} is {} ({})", row.state, row.reason),
                    )
                }
                None if job.known_at < poll => (
                    Phase::Ended,
                    format!("Slurm job {id} is no longer in Slurm's queue"),
                ),
                None => continue,
            };
            match state::event(phase, job.reported_up) {
                Event::None => {}
                Event::Started => {
                    job.reported_up = true;
                    outcome.started.push(resource_id.clone());
                }
                Event::StartFailed => {
                    outcome.failed.push((resource_id.clone(), described));
                    ended.push(resource_id.clone());
                }
                Event::Terminated => {
                    outcome.terminated.push((resource_id.clone(), described));
                    ended.push(resource_id.clone());
                }
            }
        }
        for resource_id in ended {
            self.by_worker.remove(&resource_id);
        }
        outcome
    }
}

/// Starts workers as Slurm jobs.
pub struct SlurmDriver {
    submission: Arc<SlurmSubmission>,
    jobs: Arc<Mutex<Jobs>>,
    resource_manager: Option<ResourceManagerGateway>,
    poller: Option<tokio::task::JoinHandle<()>>,
}

impl SlurmDriver {
    /// A driver submitting `submission`'s jobs.
    pub fn new(submission: SlurmSubmission) -> Self {
        Self {
            submission: Arc::new(submission),
            jobs: Arc::default(),
            resource_manager: None,
            poller: None,
        }
    }
}

fn lock(jobs: &Mutex<Jobs>) -> MutexGuard<'_, Jobs> {
    jobs.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The variables of this process a Slurm tool gets: [`INHERITED_ENV`] and [`SLURM_ENV`].
fn slurm_env() -> impl Iterator<Item = (&'static str, OsString)> {
    INHERITED_ENV
        .iter()
        .chain(SLURM_ENV)
        .filter_map(|name| Some((*name, std::env::var_os(name)?)))
}

/// A Slurm tool with [`slurm_env`] (and `extra`), nothing else.
fn slurm_command(program: &str, extra: &[(String, OsString)]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(program);
    command
        .env_clear()
        .envs(slurm_env())
        .envs(extra.iter().map(|(k, v)| (k, v)))
        .kill_on_drop(true);
    command
}

/// Runs a Slurm tool to its end; its stdout, or an error naming it with its stderr.
async fn run(
    mut command: tokio::process::Command,
    stdin: Option<String>,
) -> Result<String, String> {
    let name = format!("{:?}", command.as_std().get_program());
    command
        .stdin(if stdin.is_some() {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = command
        .spawn()
        .map_err(|error| format!("cannot run {name}: {error}"))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .await
            .map_err(|error| format!("cannot write {name}'s script: {error}"))?;
    }
    let output = tokio::time::timeout(COMMAND_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| format!("{name} did not answer within {COMMAND_TIMEOUT:?}"))?
        .map_err(|error| format!("{name} failed: {error}"))?;
    if !output.status.success() {
        return Err(format!(
            "{name} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// `scancel` of `ids`, in the background.
fn cancel(ids: Vec<u64>) {
    if ids.is_empty() {
        return;
    }
    let mut command = slurm_command("scancel", &[]);
    command.args(ids.iter().map(u64::to_string));
    actix::spawn(async move {
        if let Err(error) = run(command, None).await {
            log::warn!("slurm driver: cannot cancel Slurm jobs {ids:?}: {error}");
        }
    });
}

/// One `squeue` of the cluster's jobs, ended ones included.
async fn poll_queue(job_name: &str) -> Result<Vec<QueueRow>, String> {
    let mut command = slurm_command("squeue", &[]);
    command.args([
        "--noheader",
        "--all",
        "--states=all",
        &format!("--name={job_name}"),
        &format!("--format={SQUEUE_FORMAT}"),
    ]);
    Ok(parse_queue(&run(command, None).await?))
}

fn report(rm: &ResourceManagerGateway, outcome: Outcome) {
    if let Some(resource_ids) = outcome.recovered {
        rm.workers_recovered
            .do_send(WorkersRecovered { resource_ids });
    }
    for resource_id in outcome.started {
        log::info!("slurm driver: worker {resource_id} runs");
        rm.worker_started.do_send(WorkerStarted { resource_id });
    }
    for (resource_id, reason) in outcome.failed {
        log::warn!("slurm driver: worker {resource_id} did not start: {reason}");
        rm.worker_failed.do_send(WorkerFailed {
            resource_id,
            reason,
        });
    }
    for (resource_id, reason) in outcome.terminated {
        log::warn!("slurm driver: worker {resource_id} ended: {reason}");
        rm.worker_terminated.do_send(WorkerTerminated {
            resource_id,
            reason,
        });
    }
    cancel(outcome.cancel);
}

impl WorkerDriver for SlurmDriver {
    fn name(&self) -> &'static str {
        "slurm"
    }

    fn initialize(&mut self, resource_manager: ResourceManagerGateway) {
        self.resource_manager = Some(resource_manager.clone());
        let (jobs, submission) = (self.jobs.clone(), self.submission.clone());
        self.poller = Some(actix::spawn(async move {
            loop {
                let poll = {
                    let mut jobs = lock(&jobs);
                    if jobs.stopped {
                        return;
                    }
                    jobs.polls += 1;
                    jobs.polls
                };
                match poll_queue(&submission.job_name).await {
                    Ok(rows) => {
                        let outcome = lock(&jobs).apply(poll, &rows);
                        report(&resource_manager, outcome);
                    }
                    Err(error) => {
                        log::warn!("slurm driver: cannot follow the worker jobs: {error}")
                    }
                }
                tokio::time::sleep(submission.poll_interval).await;
            }
        }));
    }

    fn can_start_workers(&self) -> bool {
        true
    }

    fn recovers_workers(&self) -> bool {
        true
    }

    fn requests_queue(&self) -> bool {
        true
    }

    fn adopts_unknown_workers(&self) -> bool {
        false
    }

    fn request_worker(&mut self, request: WorkerRequest) -> Result<(), DriverError> {
        let resource_id = request.resource_id.clone();
        let script = self.submission.script(&request);
        let mut command = slurm_command("sbatch", &self.submission.template.env);
        command
            .arg("--parsable")
            .arg(format!("--job-name={}", self.submission.job_name))
            .arg(format!("--comment={resource_id}"))
            .args(&self.submission.options);
        lock(&self.jobs).by_worker.insert(
            resource_id.clone(),
            Job {
                id: None,
                known_at: 0,
                reported_up: false,
                seen: "submitting".to_owned(),
            },
        );
        let (jobs, rm) = (self.jobs.clone(), self.resource_manager.clone());
        actix::spawn(async move {
            let submitted = run(command, Some(script)).await.and_then(|out| {
                let id = out.trim().split(';').next().unwrap_or("");
                id.parse::<u64>()
                    .map_err(|_| format!("sbatch answered {out:?}, not a job id"))
            });
            let mut state = lock(&jobs);
            let wanted = !state.stopped && state.by_worker.contains_key(&resource_id);
            match submitted {
                Ok(id) if wanted => {
                    log::info!("slurm driver: worker {resource_id} is Slurm job {id}");
                    let known_at = state.polls;
                    if let Some(job) = state.by_worker.get_mut(&resource_id) {
                        job.id = Some(id);
                        job.known_at = known_at;
                        job.seen = "submitted".to_owned();
                    }
                }
                // Released (or the driver stopped) while sbatch ran.
                Ok(id) => {
                    drop(state);
                    cancel(vec![id]);
                }
                Err(reason) => {
                    state.by_worker.remove(&resource_id);
                    drop(state);
                    log::warn!("slurm driver: cannot submit worker {resource_id}: {reason}");
                    if let (Some(rm), true) = (rm, wanted) {
                        rm.worker_failed.do_send(WorkerFailed {
                            resource_id,
                            reason,
                        });
                    }
                }
            }
        });
        Ok(())
    }

    fn release_worker(&mut self, resource_id: &ResourceId) {
        let job = lock(&self.jobs).by_worker.remove(resource_id);
        if let Some(id) = job.and_then(|job| job.id) {
            log::info!("slurm driver: released worker {resource_id}; cancelling Slurm job {id}");
            cancel(vec![id]);
        }
    }

    fn shutdown(&mut self) {
        let ids: Vec<u64> = {
            let mut jobs = lock(&self.jobs);
            jobs.stopped = true;
            std::mem::take(&mut jobs.by_worker)
                .into_values()
                .filter_map(|job| job.id)
                .collect()
        };
        if let Some(poller) = self.poller.take() {
            poller.abort();
        }
        if !ids.is_empty() {
            // Synchronously: the process may exit right after, and no worker job may outlive
            // the cluster that owns it.
            let status = std::process::Command::new("scancel")
                .env_clear()
                .envs(slurm_env())
                .args(ids.iter().map(u64::to_string))
                .stdin(std::process::Stdio::null())
                .status();
            match status {
                Ok(status) if status.success() => {
                    log::info!("slurm driver: cancelled Slurm jobs {ids:?}");
                }
                other => log::warn!("slurm driver: cannot cancel Slurm jobs {ids:?}: {other:?}"),
            }
        }
    }

    fn describe_workers(&self) -> BTreeMap<ResourceId, String> {
        lock(&self.jobs)
            .by_worker
            .iter()
            .map(|(resource_id, job)| {
                let detail = match job.id {
                    Some(id) => format!("slurm job {id}: {}", job.seen),
                    None => "slurm: submitting".to_owned(),
                };
                (resource_id.clone(), detail)
            })
            .collect()
    }
}

impl Drop for SlurmDriver {
    fn drop(&mut self) {
        if !lock(&self.jobs).stopped {
            self.shutdown();
        }
    }
}

#[cfg(test)]
mod tests;
