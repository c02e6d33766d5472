//! Helpers shared by the integration test binaries (`mod common;` in each).

#![allow(dead_code)] // each test binary uses its own subset

pub mod cli;
pub mod ha;
pub mod process;
pub mod rest;
pub mod slurm;
pub mod zookeeper;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use flint::job::graph::JobGraph;

/// The example binary `cargo test` built beside this test (target/PROFILE/examples/NAME). A
/// test binary built alone (`cargo test --test NAME`) does not build the examples: an example
/// binary older than its source is refused rather than tested.
pub fn example_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let dir = exe.parent().and_then(Path::parent).expect("target/PROFILE");
    let binary = dir.join("examples").join(name);
    assert!(
        binary.exists(),
        "{} is missing: `cargo test` builds the examples (or `cargo build --example {name}`)",
        binary.display()
    );
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let source = [
        format!("examples/{name}.rs"),
        format!("examples/{name}/main.rs"),
    ]
    .into_iter()
    .map(|path| manifest.join(path))
    .find(|path| path.exists());
    let modified = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    if let Some(source) = source {
        assert!(
            modified(&binary) >= modified(&source),
            "{} is older than {}: run `cargo build --example {name}` (or a plain `cargo test`, \
             which builds the examples)",
            binary.display(),
            source.display()
        );
    }
    binary
}

/// Installs Debian's `package` with apt-get, as the tests that need a real component do
/// (chromium with the packages it recommends, such as fonts; ZooKeeper without); `Err` says
/// why it could not, for the test's loud skip.
pub fn apt_install(package: &str, with_recommends: bool) -> Result<(), &'static str> {
    use std::process::{Command, Stdio};
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0");
    if !root {
        return Err("this test is not running as root, so it cannot install it");
    }
    eprintln!(
        "{package} is missing: installing Debian's {package} (apt-get install {package}) ..."
    );
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    };
    let install: &[&str] = if with_recommends {
        &["install", "-y", package]
    } else {
        &["install", "-y", "--no-install-recommends", package]
    };
    if !apt(&["update"]) || !apt(install) {
        return Err("apt-get could not install it (no network or no package repository?)");
    }
    Ok(())
}

/// A fresh scratch directory for one test (under the system temp dir, named after the test
/// and this process).
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("flint-it-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// Removes a scratch directory when dropped, unless the test is failing (its logs and files
/// are then kept for reading). Hold it in the last field of a struct, so the processes that
/// write there are stopped first.
#[derive(Debug)]
pub struct RemoveOnDrop(pub PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Writes a deterministic text of `lines` lines: a skewed vocabulary with unicode (ß, ï, É,
/// 日本, Ω), digits, hyphens, apostrophes and commas, and lines of uneven length (some empty).
pub fn write_text(path: &Path, lines: usize) {
    let words = [
        "the",
        "Flink",
        "flint",
        "Straße",
        "naïve",
        "x2",
        "é",
        "ÉCOLE",
        "data-flow",
        "it's",
        "日本",
        "Ωmega",
    ];
    let mut text = String::new();
    let mut state = 42u64;
    for i in 0..lines {
        for _ in 0..(i * 7) % 13 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            text.push_str(words[(state >> 33) as usize % words.len()]);
            text.push(if state.is_multiple_of(5) { ',' } else { ' ' });
        }
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

/// Every `word\tcount` line of an output directory (files with an extension are temporary
/// files of cancelled attempts and skipped); a word in two files fails the test.
pub fn read_counts(dir: &Path) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for entry in std::fs::read_dir(dir).expect("output directory") {
        let path = entry.expect("entry").path();
        if path.extension().is_some() {
            continue;
        }
        for line in std::fs::read_to_string(&path).expect("output file").lines() {
            let (word, count) = line.split_once('\t').expect("word<TAB>count");
            let previous = counts.insert(word.to_owned(), count.parse().expect("a count"));
            assert!(previous.is_none(), "{word} appears twice");
        }
    }
    counts
}

/// PEM files for TLS in `dir`: a fresh CA (`ca.pem`) and a certificate for 127.0.0.1 and
/// localhost signed by it (`node.pem`, `node.key`). Returns the three paths.
pub fn write_pki(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    std::fs::create_dir_all(dir).unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let node_key = KeyPair::generate().unwrap();
    let node = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .unwrap()
        .signed_by(&node_key, &ca, &ca_key)
        .unwrap();
    let paths = (
        dir.join("ca.pem"),
        dir.join("node.pem"),
        dir.join("node.key"),
    );
    std::fs::write(&paths.0, ca.pem()).unwrap();
    std::fs::write(&paths.1, node.pem()).unwrap();
    std::fs::write(&paths.2, node_key.serialize_pem()).unwrap();
    paths
}

/// The WordCount job of `examples/wordcount.toml` from `input` into the directory `output`.
pub fn wordcount_graph(input: &Path, output: &Path) -> JobGraph {
    let params = BTreeMap::from([
        ("input".to_owned(), input.display().to_string()),
        ("output".to_owned(), output.display().to_string()),
    ]);
    let registry = flint::operators::OperatorRegistry::with_builtins();
    flint::job::file::parse_job_file(
        include_str!("../../examples/wordcount.toml"),
        &params,
        |op| registry.contains(op),
    )
    .expect("the example job file parses")
}

/// WordCount (`text-source` → `tokenize` → all-to-all → `count-by-key` → `file-sink`, all
/// pipelined, no restarts) at `parallelism`: `parallelism²` channels on its all-to-all edge.
pub fn wide_wordcount_graph(input: &Path, output: &Path, parallelism: u32) -> JobGraph {
    use flint::job::graph::{DistributionPattern, ExchangeMode, RestartStrategyConfig};
    use flint::operators::builtin::{COUNT_BY_KEY, FILE_SINK, TEXT_SOURCE, TOKENIZE};

    let mut b = JobGraph::builder("wide-wordcount");
    let source = b
        .vertex("source", TEXT_SOURCE, parallelism)
        .config("path", input.display().to_string())
        .index();
    let tokenize = b.vertex("tokenize", TOKENIZE, parallelism).index();
    let count = b.vertex("count", COUNT_BY_KEY, parallelism).index();
    let sink = b
        .vertex("sink", FILE_SINK, parallelism)
        .config("path", output.display().to_string())
        .index();
    let pipelined = ExchangeMode::Pipelined;
    b.edge(source, tokenize, DistributionPattern::Forward, pipelined)
        .edge(tokenize, count, DistributionPattern::AllToAll, pipelined)
        .edge(count, sink, DistributionPattern::Forward, pipelined)
        .restart_strategy(RestartStrategyConfig::None);
    b.build(|_| true).expect("a valid job graph")
}
