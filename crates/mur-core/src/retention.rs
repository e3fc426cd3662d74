//! The retention decision (docs/reference/formation.md#retention) shared by formation directories
//! and a records group's sessions. Pure: ids, policy, clock and a liveness oracle in; removals out.
//!
//! Both passes rank every id newest first (the current one included), skip the current id and any
//! minted after it (the session pass ranks only the sessions of its own capsule, [`plan_sessions`]), and remove an id older than `max_age` (checked first, so an id over both limits
//! reads `max_age`) or ranked at or beyond `max_sessions`, unless it is still live.

use crate::ids::{self, IdKind};
use crate::manifest::Retain;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    MaxAge,
    MaxSessions,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::MaxAge => "max_age",
            Reason::MaxSessions => "max_sessions",
        }
    }
}

/// Which of `ids` (all of `kind`) to remove, newest first.
pub fn plan(
    mut ids: Vec<String>,
    kind: IdKind,
    current: &str,
    retain: &Retain,
    now_ms: u64,
    is_live: &dyn Fn(&str) -> bool,
) -> Vec<(String, Reason)> {
    ids.sort_by(|a, b| b.cmp(a));
    let mut out = Vec::new();
    for (rank, id) in ids.iter().enumerate() {
        if id.as_str() >= current {
            continue;
        }
        let too_old = match (retain.max_age_secs, ids::mint_time_ms(kind, id)) {
            (Some(max), Some(minted)) => now_ms.saturating_sub(minted) > max.saturating_mul(1000),
            _ => false,
        };
        let too_many = retain.max_sessions.is_some_and(|n| rank >= n as usize);
        let reason = match (too_old, too_many) {
            (true, _) => Reason::MaxAge,
            (false, true) => Reason::MaxSessions,
            (false, false) => continue,
        };
        if !is_live(id) {
            out.push((id.clone(), reason));
        }
    }
    out
}

/// The session pass's decision: as [`plan`], over `sessions` (each id with the capsule its
/// trace's `session_start` names, `None` when that cannot be read) ranked among those of
/// `capsule` only. A capsule's `trace.retain` is its author's word about its own records; the
/// records group (a work folder) is shared with whatever else ran there, and a session of
/// another capsule, or one whose capsule is unknown, is never its to remove.
pub fn plan_sessions(
    sessions: Vec<(String, Option<String>)>,
    capsule: &str,
    current: &str,
    retain: &Retain,
    now_ms: u64,
    is_live: &dyn Fn(&str) -> bool,
) -> Vec<(String, Reason)> {
    let own = sessions
        .into_iter()
        .filter(|(_, c)| c.as_deref() == Some(capsule))
        .map(|(id, _)| id)
        .collect();
    plan(own, IdKind::Session, current, retain, now_ms, is_live)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_pass_ranks_and_removes_only_its_own_capsules_sessions() {
        let now = 100 * DAY;
        let s = |day: u64, tail: u32| id("ses_", day * DAY, tail);
        let retain = Retain {
            max_sessions: Some(1),
            max_age_secs: Some(50 * 86_400),
        };
        let mine = Some("local/pruner".to_string());
        let other = Some("local/other".to_string());
        // (sessions with their capsules, current, removed)
        type Case = (Vec<(String, Option<String>)>, String, Vec<(String, Reason)>);
        let table: Vec<Case> = vec![
            // Another capsule's sessions, older or newer, are not ranked and never removed.
            (
                vec![
                    (s(90, 1), other.clone()),
                    (s(91, 2), mine.clone()),
                    (s(92, 3), other.clone()),
                    (s(99, 4), mine.clone()),
                ],
                s(99, 4),
                vec![(s(91, 2), Reason::MaxSessions)],
            ),
            // Not even by age.
            (
                vec![(s(1, 1), other.clone()), (s(2, 2), None), (s(99, 3), mine.clone())],
                s(99, 3),
                vec![],
            ),
            // Own sessions by age, then by rank among its own.
            (
                vec![
                    (s(1, 1), mine.clone()),
                    (s(97, 2), mine.clone()),
                    (s(98, 3), other.clone()),
                    (s(99, 4), mine.clone()),
                ],
                s(99, 4),
                vec![(s(97, 2), Reason::MaxSessions), (s(1, 1), Reason::MaxAge)],
            ),
        ];
        for (sessions, current, want) in table {
            assert_eq!(
                plan_sessions(sessions.clone(), "local/pruner", &current, &retain, now, &|_| false),
                want,
                "{sessions:?}"
            );
        }
    }

    const DAY: u64 = 86_400_000;

    fn id(prefix: &str, ms: u64, tail: u32) -> String {
        format!("{prefix}{ms:012x}7000{tail:016x}")
    }

    #[test]
    fn keeps_the_newest_and_removes_by_age_first() {
        for (kind, prefix) in [(IdKind::Formation, "frm_"), (IdKind::Session, "ses_")] {
            let now = 100 * DAY;
            let old: Vec<String> = (0..5).map(|i| id(prefix, now - (5 - i) * DAY, i as u32)).collect();
            let current = id(prefix, now, 9);
            let mut all = old.clone();
            all.push(current.clone());
            let retain = Retain {
                max_sessions: Some(3),
                max_age_secs: Some(4 * 86_400 + 1),
            };
            // Ranks: current 0, old[4] 1, old[3] 2, old[2] 3, old[1] 4, old[0] 5 (five days old).
            assert_eq!(
                plan(all, kind, &current, &retain, now, &|_| false),
                vec![
                    (old[2].clone(), Reason::MaxSessions),
                    (old[1].clone(), Reason::MaxSessions),
                    (old[0].clone(), Reason::MaxAge)
                ],
                "{prefix}"
            );
        }
    }

    #[test]
    fn never_removes_the_current_a_newer_or_a_live_id() {
        let now = 10 * DAY;
        let p = "frm_";
        let (old, current, newer, live) = (id(p, DAY, 1), id(p, 2 * DAY, 2), id(p, 3 * DAY, 3), id(p, DAY / 2, 4));
        let retain = Retain {
            max_sessions: Some(1),
            max_age_secs: Some(1),
        };
        let got = plan(
            vec![old.clone(), current.clone(), newer, live.clone()],
            IdKind::Formation,
            &current,
            &retain,
            now,
            &|i| i == live,
        );
        assert_eq!(got, vec![(old, Reason::MaxAge)]);
    }

    #[test]
    fn no_limit_removes_nothing() {
        let retain = Retain {
            max_sessions: None,
            max_age_secs: None,
        };
        let ids = vec![id("ses_", DAY, 1), id("ses_", 2 * DAY, 2)];
        assert!(plan(ids.clone(), IdKind::Session, &ids[1], &retain, 100 * DAY, &|_| false).is_empty());
    }
}
