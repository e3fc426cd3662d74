//! `mur trace show ID`: one session's trace, or every member session of a formation
//! (docs/reference/formation.md#formation-traces).

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::Outcome;
use crate::diag::{self, Diagnostic};
use crate::ids::{self, IdKind};
use crate::paths::MurHome;
use crate::trace::formation::{self, FormationTrace};
use crate::trace::usage::{self, Usage};

/// The fields every record carries; the rest are the record's own, shown after its type.
const COMMON: [&str; 5] = ["event_type", "event_id", "parent_id", "session_id", "timestamp"];

/// `json`: the usage summary as one JSON object instead of the records (or the formation's table).
pub fn show(id: &str, json: bool) -> Outcome {
    let home = MurHome::from_env();
    match named(id)? {
        Named::Formation => show_formation(&home, id, json),
        Named::Session => show_session(&home, id, json),
    }
}

/// `mur trace list`: every formation launched on this machine, newest first.
pub fn list() -> Outcome {
    out(&super::formations::list(&MurHome::from_env()));
    Ok(0)
}

fn not_found(message: String) -> Diagnostic {
    Diagnostic::new(diag::E_TRC_002, message)
}

/// What an id given to `show` or `--follow` names.
enum Named {
    Formation,
    Session,
}

/// Checks `id` (E-TRC-002 when it is neither a formation's nor a session's).
fn named(id: &str) -> Result<Named, Diagnostic> {
    if id.starts_with("frm_") {
        ids::check(IdKind::Formation, id).map_err(|e| not_found(format!("'{id}' is not a formation id: {e}")))?;
        return Ok(Named::Formation);
    }
    ids::check(IdKind::Session, id)
        .map_err(|e| not_found(format!("'{id}' is neither a session id nor a formation id: {e}")))?;
    Ok(Named::Session)
}

/// The trace file of session `id`, or E-TRC-002.
fn session_trace(home: &MurHome, id: &str) -> Result<PathBuf, Diagnostic> {
    find_session_trace(home, id)
        .ok_or_else(|| not_found(format!("no trace of session {id} under {}", home.records().display())))
}

/// E-TRC-002 for formation `id` when no session under `roots` belongs to it.
fn no_sessions(id: &str, roots: &[PathBuf]) -> Diagnostic {
    let list: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
    not_found(format!(
        "no session under {} belongs to formation {id}",
        list.join(", ")
    ))
}

fn show_session(home: &MurHome, id: &str, json: bool) -> Outcome {
    let path = session_trace(home, id)?;
    let records = crate::trace::read_records(&path).map_err(|e| {
        not_found(format!(
            "the trace of session {id} at {} cannot be read: {e}",
            path.display()
        ))
    })?;
    if json {
        let start = records.first().filter(|r| r["event_type"] == "session_start");
        let member = start.and_then(|r| r["formation_member"].as_str());
        let out = serde_json::json!({
            "session_id": id,
            "member": member,
            "usage": Usage::of_records(&records).to_json(),
        });
        println!("{out}");
        return Ok(0);
    }
    for r in &records {
        out(&format!("{}\n", session_line(r)));
    }
    Ok(0)
}

/// Prints records as text. They hold what members, models and remote agents said (a provider's
/// `finish_reason` and `response_model`, failure texts): on a terminal their control characters
/// are made visible (`question::for_stream`); piped, the bytes are unchanged.
fn out(text: &str) {
    use std::io::{IsTerminal, Write};
    let mut stdout = std::io::stdout().lock();
    let terminal = stdout.is_terminal();
    let _ = stdout.write_all(crate::question::for_stream(text, terminal).as_bytes());
}

/// `<RFC 3339 ms>  <event_type>  <k=v …>`.
fn session_line(r: &Value) -> String {
    let ts = r["timestamp"]
        .as_i64()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_else(|| "-".into());
    let mut line = format!("{ts}  {}", r["event_type"].as_str().unwrap_or("?"));
    if let Some(obj) = r.as_object() {
        let fields: Vec<String> = obj
            .iter()
            .filter(|(k, _)| !COMMON.contains(&k.as_str()))
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k}={s}"),
                other => format!("{k}={other}"),
            })
            .collect();
        if !fields.is_empty() {
            line.push_str("  ");
            line.push_str(&fields.join(" "));
        }
    }
    line
}

