//! The one place that knows the layout under `~/.murmur` and a project's `.murmur/`.
//!
//! Nothing else joins path segments of the runtime's own directories; callers ask here.

use std::path::{Path, PathBuf};

/// `~/.murmur`, resolved once from `$HOME` and made canonical there.
///
/// A member canonicalises its work folder, so its records group names the home's real path; a
/// home reached through a symlink must name that same path here, or the launcher, `mur trace
/// show` and retention look for a formation's records where no member wrote them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MurHome {
    root: PathBuf,
}

impl MurHome {
    /// `$HOME/.murmur`. A missing or empty `$HOME` falls back to the current user's passwd entry.
    pub fn from_env() -> MurHome {
        let home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                nix::unistd::User::from_uid(nix::unistd::getuid())
                    .ok()
                    .flatten()
                    .map(|u| u.dir)
            })
            .unwrap_or_else(|| PathBuf::from("/"));
        MurHome::at_home(&home)
    }

    /// The `.murmur` directory of the given home directory, after resolving symlinks, `.` and
    /// `..` in it; a home that cannot be resolved (e.g. it does not exist yet) is kept as given.
    pub fn at_home(home: &Path) -> MurHome {
        let home = std::fs::canonicalize(home).unwrap_or_else(|_| home.to_path_buf());
        MurHome {
            root: home.join(".murmur"),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The global artifact store.
    pub fn artifacts(&self) -> PathBuf {
        self.root.join("artifacts")
    }

    /// Root of every records group.
    pub fn records(&self) -> PathBuf {
        self.root.join("records")
    }

    /// Running records, one `<ses_id>.json` per live session.
    pub fn running(&self) -> PathBuf {
        self.root.join("running")
    }

    pub fn running_record(&self, session_id: &str) -> PathBuf {
        self.running().join(format!("{session_id}.json"))
    }

    /// `mur ui`'s owner-only directory: the page `--open` hands the browser lives here.
    pub fn ui(&self) -> PathBuf {
        self.root.join("ui")
    }

    /// The launch page of the `mur ui` serving on `port`.
    pub fn ui_launch_page(&self, port: u16) -> PathBuf {
        self.ui().join(format!("launch-{port}.html"))
    }

    /// Parent of every formation directory.
    pub fn formations(&self) -> PathBuf {
        self.root.join("formations")
    }

    pub fn formation(&self, formation_id: &str) -> PathBuf {
        self.formations().join(formation_id)
    }

    /// The ownership marker of a formation directory.
    pub fn formation_marker(&self, formation_id: &str) -> PathBuf {
        self.formation(formation_id).join("formation.json")
    }

    /// A peer's work folder.
    pub fn member_dir(&self, formation_id: &str, member: &str) -> PathBuf {
        self.formation(formation_id).join(member)
    }

    /// Where a formation's peers serve their doors as Unix sockets [ours]: inside the owner-only
    /// formation directory, under a name no member can have (member names start with a letter).
    pub fn door_sockets(&self, formation_id: &str) -> PathBuf {
        self.formation(formation_id).join(".doors")
    }

    /// A peer's door socket.
    pub fn door_socket(&self, formation_id: &str, member: &str) -> PathBuf {
        self.door_sockets(formation_id).join(format!("{member}.sock"))
    }

    /// The records group of a work folder: `records/<absolute path without its leading />`.
    pub fn records_group(&self, workdir: &Path) -> PathBuf {
        let rel = workdir.strip_prefix("/").unwrap_or(workdir);
        self.records().join(rel)
    }

    /// A peer's task store [ours]: beside its sessions' records directories, in its records
    /// group, so each process the launcher starts for the member finds the one before's tasks.
    pub fn task_store(&self, workdir: &Path) -> PathBuf {
        self.records_group(workdir).join("tasks.db")
    }

    /// One session's records directory.
    pub fn session_records(&self, workdir: &Path, session_id: &str) -> PathBuf {
        self.records_group(workdir).join(session_id)
    }

    /// Where the members' records of one formation live (all peers' groups sit below it).
    pub fn formation_records(&self, formation_id: &str) -> PathBuf {
        self.records_group(&self.formation(formation_id))
    }

    /// The compiled-component cache: native code this user's own runtime compiled, 0700. Never a
    /// project's: a project directory may come from anyone.
    pub fn compiled(&self) -> PathBuf {
        self.root.join("compiled")
    }

    /// `~/.murmur/config.yaml`.
    pub fn config(&self) -> PathBuf {
        self.root.join("config.yaml")
    }
}

/// A project directory's own store and lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Project {
    root: PathBuf,
}

