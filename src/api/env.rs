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
//! TaskManager (read small inputs in sources, print results after `execute`).

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

/// The result of one [`Env::execute`]: read the records a [`DataSet::collect`] gathered with
/// [`get`](Self::get).
#[derive(Debug, Clone)]
pub struct JobResult {
    job: ExecutedJob,
    /// The collect sinks' vertex names, by node.
    sinks: BTreeMap<usize, String>,
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
    /// The program's operator identity (`program:NAME@BUILD`) its vertices name.
    identity: String,
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
        Self {
            state: Rc::new(RefCell::new(State {
                plan: Plan::new(default_parallelism()),
                args,
                mode,
                jobs: 0,
                identity,
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

    /// An environment that keeps the plan of job number `job` (on a TaskManager).
    pub(crate) fn capturing(identity: String, args: Vec<String>, job: usize) -> Self {
        Self::with_mode(
            identity,
            args,
            Mode::Capture {
                job,
                captured: None,
            },
        )
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
        let path = path.into();
        self.source("read_parquet", move |cx| {
            sources::parquet_rows::<T>(&path, cx)
        })
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
        match &mut state.mode {
            Mode::Capture {
                job: wanted,
                captured,
            } => {
                if *wanted == job {
                    *captured = Some(plan);
                    return Err(ProgramError::PlanCaptured);
                }
                // An earlier job of the program: the TaskManager needs a later one's plan.
                Ok(JobResult {
                    job: ExecutedJob {
                        job_id: JobId::from_u128(0),
                        status: JobStatus::Finished,
                        failure: None,
                        results: JobResults::default(),
                    },
                    sinks: BTreeMap::new(),
                })
            }
            Mode::Execute(executor) => {
                let plan = super::translate::normalize(plan);
                let translated = super::translate::job_graph(&plan, name, &identity, &args, job)
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
                    sinks: translated.collect_vertices,
                })
            }
        }
    }

    /// The job graph of what the program declared so far (for inspection and tests; the plan
    /// stays).
    pub fn job_graph(&self, name: &str) -> Result<JobGraph, ProgramError> {
        let state = self.state.borrow();
        let plan = super::translate::normalize(state.plan.clone());
        super::translate::job_graph(&plan, name, &state.identity, &state.args, state.jobs)
            .map(|translated| translated.graph)
            .map_err(ProgramError::Invalid)
    }
}
