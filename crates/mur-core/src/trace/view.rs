//! What `mur ui` shows of one formation, built from its members' trace records
//! (docs/reference/formation.md#trace-records): the members as the nodes of a graph (the entry
//! marked), the roster's edges (each member's `formation_callees`) with the calls that went along
//! them counted by status, and per member its tasks and their states, model turns and tool calls.
//! Pure: the caller reads the files and says which session is the entry's.

use std::collections::BTreeMap;

use serde_json::Value;

use super::formation::{CallLine, CallSummary, add_calls, call_tree};
use super::usage::Usage;

/// One member session's records, as the caller read them.
#[derive(Debug, Clone, Default)]
pub struct SessionRecords {
    pub records: Vec<Value>,
    /// The session ran in the project directory (its records are not under the formation's).
    pub entry: bool,
    /// Diagnostic lines (`error[…]`, `warning[…]`) of its `logs/bootstrap.log`.
    pub diagnostics: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskRow {
    pub task_id: String,
    /// The A2A spelling: `submitted`, `working`, `input-required`, `completed`, `failed`,
    /// `canceled`, `rejected`.
    pub state: String,
    /// The `session_end`-style word a task ended with (`ok`, `no_answer`, …), when it ended.
    pub exit_status: Option<String>,
    /// The member whose call brought the task in (`None`: the operator's, or a `--task`).
    pub caller: Option<String>,
    pub duration_ms: Option<u64>,
    /// While it asks: who asked (innermost first) and the question's size.
    pub asking: Option<(Vec<String>, u64)>,
    /// Its answer as the session filed it (`out/result_<tsk>.txt`), cut by the reader; the
    /// records themselves hold no text.
    pub answer: Option<String>,
    /// It came in at the door (`a2a_task_received`).
    pub door: bool,
    /// Its steps (`timeline.rs`), when the caller built them, and how many were left out.
    pub timeline: Vec<super::timeline::Step>,
    pub timeline_more: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnRow {
    pub task_id: String,
    pub turn: u64,
    pub model: String,
    pub duration_ms: u64,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub status: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolRow {
    pub task_id: String,
    pub tool: String,
    pub kind: String,
    pub duration_ms: u64,
    pub status: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberNode {
    pub name: String,
    pub session_id: String,
    pub capsule: String,
    pub model: Option<String>,
    pub entry: bool,
    pub callees: Vec<String>,
    /// `session_end.exit_status`; `None` while it runs (or died without one).
    pub exit_status: Option<String>,
    pub started_ms: u64,
    pub ended_ms: Option<u64>,
    pub usage: Usage,
    pub tasks: Vec<TaskRow>,
    pub turns: Vec<TurnRow>,
    pub tools: Vec<ToolRow>,
    pub diagnostics: Vec<String>,
    /// The trace hit its bound (`trace_truncated`), or the reader's.
    pub truncated: bool,
}

/// An edge of the roster, or one a call took that the roster did not list (`declared: false`,
/// which a door would have refused: shown so it stands out).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Edge {
    pub from: String,
    pub to: String,
    pub declared: bool,
    pub calls: u64,
    /// Calls by `member_call.status` (`unfinished` while running).
    pub statuses: BTreeMap<String, u64>,
}

impl Edge {
    /// The status most worth showing: a failure-like one over `completed`, then the commonest.
    pub fn worst_status(&self) -> Option<&str> {
        const ORDER: [&str; 10] = [
            "failed",
            "unreachable",
            "rejected",
            "timed_out",
            "abandoned",
            "canceled",
            "no_answer",
            "input_required",
            "unfinished",
            "completed",
        ];
        ORDER
            .iter()
            .find(|s| self.statuses.contains_key(**s))
            .copied()
            .or_else(|| self.statuses.keys().next().map(String::as_str))
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FormationView {
    pub formation_id: String,
    /// Entry first, then by name.
    pub members: Vec<MemberNode>,
    /// Sorted by (from, to).
    pub edges: Vec<Edge>,
    pub calls: Vec<CallLine>,
    pub started_ms: u64,
    /// The last `session_end` once every member wrote one.
    pub ended_ms: Option<u64>,
    pub usage: Usage,
}

impl FormationView {
    /// The entry's exit status once the formation ended, else `running` (or `unfinished` when
    /// no process of it is alive; the caller knows which).
    pub fn status(&self, alive: bool) -> String {
        if alive {
            return "running".into();
        }
        let entry = self.members.iter().find(|m| m.entry).or(self.members.first());
        match entry.and_then(|m| m.exit_status.clone()) {
            Some(s) => s,
            None => "unfinished".into(),
        }
    }
}

fn str_of(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or_default().to_owned()
}

/// The view of formation `formation_id` from its sessions (those whose `session_start` names
/// another formation, or none, are skipped).
pub fn build(formation_id: &str, sessions: &[SessionRecords]) -> FormationView {
    let mut view = FormationView {
        formation_id: formation_id.to_owned(),
        ..FormationView::default()
    };
    let mut calls: BTreeMap<String, CallSummary> = BTreeMap::new();
    let mut all_ended = !sessions.is_empty();
    for s in sessions {
        let Some(start) = s.records.first().filter(|r| r["event_type"] == "session_start") else {
            continue;
        };
        if start["formation_id"].as_str() != Some(formation_id) {
            continue;
        }
        let member = node(start, s);
        all_ended &= member.ended_ms.is_some();
        add_calls(&mut calls, &s.records, &member.name);
        view.usage.add(&member.usage);
        view.members.push(member);
    }
    // Peers start in any order: by name, so the graph keeps its layout from run to run.
    view.members
        .sort_by(|a, b| (!a.entry, &a.name, &a.session_id).cmp(&(!b.entry, &b.name, &b.session_id)));
    view.started_ms = view.members.iter().map(|m| m.started_ms).min().unwrap_or(0);
    view.ended_ms = all_ended
        .then(|| view.members.iter().filter_map(|m| m.ended_ms).max())
        .flatten();
    let mut edges: BTreeMap<(String, String), Edge> = BTreeMap::new();
    for m in &view.members {
        for to in &m.callees {
            edges.insert(
                (m.name.clone(), to.clone()),
                Edge {
                    from: m.name.clone(),
                    to: to.clone(),
                    declared: true,
                    ..Edge::default()
                },
            );
        }
    }
    let calls: Vec<CallSummary> = calls.into_values().collect();
    for c in &calls {
        let e = edges.entry((c.from.clone(), c.to.clone())).or_insert_with(|| Edge {
            from: c.from.clone(),
            to: c.to.clone(),
            ..Edge::default()
        });
        e.calls += 1;
        *e.statuses.entry(c.status.clone()).or_default() += 1;
    }
    view.edges = edges.into_values().collect();
    view.calls = call_tree(&calls);
    view
}

fn node(start: &Value, s: &SessionRecords) -> MemberNode {
    let mut m = MemberNode {
        name: start["formation_member"].as_str().unwrap_or("-").to_owned(),
        session_id: str_of(start, "session_id"),
        capsule: str_of(start, "capsule_name"),
        model: start["model"].as_str().map(str::to_owned),
        entry: s.entry,
        callees: start["formation_callees"]
            .as_array()
            .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
            .unwrap_or_default(),
        started_ms: start["timestamp"].as_u64().unwrap_or(0),
        usage: Usage::of_records(&s.records),
        diagnostics: s.diagnostics.clone(),
        ..MemberNode::default()
    };
    let mut tasks: Vec<TaskRow> = Vec::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    let mut task = |tasks: &mut Vec<TaskRow>, id: &str| -> usize {
        *index.entry(id.to_owned()).or_insert_with(|| {
            tasks.push(TaskRow {
                task_id: id.to_owned(),
                state: "submitted".into(),
                ..TaskRow::default()
            });
            tasks.len() - 1
        })
    };
    for r in &s.records {
        let kind = r["event_type"].as_str().unwrap_or("");
        let id = r["task_id"].as_str().unwrap_or("");
        match kind {
            "a2a_task_received" if !id.is_empty() => {
                let i = task(&mut tasks, id);
                tasks[i].caller = r["caller_member"].as_str().map(str::to_owned);
                tasks[i].door = true;
            }
            "task_start" if !id.is_empty() => {
                let i = task(&mut tasks, id);
                tasks[i].state = "working".into();
            }
            "input_requested" if !id.is_empty() => {
                let i = task(&mut tasks, id);
                let by = r["asked_by"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
                    .unwrap_or_default();
                tasks[i].state = "input-required".into();
                tasks[i].asking = Some((by, r["question_bytes"].as_u64().unwrap_or(0)));
            }
            "input_received" if !id.is_empty() => {
                let i = task(&mut tasks, id);
                tasks[i].state = "working".into();
                tasks[i].asking = None;
            }
            "task_end" if !id.is_empty() => {
                let i = task(&mut tasks, id);
                let exit = str_of(r, "exit_status");
                tasks[i].state = match exit.as_str() {
                    "ok" => "completed",
                    "canceled" | "formation_ended" | "deadline_reached" => "canceled",
                    _ => "failed",
                }
                .into();
                tasks[i].exit_status = Some(exit);
                tasks[i].duration_ms = r["duration_ms"].as_u64();
                tasks[i].asking = None;
            }
            "task_canceled" if !id.is_empty() => {
                let i = task(&mut tasks, id);
                tasks[i].state = "canceled".into();
                tasks[i].exit_status = Some(str_of(r, "reason"));
                tasks[i].duration_ms = r["duration_ms"].as_u64();
                tasks[i].asking = None;
            }
            "task_rejected" if !id.is_empty() => {
                let i = task(&mut tasks, id);
                tasks[i].state = "rejected".into();
                tasks[i].exit_status = Some(str_of(r, "reason"));
            }
            "inference" => m.turns.push(TurnRow {
                task_id: id.to_owned(),
                turn: r["turn"].as_u64().unwrap_or(0),
                model: r["response_model"]
                    .as_str()
                    .or(r["model"].as_str())
                    .unwrap_or_default()
                    .to_owned(),
                duration_ms: r["duration_ms"].as_u64().unwrap_or(0),
                input_tokens: r["input_tokens"].as_u64(),
                output_tokens: r["output_tokens"].as_u64(),
                status: str_of(r, "status"),
            }),
            "tool_call" => m.tools.push(ToolRow {
                task_id: id.to_owned(),
                tool: str_of(r, "tool"),
                kind: str_of(r, "kind"),
                duration_ms: r["duration_ms"].as_u64().unwrap_or(0),
                status: str_of(r, "status"),
            }),
            "trace_truncated" => m.truncated = true,
            "session_end" => {
                m.exit_status = r["exit_status"].as_str().map(str::to_owned);
                m.ended_ms = r["timestamp"].as_u64();
            }
            _ => {}
        }
    }
    m.tasks = tasks;
    m
}

/// The diagnostic lines of a `bootstrap.log` (its text as read, already bounded by the caller):
/// those that start `error[` or `warning[`, at most `max`, the newest kept.
pub fn diagnostics(log: &str, max: usize) -> Vec<String> {
    let lines: Vec<String> = log
        .lines()
        .filter(|l| l.starts_with("error[") || l.starts_with("warning["))
        .map(|l| crate::text::head(l, 512).to_owned())
        .collect();
    let skip = lines.len().saturating_sub(max);
    lines.into_iter().skip(skip).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const FRM: &str = "frm_a";

    fn start(member: &str, callees: &[&str], ts: u64) -> Value {
        json!({"event_type":"session_start","session_id":format!("ses_{member}"),"timestamp":ts,
               "capsule_name":format!("local/{member}"),"formation_id":FRM,
               "formation_member":member,"formation_callees":callees})
    }

    fn rec(kind: &str, fields: Value) -> Value {
        let mut v = fields;
        v["event_type"] = json!(kind);
        v
    }

    #[test]
    fn members_edges_and_calls_come_from_the_records() {
        let lead = SessionRecords {
            records: vec![
                start("lead", &["a", "b"], 5),
                rec("task_start", json!({"task_id":"tsk_l"})),
                rec(
                    "member_call_start",
                    json!({"task_id":"tsk_l","call_id":"mcl_1","member":"a","member_task_id":"tsk_a"}),
                ),
                rec(
                    "member_call",
                    json!({"task_id":"tsk_l","call_id":"mcl_1","member":"a","member_task_id":"tsk_a","status":"completed","duration_ms":7}),
                ),
                rec(
                    "member_call",
                    json!({"task_id":"tsk_l","call_id":"mcl_2","member":"a","member_task_id":"tsk_a2","status":"failed","duration_ms":3}),
                ),
                rec(
                    "member_call_start",
                    json!({"task_id":"tsk_l","call_id":"mcl_3","member":"c","member_task_id":"tsk_c"}),
                ),
                rec(
                    "inference",
                    json!({"task_id":"tsk_l","turn":1,"model":"m","response_model":"m-2","duration_ms":40,"input_tokens":10,"output_tokens":2,"status":"ok"}),
                ),
                rec(
                    "task_end",
                    json!({"task_id":"tsk_l","exit_status":"ok","duration_ms":50}),
                ),
                rec("session_end", json!({"timestamp":90,"exit_status":"ok"})),
            ],
            entry: true,
            diagnostics: vec![],
        };
        let a = SessionRecords {
            records: vec![
                start("a", &[], 1),
                rec("a2a_task_received", json!({"task_id":"tsk_a","caller_member":"lead"})),
                rec("task_start", json!({"task_id":"tsk_a"})),
                rec(
                    "input_requested",
                    json!({"task_id":"tsk_a","asked_by":["a"],"question_bytes":12}),
                ),
            ],
            entry: false,
            diagnostics: vec!["error[E-RUN-001]: x".into()],
        };
        let other = SessionRecords {
            records: vec![json!({"event_type":"session_start","formation_id":"frm_other"})],
            ..SessionRecords::default()
        };
        let v = build(FRM, &[a, lead, other]);
        let names: Vec<&str> = v.members.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["lead", "a"], "the entry first");
        assert!(v.members[0].entry);
        // (from, to, declared, calls, worst status)
        let want: &[(&str, &str, bool, u64, Option<&str>)] = &[
            ("lead", "a", true, 2, Some("failed")),
            ("lead", "b", true, 0, None),
            ("lead", "c", false, 1, Some("unfinished")),
        ];
        let got: Vec<_> = v
            .edges
            .iter()
            .map(|e| (e.from.as_str(), e.to.as_str(), e.declared, e.calls, e.worst_status()))
            .collect();
        assert_eq!(got, want);
        assert_eq!(v.calls.len(), 3);
        let t = &v.members[0].turns[0];
        assert_eq!(
            (t.model.as_str(), t.input_tokens, t.output_tokens),
            ("m-2", Some(10), Some(2))
        );
        assert_eq!(v.members[0].tasks[0].state, "completed");
        let asked = &v.members[1].tasks[0];
        assert_eq!(asked.state, "input-required");
        assert_eq!(asked.caller.as_deref(), Some("lead"));
        assert_eq!(asked.asking, Some((vec!["a".to_string()], 12)));
        assert_eq!(v.ended_ms, None, "a still runs");
        assert_eq!(v.status(false), "ok");
        assert_eq!(v.status(true), "running");
        assert_eq!(v.usage.input_tokens, 10);
    }

    #[test]
    fn task_states_follow_their_last_record() {
        // (records after task_start, state)
        let table: &[(&[(&str, Value)], &str)] = &[
            (&[], "working"),
            (&[("task_end", json!({"exit_status":"ok"}))], "completed"),
            (&[("task_end", json!({"exit_status":"no_answer"}))], "failed"),
            (&[("task_end", json!({"exit_status":"formation_ended"}))], "canceled"),
            (&[("task_canceled", json!({"reason":"caller"}))], "canceled"),
            (&[("task_rejected", json!({"reason":"busy"}))], "rejected"),
            (&[("input_requested", json!({"asked_by":[]}))], "input-required"),
            (
                &[
                    ("input_requested", json!({})),
                    ("input_received", json!({"outcome":"answered"})),
                ],
                "working",
            ),
        ];
        for (after, want) in table {
            let mut records = vec![start("m", &[], 0), rec("task_start", json!({"task_id":"tsk_1"}))];
            for (kind, fields) in after.iter() {
                let mut f = fields.clone();
                f["task_id"] = json!("tsk_1");
                records.push(rec(kind, f));
            }
            let v = build(
                FRM,
                &[SessionRecords {
                    records,
                    ..SessionRecords::default()
                }],
            );
            assert_eq!(v.members[0].tasks[0].state, *want, "{after:?}");
        }
    }

    #[test]
    fn diagnostics_keep_the_newest_coded_lines() {
        let log = "note\nerror[E-A-001]: one\nwarning[W-B-002]: two\n  hint\nerror[E-C-003]: three\n";
        assert_eq!(diagnostics(log, 2), ["warning[W-B-002]: two", "error[E-C-003]: three"]);
        assert_eq!(diagnostics("", 2), Vec::<String>::new());
    }
}
