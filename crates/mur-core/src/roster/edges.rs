//! Which member may call which (docs/reference/roster.md#edges): a deduplicated set of `(from, to)`
//! roster indices, sorted by `from`, then `to`.

use std::collections::BTreeSet;

use super::{MemberDecl, Reachability};

/// The edges of a roster whose structure already passed checks 2–5.
///
/// `accepts[i]` says whether member `i` declares `exports.peer_tasks.accept: true`; only `all`
/// reads it. A rule naming a non-member contributes nothing (check 4 refuses such a roster first).
pub fn build(reach: &Reachability, members: &[MemberDecl], accepts: &[bool], entry: usize) -> Vec<(usize, usize)> {
    let mut set = BTreeSet::new();
    match reach {
        Reachability::None => {}
        Reachability::All => {
            let serves = |i: usize| accepts.get(i).copied().unwrap_or(false);
            for from in 0..members.len() {
                for to in 0..members.len() {
                    // The entry may call, but is never called.
                    if from != to && to != entry && serves(from) && serves(to) {
                        set.insert((from, to));
                    }
                }
            }
        }
        Reachability::Rules(rules) => {
            let index = |name: &str| members.iter().position(|m| m.name == name);
            for rule in rules {
                let Some(from) = index(&rule.from) else {
                    continue;
                };
                for to in rule.to.iter().filter_map(|t| index(t)) {
                    if to != from {
                        set.insert((from, to));
                    }
                }
            }
        }
    }
    set.into_iter().collect()
}

/// For every member `0..n`, the members it may call, in roster order: [`callees`] of each, in one
/// pass over the edges (a 256-member `all` roster has 65 280 edges; asking member by member would
/// walk them 256 times).
pub fn callees_of_each(edges: &[(usize, usize)], n: usize) -> Vec<Vec<usize>> {
    of_each(edges.iter().map(|&(from, to)| (from, to)), n)
}

/// For every member `0..n`, the members that may call it, in roster order: [`callers`] of each.
pub fn callers_of_each(edges: &[(usize, usize)], n: usize) -> Vec<Vec<usize>> {
    of_each(edges.iter().map(|&(from, to)| (to, from)), n)
}

/// `(key, value)` pairs grouped by key `0..n`, each group sorted and without repeats; keys past
/// `n` are left out.
fn of_each(pairs: impl Iterator<Item = (usize, usize)>, n: usize) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new(); n];
    for (key, value) in pairs {
        if let Some(group) = out.get_mut(key) {
            group.push(value);
        }
    }
    for group in &mut out {
        group.sort_unstable();
        group.dedup();
    }
    out
}

/// The members `i` may call, in roster order.
pub fn callees(edges: &[(usize, usize)], i: usize) -> Vec<usize> {
    let set: BTreeSet<usize> = edges.iter().filter(|(f, _)| *f == i).map(|(_, t)| *t).collect();
    set.into_iter().collect()
}

/// The members that may call `i`, in roster order.
pub fn callers(edges: &[(usize, usize)], i: usize) -> Vec<usize> {
    let set: BTreeSet<usize> = edges.iter().filter(|(_, t)| *t == i).map(|(f, _)| *f).collect();
    set.into_iter().collect()
}
