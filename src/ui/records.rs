//! Where `mur ui` finds what it shows: every `trace.jsonl` under `~/.murmur/records/` whose first
//! record is a formation member's `session_start`, grouped by formation. Read-only (unlike
//! `mur ps`, it prunes no running record), and bounded: the walk visits at most [`MAX_DIRS`]
//! directories, a trace is read up to [`TRACE_BYTES`], a log's tail up to [`LOG_BYTES`].
//!
//! A trace's first record never changes, so the index reads it once per path; a formation's
//! row (tokens, end) is read again only when one of its traces changed length.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::paths::MurHome;
use crate::sync::lock;
use crate::trace::read::{FIRST_RECORD_BYTES, parse_records};
use crate::trace::view::{self, FormationView, SessionRecords};

/// Directories one walk of the records tree visits at most.
pub const MAX_DIRS: usize = 50_000;
/// How deep below `records/` a trace may sit (a records group is an absolute path).
const MAX_DEPTH: usize = 64;
/// The bytes of one trace the page reads: far beyond any run a person reads in a browser, far
/// below the 64 MiB a trace may reach.
pub const TRACE_BYTES: u64 = 16 << 20;
/// The tail of a `logs/bootstrap.log` read for its diagnostics.
pub const LOG_BYTES: u64 = 64 << 10;
/// Diagnostics kept per member.
const MAX_DIAGNOSTICS: usize = 50;
/// The bytes of one task's answer shown, and of all answers on one page.
pub const ANSWER_BYTES: u64 = 4 << 10;
const PAGE_ANSWER_BYTES: u64 = 1 << 20;

/// One member session's trace, as its first record names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceFile {
    pub path: PathBuf,
    pub formation_id: String,
    pub session_id: String,
    /// Its records are not under the formation's directory: the entry's, in the project.
    pub entry: bool,
}

/// A formation's row in the list.
#[derive(Debug, Clone, Default)]
pub struct FormationRow {
    pub formation_id: String,
    pub running: bool,
    pub status: String,
    pub started_ms: u64,
    pub ended_ms: Option<u64>,
    pub members: Vec<String>,
    pub tokens: u64,
    /// The roster's directory (`~` for the home directory), from the formation's marker.
    pub roster_dir: Option<String>,
    /// The first words of its task: `--task`'s, else the entry's first task's (`texts.jsonl`).
    pub task_words: Option<String>,
    /// The shortest prefix of the id no other listed formation's id starts with.
    pub short_id: String,
}

/// The index: first records by path (`None`: not a formation member's), and formation rows by
/// the lengths of their traces when they were read.
#[derive(Default)]
pub struct Index {
    first: std::sync::Mutex<HashMap<PathBuf, Option<TraceFile>>>,
    rows: std::sync::Mutex<HashMap<String, (Vec<u64>, FormationRow)>>,
}

impl Index {
    /// Every formation member's trace under the records tree, in path order.
    pub fn traces(&self, home: &MurHome) -> Vec<TraceFile> {
        let paths = walk(&home.records());
        let mut first = lock(&self.first);
        let mut out = Vec::new();
        for path in paths {
            let known = first.entry(path.clone()).or_insert_with(|| read_first(home, &path));
            // A trace whose first line is not written yet is looked at again next time.
            match known {
                Some(t) => out.push(t.clone()),
                None => {
                    first.remove(&path);
                }
            }
        }
        out
    }

