//! A formation's sessions and calls, gathered from its members' traces (runtime.md §14.4).
//!
//! A session belongs to a formation when its trace starts with a `session_start` naming that
//! `formation_id`. Calls are joined across sessions by `call_id`: the caller's `member_call`
//! record carries the outcome. `mur trace show frm_…` and `mur demo` render what this returns.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::read::read_records;

/// One member session of the formation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSummary {
    pub session_id: String,
    /// The roster name; `None` for a session that carries the id but was not launcher-started.
    pub member: Option<String>,
    pub capsule: String,
    /// `session_end.exit_status`, or `None` when the trace has no `session_end`.
    pub exit_status: Option<String>,
    pub started_ms: u64,
}

/// One call between members, as its caller recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallSummary {
    pub call_id: String,
    pub from: String,
    pub to: String,
    pub status: String,
    pub duration_ms: u64,
    /// The caller's task that made the call, and the callee's task that served it.
    pub task_id: String,
    pub member_task_id: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FormationTrace {
    pub sessions: Vec<SessionSummary>,
    pub calls: Vec<CallSummary>,
}

/// Finds every `trace.jsonl` below `roots` (each searched to a bounded depth) whose first record
/// places it in `formation_id`.
pub fn collect(formation_id: &str, roots: &[PathBuf]) -> FormationTrace {
    let mut out = FormationTrace::default();
    let mut seen = std::collections::HashSet::new();
    for root in roots {
        for trace in trace_files(root, 3) {
            if !seen.insert(trace.clone()) {
                continue;
            }
            let Ok(records) = read_records(&trace) else { continue };
            let Some(first) = records.first() else { continue };
            if first["event_type"] != "session_start" || first["formation_id"] != formation_id {
                continue;
            }
            let member = first["formation_member"].as_str().map(str::to_owned);
            let session = SessionSummary {
                session_id: first["session_id"].as_str().unwrap_or_default().to_owned(),
                member: member.clone(),
                capsule: first["capsule_name"].as_str().unwrap_or_default().to_owned(),
                exit_status: records
                    .iter()
                    .rev()
                    .find(|r| r["event_type"] == "session_end")
                    .and_then(|r| r["exit_status"].as_str().map(str::to_owned)),
                started_ms: first["timestamp"].as_u64().unwrap_or(0),
            };
            for r in records.iter().filter(|r| r["event_type"] == "member_call") {
                out.calls.push(CallSummary {
                    call_id: str_of(r, "call_id"),
                    from: member.clone().unwrap_or_else(|| "-".into()),
                    to: str_of(r, "member"),
                    status: str_of(r, "status"),
                    duration_ms: r["duration_ms"].as_u64().unwrap_or(0),
                    task_id: str_of(r, "task_id"),
                    member_task_id: r["member_task_id"].as_str().map(str::to_owned),
                });
            }
            out.sessions.push(session);
        }
    }
    out.sessions.sort_by(|a, b| (a.started_ms, &a.session_id).cmp(&(b.started_ms, &b.session_id)));
    out.calls.sort_by(|a, b| a.call_id.cmp(&b.call_id));
    out.calls.dedup_by(|a, b| a.call_id == b.call_id);
    out
}

fn str_of(r: &Value, key: &str) -> String {
    r[key].as_str().unwrap_or_default().to_owned()
}

/// `trace.jsonl` files at most `depth` directories below `root` (records groups hold session
/// directories directly; a formation's member groups sit one level deeper).
fn trace_files(root: &Path, depth: usize) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![(root.to_path_buf(), 0)];
    while let Some((dir, d)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() && d < depth {
                stack.push((e.path(), d + 1));
            } else if ft.is_file() && e.file_name() == "trace.jsonl" {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::TraceWriter;
    use serde_json::json;

    #[test]
    fn joins_sessions_and_calls_of_one_formation() {
        let dir = tempfile::tempdir().unwrap();
        let frm = "frm_0199c4e2f1b7712a9d3e4f5061728394";
        let mk = |rel: &str, ses: &str, member: &str, frm_id: &str, end: Option<&str>, calls: &[(&str, &str)]| {
            let path = dir.path().join(rel).join(ses).join("trace.jsonl");
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            let w = TraceWriter::create(&path, ses).unwrap();
            w.write(
                "session_start",
                None,
                &[("capsule_name", json!(format!("local/{member}"))), ("formation_id", json!(frm_id)), ("formation_member", json!(member))],
            )
            .unwrap();
            for (id, to) in calls {
                w.write(
                    "member_call",
                    None,
                    &[("task_id", json!("tsk_1")), ("call_id", json!(id)), ("member", json!(to)), ("status", json!("completed")), ("duration_ms", json!(12))],
                )
                .unwrap();
            }
            if let Some(e) = end {
                w.write("session_end", None, &[("exit_status", json!(e))]).unwrap();
            }
        };
        mk("proj", "ses_a", "planner", frm, Some("ok"), &[("mcl_1", "coder")]);
        mk("peers/coder", "ses_b", "coder", frm, None, &[]);
        mk("proj", "ses_c", "other", "frm_other", Some("ok"), &[]);
        let t = collect(frm, &[dir.path().join("proj"), dir.path().join("peers"), dir.path().join("proj")]);
        let ids: Vec<&str> = t.sessions.iter().map(|s| s.session_id.as_str()).collect();
        assert_eq!(ids.len(), 2);
        assert!(ids.contains(&"ses_a") && ids.contains(&"ses_b"));
        let coder = t.sessions.iter().find(|s| s.session_id == "ses_b").unwrap();
        assert_eq!(coder.exit_status, None);
        assert_eq!(t.calls.len(), 1);
        assert_eq!((t.calls[0].from.as_str(), t.calls[0].to.as_str(), t.calls[0].duration_ms), ("planner", "coder", 12));
    }
}