/// The session's trace: its running record names its records directory; otherwise the records
/// tree is searched for a directory named after it.
pub(crate) fn find_session_trace(home: &MurHome, id: &str) -> Option<PathBuf> {
    if let Ok(records) = crate::running::read_all(home)
        && let Some(rec) = records.iter().find(|r| r.session_id == id)
    {
        let p = PathBuf::from(&rec.records_dir).join("trace.jsonl");
        if p.is_file() {
            return Some(p);
        }
    }
    let mut stack = vec![home.records()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            let Ok(ft) = e.file_type() else { continue };
            if !ft.is_dir() {
                continue;
            }
            if e.file_name() == id {
                let p = e.path().join("trace.jsonl");
                if p.is_file() {
                    return Some(p);
                }
            } else {
                stack.push(e.path());
            }
        }
    }
    None
}

/// The roots of docs/reference/formation.md#formation-traces: the CWD's records group, the
/// project's (from `formation.json`), and each member directory's under
/// `~/.murmur/formations/<id>/`.
fn formation_roots(home: &MurHome, id: &str) -> Vec<PathBuf> {
    let mut roots = Vec::new();
    if let Ok(cwd) = std::env::current_dir() {
        let cwd = std::fs::canonicalize(&cwd).unwrap_or(cwd);
        roots.push(home.records_group(&cwd));
    }
    #[cfg(feature = "runtime")]
    if let Some(m) = crate::marker::read(&home.formation_marker(id)) {
        roots.push(home.records_group(std::path::Path::new(&m.project_dir)));
    }
    if let Ok(entries) = std::fs::read_dir(home.formation(id)) {
        let mut members: Vec<PathBuf> = entries
            .flatten()
            // Member directories only: not the doors' socket directory (`.doors`).
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()) && !e.file_name().as_encoded_bytes().starts_with(b"."))
            .map(|e| e.path())
            .collect();
        members.sort();
        roots.extend(members.iter().map(|m| home.records_group(m)));
    }
    let mut seen = std::collections::HashSet::new();
    roots.retain(|r| seen.insert(r.clone()));
    roots
}

/// How often a followed trace is read again.
const FOLLOW_POLL: Duration = Duration::from_millis(100);
/// A session with no running record whose trace stayed unchanged this long is gone: the record
/// is written as its door opens and removed as it exits (or by a reader, once it died).
const GONE_QUIET: Duration = Duration::from_secs(2);
/// Bytes of one trace read per poll, and the longest line kept while waiting for its end.
const FOLLOW_READ: u64 = 8 << 20;

/// `mur trace show --follow ID`: the records as `show` prints them, then each record as it is
/// appended, until the session wrote `session_end` (or its process is gone) or, for a
/// formation, until its launcher and every member are gone.
pub fn follow(id: &str) -> Outcome {
    let home = MurHome::from_env();
    if let Named::Formation = named(id)? {
        return follow_formation(&home, id);
    }
    let path = session_trace(&home, id)?;
    let mut tail = Tail::new(path);
    loop {
        for r in tail.read() {
            out(&format!("{}\n", session_line(&r)));
        }
        if tail.ended || session_gone(&home, id, &tail) {
            // What it wrote as it went.
            for r in tail.read() {
                out(&format!("{}\n", session_line(&r)));
            }
            return Ok(0);
        }
        std::thread::sleep(FOLLOW_POLL);
    }
}

/// The session's process is gone: its running record names a dead process, or there is none
/// and the trace has been quiet for [`GONE_QUIET`].
fn session_gone(home: &MurHome, id: &str, tail: &Tail) -> bool {
    let record = crate::running::read_all(home)
        .ok()
        .and_then(|all| all.into_iter().find(|r| r.session_id == id));
    match record {
        Some(r) => !running(r.pid, &r.process_start),
        None => tail.grew.elapsed() >= GONE_QUIET,
    }
}

