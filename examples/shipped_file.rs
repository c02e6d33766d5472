//! A job that ships a file, on an embedded cluster: the file is stored as an artifact, every
//! TaskManager fetches it once, and a `text-source` reads it by name. WordCount of the file;
//! prints its ten most frequent words.
//!
//! ```text
//! cargo run --release --example shipped_file -- README.md /tmp/shipped-counts
//! ```
//!
//! On a process cluster the same job is a job file plus `flint run --artifact FILE` (README,
//! "Shipping code with a job").

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use flint::job::graph::{DistributionPattern, ExchangeMode, JobGraph};
use flint::job::states::JobStatus;
use flint::{ClusterConfig, MiniCluster};

#[actix::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [file, output] = args.as_slice() else {
        eprintln!("usage: shipped_file FILE OUTPUT_DIR");
        return ExitCode::from(2);
    };
    match run(PathBuf::from(file), PathBuf::from(output)).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("shipped_file: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(file: PathBuf, output: PathBuf) -> Result<(), Box<dyn std::error::Error>> {
    let mut config = ClusterConfig::default();
    config.resourcemanager.pool_size = 2;
    let cluster = MiniCluster::start(config)?;
    cluster.wait_for_pool(2, Duration::from_secs(30)).await?;

    // Stored once, content-addressed; the job names it, its tasks find it by its file name.
    let artifact = cluster.upload_artifact(&file, false)?;
    let name = artifact.name.clone();
    let mut b = JobGraph::builder("shipped-file");
    b.artifact(artifact);
    let source = b
        .vertex("source", "text-source", 4)
        .config("artifact", name)
        .index();
    let tokenize = b.vertex("tokenize", "tokenize", 4).index();
    let count = b.vertex("count", "count-by-key", 2).index();
    let sink = b
        .vertex("sink", "file-sink", 2)
        .config("path", output.display().to_string())
        .index();
    use DistributionPattern::{AllToAll, Forward};
    b.edge(source, tokenize, Forward, ExchangeMode::Pipelined);
    b.edge(tokenize, count, AllToAll, ExchangeMode::Pipelined);
    b.edge(count, sink, Forward, ExchangeMode::Pipelined);
    let job = cluster.submit_job(b.build(|_| true)?).await?;
    let details = cluster.wait_for_job(job, Duration::from_secs(120)).await?;
    if details.summary.status != JobStatus::Finished {
        return Err(format!("the job ended {:?}", details.summary.status).into());
    }

    let mut counts = Vec::new();
    for part in std::fs::read_dir(&output)? {
        let path = part?.path();
        if path.extension().is_none() {
            for line in std::fs::read_to_string(&path)?.lines() {
                if let Some((word, n)) = line.split_once('\t') {
                    counts.push((n.parse::<u64>()?, word.to_owned()));
                }
            }
        }
    }
    counts.sort_by(|a, b| b.cmp(a));
    println!(
        "{} distinct words in {}; the most frequent:",
        counts.len(),
        file.display()
    );
    for (n, word) in counts.iter().take(10) {
        println!("{n:>8}  {word}");
    }
    println!("all counts: {}/part-*", output.display());
    Ok(())
}
