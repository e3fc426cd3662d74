//! A formation's sessions and calls, gathered from its members' traces
//! (docs/reference/formation.md#formation-traces).
//!
//! A session belongs to a formation when its trace starts with a `session_start` naming that
//! `formation_id`. Calls are joined across sessions by `call_id`: the caller's `member_call`
//! record carries the outcome, its `member_call_start` the callee's task when the call has not
//! ended. [`call_tree`] nests each call under the call that started the task which made it
//! (`task_id` = that call's `member_task_id`). `mur trace show frm_…` and `mur demo` render what
//! this returns.

use std::collections::{BTreeMap, HashSet};
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
    /// Tasks, calls, model turns, time and tokens, from its records.
    pub usage: super::usage::Usage,
}

/// One call between members, as its caller recorded it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallSummary {
    pub call_id: String,
    pub from: String,
    pub to: String,
    /// The `member_call` status, or `unfinished` when the trace holds only the call's start.
    pub status: String,
    /// `None` while unfinished.
    pub duration_ms: Option<u64>,
    /// The caller's task that made the call, and the callee's task that served it.
    pub task_id: String,
    pub member_task_id: Option<String>,
    /// The grant the callee's task ran under, as its `task_grant` record shows it
    /// ([`grant_text`]); `None` when its trace holds none.
    pub grant: Option<String>,
    /// What the callee's subtree spent, as the `member_call` record carries it.
    pub subtree_cost: Option<crate::cost::Cost>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FormationTrace {
    pub sessions: Vec<SessionSummary>,
    pub calls: Vec<CallSummary>,
    /// The questions the members' tasks asked, member by member in session order.
    pub questions: Vec<super::questions::QuestionSummary>,
    /// Traces found but not read, and why: a formation's trace is whole or says what it lacks.
    pub unreadable: Vec<(PathBuf, String)>,
}

impl FormationTrace {
    /// `mur trace show frm_… --json`: what the usage table shows, per member and for the
    /// formation, with the calls.
    pub fn usage_json(&self, formation_id: &str) -> Value {
        let mut total = super::usage::Usage::default();
        let members: Vec<Value> = self
            .sessions
            .iter()
            .map(|s| {
                total.add(&s.usage);
                serde_json::json!({
                    "session_id": s.session_id,
                    "member": s.member,
                    "capsule": s.capsule,
                    "exit_status": s.exit_status,
                    "usage": s.usage.to_json(),
                })
            })
            .collect();
        let calls: Vec<Value> = self
            .calls
            .iter()
            .map(|c| {
                serde_json::json!({
                    "call_id": c.call_id,
                    "from": c.from,
                    "to": c.to,
                    "status": c.status,
                    "duration_ms": c.duration_ms,
                })
            })
            .collect();
        let questions: Vec<Value> = self.questions.iter().map(|q| q.to_json()).collect();
        serde_json::json!({
            "formation_id": formation_id,
            "members": members,
            "calls": calls,
            "questions": questions,
            "total": total.to_json(),
        })
    }
}

/// Finds every `trace.jsonl` below `roots` (each searched to a bounded depth) whose first record
/// places it in `formation_id`.
pub fn collect(formation_id: &str, roots: &[PathBuf]) -> FormationTrace {
    let mut out = FormationTrace::default();
    let mut calls = BTreeMap::new();
    let mut questions = Vec::new();
    let mut grants = BTreeMap::new();
    let mut seen = std::collections::HashSet::new();
    for root in roots {
        for trace in trace_files(root, 3) {
            if !seen.insert(trace.clone()) {
                continue;
            }
            let records = match read_records(&trace) {
                Ok(r) => r,
                Err(e) => {
                    out.unreadable.push((trace, e.to_string()));
                    continue;
                }
            };
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
                usage: super::usage::Usage::of_records(&records),
            };
            add_calls(&mut calls, &records, member.as_deref().unwrap_or("-"));
            add_grants(&mut grants, &records);
            let asked = super::questions::of_records(&records, member.as_deref().unwrap_or("-"));
            questions.push((session.started_ms, session.session_id.clone(), asked));
            out.sessions.push(session);
        }
    }
    out.sessions
        .sort_by(|a, b| (a.started_ms, &a.session_id).cmp(&(b.started_ms, &b.session_id)));
    questions.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    out.questions = questions.into_iter().flat_map(|(_, _, q)| q).collect();
    out.calls = with_grants(calls, &grants);
    out
}

/// Each task's grant in `records` (its `task_grant`), by task id, as [`grant_text`] renders it.
pub(crate) fn add_grants(grants: &mut BTreeMap<String, String>, records: &[Value]) {
    for r in records.iter().filter(|r| r["event_type"] == "task_grant") {
        if let (Some(task), Some(text)) = (r["task_id"].as_str(), grant_text(r)) {
            grants.insert(task.to_owned(), text);
        }
    }
}

