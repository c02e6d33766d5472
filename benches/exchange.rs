//! The exchange between two processes against raw TCP: `cargo bench --bench exchange`
//! (`-- --quick` for one round of a smaller volume).
//!
//! 1. Raw TCP over loopback: one thread writes the volume in 64 KiB writes, another reads it.
//! 2. Flint: a `flint jobmanager` with 2 TaskManager processes × 1 slot; one `noop` producer
//!    generating records of 1,000 payload bytes, one `noop` consumer in another slot sharing
//!    group (so on the other TaskManager process), a pipelined forward edge: submit → FINISHED
//!    over REST, payload MB/s. `-- pair` runs sections 1 and 2 alone.
//!
//! Both in the same run, as a ratio (issue 11's target: the exchange at ≥ 60 % of raw TCP).
//!
//! 3. All-to-all across processes, on the default network settings: `noop` source (2,000
//!    records each, `FLINT_BENCH_A2A_RECORDS`) → `noop` sink, all-to-all, at each P of
//!    `FLINT_BENCH_A2A_P` (default `100,200,400`) on 4 TaskManager processes × 100 slots
//!    (`FLINT_BENCH_A2A_SLOTS` for more: P = 10,000 needs 2,500):
//!    submit → FINISHED, the bytes the JobManager's transport sent for the job (its
//!    `SubmitTask`s above all; issue 11, item 5: O(P) per TaskManager, not O(P²)), and the
//!    TaskManager processes' peak resident memory (`VmHWM`, the largest of the four, since the
//!    cluster started: sizes run in the order given).
//!    `FLINT_BENCH_BIN` runs another build of `flint` for a before/after comparison;
//!    `-- all-to-all` runs this section alone. Configuration keys set as `FLINT_<KEY>`
//!    variables reach the TaskManagers through the JobManager's configuration (e.g.
//!    `FLINT_TASKMANAGER_NETWORK_MEMORY=2gb`); other variables do not reach them (the
//!    JobManager starts them with its configuration file alone), so an experiment needs a
//!    key or a build of its own.
//! 4. WordCount across processes: 67 MB of generated text, examples/wordcount.toml at P = 2 on
//!    2 TaskManager processes × 2 slots, submit → FINISHED over REST, against a single-threaded
//!    sequential count of the same file in the same run (MB/s and the ratio; the output is
//!    checked exact). `-- wordcount` runs this section alone.
//! 5. Blocking against pipelined (issue 32: within 1.5×): a `noop` source of P = 2 (2,000,000
//!    records of 1,000 payload bytes each, `FLINT_BENCH_BLOCKING_RECORDS`) → a `noop` sink of
//!    P = 2, all-to-all, 4 GB in all, on 2 TaskManager processes × 2 slots; the blocking and
//!    the pipelined job alternate on one cluster. Per kind: submit → FINISHED (median), the
//!    source and sink vertices' durations (a blocking sink starts once both sources ended:
//!    write phase, then read phase), each TaskManager's peak resident memory during the job
//!    (`VmHWM`, reset before each through `/proc/PID/clear_refs`) and the most files it held
//!    open (`/proc/PID/fd`, sampled every 10 ms). Then the same on one TaskManager process × 4
//!    slots: no data crosses processes, which tells the cost of the disk from the network's.
//!    `-- blocking` runs this section alone.

// A benchmark measures wall time with the real clock; it is no node code.
#![allow(clippy::disallowed_methods)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use flint::job::graph::{DistributionPattern, ExchangeMode, JobGraph, RestartStrategyConfig};
use rest_cluster::Cluster;

#[path = "common/rest_cluster.rs"]
#[allow(dead_code)]
mod rest_cluster;

/// The process helpers of the integration tests (SIGTERM-and-wait).
#[path = "../tests/common/process.rs"]
#[allow(dead_code)]
mod process;

