//! The session retention pass (docs/reference/formation.md#retention): at session end, a capsule
//! with `trace.retain` bounds its own `ses_` directories in its records group by `max_sessions` and
//! `max_age`, never removing another capsule's session, the current session, a newer one, or one
//! whose running record is live.
//!
//! The decision is `crate::retention::plan_sessions`; [`run`] reads the group (and each session's
//! capsule from its trace's first record) and applies it.

use std::path::Path;

use crate::ids::{self, IdKind};
use crate::manifest::Retain;
use crate::paths::MurHome;

use super::records::Console;

/// The `ses_` directories (not symlinks) directly under `group`.
fn sessions_in(group: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(group) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir() && !t.is_symlink()))
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|n| ids::is(IdKind::Session, n))
        .collect()
}

/// Applies the pass to the records group holding `current`, a session of `capsule`; one stderr
/// line per removal.
pub fn run(home: &MurHome, group: &Path, current: &str, capsule: &str, retain: &Retain, console: &Console) {
    let sessions = sessions_in(group);
    if sessions.len() <= 1 {
        return;
    }
    let sessions: Vec<(String, Option<String>)> = sessions
        .into_iter()
        .map(|id| {
            let of = crate::trace::read::read_session_capsule(&group.join(&id).join("trace.jsonl"));
            (id, of)
        })
        .collect();
    // An unreadable running directory makes every session count as live.
    let running = crate::running::live(home).ok();
    let is_live = |id: &str| {
        running
            .as_ref()
            .is_none_or(|r| r.iter().any(|rec| rec.session_id == id))
    };
    let now_ms = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0);
    for (id, reason) in crate::retention::plan_sessions(sessions, capsule, current, retain, now_ms, &is_live) {
        if std::fs::remove_dir_all(group.join(&id)).is_ok() {
            console.note(&format!("retention: removed session {id} ({})", reason.as_str()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: u64 = 86_400_000;

    fn ses(ms: u64, tail: u32) -> String {
        format!("ses_{ms:012x}7000{tail:016x}")
    }

    #[test]
    fn run_removes_directories_of_the_group() {
        let tmp = tempfile::tempdir().unwrap();
        let home = MurHome::at_home(tmp.path());
        let group = tmp.path().join("group");
        let (a, b, cur) = (ses(DAY, 1), ses(2 * DAY, 2), crate::ids::mint(IdKind::Session));
        for s in [&a, &b, &cur] {
            std::fs::create_dir_all(group.join(s)).unwrap();
            std::fs::write(
                group.join(s).join("trace.jsonl"),
                "{\"event_type\":\"session_start\",\"capsule_name\":\"local/kept\"}\n",
            )
            .unwrap();
        }
        std::fs::create_dir_all(group.join("not-a-session")).unwrap();
        run(
            &home,
            &group,
            &cur,
            "local/kept",
            &Retain {
                max_sessions: Some(2),
                max_age_secs: None,
            },
            &Console::new(),
        );
        assert!(group.join(&cur).is_dir() && group.join(&b).is_dir() && group.join("not-a-session").is_dir());
        assert!(!group.join(&a).exists());
    }
}
