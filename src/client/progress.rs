//! The live progress `flint run` draws while it waits for a job on a cluster: a line with the
//! job's state, and one bar per vertex with its subtasks finished out of its parallelism.
//!
//! Drawn with indicatif on the target the caller gives (stderr for the CLI, so stdout keeps only
//! the job id and the report). indicatif draws nothing when that target is not a terminal, so
//! logs and pipes get no escape codes. What the bars say is computed by plain functions
//! ([`job_line`], [`vertex_line`]), tested without a terminal.

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::api::{JobView, VertexView};
use crate::base::ids::JobId;
use crate::job::graph::JobGraph;
use crate::job::states::ExecutionState;

/// The bars of one job.
pub struct JobProgress {
    multi: MultiProgress,
    job: ProgressBar,
    vertices: Vec<ProgressBar>,
}

impl JobProgress {
    /// Bars for `graph`, submitted as `id`, drawn on `target`.
    pub fn new(target: ProgressDrawTarget, graph: &JobGraph, id: JobId) -> Self {
        let multi = MultiProgress::with_draw_target(target);
        let job_style = ProgressStyle::with_template("{spinner} {prefix} {msg} [{elapsed}]")
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
        let job = multi.add(
            ProgressBar::new_spinner()
                .with_style(job_style)
                .with_prefix(format!("job `{}` {id}:", graph.name))
                .with_message("submitted"),
        );
        let width = graph
            .vertices
            .iter()
            .map(|v| v.name.chars().count())
            .max()
            .unwrap_or(0);
        let template = format!("  {{prefix:<{width}}} [{{bar:30}}] {{pos:>3}}/{{len:<3}} {{msg}}");
        let vertex_style = ProgressStyle::with_template(&template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        let vertices = graph
            .vertices
            .iter()
            .map(|v| {
                multi.add(
                    ProgressBar::new(u64::from(v.parallelism))
                        .with_style(vertex_style.clone())
                        .with_prefix(v.name.clone()),
                )
            })
            .collect();
        Self {
            multi,
            job,
            vertices,
        }
    }

    /// Shows the job as `details` describes it.
    pub fn update(&self, details: &JobView) {
        self.job.set_message(job_line(details));
        self.job.tick();
        for (bar, vertex) in self.vertices.iter().zip(&details.vertices) {
            let (finished, total, message) = vertex_line(vertex);
            bar.set_length(total);
            bar.set_position(finished);
            bar.set_message(message);
        }
    }

    /// Writes `lines` to `out` with the bars out of the way (cleared, then drawn again below
    /// them), so a line on the same terminal does not tear a frame.
    pub fn write_lines(
        &self,
        out: &mut impl std::io::Write,
        lines: &[String],
    ) -> std::io::Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        self.multi.suspend(|| {
            for line in lines {
                writeln!(out, "{line}")?;
            }
            out.flush()
        })
    }

    /// Removes the bars (the report that follows says how it ended).
    pub fn finish(&self) {
        for bar in &self.vertices {
            bar.finish_and_clear();
        }
        self.job.finish_and_clear();
        let _ = self.multi.clear();
    }

    /// Leaves the bars as they are, with the last known progress (the command stops waiting
    /// while the job goes on).
    pub fn abandon(&self) {
        self.job.abandon();
        for bar in &self.vertices {
            bar.abandon();
        }
    }

    /// Whether nothing is drawn (the target is not a terminal).
    pub fn is_hidden(&self) -> bool {
        self.multi.is_hidden()
    }

    #[cfg(test)]
    fn bars(&self) -> &[ProgressBar] {
        &self.vertices
    }
}

/// The job line: `RUNNING, 3/8 tasks finished, 1 restart`.
pub fn job_line(details: &JobView) -> String {
    let mut line = format!(
        "{}, {}/{} tasks finished",
        details.state, details.tasks_finished, details.tasks_total
    );
    match details.restarts {
        0 => {}
        1 => line.push_str(", 1 restart"),
        n => line.push_str(&format!(", {n} restarts")),
    }
    line
}

/// A vertex's bar: subtasks finished, all subtasks, and the states of the others
/// (`1 RUNNING, 1 SCHEDULED`), or `done`.
pub fn vertex_line(vertex: &VertexView) -> (u64, u64, String) {
    let finished = vertex.finished();
    let others: Vec<String> = ExecutionState::ALL
        .iter()
        .filter(|s| **s != ExecutionState::Finished)
        .filter_map(|s| match vertex.tasks.get(s) {
            Some(&n) if n > 0 => Some(format!("{n} {s}")),
            _ => None,
        })
        .collect();
    let message = if others.is_empty() && finished == vertex.parallelism {
        "done".to_owned()
    } else {
        others.join(", ")
    };
    (u64::from(finished), u64::from(vertex.parallelism), message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running() -> JobView {
        serde_json::from_str(include_str!("testdata/job_running.json")).unwrap()
    }

    #[test]
    fn lines_say_the_state_the_counts_and_the_restarts() {
        let job = running();
        assert_eq!(job_line(&job), "RUNNING, 1/3 tasks finished, 1 restart");
        assert_eq!(
            vertex_line(&job.vertices[0]),
            (1, 3, "1 SCHEDULED, 1 RUNNING".to_owned())
        );
        let finished: JobView =
            serde_json::from_str(include_str!("testdata/job_finished.json")).unwrap();
        assert_eq!(job_line(&finished), "FINISHED, 4/4 tasks finished");
        assert_eq!(
            vertex_line(&finished.vertices[1]),
            (2, 2, "done".to_owned())
        );
    }

    #[test]
    fn one_bar_per_vertex_follows_the_job_and_nothing_is_drawn_off_a_terminal() {
        let mut builder = JobGraph::builder("slow");
        builder.vertex("wait", "sleep", 3);
        let graph = builder.build(|_| true).unwrap();
        let job = running();
        let progress = JobProgress::new(ProgressDrawTarget::hidden(), &graph, job.id);
        assert!(progress.is_hidden());
        assert_eq!(progress.bars().len(), 1);
        progress.update(&job);
        let bar = &progress.bars()[0];
        assert_eq!((bar.position(), bar.length()), (1, Some(3)));
        assert_eq!(bar.message(), "1 SCHEDULED, 1 RUNNING");
        assert_eq!(
            progress.job.message(),
            "RUNNING, 1/3 tasks finished, 1 restart"
        );
        progress.finish();
        assert!(bar.is_finished());
    }
}
