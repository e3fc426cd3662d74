//! Running records: `~/.murmur/running/<ses_id>.json`, one per live session
//! (docs/reference/formation.md#directories).
//!
//! A record is written (0600, in a 0700 directory) once the door is up and removed when the
//! session's process exits. It is how `mur ps`, `mur stop` and retention find live sessions; a
//! record whose process is gone is dead and pruned by readers.

use std::io::Read;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::paths::MurHome;
use crate::procinfo;
use crate::secret::Secret;

/// The launcher that started a formation member, as the channel named it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LauncherRef {
    pub pid: u32,
    pub process_start: String,
}

#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct RunningRecord {
    pub capsule_name: String,
    pub capsule_version: String,
    /// The operator door token; present only for authenticating doors. The file is 0600, and
    /// the one place the token is written.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::secret::reveal_in_file"
    )]
    pub door_token: Option<Secret>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub formation_entry: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub formation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub formation_launcher: Option<LauncherRef>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub formation_lifeline: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub formation_member: Option<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub outlives_launcher: bool,
    pub pid: u32,
    pub process_start: String,
    pub records_dir: String,
    pub session_id: String,
    pub started_at: String,
    pub url: String,
    pub workdir: String,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl std::fmt::Debug for RunningRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningRecord")
            .field("session_id", &self.session_id)
            .field(
                "capsule",
                &format_args!("{}@{}", self.capsule_name, self.capsule_version),
            )
            .field("pid", &self.pid)
            .field("formation_id", &self.formation_id)
            .field("formation_member", &self.formation_member)
            .field("door_token", &self.door_token)
            .finish()
    }
}

impl RunningRecord {
    /// True while the recorded process still runs (same pid and start token).
    pub fn is_live(&self) -> bool {
        procinfo::is_alive(self.pid, Some(&self.process_start))
    }

    /// Compact JSON with keys in ascending order (docs/reference/cli.md#conventions).
    pub fn to_json(&self) -> String {
        serde_json::to_value(self).map(|v| v.to_string()).unwrap_or_default()
    }

    /// Writes the record atomically, at 0600 (`file::write_atomic`): a failed write (a full disk)
    /// leaves nothing half-written behind.
    pub fn write(&self, home: &MurHome) -> std::io::Result<PathBuf> {
        let dir = home.running();
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
        let path = home.running_record(&self.session_id);
        crate::file::write_atomic(&path, format!("{}\n", self.to_json()).as_bytes(), 0o600)?;
        Ok(path)
    }
}

/// Largest record read; a record is a few hundred bytes.
const MAX_RECORD_BYTES: u64 = 64 << 10;

/// Removes a session's record (best effort: a missing record is fine). An id that is not a plain
/// file name removes nothing: the record of a session is a file in the running directory, never a
/// path elsewhere.
pub fn remove(home: &MurHome, session_id: &str) {
    if session_id.is_empty() || session_id.contains('/') {
        return;
    }
    let _ = std::fs::remove_file(home.running_record(session_id));
}

/// A record file as found in the running directory.
struct Found {
    path: PathBuf,
    record: RunningRecord,
    /// The record's `session_id` is its file's name, as every record the runtime writes.
    named: bool,
}

/// Every record that parses, with its path. `Err` when the directory exists but cannot be read.
fn scan(home: &MurHome) -> std::io::Result<Vec<Found>> {
    let dir = home.running();
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        if let Some(record) = read_one(&path) {
            let named = path.file_stem().and_then(|s| s.to_str()) == Some(record.session_id.as_str());
            out.push(Found { path, record, named });
        }
    }
    out.sort_by(|a, b| a.record.session_id.cmp(&b.record.session_id));
    Ok(out)
}

/// Every readable record, live or not. A record whose `session_id` is not its file's name was not
/// written by the runtime and is left out, so a session id read from a record always names the
/// file it came from. `Err` when the directory exists but cannot be read.
pub fn read_all(home: &MurHome) -> std::io::Result<Vec<RunningRecord>> {
    Ok(scan(home)?.into_iter().filter(|f| f.named).map(|f| f.record).collect())
}

fn read_one(path: &Path) -> Option<RunningRecord> {
    let mut text = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_RECORD_BYTES + 1)
        .read_to_end(&mut text)
        .ok()?;
    if text.len() as u64 > MAX_RECORD_BYTES {
        return None;
    }
    serde_json::from_slice(&text).ok()
}

