//! One task's timeline, as `mur ui` shows it: every step in the order it began, each with its
//! offset from the task's start and its duration: the task's text (`task_text`, from
//! `texts.jsonl`), each model turn (`inference`), each tool call (`tool_call`, refused or failed
//! ones too), each member call (`member_call`, with the callee's subtree cost when the record
//! carries `subtree_cost`), each question and its answer (`input_requested`, `input_received`),
//! and the end. A record is written when its step ends, so a step's start is its timestamp less
//! its duration. A step's words come from `texts.jsonl`'s `step_text` records: a turn's new
//! input and its output (by turn number), a tool call's arguments and result (by call id), a
//! question and its answer (by order). Where a session kept none (its records predate them, or
//! the text budget was spent), the step says so. Pure: the caller reads the records.

use std::collections::HashMap;

use serde_json::Value;

/// Steps of one task, at most: a longer task shows its first ones and says how many more.
pub const MAX_STEPS: usize = 2_000;

/// What a step without its text says instead.
pub const TURN_NOT_RECORDED: &str = "no words were kept for this turn: the trace keeps sizes and tokens";
pub const TOOL_NOT_RECORDED: &str = "no words were kept for this call: the trace keeps their sizes";
pub const QUESTION_NOT_RECORDED: &str = "no words were kept for this question: the trace keeps its size";
pub const TEXT_WITHHELD: &str = "the text was not kept: the session's text budget was spent";
pub const TEXT_CUT: &str = "the text stops where the kept bytes did";

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Step {
    /// `task`, `turn`, `tool`, `call`, `question`, `answer` or `end`.
    pub kind: &'static str,
    /// Milliseconds from the task's start (its `task_start`, else its first step).
    pub at_ms: u64,
    pub duration_ms: Option<u64>,
    pub title: String,
    pub detail: String,
    /// The step's own text, where the records keep it.
    pub text: Option<String>,
    /// Why a text is not shown, or that it is cut.
    pub note: Option<&'static str>,
    /// It failed, was refused or canceled.
    pub failed: bool,
    /// The step's words, each labelled (`input`, `output`, `arguments`, `result`, `question`,
    /// `answer`), from `step_text` records.
    pub parts: Vec<Part>,
    /// What `step_text` records name the step by: a turn's number, a tool call's id.
    pub key: String,
}

/// One labelled piece of a step's words.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Part {
    pub label: String,
    /// Empty when withheld.
    pub text: String,
    /// [`TEXT_WITHHELD`] or [`TEXT_CUT`].
    pub note: Option<&'static str>,
}

/// A `step_text` (or `task_text`) record's kept text and its note.
fn kept(r: &Value) -> (Option<String>, Option<&'static str>) {
    let note = if r["withheld"].as_bool() == Some(true) {
        Some(TEXT_WITHHELD)
    } else if r["cut"].as_bool() == Some(true) {
        Some(TEXT_CUT)
    } else {
        None
    };
    (r["text"].as_str().map(str::to_owned), note)
}