/// A `task_grant` record on a call line: `[<origin>: <chain member> → …]`, then the deadline
/// (Unix ms) and budget when the grant has them; `None` for a task that came with no grant.
pub fn grant_text(r: &Value) -> Option<String> {
    r["grant_id"].as_str()?;
    let origin = r["origin"].as_str().unwrap_or("?");
    let chain: Vec<&str> = r["chain"]
        .as_array()
        .map(|hops| hops.iter().filter_map(|h| h["member"].as_str()).collect())
        .unwrap_or_default();
    let mut out = format!("[{origin}: {}", chain.join(" → "));
    if let Some(ms) = r["deadline_ms"].as_u64() {
        out.push_str(&format!("; deadline {ms}"));
    }
    if let Some(b) = r["budget"].as_u64() {
        out.push_str(&format!("; budget {b}"));
    }
    out.push(']');
    Some(out)
}

fn with_grants(calls: BTreeMap<String, CallSummary>, grants: &BTreeMap<String, String>) -> Vec<CallSummary> {
    calls
        .into_values()
        .map(|mut c| {
            c.grant = c.member_task_id.as_ref().and_then(|t| grants.get(t).cloned());
            c
        })
        .collect()
}

/// Merges the `member_call_start` / `member_call` records of one session (whose member is
/// `caller`) into `calls`, keyed by `call_id`; a record without a call id or member is skipped.
pub(crate) fn add_calls(calls: &mut BTreeMap<String, CallSummary>, records: &[Value], caller: &str) {
    for r in records {
        let kind = r["event_type"].as_str().unwrap_or("");
        if kind != "member_call_start" && kind != "member_call" {
            continue;
        }
        let (Some(call_id), Some(to)) = (r["call_id"].as_str(), r["member"].as_str()) else {
            continue;
        };
        let c = calls.entry(call_id.to_owned()).or_insert_with(|| CallSummary {
            call_id: call_id.to_owned(),
            status: "unfinished".into(),
            ..CallSummary::default()
        });
        c.from = caller.to_owned();
        c.to = to.to_owned();
        if let Some(t) = r["task_id"].as_str() {
            c.task_id = t.to_owned();
        }
        if let Some(t) = r["member_task_id"].as_str().filter(|t| !t.is_empty()) {
            c.member_task_id = Some(t.to_owned());
        }
        if kind == "member_call" {
            c.status = r["status"].as_str().unwrap_or("?").to_owned();
            c.duration_ms = r["duration_ms"].as_u64();
            c.subtree_cost = crate::cost::Cost::from_record(&r["subtree_cost"]);
        }
    }
}

/// The calls of every session (each trace's records in file order) whose `session_start` names
/// `formation_id` (any formation when `None`), drawn as a tree; for callers that hold traces
/// rather than a records directory (`mur demo`).
pub fn build(sessions: &[Vec<Value>], formation_id: Option<&str>) -> Vec<CallLine> {
    let mut calls = BTreeMap::new();
    let mut grants = BTreeMap::new();
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
        add_calls(&mut calls, records, start["formation_member"].as_str().unwrap_or("-"));
        add_grants(&mut grants, records);
    }
    call_tree(&with_grants(calls, &grants))
}

/// One call placed in the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallLine {
    /// 0 for a call the entry's task made, 1 for a call made by a task such a call started, …
    pub depth: usize,
    pub call_id: String,
    pub caller: String,
    pub member: String,
    pub status: String,
    pub duration_ms: Option<u64>,
    /// The callee task's grant ([`grant_text`]).
    pub grant: Option<String>,
    /// What the callee's subtree spent (docs/reference/formation.md#cost-roll-up).
    pub subtree_cost: Option<crate::cost::Cost>,
}

impl CallLine {
    /// `planner → coder  completed  12 ms`, indented two spaces per level below the first.
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

    /// [`CallLine::render`] followed by what the callee's subtree spent and the callee task's
    /// grant, each when its trace holds it: `mur trace show frm_…`'s call line.
    pub fn render_with_grant(&self) -> String {
        let mut out = self.render();
        if let Some(c) = &self.subtree_cost {
            out.push_str(&format!("  [subtree: {}]", c.summary()));
        }
        if let Some(g) = &self.grant {
            out.push_str(&format!("  {g}"));
        }
        out
    }
}

/// Deeper than any formation nests: a guard against traces whose task ids loop.
const MAX_DEPTH: usize = 32;

