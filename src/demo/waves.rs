//! The demo's job wider than the pool: many independent `sleep` subtasks on a few slots. Each
//! subtask is a pipelined region of its own, so the JobManager runs them in waves as slots free
//! (Flink's batch scheduling) instead of refusing the job.

use std::io::Write;
use std::time::Duration;

use tokio::time::Instant;

use super::{DemoError, STEP_DEADLINE};
use crate::cluster::minicluster::MiniCluster;
use crate::job::graph::{JobGraph, RestartStrategyConfig};
use crate::job::states::{ExecutionState, JobStatus};
use crate::messages::job_manager::JobDetails;

/// Subtasks of the job.
const SUBTASKS: u32 = 64;
/// How long each sleeps.
const NAP: Duration = Duration::from_millis(40);

/// Runs the job, printing a line whenever the number of subtasks holding slots changes.
pub async fn run(
    cluster: &MiniCluster,
    number: u32,
    out: &mut impl Write,
) -> Result<(), DemoError> {
    let slots = cluster.status().await?.total_slots;
    writeln!(
        out,
        "\n== {number}. A job of {SUBTASKS} `sleep` subtasks ({} ms each) on the {slots} slots of the pool: it runs in waves",
        NAP.as_millis()
    )?;
    let mut b = JobGraph::builder("waves");
    b.vertex("nap", "sleep", SUBTASKS)
        .config("ms", NAP.as_millis().to_string());
    b.restart_strategy(RestartStrategyConfig::None);
    let graph = b
        .build(|_| true)
        .map_err(|e| DemoError::Job(e.to_string()))?;
    let began = Instant::now();
    let job = cluster.submit_job(graph).await?;
    let give_up = began + STEP_DEADLINE;
    let mut last = None;
    let details = loop {
        let details = cluster.job_status(job).await?;
        let (running, finished) = counts(&details);
        if last != Some((running, finished)) && running > 0 {
            writeln!(
                out,
                "[{:>6} ms] {running:>2} holding slots, {finished:>2} finished, {:>2} waiting",
                began.elapsed().as_millis(),
                SUBTASKS - running - finished
            )?;
        }
        last = Some((running, finished));
        if details.summary.status.is_globally_terminal() {
            break details;
        }
        if Instant::now() > give_up {
            return Err(DemoError::Stuck(Box::new(cluster.status().await?)));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    if details.summary.status != JobStatus::Finished {
        return Err(DemoError::Job(format!(
            "the waves job ended {}: {}",
            details.summary.status,
            details.failure.unwrap_or_default()
        )));
    }
    writeln!(
        out,
        "{SUBTASKS} subtasks FINISHED in {} ms; at most {} held slots at once (by the JobManager's timestamps), never more than the {slots} slots",
        began.elapsed().as_millis(),
        details.most_subtasks_at_once()
    )?;
    Ok(())
}

/// Subtasks holding a slot (scheduled to canceling) and finished ones.
fn counts(details: &JobDetails) -> (u32, u32) {
    let mut running = 0;
    let mut finished = 0;
    for subtask in details.vertices.iter().flat_map(|v| &v.subtasks) {
        match subtask.state {
            ExecutionState::Deploying | ExecutionState::Running => running += 1,
            ExecutionState::Finished => finished += 1,
            _ => {}
        }
    }
    (running, finished)
}
