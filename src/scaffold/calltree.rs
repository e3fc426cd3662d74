//! The call tree of a formation, from its members' traces (runtime.md §14.2): who called whom,
//! how each call ended and how long it took, nested under the call whose task made it.
//!
//! A caller writes `member_call_start` when the callee's door holds the task and `member_call`
//! when the call ends; both carry the `call_id` (the join key) and the callee's `member_task_id`.
//! A call made while the callee ran that task names it as its own `task_id`, which is how calls
//! nest. Pure: records in, lines out.

use std::collections::{BTreeMap, HashSet};

use serde_json::Value;

/// One call, as `mur demo` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallLine {
    /// 0 for a call the entry's task made, 1 for a call made by a task such a call started, …
    pub depth: usize,
    pub call_id: String,
    /// The calling member, or `-` when its trace does not name it.
    pub caller: String,
    pub member: String,
    /// The `member_call` status, or `unfinished` when the trace holds only the call's start.
    pub status: String,
    pub duration_ms: Option<u64>,
}

impl CallLine {
    /// `planner → analyst  completed  12 ms`, indented two spaces per level below the first.
    pub fn render(&self) -> String {
        let mut out = format!(
            "{}{} → {}  {}",
            "  ".repeat(self.depth),
            self.caller,
            self.member,
            self.status
        );
        if let Some(ms) = self.duration_ms {
            out.push_str(&format!("  {ms} ms"));
        }
        out
    }
}

#[derive(Debug, Default)]
struct Call {
    caller: String,
    /// The caller's task that made the call.
    task_id: String,
    member: String,
    member_task_id: Option<String>,
    status: Option<String>,
    duration_ms: Option<u64>,
}

/// Deeper than any formation nests: a guard against traces whose task ids loop.
const MAX_DEPTH: usize = 32;

/// The calls of every session whose `session_start` names `formation_id` (every session with
/// any formation when `None`), as a depth-first tree: a call's children follow it, siblings in
/// mint order of their call ids. `sessions` holds each trace's records in file order.
pub fn build(sessions: &[Vec<Value>], formation_id: Option<&str>) -> Vec<CallLine> {
    let mut calls: BTreeMap<String, Call> = BTreeMap::new();
    for records in sessions {
        let Some(start) = records.first().filter(|r| r["event_type"] == "session_start") else {
            continue;
        };
        let Some(frm) = start["formation_id"].as_str() else {
            continue;
        };
        if formation_id.is_some_and(|want| want != frm) {
            continue;
        }
        let caller = start["formation_member"].as_str().unwrap_or("-");
        for r in records {
            let kind = r["event_type"].as_str().unwrap_or("");
            if kind != "member_call_start" && kind != "member_call" {
                continue;
            }
            let (Some(call_id), Some(member)) = (r["call_id"].as_str(), r["member"].as_str()) else {
                continue;
            };
            let call = calls.entry(call_id.to_string()).or_default();
            call.caller = caller.to_string();
            call.member = member.to_string();
            if let Some(t) = r["task_id"].as_str() {
                call.task_id = t.to_string();
            }
            if let Some(t) = r["member_task_id"].as_str().filter(|t| !t.is_empty()) {
                call.member_task_id = Some(t.to_string());
            }
            if kind == "member_call" {
                call.status = r["status"].as_str().map(str::to_string);
                call.duration_ms = r["duration_ms"].as_u64();
            }
        }
    }

    // Roots: calls made by a task that no call of this formation started (the entry's own).
    let started: HashSet<&str> = calls.values().filter_map(|c| c.member_task_id.as_deref()).collect();
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for (id, call) in &calls {
        if !started.contains(call.task_id.as_str()) {
            walk(&calls, id, 0, &mut seen, &mut out);
        }
    }
    out
}

fn walk<'a>(
    calls: &'a BTreeMap<String, Call>,
    id: &'a str,
    depth: usize,
    seen: &mut HashSet<&'a str>,
    out: &mut Vec<CallLine>,
) {
    let Some(call) = calls.get(id) else { return };
    if depth > MAX_DEPTH || !seen.insert(id) {
        return;
    }
    out.push(CallLine {
        depth,
        call_id: id.to_string(),
        caller: call.caller.clone(),
        member: call.member.clone(),
        status: call.status.clone().unwrap_or_else(|| "unfinished".into()),
        duration_ms: call.duration_ms,
    });
    let Some(task) = call.member_task_id.as_deref() else {
        return;
    };
    for (child_id, child) in calls {
        if child.task_id == task {
            walk(calls, child_id, depth + 1, seen, out);
        }
    }
}
