//! The texts a session keeps for its operator beside its trace (`texts.jsonl`, 0600, in the same
//! records directory): what the trace itself never holds, so that `mur ui` can show a task's
//! steps with their words: each task's text (`task_text`), and each step's (`step_text`): a model
//! turn's new input and its output, a tool call's arguments and result, a question and its answer.
//!
//! Bounded three ways: one field holds at most [`FIELD_BYTES`], one task's texts at most
//! [`TASK_BYTES`], one session's at most [`SESSION_BYTES`]; a text cut at a bound says so
//! (`cut`), a text past a spent budget is not kept at all (`withheld`) and only its size is. The
//! caller scrubs every credential the member holds before a text comes here.

use std::collections::HashMap;

use serde_json::Value;

/// The file beside `trace.jsonl`.
pub const FILE: &str = "texts.jsonl";
/// The record of a task's text.
pub const TASK_TEXT: &str = "task_text";
/// The record of a step's words: `step` (`turn`, `tool`, `question`), `key` (a turn's number, a
/// tool call's id; empty for a question, which is matched by its order), `part` (`input`,
/// `output`, `arguments`, `result`, `question`, `answer`) and the kept text.
pub const STEP_TEXT: &str = "step_text";
/// One text field, at most.
pub const FIELD_BYTES: usize = 8 << 10;
/// One task's texts, at most.
pub const TASK_BYTES: usize = 32 << 10;
/// One session's texts, at most; also the bound of the file (records past it are dropped).
pub const SESSION_BYTES: usize = 1 << 20;
/// Tasks whose spending is remembered; past it the oldest counts are forgotten (their tasks
/// have long ended: one session runs one task at a time).
const MAX_TASKS: usize = 4096;

/// What is kept of one text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    /// The text, whole or cut at a character boundary; empty when withheld.
    pub text: String,
    /// The text's whole size.
    pub bytes: u64,
    pub cut: bool,
    /// Nothing was kept: the task's or the session's budget was spent.
    pub withheld: bool,
}

