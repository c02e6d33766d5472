//! Typed programs against the built-in operators and against themselves unchained:
//! `cargo bench --bench programs` (`-- --quick` for one round each).
//!
//! On one embedded cluster (2 TaskManagers × 2 slots, parallelism 2 for WordCount as
//! `examples/wordcount.toml`, 4 for the pipeline), in the same run:
//!
//! 1. **WordCount**, 64 MB of generated text: the built-in job file (`text-source → tokenize
//!    (combining) → count-by-key → file-sink`) against the typed program doing the same
//!    (`read_text_file → flat_map → key_by → reduce → write_text`), and the same with
//!    `reduce_by_key` on the `(word, 1)` pairs (no key clone per word), and the same with
//!    `flat_map_reduce_by_key` (words emitted by `&str`, a `String` per distinct word), all
//!    submitted as jobs;
//!    MB/s.
//! 2. **Chaining**: `generate → map → filter → map → reduce` over 20 M numbers, chained (records
//!    passed by value inside one task) against `set_chaining(false)` (every operator a task;
//!    records serialized between them); millions of records per second and the ratio.
//!
//! 3. **Spilling sort**: `generate → sort_partition → count` of 3 M records (~80 bytes each) on
//!    1 TaskManager × 1 slot, with 48 MiB of managed memory (the data is ~4.5× that: the sort
//!    spills runs and merges them) against 4 GiB (everything sorted in memory); the ratio.
//!
//! Each figure is the median of 3 rounds (1 with `--quick`). A section's name as an argument
//! (`wordcount`, `chaining`, `sort`) runs only that section.

#![allow(clippy::disallowed_methods)] // a benchmark measures wall time with the real clock

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use flint::ClusterConfig;
use flint::api::{Env, ExecutedJob, Executor, Program, ProgramError, Programs};
use flint::cluster::embedded::EmbeddedCluster;
use flint::job::file::parse_job_file;
use flint::job::graph::JobGraph;
use flint::job::states::JobStatus;

flint::global_allocator!();

const NUMBERS: u64 = 20_000_000;

/// One cluster shared by every program and job of the run.
#[derive(Clone)]
struct Shared(Rc<RefCell<EmbeddedCluster>>);

