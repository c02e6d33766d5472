//! Batch job recovery across a leader failover (FLIP-383, in the shape of Flink's
//! `JMFailoverITCase`), against a real ZooKeeper with real processes: a WordCount of 10,000
//! keys whose tokenize → count edge is blocking and all-to-all, its leader `kill -9`ed while the
//! second stage runs. The new leader takes the finished first stage back from the TaskManagers
//! that kept its results and reruns only the second; every key's count is exact, and the REST
//! details say which subtasks were taken back (`restored`) and which ran again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use flint::operators::builtin::sequential_word_count;

mod common;
use common::ha::{
    HaCluster, KEYS, Stage, get, is_open, leads, open_gate, signal, submit_recovery_wordcount,
    wait_for_logged_regions, wait_until,
};
use common::read_counts;

/// The previous-worker timeout of these clusters: long enough for a TaskManager to re-register
/// under load, short enough for the test where one never comes back.
const RECOVERY_TIMEOUT: &str =
    "[execution.batch.job-recovery.previous-worker.recovery]\ntimeout = \"8s\"\n";

/// A vertex's subtasks in a job's JSON.
fn subtasks<'a>(job: &'a serde_json::Value, vertex: &str) -> &'a Vec<serde_json::Value> {
    job["vertices"]
        .as_array()
        .and_then(|vertices| vertices.iter().find(|v| v["name"] == vertex))
        .and_then(|v| v["subtasks"].as_array())
        .unwrap_or_else(|| panic!("no subtasks of {vertex}: {job:#}"))
}

fn all_in(job: &serde_json::Value, vertex: &str, state: &str) -> bool {
    subtasks(job, vertex).iter().all(|s| s["state"] == state)
}

/// Whether the job reached a terminal state.
fn ended(job: &serde_json::Value) -> bool {
    matches!(
        job["state"].as_str(),
        Some("FINISHED" | "FAILED" | "CANCELED")
    )
}

/// Which subtasks of `vertex` the new leader took back.
fn restored(job: &serde_json::Value, vertex: &str) -> Vec<bool> {
    subtasks(job, vertex)
        .iter()
        .map(|s| s["restored"] == true)
        .collect()
}

/// Starts a cluster and the job, and kills the leader once the first stage has finished, its
/// events are logged, and the second stage runs (held at its gate until the new leader runs it
/// again). `before_kill` runs just before the kill.
fn run_until_leader_killed(
    name: &str,
    before_kill: impl FnOnce(&mut HaCluster),
) -> Option<(HaCluster, String, PathBuf, PathBuf)> {
    run_until(name, (0, 0), Stage::Second, 2, before_kill, |j| {
        all_in(j, "tokenize", "FINISHED")
            && subtasks(j, "pace").iter().any(|s| s["state"] == "RUNNING")
    })
}

/// [`run_until_leader_killed`] with the stages paced `paces` (µs per record), `held` held at its
/// gate (and the second stage too, which cannot run before the first has finished), the leader
/// killed once `ready` holds for the job's JSON and the event log names `logged` finished
/// regions.
fn run_until(
    name: &str,
    (first_us, second_us): (u32, u32),
    held: Stage,
    logged: usize,
    before_kill: impl FnOnce(&mut HaCluster),
    ready: impl Fn(&serde_json::Value) -> bool,
) -> Option<(HaCluster, String, PathBuf, PathBuf)> {
    let mut cluster = HaCluster::start_with(name, RECOVERY_TIMEOUT)?;
    let a_url = cluster.a.url();
    if matches!(held, Stage::Second) {
        open_gate(&cluster.dir, Stage::First);
    }
    let (job, input, output) = submit_recovery_wordcount(&a_url, &cluster.dir, first_us, second_us);
    cluster.wait_for_job(&a_url, &job, "the job reaches the point of the kill", ready);
    wait_for_logged_regions(&cluster.dir, &job, logged);
    before_kill(&mut cluster);
    signal(&cluster.a.child, "-KILL");
    let _ = cluster.a.child.wait();
    Some((cluster, job, input, output))
}

/// The job at the new leader once it ended, its count checked exact.
fn finish_at_new_leader(
    cluster: &HaCluster,
    job: &str,
    input: &Path,
    output: &Path,
) -> serde_json::Value {
    let b_url = cluster.b.url();
    wait_until("the standby leads", || leads(&b_url).then_some(()));
    // The old leader's tasks are cancelled before their TaskManagers register with the new one,
    // which runs the held stage there again: only then may it pass its gate.
    for (stage, vertex) in [(Stage::First, "slow"), (Stage::Second, "pace")] {
        if is_open(&cluster.dir, stage) {
            continue;
        }
        cluster.wait_for_job(&b_url, job, &format!("{vertex} runs again"), |j| {
            ended(j) || subtasks(j, vertex).iter().any(|s| s["state"] == "RUNNING")
        });
        open_gate(&cluster.dir, stage);
    }
    let done = cluster.wait_for_job(&b_url, job, "the recovered job ends", ended);
    assert_eq!(done["state"], "FINISHED", "{done:#}");
    assert!(done["recovered-at"].is_u64(), "not recovered: {done:#}");
    let expected = sequential_word_count(input).unwrap();
    assert_eq!(expected.len(), KEYS);
    let counts: BTreeMap<String, u64> = read_counts(output);
    assert_eq!(counts.len(), KEYS, "every key once");
    assert_eq!(counts, expected, "the recovered job's count is not exact");
    done
}

