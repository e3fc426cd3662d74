//! The formation retention pass (docs/reference/formation.md#retention).
//!
//! The decision is `crate::retention::plan` (pure, shared with the session pass); this module
//! finds the candidates — directories whose marker names this project — and applies it.

use crate::ids::{self, IdKind};
use crate::manifest::Retain;
use crate::marker::{self, Marker};
use crate::paths::MurHome;
use std::path::Path;

/// A formation directory that belongs to this project.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub formation_id: String,
    pub marker: Marker,
}

/// Lists candidates: directories (not symlinks) named like a formation id whose marker parses and
/// names `project_dir` (compared after canonicalisation).
pub fn candidates(home: &MurHome, project_dir: &Path) -> Vec<Candidate> {
    let project = std::fs::canonicalize(project_dir).unwrap_or_else(|_| project_dir.to_path_buf());
    let Ok(entries) = std::fs::read_dir(home.formations()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let Ok(ft) = entry.file_type() else { continue };
        if !ft.is_dir() || ft.is_symlink() {
            continue;
        }
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if !ids::is(IdKind::Formation, &name) {
            continue;
        }
        let Some(m) = marker::read(&home.formation_marker(&name)) else {
            continue;
        };
        let named = std::fs::canonicalize(&m.project_dir).unwrap_or_else(|_| Path::new(&m.project_dir).to_path_buf());
        if named == project {
            out.push(Candidate {
                formation_id: name,
                marker: m,
            });
        }
    }
    out
}

/// Runs the pass for the formation `current` of `project_dir` and prints one stderr line per
/// removal. Nothing goes to stdout.
pub fn run(home: &MurHome, project_dir: &Path, current: &str, retain: &Retain) {
    let cands = candidates(home, project_dir);
    if cands.is_empty() {
        return;
    }
    // An unreadable running directory makes every formation count as running.
    let running = crate::running::live(home).ok();
    let is_live = |id: &str| -> bool {
        let Some(running) = &running else { return true };
        let Some(c) = cands.iter().find(|c| c.formation_id == id) else {
            return true;
        };
        let launcher_start = (!c.marker.launcher_start.is_empty()).then_some(c.marker.launcher_start.as_str());
        if launcher_start.is_some() && crate::procinfo::is_alive(c.marker.launcher_pid, launcher_start) {
            return true;
        }
        running
            .iter()
            .any(|r| r.formation_id.as_deref() == Some(c.formation_id.as_str()))
    };
    let now_ms = chrono::Utc::now().timestamp_millis().max(0) as u64;
    let ids = cands.iter().map(|c| c.formation_id.clone()).collect();
    for (frm, reason) in crate::retention::plan(ids, IdKind::Formation, current, retain, now_ms, &is_live) {
        let _ = std::fs::remove_dir_all(home.formation(&frm));
        let _ = std::fs::remove_dir_all(home.formation_records(&frm));
        eprintln!("[mur run] retention: removed formation {frm} ({})", reason.as_str());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: u64 = 86_400_000;

    fn frm(ms: u64, tail: u32) -> String {
        format!("frm_{ms:012x}7000{tail:016x}")
    }

    #[test]
    fn candidates_need_a_marker_naming_this_project() {
        let dir = tempfile::tempdir().unwrap();
        let home = MurHome::at_home(&dir.path().join("home"));
        let project = dir.path().join("proj");
        std::fs::create_dir_all(&project).unwrap();
        let other = dir.path().join("other");
        std::fs::create_dir_all(&other).unwrap();
        let mk = |id: &str, proj: &Path| {
            let m = Marker {
                launcher_pid: 1,
                launcher_start: String::new(),
                project_dir: proj.display().to_string(),
                ..Marker::default()
            };
            marker::write(&home, id, &m).unwrap();
        };
        let mine = frm(DAY, 1);
        mk(&mine, &project);
        mk(&frm(DAY, 2), &other);
        std::fs::create_dir_all(home.formation(&frm(DAY, 3))).unwrap(); // no marker
        std::fs::create_dir_all(home.formation("not-an-id")).unwrap();
        std::fs::write(home.formation_marker(&frm(DAY, 3)), "{not json").unwrap();
        let got: Vec<String> = candidates(&home, &project)
            .into_iter()
            .map(|c| c.formation_id)
            .collect();
        assert_eq!(got, vec![mine]);
    }
}
