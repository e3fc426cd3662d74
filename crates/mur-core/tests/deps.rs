//! The core stays pure: nothing in its dependency tree runs actors, an async runtime, HTTP, a
//! WebAssembly engine or processes. Read from the workspace's Cargo.lock (every transitive
//! dependency) and this crate's manifest (nix's features), so a new dependency that pulls any
//! of them in fails here, not in a review.

// Dependencies reach this target through the library; the library's own target keeps the rule.
#![allow(unused_crate_dependencies)]

use std::collections::{BTreeMap, BTreeSet};

/// Crates a pure core must never reach, by name prefix.
const FORBIDDEN: &[&str] = &["actix", "awc", "tokio", "hyper", "wasmtime", "cranelift", "mio", "clap"];

/// `name -> dependency names` from Cargo.lock (one entry per name: the core pins one version).
fn lock_graph() -> BTreeMap<String, Vec<String>> {
    let lock =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.lock")).expect("read Cargo.lock");
    let mut graph: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for block in lock.split("[[package]]").skip(1) {
        let mut name = None;
        let mut deps = Vec::new();
        let mut in_deps = false;
        for line in block.lines().map(str::trim) {
            if let Some(n) = line.strip_prefix("name = ") {
                name = Some(n.trim_matches('"').to_string());
            } else if line.starts_with("dependencies = [") {
                in_deps = true;
            } else if in_deps && line.starts_with(']') {
                in_deps = false;
            } else if in_deps {
                // "name", "name version" or "name version (source)"
                let dep = line.trim_matches(|c| c == '"' || c == ',');
                if let Some(d) = dep.split_whitespace().next() {
                    deps.push(d.to_string());
                }
            }
        }
        if let Some(n) = name {
            graph.entry(n).or_default().extend(deps);
        }
    }
    graph
}

#[test]
fn the_core_reaches_no_runtime_crate() {
    let graph = lock_graph();
    assert!(graph.contains_key("mur-core"), "mur-core is in Cargo.lock");
    let mut seen = BTreeSet::new();
    let mut stack = vec!["mur-core".to_string()];
    while let Some(name) = stack.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        stack.extend(graph.get(&name).into_iter().flatten().cloned());
    }
    let reached: Vec<&String> = seen
        .iter()
        .filter(|n| FORBIDDEN.iter().any(|f| n.starts_with(f)))
        .collect();
    assert!(reached.is_empty(), "mur-core depends on runtime crates: {reached:?}");
    // The walk sees the lock's union over versions, so it can only over-report; the core's own
    // direct dependencies are checked exactly below.
}

#[test]
fn nix_is_used_for_files_and_users_only() {
    let manifest =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).expect("read Cargo.toml");
    let nix = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("nix ="))
        .expect("nix is a dependency");
    for control in ["process", "signal", "pthread", "ptrace", "sched"] {
        assert!(
            !nix.contains(&format!("\"{control}\"")),
            "mur-core enables nix's {control}: {nix}"
        );
    }
}