impl Project {
    pub fn at(root: impl Into<PathBuf>) -> Project {
        Project { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<project>/.murmur/artifacts`.
    pub fn artifacts(&self) -> PathBuf {
        self.root.join(".murmur").join("artifacts")
    }

    pub fn lock(&self) -> PathBuf {
        self.root.join("murmur.lock")
    }

    pub fn manifest(&self) -> PathBuf {
        self.root.join("murmur.yaml")
    }

    pub fn roster(&self) -> PathBuf {
        self.root.join("roster.yaml")
    }
}

/// The nearest directory at or above `start` holding a file named one of `markers` (e.g.
/// `["murmur.yaml"]` for `mur install`, `["murmur.yaml", "roster.yaml"]` for `mur list`).
pub fn find_project_root(start: &Path, markers: &[&str]) -> Option<Project> {
    start
        .ancestors()
        .find(|dir| markers.iter().any(|m| dir.join(m).is_file()))
        .map(Project::at)
}

/// Where an artifact's zip and sidecar live inside a store root.
pub fn artifact_dir(store: &Path, scope: &str, name: &str, version: &str) -> PathBuf {
    store.join(scope).join(name).join(version)
}

pub fn artifact_zip(store: &Path, scope: &str, name: &str, version: &str) -> PathBuf {
    artifact_dir(store, scope, name, version).join(format!("{name}-{version}.mur.zip"))
}

pub fn artifact_sidecar(store: &Path, scope: &str, name: &str, version: &str) -> PathBuf {
    artifact_dir(store, scope, name, version).join(format!("{name}-{version}.sha256"))
}

/// The approved definitions of an artifact's MCP tools ([`crate::tool_pins`]), beside its zip
/// (`zip` is [`artifact_zip`]'s path).
pub fn tool_pins_beside(zip: &Path) -> PathBuf {
    zip.with_file_name(crate::tool_pins::FILE)
}

/// `path` with the home directory written `~`, as a person reads it (listings of `mur ps -a`
/// and `mur ui`).
pub fn tilde(path: &str) -> String {
    tilde_under(path, std::env::var("HOME").ok().as_deref())
}

/// [`tilde`] with `home` given; a home of `/` or empty shortens nothing.
pub fn tilde_under(path: &str, home: Option<&str>) -> String {
    match home.filter(|h| !h.is_empty() && *h != "/") {
        Some(home) if path == home => "~".into(),
        Some(home) => match path.strip_prefix(&format!("{home}/")) {
            Some(rest) => format!("~/{rest}"),
            None => path.to_string(),
        },
        None => path.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_the_spec() {
        let h = MurHome::at_home(Path::new("/home/u"));
        assert_eq!(h.artifacts(), Path::new("/home/u/.murmur/artifacts"));
        assert_eq!(h.compiled(), Path::new("/home/u/.murmur/compiled"));
        assert_eq!(
            h.session_records(Path::new("/srv/proj"), "ses_1"),
            Path::new("/home/u/.murmur/records/srv/proj/ses_1")
        );
        assert_eq!(
            h.records_group(&h.member_dir("frm_1", "coder")),
            Path::new("/home/u/.murmur/records/home/u/.murmur/formations/frm_1/coder")
        );
        assert_eq!(
            artifact_zip(Path::new("/s"), "local", "coder", "1.2.0"),
            Path::new("/s/local/coder/1.2.0/coder-1.2.0.mur.zip")
        );
        assert_eq!(Project::at("/p").artifacts(), Path::new("/p/.murmur/artifacts"));
    }

    #[test]
    fn a_home_reached_through_a_symlink_is_its_real_path() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let real = base.join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, base.join("link")).unwrap();
        let table = [
            (base.join("link"), real.join(".murmur")),
            (base.join("link/../real/."), real.join(".murmur")),
            (real.clone(), real.join(".murmur")),
            // Not there yet: kept as given.
            (base.join("absent"), base.join("absent/.murmur")),
        ];
        for (home, want) in table {
            assert_eq!(MurHome::at_home(&home).root(), want, "{}", home.display());
        }
        let via_link = MurHome::at_home(&base.join("link"));
        assert_eq!(
            via_link.formation_records("frm_1"),
            MurHome::at_home(&real).records_group(&real.join(".murmur/formations/frm_1")),
            "the launcher's records of a formation are where its members write them"
        );
    }
}

#[cfg(test)]
mod tilde_tests {
    use super::tilde_under;

    #[test]
    fn the_home_directory_is_written_as_a_tilde() {
        let cases = [
            ("/home/ann/work/team", Some("/home/ann"), "~/work/team"),
            ("/home/ann", Some("/home/ann"), "~"),
            ("/home/anna/x", Some("/home/ann"), "/home/anna/x"),
            ("/srv/x", Some("/home/ann"), "/srv/x"),
            ("/srv/x", Some("/"), "/srv/x"),
            ("/srv/x", Some(""), "/srv/x"),
            ("/srv/x", None, "/srv/x"),
        ];
        for (path, home, want) in cases {
            assert_eq!(tilde_under(path, home), want, "{path} under {home:?}");
        }
    }
}
