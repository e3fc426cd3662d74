//! The trace records a session writes (docs/reference/formation.md#trace-records): `session_start`
//! first, then `a2a_task_received`, `task_start`, `inference` (one per model turn), `task_end` /
//! `task_canceled` / `task_rejected`, `formation_ended`, `deadline_reached`, and `session_end`
//! last. `task_start`, `inference` and `task_end.duration_ms` carry the reference's names.
//!
//! Records go through [`TraceWriter`] (common keys first, then the fields in the order
//! docs/reference/formation.md#trace-records lists them; one lock, so lines from the door's threads
//! and the controller never interleave). A failed write is reported once on the console and
//! otherwise ignored: losing a trace line must not stop a wind-down.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use serde_json::Value;

use crate::model::Totals;
use crate::trace::TraceWriter;

use super::records::Console;

/// One session's `trace.jsonl`: the session's record kinds over the shared [`TraceWriter`].
#[derive(Clone)]
pub struct Journal {
    inner: Arc<Inner>,
}

struct Inner {
    writer: Arc<TraceWriter>,
    console: Console,
    /// A failed write is reported once.
    reported: AtomicBool,
    /// A model capsule's usage counters, for `session_end`.
    usage: OnceLock<Arc<Totals>>,
    /// Model tasks that ended `max_turns_reached`, until their `task_end` is written.
    max_turns: Mutex<HashSet<String>>,
    /// When each running task started, until its end is written (`duration_ms`). Only tasks
    /// that run are here, and the board runs one at a time.
    started: Mutex<HashMap<String, Instant>>,
    /// `texts.jsonl` beside the trace (`trace::texts`): opened at the first text kept.
    texts_path: std::path::PathBuf,
    texts: OnceLock<Option<TraceWriter>>,
    budget: Mutex<crate::trace::texts::Budget>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Journal({})", self.inner.writer.session_id())
    }
}

/// `session_start`'s fields (docs/reference/formation.md#trace-records).
#[derive(Debug, Clone, Default)]
pub struct Start<'a> {
    pub capsule_name: &'a str,
    pub capsule_version: &'a str,
    /// Model capsules only.
    pub model: Option<&'a str>,
    pub max_turns: Option<u32>,
    pub tools_declared: &'a [String],
    pub formation_id: Option<&'a str>,
    /// `(member, callees)`: only for a member started with a channel.
    pub member: Option<(&'a str, &'a [String])>,
    /// `{"at","secs","source":"inherited"}`.
    pub deadline: Option<Deadline<'a>>,
}

#[derive(Debug, Clone, Copy)]
pub struct Deadline<'a> {
    /// RFC 3339 UTC with milliseconds.
    pub at: &'a str,
    pub secs: u64,
}

impl Journal {
    /// Creates `trace.jsonl` (0600) for `session_id`, its records dropped past `limit` bytes
    /// (`trace_truncated`, docs/reference/formation.md#trace-records).
    pub fn create(path: &Path, session_id: &str, limit: u64, console: Console) -> std::io::Result<Journal> {
        let writer = Arc::new(TraceWriter::create_bounded(path, session_id, limit)?);
        Ok(Journal {
            inner: Arc::new(Inner {
                writer,
                console,
                reported: AtomicBool::new(false),
                usage: OnceLock::new(),
                max_turns: Mutex::new(HashSet::new()),
                started: Mutex::new(HashMap::new()),
                texts_path: path.with_file_name(crate::trace::texts::FILE),
                texts: OnceLock::new(),
                budget: Mutex::new(crate::trace::texts::Budget::default()),
            }),
        })
    }

    /// The writer itself, for parts that write their own records (member calls).
    pub fn writer(&self) -> Arc<TraceWriter> {
        Arc::clone(&self.inner.writer)
    }

