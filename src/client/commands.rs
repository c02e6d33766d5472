//! The client commands: `run` against a cluster, `list`, `status`, `cancel`, `taskmanagers`,
//! `pool-size` and `stop`, each a few REST requests and their output.
//!
//! Output goes to the writer the caller gives (stdout for the CLI): the human rendering
//! ([`super::render`]) or, with [`OutputFormat::Json`], the REST answer exactly as the server
//! sent it. Live progress goes to its own draw target (stderr). Like [`crate::process::run`], nothing
//! here exits the process or prints to stderr: each command returns its exit code or a
//! [`ClientError`] that knows its own ([`ClientError::exit_code`]).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::ProgressDrawTarget;

use super::endpoint::{Endpoint, EndpointError, EndpointSource};
use super::exit;
use super::interrupt::Interrupt;
use super::progress::JobProgress;
use super::render;
use super::rest::{Answer, RestClient, RestError};
use crate::base::ids::{IdParseError, JobId};
use crate::job::artifact::JobArtifact;
use crate::job::file::{JobFileError, read_job_file};
use crate::operators::OperatorRegistry;
use crate::process::failures::FailureFeed;
use crate::process::run::{RunReport, UsageError, sink_outputs};

/// How often `run` asks for the job's status while it waits.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// How often `stop` checks whether the JobManager is gone.
pub const STOP_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// How long `stop` waits for the JobManager to stop answering.
pub const STOP_DEADLINE: Duration = Duration::from_secs(60);

/// How the client commands print answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    /// Aligned tables and short lines, for people.
    #[default]
    Table,
    /// The REST answer as the server sent it, for scripts.
    Json,
}

/// Why a client command failed. [`exit_code`](Self::exit_code) says which kind it is.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The command line is wrong (a `--param`). Not retryable.
    #[error(transparent)]
    Usage(#[from] UsageError),
    /// The JobManager's address or the configuration file is unusable. Not retryable.
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    /// The job file cannot be turned into a job; nothing was submitted. Not retryable.
    #[error(transparent)]
    JobFile(#[from] JobFileError),
    /// A job id that is not one; nothing was asked. Not retryable.
    #[error("{error} (`flint list` shows the jobs' ids)")]
    BadJobId {
        /// Why it is not an id.
        error: IdParseError,
    },
    /// A request failed; the variant says how.
    #[error(transparent)]
    Rest(#[from] RestError),
    /// The job was submitted but could no longer be followed; it may still be running.
    #[error("lost track of job {job_id} while waiting for it (it may still be running)")]
    Watch {
        /// The job.
        job_id: JobId,
        /// Why.
        #[source]
        source: RestError,
    },
    /// Ctrl-C while `run` waited: the job was left running.
    #[error(
        "interrupted: job {job_id} keeps running on the cluster; follow it with `flint status \
         {job_id}{args}`, cancel it with `flint cancel {job_id}{args}`"
    )]
    Interrupted {
        /// The job.
        job_id: JobId,
        /// The arguments that reach the same JobManager (`--jobmanager URL`), or none.
        args: String,
    },
    /// The JobManager still answered long after it was asked to stop. Retryable.
    #[error(
        "the JobManager at {url} accepted the stop request but still answers after {}",
        humantime::format_duration(*.waited)
    )]
    StillRunning {
        /// The JobManager.
        url: String,
        /// How long the command waited.
        waited: Duration,
    },
    /// An artifact to ship cannot be read, or its name is not a plain file name; nothing was
    /// submitted. Not retryable.
    #[error("artifact {path}: {reason}")]
    Artifact {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The output could not be written (stdout closed). Not retryable.
    #[error("cannot write the output")]
    Output(#[from] std::io::Error),
}

impl ClientError {
    /// The process exit code (see [`super::exit`]).
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Usage(_)
            | Self::Endpoint(_)
            | Self::JobFile(_)
            | Self::BadJobId { .. }
            | Self::Artifact { .. } => exit::USAGE,
            Self::Rest(error) | Self::Watch { source: error, .. } => error.exit_code(),
            Self::Interrupted { .. } => exit::INTERRUPTED,
            Self::StillRunning { .. } | Self::Output(_) => exit::CLUSTER,
        }
    }
}

/// The SHA-256 of the file at `path`, read in pieces.
fn sha256_of_file(path: &Path) -> std::io::Result<crate::base::blob_key::BlobKey> {
    use sha2::Digest as _;
    use std::io::Read as _;
    let mut file = std::fs::File::open(path)?;
    let mut hasher = sha2::Sha256::new();
    let mut buffer = vec![0u8; 1 << 16];
    loop {
        match file.read(&mut buffer)? {
            0 => return Ok(crate::base::blob_key::BlobKey::from_hasher(hasher)),
            read => hasher.update(&buffer[..read]),
        }
    }
}