fn follow_formation(home: &MurHome, id: &str) -> Outcome {
    // Trace files found, and whether each is one of this formation's members (`None`: not).
    let mut tails: BTreeMap<PathBuf, Option<Tail>> = BTreeMap::new();
    for poll in 0u64.. {
        let over = formation_over(home, id);
        // New members appear while the formation launches: look again every half second.
        if poll % 5 == 0 || over {
            for root in formation_roots(home, id) {
                for path in formation::trace_files(&root, 3) {
                    if tails.contains_key(&path) {
                        continue;
                    }
                    // A trace whose first record is not written yet is looked at again.
                    if let Some(mine) = first_record(&path).map(|r| r["formation_id"] == id) {
                        tails.insert(path.clone(), mine.then(|| Tail::new(path)));
                    }
                }
            }
        }
        if poll == 0 && over && tails.values().all(Option::is_none) {
            return Err(no_sessions(id, &formation_roots(home, id)).into());
        }
        let mut batch: Vec<(String, Value)> = Vec::new();
        for tail in tails.values_mut().flatten() {
            let member = tail.member.clone();
            batch.extend(tail.read().into_iter().map(|r| (member.clone(), r)));
        }
        // Members write at once; within one poll, in time order.
        batch.sort_by_key(|(_, r)| r["timestamp"].as_i64().unwrap_or(0));
        for (member, r) in &batch {
            let line = session_line(r);
            match line.split_once("  ") {
                Some((ts, rest)) => out(&format!("{ts}  {member}  {rest}\n")),
                None => out(&format!("{member}  {line}\n")),
            }
        }
        if over {
            return Ok(0);
        }
        std::thread::sleep(FOLLOW_POLL);
    }
    Ok(0)
}

/// The formation's launcher is gone (or there was none) and no member of it runs.
fn formation_over(home: &MurHome, id: &str) -> bool {
    #[cfg(feature = "runtime")]
    if let Some(m) = crate::marker::read(&home.formation_marker(id))
        && running(m.launcher_pid, &m.launcher_start)
    {
        return false;
    }
    !crate::running::read_all(home)
        .unwrap_or_default()
        .iter()
        .any(|r| r.formation_id.as_deref() == Some(id) && running(r.pid, &r.process_start))
}

/// The process still runs: the same start token, and not a zombie its parent has yet to reap.
fn running(pid: u32, start: &str) -> bool {
    crate::procinfo::is_alive(pid, Some(start)) && crate::procinfo::is_alive(pid, None)
}

/// A trace's first record, once its first line is complete.
fn first_record(path: &std::path::Path) -> Option<Value> {
    let mut head = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(64 << 10)
        .read_to_end(&mut head)
        .ok()?;
    let line = &head[..head.iter().position(|&b| b == b'\n')?];
    Some(serde_json::from_slice::<Value>(line).unwrap_or(Value::Null))
}

/// One trace file read as it grows: whole lines only, from where the last read stopped.
struct Tail {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
    /// `session_end` was read.
    ended: bool,
    /// When the file last grew.
    grew: Instant,
    member: String,
}

impl Tail {
    fn new(path: PathBuf) -> Tail {
        let member = first_record(&path)
            .and_then(|r| r["formation_member"].as_str().map(str::to_owned))
            .unwrap_or_else(|| "-".into());
        Tail {
            path,
            offset: 0,
            partial: Vec::new(),
            ended: false,
            grew: Instant::now(),
            member,
        }
    }

    /// The records appended since the last read.
    fn read(&mut self) -> Vec<Value> {
        let mut bytes = Vec::new();
        let read = std::fs::File::open(&self.path).and_then(|mut f| {
            f.seek(SeekFrom::Start(self.offset))?;
            f.take(FOLLOW_READ).read_to_end(&mut bytes)
        });
        let Ok(n) = read else { return Vec::new() };
        if n == 0 {
            return Vec::new();
        }
        self.offset += n as u64;
        self.grew = Instant::now();
        self.partial.extend_from_slice(&bytes);
        let Some(last) = self.partial.iter().rposition(|&b| b == b'\n') else {
            if self.partial.len() as u64 > FOLLOW_READ {
                // No record is this long: drop it rather than hold it.
                self.partial.clear();
            }
            return Vec::new();
        };
        let rest = self.partial.split_off(last + 1);
        let whole = std::mem::replace(&mut self.partial, rest);
        let records = crate::trace::read::parse_records(&whole);
        self.ended |= records.iter().any(|r| r["event_type"] == "session_end");
        records
    }
}

