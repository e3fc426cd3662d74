//! Appends trace records to `<records>/trace.jsonl` (docs/reference/formation.md#trace-records, key
//! order docs/reference/cli.md#conventions).
//!
//! serde_json's maps sort their keys, so a record line is assembled here by hand: the common keys
//! in their fixed order, then the caller's fields in the order given. Nested values keep serde's
//! sorted order, which docs/reference/cli.md#conventions asks for at every other depth.
//!
//! Callers pass ids, names, statuses and texts only. A token must never be a field value: the
//! trace is readable by anyone who can read the records directory
//! (docs/reference/door.md#formation-tokens).
//!
//! A session's trace is bounded in bytes (docs/reference/formation.md#trace-records): callers of
//! a door decide how many records a session writes, so past [`MAX_TRACE_BYTES`] further records
//! are dropped, one `trace_truncated` record says so, and `session_end` is still written.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Mutex;

use serde_json::Value;

use crate::ids::{self, IdKind};

/// The keys every record starts with; a field may not reuse one.
const COMMON_KEYS: [&str; 5] = ["event_type", "event_id", "parent_id", "session_id", "timestamp"];

/// The most bytes a session's records may take before they are dropped [ours]: tens of thousands
/// of tasks, and a bound on what the callers of a long-lived door can make it write.
pub const MAX_TRACE_BYTES: u64 = 64 << 20;

/// Test-only: a smaller bound in bytes (clamped to [`MAX_TRACE_BYTES`], so it can only shrink
/// it), announced (W-ENV-001) by the session that applies it.
pub const TRACE_BYTES_ENV: &str = "MURMUR_TEST_TRACE_BYTES";

/// The bound `env` (the value of [`TRACE_BYTES_ENV`]) sets: a number of bytes, at most
/// [`MAX_TRACE_BYTES`]; `None` when unset or not a number.
pub fn test_trace_bytes(env: Option<&str>) -> Option<u64> {
    env?.trim().parse::<u64>().ok().map(|b| b.min(MAX_TRACE_BYTES))
}

/// The record written once, in place of the first record past the bound.
pub const TRUNCATED: &str = "trace_truncated";

/// The records written whatever the bound: the first and the last, so a reader always sees what
/// ran (retention reads the capsule from it) and how it ended. Both are written once, and small.
const ALWAYS: [&str; 2] = ["session_start", "session_end"];

/// One session's trace. Share it by reference or `Arc`: writes from several threads are
/// serialised by one lock, and each record is one `write` on an append-mode file, so lines never
/// interleave. Records go straight to the kernel (no user-space buffer), which is the "flush per
/// record"; there is no fsync, so a record survives a process crash but not a power cut.
pub struct TraceWriter {
    file: Mutex<Appender>,
    session_id: String,
    /// Each running task's cost, from the records written for it (`crate::cost`): counted
    /// before the byte bound, so a trace cut short still reports what was spent.
    meter: crate::cost::Meter,
}

/// The file and what the bound has let through so far.
struct Appender {
    file: File,
    /// Bytes in the file, those before this writer opened it included.
    written: u64,
    limit: u64,
    /// Whether `trace_truncated` was written; every later record but `session_end` is dropped.
    truncated: bool,
    /// Whether `session_end` was written: it is the last record, so every later one is dropped
    /// (a request a closing door still answers after it is not recorded).
    ended: bool,
}

impl std::fmt::Debug for TraceWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TraceWriter({})", self.session_id)
    }
}

impl TraceWriter {
    /// Opens `path` for appending, creating it at mode 0600, bounded by [`MAX_TRACE_BYTES`].
    pub fn create(path: &Path, session_id: &str) -> std::io::Result<TraceWriter> {
        TraceWriter::create_bounded(path, session_id, MAX_TRACE_BYTES)
    }

    /// As [`TraceWriter::create`], with records dropped once the file holds `limit` bytes.
    pub fn create_bounded(path: &Path, session_id: &str, limit: u64) -> std::io::Result<TraceWriter> {
        let file = OpenOptions::new().create(true).append(true).mode(0o600).open(path)?;
        let written = file.metadata()?.len();
        Ok(TraceWriter {
            file: Mutex::new(Appender {
                file,
                written,
                limit,
                truncated: false,
                ended: false,
            }),
            session_id: session_id.to_string(),
            meter: crate::cost::Meter::default(),
        })
    }

    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// What each running task has spent so far (`crate::cost::Meter::take` at its end).
    pub fn meter(&self) -> &crate::cost::Meter {
        &self.meter
    }

    /// Writes `{"event_type":…,"event_id":"evt_…","parent_id":…,"session_id":…,"timestamp":<unix
    /// ms>, <fields in given order>}` and returns the new event id, or an empty one when the
    /// record was dropped at the bound.
    pub fn write(
        &self,
        event_type: &str,
        parent_id: Option<&str>,
        fields: &[(&str, Value)],
    ) -> std::io::Result<String> {
        self.write_at(chrono::Utc::now().timestamp_millis(), event_type, parent_id, fields)
    }

