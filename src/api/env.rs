//! [`Env`]: where a program declares its sources and runs its jobs (Flink's
//! `ExecutionEnvironment`).
//!
//! The same program runs in two places. On the client, [`Env::execute`] turns the plan into a
//! `JobGraph`, runs it on the cluster the program was started against (an embedded one, or a
//! remote JobManager) and returns its [`JobResult`]. On a TaskManager, the program is run again
//! with the same arguments only to rebuild the plan of the job a task belongs to: there
//! `execute` stops the program (it returns [`ProgramError::PlanCaptured`], which the program
//! passes on with `?`). So a program must declare the same operators, in the same order, for
//! the same arguments, and do nothing before `execute` it would not want done on every
//! TaskManager (read small inputs in sources; print only when [`Env::on_client`]). Results of
//! earlier jobs the program read with [`JobResult::get`] travel with each later job, so a
//! later job built from them is rebuilt the same on a TaskManager; each vertex also carries a
//! digest of its job's plan, and a TaskManager that rebuilds another plan refuses the task.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;

use crate::base::ids::JobId;
use crate::job::graph::JobGraph;
use crate::job::states::JobStatus;
use crate::messages::job_manager::JobResults;
use crate::operators::OperatorError;

use super::data::Data;
use super::dataset::{Collected, DataSet};
use super::plan::{EdgeRuntime, Node, NodeContext, Plan, Ship};
use super::sinks::decode_collected;
use super::sources;

/// Why a program could not be built or run.
#[derive(Debug, thiserror::Error)]
pub enum ProgramError {
    /// On a TaskManager: the plan of the job being rebuilt is complete; the rest of the program
    /// does not run there. Pass it on with `?`.
    #[error("the plan of the job is captured (the program runs on past this only on the client)")]
    PlanCaptured,
    /// The program's own arguments are wrong.
    #[error("{0}")]
    Usage(String),
    /// The program declared something the runtime cannot run.
    #[error("invalid program: {0}")]
    Invalid(String),
    /// The job could not be submitted or watched.
    #[error("cannot run job `{job}`")]
    Execution {
        /// The job's name.
        job: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The job ended without finishing.
    #[error("job `{job}` ({job_id}) {status}: {reason}")]
    JobFailed {
        /// The job's name.
        job: String,
        /// Its id.
        job_id: JobId,
        /// How it ended.
        status: JobStatus,
        /// Its failure, as the JobManager reports it.
        reason: String,
    },
    /// A `collect()` result could not be decoded as the program's type.
    #[error("cannot decode the records `{sink}` collected")]
    Results {
        /// The sink.
        sink: String,
        /// Why.
        #[source]
        source: crate::base::codec::CodecError,
    },
    /// The program's own input or output failed.
    #[error("{context}")]
    Io {
        /// What it was doing.
        context: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// What ran a job: its id, how it ended, and what its tasks sent back.
#[derive(Debug, Clone)]
pub struct ExecutedJob {
    /// The job's id.
    pub job_id: JobId,
    /// How it ended.
    pub status: JobStatus,
    /// Its failure, if it did not finish.
    pub failure: Option<String>,
    /// What its `collect()` sinks gathered, by vertex.
    pub results: JobResults,
}

/// Runs a job graph to its end on some cluster: an embedded `MiniCluster`, or a remote
/// JobManager through its REST API (see `crate::cli`).
pub trait Executor {
    /// Submits `graph`, waits for the job to end, and fetches its results.
    fn execute(
        &mut self,
        graph: JobGraph,
    ) -> Result<ExecutedJob, Box<dyn std::error::Error + Send + Sync>>;
}

/// What a program read of its earlier jobs' results, by job number and collect vertex: shipped
/// with every later job so TaskManagers rebuild its plan from the same values.
pub(crate) type Reads = BTreeMap<(usize, String), Vec<Option<bytes::Bytes>>>;

/// The most a job carries of earlier jobs' results the program read (encoded, per vertex).
pub const MAX_READS_BYTES: usize = 4 << 20;

/// The result of one [`Env::execute`]: read the records a [`DataSet::collect`] gathered with
/// [`get`](Self::get).
#[derive(Debug, Clone)]
pub struct JobResult {
    job: ExecutedJob,
    /// Which of the program's jobs it is (from 0).
    index: usize,
    /// The collect sinks' vertex names, by node.
    sinks: BTreeMap<usize, String>,
    /// The program's reads, shared with its `Env`.
    reads: Rc<RefCell<Reads>>,
}

impl JobResult {
    /// The job's id.
    pub fn job_id(&self) -> JobId {
        self.job.job_id
    }

    /// The records `collected` gathered, in subtask order.
    pub fn get<T: Data>(&self, collected: &Collected<T>) -> Result<Vec<T>, ProgramError> {
        let Some(vertex) = self.sinks.get(&collected.node) else {
            return Ok(Vec::new());
        };
        let parts = self
            .job
            .results
            .vertices
            .get(vertex)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        self.reads
            .borrow_mut()
            .entry((self.index, vertex.clone()))
            .or_insert_with(|| parts.to_vec());
        decode_collected(parts).map_err(|source| ProgramError::Results {
            sink: vertex.clone(),
            source,
        })
    }
}

/// How an [`Env`] runs what it builds.
enum Mode {
    /// On the client: jobs run on this executor.
    Execute(Box<dyn Executor>),
    /// On a TaskManager: the plan of job number `job` (counted from 0) is kept.
    Capture { job: usize, captured: Option<Plan> },
}

struct State {
    plan: Plan,
    args: Vec<String>,
    mode: Mode,
    /// Jobs `execute`d so far.
    jobs: usize,
    /// The default parallelism before the program set any.
    initial_parallelism: u32,
    /// The program's operator identity (`program:NAME@BUILD`) its vertices name.
    identity: String,
    /// Earlier jobs' results the program read (on a TaskManager: as the job shipped them).
    reads: Rc<RefCell<Reads>>,
}

/// What a TaskManager needs besides the program's arguments to rebuild a job's plan as the
/// client built it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Replay {
    /// The client's default parallelism before the program set any (its cores).
    pub default_parallelism: u32,
    /// Earlier jobs' results the program read.
    pub reads: Reads,
}

/// See the module docs. Cloning an `Env` shares it (datasets hold one).
#[derive(Clone)]
pub struct Env {
    state: Rc<RefCell<State>>,
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Env").finish_non_exhaustive()
    }
}

/// The default parallelism of an environment: the machine's cores.
fn default_parallelism() -> u32 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
}