/// The task's timeline, and how many steps past [`MAX_STEPS`] were left out. `records` are a
/// session's records (its trace's and its `texts.jsonl`'s, in any order; others' are skipped).
pub fn build<'a>(task_id: &str, records: impl IntoIterator<Item = &'a Value>) -> (Vec<Step>, usize) {
    let mut steps: Vec<(u64, Step)> = Vec::new();
    let mut started: Option<u64> = None;
    let mut more = 0usize;
    // Words by (step, key), and a question's by the order it was asked.
    let mut words: HashMap<(String, String), Vec<Part>> = HashMap::new();
    let mut asked: Vec<(Option<Part>, Option<Part>)> = Vec::new();
    for r in records.into_iter().filter(|r| r["task_id"].as_str() == Some(task_id)) {
        let ts = r["timestamp"].as_u64().unwrap_or(0);
        let kind = r["event_type"].as_str().unwrap_or("");
        if kind == "task_start" {
            started = Some(started.map_or(ts, |s| s.min(ts)));
            continue;
        }
        if kind == super::texts::STEP_TEXT {
            let (text, note) = kept(r);
            let part = Part {
                label: s(r, "part"),
                text: text.unwrap_or_default(),
                note,
            };
            match (r["step"].as_str(), r["part"].as_str()) {
                (Some("question"), Some("question")) => asked.push((Some(part), None)),
                (Some("question"), Some("answer")) => match asked.last_mut() {
                    Some((_, answer @ None)) => *answer = Some(part),
                    _ => asked.push((None, Some(part))),
                },
                (Some(step), _) => words.entry((step.to_owned(), s(r, "key"))).or_default().push(part),
                _ => {}
            }
            continue;
        }
        let Some((took, step)) = step_of(kind, r) else {
            continue;
        };
        if steps.len() >= MAX_STEPS {
            more += 1;
            continue;
        }
        steps.push((ts.saturating_sub(took.unwrap_or(0)), step));
    }
    // Each step's words: turns and tool calls by key, questions and answers in the order asked.
    let (mut questions, mut answers) = (0usize, 0usize);
    for (_, step) in &mut steps {
        // The k-th question step takes the k-th question's words, the k-th answer step its answer.
        let mut nth = |seen: &mut usize, answer: bool| -> Vec<Part> {
            *seen += 1;
            let q = asked.get_mut(*seen - 1);
            q.and_then(|(question, reply)| if answer { reply.take() } else { question.take() })
                .into_iter()
                .collect()
        };
        let found: Vec<Part> = match step.kind {
            "turn" | "tool" => words
                .remove(&(step.kind.to_owned(), step.key.clone()))
                .unwrap_or_default(),
            "question" => nth(&mut questions, false),
            "answer" => nth(&mut answers, true),
            _ => Vec::new(),
        };
        if !found.is_empty() {
            step.parts = found;
            // The words are there: nothing to say of their absence.
            if step.note.is_some_and(|n| n != TEXT_WITHHELD && n != TEXT_CUT) {
                step.note = None;
            }
        }
    }
    steps.sort_by_key(|(begin, s)| (order(s.kind), *begin));
    let base = started.or_else(|| steps.first().map(|(b, _)| *b)).unwrap_or(0);
    let steps = steps
        .into_iter()
        .map(|(begin, mut s)| {
            s.at_ms = begin.saturating_sub(base);
            s
        })
        .collect();
    (steps, more)
}

/// The text comes first and the end last, whatever the clocks say; the rest as they began.
fn order(kind: &str) -> u8 {
    match kind {
        "task" => 0,
        "end" => 2,
        _ => 1,
    }
}

fn s(r: &Value, k: &str) -> String {
    r[k].as_str().unwrap_or("-").to_owned()
}