/// `calls` as a depth-first tree: each call is followed by the calls its callee's task made,
/// siblings in call-id (mint) order. Roots are calls made by a task no call started (the entry's
/// own). Every call appears exactly once: calls caught in a loop of task ids, or below
/// [`MAX_DEPTH`], are drawn as roots after the rest.
pub fn call_tree(calls: &[CallSummary]) -> Vec<CallLine> {
    let mut sorted: Vec<&CallSummary> = calls.iter().collect();
    sorted.sort_by(|a, b| a.call_id.cmp(&b.call_id));
    let started: HashSet<&str> = sorted.iter().filter_map(|c| c.member_task_id.as_deref()).collect();
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for c in &sorted {
        if !started.contains(c.task_id.as_str()) {
            walk(&sorted, c, 0, &mut seen, &mut out);
        }
    }
    for c in &sorted {
        walk(&sorted, c, 0, &mut seen, &mut out);
    }
    out
}

fn walk<'a>(
    calls: &[&'a CallSummary],
    call: &'a CallSummary,
    depth: usize,
    seen: &mut HashSet<&'a str>,
    out: &mut Vec<CallLine>,
) {
    if depth > MAX_DEPTH || !seen.insert(call.call_id.as_str()) {
        return;
    }
    out.push(CallLine {
        depth,
        call_id: call.call_id.clone(),
        caller: call.from.clone(),
        member: call.to.clone(),
        status: call.status.clone(),
        duration_ms: call.duration_ms,
        grant: call.grant.clone(),
        subtree_cost: call.subtree_cost,
    });
    let Some(task) = call.member_task_id.as_deref() else {
        return;
    };
    for child in calls.iter().filter(|c| c.task_id == task) {
        walk(calls, child, depth + 1, seen, out);
    }
}