impl Env {
    fn with_mode(identity: String, args: Vec<String>, mode: Mode) -> Self {
        let parallelism = default_parallelism();
        Self {
            state: Rc::new(RefCell::new(State {
                initial_parallelism: parallelism,
                plan: Plan::new(parallelism),
                args,
                mode,
                jobs: 0,
                identity,
                reads: Rc::default(),
            })),
        }
    }

    /// An environment whose jobs run on `executor`, for a program of operator identity
    /// `identity` (see [`super::program`]).
    pub fn new(
        identity: impl Into<String>,
        args: Vec<String>,
        executor: Box<dyn Executor>,
    ) -> Self {
        Self::with_mode(identity.into(), args, Mode::Execute(executor))
    }

    /// An environment that keeps the plan of job number `job` (on a TaskManager), answering
    /// the program's reads of earlier jobs from `reads`.
    pub(crate) fn capturing(
        identity: String,
        args: Vec<String>,
        job: usize,
        replay: Replay,
    ) -> Self {
        let env = Self::with_mode(
            identity,
            args,
            Mode::Capture {
                job,
                captured: None,
            },
        );
        {
            let mut state = env.state.borrow_mut();
            *state.reads.borrow_mut() = replay.reads;
            state.plan.default_parallelism = replay.default_parallelism.max(1);
            state.initial_parallelism = replay.default_parallelism.max(1);
        }
        env
    }

    /// Whether the program runs on the client (not rebuilding a plan on a TaskManager): guard
    /// printing and other side effects with it.
    pub fn on_client(&self) -> bool {
        matches!(self.state.borrow().mode, Mode::Execute(_))
    }

    /// The captured plan, if the program reached that job's `execute`.
    pub(crate) fn captured(&self) -> Option<Plan> {
        match &mut self.state.borrow_mut().mode {
            Mode::Capture { captured, .. } => captured.take(),
            Mode::Execute(_) => None,
        }
    }

    /// The program's arguments (after its name), as it was started with them.
    pub fn args(&self) -> Vec<String> {
        self.state.borrow().args.clone()
    }

    /// The subtasks of every operator that sets none (default: the machine's cores).
    pub fn set_parallelism(&self, parallelism: u32) -> &Self {
        self.state.borrow_mut().plan.default_parallelism = parallelism.max(1);
        self
    }

    /// The number of key groups keyed exchanges route by (Flink's max parallelism; default
    /// 1.5 × the largest parallelism rounded up to a power of two, at least 128). No keyed
    /// operator may have more subtasks than this.
    pub fn set_max_parallelism(&self, max_parallelism: u32) -> &Self {
        self.state.borrow_mut().plan.max_parallelism = Some(max_parallelism.max(1));
        self
    }

