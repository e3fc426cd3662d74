//! `mur ui` (issue 35): what the server spends on a page, and what it holds.
//!
//! - render: a synthetic formation of 64 members and 1 000 calls (each member calls the next
//!   three, calls spread over those edges, a model turn and a task per call), its traces written
//!   by the real `TraceWriter` into a temporary home; timed are the records read and the view
//!   built (`records::view_of`, as a page request does) and the HTML rendered from the view
//!   (`page::formation`), apart.
//! - memory: 100 recorded formations of 3 members and 5 calls each, in one home; the server's
//!   index is filled as the formation list fills it (`Index::formations`), and the growth of the
//!   process's resident set across that is reported, with the list's render time.
//!
//! The first render in a browser (the figure in docs/performance.md §8) is measured by the test
//! `ui::a_large_formation_renders_in_the_browser_quickly` in headless Chromium.

// Dependencies reach this target through the library; the library's own target keeps the rule.
#![allow(unused_crate_dependencies)]

use std::time::Instant;

use criterion::Criterion;
use mur::paths::MurHome;
use mur::ui::{page, records};

// The test's own generator, so the bench and the browser test measure the same formation.
#[path = "../tests/it/support/ui_records.rs"]
mod ui_records;
use ui_records::write_formation;

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let dir = tempfile::tempdir().expect("tempdir");
    let home = MurHome::at_home(dir.path());
    let frm = write_formation(&home, 64, 1000, 1_700_000_000_000);
    let index = records::Index::default();
    let files = index.formation_traces(&home, &frm);
    assert_eq!(files.len(), 64);
    let view = records::view_of(&frm, &files);
    assert_eq!((view.members.len(), view.calls.len()), (64, 1000));
    let html = page::formation(&view, false, 1_700_000_010_000);
    println!(
        "ui: formation page of 64 members and 1000 calls: {} KiB of HTML",
        html.len() / 1024
    );
    c.bench_function("ui/read_and_build_64x1000", |b| {
        b.iter(|| records::view_of(&frm, &files))
    });
    c.bench_function("ui/render_64x1000", |b| {
        b.iter(|| page::formation(&view, false, 1_700_000_010_000))
    });

    let many = tempfile::tempdir().expect("tempdir");
    let home = MurHome::at_home(many.path());
    for i in 0..100u64 {
        write_formation(&home, 3, 5, 1_700_000_000_000 + i * 60_000);
    }
    let before = rss_kib();
    let index = records::Index::default();
    let start = Instant::now();
    let rows = index.formations(&home);
    let first = start.elapsed();
    let after = rss_kib();
    assert_eq!(rows.len(), 100);
    println!(
        "ui: 100 recorded formations: first list {:.1} ms, resident set {} KiB before, {} KiB after (+{} KiB)",
        first.as_secs_f64() * 1000.0,
        before,
        after,
        after.saturating_sub(before)
    );
    c.bench_function("ui/list_100_formations_cached", |b| b.iter(|| index.formations(&home)));
    c.bench_function("ui/render_list_100", |b| {
        b.iter(|| page::list(&rows, 1_700_010_000_000))
    });
    c.final_summary();
}