    /// Appends one record; returns its `event_id` (empty if it could not be written).
    pub fn write(&self, event_type: &str, parent_id: Option<&str>, fields: &[(&str, Value)]) -> String {
        match self.inner.writer.write(event_type, parent_id, fields) {
            Ok(id) => id,
            Err(e) => {
                if !self.inner.reported.swap(true, Ordering::Relaxed) {
                    self.inner.console.diag(&crate::diag::Diagnostic::new(
                        crate::diag::W_RUN_009,
                        format!("the trace cannot be written ({e}); later records may be missing"),
                    ));
                }
                String::new()
            }
        }
    }

    /// What `task_id` and its calls spent, from the records written for it (`crate::cost`).
    pub fn task_cost(&self, task_id: &str, wall_ms: u64) -> crate::cost::Cost {
        self.inner.writer.meter().take(task_id, wall_ms)
    }

    /// The usage counters `session_end` reports (a model capsule's agent).
    pub fn set_usage(&self, totals: Arc<Totals>) {
        let _ = self.inner.usage.set(totals);
    }

    /// Notes that a model task is about to fail `max_turns_reached`.
    pub fn mark_max_turns(&self, task_id: &str) {
        crate::sync::lock(&self.inner.max_turns).insert(task_id.to_string());
    }

    /// Whether [`Journal::mark_max_turns`] named this task; forgets it.
    pub fn take_max_turns(&self, task_id: &str) -> bool {
        crate::sync::lock(&self.inner.max_turns).remove(task_id)
    }

    /// Writes `session_start`, the record every other one hangs off. Unlike later records, its
    /// failure is returned: a session that cannot write its first record (a full disk) must not
    /// start at all, since it would run with no trace.
    pub fn session_start(&self, s: &Start<'_>) -> std::io::Result<String> {
        let mut f: Vec<(&str, Value)> = vec![
            ("capsule_name", s.capsule_name.into()),
            ("capsule_version", s.capsule_version.into()),
        ];
        if let Some(m) = s.model {
            f.push(("model", m.into()));
        }
        f.push(("max_turns", s.max_turns.into()));
        f.push(("tools_declared", s.tools_declared.into()));
        if let Some(frm) = s.formation_id {
            f.push(("formation_id", frm.into()));
        }
        if let Some((member, callees)) = s.member {
            f.push(("formation_member", member.into()));
            f.push(("formation_callees", callees.into()));
        }
        if let Some(d) = s.deadline {
            f.push((
                "deadline",
                serde_json::json!({"at": d.at, "secs": d.secs, "source": "inherited"}),
            ));
        }
        self.inner.writer.write("session_start", None, &f)
    }

    pub fn task_received(
        &self,
        task_id: &str,
        context_id: &str,
        message_id: &str,
        traceparent: Option<&str>,
        caller_member: Option<&str>,
    ) {
        let mut f: Vec<(&str, Value)> = vec![
            ("task_id", task_id.into()),
            ("context_id", context_id.into()),
            ("message_id", message_id.into()),
            ("traceparent_from_caller", traceparent.into()),
        ];
        if let Some(c) = caller_member {
            f.push(("caller_member", c.into()));
        }
        self.write("a2a_task_received", None, &f);
    }

    /// `task_start`: the task left the queue and runs.
    pub fn task_start(&self, task_id: &str) {
        crate::sync::lock(&self.inner.started).insert(task_id.to_string(), Instant::now());
        self.write("task_start", None, &[("task_id", task_id.into())]);
    }

    /// `task_text` [ours], in `texts.jsonl` beside the trace, never in the trace: the task's text,
    /// every credential the member holds scrubbed, within the bounds of `trace::texts`.
    pub fn task_text(&self, task_id: &str, text: &str) {
        self.keep_text(crate::trace::texts::TASK_TEXT, task_id, Vec::new(), text);
    }

    /// A step's words beside the trace (`step_text`, `trace::texts`): `step` and `key` name the
    /// step, `part` which of its words; scrubbed and bounded as a task's text is.
    pub fn step_text(&self, task_id: &str, step: &str, key: &str, part: &str, text: &str) {
        let naming = vec![("step", step.into()), ("key", key.into()), ("part", part.into())];
        self.keep_text(crate::trace::texts::STEP_TEXT, task_id, naming, text);
    }