fn show_formation(home: &MurHome, id: &str, json: bool) -> Outcome {
    let roots = formation_roots(home, id);
    let t = formation::collect(id, &roots);
    if t.sessions.is_empty() && t.unreadable.is_empty() {
        return Err(no_sessions(id, &roots).into());
    }
    let lacking = lacking(home, id, &t);
    if json {
        println!("{}", t.usage_json(id));
    } else {
        let budget = crate::yaml::read_capped(&home.formation(id).join("budget.json"), 64 * 1024)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
        out(&render_formation(id, &roots, &t, budget.as_ref()));
    }
    match lacking.is_empty() {
        true => Ok(0),
        false => Err(not_found(format!(
            "the trace of formation {id} is not whole: {}",
            lacking.join("; ")
        ))
        .with_hint(
            "a member's records are under ~/.murmur/records/<its work folder>; run the command from the roster's directory, or look there for the member's ses_… directory",
        )
        .into()),
    }
}

/// What the formation's trace lacks: each member the launcher started (its marker names them)
/// with no trace found, and each trace found but not read.
fn lacking(home: &MurHome, id: &str, t: &formation::FormationTrace) -> Vec<String> {
    let mut out = Vec::new();
    #[cfg(feature = "runtime")]
    if let Some(m) = crate::marker::read(&home.formation_marker(id)) {
        for (i, member) in m.members.iter().enumerate() {
            if !t.sessions.iter().any(|s| s.member.as_deref() == Some(member)) {
                let role = if i == 0 { " (the entry)" } else { "" };
                out.push(format!("no trace of member '{member}'{role} was found"));
            }
        }
    }
    #[cfg(not(feature = "runtime"))]
    let _ = (home, id);
    for (path, why) in &t.unreadable {
        out.push(format!("{} could not be read: {why}", path.display()));
    }
    out
}

/// docs/reference/formation.md#formation-traces's layout: one `searched:` line per root, then one
/// row per session with the session id, member and capsule each padded to their column, then the
/// call lines.
pub fn render_formation(id: &str, roots: &[PathBuf], t: &FormationTrace, budget: Option<&serde_json::Value>) -> String {
    let mut out = format!("── Formation {}\nformation:  {id}\n", "─".repeat(30));
    for root in roots {
        out.push_str(&format!("searched:   {}\n", root.display()));
    }
    let member = |s: &formation::SessionSummary| s.member.as_deref().unwrap_or("-").chars().count();
    let member_w = t.sessions.iter().map(member).max().unwrap_or(1);
    let capsule_w = t.sessions.iter().map(|s| s.capsule.chars().count()).max().unwrap_or(1);
    for s in &t.sessions {
        out.push_str(&format!(
            "{:<36}  {:<member_w$}  {:<capsule_w$}  {}\n",
            s.session_id,
            s.member.as_deref().unwrap_or("-"),
            s.capsule,
            s.exit_status.as_deref().unwrap_or("no session_end"),
        ));
    }
    if !t.calls.is_empty() {
        // A call made by a task that a call started is drawn under that call, two spaces deeper;
        // a top-level line keeps docs/reference/formation.md#formation-traces's shape `  mcl_…
        // planner → coder  completed  1234 ms`.
        out.push_str("calls:\n");
        for line in formation::call_tree(&t.calls) {
            let indent = "  ".repeat(line.depth + 1);
            out.push_str(&format!(
                "{indent}{}  {}\n",
                line.call_id,
                line.render_with_grant().trim_start()
            ));
        }
    }
    if !t.questions.is_empty() {
        // Who asked, how it ended and how long it waited; the texts only as sizes.
        out.push_str("questions:\n");
        for q in &t.questions {
            out.push_str(&format!("  {}\n", q.render()));
        }
    }
    // Where the time and tokens went, per member and in all.
    let rows: Vec<(String, Usage)> = t
        .sessions
        .iter()
        .map(|s| (s.member.clone().unwrap_or_else(|| "-".into()), s.usage.clone()))
        .collect();
    out.push_str("usage:\n");
    out.push_str(&usage::table(&rows));
    if let Some(b) = budget {
        out.push_str(&render_budget(b));
    }
    out
}

