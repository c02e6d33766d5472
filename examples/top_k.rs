//! Ordering records: the largest with `top_k`, any few with `first_n`, and a global sort
//! (`sort_by`: range-partitioned, sorted in parallel) written as CSV part files.
//!
//! ```text
//! cargo run --release --example top_k -- EVENTS OUTPUT_DIR [--k K] [--parallelism N]
//! cargo run --release --example top_k -- 1000000 /tmp/sorted-events --k 5
//! ```
//!
//! A parallel generator makes EVENTS sensor readings `Event { id, sensor, value }` (event `i`:
//! sensor `mix(i) % 100`, value `mix(i) / 100 % 1000000`, see [`mix`]). The program prints the
//! K (default 10) events of the largest values and the first 5 events the generator delivered,
//! and writes every event sorted by (value, id) into OUTPUT_DIR: `part-00000`, `part-00001`, ...
//! each holding one range of values, in order, so the part files read in name order are the
//! whole sorted dataset (each starts with the `id,sensor,value` header).
//!
//! On a process cluster started from this binary (see examples/wordcount_typed.rs) give an
//! absolute OUTPUT_DIR: the TaskManagers write it.
//!
//! ```text
//! target/release/examples/top_k jobmanager --rest 127.0.0.1:8081 --pool-size 2 --slots 2 &
//! target/release/examples/top_k 1000000 /tmp/sorted-events --jobmanager http://127.0.0.1:8081
//! ```

// jemalloc with small thread caches, as the flint binary (see flint::process::allocator).
flint::global_allocator!();

use std::cmp::Reverse;
use std::process::ExitCode;

use flint::api::{Env, Order, Program, ProgramError, Programs};
use serde::{Deserialize, Serialize};

const USAGE: &str = "usage: top_k EVENTS OUTPUT_DIR [--k K] [--parallelism N] [--jobmanager URL]";

/// A sensor reading.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Event {
    id: u64,
    sensor: u32,
    value: u64,
}

/// A fixed mixing function (splitmix64's finalizer): the same events on every run.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn event(id: u64) -> Event {
    let m = mix(id);
    Event {
        id,
        sensor: (m % 100) as u32,
        value: m / 100 % 1_000_000,
    }
}

fn top_k(env: &Env) -> Result<(), ProgramError> {
    let usage = |message: &str| ProgramError::Usage(format!("{message}\n{USAGE}"));
    let number = |name: &str, value: Option<String>| {
        value
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|v| *v > 0)
            .ok_or_else(|| usage(&format!("{name} needs a positive number")))
    };
    let mut args = env.args().into_iter();
    let mut positional = Vec::new();
    let mut k = 10;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--k" => k = number("--k", args.next())? as usize,
            "--parallelism" => {
                env.set_parallelism(number("--parallelism", args.next())? as u32);
            }
            other if other.starts_with('-') => {
                return Err(usage(&format!("unknown option `{other}`")));
            }
            _ => positional.push(arg),
        }
    }
    let [events, output] =
        <[String; 2]>::try_from(positional).map_err(|_| usage("name EVENTS and OUTPUT_DIR"))?;
    let events = number("EVENTS", Some(events))?;

    // A parallel generator: subtask `s` of `p` makes the events of the ids `s`, `s + p`, ...
    let readings = env
        .generate(move |subtask, parallelism| {
            (u64::from(subtask)..events)
                .step_by(parallelism as usize)
                .map(event)
        })
        .name("sensor readings");

    // The K largest values (ties: the smaller id first), largest first. Each generator subtask
    // keeps its own K best as the events pass, then one subtask merges the partial lists: only
    // K records per subtask cross the network.
    let largest = readings
        .top_k(k, |e: &Event| (Reverse(e.value), e.id), Order::Ascending)
        .collect();

    // Any five events: whichever the subtasks delivered first (no order is implied). Each
    // subtask passes on its first five, one subtask keeps the first five of those.
    let first = readings.first_n(5).collect();

    // A global sort by (value, id): a sample of the keys picks the split points, each record goes
    // to the subtask of its range, and each subtask sorts its range (spilling to disk past its
    // managed memory). The CSV sink after it keeps those partitions: part file `i` is range `i`.
    // (`sort_all` would sort everything in one subtask: fine for small results.)
    readings
        .sort_by(|e: &Event| (e.value, e.id), Order::Ascending)
        .write_csv(&output);

    let result = env.execute("top k")?;
    if env.on_client() {
        println!("the {k} largest of {events} events:");
        println!("id\tsensor\tvalue");
        for e in result.get(&largest)? {
            println!("{}\t{}\t{}", e.id, e.sensor, e.value);
        }
        println!("the first 5 events delivered:");
        println!("id\tsensor\tvalue");
        for e in result.get(&first)? {
            println!("{}\t{}\t{}", e.id, e.sensor, e.value);
        }
        println!("all events sorted by value: {output}/part-*");
    }
    Ok(())
}

fn main() -> ExitCode {
    let program = Program::new("top_k", top_k).about("top k, first n and a global sort");
    flint::cli::main_with_default(Programs::new().with(program), Some("top_k"))
}