/// The payload bytes of one record.
const PAYLOAD: u64 = 1_000;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Seconds to move `bytes` through a loopback TCP connection.
fn raw_tcp(bytes: u64) -> f64 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let address = listener.local_addr().expect("its address");
    let began = Instant::now();
    let writer = std::thread::spawn(move || {
        let mut stream = TcpStream::connect(address).expect("connects");
        let chunk = vec![b'x'; 64 << 10];
        let mut left = bytes;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            stream.write_all(&chunk[..n]).expect("writes");
            left -= n as u64;
        }
    });
    let (mut stream, _) = listener.accept().expect("accepts");
    let mut buffer = vec![0u8; 64 << 10];
    let mut read = 0u64;
    loop {
        let n = stream.read(&mut buffer).expect("reads");
        if n == 0 {
            break;
        }
        read += n as u64;
    }
    writer.join().expect("the writer");
    assert_eq!(read, bytes);
    began.elapsed().as_secs_f64()
}

/// Producer → consumer on two TaskManager processes, `records` records of [`PAYLOAD`] bytes.
fn pair_job(records: u64) -> JobGraph {
    let mut b = JobGraph::builder("exchange-pair");
    let source = b
        .vertex("producer", "noop", 1)
        .config("count", records.to_string())
        .config("payload-bytes", PAYLOAD.to_string())
        .slot_sharing_group("producer")
        .index();
    let sink = b
        .vertex("consumer", "noop", 1)
        .slot_sharing_group("consumer")
        .index();
    b.edge(
        source,
        sink,
        DistributionPattern::Forward,
        ExchangeMode::Pipelined,
    );
    b.restart_strategy(RestartStrategyConfig::None);
    b.build(|_| true).expect("a valid graph")
}

/// `source` → `sink`, all-to-all and pipelined, P each, 10 records per producer.
fn all_to_all_job(p: u32, records: u64) -> JobGraph {
    let mut b = JobGraph::builder("exchange-all-to-all");
    let source = b
        .vertex("source", "noop", p)
        .config("count", records.to_string())
        .index();
    let sink = b.vertex("sink", "noop", p).index();
    b.edge(
        source,
        sink,
        DistributionPattern::AllToAll,
        ExchangeMode::Pipelined,
    );
    b.restart_strategy(RestartStrategyConfig::None);
    b.build(|_| true).expect("a valid graph")
}

/// The JobManager's `flint_transport_bytes_total{direction="out"}`.
fn bytes_sent(cluster: &Cluster) -> u64 {
    cluster
        .text("/metrics")
        .lines()
        .find(|line| {
            line.starts_with("flint_transport_bytes_total") && line.contains("direction=\"out\"")
        })
        .and_then(|line| line.split_whitespace().last()?.parse().ok())
        .expect("the JobManager's transport byte counter")
}

/// The largest peak resident memory (`VmHWM`) among the children of process `parent` (a
/// JobManager's TaskManager processes).
fn task_manager_peak_rss_kib(parent: u32) -> u64 {
    children(parent)
        .into_iter()
        .map(peak_rss_kib)
        .max()
        .unwrap_or(0)
}

