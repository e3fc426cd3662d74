//! `mur ui` (issue 35): what the server spends on a page, and what it holds.
//!
//! - render: a synthetic formation of 64 members and 1 000 calls (each member calls the next
//!   three, calls spread over those edges, a model turn and a task per call), its traces written
//!   by the real `TraceWriter` into a temporary home; timed are the records read and the view
//!   built with each task's timeline (`records::view_with_timelines`, as a page request does)
//!   and the HTML rendered from the view (`page::formation`), apart.
//! - memory: 100 recorded formations of 3 members and 5 calls each, in one home; the server's
//!   index is filled as the formation list fills it (`Index::formations`); reported are the heap
//!   bytes the index then holds and the most that were live while it read the traces (a counting
//!   global allocator), with the list's time.
//!
//! The first render in a browser (the figure in docs/performance.md §8) is measured by
//! `benches/ui_paint.rs` in headless Chromium.

// Dependencies reach this target through the library; the library's own target keeps the rule.
#![allow(unused_crate_dependencies)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use criterion::Criterion;
use mur::paths::MurHome;
use mur::ui::{page, records};

// The test's own generator, so the bench and the browser test measure the same formation.
#[path = "../tests/it/support/ui_records.rs"]
mod ui_records;
use ui_records::write_formation;

/// Counts the heap bytes live and the most live at once, so what the index holds is measured
/// exactly (a resident set hides it in pages the allocator kept from earlier rows).
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            let now = LIVE.fetch_add(new_size, Ordering::Relaxed) + new_size;
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let dir = tempfile::tempdir().expect("tempdir");
    let home = MurHome::at_home(dir.path());
    let frm = write_formation(&home, 64, 1000, 1_700_000_000_000);
    let index = records::Index::default();
    let files = index.formation_traces(&home, &frm);
    assert_eq!(files.len(), 64);
    let view = records::view_with_timelines(&frm, &files);
    assert_eq!((view.members.len(), view.calls.len()), (64, 1000));
    let html = page::formation(&view, false, 1_700_000_010_000);
    println!(
        "ui: formation page of 64 members and 1000 calls: {} KiB of HTML",
        html.len() / 1024
    );
    c.bench_function("ui/read_and_build_64x1000", |b| {
        b.iter(|| records::view_with_timelines(&frm, &files))
    });
    c.bench_function("ui/render_64x1000", |b| {
        b.iter(|| page::formation(&view, false, 1_700_000_010_000))
    });

    let many = tempfile::tempdir().expect("tempdir");
    let home = MurHome::at_home(many.path());
    for i in 0..100u64 {
        write_formation(&home, 3, 5, 1_700_000_000_000 + i * 60_000);
    }
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let index = records::Index::default();
    let start = Instant::now();
    let rows = index.formations(&home);
    let first = start.elapsed();
    let peak = PEAK.load(Ordering::Relaxed);
    assert_eq!(rows.len(), 100);
    let listed = page::list(&rows, 1_700_010_000_000);
    drop((rows, listed));
    let held = LIVE.load(Ordering::Relaxed).saturating_sub(before);
    println!(
        "ui: 100 recorded formations: first list {:.1} ms; the index then holds {} KiB of heap; at most {} KiB more were live while it read them",
        first.as_secs_f64() * 1000.0,
        held / 1024,
        peak.saturating_sub(before) / 1024
    );
    let rows = index.formations(&home);
    c.bench_function("ui/list_100_formations_cached", |b| b.iter(|| index.formations(&home)));
    c.bench_function("ui/render_list_100", |b| {
        b.iter(|| page::list(&rows, 1_700_010_000_000))
    });
    c.final_summary();
}
