//! The guided tour behind `cargo run --release --bin demo`: an embedded cluster keeps its pool
//! through a crash and two resizes, narrated as a timeline of cluster events.
//!
//! The timeline is printed by the same task that waits, so lines appear in the order things
//! happened, and every wait has a deadline (a stuck cluster fails the demo instead of hanging).

mod waves;
mod wordcount;

pub use wordcount::generate_text;

use std::fmt::Write as _;
use std::io::Write;
use std::time::Duration;

use tokio::sync::broadcast::{self, error::TryRecvError};
use tokio::time::Instant;

use crate::cluster::minicluster::{ClusterStatus, MiniCluster, MiniClusterError};
use crate::config::ClusterConfig;
use crate::env::events::ClusterEvent;
use crate::messages::RemovalReason;

/// How long any one step may take before the demo gives up.
pub(crate) const STEP_DEADLINE: Duration = Duration::from_secs(20);

/// The demo's cluster: pool of 4 (at most 6), 2 slots each, heartbeats fast enough to watch.
pub fn demo_config() -> ClusterConfig {
    let mut config = ClusterConfig::default();
    config.resourcemanager.pool_size = 4;
    config.resourcemanager.max_pool_size = 6;
    config.resourcemanager.check_interval = Duration::from_millis(100);
    config.taskmanager.slots = 2;
    config.heartbeat.interval = Duration::from_millis(100);
    config.heartbeat.timeout = Duration::from_millis(500);
    // The jobs' demand (the waves step declares 32 TaskManagers' worth) lets go of the pool
    // this long after it fell, not Flink's 30 s, so the tour goes on at once.
    config.resourcemanager.taskmanager_timeout = Duration::from_millis(300);
    config
}

/// One step of the tour, for the summary table.
struct Step {
    what: String,
    took: Duration,
    status: ClusterStatus,
}

/// Prints events as they arrive while waiting for conditions.
struct Timeline<'a, W: Write> {
    out: &'a mut W,
    events: broadcast::Receiver<ClusterEvent>,
    start: Instant,
}