/// Section 3 of the module docs.
fn all_to_all_deployments(rounds: usize) {
    let sizes: Vec<u32> = std::env::var("FLINT_BENCH_A2A_P")
        .unwrap_or_else(|_| "100,200,400".to_owned())
        .split(',')
        .map(|p| p.trim().parse().expect("FLINT_BENCH_A2A_P: numbers"))
        .collect();
    let slots: u32 = std::env::var("FLINT_BENCH_A2A_SLOTS")
        .map(|s| s.trim().parse().expect("FLINT_BENCH_A2A_SLOTS: a number"))
        .unwrap_or(100);
    let records: u64 = std::env::var("FLINT_BENCH_A2A_RECORDS")
        .map(|s| s.trim().parse().expect("FLINT_BENCH_A2A_RECORDS: a number"))
        .unwrap_or(2_000);
    // The defaults: each task reserves at most 2 buffers per gate and per output (issue 32).
    let cluster = Cluster::start("exchange-a2a", 4, slots, "");
    for p in sizes {
        let (mut seconds, mut bytes) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let before = bytes_sent(&cluster);
            let began = Instant::now();
            let id = cluster.submit(&all_to_all_job(p, records));
            cluster.wait_all(std::slice::from_ref(&id), Duration::from_millis(2));
            seconds.push(began.elapsed().as_secs_f64());
            bytes.push((bytes_sent(&cluster) - before) as f64);
        }
        println!(
            "all-to-all P = {p}, {records} records per source, across 4 TaskManager processes × \
             {slots} slots (median of {rounds}): submit → FINISHED {:.0} ms, JobManager sent \
             {:.0} KB, TaskManager peak RSS {:.0} MiB",
            median(seconds) * 1e3,
            median(bytes) / 1e3,
            task_manager_peak_rss_kib(cluster.pid()) as f64 / 1024.0
        );
    }
}