impl Kept {
    /// The record's fields after `task_id`.
    pub fn fields(&self) -> Vec<(&'static str, Value)> {
        let mut f: Vec<(&'static str, Value)> = Vec::new();
        if !self.withheld {
            f.push(("text", self.text.as_str().into()));
        }
        f.push(("text_bytes", self.bytes.into()));
        if self.cut {
            f.push(("cut", true.into()));
        }
        if self.withheld {
            f.push(("withheld", true.into()));
        }
        f
    }
}

/// One session's spending of its text budgets.
#[derive(Debug, Default)]
pub struct Budget {
    session: usize,
    tasks: HashMap<String, usize>,
    order: Vec<String>,
}

impl Budget {
    /// What is kept of `text`, a text of `task_id`, and the budgets spent accordingly.
    pub fn take(&mut self, task_id: &str, text: &str) -> Kept {
        let spent = self.tasks.get(task_id).copied().unwrap_or(0);
        let room = FIELD_BYTES
            .min(TASK_BYTES.saturating_sub(spent))
            .min(SESSION_BYTES.saturating_sub(self.session));
        let bytes = text.len() as u64;
        if room == 0 && !text.is_empty() {
            return Kept {
                text: String::new(),
                bytes,
                cut: false,
                withheld: true,
            };
        }
        let kept = crate::text::head(text, room).to_owned();
        self.session += kept.len();
        if !self.tasks.contains_key(task_id) {
            if self.order.len() >= MAX_TASKS {
                let old = self.order.remove(0);
                self.tasks.remove(&old);
            }
            self.order.push(task_id.to_owned());
        }
        *self.tasks.entry(task_id.to_owned()).or_default() += kept.len();
        Kept {
            cut: kept.len() < text.len(),
            text: kept,
            bytes,
            withheld: false,
        }
    }
}

/// What a model turn was given that the turn before it was not: the messages after the last
/// assistant message (the task text, tool results, member answers), one block each.
pub fn turn_input(messages: &[crate::wire::model::Msg]) -> String {
    use crate::wire::model::Msg;
    let since = messages
        .iter()
        .rposition(|m| matches!(m, Msg::Assistant(_)))
        .map_or(0, |i| i + 1);
    let mut blocks = Vec::new();
    for m in &messages[since..] {
        match m {
            Msg::User(text) => blocks.push(text.clone()),
            Msg::ToolResults(results) => {
                for r in results {
                    let error = if r.is_error { " (error)" } else { "" };
                    blocks.push(format!("result of {}{error}: {}", r.id, r.text));
                }
            }
            Msg::Assistant(_) => {}
        }
    }
    blocks.join("\n\n")
}

/// What a model turn answered: its text, then each tool call it asked for with its arguments.
pub fn turn_output(text: &str, calls: &[crate::wire::model::ToolCall]) -> String {
    let mut out = text.to_owned();
    for c in calls {
        if !out.is_empty() {
            out.push('\n');
        }
        let args = match &c.input {
            Ok(v) => v.to_string(),
            Err(why) => format!("<not JSON: {why}>"),
        };
        out.push_str(&format!("{} {args}", c.name));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turns_words_are_what_it_was_newly_given_and_what_it_answered() {
        use crate::wire::model::{Msg, ToolCall, ToolOutput};
        let first = vec![Msg::User("earlier".into()), Msg::User("the task".into())];
        assert_eq!(turn_input(&first), "earlier\n\nthe task");
        let later = vec![
            Msg::User("the task".into()),
            Msg::Assistant(serde_json::json!({"role": "assistant"})),
            Msg::ToolResults(vec![
                ToolOutput {
                    id: "c1".into(),
                    text: "4".into(),
                    is_error: false,
                },
                ToolOutput {
                    id: "c2".into(),
                    text: "no such tool".into(),
                    is_error: true,
                },
            ]),
        ];
        assert_eq!(
            turn_input(&later),
            "result of c1: 4\n\nresult of c2 (error): no such tool"
        );
        let calls = [
            ToolCall {
                id: "c1".into(),
                name: "add".into(),
                input: Ok(serde_json::json!({"a": 2})),
            },
            ToolCall {
                id: "c2".into(),
                name: "nope".into(),
                input: Err("expected value".into()),
            },
        ];
        assert_eq!(
            turn_output("", &calls),
            "add {\"a\":2}\nnope <not JSON: expected value>"
        );
        assert_eq!(turn_output("Done.", &[]), "Done.");
    }

    #[test]
    fn texts_are_kept_within_field_task_and_session_bounds() {
        let big = "a".repeat(FIELD_BYTES + 10);
        // "é" is two bytes: a cut never splits it.
        let accented = format!("{}é", "a".repeat(FIELD_BYTES - 1));
        // (task, text, kept bytes, cut, withheld)
        let table: Vec<(&str, &str, usize, bool, bool)> = vec![
            ("t1", "hello", 5, false, false),
            ("t1", big.as_str(), FIELD_BYTES, true, false),
            ("t1", accented.as_str(), FIELD_BYTES - 1, true, false),
            ("t1", big.as_str(), FIELD_BYTES, true, false),
            // What is left of the task's budget, then nothing.
            ("t1", big.as_str(), TASK_BYTES - (5 + 3 * FIELD_BYTES - 1), true, false),
            ("t1", "more", 0, false, true),
            ("t2", "", 0, false, false),
            ("t2", "fresh", 5, false, false),
        ];
        let mut b = Budget::default();
        for (i, (task, text, kept, cut, withheld)) in table.into_iter().enumerate() {
            let k = b.take(task, text);
            assert_eq!(
                (k.text.len(), k.cut, k.withheld, k.bytes),
                (kept, cut, withheld, text.len() as u64),
                "case {i}"
            );
            assert!(text.starts_with(&k.text), "case {i}");
        }
    }

    #[test]
    fn a_session_keeps_at_most_its_budget_and_says_what_it_withheld() {
        let mut b = Budget::default();
        let text = "x".repeat(FIELD_BYTES);
        let mut kept = 0;
        let mut withheld = 0;
        for i in 0..(SESSION_BYTES / FIELD_BYTES + 3) {
            let k = b.take(&format!("t{i}"), &text);
            kept += k.text.len();
            withheld += usize::from(k.withheld);
        }
        assert_eq!(kept, SESSION_BYTES);
        assert_eq!(withheld, 3);
        let w = b.take("late", "secretless");
        let keys: Vec<&str> = w.fields().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["text_bytes", "withheld"], "a withheld text has no text field");
        let keys: Vec<&str> = Budget::default()
            .take("t", "hi")
            .fields()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(keys, ["text", "text_bytes"]);
    }
}
