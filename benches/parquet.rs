//! The Parquet source (`flint::operators::parquet`) decoding SF1 lineitem on one thread:
//! `cargo bench --bench parquet`.
//!
//! For each file (DuckDB's, prices as DOUBLE; tpchgen-cli's, prices as DECIMAL(15,2)), all
//! 6,001,215 rows:
//!
//! - **floor**: the Q1 columns decoded into Arrow batches with the reader's settings
//!   (`arrow_reader_metadata`) and no rows built: what decoding alone costs;
//! - **Q1 rows**: the TPC-H Q1 row type (`f64` prices, `String` flags, `Date`), by the iterator
//!   (`split.rows()`) and by the callback (`split.read(..)`);
//! - **Q1 rows, char flags**: the same with the one-letter flags as `char` (no allocation);
//! - **Q3 rows**: `l_orderkey: i64`, two prices, `Date`.
//!
//! The consumer adds up every field of every row (what an operator does; it also keeps the
//! compiler from skipping work). Each figure is the best and the median of `FLINT_BENCH_PARQUET_RUNS`
//! runs (default 5), as wall time and as this thread's CPU time (`/proc/thread-self/schedstat`),
//! which on a shared machine wanders less. The allocator is Flint's (`flint::global_allocator!`:
//! jemalloc with small thread caches); `_RJEM_MALLOC_CONF=tcache:false` turns the caches off.
//!
//! The files are `/work/data/tpch/sf1-{duckdb,tpchgen}/lineitem.parquet`, or those listed in
//! `FLINT_BENCH_PARQUET_FILES` (comma-separated); a missing file is skipped with a message.

// A benchmark measures wall time with the real clock; it is no node code.
#![allow(clippy::disallowed_methods)]

use std::error::Error;
use std::fs::File;
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use flint::operators::parquet::{
    ParquetError, ParquetSplit, ReadOptions, RowReader, arrow_reader_metadata,
};
use flint::operators::types::Date;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde::Deserialize;
use serde::de::DeserializeOwned;

flint::global_allocator!();

const DEFAULT_FILES: [&str; 2] = [
    "/work/data/tpch/sf1-duckdb/lineitem.parquet",
    "/work/data/tpch/sf1-tpchgen/lineitem.parquet",
];

/// TPC-H Q1's columns, as a user would declare them.
#[derive(Deserialize)]
struct Q1 {
    l_quantity: f64,
    l_extendedprice: f64,
    l_discount: f64,
    l_tax: f64,
    l_returnflag: String,
    l_linestatus: String,
    l_shipdate: Date,
}

/// Q1 with the one-letter flags as `char`.
#[derive(Deserialize)]
struct Q1Char {
    l_quantity: f64,
    l_extendedprice: f64,
    l_discount: f64,
    l_tax: f64,
    l_returnflag: char,
    l_linestatus: char,
    l_shipdate: Date,
}

/// TPC-H Q3's lineitem columns.
#[derive(Deserialize)]
struct Q3 {
    l_orderkey: i64,
    l_extendedprice: f64,
    l_discount: f64,
    l_shipdate: Date,
}

const Q1_COLUMNS: [&str; 7] = [
    "l_quantity",
    "l_extendedprice",
    "l_discount",
    "l_tax",
    "l_returnflag",
    "l_linestatus",
    "l_shipdate",
];

/// What a consumer does with a row: read every field.
trait Touch {
    fn touch(&self) -> f64;
}

impl Touch for Q1 {
    fn touch(&self) -> f64 {
        self.l_quantity
            + self.l_extendedprice
            + self.l_discount
            + self.l_tax
            + (self.l_returnflag.len() + self.l_linestatus.len()) as f64
            + f64::from(self.l_shipdate.days_since_epoch())
    }
}

impl Touch for Q1Char {
    fn touch(&self) -> f64 {
        self.l_quantity
            + self.l_extendedprice
            + self.l_discount
            + self.l_tax
            + f64::from(u32::from(self.l_returnflag) + u32::from(self.l_linestatus))
            + f64::from(self.l_shipdate.days_since_epoch())
    }
}

impl Touch for Q3 {
    fn touch(&self) -> f64 {
        self.l_orderkey as f64
            + self.l_extendedprice
            + self.l_discount
            + f64::from(self.l_shipdate.days_since_epoch())
    }
}

type Outcome = Result<u64, Box<dyn Error>>;