/// Section 4 of the module docs.
fn wordcount_across_processes(rounds: usize) {
    let cluster = Cluster::start("exchange-wordcount", 2, 2, "");
    let dir = std::env::temp_dir().join(format!("flint-bench-wc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let input = dir.join("input.txt");
    flint::demo::generate_text(&input, 64 << 20).expect("the input");
    let megabytes = std::fs::metadata(&input).expect("the input").len() as f64 / 1e6;
    let registry = flint::operators::OperatorRegistry::with_builtins();
    let (mut sequential, mut distributed) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let began = Instant::now();
        let expected = flint::operators::builtin::sequential_word_count(&input).expect("the count");
        sequential.push(megabytes / began.elapsed().as_secs_f64());
        let output = dir.join(format!("out-{round}"));
        let params = std::collections::BTreeMap::from([
            ("input".to_owned(), input.display().to_string()),
            ("output".to_owned(), output.display().to_string()),
        ]);
        let graph = flint::job::file::parse_job_file(
            include_str!("../examples/wordcount.toml"),
            &params,
            |op| registry.contains(op),
        )
        .expect("the example job parses");
        let began = Instant::now();
        let id = cluster.submit(&graph);
        cluster.wait_all(std::slice::from_ref(&id), Duration::from_millis(5));
        distributed.push(megabytes / began.elapsed().as_secs_f64());
        let mut counted = std::collections::BTreeMap::new();
        for entry in std::fs::read_dir(&output).expect("the output") {
            let text = std::fs::read_to_string(entry.expect("a part").path()).expect("a part");
            for line in text.lines() {
                let (word, count) = line.split_once('\t').expect("word<TAB>count");
                counted.insert(word.to_owned(), count.parse::<u64>().expect("a count"));
            }
        }
        assert_eq!(counted, expected, "the count is exact");
        eprintln!(
            "round {round}: sequential {:.1} MB/s, Flint {:.1} MB/s",
            sequential[round], distributed[round]
        );
    }
    let (sequential, distributed) = (median(sequential), median(distributed));
    println!(
        "WordCount {megabytes:.0} MB, P = 2 on 2 TaskManager processes × 2 slots (median of \
         {rounds}): Flint {distributed:.1} MB/s, sequential {sequential:.1} MB/s, ratio {:.2}",
        distributed / sequential
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    if std::env::args().any(|a| a == "wordcount") {
        wordcount_across_processes(if quick { 1 } else { 3 });
        return;
    }
    if std::env::args().any(|a| a == "blocking") {
        blocking_against_pipelined(if quick { 1 } else { 3 });
        return;
    }
    if std::env::args().any(|a| a == "all-to-all") {
        // Section 3 alone: `cargo bench --bench exchange -- all-to-all`.
        all_to_all_deployments(if quick { 1 } else { 5 });
        return;
    }
    let (rounds, records) = if quick { (1, 200_000) } else { (5, 500_000) };
    let bytes = records * PAYLOAD;
    let cluster = Cluster::start(
        "exchange",
        2,
        1,
        &std::env::var("FLINT_BENCH_CONFIG").unwrap_or_default(),
    );
    let mut raw = Vec::new();
    let mut flint = Vec::new();
    for round in 0..rounds {
        let seconds = raw_tcp(bytes);
        raw.push(bytes as f64 / seconds / 1e6);
        let began = Instant::now();
        let id = cluster.submit(&pair_job(records));
        cluster.wait_all(std::slice::from_ref(&id), Duration::from_millis(5));
        let seconds = began.elapsed().as_secs_f64();
        let details = cluster.get(&format!("/jobs/{id}"));
        let hosts: std::collections::BTreeSet<String> = details["vertices"]
            .as_array()
            .expect("vertices")
            .iter()
            .flat_map(|v| v["subtasks"].as_array().cloned().unwrap_or_default())
            .filter_map(|s| s["taskmanager-id"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(hosts.len(), 2, "producer and consumer on two processes");
        flint.push(bytes as f64 / seconds / 1e6);
        eprintln!(
            "round {round}: raw TCP {:.0} MB/s, Flint exchange {:.0} MB/s",
            raw[round], flint[round]
        );
    }
    let (raw, flint) = (median(raw), median(flint));
    println!(
        "{} MB of {PAYLOAD}-byte records, producer → consumer across two TaskManager processes \
         (median of {rounds}): Flint {flint:.1} MB/s, raw loopback TCP {raw:.1} MB/s, ratio {:.2}",
        bytes / 1_000_000,
        flint / raw
    );
    drop(cluster);
    if std::env::args().any(|a| a == "pair") {
        return; // `-- pair`: section 1 alone
    }
    all_to_all_deployments(if quick { 1 } else { 5 });
    wordcount_across_processes(if quick { 1 } else { 3 });
    blocking_against_pipelined(if quick { 1 } else { 3 });
}

/// `source` (P = 2, `records` of [`PAYLOAD`] bytes each) → `sink` (P = 2), all-to-all, `mode`.
fn two_by_two_job(mode: ExchangeMode, records: u64) -> JobGraph {
    let mut b = JobGraph::builder("exchange-blocking");
    let source = b
        .vertex("source", "noop", 2)
        .config("count", records.to_string())
        .config("payload-bytes", PAYLOAD.to_string())
        .index();
    let sink = b.vertex("sink", "noop", 2).index();
    b.edge(source, sink, DistributionPattern::AllToAll, mode);
    b.restart_strategy(RestartStrategyConfig::None);
    b.build(|_| true).expect("a valid graph")
}

/// The process ids of `parent`'s children (a JobManager's TaskManager processes).
fn children(parent: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|status| {
                status
                    .lines()
                    .any(|line| line.split_whitespace().eq(["PPid:", &parent.to_string()]))
            })
        })
        .collect()
}

/// Process `pid`'s peak resident memory since it started or since its last reset, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

/// What one job of section 5 measured.
struct TwoByTwo {
    seconds: f64,
    /// The source's and the sink's vertex durations.
    phases: (f64, f64),
    /// Per TaskManager process: peak RSS (KiB) and most open files.
    task_managers: Vec<(u64, usize)>,
}

/// Runs one job of section 5 on `cluster`, sampling its TaskManagers' open files meanwhile.
fn run_two_by_two(cluster: &Cluster, mode: ExchangeMode, records: u64) -> TwoByTwo {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let pids = children(cluster.pid());
    for pid in &pids {
        // "5" resets the peak resident set size (proc(5)).
        std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("VmHWM reset");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let most_open = Arc::new(Mutex::new(vec![0usize; pids.len()]));
    let sampler = {
        let (stop, most_open, pids) = (stop.clone(), most_open.clone(), pids.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let mut most = most_open.lock().expect("the samples");
                for (i, pid) in pids.iter().enumerate() {
                    let open =
                        std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count);
                    most[i] = most[i].max(open);
                }
                drop(most);
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let began = Instant::now();
    let id = cluster.submit(&two_by_two_job(mode, records));
    cluster.wait_all(std::slice::from_ref(&id), Duration::from_millis(5));
    let seconds = began.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    sampler.join().expect("the sampler");
    let details = cluster.get(&format!("/jobs/{id}"));
    let duration = |name: &str| {
        details["vertices"]
            .as_array()
            .expect("vertices")
            .iter()
            .find(|v| v["name"] == name)
            .and_then(|v| v["duration"].as_f64())
            .expect("a vertex duration")
            / 1e3
    };
    let most_open = most_open.lock().expect("the samples").clone();
    TwoByTwo {
        seconds,
        phases: (duration("source"), duration("sink")),
        task_managers: pids
            .iter()
            .map(|&pid| peak_rss_kib(pid))
            .zip(most_open)
            .collect(),
    }
}

/// Section 5 of the module docs.
fn blocking_against_pipelined(rounds: usize) {
    for (task_managers, slots) in [(2, 2), (1, 4)] {
        blocking_against_pipelined_on(rounds, task_managers, slots);
    }
}

/// Section 5 on `task_managers` processes × `slots` slots.
fn blocking_against_pipelined_on(rounds: usize, task_managers: u32, slots: u32) {
    let records: u64 = std::env::var("FLINT_BENCH_BLOCKING_RECORDS")
        .map(|s| {
            s.trim()
                .parse()
                .expect("FLINT_BENCH_BLOCKING_RECORDS: a number")
        })
        .unwrap_or(2_000_000);
    let cluster = Cluster::start("exchange-blocking", task_managers, slots, "");
    let kinds = [
        ("pipelined", ExchangeMode::Pipelined),
        ("blocking", ExchangeMode::Blocking),
    ];
    let mut runs: Vec<Vec<TwoByTwo>> = vec![Vec::new(), Vec::new()];
    for round in 0..rounds {
        for (k, (name, mode)) in kinds.iter().enumerate() {
            let run = run_two_by_two(&cluster, *mode, records);
            eprintln!(
                "round {round}: {name} {:.2} s (source {:.2} s, sink {:.2} s)",
                run.seconds, run.phases.0, run.phases.1
            );
            runs[k].push(run);
        }
    }
    let gigabytes = 2.0 * records as f64 * PAYLOAD as f64 / 1e9;
    let mut medians = Vec::new();
    for ((name, _), runs) in kinds.iter().zip(&runs) {
        let seconds = median(runs.iter().map(|r| r.seconds).collect());
        let source = median(runs.iter().map(|r| r.phases.0).collect());
        let sink = median(runs.iter().map(|r| r.phases.1).collect());
        let per_tm: Vec<String> = (0..runs[0].task_managers.len())
            .map(|i| {
                let rss = runs.iter().map(|r| r.task_managers[i].0).max().unwrap_or(0);
                let open = runs.iter().map(|r| r.task_managers[i].1).max().unwrap_or(0);
                format!("{:.0} MiB, {open} open files", rss as f64 / 1024.0)
            })
            .collect();
        println!(
            "{gigabytes:.1} GB {name} all-to-all, P = 2 on {task_managers} TaskManager \
             process(es) × {slots} slots (median of {rounds}): {seconds:.2} s (source {source:.2} s, sink {sink:.2} s); \
             per TaskManager peak RSS and most open files: {}",
            per_tm.join("; ")
        );
        medians.push(seconds);
    }
    println!(
        "blocking ÷ pipelined on {task_managers} TaskManager process(es): {:.2} (issue 32's \
         target: at most 1.5 across 2)",
        medians[1] / medians[0]
    );
}
