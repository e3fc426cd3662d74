//! The one admission front end (docs/reference/formation.md#launch-sequence steps 3–6): the
//! roster's project directory, its stores, its lock, then admission (checks 1–8). `mur run
//! --roster`, `mur doctor` and `mur deploy` all admit through here, so a roster is refused by each
//! of them with the same code and text.
//!
//! Pure: reads files and writes nothing; no actix, HTTP or processes. Each command keeps what is
//! its own (the launcher's E-RUN-046 check, doctor's choice of directory, how a refusal prints).

use std::path::{Path, PathBuf};

use super::Admitted;
use crate::diag::{self, Diagnostic};
use crate::paths::{MurHome, Project};
use crate::store::{Stores, lock::Lock};

/// An admitted roster and the project it was admitted from.
#[derive(Debug, Clone)]
pub struct Admission {
    /// The roster's directory: the one its stores, lock and (for the entry) work folder are in.
    pub project_dir: PathBuf,
    pub admitted: Admitted,
}

/// docs/reference/formation.md#launch-sequence step 3: the project directory a `--roster PATH`
/// argument names (a directory, or a file named `roster.yaml` in it), symlinks resolved when it
/// exists.
pub fn project_dir(arg: &Path) -> Result<PathBuf, Diagnostic> {
    let dir = if arg.is_dir() {
        arg.to_path_buf()
    } else if arg.file_name().is_some_and(|n| n == "roster.yaml") {
        arg.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf()
    } else {
        return Err(Diagnostic::new(
            diag::E_ROS_001,
            format!(
                "{}: a roster is read from roster.yaml in its project directory, and this path is neither a directory nor a file named roster.yaml",
                arg.display()
            ),
        ));
    };
    Ok(std::fs::canonicalize(&dir).unwrap_or(dir))
}

/// docs/reference/formation.md#launch-sequence steps 3–6 for a `--roster PATH` argument (`mur run
/// --roster`, `mur deploy`).
pub fn admit_arg(arg: &Path, home: &MurHome) -> Result<Admission, Diagnostic> {
    let project_dir = project_dir(arg)?;
    let admitted = admit_project(&project_dir, home)?;
    Ok(Admission { project_dir, admitted })
}

/// docs/reference/formation.md#launch-sequence steps 4–6 for the roster in `dir`: the stores (the
/// project's, then the global one), the lock (E-RUN-003), then admission, whose check 1 reads
/// `roster.yaml`. The lock is read first, so an unreadable lock is the refusal whatever the roster
/// holds.
pub fn admit_project(dir: &Path, home: &MurHome) -> Result<Admitted, Diagnostic> {
    let project = Project::at(dir);
    let stores = Stores::new(Some(project.artifacts()), home.artifacts());
    let lock = Lock::read(&project.lock())?;
    let roster = super::read(&project.roster())?;
    super::admit(&roster, &stores, lock.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DUPLICATE: &str = "roster_version: 1\nmembers:\n  - {name: x, capsule: local/x, version: '1', entry: true}\n  - {name: x, capsule: local/x, version: '1'}\n";
    const NOT_INSTALLED: &str =
        "roster_version: 1\nmembers:\n  - {name: x, capsule: local/x, version: '1', entry: true}\n";
    const BAD_LOCK: &str = "lock_version: 2\n";
    const GOOD_LOCK: &str = "lock_version: 3\n";

    /// The first refusal of a project holding `roster` and `lock` (`None`: the file is absent).
    fn refusal(roster: Option<&str>, lock: Option<&str>) -> String {
        let dir = tempfile::tempdir().unwrap();
        if let Some(r) = roster {
            std::fs::write(dir.path().join("roster.yaml"), r).unwrap();
        }
        if let Some(l) = lock {
            std::fs::write(dir.path().join("murmur.lock"), l).unwrap();
        }
        let home = MurHome::at_home(&dir.path().join("home"));
        match admit_project(dir.path(), &home) {
            Ok(a) => panic!("admitted {roster:?} with lock {lock:?}: {a:?}"),
            Err(d) => d.code.id.to_string(),
        }
    }

    #[test]
    fn the_lock_is_read_before_the_roster_is_admitted() {
        let cases: &[(Option<&str>, Option<&str>, &str)] = &[
            // An unreadable lock is the refusal, whatever the roster holds
            // (docs/reference/formation.md#launch-sequence step 5 before 6).
            (Some(DUPLICATE), Some(BAD_LOCK), "E-RUN-003"),
            (Some("members: ["), Some(BAD_LOCK), "E-RUN-003"),
            (None, Some(BAD_LOCK), "E-RUN-003"),
            (Some(NOT_INSTALLED), Some("lock_version: [\n"), "E-RUN-003"),
            // A readable or absent lock leaves the roster's own refusal.
            (Some(DUPLICATE), Some(GOOD_LOCK), "E-ROS-003"),
            (Some(DUPLICATE), None, "E-ROS-003"),
            (None, None, "E-ROS-001"),
            (Some(NOT_INSTALLED), Some(GOOD_LOCK), "E-ROS-007"),
        ];
        for &(roster, lock, code) in cases {
            assert_eq!(refusal(roster, lock), code, "roster {roster:?}, lock {lock:?}");
        }
    }

    #[test]
    fn a_roster_argument_names_a_directory_or_its_roster_yaml() {
        let dir = tempfile::tempdir().unwrap();
        let canonical = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::write(dir.path().join("other.yaml"), "").unwrap();
        let cases: &[(PathBuf, Option<PathBuf>)] = &[
            (dir.path().to_path_buf(), Some(canonical.clone())),
            (dir.path().join("roster.yaml"), Some(canonical.clone())),
            (PathBuf::from("roster.yaml"), std::fs::canonicalize(".").ok()),
            (dir.path().join("other.yaml"), None),
            (dir.path().join("absent"), None),
        ];
        for (arg, want) in cases {
            match (project_dir(arg), want) {
                (Ok(got), Some(want)) => assert_eq!(&got, want, "{}", arg.display()),
                (Err(d), None) => {
                    assert_eq!(d.code, diag::E_ROS_001, "{}", arg.display());
                    assert!(d.message.starts_with(&format!("{}: ", arg.display())), "{}", d.message);
                }
                (got, want) => panic!("{}: got {got:?}, want {want:?}", arg.display()),
            }
        }
    }
}