/// Decoding only: the Q1 columns into Arrow batches, with the row reader's settings.
fn floor(path: &Path) -> Outcome {
    let file = File::open(path)?;
    let metadata = arrow_reader_metadata(&file)?;
    let builder = ParquetRecordBatchReaderBuilder::new_with_metadata(file, metadata);
    let schema = builder.parquet_schema();
    let fields = schema.root_schema().get_fields();
    let roots = (0..fields.len()).filter(|&i| Q1_COLUMNS.contains(&fields[i].name()));
    let mask = ProjectionMask::roots(schema, roots);
    let batch_size = ReadOptions::default().batch_size;
    let mut rows = 0;
    for batch in builder
        .with_projection(mask)
        .with_batch_size(batch_size)
        .build()?
    {
        rows += black_box(batch?).num_rows() as u64;
    }
    Ok(rows)
}

fn by_iterator<T: DeserializeOwned + Touch>(split: &ParquetSplit) -> Outcome {
    let (mut rows, mut sum) = (0, 0.0);
    for row in split.rows::<T>()? {
        sum += row?.touch();
        rows += 1;
    }
    black_box(sum);
    Ok(rows)
}

fn by_callback<T: DeserializeOwned + Touch>(split: &ParquetSplit) -> Outcome {
    let (mut rows, mut sum) = (0, 0.0);
    RowReader::<T>::open(split, ReadOptions::default())?.try_for_each_row(|row: T| {
        sum += row.touch();
        rows += 1;
        Ok::<_, ParquetError>(())
    })?;
    black_box(sum);
    Ok(rows)
}

/// CPU time of this thread (the first field of schedstat, in ns): unlike wall time it does not
/// count time other processes had the core.
fn thread_cpu_time() -> Duration {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|ns| ns.parse().ok()))
        .map(Duration::from_nanos)
        .unwrap_or_default()
}

fn time(label: &str, runs: usize, mut f: impl FnMut() -> Outcome) -> Result<(), Box<dyn Error>> {
    let (mut wall, mut cpu) = (Vec::new(), Vec::new());
    let mut rows = 0;
    for _ in 0..runs {
        let (start, start_cpu) = (Instant::now(), thread_cpu_time());
        rows = f()?;
        wall.push(start.elapsed().as_secs_f64());
        cpu.push((thread_cpu_time() - start_cpu).as_secs_f64());
    }
    wall.sort_by(f64::total_cmp);
    cpu.sort_by(f64::total_cmp);
    println!(
        "  {label:<28} {rows:>9} rows  wall best {:.3} s, median {:.3} s | cpu best {:.3} s, \
         median {:.3} s | {:.1} M rows/s (best cpu)",
        wall[0],
        wall[runs / 2],
        cpu[0],
        cpu[runs / 2],
        rows as f64 / cpu[0].max(f64::MIN_POSITIVE) / 1e6,
    );
    Ok(())
}

fn bench(path: &Path, runs: usize) -> Result<(), Box<dyn Error>> {
    let split = ParquetSplit::for_subtask(&[path], 0, 1)?;
    let row_groups: usize = split.parts.iter().map(|p| p.row_groups.len()).sum();
    let megabytes = std::fs::metadata(path)?.len() as f64 / 1e6;
    println!(
        "{}: {megabytes:.0} MB, {row_groups} row groups, {} rows; {runs} runs",
        path.display(),
        split.row_count()
    );
    time("floor: Q1 columns, batches", runs, || floor(path))?;
    time("Q1 rows (iterator)", runs, || by_iterator::<Q1>(&split))?;
    time("Q1 rows (callback)", runs, || by_callback::<Q1>(&split))?;
    time("Q1 rows, char flags", runs, || {
        by_callback::<Q1Char>(&split)
    })?;
    time("Q3 rows (iterator)", runs, || by_iterator::<Q3>(&split))?;
    Ok(())
}

fn main() -> Result<(), Box<dyn Error>> {
    let runs = std::env::var("FLINT_BENCH_PARQUET_RUNS")
        .ok()
        .map(|r| r.parse::<usize>())
        .transpose()?
        .unwrap_or(5)
        .max(1);
    let files: Vec<String> = match std::env::var("FLINT_BENCH_PARQUET_FILES") {
        Ok(list) => list.split(',').map(str::to_owned).collect(),
        Err(_) => DEFAULT_FILES.map(str::to_owned).to_vec(),
    };
    for file in &files {
        let path = Path::new(file);
        if !path.is_file() {
            eprintln!(
                "\n*** SKIPPED {file}: absent (SF1 lineitem is not part of the repository) ***\n"
            );
            continue;
        }
        bench(path, runs)?;
    }
    Ok(())
}