/// (a) Leadership lost while the second stage runs: the whole first stage is taken back.
#[test]
fn a_leader_lost_while_the_second_stage_runs_reruns_only_the_second_stage() {
    let Some((cluster, job, input, output)) =
        run_until_leader_killed("recovery-second-stage", |_| {})
    else {
        return;
    };
    let done = finish_at_new_leader(&cluster, &job, &input, &output);
    for vertex in ["source", "slow", "tokenize"] {
        assert_eq!(restored(&done, vertex), [true, true], "{vertex}: {done:#}");
    }
    for vertex in ["count", "pace", "sink"] {
        assert_eq!(
            restored(&done, vertex),
            [false, false],
            "{vertex}: {done:#}"
        );
    }
    // The REST answer says so too (the leader's log is the operator's other witness).
    let answer = get(&cluster.b.url(), &format!("/jobs/{job}"));
    assert!(answer.body.contains("\"restored\":true"), "{}", answer.body);
}

/// (b) Leadership lost while one source subtask still runs: the finished one is taken back,
/// the running one runs again.
#[test]
fn a_leader_lost_while_one_source_runs_takes_back_the_finished_one() {
    let Some((cluster, job, input, output)) = run_until(
        "recovery-one-source-runs",
        (200, 0),
        Stage::First,
        1,
        |_| {},
        |j| {
            let states: Vec<&serde_json::Value> = subtasks(j, "tokenize")
                .iter()
                .map(|s| &s["state"])
                .collect();
            states == ["RUNNING", "FINISHED"]
        },
    ) else {
        return;
    };
    let done = finish_at_new_leader(&cluster, &job, &input, &output);
    for vertex in ["source", "slow", "tokenize"] {
        assert_eq!(restored(&done, vertex), [false, true], "{vertex}: {done:#}");
    }
    for vertex in ["count", "pace", "sink"] {
        assert_eq!(
            restored(&done, vertex),
            [false, false],
            "{vertex}: {done:#}"
        );
    }
}

/// (c) A TaskManager that does not come back before the timeout: what it held runs again, what
/// the other kept is taken back.
#[test]
fn a_taskmanager_that_does_not_come_back_costs_only_the_reruns_of_what_it_held() {
    let Some((cluster, job, input, output)) =
        run_until_leader_killed("recovery-lost-worker", |cluster| {
            let tm = &cluster.task_managers[0];
            signal(&tm.0, "-KILL");
        })
    else {
        return;
    };
    let done = finish_at_new_leader(&cluster, &job, &input, &output);
    let placed: Vec<String> = subtasks(&done, "tokenize")
        .iter()
        .map(|s| s["taskmanager-id"].as_str().unwrap_or_default().to_owned())
        .collect();
    let tokenize = restored(&done, "tokenize");
    assert!(
        tokenize.iter().all(|r| !r) || placed.iter().all(|tm| tm == "tm-2"),
        "only tm-2's results can be taken back: {done:#}"
    );
    for (subtask, was_restored) in tokenize.iter().enumerate() {
        if *was_restored {
            assert_eq!(placed[subtask], "tm-2", "{done:#}");
        }
    }
}

/// (d) A partition file deleted behind its TaskManager's back: its reader fails, its producer
/// runs again, and the count is still exact.
#[test]
fn a_partition_file_deleted_behind_the_taskmanagers_back_reruns_its_producer() {
    let Some((cluster, job, input, output)) =
        run_until_leader_killed("recovery-deleted-partition", |cluster| {
            let deleted = delete_one_spill_file(&cluster.dir.join("tm-work"));
            eprintln!("deleted {deleted:?}");
        })
    else {
        return;
    };
    let done = finish_at_new_leader(&cluster, &job, &input, &output);
    assert!(
        restored(&done, "tokenize").contains(&false),
        "the deleted partition's producer ran again: {done:#}"
    );
}

/// Deletes the first spill file found under `dir`.
fn delete_one_spill_file(dir: &Path) -> Option<PathBuf> {
    let mut pending = vec![dir.to_owned()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).ok()?.flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if std::fs::remove_file(&path).is_ok() {
                return Some(path);
            }
        }
    }
    None
}