/// `flint run JOB_FILE` against a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubmitOptions {
    /// The job file (TOML, see [`crate::job::file`]).
    pub job_file: PathBuf,
    /// Its `${name}` parameters.
    pub params: BTreeMap<String, String>,
    /// Print the job id and return without waiting.
    pub detach: bool,
    /// Files to upload and ship with the job (`--artifact`), each under its file name.
    pub artifacts: Vec<PathBuf>,
}

/// The client commands of one JobManager.
#[derive(Debug, Clone)]
pub struct Client {
    rest: RestClient,
    format: OutputFormat,
}

impl Client {
    /// Commands against `rest`, printing in `format`.
    pub fn new(rest: RestClient, format: OutputFormat) -> Self {
        Self { rest, format }
    }

    /// A client of the JobManager the flag, the environment and the configuration name (see
    /// [`Endpoint::resolve`]), reading the process's environment.
    pub fn from_environment(
        jobmanager: Option<&str>,
        config: Option<&std::path::Path>,
        format: OutputFormat,
    ) -> Result<Self, ClientError> {
        let endpoint = Endpoint::resolve(jobmanager, config, |name| std::env::var(name).ok())?;
        Ok(Self::new(RestClient::new(endpoint), format))
    }

    /// The REST client underneath.
    pub fn rest(&self) -> &RestClient {
        &self.rest
    }

    /// `flint list`: the jobs, oldest first.
    pub fn list(&self, out: &mut impl Write) -> Result<u8, ClientError> {
        let jobs = self.rest.jobs()?;
        self.print(out, &jobs, render::job_list)
    }

    /// `flint artifacts`: what the JobManager stores.
    pub fn artifacts(&self, out: &mut impl Write) -> Result<u8, ClientError> {
        let list = self.rest.artifacts()?;
        self.print(out, &list, render::artifacts)
    }

    /// Hashes the file at `path` and uploads it (the JobManager checks the hash); the job's
    /// entry for it, named by its file name.
    fn upload_artifact(&self, path: &Path) -> Result<JobArtifact, ClientError> {
        let failed = |reason: String| ClientError::Artifact {
            path: path.to_owned(),
            reason,
        };
        let name = (path.file_name().and_then(|n| n.to_str()))
            .filter(|name| crate::job::artifact::is_plain_name(name))
            .ok_or_else(|| {
                failed(
                    "its file name must be a plain one (letters, digits, `.`, `_`, `-`; not \
                     starting with `.` or `-`): rename or copy it"
                        .to_owned(),
                )
            })?
            .to_owned();
        let digest = sha256_of_file(path).map_err(|e| failed(e.to_string()))?;
        // Executable on the TaskManagers exactly when it is for its owner here (as `rsync`,
        // `tar` and Ray's `working_dir` keep the bit): a script or program a `process` vertex
        // runs is marked so by `chmod +x`, data never is.
        let executable = std::fs::metadata(path)
            .map(|meta| std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o100 != 0)
            .map_err(|e| failed(e.to_string()))?;
        // Sent once: a file the JobManager already stores (same content, so same size) is
        // not uploaded again.
        let stored = match self.rest.artifact(&digest)? {
            Some(stored) => stored,
            None => self.rest.upload_artifact(path, &digest)?.value,
        };
        Ok(JobArtifact {
            name,
            digest: stored.digest,
            size: stored.size,
            executable,
        })
    }

    /// `flint status JOB_ID`: one job with its vertices and subtasks.
    pub fn status(&self, job_id: &str, out: &mut impl Write) -> Result<u8, ClientError> {
        let job = self.rest.job(parse_job_id(job_id)?)?;
        self.print(out, &job, render::job_details)
    }

    /// `flint cancel JOB_ID`: asks the JobManager to cancel the job (it ends CANCELED shortly
    /// after; `status` shows when).
    pub fn cancel(&self, job_id: &str, out: &mut impl Write) -> Result<u8, ClientError> {
        let cancelled = self.rest.cancel(parse_job_id(job_id)?)?;
        self.print(out, &cancelled, |c| {
            format!("Cancelling job {}: {}\n", c.id, c.state)
        })
    }

    /// `flint taskmanagers`: the registered TaskManagers with their slots.
    pub fn task_managers(&self, out: &mut impl Write) -> Result<u8, ClientError> {
        let list = self.rest.task_managers()?;
        self.print(out, &list, render::task_managers)
    }

