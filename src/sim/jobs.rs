//! The jobs a scenario submits, and how a finished one is checked.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::scenario::JobKind;
use crate::base::blob_key::BlobKey;
use crate::base::rng::NodeRng;
use crate::job::artifact::JobArtifact;
use crate::job::graph::{DistributionPattern, ExchangeMode, JobGraph, RestartStrategyConfig};
use crate::operators::OperatorRegistry;
use crate::operators::builtin::{
    COUNT_BY_KEY, FAIL_ONCE, FILE_SINK, IGNORE_CANCEL, NOOP, SLEEP, TEXT_SOURCE, TOKENIZE,
    sequential_word_count,
};

/// Words the generated texts are made of (mixed case and punctuation, as real text is).
const WORDS: [&str; 12] = [
    "Flink",
    "actor",
    "slot",
    "heartbeat",
    "the",
    "a",
    "TaskManager",
    "job",
    "region",
    "pool",
    "x1",
    "Über",
];

/// A job as submitted, with what is needed to check its result.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// What it runs.
    pub kind: JobKind,
    /// The graph.
    pub graph: JobGraph,
    /// WordCount's input and output directory.
    pub files: Option<(PathBuf, PathBuf)>,
    /// Files to store at the JobManager before the job is submitted (its artifacts).
    pub artifacts: Vec<PathBuf>,
}

fn restarts() -> RestartStrategyConfig {
    RestartStrategyConfig::FixedDelay {
        attempts: 4,
        delay: Duration::from_millis(200),
    }
}

