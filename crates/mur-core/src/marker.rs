//! `formation.json`: the ownership marker of a formation directory
//! (docs/reference/formation.md#retention).
//!
//! Retention removes a formation directory only when its marker names this project and its
//! launcher is gone, so the marker is written before the first peer directory exists.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::paths::MurHome;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    pub launcher_pid: u32,
    /// The launcher's start token; empty when it could not be read.
    pub launcher_start: String,
    /// The roster's project directory, symlinks resolved.
    pub project_dir: String,
    /// The roster's members, the entry first: what `mur trace show` expects to find a trace of.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<String>,
    /// The first words of `--task`, for `mur trace list` (absent for a formation that serves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
}

/// The most characters of a task a marker keeps: enough to tell runs apart in a listing.
pub const TASK_WORDS_CHARS: usize = 60;

/// The first words of `task`, on one line, at most [`TASK_WORDS_CHARS`] characters (`…` when cut).
pub fn first_words(task: &str) -> String {
    let line = task.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= TASK_WORDS_CHARS {
        return line;
    }
    let cut: String = line.chars().take(TASK_WORDS_CHARS - 1).collect();
    // At a word's end when there is one in the second half.
    let at = cut
        .rfind(' ')
        .filter(|&i| i > TASK_WORDS_CHARS / 2)
        .unwrap_or(cut.len());
    format!("{}…", &cut[..at])
}

/// Makes `~/.murmur/formations/` and `<frm>/` owner-only, then writes the marker at 0600.
pub fn write(home: &MurHome, formation_id: &str, marker: &Marker) -> std::io::Result<()> {
    let parent = home.formations();
    // A regular file in the way makes `create` say "File exists", which reads like a race.
    if std::fs::metadata(&parent).is_ok_and(|m| !m.is_dir()) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotADirectory,
            format!("{} is not a directory", parent.display()),
        ));
    }
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&parent)?;
    std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o700))?;
    let dir = home.formation(formation_id);
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    let json = serde_json::to_value(marker)
        .map(|v| v.to_string())
        .map_err(std::io::Error::other)?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(home.formation_marker(formation_id))?;
    f.write_all(json.as_bytes())?;
    f.write_all(b"\n")?;
    f.sync_all()
}

/// Reads a marker; `None` when it is absent or does not parse.
pub fn read(path: &Path) -> Option<Marker> {
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_is_written_owner_only_with_sorted_keys() {
        let dir = tempfile::tempdir().unwrap();
        let home = MurHome::at_home(dir.path());
        let m = Marker {
            launcher_pid: 42,
            launcher_start: "7".into(),
            project_dir: "/p".into(),
            ..Marker::default()
        };
        write(&home, "frm_x", &m).unwrap();
        let path = home.formation_marker("frm_x");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\"launcher_pid\":42,\"launcher_start\":\"7\",\"project_dir\":\"/p\"}\n"
        );
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&home.formation("frm_x")), 0o700);
        assert_eq!(mode(&home.formations()), 0o700);
        assert_eq!(read(&path), Some(m));
    }

    #[test]
    fn a_marker_names_its_members_and_the_tasks_first_words() {
        let dir = tempfile::tempdir().unwrap();
        let home = MurHome::at_home(dir.path());
        let m = Marker {
            launcher_pid: 42,
            launcher_start: "7".into(),
            project_dir: "/p".into(),
            members: vec!["lead".into(), "worker".into()],
            task: Some(first_words("say\n  hi")),
        };
        write(&home, "frm_x", &m).unwrap();
        let path = home.formation_marker("frm_x");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\"launcher_pid\":42,\"launcher_start\":\"7\",\"members\":[\"lead\",\"worker\"],\"project_dir\":\"/p\",\"task\":\"say hi\"}\n"
        );
        assert_eq!(read(&path), Some(m));
        let long = first_words(&"word ".repeat(40));
        assert!(
            long.ends_with("word…") && long.chars().count() <= TASK_WORDS_CHARS,
            "{long}"
        );
    }

    #[test]
    fn a_file_in_place_of_the_formations_directory_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let home = MurHome::at_home(dir.path());
        std::fs::create_dir_all(home.formations().parent().unwrap()).unwrap();
        std::fs::write(home.formations(), "not a directory").unwrap();
        let m = Marker {
            launcher_pid: 1,
            launcher_start: String::new(),
            project_dir: "/p".into(),
            ..Marker::default()
        };
        let e = write(&home, "frm_x", &m).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotADirectory);
        assert_eq!(
            e.to_string(),
            format!("{} is not a directory", home.formations().display())
        );
    }
}
