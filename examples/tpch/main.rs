//! TPC-H on Flint: Q1, Q3, Q5, Q6, Q10 and Q18 as dataflow programs.
//!
//! ```text
//! cargo run --release --example tpch -- Q1 --sf 0.1                # tables generated in the sources
//! cargo run --release --example tpch -- Q5 --data DIR --output out # DIR/lineitem.parquet, ...
//! cargo run --release --example tpch -- all --sf 1 --parallelism 2 --jobmanager http://127.0.0.1:8081
//! ```
//!
//! This binary is a whole Flint binary as well (`tpch jobmanager`, `tpch taskmanager`, ...):
//! a cluster started from it runs these queries' operators. Each query prints its answer CSV
//! (and writes `OUTPUT/QUERY.csv` with `--output`).

// jemalloc with small thread caches, as the flint binary (see flint::process::allocator).
flint::global_allocator!();

mod answer;
mod queries;
mod tables;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use flint::api::{Env, Program, ProgramError, Programs};

use tables::{Input, Tables};

const QUERIES: [&str; 6] = ["Q1", "Q3", "Q5", "Q6", "Q10", "Q18"];

const USAGE: &str = "usage: tpch QUERY|all (--data DIR | --sf N) [--output DIR] [--parallelism N] \
                     [--jobmanager URL] [--config FILE]";

/// The parsed arguments.
struct Options {
    queries: Vec<String>,
    input: Input,
    output: Option<PathBuf>,
    parallelism: Option<u32>,
}

fn usage(message: impl std::fmt::Display) -> ProgramError {
    ProgramError::Usage(format!("{message}\n{USAGE}"))
}

fn parse(args: &[String]) -> Result<Options, ProgramError> {
    let mut queries = Vec::new();
    let mut input = None;
    let mut output = None;
    let mut parallelism = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .cloned()
                .ok_or_else(|| usage(format!("{name} needs a value")))
        };
        match arg.as_str() {
            "--data" => input = Some(Input::Parquet(PathBuf::from(value("--data")?))),
            "--sf" => {
                let sf = value("--sf")?;
                let sf: f64 = sf
                    .parse()
                    .ok()
                    .filter(|sf: &f64| *sf > 0.0 && sf.is_finite())
                    .ok_or_else(|| usage(format!("--sf: `{sf}` is not a positive number")))?;
                input = Some(Input::Generated(sf));
            }
            "--output" => output = Some(PathBuf::from(value("--output")?)),
            "--parallelism" => {
                let p = value("--parallelism")?;
                parallelism = Some(p.parse().ok().filter(|p| *p > 0).ok_or_else(|| {
                    usage(format!("--parallelism: `{p}` is not a positive number"))
                })?);
            }
            "all" => queries.extend(QUERIES.iter().map(|q| q.to_string())),
            query if !query.starts_with('-') => {
                let query = query.to_ascii_uppercase();
                if !QUERIES.contains(&query.as_str()) {
                    return Err(usage(format!("unknown query `{arg}`")));
                }
                queries.push(query);
            }
            other => return Err(usage(format!("unknown option `{other}`"))),
        }
    }
    if queries.is_empty() {
        return Err(usage("name a query"));
    }
    let input = input.ok_or_else(|| usage("say where the tables are: --data DIR or --sf N"))?;
    Ok(Options {
        queries,
        input,
        output,
        parallelism,
    })
}

/// The program: each query one job, in order.
#[allow(clippy::disallowed_methods)] // the client's wall time per query, for its report
fn tpch(env: &Env) -> Result<(), ProgramError> {
    let options = parse(&env.args())?;
    if let Some(p) = options.parallelism {
        env.set_parallelism(p);
    }
    let tables = Tables {
        env,
        input: options.input.clone(),
    };
    for query in &options.queries {
        let started = Instant::now();
        let csv = queries::run(env, query, &tables)?;
        let took = started.elapsed();
        // TaskManagers run the program again only to rebuild a query's plan: they print nothing.
        if !env.on_client() {
            continue;
        }
        if let Some(dir) = &options.output {
            std::fs::create_dir_all(dir)
                .and_then(|()| std::fs::write(dir.join(format!("{query}.csv")), &csv))
                .map_err(|e| ProgramError::Io {
                    context: format!("writing {query}.csv to {}", dir.display()),
                    source: e,
                })?;
        }
        print!("{csv}");
        eprintln!(
            "{query}: {} rows in {:.3} s",
            csv.lines().count() - 1,
            took.as_secs_f64()
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let program = Program::new("tpch", tpch).about("TPC-H Q1, Q3, Q5, Q6, Q10, Q18");
    flint::cli::main_with_default(Programs::new().with(program), Some("tpch"))
}
