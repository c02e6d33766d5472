//! The client commands' human output: the REST answers as aligned tables and short lines.
//!
//! Pure functions from answers to text, so the output is tested on the documented answers
//! (`testdata/`). Times are shown in UTC (RFC 3339) and durations in seconds; `--output json`
//! bypasses this module entirely.

use std::fmt::Write as _;
use std::time::{Duration, UNIX_EPOCH};

use super::api::{JobList, JobView, Overview, PoolSize, TaskManagerList};
use super::table::{Align, Table};

/// `flint list`.
pub fn job_list(list: &JobList) -> String {
    if list.jobs.is_empty() {
        return "No jobs.\n".to_owned();
    }
    let mut table = Table::new(&[
        ("JOB ID", Align::Left),
        ("NAME", Align::Left),
        ("STATE", Align::Left),
        ("TASKS", Align::Right),
        ("SUBMITTED", Align::Left),
    ]);
    for job in &list.jobs {
        table.row([
            job.id.to_string(),
            job.name.clone(),
            job.state.to_string(),
            format!("{}/{}", job.tasks_finished, job.tasks_total),
            time(job.start_time),
        ]);
    }
    table.to_string()
}

/// `flint status JOB_ID`: the job, its vertices and its subtasks.
pub fn job_details(job: &JobView) -> String {
    let mut out = String::new();
    let restarts = match job.restarts {
        1 => " (1 restart)".to_owned(),
        0 => String::new(),
        n => format!(" ({n} restarts)"),
    };
    // Writing to a String cannot fail.
    let _ = writeln!(out, "Job        {} `{}`", job.id, job.name);
    let _ = writeln!(out, "State      {}{restarts}", job.state);
    let _ = writeln!(out, "Submitted  {}", time(job.start_time));
    if let (Some(end), Some(duration)) = (job.end_time, job.duration) {
        let _ = writeln!(out, "Ended      {} after {}", time(end), millis(duration));
    }
    let _ = writeln!(
        out,
        "Tasks      {}/{} finished",
        job.tasks_finished, job.tasks_total
    );
    if let Some(failure) = &job.failure {
        let _ = writeln!(out, "Failure    {failure}");
    }

    let mut vertices = Table::new(&[
        ("VERTEX", Align::Left),
        ("OPERATOR", Align::Left),
        ("PARALLELISM", Align::Right),
        ("FINISHED", Align::Right),
        ("STATES", Align::Left),
    ]);
    for v in &job.vertices {
        let states: Vec<String> = v
            .tasks
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(s, n)| format!("{n} {s}"))
            .collect();
        vertices.row([
            v.name.clone(),
            v.operator.clone(),
            v.parallelism.to_string(),
            format!("{}/{}", v.finished(), v.parallelism),
            states.join(", "),
        ]);
    }
    let _ = write!(out, "\n{vertices}");

    let mut subtasks = Table::new(&[
        ("VERTEX", Align::Left),
        ("SUBTASK", Align::Right),
        ("ATTEMPT", Align::Right),
        ("STATE", Align::Left),
        ("TASKMANAGER", Align::Left),
        ("LOCALITY", Align::Left),
        ("FAILURE", Align::Left),
    ]);
    for v in &job.vertices {
        for s in &v.subtasks {
            subtasks.row([
                v.name.clone(),
                s.subtask.to_string(),
                s.attempt.to_string(),
                s.state.to_string(),
                s.taskmanager_id
                    .as_ref()
                    .map_or_else(|| "-".to_owned(), ToString::to_string),
                s.locality.clone().unwrap_or_else(|| "-".to_owned()),
                s.failure.clone().unwrap_or_default(),
            ]);
        }
    }
    let _ = write!(out, "\n{subtasks}");
    write_root_causes(&mut out, job);
    out
}

/// The task failures that restarted or failed the job, newest last: a subtask's row shows only
/// its current attempt, so a job that keeps restarting would not say why without them (Flink's
/// exception history).
fn write_root_causes(out: &mut String, job: &JobView) {
    let causes: Vec<_> = job.exceptions.iter().filter(|e| e.root_cause).collect();
    if causes.is_empty() {
        return;
    }
    let mut table = Table::new(&[
        ("FAILED AT", Align::Left),
        ("VERTEX", Align::Left),
        ("SUBTASK", Align::Right),
        ("ATTEMPT", Align::Right),
        ("TASKMANAGER", Align::Left),
        ("FAILURE", Align::Left),
    ]);
    for cause in &causes {
        table.row([
            time(cause.timestamp),
            cause.vertex.clone(),
            cause.subtask.to_string(),
            cause.attempt.to_string(),
            cause
                .taskmanager_id
                .as_ref()
                .map_or_else(|| "-".to_owned(), ToString::to_string),
            cause.exception.clone(),
        ]);
    }
    let _ = write!(
        out,
        "\nTask failures that restarted or failed it (oldest first):\n{table}"
    );
}