    /// `flint pool-size [N]`: shows the pool, or sets its designated size to `size`.
    pub fn pool_size(&self, size: Option<u32>, out: &mut impl Write) -> Result<u8, ClientError> {
        if let Some(size) = size {
            let set = self.rest.set_pool_size(size)?;
            return self.print(out, &set, |p| {
                format!("Designated pool size set to {}\n", p.size)
            });
        }
        let size = self.rest.pool_size()?;
        if self.format == OutputFormat::Json {
            return self.print(out, &size, |_| String::new());
        }
        let overview = self.rest.overview()?;
        write!(out, "{}", render::pool(&size.value, &overview.value))?;
        Ok(exit::SUCCESS)
    }

    /// `flint stop`: stops the cluster and waits (up to [`STOP_DEADLINE`]) until its
    /// JobManager no longer answers.
    pub fn stop(&self, out: &mut impl Write) -> Result<u8, ClientError> {
        let url = self.rest.endpoint().url.to_string();
        let stopping = self.rest.stop_cluster()?;
        if self.format == OutputFormat::Json {
            writeln!(out, "{}", stopping.body.trim_end())?;
        } else {
            writeln!(out, "Stopping the cluster at {url}")?;
        }
        out.flush()?;
        #[allow(clippy::disallowed_methods)] // client process, not node code: a real deadline
        let began = std::time::Instant::now();
        loop {
            match self.rest.overview() {
                Err(error) if error.is_unreachable() => break,
                // Answers (or 503s) while it winds down: keep waiting.
                _ => {}
            }
            if began.elapsed() >= STOP_DEADLINE {
                return Err(ClientError::StillRunning {
                    url,
                    waited: STOP_DEADLINE,
                });
            }
            #[allow(clippy::disallowed_methods)] // client process: the pause between polls
            std::thread::sleep(STOP_POLL_INTERVAL);
        }
        if self.format == OutputFormat::Table {
            writeln!(out, "Stopped")?;
        }
        Ok(exit::SUCCESS)
    }

    /// `flint run JOB_FILE`: reads and checks the job file, submits it and prints the job id;
    /// unless detached, draws the job's progress on `progress` until it ends (or `interrupt`
    /// fires) and prints the report of the embedded run: final state, timings, output paths.
    /// The exit code is the report's ([`RunReport::exit_code`]), or 0 when detached.
    pub fn run(
        &self,
        options: &SubmitOptions,
        progress: ProgressDrawTarget,
        interrupt: &Interrupt,
        out: &mut impl Write,
    ) -> Result<u8, ClientError> {
        let registry = OperatorRegistry::with_builtins();
        let graph = read_job_file(&options.job_file, &options.params, |operator| {
            registry.contains(operator)
        })?;
        let mut graph = graph;
        for path in &options.artifacts {
            let artifact = self.upload_artifact(path)?;
            graph.artifacts.push(artifact);
        }
        crate::job::artifact::validate(&graph.artifacts).map_err(|error| {
            ClientError::Artifact {
                path: options.artifacts.first().cloned().unwrap_or_default(),
                reason: error.to_string(),
            }
        })?;
        let outputs = sink_outputs(&graph);
        let submitted = self.rest.submit(&graph)?;
        let job_id = submitted.value.id;
        match (self.format, options.detach) {
            (OutputFormat::Json, true) => writeln!(out, "{}", submitted.body.trim_end())?,
            (OutputFormat::Table, true) => writeln!(out, "{job_id}")?,
            (OutputFormat::Json, false) => {}
            (OutputFormat::Table, false) => {
                writeln!(out, "Submitted job `{}` as {job_id}", graph.name)?;
            }
        }
        out.flush()?;
        if options.detach {
            return Ok(exit::SUCCESS);
        }

        let bars = JobProgress::new(progress, &graph, job_id);
        // Each task failure that makes the job restart, as it happens (table output only: JSON
        // output is the job's answer alone).
        let mut failures = FailureFeed::default();
        // Polled without the subtask lists (the bars need only the counts); read in full once
        // it ended, for the report.
        let lost = |source| {
            // Left as last seen: how far the job got before it was lost.
            bars.abandon();
            ClientError::Watch { job_id, source }
        };
        let ended = loop {
            // A long poll: answered when the job ends, else after POLL_INTERVAL (the bars'
            // cadence); the rest of the interval, if the JobManager answered early, is waited
            // here, where Ctrl-C is heard.
            #[allow(clippy::disallowed_methods)] // the time one poll took, for the pause after it
            let asked = std::time::Instant::now();
            let job = self
                .rest
                .job_progress_waiting(job_id, POLL_INTERVAL)
                .map_err(lost)?;
            bars.update(&job.value);
            if self.format == OutputFormat::Table {
                let lines = failures.new_lines(&job.value.to_status());
                bars.write_lines(out, &lines)?;
            }
            if job.value.state.is_globally_terminal() {
                break self.rest.job(job_id).map_err(lost)?;
            }
            if interrupt.wait(POLL_INTERVAL.saturating_sub(asked.elapsed())) {
                // Cleared rather than left: the terminal may have dropped the frame in flight
                // when Ctrl-C flushed its output, so a left frame would be drawn askew.
                bars.finish();
                return Err(ClientError::Interrupted {
                    job_id,
                    args: same_job_manager_args(self.rest.endpoint()),
                });
            }
        };
        bars.finish();

        let details = &ended.value;
        let elapsed = details
            .duration
            .or_else(|| {
                details
                    .end_time
                    .map(|end| end.saturating_sub(details.start_time))
            })
            .map_or(Duration::ZERO, Duration::from_millis);
        let report = RunReport::new(&details.to_status(), elapsed, outputs);
        match self.format {
            OutputFormat::Json => writeln!(out, "{}", ended.body.trim_end())?,
            OutputFormat::Table => report.write_to(out)?,
        }
        out.flush()?;
        Ok(report.exit_code())
    }