    /// The formations, running first, then newest first.
    pub fn formations(&self, home: &MurHome) -> Vec<FormationRow> {
        let mut by_formation: BTreeMap<String, Vec<TraceFile>> = BTreeMap::new();
        for t in self.traces(home) {
            by_formation.entry(t.formation_id.clone()).or_default().push(t);
        }
        let alive = alive_formations(home);
        let mut rows = Vec::new();
        let mut cache = lock(&self.rows);
        for (id, files) in by_formation {
            let lengths: Vec<u64> = files.iter().map(|f| file_len(&f.path)).collect();
            let running = alive.contains(&id);
            let row = match cache.get(&id).filter(|(l, _)| *l == lengths) {
                Some((_, row)) => row.clone(),
                None => {
                    let v = view_of(&id, &files);
                    let row = FormationRow {
                        formation_id: id.clone(),
                        running: false,
                        status: String::new(),
                        started_ms: v.started_ms,
                        ended_ms: v.ended_ms,
                        members: v.members.iter().map(|m| m.name.clone()).collect(),
                        tokens: v.usage.input_tokens + v.usage.output_tokens,
                        ..FormationRow::default()
                    };
                    let marker = crate::marker::read(&home.formation_marker(&id));
                    let row = FormationRow {
                        roster_dir: marker.as_ref().map(|m| crate::paths::tilde(&m.project_dir)),
                        task_words: marker.and_then(|m| m.task).or_else(|| first_task_words(&files)),
                        ..row
                    };
                    // The exit status of a formation that ended does not change.
                    let mut cached = row.clone();
                    cached.status = v.status(false);
                    cache.insert(id.clone(), (lengths, cached.clone()));
                    cached
                }
            };
            rows.push(FormationRow {
                running,
                status: if running { "running".into() } else { row.status.clone() },
                ..row
            });
        }
        rows.sort_by(|a, b| {
            (!a.running, std::cmp::Reverse(a.started_ms)).cmp(&(!b.running, std::cmp::Reverse(b.started_ms)))
        });
        let ids: Vec<String> = rows.iter().map(|r| r.formation_id.clone()).collect();
        for r in &mut rows {
            r.short_id = crate::ids::shortest_prefix(&r.formation_id, &ids);
        }
        rows
    }

    /// The traces of one formation.
    pub fn formation_traces(&self, home: &MurHome, formation_id: &str) -> Vec<TraceFile> {
        self.traces(home)
            .into_iter()
            .filter(|t| t.formation_id == formation_id)
            .collect()
    }
}

/// The first words of the entry's first task, from the `texts.jsonl` beside its trace (its
/// first line, read to at most 64 KiB).
fn first_task_words(files: &[TraceFile]) -> Option<String> {
    let entry = files.iter().find(|f| f.entry)?;
    let mut head = Vec::new();
    std::fs::File::open(entry.path.with_file_name(crate::trace::texts::FILE))
        .ok()?
        .take(64 << 10)
        .read_to_end(&mut head)
        .ok()?;
    let line = &head[..head.iter().position(|&b| b == b'\n')?];
    let v: serde_json::Value = serde_json::from_slice(line).ok()?;
    let text = v["text"]
        .as_str()
        .filter(|_| v["event_type"] == crate::trace::texts::TASK_TEXT)?;
    Some(crate::marker::first_words(text))
}

/// The view of one formation from its traces (each read within its bound).
pub fn view_of(formation_id: &str, files: &[TraceFile]) -> FormationView {
    view_with(formation_id, files, false)
}

/// As [`view_of`], each task with its timeline (`trace::timeline`), its texts read from the
/// `texts.jsonl` beside each trace (within [`TRACE_BYTES`]).
pub fn view_with_timelines(formation_id: &str, files: &[TraceFile]) -> FormationView {
    view_with(formation_id, files, true)
}

