//! TPC-H Q1, Q3, Q5, Q6, Q10 and Q18 (`examples/tpch`) at scale factor 0.01 against DuckDB's
//! answers on the same data (tests/data/tpch/sf0.01, DuckDB 2.0.1 on tpchgen-cli 4.0.0 files,
//! exact decimals): on an embedded cluster, and on a process cluster started from the example's
//! own binary (its TaskManagers are that binary, so they run the queries' operators).
//!
//! The tables are generated inside the sources by the `tpchgen` crate (the generator
//! tpchgen-cli is built on), so the test needs no data files. Reading Parquet written by
//! DuckDB and tpchgen-cli is tested in tests/parquet.rs.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::process::JobManagerProcess;

const QUERIES: [&str; 6] = ["Q1", "Q3", "Q5", "Q6", "Q10", "Q18"];

/// The example binary `cargo test` built beside this test (target/*/examples/tpch).
fn tpch_binary() -> PathBuf {
    common::example_binary("tpch")
}

/// One field of an answer: numbers compare within a cent (answers print two decimals), text
/// exactly.
fn same_field(got: &str, want: &str) -> bool {
    match (got.parse::<f64>(), want.parse::<f64>()) {
        (Ok(a), Ok(b)) => (a - b).abs() <= 0.01 + 1e-9 * a.abs().max(b.abs()),
        _ => got == want,
    }
}

/// Splits a CSV line (quoted fields may hold commas).
fn fields(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                chars.next();
                out.last_mut().unwrap().push('"');
            }
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(String::new()),
            c => out.last_mut().unwrap().push(c),
        }
    }
    out
}

/// Checks `dir/Q.csv` for every query against the reference answers; the differences, if any.
fn check_answers(dir: &Path) -> Vec<String> {
    let reference = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tpch/sf0.01");
    let mut problems = Vec::new();
    for query in QUERIES {
        let got = std::fs::read_to_string(dir.join(format!("{query}.csv")))
            .unwrap_or_else(|e| panic!("{query}.csv was not written: {e}"));
        let want = std::fs::read_to_string(reference.join(format!("{}.csv", query.to_lowercase())))
            .unwrap();
        let (got, want): (Vec<&str>, Vec<&str>) = (got.lines().collect(), want.lines().collect());
        if got.len() != want.len() {
            problems.push(format!(
                "{query}: {} lines, DuckDB {}",
                got.len(),
                want.len()
            ));
            continue;
        }
        for (line, (g, w)) in got.iter().zip(&want).enumerate() {
            let (gf, wf) = (fields(g), fields(w));
            if gf.len() != wf.len() || gf.iter().zip(&wf).any(|(a, b)| !same_field(a, b)) {
                problems.push(format!("{query} line {}: `{g}`, DuckDB `{w}`", line + 1));
            }
        }
    }
    problems
}

