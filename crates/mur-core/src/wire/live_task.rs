//! What `mur ui` shows of a task as its door reports it: its state, the question it asks, and its
//! answer text as the stream brings it. Traces hold only sizes, so the text comes from the door
//! (a GetTask result, then SubscribeToTask events); this is the reading of both, bounded: at most
//! [`TEXT_BYTES`] of the answer and [`QUESTION_BYTES`] of the question are kept, whatever the door
//! sends. The text follows `mur send`'s rule (docs/reference/door.md): an artifact chunk with
//! `append: true` adds to the answer, one without replaces it.

use serde_json::Value;

use crate::task::TaskState;

/// The answer text kept per task: a page shows a running answer, not a transcript.
pub const TEXT_BYTES: usize = 64 << 10;
/// A question is at most 16 KiB at the door (docs/reference/door.md#asking).
pub const QUESTION_BYTES: usize = 16 << 10;

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LiveTask {
    /// The A2A state, as the door last said it (`None` before any).
    pub state: Option<TaskState>,
    /// The answer so far, at most [`TEXT_BYTES`].
    pub text: String,
    /// The answer was longer than what is kept.
    pub cut: bool,
    /// The open question, while the task waits for input.
    pub question: Option<String>,
}

impl LiveTask {
    /// A GetTask result (the Task object), or a stream's `{"task":…}` snapshot.
    pub fn apply_task(&mut self, task: &Value) {
        self.apply_status(task.get("status"));
        if let Some(list) = task.get("artifacts").and_then(Value::as_array) {
            let response = list
                .iter()
                .find(|a| a.get("artifactId").and_then(Value::as_str) == Some("response"));
            if let Some(text) = response.or_else(|| list.first()).and_then(text_of) {
                self.put(&text, false);
            }
        }
    }

    /// One SubscribeToTask event (the JSON-RPC response); anything else is ignored.
    pub fn apply_event(&mut self, event: &Value) {
        let Some(result) = event.get("result") else { return };
        if let Some(task) = result.get("task") {
            self.apply_task(task);
        } else if let Some(u) = result.get("statusUpdate") {
            self.apply_status(u.get("status"));
        } else if let Some(u) = result.get("artifactUpdate") {
            let append = u.get("append").and_then(Value::as_bool).unwrap_or(false);
            if let Some(text) = u.get("artifact").and_then(text_of) {
                self.put(&text, append);
            }
        }
    }

    /// Whether the door will say no more of the task on this stream: it ended, or it asks.
    pub fn settled(&self) -> bool {
        self.state
            .is_some_and(|s| s.is_terminal() || s == TaskState::InputRequired)
    }

    fn apply_status(&mut self, status: Option<&Value>) {
        let Some(state) = status
            .and_then(|s| s.get("state"))
            .and_then(Value::as_str)
            .and_then(TaskState::from_wire)
        else {
            return;
        };
        self.state = Some(state);
        self.question = (state == TaskState::InputRequired)
            .then(|| crate::text::head(&status_message_text(status), QUESTION_BYTES).to_owned());
    }

    fn put(&mut self, text: &str, append: bool) {
        if !append {
            self.text.clear();
            self.cut = false;
        }
        let room = TEXT_BYTES - self.text.len();
        let kept = crate::text::head(text, room);
        if kept.len() < text.len() {
            self.cut = true;
        }
        self.text.push_str(kept);
    }
}

/// The text parts of an artifact, joined.
fn text_of(artifact: &Value) -> Option<String> {
    let parts = artifact.get("parts")?.as_array()?;
    let texts: Vec<&str> = parts
        .iter()
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect();
    (!texts.is_empty()).then(|| texts.concat())
}

/// The text parts of a task status's message, joined: what an input-required task asks.
pub fn status_message_text(status: Option<&Value>) -> String {
    status
        .and_then(|s| s.pointer("/message/parts"))
        .and_then(Value::as_array)
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chunk(text: &str, append: bool) -> Value {
        json!({"result": {"artifactUpdate": {"append": append,
            "artifact": {"artifactId": "response", "parts": [{"text": text}]}}}})
    }

    fn status(state: &str, question: Option<&str>) -> Value {
        let mut s = json!({"state": state});
        if let Some(q) = question {
            s["message"] = json!({"role": "ROLE_AGENT", "parts": [{"text": q}]});
        }
        json!({"result": {"statusUpdate": {"status": s}}})
    }

    #[test]
    fn events_build_the_state_question_and_text() {
        let snapshot = json!({"result": {"task": {"id": "tsk_1", "status": {"state": "TASK_STATE_WORKING"},
            "artifacts": [{"artifactId": "response", "parts": [{"text": "He"}]}]}}});
        let long = "é".repeat(TEXT_BYTES);
        // (events, state, text, cut, question)
        type Case<'a> = (Vec<Value>, Option<TaskState>, &'a str, bool, Option<&'a str>);
        let table: Vec<Case> = vec![
            (vec![], None, "", false, None),
            (vec![snapshot.clone()], Some(TaskState::Working), "He", false, None),
            (
                vec![snapshot.clone(), chunk("llo", true), chunk(" world", true)],
                Some(TaskState::Working),
                "Hello world",
                false,
                None,
            ),
            // A chunk without `append` replaces what came before (a turn the next one replaced).
            (
                vec![chunk("draft", true), chunk("final", false)],
                None,
                "final",
                false,
                None,
            ),
            (
                vec![
                    chunk("Hi", true),
                    status("TASK_STATE_INPUT_REQUIRED", Some("Which <file>?")),
                ],
                Some(TaskState::InputRequired),
                "Hi",
                false,
                Some("Which <file>?"),
            ),
            // The answer closes the question.
            (
                vec![
                    status("TASK_STATE_INPUT_REQUIRED", Some("Which?")),
                    status("TASK_STATE_WORKING", None),
                ],
                Some(TaskState::Working),
                "",
                false,
                None,
            ),
            (
                vec![status("TASK_STATE_COMPLETED", None)],
                Some(TaskState::Completed),
                "",
                false,
                None,
            ),
            // Unknown states and errors change nothing.
            (
                vec![status("TASK_STATE_BOGUS", None), json!({"error": {"code": -1}})],
                None,
                "",
                false,
                None,
            ),
        ];
        for (events, state, text, cut, question) in table {
            let mut t = LiveTask::default();
            for e in &events {
                t.apply_event(e);
            }
            assert_eq!(t.state, state, "{events:?}");
            assert_eq!(t.text, text, "{events:?}");
            assert_eq!(t.cut, cut, "{events:?}");
            assert_eq!(t.question.as_deref(), question, "{events:?}");
        }
        // Past the bound the text stops growing, cut on a character boundary.
        let mut t = LiveTask::default();
        t.apply_event(&chunk("ab", true));
        t.apply_event(&chunk(&long, true));
        t.apply_event(&chunk("more", true));
        assert!(t.cut);
        assert!(t.text.len() <= TEXT_BYTES && t.text.len() > TEXT_BYTES - 4);
        assert!(t.text.starts_with("abé"));
        let mut q = LiveTask::default();
        q.apply_event(&status("TASK_STATE_INPUT_REQUIRED", Some(&long)));
        assert!(q.question.as_deref().is_some_and(|s| s.len() <= QUESTION_BYTES));
        assert!(q.settled());
    }
}