impl Executor for Shared {
    fn execute(
        &mut self,
        graph: JobGraph,
    ) -> Result<ExecutedJob, Box<dyn std::error::Error + Send + Sync>> {
        self.0.borrow_mut().execute(graph)
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// A `(word, 1)` per word of `line`: maximal alphanumeric runs, lowercased (as the built-in).
fn words(line: String) -> Vec<(String, u64)> {
    line.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| (w.to_lowercase(), 1u64))
        .collect()
}

fn word_count() -> Program {
    Program::new("wordcount", |env: &Env| {
        let args = env.args();
        env.set_parallelism(2);
        env.read_text_file(&args[0])
            .flat_map(words)
            .key_by(|(word, _): &(String, u64)| word.clone())
            .reduce(|(word, a), (_, b)| (word, a + b))
            .write_text(&args[1], |(word, count)| format!("{word},{count}"));
        env.execute("typed wordcount")?;
        Ok(())
    })
}

/// WordCount on `(word, 1)` pairs with `reduce_by_key` (Spark's shape): the pair's key is never
/// cloned.
fn word_count_pairs() -> Program {
    Program::new("wordcount_pairs", |env: &Env| {
        let args = env.args();
        env.set_parallelism(2);
        env.read_text_file(&args[0])
            .flat_map(words)
            .reduce_by_key(|a, b| a + b)
            .write_text(&args[1], |(word, count)| format!("{word},{count}"));
        env.execute("typed wordcount, pairs")?;
        Ok(())
    })
}

/// The words of `line` (the built-in's definition) emitted by reference from one buffer.
fn emit_words(line: String, emit: &mut dyn FnMut(&str, u64)) {
    let mut word = String::new();
    flint::operators::builtin::for_each_word(&line, &mut word, |word| emit(word, 1));
}

/// WordCount with `flat_map_reduce_by_key`: words looked up by `&str` in the combiner, an
/// owned `String` only per distinct word per flush.
fn word_count_fused() -> Program {
    Program::new("wordcount_fused", |env: &Env| {
        let args = env.args();
        env.set_parallelism(2);
        env.read_text_file(&args[0])
            .flat_map_reduce_by_key(emit_words, |a, b| a + b)
            .write_text(&args[1], |(word, count)| format!("{word},{count}"));
        env.execute("typed wordcount, fused")?;
        Ok(())
    })
}

fn pipeline(out: Arc<Mutex<u64>>) -> Program {
    Program::new("pipeline", move |env: &Env| {
        env.set_parallelism(4);
        if env.args().first().map(String::as_str) == Some("unchained") {
            env.set_chaining(false);
        }
        let sum = env
            .generate(|subtask, parallelism| {
                (u64::from(subtask)..NUMBERS).step_by(parallelism as usize)
            })
            .map(|v| v.wrapping_mul(2_654_435_761) >> 7)
            .filter(|v| v % 3 != 0)
            .map(|v| v & 0xffff)
            .key_by(|_: &u64| 0u8)
            .reduce(|a, b| a.wrapping_add(b))
            .collect();
        let result = env.execute("pipeline")?;
        if env.on_client() {
            *out.lock().unwrap() = result.get(&sum)?.into_iter().sum();
        }
        Ok::<(), ProgramError>(())
    })
}

const SORTED: u64 = 3_000_000;

fn sort(out: Arc<Mutex<u64>>) -> Program {
    Program::new("sort", move |env: &Env| {
        env.set_parallelism(1);
        let counted = env
            .generate(|_, _| {
                (0..SORTED).map(|i| (i.wrapping_mul(0x9e37_79b9_7f4a_7c15), format!("{i:064}")))
            })
            .sort_partition(
                |(key, _): &(u64, String)| *key,
                flint::api::Order::Ascending,
            )
            .map(|(key, _)| ((), (1u64, key)))
            .key_by(|(unit, _): &((), (u64, u64))| *unit)
            .reduce(|(u, a), (_, b)| (u, (a.0 + b.0, a.1.max(b.1))))
            .collect();
        let result = env.execute("sort")?;
        if env.on_client() {
            *out.lock().unwrap() = result.get(&counted)?.first().map_or(0, |(_, (n, _))| *n);
        }
        Ok::<(), ProgramError>(())
    })
}

/// Seconds per round of the spilling sort with `managed` bytes of managed memory.
fn sort_rounds(managed: u64, rounds: usize) -> Vec<f64> {
    let count = Arc::new(Mutex::new(0));
    let program = sort(count.clone());
    let mut config = ClusterConfig::default();
    config.resourcemanager.pool_size = 1;
    config.taskmanager.slots = 1;
    config.taskmanager.managed_memory = managed;
    let cluster = Shared(Rc::new(RefCell::new(
        EmbeddedCluster::start(config, Programs::new().with(program.clone()).registry())
            .expect("cluster starts"),
    )));
    (0..rounds)
        .map(|_| {
            let env = Env::new(program.identity(), Vec::new(), Box::new(cluster.clone()));
            let started = Instant::now();
            program.run(&env).expect("the sort runs");
            assert_eq!(*count.lock().unwrap(), SORTED);
            started.elapsed().as_secs_f64()
        })
        .collect()
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let rounds = if quick { 1 } else { 3 };
    let only = std::env::args()
        .skip(1)
        .find(|a| ["wordcount", "chaining", "sort"].contains(&a.as_str()));
    let runs = |section: &str| only.as_deref().is_none_or(|only| only == section);
    let dir = std::env::temp_dir().join(format!("flint-bench-programs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("input.txt");
    flint::demo::generate_text(&input, 64 << 20).expect("input written");
    let megabytes = std::fs::metadata(&input).unwrap().len() as f64 / 1e6;

    let sum = Arc::new(Mutex::new(0));
    let programs = Programs::new()
        .with(word_count())
        .with(word_count_pairs())
        .with(word_count_fused())
        .with(pipeline(sum.clone()));
    let mut config = ClusterConfig::default();
    config.resourcemanager.pool_size = 2;
    config.taskmanager.slots = 2;
    let cluster = Shared(Rc::new(RefCell::new(
        EmbeddedCluster::start(config, programs.registry()).expect("cluster starts"),
    )));
    let run = |name: &str, args: &[String]| {
        let program = programs.get(name).unwrap();
        let env = Env::new(program.identity(), args.to_vec(), Box::new(cluster.clone()));
        let started = Instant::now();
        program.run(&env).expect("the program runs");
        started.elapsed().as_secs_f64()
    };

    let registry = programs.registry();
    let (mut builtin, mut typed, mut pairs, mut fused) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in (0..rounds).filter(|_| runs("wordcount")) {
        let output = dir.join(format!("builtin-{round}"));
        let params = BTreeMap::from([
            ("input".to_owned(), input.display().to_string()),
            ("output".to_owned(), output.display().to_string()),
        ]);
        let graph = parse_job_file(include_str!("../examples/wordcount.toml"), &params, |op| {
            registry.contains(op)
        })
        .expect("the example parses");
        let started = Instant::now();
        let executed = cluster.clone().execute(graph).expect("runs");
        assert_eq!(executed.status, JobStatus::Finished);
        builtin.push(megabytes / started.elapsed().as_secs_f64());
        let output = dir.join(format!("typed-{round}"));
        let args = [input.display().to_string(), output.display().to_string()];
        typed.push(megabytes / run("wordcount", &args));
        let output = dir.join(format!("pairs-{round}"));
        let args = [input.display().to_string(), output.display().to_string()];
        pairs.push(megabytes / run("wordcount_pairs", &args));
        let output = dir.join(format!("fused-{round}"));
        let args = [input.display().to_string(), output.display().to_string()];
        fused.push(megabytes / run("wordcount_fused", &args));
    }
    if runs("wordcount") {
        let (builtin, typed, pairs, fused) =
            (median(builtin), median(typed), median(pairs), median(fused));
        println!("WordCount, {megabytes:.0} MB, parallelism 2, median of {rounds}:");
        println!("  built-in job file   {builtin:7.1} MB/s");
        println!(
            "  typed program       {typed:7.1} MB/s   ({:.2}× the built-in)",
            typed / builtin
        );
        println!(
            "  typed, reduce_by_key {pairs:7.1} MB/s   ({:.2}× the built-in)",
            pairs / builtin
        );
        println!(
            "  typed, flat_map_reduce_by_key {fused:7.1} MB/s   ({:.2}× the built-in)",
            fused / builtin
        );
    }

    if runs("chaining") {
        let (mut chained, mut unchained) = (Vec::new(), Vec::new());
        let mut sums = Vec::new();
        for _ in 0..rounds {
            chained.push(NUMBERS as f64 / 1e6 / run("pipeline", &[]));
            sums.push(*sum.lock().unwrap());
            unchained.push(NUMBERS as f64 / 1e6 / run("pipeline", &["unchained".to_owned()]));
            sums.push(*sum.lock().unwrap());
        }
        assert!(sums.windows(2).all(|w| w[0] == w[1]), "{sums:?}");
        let (chained, unchained) = (median(chained), median(unchained));
        println!(
            "map → filter → map → reduce, {} M numbers, parallelism 4:",
            NUMBERS / 1_000_000
        );
        println!("  chained             {chained:7.1} M records/s");
        println!(
            "  unchained           {unchained:7.1} M records/s   (chained {:.2}× faster)",
            chained / unchained
        );
    }

    if runs("sort") {
        let spilling = median(sort_rounds(48 << 20, rounds));
        let in_memory = median(sort_rounds(4 << 30, rounds));
        println!(
            "sort_partition of {} M records, 1 slot:",
            SORTED / 1_000_000
        );
        println!("  48 MiB managed memory (spills) {spilling:6.2} s");
        println!(
            "  4 GiB (in memory)              {in_memory:6.2} s   (spilling {:.2}× the in-memory time)",
            spilling / in_memory
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
