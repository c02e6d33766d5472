//! TPC-H Q1, Q3, Q5, Q6, Q10 and Q18 on a process cluster, as a user runs them:
//! `cargo build --release --example tpch && cargo bench --bench tpch_cluster`.
//!
//! Starts `target/release/examples/tpch jobmanager` with a pool of `FLINT_BENCH_TPCH_TMS`
//! TaskManager processes (default 2) × `FLINT_BENCH_TPCH_SLOTS` slots (default 1), then runs
//! `tpch QUERY --data DIR --parallelism TMS×SLOTS --jobmanager URL` as a client process for each
//! query: one warm-up run, then `FLINT_BENCH_TPCH_RUNS` (default 3) timed ones. The time is
//! the client's (submission to answer, Parquet files read inside it, as the query's own
//! `Q: N rows in T s` line on stderr) and the whole client process's wall time. Prints the
//! median of each, and the peak RSS of each TaskManager process (`VmHWM`) at the end.
//!
//! DIR is `FLINT_BENCH_TPCH_DATA` (default `/work/data/tpch/sf1-duckdb`: DuckDB's SF 1 files,
//! decimals as DOUBLE, as the peers' figures in benches/RESULTS.md were measured on; made by
//! `benches/peers/tpch/make_data.py`). `FLINT_BENCH_TPCH_BIN` runs another build of the example.

#![allow(clippy::disallowed_methods)] // a benchmark measures wall time with the real clock

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The process helpers of the integration tests (finding the TaskManager children).
#[path = "../tests/common/process.rs"]
#[allow(dead_code)]
mod process;

const QUERIES: [&str; 6] = ["Q1", "Q3", "Q5", "Q6", "Q10", "Q18"];

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Kills the JobManager (and with it its TaskManagers) when dropped.
struct Cluster(Child);

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

/// The TaskManager children of `parent` (pids): the tests' /proc scan.
fn children(parent: u32) -> Vec<u32> {
    process::task_managers_of(parent)
        .into_iter()
        .map(|(pid, _)| pid)
        .collect()
}

fn peak_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// One client run of `query`: (the query's own time, the client process's wall time).
fn run(binary: &Path, query: &str, data: &str, parallelism: u32, url: &str) -> (f64, f64) {
    let started = Instant::now();
    let output = Command::new(binary)
        .args([
            query,
            "--data",
            data,
            "--parallelism",
            &parallelism.to_string(),
        ])
        .args(["--jobmanager", url])
        .output()
        .expect("the tpch client runs");
    let wall = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{query} failed: {stderr}");
    let own = stderr
        .lines()
        .find_map(|l| {
            let rest = l.strip_prefix(&format!("{query}: "))?;
            rest.split(" in ").nth(1)?.strip_suffix(" s")?.parse().ok()
        })
        .unwrap_or(wall);
    (own, wall)
}

fn main() {
    // `FLINT_BENCH_TPCH_BIN`: another build of the example, to compare two builds.
    let binary = std::env::var_os("FLINT_BENCH_TPCH_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/release/examples/tpch"),
        PathBuf::from,
    );
    if !binary.exists() {
        eprintln!(
            "{} is missing: run `cargo build --release --example tpch` first",
            binary.display()
        );
        return;
    }
    let data: String = env_or(
        "FLINT_BENCH_TPCH_DATA",
        "/work/data/tpch/sf1-duckdb".to_owned(),
    );
    if !Path::new(&data).join("lineitem.parquet").exists() {
        eprintln!("no TPC-H data in {data}: set FLINT_BENCH_TPCH_DATA (see benches/RESULTS.md)");
        return;
    }
    let (tms, slots, runs): (u32, u32, usize) = (
        env_or("FLINT_BENCH_TPCH_TMS", 2),
        env_or("FLINT_BENCH_TPCH_SLOTS", 1),
        env_or("FLINT_BENCH_TPCH_RUNS", 3),
    );
    let work = std::env::temp_dir().join(format!("flint-bench-tpch-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    let config = work.join("flint.toml");
    std::fs::write(
        &config,
        format!(
            "[taskmanager]\nworking-dir = \"{}\"\n",
            work.join("tm").display()
        ),
    )
    .unwrap();
    let mut child = Command::new(&binary)
        .args([
            "jobmanager",
            "--bind",
            "127.0.0.1:0",
            "--rest",
            "127.0.0.1:0",
        ])
        .args([
            "--pool-size",
            &tms.to_string(),
            "--slots",
            &slots.to_string(),
        ])
        .arg("--config")
        .arg(&config)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the JobManager starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let cluster = Cluster(child);
    let url = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| l.split(" at ").nth(1).map(str::to_owned))
        .expect("the REST line");
    let deadline = Instant::now() + Duration::from_secs(30);
    while children(cluster.0.id()).len() < tms as usize {
        assert!(Instant::now() < deadline, "the TaskManagers never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let parallelism = tms * slots;
    println!(
        "TPC-H on {tms} TaskManager processes × {slots} slots (parallelism {parallelism}), {data}, \
         median of {runs} runs after one warm-up"
    );
    println!("| query | query time (s) | client process (s) |");
    println!("| --- | ---: | ---: |");
    let (mut own_sum, mut wall_sum) = (0.0, 0.0);
    for query in QUERIES {
        run(&binary, query, &data, parallelism, &url);
        let (own, wall): (Vec<f64>, Vec<f64>) = (0..runs)
            .map(|_| run(&binary, query, &data, parallelism, &url))
            .unzip();
        let (own, wall) = (median(own), median(wall));
        own_sum += own;
        wall_sum += wall;
        println!("| {query} | {own:.3} | {wall:.3} |");
    }
    println!("| sum | {own_sum:.3} | {wall_sum:.3} |");
    for pid in children(cluster.0.id()) {
        if let Some(kib) = peak_kib(pid) {
            println!("TaskManager {pid}: peak RSS {} MiB", kib >> 10);
        }
    }
    drop(cluster);
    let _ = std::fs::remove_dir_all(&work);
}