    /// Prints an answer as its human rendering or as sent.
    fn print<T>(
        &self,
        out: &mut impl Write,
        answer: &Answer<T>,
        human: impl FnOnce(&T) -> String,
    ) -> Result<u8, ClientError> {
        match self.format {
            OutputFormat::Json => writeln!(out, "{}", answer.body.trim_end())?,
            OutputFormat::Table => write!(out, "{}", human(&answer.value))?,
        }
        out.flush()?;
        Ok(exit::SUCCESS)
    }
}

/// Parses a job id given on the command line.
pub fn parse_job_id(text: &str) -> Result<JobId, ClientError> {
    text.trim()
        .parse()
        .map_err(|error| ClientError::BadJobId { error })
}

/// The arguments that make another `flint` command reach the same JobManager: repeated when
/// they came from this command line, empty when the environment or the defaults give them.
fn same_job_manager_args(endpoint: &Endpoint) -> String {
    match &endpoint.source {
        EndpointSource::Flag => format!(" --jobmanager {}", endpoint.url),
        EndpointSource::Config(path) | EndpointSource::Leader(path) => {
            format!(" --config {}", path.display())
        }
        EndpointSource::Env | EndpointSource::Default => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::endpoint::JobManagerUrl;

    fn endpoint(source: EndpointSource) -> Endpoint {
        Endpoint {
            url: "http://10.0.0.5:8081".parse::<JobManagerUrl>().unwrap(),
            source,
            token: None,
        }
    }

    #[test]
    fn the_hint_reaches_the_same_job_manager() {
        assert_eq!(
            same_job_manager_args(&endpoint(EndpointSource::Flag)),
            " --jobmanager http://10.0.0.5:8081"
        );
        assert_eq!(
            same_job_manager_args(&endpoint(EndpointSource::Config("/etc/f.toml".into()))),
            " --config /etc/f.toml"
        );
        assert_eq!(same_job_manager_args(&endpoint(EndpointSource::Env)), "");
        let err = ClientError::Interrupted {
            job_id: JobId::from_u128(1),
            args: " --jobmanager http://jm:1".to_owned(),
        };
        assert_eq!(err.exit_code(), exit::INTERRUPTED);
        assert!(
            err.to_string().contains(
                "flint cancel 00000000-0000-0000-0000-000000000001 --jobmanager http://jm:1"
            ),
            "{err}"
        );
    }

    #[test]
    fn a_bad_job_id_is_a_usage_error_naming_it() {
        let err = parse_job_id("3f2a").unwrap_err();
        assert_eq!(err.exit_code(), exit::USAGE);
        assert!(
            err.to_string().contains("`3f2a` is not a valid JobId"),
            "{err}"
        );
        assert!(err.to_string().contains("flint list"), "{err}");
        assert_eq!(
            parse_job_id(" 00000000-0000-0000-0000-000000000001 ").unwrap(),
            JobId::from_u128(1)
        );
    }

    #[test]
    fn a_missing_job_file_is_named_before_anything_is_sent() {
        // Were anything sent, it would fail as unreachable (exit 4) on this closed port, so
        // exit 2 shows the file was checked first.
        let closed = Endpoint {
            url: "127.0.0.1:1".parse().unwrap(),
            source: EndpointSource::Flag,
            token: None,
        };
        let client = Client::new(RestClient::new(closed), OutputFormat::Table);
        let options = SubmitOptions {
            job_file: "/no/such/job.toml".into(),
            params: BTreeMap::new(),
            detach: true,
            artifacts: Vec::new(),
        };
        let mut out = Vec::new();
        let err = client
            .run(
                &options,
                ProgressDrawTarget::hidden(),
                &Interrupt::new(),
                &mut out,
            )
            .unwrap_err();
        assert_eq!(err.exit_code(), exit::USAGE, "{err:?}");
        assert!(out.is_empty());
    }
}
