//! The typed program the simulation runs among its faults: a join of two generated inputs
//! (hash-partitioned, or its right side broadcast and its left chained into the join's task)
//! through the dataflow API (`crate::api`), its answer written to files and collected back,
//! both checked exactly. Its TaskManagers rebuild the plan from the same code, as a real
//! cluster's do.

use std::path::Path;

use crate::api::{DataSet, Env, ExecutedJob, Executor, Program, ProgramError, Programs};
use crate::job::graph::{JobGraph, RestartStrategyConfig};
use crate::operators::OperatorRegistry;

/// The program's name.
const NAME: &str = "sim-join";

/// The job's inputs: `left` and `right` records, their keys drawn from `keys`.
#[derive(Debug, Clone, Copy)]
pub struct JoinInputs {
    pub left: u64,
    pub right: u64,
    pub keys: u64,
    /// Whether the right side is broadcast: the left side's generator then runs in the join's
    /// task, which reads the right side to its end first (`crate::api::translate`).
    pub broadcast: bool,
}

impl JoinInputs {
    fn from_args(args: &[String]) -> Result<(Self, u32, String), ProgramError> {
        let number = |i: usize| -> Result<u64, ProgramError> {
            args.get(i)
                .and_then(|a| a.parse().ok())
                .ok_or_else(|| ProgramError::Usage(format!("{NAME}: argument {i} missing")))
        };
        let inputs = Self {
            left: number(0)?,
            right: number(1)?,
            keys: number(2)?.max(1),
            broadcast: args.get(5).is_some_and(|a| a == "broadcast"),
        };
        let parallelism = u32::try_from(number(3)?).unwrap_or(1);
        let output = args
            .get(4)
            .cloned()
            .ok_or_else(|| ProgramError::Usage(format!("{NAME}: no output")))?;
        Ok((inputs, parallelism, output))
    }

    fn left_key(&self, i: u64) -> u64 {
        i.wrapping_mul(0x9e37_79b9) % self.keys
    }

    fn right_key(&self, j: u64) -> u64 {
        j.wrapping_mul(7) % (self.keys + self.keys / 2 + 1)
    }

    /// The join's answer, one line per matching pair, sorted.
    pub fn expected(&self) -> Vec<String> {
        let mut by_key: std::collections::BTreeMap<u64, Vec<u64>> = Default::default();
        for j in 0..self.right {
            by_key.entry(self.right_key(j)).or_default().push(j);
        }
        let mut lines = Vec::new();
        for i in 0..self.left {
            let key = self.left_key(i);
            for j in by_key.get(&key).into_iter().flatten() {
                lines.push(line(key, i, *j));
            }
        }
        lines.sort();
        lines
    }
}

fn line(key: u64, left: u64, right: u64) -> String {
    format!("{key},{left},{right}")
}

/// Declares the job on `env` (the client and every TaskManager run exactly this).
fn declare(env: &Env) -> Result<(), ProgramError> {
    let (inputs, parallelism, output) = JoinInputs::from_args(&env.args())?;
    env.set_parallelism(parallelism.max(1));
    env.set_restart_strategy(RestartStrategyConfig::FixedDelay {
        attempts: 4,
        delay: std::time::Duration::from_millis(200),
    });
    let generated = |count: u64, key: fn(&JoinInputs, u64) -> u64| -> DataSet<(u64, u64)> {
        env.generate(move |subtask, parallelism| {
            (u64::from(subtask)..count)
                .step_by(parallelism.max(1) as usize)
                .map(move |i| (key(&inputs, i), i))
        })
    };
    let left = generated(inputs.left, JoinInputs::left_key);
    let right = generated(inputs.right, JoinInputs::right_key);
    let join = left.join(&right, |(k, _): &(u64, u64)| *k, |(k, _): &(u64, u64)| *k);
    let join = if inputs.broadcast {
        join.broadcast_right()
    } else {
        join
    };
    let joined = join.inner(|(key, i), (_, j)| line(key, i, j));
    joined.write_text(output, String::clone);
    joined.collect();
    Ok(())
}

/// The lines the job's `collect()` sink sent back, sorted (its only vertex that sends any).
pub fn collected_lines(
    results: &crate::messages::job_manager::JobResults,
) -> Result<Vec<String>, String> {
    let mut lines = Vec::new();
    for (vertex, parts) in &results.vertices {
        let decoded: Vec<String> = crate::api::decode_collected(parts)
            .map_err(|e| format!("cannot decode what {vertex} sent back: {e}"))?;
        lines.extend(decoded);
    }
    lines.sort();
    Ok(lines)
}

/// The program.
pub fn join_program() -> Program {
    Program::new(NAME, |env: &Env| {
        declare(env)?;
        env.execute(NAME)?;
        Ok(())
    })
}

/// The built-in operators and the program's: what every simulated node registers.
pub fn registry() -> OperatorRegistry {
    Programs::new().with(join_program()).registry()
}

/// Refuses to run anything: the simulation submits the graph itself.
struct Declaring;

impl Executor for Declaring {
    fn execute(
        &mut self,
        _: JobGraph,
    ) -> Result<ExecutedJob, Box<dyn std::error::Error + Send + Sync>> {
        Err("the simulation submits the job graph itself".into())
    }
}

/// The job graph of the join over `inputs` at `parallelism`, writing to `output`.
pub fn join_graph(
    inputs: JoinInputs,
    parallelism: u32,
    output: &Path,
) -> Result<JobGraph, ProgramError> {
    let args = vec![
        inputs.left.to_string(),
        inputs.right.to_string(),
        inputs.keys.to_string(),
        parallelism.to_string(),
        output.display().to_string(),
        if inputs.broadcast {
            "broadcast"
        } else {
            "hash"
        }
        .to_owned(),
    ];
    let env = Env::new(join_program().identity(), args, Box::new(Declaring));
    declare(&env)?;
    env.job_graph(NAME)
}