    /// As [`TraceWriter::write`], at a given Unix-ms timestamp (for tests and replays).
    pub fn write_at(
        &self,
        timestamp_ms: i64,
        event_type: &str,
        parent_id: Option<&str>,
        fields: &[(&str, Value)],
    ) -> std::io::Result<String> {
        if let Some((k, _)) = fields.iter().find(|(k, _)| COMMON_KEYS.contains(k)) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("trace field `{k}` would repeat a common key"),
            ));
        }
        self.meter.note(event_type, fields);
        let event_id = ids::mint(IdKind::Event);
        let line = render_record(event_type, &event_id, parent_id, &self.session_id, timestamp_ms, fields);
        // A panic while holding the lock cannot leave a half line behind: write_all is the only
        // fallible operation under it, so a poisoned lock is still safe to use.
        let mut out = crate::sync::lock(&self.file);
        if out.ended {
            return Ok(String::new());
        }
        let fits = out.written.saturating_add(line.len() as u64) <= out.limit;
        if !ALWAYS.contains(&event_type) && (out.truncated || !fits) {
            if !out.truncated {
                // Set first: should the marker fail to write, it is not retried on every record.
                out.truncated = true;
                let limit = out.limit;
                let marker = render_record(
                    TRUNCATED,
                    &ids::mint(IdKind::Event),
                    None,
                    &self.session_id,
                    timestamp_ms,
                    &[("limit_bytes", Value::from(limit))],
                );
                out.append(&marker)?;
            }
            return Ok(String::new());
        }
        out.append(&line)?;
        out.ended = event_type == "session_end";
        Ok(event_id)
    }
}

impl Appender {
    fn append(&mut self, line: &str) -> std::io::Result<()> {
        if let Err(e) = self.file.write_all(line.as_bytes()) {
            // A disk that took only part of the line (ENOSPC, EFBIG) must not keep a cut line,
            // which every later record would follow: back to the last whole line.
            let _ = self.file.set_len(self.written);
            return Err(e);
        }
        self.file.flush()?;
        self.written = self.written.saturating_add(line.len() as u64);
        Ok(())
    }
}

/// One record line, `\n` included, in the key order of docs/reference/cli.md#conventions.
pub fn render_record(
    event_type: &str,
    event_id: &str,
    parent_id: Option<&str>,
    session_id: &str,
    timestamp_ms: i64,
    fields: &[(&str, Value)],
) -> String {
    let mut s = String::with_capacity(160 + fields.len() * 32);
    s.push_str("{\"event_type\":");
    s.push_str(&json(&Value::from(event_type)));
    s.push_str(",\"event_id\":");
    s.push_str(&json(&Value::from(event_id)));
    s.push_str(",\"parent_id\":");
    s.push_str(&json(&parent_id.map_or(Value::Null, Value::from)));
    s.push_str(",\"session_id\":");
    s.push_str(&json(&Value::from(session_id)));
    s.push_str(",\"timestamp\":");
    s.push_str(&timestamp_ms.to_string());
    for (k, v) in fields {
        s.push(',');
        s.push_str(&json(&Value::from(*k)));
        s.push(':');
        s.push_str(&json(v));
    }
    s.push_str("}\n");
    s
}