    /// Whether forward edges of equal parallelism run in one task (default: yes). Off, every
    /// operator is a task of its own and records are serialized between them (for comparison).
    pub fn set_chaining(&self, chaining: bool) -> &Self {
        self.state.borrow_mut().plan.chaining = chaining;
        self
    }

    /// What happens when a task fails (default: Flink's fixed delay, one restart after 1 s;
    /// past that the job fails with the task's failure).
    pub fn set_restart_strategy(
        &self,
        strategy: crate::job::graph::RestartStrategyConfig,
    ) -> &Self {
        self.state.borrow_mut().plan.restart_strategy = strategy;
        self
    }

    pub(crate) fn add_node(&self, node: Node) -> usize {
        self.state.borrow_mut().plan.add_node(node)
    }

    pub(crate) fn connect(
        &self,
        source: usize,
        target: usize,
        ship: Ship,
        edge: Arc<dyn EdgeRuntime>,
    ) {
        self.state
            .borrow_mut()
            .plan
            .connect(source, target, ship, edge);
    }

    pub(crate) fn with_node(&self, node: usize, f: impl FnOnce(&mut Node)) {
        f(&mut self.state.borrow_mut().plan.nodes[node]);
    }

    /// A source node made per subtask by `make`.
    fn source<T: Data>(
        &self,
        name: &str,
        make: impl Fn(
            &NodeContext,
        )
            -> Result<Box<dyn Iterator<Item = Result<T, OperatorError>>>, OperatorError>
        + Send
        + Sync
        + 'static,
    ) -> DataSet<T> {
        let node = self.add_node(Node::new(name, sources::source_node(make)));
        DataSet::new(self.clone(), node)
    }

    // ---- sources ----

    /// The records of `records`, spread over the source's subtasks (subtask `i` of `p` takes
    /// every `p`-th, from the `i`-th).
    pub fn from_collection<T: Data + Clone + Sync>(&self, records: Vec<T>) -> DataSet<T> {
        let records = Arc::new(records);
        self.source("collection", move |cx| {
            let records = records.clone();
            let (start, step) = (cx.subtask as usize, cx.parallelism.max(1) as usize);
            Ok(Box::new(
                (start..records.len())
                    .step_by(step)
                    .map(move |i| Ok(records[i].clone())),
            ))
        })
    }

    /// Records generated by each subtask: `f(subtask, parallelism)` yields subtask's share
    /// (a parallel generator: each subtask makes its own part).
    pub fn generate<T: Data, I>(
        &self,
        f: impl Fn(u32, u32) -> I + Send + Sync + 'static,
    ) -> DataSet<T>
    where
        I: IntoIterator<Item = T> + 'static,
    {
        self.source("generate", move |cx| {
            Ok(Box::new(f(cx.subtask, cx.parallelism).into_iter().map(Ok)))
        })
    }

    /// The lines of a text file (without their line ends), split across the source's subtasks
    /// by byte range: each line read once whatever the parallelism.
    pub fn read_text_file(&self, path: impl Into<PathBuf>) -> DataSet<String> {
        let path = path.into();
        self.source("read_text_file", move |cx| {
            sources::text_lines(path.clone(), cx)
        })
    }

    /// The rows of a CSV file with a header line, as `T` (serde field names match the header's
    /// column names), split across the source's subtasks as text files are. A row that does
    /// not fit fails the job naming the file, the line and the column.
    pub fn read_csv<T: Data>(&self, path: impl Into<PathBuf>) -> DataSet<T> {
        let path = path.into();
        self.source("read_csv", move |cx| {
            sources::csv_rows::<T>(path.clone(), cx)
        })
    }

    /// The rows of Parquet files as `T` (its serde field names are the columns read: only
    /// those are decoded): `path` is one file or a directory of `*.parquet` files. The row
    /// groups are split across the source's subtasks by row count (see
    /// [`crate::operators::parquet`] for the column types each field type reads). A column the
    /// file lacks or of the wrong type fails the job naming the file and the column.
    pub fn read_parquet<T: Data>(&self, path: impl Into<PathBuf>) -> DataSet<T> {
        let node = self.add_node(Node::new(
            "read_parquet",
            sources::parquet_node::<T>(path.into()),
        ));
        DataSet::new(self.clone(), node)
    }

    // ---- running ----

