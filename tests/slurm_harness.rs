//! The Slurm harness of tests/common/slurm.rs: a real one-node Slurm runs a batch job, two such
//! clusters run side by side without seeing each other's jobs, and dropping one ends the
//! processes of its jobs.

mod common;

use std::path::Path;
use std::time::Duration;

use common::slurm::Slurm;
use common::{RemoveOnDrop, scratch};

const JOB_DEADLINE: Duration = Duration::from_secs(30);

/// Submits a job that writes `echo TEXT` to `out`, waits for it to end and checks the file.
fn run_echo(slurm: &Slurm, name: &str, text: &str, out: &Path) {
    let script = format!("echo {text} > {}", out.display());
    let job = slurm.sbatch(&["--job-name", name, "--wrap", &script]);
    let state = slurm.wait_for_job(job, JOB_DEADLINE);
    let completed = matches!(state.as_deref(), Some("COMPLETED") | None);
    assert!(completed, "job {job} ended {state:?}");
    let written = std::fs::read_to_string(out).expect("the job's output file");
    assert!(!written.trim().is_empty(), "the job wrote {written:?}");
}

#[test]
fn a_real_slurm_runs_a_batch_job() {
    let dir = scratch("slurm-batch");
    let _remove = RemoveOnDrop(dir.clone());
    let Some(slurm) = Slurm::start(&dir.join("slurm")) else {
        return;
    };
    assert!(slurm.node_cpus() >= 1 && slurm.node_memory_mb() > 0);
    assert!(slurm.env().iter().any(|(key, _)| key == "SLURM_CONF"));
    let out = dir.join("out");
    run_echo(&slurm, "x", "hi", &out);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "hi\n");
}

#[test]
#[allow(clippy::disallowed_methods)] // starts the two clusters on two threads at once
fn two_slurms_run_at_once() {
    let dir = scratch("slurm-two");
    let _remove = RemoveOnDrop(dir.clone());
    let (first, second) = std::thread::scope(|s| {
        let first = s.spawn(|| Slurm::start(&dir.join("first")));
        let second = s.spawn(|| Slurm::start(&dir.join("second")));
        (first.join().unwrap(), second.join().unwrap())
    });
    let (Some(first), Some(mut second)) = (first, second) else {
        return;
    };
    assert_ne!(first.cluster, second.cluster);
    assert_ne!(first.node, second.node);
    let text = r#""$SLURM_CLUSTER_NAME $SLURMD_NODENAME""#;
    let (out1, out2) = (dir.join("out1"), dir.join("out2"));
    run_echo(&first, "one", text, &out1);
    run_echo(&second, "two", text, &out2);
    let expected = |slurm: &Slurm| format!("{} {}\n", slurm.cluster, slurm.node);
    assert_eq!(std::fs::read_to_string(&out1).unwrap(), expected(&first));
    assert_eq!(std::fs::read_to_string(&out2).unwrap(), expected(&second));
    // Each controller knows its own jobs only (the probe `wrap` of start, and ours).
    assert!(!first.squeue().contains(" two "), "{}", first.squeue());
    assert!(!second.squeue().contains(" one "), "{}", second.squeue());
    // Stopping one leaves the other working.
    second.stop();
    run_echo(&first, "again", "again", &dir.join("out3"));
}

/// Whether a process whose command line (arguments joined by spaces) contains `marker` runs.
fn process_with(marker: &str) -> bool {
    let entries = std::fs::read_dir("/proc").into_iter().flatten().flatten();
    entries.into_iter().any(|entry| {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        String::from_utf8_lossy(&cmdline)
            .replace('\0', " ")
            .contains(marker)
    })
}

#[test]
#[allow(clippy::disallowed_methods)] // waits for a real job in real time
fn dropping_it_ends_its_jobs_processes() {
    let dir = scratch("slurm-drop");
    let _remove = RemoveOnDrop(dir.clone());
    let Some(slurm) = Slurm::start(&dir.join("slurm")) else {
        return;
    };
    // A job whose child outlives its shell unless killed: `sleep` with a unique duration.
    let marker = format!("sleep 999.{}", std::process::id());
    let script = format!("{marker} & {marker} & wait");
    let job = slurm.sbatch(&["--output=/dev/null", "--wrap", &script]);
    let running = || slurm.job_state(job).as_deref() == Some("RUNNING") && process_with(&marker);
    let deadline = std::time::Instant::now() + JOB_DEADLINE;
    while !running() {
        assert!(std::time::Instant::now() < deadline, "{}", slurm.squeue());
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(slurm);
    assert!(!process_with(&marker), "the job's sleep outlived its Slurm");
}
