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