/// Builds a job of `kind`; WordCount's text is generated from `rng` into `dir`.
pub fn build(
    kind: JobKind,
    parallelism: u32,
    rng: &mut NodeRng,
    dir: &Path,
) -> std::io::Result<JobSpec> {
    let registry = OperatorRegistry::with_builtins();
    let knows = |op: &str| registry.contains(op);
    let p = parallelism.max(1);
    let mut builder = JobGraph::builder(format!("{kind:?}").to_lowercase());
    builder.restart_strategy(restarts());
    let mut files = None;
    let mut artifacts = Vec::new();
    match kind {
        JobKind::WordCount
        | JobKind::ShippedWordCount
        | JobKind::BatchWordCount
        | JobKind::PacedBatchWordCount => {
            fs::create_dir_all(dir)?;
            let input = dir.join("input.txt");
            let output = dir.join("out");
            let lines = 5 + rng.next_u64() % 40;
            let mut text = String::new();
            for _ in 0..lines {
                let words = 1 + rng.next_u64() % 12;
                for i in 0..words {
                    if i > 0 {
                        text.push(if rng.next_u64().is_multiple_of(5) {
                            ','
                        } else {
                            ' '
                        });
                    }
                    text.push_str(WORDS[(rng.next_u64() % WORDS.len() as u64) as usize]);
                }
                text.push('\n');
            }
            fs::write(&input, &text)?;
            let source = if kind == JobKind::ShippedWordCount {
                builder.artifact(JobArtifact {
                    name: "input.txt".into(),
                    digest: BlobKey::of(text.as_bytes()),
                    size: text.len() as u64,
                    executable: false,
                });
                artifacts.push(input.clone());
                builder
                    .vertex("source", TEXT_SOURCE, p)
                    .config("artifact", "input.txt")
                    .index()
            } else {
                builder
                    .vertex("source", TEXT_SOURCE, p)
                    .config("path", input.display().to_string())
                    .index()
            };
            let tokenize = builder.vertex("tokenize", TOKENIZE, p).index();
            let count = builder.vertex("count", COUNT_BY_KEY, p).index();
            let sink = builder
                .vertex("sink", FILE_SINK, p)
                .config("path", output.display().to_string())
                .index();
            let pipelined = ExchangeMode::Pipelined;
            let shuffle = match kind {
                JobKind::BatchWordCount | JobKind::PacedBatchWordCount => ExchangeMode::Blocking,
                _ => pipelined,
            };
            builder.edge(source, tokenize, DistributionPattern::Forward, pipelined);
            builder.edge(tokenize, count, DistributionPattern::AllToAll, shuffle);
            if kind == JobKind::PacedBatchWordCount {
                let pace = builder
                    .vertex("pace", SLEEP, p)
                    .config("ms", (1_000 + rng.next_u64() % 3_000).to_string())
                    .index();
                builder.edge(count, pace, DistributionPattern::Forward, pipelined);
                builder.edge(pace, sink, DistributionPattern::Forward, pipelined);
            } else {
                builder.edge(count, sink, DistributionPattern::Forward, pipelined);
            }
            files = Some((input, output));
        }
        JobKind::TypedJoin => {
            fs::create_dir_all(dir)?;
            let expected = dir.join("expected.txt");
            let output = dir.join("out");
            let left = 20 + rng.next_u64() % 400;
            let inputs = super::program::JoinInputs {
                left,
                right: 10 + rng.next_u64() % 200,
                keys: 5 + rng.next_u64() % 60,
                // From a value drawn already: the seeds' other draws stay as they were.
                broadcast: left % 2 == 1,
            };
            let text: String = inputs.expected().iter().map(|l| format!("{l}\n")).collect();
            fs::write(&expected, text)?;
            let graph = super::program::join_graph(inputs, p, &output)
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            return Ok(JobSpec {
                kind,
                graph,
                files: Some((expected, output)),
                artifacts: Vec::new(),
            });
        }
        JobKind::Noop => {
            let source = builder
                .vertex("generate", NOOP, p)
                .config("count", (rng.next_u64() % 5_000).to_string())
                .index();
            let sink = builder.vertex("pass", NOOP, p).index();
            builder.edge(
                source,
                sink,
                DistributionPattern::AllToAll,
                ExchangeMode::Pipelined,
            );
        }
        JobKind::Sleep => {
            let source = builder
                .vertex("generate", NOOP, p)
                .config("count", "100")
                .co_location_group("pair")
                .index();
            let sleep = builder
                .vertex("sleep", SLEEP, p)
                .config("ms", (50 + rng.next_u64() % 3_000).to_string())
                .co_location_group("pair")
                .index();
            let sink = builder
                .vertex("sink", NOOP, 1)
                .slot_sharing_group("sinks")
                .index();
            builder.edge(
                source,
                sleep,
                DistributionPattern::Forward,
                ExchangeMode::Pipelined,
            );
            builder.edge(
                sleep,
                sink,
                DistributionPattern::AllToAll,
                ExchangeMode::Blocking,
            );
        }
        JobKind::IgnoresCancel => {
            // Stuck longer than the cancellation timeout (10 s in the simulation): a cancel or
            // a failover of it ends only when its TaskManager fails itself.
            // At most 3 wide: run in waves on a small pool, 15-30 s a wave, a wide one would
            // outlast the quiet phase without anything being wrong.
            let p = p.min(3);
            let stuck = builder
                .vertex("stuck", IGNORE_CANCEL, p)
                .config("ms", (15_000 + rng.next_u64() % 15_000).to_string())
                .index();
            let sink = builder.vertex("sink", NOOP, p).index();
            builder.edge(
                stuck,
                sink,
                DistributionPattern::Forward,
                ExchangeMode::Pipelined,
            );
        }
        JobKind::Silent => {
            let silent = builder
                .vertex("silent", SLEEP, p)
                .config("ms", (60_000 + rng.next_u64() % 60_000).to_string())
                .index();
            let sink = builder.vertex("sink", NOOP, p).index();
            builder.edge(
                silent,
                sink,
                DistributionPattern::AllToAll,
                ExchangeMode::Pipelined,
            );
        }
        JobKind::SlowConsumer => {
            let source = builder
                .vertex("generate", NOOP, p)
                .config("count", (1_000 + rng.next_u64() % 4_000).to_string())
                .index();
            let slow = builder
                .vertex("slow", SLEEP, p)
                .config("ms", "0")
                .config("per-record-ms", (1 + rng.next_u64() % 3).to_string())
                .index();
            builder.edge(
                source,
                slow,
                DistributionPattern::AllToAll,
                ExchangeMode::Pipelined,
            );
        }
        JobKind::EarlyConsumer => {
            // 1 KB records: a few hundred fill a subpartition's 10 buffers of 32 KiB.
            let source = builder
                .vertex("generate", NOOP, p)
                .config("count", (2_000 + rng.next_u64() % 6_000).to_string())
                .config("payload-bytes", "1000")
                .index();
            let early = builder
                .vertex("take", NOOP, p)
                .config("take", (rng.next_u64() % 3).to_string())
                .index();
            builder.edge(
                source,
                early,
                DistributionPattern::AllToAll,
                ExchangeMode::Pipelined,
            );
        }
        JobKind::FailOnce | JobKind::Misconfigured => {
            let source = builder
                .vertex("generate", NOOP, p)
                .config("count", "1000")
                .index();
            // A pass-through that fails its first attempt, or every one (`count` is no number).
            let next = if kind == JobKind::FailOnce {
                builder.vertex("fail-once", FAIL_ONCE, p).index()
            } else {
                builder
                    .vertex("misconfigured", NOOP, p)
                    .config("count", "a few")
                    .index()
            };
            builder.edge(
                source,
                next,
                DistributionPattern::Forward,
                ExchangeMode::Pipelined,
            );
        }
    }
    let graph = builder
        .build(knows)
        .map_err(|error| std::io::Error::other(error.to_string()))?;
    Ok(JobSpec {
        kind,
        graph,
        files,
        artifacts,
    })
}