fn run_queries(extra: &[&str], output: &Path) {
    let run = Command::new(tpch_binary())
        .args(["all", "--sf", "0.01", "--output"])
        .arg(output)
        .args(extra)
        .env_remove("FLINT_SECRET")
        .output()
        .expect("the tpch example runs");
    assert!(
        run.status.success(),
        "tpch failed: {}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
}

/// `binary jobmanager` with a pool of `pool` TaskManagers × 2 slots working in `dir`: the
/// process, its REST URL and its configuration file.
fn job_manager(binary: &Path, dir: &Path, pool: u32) -> (JobManagerProcess, String, PathBuf) {
    let config = dir.join("flint.toml");
    std::fs::write(
        &config,
        format!(
            "[taskmanager]\nworking-dir = \"{}\"\n",
            dir.join("work").display()
        ),
    )
    .unwrap();
    let mut command = Command::new(binary);
    command
        .args([
            "jobmanager",
            "--bind",
            "127.0.0.1:0",
            "--rest",
            "127.0.0.1:0",
        ])
        .args(["--pool-size", &pool.to_string(), "--slots", "2", "--config"])
        .arg(&config)
        .env_remove("FLINT_SECRET");
    let jm = JobManagerProcess::start_with_rest(command);
    let url = jm.rest.clone().expect("the JobManager's REST address");
    (jm, url, config)
}

#[test]
fn the_six_queries_match_duckdb_on_an_embedded_cluster() {
    let dir = common::scratch("tpch-embedded");
    let _cleanup = common::RemoveOnDrop(dir.clone());
    run_queries(&["--parallelism", "3"], &dir.join("out"));
    let problems = check_answers(&dir.join("out"));
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_six_queries_match_duckdb_on_a_process_cluster_of_the_programs_binary() {
    let dir = common::scratch("tpch-processes");
    let _cleanup = common::RemoveOnDrop(dir.clone());
    let (jm, url, _) = job_manager(&tpch_binary(), &dir, 2);
    // Two TaskManager processes, the example's own binary, run the queries at parallelism 4.
    run_queries(
        &["--parallelism", "4", "--jobmanager", &url],
        &dir.join("out"),
    );
    let problems = check_answers(&dir.join("out"));
    assert!(problems.is_empty(), "{problems:#?}");
    let children = common::process::task_managers_of(jm.pid());
    assert_eq!(children.len(), 2, "{children:?}");
    // The REST API shows each task's chain of operators: Q1 reads, filters, projects and
    // pre-aggregates lineitem in one task.
    let agent = common::rest::agent();
    let get = |path: &str| -> serde_json::Value {
        let answer = common::rest::request(
            &agent,
            "GET",
            &format!("{url}{path}"),
            None,
            common::rest::local_bearer().as_deref(),
        );
        serde_json::from_str(&answer.body).unwrap()
    };
    let jobs = get("/jobs");
    let q1 = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|job| job["name"] == "TPC-H Q1")
        .expect("Q1 is listed");
    let details = get(&format!("/jobs/{}", q1["id"].as_str().unwrap()));
    let longest = details["vertices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["chain"].as_array().map_or(0, Vec::len))
        .max()
        .unwrap_or(0);
    assert!(longest >= 3, "a chain of at least 3 operators: {details:#}");
}

#[test]
fn the_answer_check_catches_a_wrong_answer() {
    // The comparison above must be able to fail: a cent off in one field, a missing row.
    let dir = common::scratch("tpch-wrong");
    let _cleanup = common::RemoveOnDrop(dir.clone());
    let reference = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tpch/sf0.01");
    std::fs::create_dir_all(&dir).unwrap();
    for query in QUERIES {
        let text = std::fs::read_to_string(reference.join(format!("{}.csv", query.to_lowercase())))
            .unwrap();
        let text = match query {
            "Q6" => text.replace(".", "9."),
            "Q3" => text.lines().take(3).collect::<Vec<_>>().join("\n"),
            _ => text,
        };
        std::fs::write(dir.join(format!("{query}.csv")), text).unwrap();
    }
    let problems = check_answers(&dir);
    assert_eq!(problems.len(), 2, "{problems:#?}");
}

#[test]
fn a_job_runs_only_on_the_task_managers_that_carry_its_program() {
    // A plain `flint` cluster cannot run the TPC-H program: refused at submission, naming the
    // operator and the TaskManager that lacks it. A TaskManager of the example's binary that
    // joins takes every task of it; `flint taskmanagers` shows both builds.
    let dir = common::scratch("tpch-fingerprints");
    let _cleanup = common::RemoveOnDrop(dir.clone());
    let (jm, url, config) = job_manager(Path::new(env!("CARGO_BIN_EXE_flint")), &dir, 1);
    let agent = common::rest::agent();
    let registered = |n: usize| {
        common::rest::poll("the TaskManagers register", || {
            let answer = common::rest::request(
                &agent,
                "GET",
                &format!("{url}/taskmanagers"),
                None,
                common::rest::local_bearer().as_deref(),
            );
            let list: serde_json::Value = serde_json::from_str(&answer.body).ok()?;
            let tms = list["taskmanagers"].as_array()?.clone();
            (tms.len() == n).then_some(tms)
        })
    };
    registered(1);

    let refused = Command::new(tpch_binary())
        .args(["Q6", "--sf", "0.01", "--jobmanager", &url])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{stderr}");
    assert!(
        stderr.contains("no TaskManager can run operator `program:tpch@")
            && stderr.contains("lack it"),
        "{stderr}"
    );

    let _tpch_tm = common::process::TaskManagerChild(
        Command::new(tpch_binary())
            .args(["taskmanager", "--jobmanager", &jm.address, "--slots", "2"])
            .args([
                "--resource-id",
                "tm-tpch",
                "--bind",
                "127.0.0.1:0",
                "--config",
            ])
            .arg(&config)
            .env_remove("FLINT_SECRET")
            .spawn()
            .unwrap(),
    );
    let tms = registered(2);
    let builds: std::collections::BTreeSet<&str> = tms
        .iter()
        .filter_map(|tm| tm["fingerprint"]["build"].as_str())
        .collect();
    assert_eq!(builds.len(), 2, "two builds: {tms:#?}");

    // Every task lands on tm-tpch: the other TaskManager would fail it (no such operator).
    run_queries(
        &["--parallelism", "2", "--jobmanager", &url],
        &dir.join("out"),
    );
    let problems = check_answers(&dir.join("out"));
    assert!(problems.is_empty(), "{problems:#?}");

    let listed = Command::new(env!("CARGO_BIN_EXE_flint"))
        .args(["taskmanagers", "--jobmanager", &url])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&listed.stdout);
    let tpch_line = table
        .lines()
        .find(|l| l.starts_with("tm-tpch"))
        .unwrap_or_default();
    assert!(tpch_line.contains("tpch"), "{table}");
    assert!(
        table.contains("BUILD") && table.lines().count() == 3,
        "{table}"
    );
}

#[test]
fn options_may_come_before_the_programs_arguments() {
    // `tpch --jobmanager URL Q6 ...` runs the default program against URL (nothing listens
    // there: it says so), not the CLI's usage error.
    let run = Command::new(tpch_binary())
        .args(["--jobmanager", "http://127.0.0.1:1", "Q6", "--sf", "0.01"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success());
    assert!(stderr.contains("cannot reach the JobManager"), "{stderr}");
}
