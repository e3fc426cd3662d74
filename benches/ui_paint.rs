//! `mur ui`'s first render in a real browser (docs/performance.md §8): the formation of
//! `benches/ui.rs` (64 members, 1 000 calls, written by the real `TraceWriter`), served by the
//! real binary's `mur ui` and loaded by the headless Chromium the tests provision. Each load's
//! figures are the browser's own `performance` entries: time to first byte, first contentful
//! paint, `DOMContentLoaded` and `load`. `MUR_BENCH_LOADS` loads (default 20; one without
//! `--bench`), after one that sets the cookie; printed as p50, least and most.

// Dependencies reach this target through the library; the library's own target keeps the rule.
#![allow(unused_crate_dependencies)]

#[path = "../tests/it/support/mod.rs"]
mod support;

use support::chromium::Browser;
use support::ui_server::Ui;

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let loads: usize = match bench {
        true => std::env::var("MUR_BENCH_LOADS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(20),
        false => 1,
    };
    let sb = support::Sandbox::new();
    let home = mur::paths::MurHome::at_home(&sb.home());
    let frm = support::ui_records::write_formation(&home, 64, 1000, 1_700_000_000_000);
    let ui = Ui::start(&sb);
    let mut b = Browser::start();
    // The cookie first, so each load is timed without the token's redirect.
    b.goto(&ui.with_token("/"));
    let names = ["ttfb", "fcp", "dom", "load"];
    let mut figures: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    for _ in 0..loads {
        b.goto(&format!("http://127.0.0.1:{}/formation/{frm}", ui.port));
        let shown = b.eval("document.querySelectorAll('li.call').length");
        assert_eq!(shown, serde_json::json!(1000), "the page shows every call");
        let t = b.eval(
            "(() => { const n = performance.getEntriesByType('navigation')[0]; \
              const p = performance.getEntriesByName('first-contentful-paint')[0]; \
              return {ttfb: n.responseStart, fcp: p ? p.startTime : null, \
                      dom: n.domContentLoadedEventEnd, load: n.loadEventEnd}; })()",
        );
        for (i, name) in names.iter().enumerate() {
            if let Some(v) = t[*name].as_f64() {
                figures[i].push(v);
            }
        }
    }
    println!("mur ui, 64 members and 1 000 calls, {loads} load(s) in headless Chromium (ms):");
    for (name, mut f) in names.iter().zip(figures) {
        if f.is_empty() {
            println!("  {name:<5} none reported");
            continue;
        }
        f.sort_by(f64::total_cmp);
        println!(
            "  {name:<5} p50 {:>7.1}  least {:>7.1}  most {:>7.1}",
            f[f.len() / 2],
            f[0],
            f[f.len() - 1]
        );
    }
}