fn view_with(formation_id: &str, files: &[TraceFile], timelines: bool) -> FormationView {
    let sessions: Vec<SessionRecords> = files
        .iter()
        .map(|f| {
            let (mut records, cut) = read_bounded(&f.path);
            if cut {
                // Shown as a bound the page hit, as the runtime's own `trace_truncated` is.
                records.push(serde_json::json!({"event_type": "trace_truncated"}));
            }
            let log = f.path.with_file_name("logs").join("bootstrap.log");
            SessionRecords {
                records,
                entry: f.entry,
                diagnostics: view::diagnostics(&read_tail(&log, LOG_BYTES), MAX_DIAGNOSTICS),
            }
        })
        .collect();
    let mut v = view::build(formation_id, &sessions);
    if timelines {
        for (f, mut session) in files.iter().zip(sessions) {
            let Some(m) = v.members.iter_mut().find(|m| m.session_id == f.session_id) else {
                continue;
            };
            let texts = f.path.with_file_name(crate::trace::texts::FILE);
            session.records.extend(read_bounded(&texts).0);
            // One pass to group the records by task: a member of many tasks stays linear.
            let mut by_task: HashMap<&str, Vec<&serde_json::Value>> = HashMap::new();
            for r in &session.records {
                if let Some(id) = r["task_id"].as_str() {
                    by_task.entry(id).or_default().push(r);
                }
            }
            for t in &mut m.tasks {
                let mine = by_task.get(t.task_id.as_str()).map(Vec::as_slice).unwrap_or_default();
                (t.timeline, t.timeline_more) = crate::trace::timeline::build(&t.task_id, mine.iter().copied());
            }
        }
    }
    // Each ended task's answer, as its session filed it, within the page's budget.
    let mut budget = PAGE_ANSWER_BYTES;
    for m in &mut v.members {
        let Some(f) = files.iter().find(|f| f.session_id == m.session_id) else {
            continue;
        };
        let out = f.path.with_file_name("out");
        // `out/result.txt` holds the last task's result: a `--task` task has no file of its own.
        let last = m.tasks.iter().rposition(|t| t.exit_status.is_some());
        for (i, t) in m.tasks.iter_mut().enumerate().filter(|(_, t)| t.exit_status.is_some()) {
            if budget == 0 {
                break;
            }
            let own = out.join(format!("result_{}.txt", t.task_id));
            let file = if own.is_file() || Some(i) != last {
                own
            } else {
                out.join("result.txt")
            };
            let text = read_head(&file, ANSWER_BYTES.min(budget));
            if !text.is_empty() {
                budget = budget.saturating_sub(text.len() as u64);
                t.answer = Some(text);
            }
        }
    }
    v
}