impl<W: Write> Timeline<'_, W> {
    fn line(&mut self, text: &str) -> std::io::Result<()> {
        let ms = self.start.elapsed().as_millis();
        writeln!(self.out, "[{ms:>6} ms] {text}")
    }

    fn heading(&mut self, text: &str) -> std::io::Result<()> {
        writeln!(self.out, "\n== {text}")
    }

    /// Skips the events of the WordCount runs (they are narrated by the runs themselves).
    fn drain_quietly(&mut self) {
        while self.events.try_recv().is_ok() {}
    }

    fn drain(&mut self) -> std::io::Result<Vec<ClusterEvent>> {
        let mut seen = Vec::new();
        loop {
            match self.events.try_recv() {
                Ok(event) => {
                    self.line(&event.to_string())?;
                    seen.push(event);
                }
                Err(TryRecvError::Lagged(missed)) => {
                    self.line(&format!("({missed} events not shown)"))?
                }
                Err(TryRecvError::Empty | TryRecvError::Closed) => return Ok(seen),
            }
        }
    }

    /// Prints events until `done` holds for the cluster's status (checked every few ms).
    async fn until(
        &mut self,
        cluster: &MiniCluster,
        mut done: impl FnMut(&ClusterStatus, &[ClusterEvent]) -> bool,
    ) -> Result<ClusterStatus, DemoError> {
        let give_up = Instant::now() + STEP_DEADLINE;
        let mut seen = Vec::new();
        loop {
            seen.extend(self.drain()?);
            let status = cluster.status().await?;
            if done(&status, &seen) {
                return Ok(status);
            }
            if Instant::now() > give_up {
                return Err(DemoError::Stuck(Box::new(status)));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Why the demo stopped early.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The cluster failed.
    #[error(transparent)]
    Cluster(#[from] MiniClusterError),
    /// Printing failed.
    #[error("cannot write the timeline")]
    Output(#[from] std::io::Error),
    /// A step did not finish within its deadline.
    #[error("a step did not finish within {STEP_DEADLINE:?}; the cluster looked like: {0}")]
    Stuck(Box<ClusterStatus>),
    /// The WordCount job could not be built.
    #[error("cannot build the WordCount job: {0}")]
    Job(String),
    /// WordCount's result differs from the sequential count.
    #[error("WordCount's result differs from the sequential count")]
    WrongResult,
}

/// Runs the tour, printing to `out`. Must run inside an actix System.
pub async fn run(config: ClusterConfig, out: &mut impl Write) -> Result<(), DemoError> {
    let target = config.resourcemanager.pool_size;
    let cluster = MiniCluster::start(config.clone())?;
    let mut timeline = Timeline {
        events: cluster.subscribe(),
        out,
        start: Instant::now(),
    };
    writeln!(
        timeline.out,
        "Flint demo: an embedded cluster (JobManager + resource manager + in-process TaskManagers).\n\
         Pool size {target}, {} slots per TaskManager, heartbeat every {:?}, lost after {:?} of silence.",
        config.taskmanager.slots, config.heartbeat.interval, config.heartbeat.timeout
    )?;
    let mut steps = Vec::new();

    timeline.heading(&format!(
        "1. The resource manager starts {target} workers; each registers at the JobManager"
    ))?;
    let began = Instant::now();
    let status = timeline
        .until(&cluster, |s, _| s.is_pool_at(target))
        .await?;
    timeline.line(&format!("pool at {target}: {status}"))?;
    steps.push(Step {
        what: format!("bring-up to {target}"),
        took: began.elapsed(),
        status,
    });

    let victim = cluster
        .running_workers()
        .into_iter()
        .next()
        .ok_or_else(|| DemoError::Stuck(Box::new(steps[0].status.clone())))?;
    timeline.heading(&format!(
        "2. Worker {victim} crashes; the JobManager notices (overdue heartbeat, unreachable); a replacement starts"
    ))?;
    let began = Instant::now();
    cluster.kill_worker(&victim)?;
    timeline.line(&format!(
        "crashed {victim} (no goodbye: its thread is gone)"
    ))?;
    let lost = |events: &[ClusterEvent]| {
        events.iter().any(|e| {
            matches!(e, ClusterEvent::TaskManagerLost { resource_id, reason: RemovalReason::Unreachable | RemovalReason::HeartbeatTimeout } if *resource_id == victim)
        })
    };
    let status = timeline
        .until(&cluster, |s, seen| lost(seen) && s.is_pool_at(target))
        .await?;
    timeline.line(&format!("pool back at {target}: {status}"))?;
    steps.push(Step {
        what: format!("crash of {victim} -> replaced"),
        took: began.elapsed(),
        status,
    });

    for (number, size, why) in [
        (3, target + 2, "more workers are started"),
        (
            5,
            target.saturating_sub(1),
            "idle workers are released through the JobManager",
        ),
    ] {
        timeline.heading(&format!("{number}. Pool size set to {size}: {why}"))?;
        let began = Instant::now();
        cluster.set_pool_size(size).await?;
        let status = timeline.until(&cluster, |s, _| s.is_pool_at(size)).await?;
        timeline.line(&format!("pool at {size}: {status}"))?;
        steps.push(Step {
            what: format!("resize to {size}"),
            took: began.elapsed(),
            status,
        });
        if number == 3 {
            // The pool at its largest: a job wider than it still runs, in waves.
            waves::run(&cluster, 4, timeline.out).await?;
            timeline.drain_quietly();
        }
    }

    wordcount::run(&cluster, timeline.out).await?;
    timeline.drain_quietly();

    timeline.heading("Summary")?;
    let table = summary(&steps, &cluster.status().await?);
    write!(timeline.out, "{table}")?;
    cluster.shutdown().await?;
    writeln!(
        timeline.out,
        "\nCluster stopped; every worker thread joined."
    )?;
    Ok(())
}

/// The steps, then the TaskManagers as the cluster has them now (`end`).
fn summary(steps: &[Step], end: &ClusterStatus) -> String {
    let mut table = String::new();
    let _ = writeln!(
        table,
        "{:<32} {:>9} {:>10} {:>8} {:>11} {:>6}",
        "step", "took (ms)", "designated", "started", "registered", "slots"
    );
    for step in steps {
        let _ = writeln!(
            table,
            "{:<32} {:>9} {:>10} {:>8} {:>11} {:>6}",
            step.what,
            step.took.as_millis(),
            step.status.designated_pool_size,
            step.status.started_workers,
            step.status.registered_task_managers(),
            step.status.total_slots
        );
    }
    let _ = writeln!(table, "\nTaskManagers at the end:");
    {
        for tm in &end.task_managers {
            let _ = writeln!(
                table,
                "  {:<16} {}  {} slots ({} free)",
                tm.resource_id.to_string(),
                tm.instance_id,
                tm.slots_total,
                tm.slots_free
            );
        }
    }
    table
}