/// Live records only; dead ones are deleted on the way (best effort), by the name of the file
/// they were read from, whatever `session_id` they carry.
pub fn live(home: &MurHome) -> std::io::Result<Vec<RunningRecord>> {
    let all = scan(home)?;
    let mut out = Vec::with_capacity(all.len());
    for found in all {
        if !found.record.is_live() {
            let _ = std::fs::remove_file(&found.path);
        } else if found.named {
            out.push(found.record);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips_with_sorted_keys_and_omits_absent_formation_keys() {
        let dir = tempfile::tempdir().unwrap();
        let home = MurHome::at_home(dir.path());
        let rec = RunningRecord {
            capsule_name: "local/echo".into(),
            capsule_version: "0.1.0".into(),
            pid: std::process::id(),
            process_start: procinfo::own_start().unwrap(),
            records_dir: "/r".into(),
            session_id: "ses_0".into(),
            started_at: "2026-01-01T00:00:00.000Z".into(),
            url: "localhost:1".into(),
            workdir: "/w".into(),
            ..Default::default()
        };
        let json = rec.to_json();
        assert!(
            json.starts_with(r#"{"capsule_name":"local/echo","capsule_version":"0.1.0","pid":"#),
            "{json}"
        );
        assert!(!json.contains("formation"), "{json}");
        let path = rec.write(&home).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(live(&home).unwrap(), vec![rec.clone()]);
        let dead = RunningRecord {
            session_id: "ses_1".into(),
            process_start: "1".into(),
            ..rec
        };
        dead.write(&home).unwrap();
        assert_eq!(live(&home).unwrap().len(), 1);
        assert!(!home.running_record("ses_1").exists(), "dead record pruned");
    }

    #[test]
    fn a_record_that_cannot_be_written_leaves_no_temp_file_behind() {
        let dir = tempfile::tempdir().unwrap();
        let home = MurHome::at_home(dir.path());
        let rec = RunningRecord {
            session_id: "ses_2".into(),
            ..Default::default()
        };
        // A non-empty directory where the record goes: the final rename fails.
        std::fs::create_dir_all(home.running_record("ses_2").join("x")).unwrap();
        assert!(rec.write(&home).is_err());
        let names: Vec<String> = std::fs::read_dir(home.running())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["ses_2.json"], "only the blocking directory is left");
    }

    /// A record is known by its file's name: the `session_id` inside never names a path.
    #[test]
    fn a_record_is_pruned_by_its_file_name_never_by_the_id_inside() {
        let dir = tempfile::tempdir().unwrap();
        let home = MurHome::at_home(dir.path());
        let victim = dir.path().join("victim.json");
        std::fs::write(&victim, "keep").unwrap();
        std::fs::create_dir_all(home.running()).unwrap();
        // `running/../../victim.json` is the victim, beside `.murmur`.
        assert_eq!(
            home.running_record("../../victim").canonicalize().ok(),
            victim.canonicalize().ok()
        );
        let me = RunningRecord {
            pid: std::process::id(),
            process_start: procinfo::own_start().unwrap(),
            ..Default::default()
        };
        let write = |file: &str, rec: &RunningRecord| {
            std::fs::write(home.running().join(file), rec.to_json()).unwrap();
        };
        let dead = RunningRecord {
            session_id: "../../victim".into(),
            process_start: "1".into(),
            ..me.clone()
        };
        let liar = RunningRecord {
            session_id: "../../victim".into(),
            ..me.clone()
        };
        write("ses_dead.json", &dead);
        write("ses_liar.json", &liar);
        assert_eq!(read_all(&home).unwrap(), vec![], "a misnamed record is not listed");
        assert_eq!(live(&home).unwrap(), vec![]);
        assert!(!home.running().join("ses_dead.json").exists(), "the dead record went");
        assert!(
            home.running().join("ses_liar.json").exists(),
            "a live process keeps its file"
        );
        remove(&home, "../../victim");
        remove(&home, "");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        // An oversized file is no record, however well formed.
        let big = RunningRecord {
            session_id: "ses_big".into(),
            ..me.clone()
        };
        let padded = format!("{}{}", big.to_json(), " ".repeat(70 << 10));
        std::fs::write(home.running().join("ses_big.json"), &padded[..64 << 10]).unwrap();
        assert_eq!(read_all(&home).unwrap(), vec![big.clone()], "64 KiB is read");
        std::fs::write(home.running().join("ses_big.json"), padded).unwrap();
        assert_eq!(read_all(&home).unwrap(), vec![]);
    }
}
