//! The demo's second half: WordCount on a generated text, then again with a worker crashed
//! mid-job, showing the restart and the identical result.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::Instant;

use super::DemoError;
use crate::base::ids::JobId;
use crate::cluster::minicluster::MiniCluster;
use crate::job::file::parse_job_file;
use crate::job::states::{ExecutionState, JobStatus};
use crate::messages::job_manager::JobDetails;
use crate::operators::OperatorRegistry;
use crate::operators::builtin::sequential_word_count;

/// The reference job, shipped in the repository.
const WORDCOUNT: &str = include_str!("../../examples/wordcount.toml");

/// Writes a deterministic text of about `bytes` bytes with a skewed (Zipf-like) vocabulary.
pub fn generate_text(path: &Path, bytes: usize) -> std::io::Result<()> {
    const COMMON: [&str; 12] = [
        "the", "of", "and", "stream", "flint", "to", "a", "slot", "in", "task", "Job", "Manager",
    ];
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut written = 0;
    let mut line_len = 0;
    while written < bytes {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let rank = (state % 1000) as usize;
        let word = if rank < 600 {
            COMMON[rank % COMMON.len()].to_owned()
        } else {
            format!("w{}", (state >> 20) % 5000)
        };
        let separator = if line_len > 70 { "\n" } else { " " };
        line_len = if separator == "\n" {
            0
        } else {
            line_len + word.len() + 1
        };
        write!(out, "{word}{separator}")?;
        written += word.len() + 1;
    }
    writeln!(out)?;
    out.flush()
}

fn read_counts(dir: &Path) -> std::io::Result<BTreeMap<String, u64>> {
    let mut counts = BTreeMap::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some() {
            continue;
        }
        for line in std::fs::read_to_string(&path)?.lines() {
            if let Some((word, count)) = line.split_once('\t') {
                counts.insert(word.to_owned(), count.parse().unwrap_or(0));
            }
        }
    }
    Ok(counts)
}

/// A scratch directory for the demo's files, removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// A fresh directory under the system temp dir.
    pub fn new() -> std::io::Result<Self> {
        let dir = std::env::temp_dir().join(format!("flint-demo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs WordCount twice (the second time crashing a worker mid-job) and prints what happened.
pub async fn run(cluster: &MiniCluster, out: &mut impl Write) -> Result<(), DemoError> {
    let scratch = Scratch::new()?;
    let input = scratch.0.join("input.txt");
    generate_text(&input, 8 << 20)?;
    let size = std::fs::metadata(&input)?.len();
    writeln!(
        out,
        "\n== 6. WordCount (examples/wordcount.toml, parallelism 2) on a generated {:.1} MB text",
        size as f64 / 1e6
    )?;
    let expected = sequential_word_count(&input)?;
    let first = scratch.0.join("out-1");
    let (details, took) = run_once(cluster, &input, &first, None, out).await?;
    let counts = read_counts(&first)?;
    print_timings(&details, took, size, out)?;
    let mut top: Vec<(&String, &u64)> = counts.iter().collect();
    top.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    writeln!(out, "top 10 words:")?;
    for (word, count) in top.iter().take(10) {
        writeln!(out, "  {word:<10} {count:>8}")?;
    }
    writeln!(
        out,
        "{} distinct words; equal to a plain sequential count: {}",
        counts.len(),
        if counts == expected { "yes" } else { "NO" }
    )?;

    writeln!(
        out,
        "\n== 7. WordCount again, crashing a worker that runs its tasks while they run"
    )?;
    let second = scratch.0.join("out-2");
    let (details, took) = run_once(cluster, &input, &second, Some(()), out).await?;
    print_timings(&details, took, size, out)?;
    let again = read_counts(&second)?;
    writeln!(
        out,
        "restarts: {}; result identical to the first run: {}",
        details.restarts,
        if again == counts { "yes" } else { "NO" }
    )?;
    if details.summary.status != JobStatus::Finished || again != expected || counts != expected {
        return Err(DemoError::WrongResult);
    }
    Ok(())
}

async fn run_once(
    cluster: &MiniCluster,
    input: &Path,
    output: &Path,
    crash: Option<()>,
    out: &mut impl Write,
) -> Result<(JobDetails, Duration), DemoError> {
    let params = BTreeMap::from([
        ("input".to_owned(), input.display().to_string()),
        ("output".to_owned(), output.display().to_string()),
    ]);
    let registry = OperatorRegistry::with_builtins();
    let graph = parse_job_file(WORDCOUNT, &params, |op| registry.contains(op))
        .map_err(|e| DemoError::Job(e.to_string()))?;
    let started = Instant::now();
    let job = cluster.submit_job(graph).await?;
    if crash.is_some() {
        crash_a_busy_worker(cluster, job, out).await?;
    }
    let details = cluster.wait_for_job(job, Duration::from_secs(120)).await?;
    Ok((details, started.elapsed()))
}

/// Waits until tasks run, then kills the worker running the first tokenizer.
async fn crash_a_busy_worker(
    cluster: &MiniCluster,
    job: JobId,
    out: &mut impl Write,
) -> Result<(), DemoError> {
    let give_up = Instant::now() + Duration::from_secs(60);
    loop {
        let details = cluster.job_status(job).await?;
        let running = details.vertices[1]
            .subtasks
            .iter()
            .find(|s| s.state == ExecutionState::Running)
            .and_then(|s| s.resource_id.clone());
        if let Some(victim) = running {
            cluster.kill_worker(&victim)?;
            writeln!(out, "crashed {victim} while its tasks were running")?;
            return Ok(());
        }
        if details.summary.status.is_globally_terminal() || Instant::now() > give_up {
            writeln!(out, "(the job ended before a worker could be crashed)")?;
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn print_timings(
    details: &JobDetails,
    took: Duration,
    bytes: u64,
    out: &mut impl Write,
) -> std::io::Result<()> {
    writeln!(
        out,
        "job {} in {took:.2?} ({:.1} MB/s)",
        details.summary.status,
        bytes as f64 / 1e6 / took.as_secs_f64()
    )?;
    for vertex in &details.vertices {
        let first = vertex
            .subtasks
            .iter()
            .filter_map(|s| stamp(s, ExecutionState::Running))
            .min();
        let last = vertex
            .subtasks
            .iter()
            .filter_map(|s| stamp(s, ExecutionState::Finished))
            .max();
        if let (Some(first), Some(last)) = (first, last) {
            writeln!(
                out,
                "  {:<9} running {:>5} ms (attempts: {})",
                vertex.name,
                last.saturating_sub(first),
                vertex
                    .subtasks
                    .iter()
                    .map(|s| (s.attempt_number + 1).to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            )?;
        }
    }
    Ok(())
}

fn stamp(
    subtask: &crate::messages::job_manager::SubtaskDetails,
    state: ExecutionState,
) -> Option<u64> {
    subtask
        .timestamps
        .iter()
        .find(|(s, _)| *s == state)
        .map(|(_, t)| *t)
}