/// The first `max` bytes of a file as text (lossy; a character cut at the end is dropped).
fn read_head(path: &Path, max: u64) -> String {
    let mut bytes = Vec::new();
    let Ok(f) = std::fs::File::open(path) else {
        return String::new();
    };
    if f.take(max).read_to_end(&mut bytes).is_err() {
        return String::new();
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    crate::text::head(&text, max as usize)
        .trim_end_matches('\u{fffd}')
        .to_owned()
}

/// A fingerprint of a formation's traces (their paths and lengths): it changes when a record is
/// appended or a member's trace appears.
pub fn fingerprint(files: &[TraceFile]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for f in files {
        f.path.hash(&mut h);
        file_len(&f.path).hash(&mut h);
    }
    h.finish()
}

/// The formations with a live process: a member's running record, or the launcher's marker.
/// Only ids and process identities are kept of a record (never its door token).
pub fn alive_formations(home: &MurHome) -> HashSet<String> {
    let mut out = HashSet::new();
    for r in crate::running::read_all(home).unwrap_or_default() {
        if let Some(id) = r.formation_id.as_deref()
            && r.is_live()
        {
            out.insert(id.to_owned());
        }
    }
    out
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// `trace.jsonl` files below `root`, depth-first, bounded by [`MAX_DIRS`] and [`MAX_DEPTH`];
/// symbolic links are not followed.
fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    let mut visited = 0usize;
    while let Some((dir, depth)) = stack.pop() {
        visited += 1;
        if visited > MAX_DIRS {
            break;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        let mut below = Vec::new();
        let mut session = false;
        for e in entries.flatten() {
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() && depth < MAX_DEPTH {
                below.push((e.path(), depth + 1));
            } else if ft.is_file() && e.file_name() == "trace.jsonl" {
                out.push(e.path());
                session = true;
            }
        }
        // A session's directory holds no other session (its logs, out, tmp, home).
        if !session {
            stack.extend(below);
        }
    }
    out.sort();
    out
}

fn read_first(home: &MurHome, path: &Path) -> Option<TraceFile> {
    let mut head = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(FIRST_RECORD_BYTES as u64)
        .read_to_end(&mut head)
        .ok()?;
    let line = &head[..head.iter().position(|&b| b == b'\n')?];
    let v: Value = serde_json::from_slice(line).ok()?;
    if v["event_type"] != "session_start" {
        return None;
    }
    let formation_id = v["formation_id"].as_str()?.to_owned();
    crate::ids::check(crate::ids::IdKind::Formation, &formation_id).ok()?;
    let entry = !path.starts_with(home.formation_records(&formation_id));
    Some(TraceFile {
        path: path.to_path_buf(),
        session_id: v["session_id"].as_str().unwrap_or_default().to_owned(),
        formation_id,
        entry,
    })
}

/// The whole records of `path` up to [`TRACE_BYTES`] (whole lines only), and whether it was cut.
fn read_bounded(path: &Path) -> (Vec<Value>, bool) {
    let mut bytes = Vec::new();
    let Ok(f) = std::fs::File::open(path) else {
        return (Vec::new(), false);
    };
    if f.take(TRACE_BYTES + 1).read_to_end(&mut bytes).is_err() {
        return (Vec::new(), false);
    }
    let cut = bytes.len() as u64 > TRACE_BYTES;
    // A line still being written is left for the next read.
    if let Some(last) = bytes.iter().rposition(|&b| b == b'\n') {
        bytes.truncate(last + 1);
    } else {
        bytes.clear();
    }
    (parse_records(&bytes), cut)
}

/// The last `max` bytes of a file as text (lossy), from a line start.
fn read_tail(path: &Path, max: u64) -> String {
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let from = len.saturating_sub(max);
    if f.seek(SeekFrom::Start(from)).is_err() {
        return String::new();
    }
    let mut bytes = Vec::new();
    if f.take(max).read_to_end(&mut bytes).is_err() {
        return String::new();
    }
    if from > 0
        && let Some(nl) = bytes.iter().position(|&b| b == b'\n')
    {
        bytes.drain(..=nl);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(dir: &Path, frm: &str, member: &str) {
        std::fs::create_dir_all(dir.join("home/x")).unwrap();
        let start = serde_json::json!({"event_type": "session_start", "session_id": "ses_1", "timestamp": 1,
                                       "formation_id": frm, "formation_member": member});
        std::fs::write(dir.join("trace.jsonl"), format!("{start}\n")).unwrap();
        // A trace inside a session's own directories is not a session's.
        std::fs::write(dir.join("home/x/trace.jsonl"), format!("{start}\n")).unwrap();
    }

    #[test]
    fn every_member_trace_is_found_and_the_entry_told_apart() {
        let tmp = tempfile::tempdir().unwrap();
        let home = MurHome::at_home(tmp.path());
        let frm = "frm_0199c4e2f1b7712a9d3e4f5061728394";
        // The project lies under a directory named `home`, as a user's does.
        let project = home.records_group(Path::new("/home/ada/work")).join("ses_a");
        let peer = home.records_group(&home.member_dir(frm, "worker")).join("ses_b");
        session(&project, frm, "lead");
        session(&peer, frm, "worker");
        let other = home.records_group(Path::new("/home/ada/solo")).join("ses_c");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("trace.jsonl"), "{\"event_type\":\"session_start\"}\n").unwrap();
        let half = home.records_group(Path::new("/home/ada/half")).join("ses_d");
        std::fs::create_dir_all(&half).unwrap();
        std::fs::write(half.join("trace.jsonl"), "{\"event_type\":\"session_st").unwrap();

        let index = Index::default();
        let mut found: Vec<(PathBuf, bool)> = index.traces(&home).into_iter().map(|t| (t.path, t.entry)).collect();
        found.sort();
        let mut want = vec![(project.join("trace.jsonl"), true), (peer.join("trace.jsonl"), false)];
        want.sort();
        assert_eq!(found, want);
        let rows = index.formations(&home);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].members, ["lead", "worker"]);
        assert!(!rows[0].running);
        assert_eq!(rows[0].status, "unfinished", "no session_end, no process");
    }
}
