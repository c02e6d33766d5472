//! Request → worker registered: `cargo bench --bench worker_start` (`-- --quick` for 3 rounds).
//!
//! On a real one-node Slurm (the tests' harness, tests/common/slurm.rs; skipped loudly without
//! it), each round grows a `flint jobmanager`'s pool from 0 to 1 and times the `PUT
//! /cluster/pool-size` until the new TaskManager is registered, then shrinks it back and waits
//! until its Slurm job is gone. Measured for the `slurm` driver at two poll intervals and for the
//! `local_process` driver, beside Slurm's own start time: `sbatch` → the job's script running
//! (a file it creates), on the same idle node.

// A benchmark measures wall time with the real clock; it is no node code.
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::time::{Duration, Instant};

#[path = "../tests/common/mod.rs"]
mod common;
use common::rest::{JobManagerChild, agent, local_bearer, request};
use common::slurm::Slurm;

const DEADLINE: Duration = Duration::from_secs(60);

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let give_up = Instant::now() + DEADLINE;
    while !done() {
        assert!(Instant::now() < give_up, "not within {DEADLINE:?}: {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// `sbatch` of a script that creates a file → the file exists.
fn slurm_own_start(slurm: &Slurm, dir: &Path, round: usize) -> Duration {
    let marker = dir.join(format!("started-{round}"));
    let began = Instant::now();
    let wrap = format!("--wrap=touch {}", marker.display());
    slurm.sbatch(&["--output=/dev/null", &wrap]);
    wait_for("the job's script runs", || marker.exists());
    began.elapsed()
}

/// A JobManager of `driver` with an empty pool; each round grows it to one worker.
fn driver_rounds(
    slurm: &Slurm,
    dir: &Path,
    driver: &str,
    poll: &str,
    rounds: usize,
) -> Vec<Duration> {
    let dir = dir.join(format!("{driver}-{poll}"));
    std::fs::create_dir_all(&dir).unwrap();
    let extra = format!(
        "[cluster]\nid = \"bench-{driver}-{poll}-{}\"\n[resourcemanager]\ndriver = \"{driver}\"\n\
         check-interval = \"100ms\"\n[slurm]\npoll-interval = \"{poll}\"\nmemory-per-worker = \"256mb\"\n\
         sbatch-options = [\"--output=/dev/null\"]\n",
        std::process::id()
    );
    let jm = JobManagerChild::start_with_env(
        env!("CARGO_BIN_EXE_flint").as_ref(),
        &[
            "--bind",
            "127.0.0.1:0",
            "--rest",
            "127.0.0.1:0",
            "--pool-size",
            "0",
            "--slots",
            "1",
        ],
        &dir,
        &extra,
        &slurm.env(),
    );
    let url = jm.url();
    let bearer = local_bearer();
    let agent = agent();
    let send = |method: &str, path: &str, body: Option<&str>| {
        request(
            &agent,
            method,
            &format!("{url}{path}"),
            body,
            bearer.as_deref(),
        )
    };
    let registered = || {
        send("GET", "/taskmanagers", None).json()["taskmanagers"]
            .as_array()
            .map_or(0, Vec::len)
    };
    let queued = || {
        let out = slurm
            .command("squeue")
            .args(["-h", "-a", "-o", "%i"])
            .output()
            .expect("squeue runs");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let mut times = Vec::new();
    for _ in 0..rounds {
        let began = Instant::now();
        send("PUT", "/cluster/pool-size", Some(r#"{"size": 1}"#));
        wait_for("a worker registered", || registered() == 1);
        times.push(began.elapsed());
        send("PUT", "/cluster/pool-size", Some(r#"{"size": 0}"#));
        wait_for("the worker gone", || {
            registered() == 0 && queued().is_empty()
        });
    }
    times
}

fn main() {
    let quick = std::env::args().any(|arg| arg == "--quick");
    let rounds = if quick { 3 } else { 7 };
    let dir = common::scratch("bench-worker-start");
    let Some(slurm) = Slurm::start(&dir.join("slurm")) else {
        return;
    };
    let own: Vec<Duration> = (0..rounds)
        .map(|round| slurm_own_start(&slurm, &dir, round))
        .collect();
    let runs = [
        (
            "slurm",
            "1s",
            driver_rounds(&slurm, &dir, "slurm", "1s", rounds),
        ),
        (
            "slurm",
            "200ms",
            driver_rounds(&slurm, &dir, "slurm", "200ms", rounds),
        ),
        (
            "local_process",
            "-",
            driver_rounds(&slurm, &dir, "local_process", "1s", rounds),
        ),
    ];
    println!("request → worker registered, {rounds} rounds each (median, min, max)");
    let show = |what: &str, times: &[Duration]| {
        let (min, max) = (times.iter().min().unwrap(), times.iter().max().unwrap());
        println!(
            "  {what:<40} {:>8.0?} (min {min:.0?}, max {max:.0?})",
            median(times.to_vec())
        );
    };
    show("Slurm's own start (sbatch → script runs)", &own);
    for (driver, poll, times) in &runs {
        show(&format!("{driver} driver (poll {poll})"), times);
    }
    drop(slurm);
    let _ = std::fs::remove_dir_all(&dir);
}