    fn keep_text(&self, event: &str, task_id: &str, naming: Vec<(&str, Value)>, text: &str) {
        let scrubbed = crate::secret::scrub(text.to_owned());
        let kept = crate::sync::lock(&self.inner.budget).take(task_id, &scrubbed);
        let writer = self.inner.texts.get_or_init(|| {
            TraceWriter::create_bounded(
                &self.inner.texts_path,
                self.inner.writer.session_id(),
                crate::trace::texts::SESSION_BYTES as u64 + (64 << 10),
            )
            .ok()
        });
        let Some(writer) = writer else {
            return;
        };
        let mut fields: Vec<(&str, Value)> = vec![("task_id", task_id.into())];
        fields.extend(naming);
        fields.extend(kept.fields());
        // A text that cannot be kept is no reason to stop the task: the page says it has none.
        let _ = writer.write(event, None, &fields);
    }

    /// `task_grant` [ours] (docs/reference/formation.md#trace-records): on whose behalf, until when
    /// and with how much the task runs: the grant its call came with, as its door verified it, or,
    /// for a task that came with none, the root origin its own calls are granted from.
    pub fn task_grant(&self, task_id: &str, grant: Option<&crate::grant::Grant>, root: Option<&crate::grant::Origin>) {
        use serde_json::json;
        let chain = |g: &crate::grant::Grant| -> serde_json::Value {
            g.chain
                .iter()
                .map(|h| json!({"member": h.member, "task": h.task}))
                .collect()
        };
        let fields: Vec<(&str, serde_json::Value)> = match grant {
            Some(g) => vec![
                ("task_id", task_id.into()),
                ("grant_id", json!(g.id)),
                ("origin", json!(g.origin.as_string())),
                ("chain", chain(g)),
                ("deadline_ms", json!(g.deadline_ms)),
                ("budget", json!(g.budget)),
            ],
            None => vec![
                ("task_id", task_id.into()),
                ("grant_id", serde_json::Value::Null),
                (
                    "origin",
                    json!(root.unwrap_or(&crate::grant::Origin::Member).as_string()),
                ),
                ("chain", json!([])),
                ("deadline_ms", serde_json::Value::Null),
                ("budget", serde_json::Value::Null),
            ],
        };
        self.write("task_grant", None, &fields);
    }

    /// How long the task ran, from its `task_start`; forgets it. `None` for a task that never
    /// started (cancelled in the queue).
    fn ran_ms(&self, task_id: &str) -> Option<u64> {
        let t = crate::sync::lock(&self.inner.started).remove(task_id)?;
        Some(crate::timing::millis(t.elapsed()))
    }

    /// `task_end`, with `duration_ms` from its `task_start` (0 should it have none).
    pub fn task_end(&self, task_id: &str, exit_status: &str) {
        let ms = self.ran_ms(task_id).unwrap_or(0);
        self.write(
            "task_end",
            None,
            &[
                ("task_id", task_id.into()),
                ("exit_status", exit_status.into()),
                ("duration_ms", ms.into()),
            ],
        );
    }

    /// `task_canceled`, with `duration_ms` when the task had started.
    pub fn task_canceled(&self, task_id: &str, reason: &str) {
        let mut f: Vec<(&str, Value)> = vec![("task_id", task_id.into()), ("reason", reason.into())];
        if let Some(ms) = self.ran_ms(task_id) {
            f.push(("duration_ms", ms.into()));
        }
        self.write("task_canceled", None, &f);
    }

    /// `inference`: one model turn.
    pub fn model_turn(&self, turn: &crate::trace::turn::ModelTurn) {
        self.write(crate::trace::turn::RECORD, None, &turn.fields());
    }

    pub fn task_rejected(&self, task_id: &str, reason: &str) {
        self.write(
            "task_rejected",
            None,
            &[("task_id", task_id.into()), ("reason", reason.into())],
        );
    }

