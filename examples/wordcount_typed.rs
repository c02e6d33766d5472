//! WordCount as a typed Flint program: read text, split it into words, count each word, write
//! the counts as CSV part files and print the ten most frequent words.
//!
//! ```text
//! cargo run --release --example wordcount_typed -- INPUT OUTPUT_DIR [--parallelism N]
//! cargo run --release --example wordcount_typed -- README.md /tmp/wordcount
//! ```
//!
//! INPUT is a text file, or a directory whose files (not its hidden ones or subdirectories) are
//! all read. OUTPUT_DIR gets one `part-NNNNN` CSV file per subtask of the sink, each with a
//! `word,count` header. The input path must come first: an invocation whose first argument
//! starts with `-` is read as one of the binary's cluster subcommands.
//!
//! Without `--jobmanager` the program runs on a cluster embedded in this process. The binary is
//! also a whole Flint cluster binary, so the same program runs on a cluster of processes started
//! from it (its TaskManagers are this executable, so they can run the program's operators):
//!
//! ```text
//! cargo build --release --example wordcount_typed
//! target/release/examples/wordcount_typed jobmanager --rest 127.0.0.1:8081 --pool-size 2 --slots 2 &
//! target/release/examples/wordcount_typed $PWD/README.md /tmp/wordcount --jobmanager http://127.0.0.1:8081
//! ```
//!
//! On a process cluster the TaskManagers read INPUT and write OUTPUT_DIR themselves, relative to
//! the JobManager's working directory: give absolute paths.

// jemalloc with small thread caches, as the flint binary (see flint::process::allocator).
flint::global_allocator!();

use std::cmp::Reverse;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use flint::api::{DataSet, Env, Order, Program, ProgramError, Programs};
use flint::operators::builtin::for_each_word;
use serde::{Deserialize, Serialize};

const USAGE: &str = "usage: wordcount_typed INPUT OUTPUT_DIR [--parallelism N] [--jobmanager URL]";

/// A record of the program: any serde type can flow between operators. Its field names are the
/// header of the CSV files `write_csv` writes.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct WordCount {
    word: String,
    count: u64,
}

/// Emits each word of a line with a count of 1: maximal runs of alphanumeric characters,
/// lowercased (the built-in WordCount's words, `for_each_word`), built in one buffer and handed
/// over by reference (`emit` makes a `String` only for a word its combiner does not hold yet).
fn count_words(line: String, emit: &mut dyn FnMut(&str, u64)) {
    let mut word = String::new();
    for_each_word(&line, &mut word, |word| emit(word, 1));
}

/// The files to read: INPUT itself, or the regular, non-hidden files of the directory INPUT in
/// name order. The program's function runs again on every TaskManager to rebuild the plan, so
/// it must find the same files there: a directory that changes while the job runs would make
/// the TaskManagers' plan differ from the client's (and they refuse such a task by name).
fn input_files(input: &Path) -> Result<Vec<PathBuf>, ProgramError> {
    if !input.is_dir() {
        return Ok(vec![input.to_owned()]);
    }
    let entries = std::fs::read_dir(input).map_err(|source| ProgramError::Io {
        context: format!("cannot list {}", input.display()),
        source,
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.is_file())
        .filter(|path| {
            !path
                .file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with('.'))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(ProgramError::Usage(format!(
            "{} has no files to read",
            input.display()
        )));
    }
    Ok(files)
}

/// The program. It declares the job's operators, runs the job with `env.execute` and prints
/// what it collected.
fn wordcount(env: &Env) -> Result<(), ProgramError> {
    // The program's own arguments (the binary took `--jobmanager URL` and `--config FILE` out).
    let mut args = env.args().into_iter();
    let mut positional = Vec::new();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--parallelism" => {
                let p = args.next().and_then(|p| p.parse::<u32>().ok());
                let p = p.filter(|p| *p > 0).ok_or_else(|| {
                    ProgramError::Usage(format!("--parallelism needs a positive number\n{USAGE}"))
                })?;
                // Every operator that sets none runs as this many subtasks (the default is the
                // client machine's cores).
                env.set_parallelism(p);
            }
            other if other.starts_with('-') => {
                return Err(ProgramError::Usage(format!(
                    "unknown option `{other}`\n{USAGE}"
                )));
            }
            _ => positional.push(arg),
        }
    }
    let [input, output] =
        <[String; 2]>::try_from(positional).map_err(|_| ProgramError::Usage(USAGE.to_owned()))?;

    // Source: the lines of each input file (a file is split across the source's subtasks by
    // byte range; each line is read once). Several files are one dataset with `union`.
    let files = input_files(Path::new(&input))?;
    let sources: Vec<DataSet<String>> = files.iter().map(|f| env.read_text_file(f)).collect();
    let others: Vec<&DataSet<String>> = sources[1..].iter().collect();
    let lines = if others.is_empty() {
        sources[0].clone()
    } else {
        sources[0].union(&others)
    };

    // Transformations: the words of each line and their counts, summed per word. The words go
    // by reference into the combiner of `flat_map_reduce_by_key`, which sums before the keyed
    // exchange too: each subtask sends one partial count per word, not one record per
    // occurrence. (`flat_map` to `(word, 1)` pairs and `reduce_by_key` give the same counts,
    // with a `String` per occurrence; `key_by(..).reduce(..)` works on any record type.)
    let counts = lines
        .flat_map_reduce_by_key(count_words, |a, b| a + b)
        .map(|(word, count)| WordCount { word, count });

    // Sinks. `counts` feeds three of them (a dataset can be read by any number of operators):
    // 1. every count as CSV part files, written by the TaskManagers;
    counts.write_csv(&output);
    // 2. the ten most frequent words, most frequent first (ties: alphabetical), sent back to the
    //    program. Each subtask keeps its own top 10, then one subtask merges them;
    let top = counts
        .top_k(
            10,
            |wc: &WordCount| (Reverse(wc.count), wc.word.clone()),
            Order::Ascending,
        )
        .collect();
    // 3. the number of words and of distinct words: a global aggregate (one key, `()`).
    let totals = counts
        .key_by(|_: &WordCount| ())
        .aggregate(
            || (0u64, 0u64),
            |(words, distinct), wc| {
                *words += wc.count;
                *distinct += 1;
            },
            |(words, distinct), (more_words, more_distinct)| {
                *words += more_words;
                *distinct += more_distinct;
            },
        )
        .collect();

    // Nothing has run yet: `execute` runs everything declared above as one job and waits for it.
    let result = env.execute("wordcount")?;

    // On a TaskManager `execute` returned `Err(PlanCaptured)` and `?` ended the function there,
    // so this point is reached only on the client; `env.on_client()` says so explicitly.
    if env.on_client() {
        let (words, distinct) = result
            .get(&totals)?
            .first()
            .map_or((0, 0), |(_, totals)| *totals);
        println!("{words} words, {distinct} distinct; counts written to {output}");
        println!("top 10:");
        for wc in result.get(&top)? {
            println!("{}\t{}", wc.word, wc.count);
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let program = Program::new("wordcount_typed", wordcount)
        .about("count the words of a text file or directory");
    // Arguments that name neither a subcommand (`jobmanager`, `taskmanager`, ...) nor a program
    // run `wordcount_typed` with all of them.
    flint::cli::main_with_default(Programs::new().with(program), Some("wordcount_typed"))
}