fn json(v: &Value) -> String {
    // A Value always serialises (its map keys are strings); the fallback keeps the line valid.
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn line_layout_is_exact() {
        // (event_type, parent_id, fields, expected line without its `\n`)
        type Case<'a> = (&'a str, Option<&'a str>, Vec<(&'a str, Value)>, &'a str);
        let table: &[Case] = &[
            (
                "task_end",
                None,
                vec![("task_id", json!("tsk_1")), ("exit_status", json!("ok"))],
                r#"{"event_type":"task_end","event_id":"evt_1","parent_id":null,"session_id":"ses_1","timestamp":5,"task_id":"tsk_1","exit_status":"ok"}"#,
            ),
            (
                "formation_ended",
                Some("evt_0"),
                vec![("formation_id", json!("frm_1"))],
                r#"{"event_type":"formation_ended","event_id":"evt_1","parent_id":"evt_0","session_id":"ses_1","timestamp":5,"formation_id":"frm_1"}"#,
            ),
            (
                "session_start",
                None,
                vec![
                    ("tools_declared", json!([])),
                    ("max_turns", Value::Null),
                    ("deadline", json!({"source": "inherited", "at": "t", "secs": 5})),
                    ("z\"q", json!("a\nb")),
                ],
                r#"{"event_type":"session_start","event_id":"evt_1","parent_id":null,"session_id":"ses_1","timestamp":5,"tools_declared":[],"max_turns":null,"deadline":{"at":"t","secs":5,"source":"inherited"},"z\"q":"a\nb"}"#,
            ),
        ];
        for (ty, parent, fields, want) in table {
            assert_eq!(
                render_record(ty, "evt_1", *parent, "ses_1", 5, fields),
                format!("{want}\n")
            );
        }
    }

    /// `session_end` is the last record (docs/reference/formation.md#trace-records): a request a
    /// closing door still answered after it was once recorded after it. Found by the nemesis.
    #[test]
    fn nothing_is_recorded_after_session_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace.jsonl");
        let w = TraceWriter::create(&path, "ses_1").unwrap();
        w.write("session_start", None, &[]).unwrap();
        assert!(
            !w.write("session_end", None, &[("exit_status", json!("ok"))])
                .unwrap()
                .is_empty()
        );
        assert_eq!(w.write("a2a_task_received", None, &[]).unwrap(), "");
        assert_eq!(w.write("task_rejected", None, &[]).unwrap(), "");
        let text = std::fs::read_to_string(&path).unwrap();
        let types: Vec<String> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["event_type"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(types, ["session_start", "session_end"]);
    }

    #[test]
    fn writes_append_one_line_per_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace.jsonl");
        let w = TraceWriter::create(&path, "ses_1").unwrap();
        let a = w
            .write("session_start", None, &[("capsule_name", json!("local/a"))])
            .unwrap();
        assert!(ids::is(IdKind::Event, &a), "{a}");
        let b = w
            .write_at(7, "formation_ended", Some(&a), &[("formation_id", json!("frm_1"))])
            .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with(&format!(
            r#"{{"event_type":"session_start","event_id":"{a}","parent_id":null,"session_id":"ses_1","timestamp":"#
        )));
        assert_eq!(
            lines[1],
            format!(
                r#"{{"event_type":"formation_ended","event_id":"{b}","parent_id":"{a}","session_id":"ses_1","timestamp":7,"formation_id":"frm_1"}}"#
            )
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        // Reopening appends rather than truncating.
        drop(w);
        TraceWriter::create(&path, "ses_1")
            .unwrap()
            .write("session_end", None, &[])
            .unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 3);
    }

    #[test]
    fn past_its_bound_a_trace_writes_one_marker_and_still_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace.jsonl");
        let w = TraceWriter::create_bounded(&path, "ses_1", 1000).unwrap();
        assert!(!w.write("session_start", None, &[]).unwrap().is_empty());
        let mut kept = 1;
        for i in 0..50 {
            let id = w
                .write("task_start", None, &[("task_id", json!(format!("tsk_{i}")))])
                .unwrap();
            kept += usize::from(!id.is_empty());
        }
        // A record that would still fit after the bound was reached is dropped too: the marker
        // is the last word before the end.
        assert!(w.write("x", None, &[]).unwrap().is_empty());
        assert!(
            !w.write("session_end", None, &[("exit_status", json!("ok"))])
                .unwrap()
                .is_empty()
        );
        let recs = crate::trace::read_records(&path).unwrap();
        let types: Vec<&str> = recs.iter().filter_map(|r| r["event_type"].as_str()).collect();
        assert_eq!(types.len(), kept + 2, "{types:?}");
        assert_eq!(types[kept..], ["trace_truncated", "session_end"]);
        assert_eq!(recs[kept]["limit_bytes"], 1000);
        let len = std::fs::metadata(&path).unwrap().len();
        assert!(len <= 1000 + 400, "{len}");
        // Reopened, the bytes already there count.
        drop(w);
        let again = TraceWriter::create_bounded(&path, "ses_1", 1000).unwrap();
        assert!(again.write("task_start", None, &[]).unwrap().is_empty());
    }

    #[test]
    fn a_test_bound_only_shrinks() {
        let table = [
            (None, None),
            (Some("x"), None),
            (Some("-1"), None),
            (Some(" 4096 "), Some(4096)),
            (Some("99999999999999999"), Some(MAX_TRACE_BYTES)),
        ];
        for (env, want) in table {
            assert_eq!(test_trace_bytes(env), want, "{env:?}");
        }
    }

    #[test]
    fn a_field_may_not_repeat_a_common_key() {
        let dir = tempfile::tempdir().unwrap();
        let w = TraceWriter::create(&dir.path().join("t.jsonl"), "ses_1").unwrap();
        let e = w.write("x", None, &[("timestamp", json!(1))]).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    }

    #[test]
    fn concurrent_writers_never_interleave() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace.jsonl");
        let w = std::sync::Arc::new(TraceWriter::create(&path, "ses_1").unwrap());
        let big = "x".repeat(100_000);
        let hs: Vec<_> = (0..4)
            .map(|i| {
                let (w, big) = (w.clone(), big.clone());
                std::thread::spawn(move || {
                    for _ in 0..10 {
                        w.write("member_call", None, &[("output", json!(big)), ("n", json!(i))])
                            .unwrap();
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let recs = crate::trace::read_records(&path).unwrap();
        assert_eq!(recs.len(), 40);
    }
}
