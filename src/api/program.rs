//! Programs: a user's function that declares and executes dataflow jobs, registered by name in
//! the user's own binary, so that the binary is a whole Flint cluster binary (its TaskManagers
//! can run the program's operators).
//!
//! A program's vertices name one operator, its **identity** `program:NAME@BUILD` (BUILD: a
//! hash of the executable). A TaskManager registers that identity for every program its binary
//! carries; asked to run a task of it, it runs the program's function again with the job's
//! arguments to rebuild the plan (cached per job), and instantiates the task's chain from it.
//! The build is part of the identity because another build of the same program may declare
//! other operators: a task runs only where the very same code does.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::operators::registry::{OperatorRegistry, OperatorSpec};
use crate::operators::{Operator, OperatorError};

use super::env::{Env, ProgramError, Replay, decode_reads};
use super::plan::Plan;
use super::task::{ChainSpec, ProgramTask};
use super::translate::{self, keys};

/// A program's function: declares jobs on the environment and executes them.
pub type ProgramFn = Arc<dyn Fn(&Env) -> Result<(), ProgramError> + Send + Sync>;

/// A named program.
#[derive(Clone)]
pub struct Program {
    name: String,
    about: String,
    run: ProgramFn,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program").field("name", &self.name).finish()
    }
}

impl Program {
    /// A program called `name` running `run`.
    pub fn new(
        name: impl Into<String>,
        run: impl Fn(&Env) -> Result<(), ProgramError> + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.into(),
            about: String::new(),
            run: Arc::new(run),
        }
    }

    /// A line saying what it does (for `--help`).
    pub fn about(mut self, about: impl Into<String>) -> Self {
        self.about = about.into();
        self
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What it does.
    pub fn description(&self) -> &str {
        &self.about
    }

    /// Its operator identity in this binary: `program:NAME@BUILD`.
    pub fn identity(&self) -> String {
        format!("program:{}@{}", self.name, build_id())
    }

    /// Runs it on the client: its jobs run on `env`'s executor.
    pub fn run(&self, env: &Env) -> Result<(), ProgramError> {
        (self.run)(env)
    }

    /// Rebuilds the plan of job number `job` for arguments `args` (on a TaskManager).
    fn capture(
        &self,
        args: Vec<String>,
        job: usize,
        replay: Replay,
    ) -> Result<Plan, OperatorError> {
        let env = Env::capturing(self.identity(), args, job, replay);
        match (self.run)(&env) {
            Err(ProgramError::PlanCaptured) | Ok(()) => {}
            Err(error) => {
                return Err(OperatorError::Operator {
                    context: format!("program `{}` failed while declaring its job", self.name),
                    source: Box::new(error),
                });
            }
        }
        let plan = env.captured().ok_or_else(|| {
            OperatorError::Failed(format!(
                "program `{}` declares no job number {job} for these arguments (does it \
                 declare its jobs differently on each run?)",
                self.name
            ))
        })?;
        Ok(translate::normalize(plan))
    }
}

/// The programs a binary carries.
#[derive(Debug, Clone, Default)]
pub struct Programs {
    programs: Vec<Program>,
}

impl Programs {
    /// None yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `program`.
    pub fn with(mut self, program: Program) -> Self {
        self.programs.push(program);
        self
    }

    /// Every program, in the order added.
    pub fn all(&self) -> &[Program] {
        &self.programs
    }

    /// The program named `name`.
    pub fn get(&self, name: &str) -> Option<&Program> {
        self.programs.iter().find(|p| p.name == name)
    }

    /// Registers every program's operator identity in `registry`, so this process's
    /// TaskManagers can run their tasks.
    pub fn register(&self, registry: &mut OperatorRegistry) {
        for program in &self.programs {
            let cache = PlanCache::default();
            let program = program.clone();
            registry.register_fn(program.identity(), move |spec: &OperatorSpec<'_>| {
                program_task(&program, &cache, spec)
            });
        }
    }

    /// A registry with the built-in operators and every program's.
    pub fn registry(&self) -> OperatorRegistry {
        let mut registry = OperatorRegistry::with_builtins();
        self.register(&mut registry);
        registry
    }
}

/// Plans rebuilt on this TaskManager, by arguments and job number (a task of a job reuses the
/// plan its job's first task built). Bounded: the oldest goes first.
#[derive(Default)]
struct PlanCache {
    plans: Mutex<Vec<(PlanKey, Rebuilt)>>,
}

/// A plan's key: the program's arguments, the job's number, the client's default parallelism
/// and the earlier results it read.
type PlanKey = (String, usize, u32, String);

/// A rebuilt plan and its digest (computed once per plan, not per task).
#[derive(Clone)]
struct Rebuilt {
    plan: Arc<Plan>,
    digest: Arc<str>,
}

/// Plans a TaskManager keeps per program.
const CACHED_PLANS: usize = 16;