/// The formation's token budget as its launcher kept it (`budget.json`,
/// docs/reference/formation.md#budgets): the limit, what was spent and what is left, then each
/// member that spent any, with its turns.
fn render_budget(b: &serde_json::Value) -> String {
    let n = |v: &serde_json::Value| v.as_i64().map(|n| n.to_string()).unwrap_or_else(|| "?".into());
    let mut out = format!(
        "budget:\n  limit {}  spent {}  left {}\n",
        n(&b["limit"]),
        n(&b["spent"]),
        n(&b["left"])
    );
    if let Some(members) = b["members"].as_object() {
        let w = members.keys().map(|k| k.chars().count()).max().unwrap_or(0);
        for (name, m) in members {
            if m["turns"].as_u64().unwrap_or(0) == 0 {
                continue;
            }
            out.push_str(&format!(
                "  {:<w$}  spent {}  turns {}\n",
                crate::diag::shown(name),
                n(&m["spent"]),
                n(&m["turns"])
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::formation::{CallSummary, SessionSummary};

    #[test]
    fn formation_calls_are_drawn_as_a_tree() {
        let frm = "frm_0199c4e2f1b7712a9d3e4f5061728394";
        let ses = |id: &str, member: &str, end: Option<&str>| SessionSummary {
            session_id: id.into(),
            member: Some(member.into()),
            capsule: format!("local/{member}"),
            exit_status: end.map(str::to_owned),
            started_ms: 0,
            usage: Default::default(),
        };
        let call = |id: &str, from: &str, to: &str, task: &str, mt: &str, status: &str, ms: Option<u64>| CallSummary {
            call_id: id.into(),
            from: from.into(),
            to: to.into(),
            status: status.into(),
            duration_ms: ms,
            task_id: task.into(),
            member_task_id: Some(mt.into()),
            grant: None,
            subtree_cost: None,
        };
        let t = FormationTrace {
            sessions: vec![ses("ses_a", "planner", Some("ok")), ses("ses_b", "coder", None)],
            calls: vec![
                call("mcl_2", "coder", "tester", "tsk_c", "tsk_t", "completed", Some(7)),
                call("mcl_1", "planner", "coder", "tsk_p", "tsk_c", "completed", Some(1234)),
                call("mcl_3", "planner", "tester", "tsk_p", "tsk_t2", "unfinished", None),
            ],
            questions: Vec::new(),
            unreadable: Vec::new(),
        };
        let out = render_formation(frm, &[PathBuf::from("/r/a"), PathBuf::from("/r/b")], &t, None);
        let want = format!(
            "── Formation {}\nformation:  {frm}\nsearched:   /r/a\nsearched:   /r/b\n\
             ses_a{}  planner  local/planner  ok\n\
             ses_b{}  coder    local/coder    no session_end\n\
             calls:\n  mcl_1  planner → coder  completed  1234 ms\n    mcl_2  coder → tester  completed  7 ms\n  mcl_3  planner → tester  unfinished\n\
             usage:\n\
             \x20 member   tasks  calls  turns  model ms  tools  tool ms  other ms  tokens in  tokens out\n\
             \x20 planner      0      0      0         0      0        0         0          0           0\n\
             \x20 coder        0      0      0         0      0        0         0          0           0\n\
             \x20 total        0      0      0         0      0        0         0          0           0\n",
            "─".repeat(30),
            " ".repeat(31),
            " ".repeat(31)
        );
        assert_eq!(out, want);
    }

    #[test]
    fn formation_questions_follow_the_calls() {
        use crate::trace::questions::QuestionSummary;
        let t = FormationTrace {
            questions: vec![
                QuestionSummary {
                    member: "lead".into(),
                    task_id: "tsk_p".into(),
                    asked_by: vec!["coder".into(), "lead".into()],
                    question_bytes: 20,
                    outcome: Some("answered".into()),
                    waited_ms: Some(900),
                    answer_bytes: Some(4),
                },
                QuestionSummary {
                    member: "coder".into(),
                    task_id: "tsk_c".into(),
                    asked_by: vec!["coder".into()],
                    question_bytes: 20,
                    ..QuestionSummary::default()
                },
            ],
            ..FormationTrace::default()
        };
        let out = render_formation("frm_x", &[], &t, None);
        let want = "questions:\n  tsk_p  coder asks (through lead)  answered  waited 900 ms  question 20 B  answer 4 B\n  tsk_c  coder asks  open  question 20 B\nusage:\n";
        assert!(out.contains(want), "{out}");
    }
}
