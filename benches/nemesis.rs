//! The nemesis, long form (issue 37; docs/reliability.md#nemesis-runs): the CI form's engine
//! (`tests/it/support/nemesis.rs`) run for `MUR_NEMESIS_MINUTES` (default 2) minutes of rounds,
//! every fault kind once per shuffled deck, one seed (`MUR_NEMESIS_SEED`, else random, printed).
//! It prints the figures docs/reliability.md records: faults per kind, invariant checks, tasks,
//! formations, and the longest wait from a launcher's end to its formation's last process.
//! Without `--bench` (`cargo test --benches`) it runs one deck.

// Dependencies reach this target through the library; the library's own target keeps the rule.
#![allow(unused_crate_dependencies)]

use std::time::{Duration, Instant};

#[path = "../tests/it/support/mod.rs"]
mod support;

use support::nemesis::{Fault, Nemesis, World, random_seed, seed_from_env};

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let minutes: f64 = std::env::var("MUR_NEMESIS_MINUTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2.0);
    let seed = seed_from_env().unwrap_or_else(random_seed);
    let world = World::new();
    let start = Instant::now();
    let mut nemesis = Nemesis::new(&world, seed);
    let figures = if bench {
        nemesis.run_for(Duration::from_secs_f64(minutes * 60.0))
    } else {
        nemesis.run(Fault::ALL.len())
    };
    let took = start.elapsed();
    println!(
        "nemesis seed {seed:#x}: a clean run of {:.1} min",
        took.as_secs_f64() / 60.0
    );
    print!("{}", figures.report());
}