/// `flint taskmanagers`.
pub fn task_managers(list: &TaskManagerList) -> String {
    if list.taskmanagers.is_empty() {
        return "No TaskManagers registered.\n".to_owned();
    }
    let mut table = Table::new(&[
        ("ID", Align::Left),
        ("ADDRESS", Align::Left),
        ("BUILD", Align::Left),
        ("PROGRAMS", Align::Left),
        ("SLOTS", Align::Right),
        ("FREE", Align::Right),
        ("CPU", Align::Right),
        ("MEMORY", Align::Right),
        ("HEARTBEAT", Align::Right),
        ("SPILLED", Align::Right),
        ("TASKS", Align::Left),
    ]);
    for tm in &list.taskmanagers {
        let tasks: Vec<String> = tm
            .slots
            .iter()
            .flat_map(|slot| &slot.tasks)
            .map(|t| match (&t.vertex_name, t.state) {
                (Some(vertex), Some(state)) => format!("{vertex}#{} {state}", t.subtask),
                // A task of a job the JobManager no longer keeps.
                _ => format!("{}#{}", t.job_id, t.subtask),
            })
            .collect();
        table.row([
            tm.id.to_string(),
            tm.address.clone(),
            tm.fingerprint.build.clone(),
            tm.fingerprint.programs().join(","),
            tm.slots_number.to_string(),
            tm.free_slots.to_string(),
            tm.hardware.cpu_cores.to_string(),
            gib(tm.hardware.physical_memory),
            format!("{} ago", millis(tm.time_since_last_heartbeat)),
            mib(tm.spill.bytes),
            tasks.join(", "),
        ]);
    }
    table.to_string()
}

/// `flint pool-size`: the designated size, the jobs' demand, the size the pool is kept at, and
/// how far the pool is from it.
pub fn pool(size: &PoolSize, overview: &Overview) -> String {
    let pool = &overview.pool;
    let max = size.max;
    // A demand left after the jobs ended is kept until it was lower for the timeout (a job
    // that follows soon finds its TaskManagers): say so, or it reads as a leak.
    let lingering = if size.demand > 0 && overview.jobs_running == 0 {
        " (no job runs: it falls once that lasted resourcemanager.taskmanager-timeout)"
    } else {
        ""
    };
    let mut text = format!(
        "Designated pool size  {} (max {max})\n\
         Jobs' demand          {}{lingering}\n\
         Target                {}\n\
         Started               {}\n\
         Pending requests      {}\n\
         Pending registration  {}\n\
         Start failures        {}\n\
         TaskManagers          {} registered, {} slots ({} free)\n",
        size.size,
        size.demand,
        size.target,
        pool.started,
        pool.pending_requests,
        pool.pending_registration,
        pool.start_failures,
        overview.taskmanagers,
        overview.slots_total,
        overview.slots_available,
    );
    for (worker, detail) in &size.workers {
        let _ = writeln!(text, "  {worker}  {detail}");
    }
    text
}