fn n(r: &Value, k: &str) -> String {
    r[k].as_u64().map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// A record's step and how long before its timestamp it began.
fn step_of(kind: &str, r: &Value) -> Option<(Option<u64>, Step)> {
    let dur = r["duration_ms"].as_u64();
    let step = match kind {
        super::texts::TASK_TEXT => {
            let (text, note) = kept(r);
            Step {
                kind: "task",
                title: "task".into(),
                detail: format!("{} B", n(r, "text_bytes")),
                text,
                note,
                ..Step::default()
            }
        }
        "inference" => {
            let model = r["response_model"].as_str().or(r["model"].as_str()).unwrap_or("-");
            Step {
                kind: "turn",
                title: format!("turn {} · {model}", n(r, "turn")),
                detail: format!(
                    "{} tokens in · {} tokens out · {}",
                    n(r, "input_tokens"),
                    n(r, "output_tokens"),
                    s(r, "status")
                ),
                note: Some(TURN_NOT_RECORDED),
                failed: r["status"] != "ok",
                duration_ms: dur,
                key: n(r, "turn"),
                ..Step::default()
            }
        }
        "tool_call" => Step {
            kind: "tool",
            title: format!("tool {} ({})", s(r, "tool"), s(r, "kind")),
            detail: format!(
                "{} · {} B in · {} B out",
                s(r, "status"),
                n(r, "input_bytes"),
                n(r, "output_bytes")
            ),
            note: Some(TOOL_NOT_RECORDED),
            failed: r["status"] != "ok",
            duration_ms: dur,
            key: s(r, "call_id"),
            ..Step::default()
        },
        "member_call" => {
            let mut detail = s(r, "status");
            if let Some(cost) = crate::cost::Cost::from_record(&r["subtree_cost"]) {
                detail.push_str(&format!(" · subtree: {}", cost.summary()));
            }
            Step {
                kind: "call",
                title: format!("call {}", s(r, "member")),
                detail,
                failed: r["status"] != "completed",
                duration_ms: dur,
                ..Step::default()
            }
        }
        "input_requested" => {
            let by: Vec<&str> = r["asked_by"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            Step {
                kind: "question",
                title: if by.is_empty() {
                    "asks".into()
                } else {
                    format!("{} asks", by.join(" ← "))
                },
                detail: format!("{} B", n(r, "question_bytes")),
                note: Some(QUESTION_NOT_RECORDED),
                ..Step::default()
            }
        }
        // Placed when it came, with how long the task waited for it.
        "input_received" => {
            return Some((
                None,
                Step {
                    kind: "answer",
                    title: format!("answer: {}", s(r, "outcome")),
                    detail: format!("{} B", n(r, "answer_bytes")),
                    failed: r["outcome"] != "answered",
                    duration_ms: r["waited_ms"].as_u64(),
                    ..Step::default()
                },
            ));
        }
        "task_end" => Step {
            kind: "end",
            title: format!("ended: {}", s(r, "exit_status")),
            failed: r["exit_status"] != "ok",
            ..Step::default()
        },
        "task_canceled" | "task_rejected" => Step {
            kind: "end",
            title: format!(
                "{}: {}",
                if kind == "task_canceled" {
                    "canceled"
                } else {
                    "rejected"
                },
                crate::text::head(r["reason"].as_str().unwrap_or("-"), 512)
            ),
            failed: true,
            ..Step::default()
        },
        _ => return None,
    };
    // An end's duration is the task's, not a step's: it is placed where it happened.
    let took = if step.kind == "end" || step.kind == "task" {
        None
    } else {
        dur
    };
    Some((took, step))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rec(kind: &str, ts: u64, fields: Value) -> Value {
        let mut r = json!({"event_type": kind, "task_id": "tsk_1", "timestamp": ts});
        if let (Some(o), Value::Object(f)) = (r.as_object_mut(), fields) {
            o.extend(f);
        }
        r
    }

    #[test]
    fn every_step_in_the_order_it_began_with_its_offset() {
        let records = vec![
            rec("a2a_task_received", 990, json!({})),
            rec("task_start", 1000, json!({})),
            rec(
                "inference",
                1300,
                json!({"turn": 1, "model": "m", "duration_ms": 300,
                 "input_tokens": 20, "output_tokens": 7, "status": "ok"}),
            ),
            rec(
                "tool_call",
                1350,
                json!({"tool": "nope", "kind": "unknown", "duration_ms": 0,
                 "status": "refused", "input_bytes": 2, "output_bytes": 40}),
            ),
            rec(
                "tool_call",
                1400,
                json!({"tool": "words", "call_id": "c7", "kind": "wasm", "duration_ms": 50,
                 "status": "ok", "input_bytes": 24, "output_bytes": 1}),
            ),
            rec(
                "member_call",
                2000,
                json!({"member": "coder", "status": "completed", "duration_ms": 500,
                 "subtree_cost": {"input_tokens": 100, "output_tokens": 20, "model_turns": 2, "tool_calls": 0, "wall_ms": 480}}),
            ),
            rec("input_requested", 2100, json!({"asked_by": [], "question_bytes": 13})),
            rec(
                "input_received",
                2600,
                json!({"outcome": "answered", "waited_ms": 500, "answer_bytes": 5}),
            ),
            rec("task_end", 2700, json!({"exit_status": "ok", "duration_ms": 1700})),
            json!({"event_type": "tool_call", "task_id": "tsk_other", "timestamp": 1200, "tool": "x"}),
            // The texts file's records come after the trace's records.
            rec("task_text", 1000, json!({"text": "Paint it", "text_bytes": 8})),
            rec(
                "step_text",
                1300,
                json!({"step": "turn", "key": "1", "part": "input", "text": "Paint it", "text_bytes": 8}),
            ),
            rec(
                "step_text",
                1300,
                json!({"step": "turn", "key": "1", "part": "output", "text": "words {}", "text_bytes": 8}),
            ),
            rec(
                "step_text",
                1400,
                json!({"step": "tool", "key": "c7", "part": "arguments", "text": "{\"s\":1}", "text_bytes": 7}),
            ),
            rec(
                "step_text",
                1400,
                json!({"step": "tool", "key": "c7", "part": "result", "text_bytes": 9000, "withheld": true}),
            ),
            rec(
                "step_text",
                2100,
                json!({"step": "question", "key": "", "part": "question", "text": "Which colour?", "text_bytes": 13}),
            ),
            rec(
                "step_text",
                2600,
                json!({"step": "question", "key": "", "part": "answer", "text": "green", "text_bytes": 5}),
            ),
        ];
        let (steps, more) = build("tsk_1", &records);
        assert_eq!(more, 0);
        /// (kind, at, duration, title, detail holds, failed)
        type Want = (&'static str, u64, Option<u64>, &'static str, &'static str, bool);
        let want: &[Want] = &[
            ("task", 0, None, "task", "8 B", false),
            ("turn", 0, Some(300), "turn 1 · m", "20 tokens in · 7 tokens out", false),
            ("tool", 350, Some(0), "tool nope (unknown)", "refused", true),
            ("tool", 350, Some(50), "tool words (wasm)", "ok · 24 B in", false),
            (
                "call",
                500,
                Some(500),
                "call coder",
                "subtree: 100 tokens in, 20 out, 2 model turns, 0 tool calls, 480 ms",
                false,
            ),
            ("question", 1100, None, "asks", "13 B", false),
            ("answer", 1600, Some(500), "answer: answered", "5 B", false),
            ("end", 1700, None, "ended: ok", "", false),
        ];
        assert_eq!(steps.len(), want.len(), "{steps:#?}");
        for (i, (s, w)) in steps.iter().zip(want).enumerate() {
            assert_eq!(
                (s.kind, s.at_ms, s.duration_ms, s.title.as_str(), s.failed),
                (w.0, w.1, w.2, w.3, w.5),
                "step {i}: {s:?}"
            );
            assert!(s.detail.contains(w.4), "step {i}: {s:?}");
        }
        assert_eq!(steps[0].text.as_deref(), Some("Paint it"));
        let parts = |i: usize| -> Vec<(String, String, Option<&str>)> {
            steps[i]
                .parts
                .iter()
                .map(|p| (p.label.clone(), p.text.clone(), p.note))
                .collect()
        };
        let part = |l: &str, t: &str, n: Option<&'static str>| (l.to_owned(), t.to_owned(), n);
        assert_eq!(
            parts(1),
            [part("input", "Paint it", None), part("output", "words {}", None)]
        );
        assert_eq!(steps[1].note, None, "the turn's words are there");
        // A call whose words this session did not keep says so.
        assert_eq!((parts(2), steps[2].note), (vec![], Some(TOOL_NOT_RECORDED)));
        assert_eq!(
            parts(3),
            [
                part("arguments", "{\"s\":1}", None),
                part("result", "", Some(TEXT_WITHHELD))
            ]
        );
        assert_eq!(parts(5), [part("question", "Which colour?", None)]);
        assert_eq!(parts(6), [part("answer", "green", None)]);
    }

    #[test]
    fn withheld_cut_and_failed_steps_say_so() {
        // (records, the first step's note, text, failed)
        type Case = (Vec<Value>, Option<&'static str>, Option<&'static str>, bool);
        let table: Vec<Case> = vec![
            (
                vec![rec("task_text", 5, json!({"text_bytes": 9000, "withheld": true}))],
                Some(TEXT_WITHHELD),
                None,
                false,
            ),
            (
                vec![rec(
                    "task_text",
                    5,
                    json!({"text": "abc", "text_bytes": 9000, "cut": true}),
                )],
                Some(TEXT_CUT),
                Some("abc"),
                false,
            ),
            (
                vec![rec("task_canceled", 5, json!({"reason": "canceled by the operator"}))],
                None,
                None,
                true,
            ),
            (
                vec![rec(
                    "member_call",
                    5,
                    json!({"member": "w", "status": "failed", "duration_ms": 1}),
                )],
                None,
                None,
                true,
            ),
        ];
        for (i, (records, note, text, failed)) in table.into_iter().enumerate() {
            let (steps, _) = build("tsk_1", &records);
            assert_eq!(steps.len(), 1, "case {i}");
            assert_eq!(
                (steps[0].note, steps[0].text.as_deref(), steps[0].failed),
                (note, text, failed),
                "case {i}"
            );
        }
    }

    #[test]
    fn a_long_task_keeps_its_first_steps() {
        let records: Vec<Value> = (0..MAX_STEPS as u64 + 5)
            .map(|i| rec("tool_call", i, json!({"tool": "t", "kind": "wasm", "status": "ok"})))
            .collect();
        let (steps, more) = build("tsk_1", &records);
        assert_eq!((steps.len(), more), (MAX_STEPS, 5));
    }
}