    /// Runs what the program declared so far as one job named `name`, waits for it to end,
    /// and returns its result; the plan starts empty again after it. On a TaskManager it ends
    /// the program with [`ProgramError::PlanCaptured`] (see the module docs).
    pub fn execute(&self, name: &str) -> Result<JobResult, ProgramError> {
        let (plan, job, identity, args) = {
            let mut state = self.state.borrow_mut();
            let settings = Plan {
                nodes: Vec::new(),
                edges: Vec::new(),
                ..state.plan.clone()
            };
            let plan = std::mem::replace(&mut state.plan, settings);
            let job = state.jobs;
            state.jobs += 1;
            (plan, job, state.identity.clone(), state.args.clone())
        };
        let mut state = self.state.borrow_mut();
        let reads = state.reads.clone();
        let initial = state.initial_parallelism;
        match &mut state.mode {
            Mode::Capture {
                job: wanted,
                captured,
            } => {
                if *wanted == job {
                    *captured = Some(plan);
                    return Err(ProgramError::PlanCaptured);
                }
                // An earlier job of the program: the TaskManager needs a later one's plan. Its
                // results are what the client read of them, shipped with the job.
                let plan = super::translate::normalize(plan);
                let sinks = super::translate::job_graph(
                    &plan,
                    name,
                    &identity,
                    &args,
                    job,
                    &(initial, String::new()),
                )
                .map(|translated| translated.collect_vertices)
                .unwrap_or_default();
                let vertices = reads
                    .borrow()
                    .iter()
                    .filter(|((read_job, _), _)| *read_job == job)
                    .map(|((_, vertex), parts)| (vertex.clone(), parts.clone()))
                    .collect();
                Ok(JobResult {
                    job: ExecutedJob {
                        job_id: JobId::from_u128(0),
                        status: JobStatus::Finished,
                        failure: None,
                        results: JobResults {
                            status: Some(JobStatus::Finished),
                            vertices,
                        },
                    },
                    index: job,
                    sinks,
                    reads,
                })
            }
            Mode::Execute(executor) => {
                let plan = super::translate::normalize(plan);
                let shipped = encode_reads(&reads.borrow())?;
                let translated = super::translate::job_graph(
                    &plan,
                    name,
                    &identity,
                    &args,
                    job,
                    &(initial, shipped),
                )
                .map_err(ProgramError::Invalid)?;
                let executed = executor.execute(translated.graph).map_err(|source| {
                    ProgramError::Execution {
                        job: name.to_owned(),
                        source,
                    }
                })?;
                if executed.status != JobStatus::Finished {
                    return Err(ProgramError::JobFailed {
                        job: name.to_owned(),
                        job_id: executed.job_id,
                        status: executed.status,
                        reason: executed
                            .failure
                            .clone()
                            .unwrap_or_else(|| "no reason given".into()),
                    });
                }
                Ok(JobResult {
                    job: executed,
                    index: job,
                    sinks: translated.collect_vertices,
                    reads,
                })
            }
        }
    }

    /// The job graph of what the program declared so far (for inspection and tests; the plan
    /// stays).
    pub fn job_graph(&self, name: &str) -> Result<JobGraph, ProgramError> {
        let state = self.state.borrow();
        let plan = super::translate::normalize(state.plan.clone());
        let shipped = (
            state.initial_parallelism,
            encode_reads(&state.reads.borrow())?,
        );
        super::translate::job_graph(
            &plan,
            name,
            &state.identity,
            &state.args,
            state.jobs,
            &shipped,
        )
        .map(|translated| translated.graph)
        .map_err(ProgramError::Invalid)
    }
}

/// `reads` as a vertex carries them: empty if none, else the base64 of their encoding.
fn encode_reads(reads: &Reads) -> Result<String, ProgramError> {
    use base64::Engine;
    if reads.is_empty() {
        return Ok(String::new());
    }
    let bytes = crate::base::codec::encode(reads).map_err(|e| {
        ProgramError::Invalid(format!(
            "cannot encode the earlier results the program read: {e}"
        ))
    })?;
    if bytes.len() > MAX_READS_BYTES {
        return Err(ProgramError::Invalid(format!(
            "the program read {} bytes of earlier jobs' collect() results before this job; a \
             job carries at most {MAX_READS_BYTES} of them to its TaskManagers (which rebuild \
             its plan from them): pass large results between jobs as files (write_csv, \
             read_csv, read_parquet)",
            bytes.len()
        )));
    }
    Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// The reads a vertex carries (see [`encode_reads`]).
pub(crate) fn decode_reads(text: &str) -> Result<Reads, String> {
    use base64::Engine;
    if text.is_empty() {
        return Ok(Reads::new());
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| e.to_string())?;
    crate::base::codec::decode(&bytes).map_err(|e| e.to_string())
}