/// `trace.jsonl` files at most `depth` directories below `root` (records groups hold session
/// directories directly; a formation's member groups sit one level deeper).
pub fn trace_files(root: &Path, depth: usize) -> Vec<PathBuf> {
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
                &[
                    ("capsule_name", json!(format!("local/{member}"))),
                    ("formation_id", json!(frm_id)),
                    ("formation_member", json!(member)),
                ],
            )
            .unwrap();
            for (id, to) in calls {
                w.write(
                    "member_call",
                    None,
                    &[
                        ("task_id", json!("tsk_1")),
                        ("call_id", json!(id)),
                        ("member", json!(to)),
                        ("status", json!("completed")),
                        ("duration_ms", json!(12)),
                    ],
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
        let t = collect(
            frm,
            &[
                dir.path().join("proj"),
                dir.path().join("peers"),
                dir.path().join("proj"),
            ],
        );
        let ids: Vec<&str> = t.sessions.iter().map(|s| s.session_id.as_str()).collect();
        assert_eq!(ids.len(), 2);
        assert!(ids.contains(&"ses_a") && ids.contains(&"ses_b"));
        let coder = t.sessions.iter().find(|s| s.session_id == "ses_b").unwrap();
        assert_eq!(coder.exit_status, None);
        assert_eq!(t.calls.len(), 1);
        assert_eq!(
            (t.calls[0].from.as_str(), t.calls[0].to.as_str(), t.calls[0].duration_ms),
            ("planner", "coder", Some(12))
        );
    }

    fn call(id: &str, from: &str, to: &str, task: &str, member_task: Option<&str>, status: &str) -> CallSummary {
        CallSummary {
            call_id: id.into(),
            from: from.into(),
            to: to.into(),
            status: status.into(),
            duration_ms: (status != "unfinished").then_some(5),
            task_id: task.into(),
            member_task_id: member_task.map(str::to_owned),
            grant: None,
            subtree_cost: None,
        }
    }

    fn drawn(calls: &[CallSummary]) -> Vec<String> {
        call_tree(calls)
            .iter()
            .map(|l| format!("{} {}", l.call_id, l.render()))
            .collect()
    }

    #[test]
    fn a_call_line_shows_the_grant_its_callee_task_ran_under() {
        use serde_json::json;
        let session = |member: &str, records: Vec<Value>| {
            let mut all =
                vec![json!({"event_type": "session_start", "formation_id": "frm_x", "formation_member": member})];
            all.extend(records);
            all
        };
        let lead = session(
            "lead",
            vec![
                json!({"event_type": "member_call", "task_id": "tsk_l", "call_id": "mcl_1", "member": "mid",
                        "member_task_id": "tsk_m", "status": "completed", "duration_ms": 9}),
            ],
        );
        let mid = session(
            "mid",
            vec![
                json!({"event_type": "task_grant", "task_id": "tsk_m", "grant_id": "grt_1", "origin": "operator",
                        "chain": [{"member": "lead", "task": "tsk_l"}], "deadline_ms": 1700, "budget": null}),
            ],
        );
        let lines: Vec<String> = build(&[lead, mid], Some("frm_x"))
            .iter()
            .map(CallLine::render_with_grant)
            .collect();
        assert_eq!(lines, ["lead → mid  completed  9 ms  [operator: lead; deadline 1700]"]);
        let none = json!({"event_type": "task_grant", "task_id": "t", "grant_id": null, "origin": "member"});
        assert_eq!(grant_text(&none), None, "a task that came with no grant shows none");
    }

    #[test]
    fn calls_nest_under_the_call_whose_task_made_them() {
        let calls = [
            call("mcl_3", "reviewer", "coder", "tsk_r", Some("tsk_c2"), "completed"),
            call("mcl_1", "planner", "coder", "tsk_p", Some("tsk_c"), "completed"),
            call("mcl_2", "planner", "reviewer", "tsk_p", Some("tsk_r"), "failed"),
            call("mcl_4", "coder", "tester", "tsk_c", None, "unfinished"),
        ];
        assert_eq!(
            drawn(&calls),
            [
                "mcl_1 planner → coder  completed  5 ms",
                "mcl_4   coder → tester  unfinished",
                "mcl_2 planner → reviewer  failed  5 ms",
                "mcl_3   reviewer → coder  completed  5 ms",
            ]
        );
    }

    #[test]
    fn a_loop_of_task_ids_still_draws_every_call_once() {
        let calls = [
            call("mcl_1", "a", "b", "tsk_a", Some("tsk_b"), "completed"),
            call("mcl_2", "b", "a", "tsk_b", Some("tsk_a"), "completed"),
        ];
        assert_eq!(
            drawn(&calls),
            ["mcl_1 a → b  completed  5 ms", "mcl_2   b → a  completed  5 ms"]
        );
        assert!(call_tree(&[]).is_empty());
    }

    #[test]
    fn build_joins_start_and_end_records_across_sessions() {
        let frm = "frm_0199c4e2f1b7712a9d3e4f5061728394";
        let start = |member: &str, f: &str| json!({"event_type": "session_start", "formation_id": f, "formation_member": member});
        let lead = vec![
            start("lead", frm),
            json!({"event_type": "member_call_start", "task_id": "tsk_l", "call_id": "mcl_1", "member": "worker", "member_task_id": "tsk_w"}),
            json!({"event_type": "member_call", "task_id": "tsk_l", "call_id": "mcl_1", "member": "worker", "member_task_id": "tsk_w", "status": "completed", "duration_ms": 40}),
        ];
        let worker = vec![
            start("worker", frm),
            json!({"event_type": "member_call_start", "task_id": "tsk_w", "call_id": "mcl_2", "member": "helper", "member_task_id": "tsk_h"}),
        ];
        let other = vec![
            start("x", "frm_other"),
            json!({"event_type": "member_call", "task_id": "t", "call_id": "mcl_0", "member": "y", "status": "completed", "duration_ms": 1}),
        ];
        let lines: Vec<String> = build(&[worker, other, lead, Vec::new()], Some(frm))
            .iter()
            .map(CallLine::render)
            .collect();
        assert_eq!(
            lines,
            ["lead → worker  completed  40 ms", "  worker → helper  unfinished"]
        );
    }

    #[test]
    fn usage_json_sums_the_members() {
        use super::super::usage::Usage;
        let ses = |id: &str, member: Option<&str>, turns: u64, tokens: u64| SessionSummary {
            session_id: id.into(),
            member: member.map(str::to_owned),
            capsule: "local/x".into(),
            exit_status: Some("ok".into()),
            started_ms: 0,
            usage: Usage {
                tasks: 1,
                model_turns: turns,
                input_tokens: tokens,
                ..Usage::default()
            },
        };
        let t = FormationTrace {
            sessions: vec![ses("ses_a", Some("lead"), 2, 30), ses("ses_b", None, 0, 0)],
            calls: vec![CallSummary {
                call_id: "mcl_1".into(),
                from: "lead".into(),
                to: "coder".into(),
                status: "completed".into(),
                duration_ms: Some(5),
                ..CallSummary::default()
            }],
            questions: vec![super::super::questions::QuestionSummary {
                member: "lead".into(),
                task_id: "tsk_1".into(),
                asked_by: vec!["lead".into()],
                question_bytes: 12,
                outcome: Some("answered".into()),
                waited_ms: Some(40),
                answer_bytes: Some(3),
            }],
            unreadable: Vec::new(),
        };
        let v = t.usage_json("frm_x");
        assert_eq!(v["questions"][0]["outcome"], "answered");
        assert_eq!(v["questions"][0]["waited_ms"], 40);
        assert_eq!(v["formation_id"], "frm_x");
        assert_eq!(v["members"][0]["member"], "lead");
        assert_eq!(v["members"][1]["member"], Value::Null);
        assert_eq!(v["members"][0]["usage"]["model_turns"], 2);
        assert_eq!(v["total"]["tasks"], 2);
        assert_eq!(v["total"]["input_tokens"], 30);
        assert_eq!(v["calls"][0]["duration_ms"], 5);
        assert_eq!(FormationTrace::default().usage_json("frm_y")["total"]["model_turns"], 0);
    }
}