    /// A task asked a question (docs/reference/formation.md#trace-records): who asked, and the
    /// question's size, never its text.
    pub fn input_requested(&self, task_id: &str, asked_by: &[String], question_bytes: usize) {
        self.write(
            "input_requested",
            None,
            &[
                ("task_id", task_id.into()),
                ("asked_by", serde_json::json!(asked_by)),
                ("question_bytes", question_bytes.into()),
            ],
        );
    }

    /// A task's question is over: how, after how long, and the answer's size.
    pub fn input_received(
        &self,
        task_id: &str,
        waited_ms: u64,
        answer_bytes: Option<usize>,
        outcome: crate::tasks::InputOutcome,
    ) {
        self.write(
            "input_received",
            None,
            &[
                ("task_id", task_id.into()),
                ("outcome", outcome.as_str().into()),
                ("waited_ms", waited_ms.into()),
                ("answer_bytes", serde_json::json!(answer_bytes)),
            ],
        );
    }

    /// `parent_id` is the `session_start` event.
    pub fn formation_ended(&self, session_start: &str, formation_id: &str) {
        self.write(
            "formation_ended",
            Some(session_start),
            &[("formation_id", formation_id.into())],
        );
    }

    pub fn deadline_reached(&self, at: &str, secs: u64) {
        self.write(
            "deadline_reached",
            None,
            &[
                ("deadline_at", at.into()),
                ("deadline_secs", secs.into()),
                ("source", "inherited".into()),
            ],
        );
    }

    pub fn session_end(&self, duration_ms: u64, exit_status: &str) {
        let u = self.inner.usage.get().map(|t| t.snapshot()).unwrap_or_default();
        self.write(
            "session_end",
            None,
            &[
                ("total_turns", u.turns.into()),
                ("total_input_tokens", u.input_tokens.into()),
                ("total_output_tokens", u.output_tokens.into()),
                ("total_tool_calls", u.tool_calls.into()),
                ("total_shell_calls", 0.into()),
                ("duration_ms", duration_ms.into()),
                ("exit_status", exit_status.into()),
            ],
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_trace_reads_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trace.jsonl");
        let j = Journal::create(&path, "ses_1", crate::trace::writer::MAX_TRACE_BYTES, Console::new()).unwrap();
        let callees = vec!["coder".to_string()];
        let start = j
            .session_start(&Start {
                capsule_name: "local/echo",
                capsule_version: "0.1.0",
                tools_declared: &[],
                formation_id: Some("frm_1"),
                member: Some(("lead", &callees)),
                deadline: Some(Deadline {
                    at: "2026-01-01T00:00:00.000Z",
                    secs: 5,
                }),
                ..Start::default()
            })
            .unwrap();
        j.formation_ended(&start, "frm_1");
        j.session_end(12, "ok");
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["event_id"], Value::from(start.clone()));
        let first = text.lines().next().unwrap();
        assert!(
            first.ends_with(
                ",\"capsule_name\":\"local/echo\",\"capsule_version\":\"0.1.0\",\"max_turns\":null,\"tools_declared\":[],\"formation_id\":\"frm_1\",\"formation_member\":\"lead\",\"formation_callees\":[\"coder\"],\"deadline\":{\"at\":\"2026-01-01T00:00:00.000Z\",\"secs\":5,\"source\":\"inherited\"}}"
            ),
            "{first}"
        );
        assert_eq!(lines[1]["parent_id"], Value::from(start));
        assert_eq!(lines[2]["exit_status"], "ok");
        assert_eq!(lines[2]["total_shell_calls"], 0);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn a_session_start_that_cannot_be_written_is_an_error() {
        // /dev/full opens, and every write to it fails with ENOSPC, as on a full disk.
        let j = Journal::create(
            Path::new("/dev/full"),
            "ses_1",
            crate::trace::writer::MAX_TRACE_BYTES,
            Console::new(),
        )
        .unwrap();
        let err = j.session_start(&Start::default()).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(28), "{err}");
    }
}