/// `2023-11-14T22:13:20Z` for milliseconds since the epoch.
pub fn time(ms: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// `1.20s` for milliseconds.
fn millis(ms: u64) -> String {
    format!("{:.2}s", Duration::from_millis(ms).as_secs_f64())
}

/// `flint artifacts`: the JobManager's stored artifacts.
pub fn artifacts(list: &crate::rest::ArtifactList) -> String {
    if list.artifacts.is_empty() {
        return "No artifacts stored.\n".to_owned();
    }
    let mut table = Table::new(&[("SHA256", Align::Left), ("SIZE", Align::Right)]);
    for artifact in &list.artifacts {
        table.row([artifact.digest.to_string(), artifact.size.to_string()]);
    }
    table.to_string()
}

/// `24.0 GiB` for bytes.
fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse<T: serde::de::DeserializeOwned>(json: &str) -> T {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn the_job_list_is_a_table_oldest_first() {
        let text = job_list(&parse(include_str!("testdata/jobs.json")));
        assert_eq!(
            text,
            "JOB ID                                NAME       STATE     TASKS  SUBMITTED\n\
             3f2a0c1e-9b7d-4e21-8c55-0d1e2f3a4b5c  wordcount  FINISHED    8/8  2023-11-14T22:13:20Z\n\
             7c00d1e2-0000-4000-8000-00000000beef  slow       RUNNING     0/1  2023-11-14T22:15:00Z\n"
        );
        assert_eq!(job_list(&JobList { jobs: Vec::new() }), "No jobs.\n");
    }

    #[test]
    fn a_jobs_status_shows_its_vertices_and_subtasks() {
        let text = job_details(&parse(include_str!("testdata/job_running.json")));
        assert!(
            text.starts_with(
                "Job        7c00d1e2-0000-4000-8000-00000000beef `slow`\n\
                 State      RUNNING (1 restart)\n\
                 Submitted  2023-11-14T22:15:00Z\n\
                 Tasks      1/3 finished\n\n"
            ),
            "{text}"
        );
        assert!(!text.contains("Ended"), "{text}");
        assert!(
            text.contains(
                "VERTEX  OPERATOR  PARALLELISM  FINISHED  STATES\n\
                 wait    sleep               3       1/3  1 SCHEDULED, 1 RUNNING, 1 FINISHED\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "VERTEX  SUBTASK  ATTEMPT  STATE      TASKMANAGER  LOCALITY       FAILURE\n\
                 wait          0        1  RUNNING    tm-1         UNCONSTRAINED\n\
                 wait          1        0  SCHEDULED  -            -\n\
                 wait          2        0  FINISHED   tm-2         NON_LOCAL\n"
            ),
            "{text}"
        );
        assert!(
            text.ends_with(
                "Task failures that restarted or failed it (oldest first):\n\
                 FAILED AT             VERTEX  SUBTASK  ATTEMPT  TASKMANAGER  FAILURE\n\
                 2023-11-14T22:15:00Z  wait          0        0  tm-1         cannot open `in.txt`\n"
            ),
            "only the root cause: {text}"
        );
        let text = job_details(&parse(include_str!("testdata/job_finished.json")));
        assert!(
            text.contains("Ended      2023-11-14T22:13:22Z after 2.00s\n"),
            "{text}"
        );
        assert!(!text.contains("Task failures"), "none, none shown: {text}");
    }

    #[test]
    fn task_managers_show_slots_and_their_tasks() {
        let text = task_managers(&parse(include_str!("testdata/taskmanagers.json")));
        assert_eq!(
            text,
            "ID    ADDRESS          BUILD         PROGRAMS        SLOTS  FREE  CPU    MEMORY  HEARTBEAT  SPILLED  TASKS\n\
             tm-1  127.0.0.1:40123  3fa91c0be2d4  tpch,wordcount      2     1    2  24.0 GiB  1.20s ago  5.0 MiB  source#0 RUNNING, tokenize#0 DEPLOYING\n\
             tm-2  127.0.0.1:40999  77e0d5aa01c4                      2     2    2  24.0 GiB  0.04s ago  0.0 MiB\n"
        );
        assert_eq!(
            task_managers(&TaskManagerList {
                taskmanagers: Vec::new()
            }),
            "No TaskManagers registered.\n"
        );
    }

    #[test]
    fn the_pool_shows_designated_against_started_and_pending() {
        let overview: Overview = parse(include_str!("testdata/overview.json"));
        let text = pool(
            &PoolSize {
                size: 3,
                demand: 5,
                target: 5,
                max: 10_000,
                workers: Default::default(),
            },
            &overview,
        );
        assert_eq!(
            text,
            "Designated pool size  3 (max 10000)\n\
             Jobs' demand          5\n\
             Target                5\n\
             Started               2\n\
             Pending requests      1\n\
             Pending registration  0\n\
             Start failures        0\n\
             TaskManagers          2 registered, 4 slots (3 free)\n"
        );
    }

    #[test]
    fn a_demand_left_after_the_jobs_ended_says_when_it_falls() {
        let mut overview: Overview = parse(include_str!("testdata/overview.json"));
        overview.jobs_running = 0;
        let size = PoolSize {
            size: 0,
            demand: 4,
            target: 4,
            max: 10,
            workers: Default::default(),
        };
        assert!(pool(&size, &overview).contains(
            "Jobs' demand          4 (no job runs: it falls once that lasted \
             resourcemanager.taskmanager-timeout)\n"
        ));
        overview.jobs_running = 1;
        assert!(pool(&size, &overview).contains("Jobs' demand          4\n"));
    }
}