impl PlanCache {
    fn get(
        &self,
        program: &Program,
        args: &str,
        job: usize,
        default_parallelism: u32,
        reads: &str,
    ) -> Result<Rebuilt, OperatorError> {
        let mut plans = self.plans.lock().unwrap_or_else(PoisonError::into_inner);
        // Compared in place: `reads` may be megabytes, so the key is copied only on a miss.
        let cached = plans.iter().find(|((a, j, p, r), _)| {
            a == args && *j == job && *p == default_parallelism && r == reads
        });
        if let Some((_, rebuilt)) = cached {
            return Ok(rebuilt.clone());
        }
        let arguments: Vec<String> =
            serde_json::from_str(args).map_err(|e| OperatorError::Config {
                operator: program.identity(),
                message: format!("`{}` is not a JSON list of strings: {e}", keys::ARGS),
            })?;
        let decoded = decode_reads(reads).map_err(|e| OperatorError::Config {
            operator: program.identity(),
            message: format!("`{}` cannot be read: {e}", keys::READS),
        })?;
        let replay = Replay {
            default_parallelism,
            reads: decoded,
        };
        let plan = program.capture(arguments, job, replay)?;
        let rebuilt = Rebuilt {
            digest: plan.digest().into(),
            plan: Arc::new(plan),
        };
        if plans.len() >= CACHED_PLANS {
            plans.remove(0);
        }
        let key = (args.to_owned(), job, default_parallelism, reads.to_owned());
        plans.push((key, rebuilt.clone()));
        Ok(rebuilt)
    }
}

fn config<'a>(spec: &'a OperatorSpec<'_>, key: &str) -> Result<&'a str, OperatorError> {
    spec.config
        .get(key)
        .map(String::as_str)
        .ok_or_else(|| OperatorError::Config {
            operator: spec.name.to_owned(),
            message: format!("`{key}` is missing"),
        })
}

fn node_list(spec: &OperatorSpec<'_>, key: &str) -> Result<Vec<usize>, OperatorError> {
    let text = config(spec, key)?;
    if text.is_empty() {
        return Ok(Vec::new());
    }
    text.split(',')
        .map(|id| {
            id.parse().map_err(|_| OperatorError::Config {
                operator: spec.name.to_owned(),
                message: format!("`{key}` = `{text}` is not a list of ids"),
            })
        })
        .collect()
}

/// The task of `spec`'s vertex.
fn program_task(
    program: &Program,
    cache: &PlanCache,
    spec: &OperatorSpec<'_>,
) -> Result<Box<dyn Operator>, OperatorError> {
    let job: usize = config(spec, keys::JOB)?
        .parse()
        .map_err(|_| OperatorError::Config {
            operator: spec.name.to_owned(),
            message: format!("`{}` is not a number", keys::JOB),
        })?;
    let reads = spec.config.get(keys::READS).map_or("", String::as_str);
    let default_parallelism = config(spec, keys::DEFAULT_PARALLELISM)?
        .parse()
        .map_err(|_| OperatorError::Config {
            operator: spec.name.to_owned(),
            message: format!("`{}` is not a number", keys::DEFAULT_PARALLELISM),
        })?;
    let Rebuilt { plan, digest } = cache.get(
        program,
        config(spec, keys::ARGS)?,
        job,
        default_parallelism,
        reads,
    )?;
    if *digest != *config(spec, keys::PLAN)? {
        return Err(OperatorError::Config {
            operator: spec.name.to_owned(),
            message: format!(
                "program `{}` declared another plan for job {job} on this TaskManager (digest \
                 {digest}) than on the client ({}): a program must declare the same operators \
                 for the same arguments on every run (no randomness, clocks or local files in \
                 how it builds its jobs)",
                program.name(),
                config(spec, keys::PLAN)?
            ),
        });
    }
    let chain = ChainSpec {
        chain: node_list(spec, keys::CHAIN)?,
        inputs: node_list(spec, keys::INPUTS)?,
        outputs: node_list(spec, keys::OUTPUTS)?,
    };
    let known = |ids: &[usize], of: usize| ids.iter().all(|&id| id < of);
    if !known(&chain.chain, plan.nodes.len())
        || !known(&chain.inputs, plan.edges.len())
        || !known(&chain.outputs, plan.edges.len())
    {
        return Err(OperatorError::Config {
            operator: spec.name.to_owned(),
            message: "the vertex names operators the program's plan does not have (another \
                      build, or other arguments?)"
                .into(),
        });
    }
    Ok(Box::new(ProgramTask {
        plan,
        spec: chain,
        subtask: spec.subtask,
        parallelism: spec.parallelism,
    }))
}

pub use crate::env::build::build_id;

/// The programs of an operator list: identities of the form `program:NAME@BUILD`, by name.
pub fn program_identities<'a>(
    operators: impl IntoIterator<Item = &'a str>,
) -> BTreeMap<&'a str, &'a str> {
    operators
        .into_iter()
        .filter_map(|op| op.strip_prefix("program:")?.split_once('@'))
        .collect()
}