/// Checks a finished job's output: WordCount's against the sequential count of its input, a
/// typed join's against its expected lines (written beside it when it was built).
pub fn check_output(kind: JobKind, input: &Path, output: &Path) -> Result<(), String> {
    match kind {
        JobKind::TypedJoin => check_lines(input, output),
        _ => check_word_count(input, output),
    }
}

/// The sorted lines of every `part-*` file in `output`.
fn part_lines(output: &Path) -> Result<Vec<String>, String> {
    let entries = fs::read_dir(output).map_err(|e| format!("cannot list the output: {e}"))?;
    let mut lines = Vec::new();
    for path in entries.filter_map(|e| e.ok().map(|e| e.path())) {
        let is_part = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("part-"));
        if is_part {
            let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            lines.extend(text.lines().map(str::to_owned));
        }
    }
    lines.sort();
    Ok(lines)
}

/// Compares the lines written to `output` with those of `expected` (a multiset).
fn check_lines(expected: &Path, output: &Path) -> Result<(), String> {
    same_lines("wrote", part_lines(output)?, expected)
}

/// Checks what a finished typed join's `collect()` sink sent back against its expected lines.
pub fn check_collected(
    expected: &Path,
    results: &crate::messages::job_manager::JobResults,
) -> Result<(), String> {
    same_lines(
        "sent back",
        super::program::collected_lines(results)?,
        expected,
    )
}

fn same_lines(what: &str, got: Vec<String>, expected: &Path) -> Result<(), String> {
    let want: Vec<String> = fs::read_to_string(expected)
        .map_err(|e| format!("cannot read the expected lines: {e}"))?
        .lines()
        .map(str::to_owned)
        .collect();
    if got == want {
        Ok(())
    } else {
        Err(format!(
            "the join {what} {} lines, {} expected (first difference: {:?})",
            got.len(),
            want.len(),
            got.iter().zip(&want).find(|(g, w)| g != w)
        ))
    }
}

/// Compares a finished WordCount's output with the sequential count of its input; `Err` says
/// how they differ.
pub fn check_word_count(input: &Path, output: &Path) -> Result<(), String> {
    let expected =
        sequential_word_count(input).map_err(|e| format!("cannot read the input: {e}"))?;
    let mut actual: BTreeMap<String, u64> = BTreeMap::new();
    let entries = fs::read_dir(output).map_err(|e| format!("cannot list the output: {e}"))?;
    let mut names: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("part-"))
        })
        .collect();
    names.sort();
    for path in names {
        let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        for line in text.lines() {
            let (word, count) = line
                .split_once('\t')
                .ok_or_else(|| format!("{}: bad line {line:?}", path.display()))?;
            let count: u64 = count
                .parse()
                .map_err(|_| format!("{}: bad count in {line:?}", path.display()))?;
            if actual.insert(word.to_owned(), count).is_some() {
                return Err(format!("`{word}` is counted in two places"));
            }
        }
    }
    if actual == expected {
        Ok(())
    } else {
        Err(format!(
            "the counts differ from the sequential count: {} words expected, {} written",
            expected.len(),
            actual.len()
        ))
    }
}
