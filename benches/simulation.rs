//! The deterministic simulation's speed: simulated seconds per wall second and seeds per
//! second, for clusters of about 7 and about 21 nodes (`cargo bench --bench simulation`).
//! One thread; medians over the seeds.

#![allow(clippy::disallowed_methods)] // a benchmark measures wall time

use std::time::{Duration, Instant};

use flint::sim::scenario::Shape;
use flint::sim::{SimOptions, run_seed};

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

fn main() {
    let seeds: u64 = std::env::var("FLINT_BENCH_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    for (label, max_task_managers) in [("~7 nodes", 6), ("~21 nodes", 20)] {
        let mut ratios = Vec::new();
        let mut nodes = Vec::new();
        let started = Instant::now();
        let mut simulated = Duration::ZERO;
        for seed in 0..seeds {
            let mut options = SimOptions::new(seed);
            options.shape = Shape {
                max_task_managers,
                ..Shape::default()
            };
            let wall = Instant::now();
            let report = run_seed(&options);
            let took = wall.elapsed();
            simulated += report.simulated;
            ratios.push(report.simulated.as_secs_f64() / took.as_secs_f64());
            nodes.push(f64::from(report.nodes));
        }
        let wall = started.elapsed();
        println!(
            "{label}: {seeds} seeds in {:.2} s = {:.0} seeds/s; median {:.0} simulated s per wall s \
             (total {:.0} s simulated); median {} nodes booted per seed",
            wall.as_secs_f64(),
            seeds as f64 / wall.as_secs_f64(),
            median(ratios),
            simulated.as_secs_f64(),
            median(nodes)
        );
    }
}
