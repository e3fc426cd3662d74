//! A task as A2A shows it (docs/reference/door.md#methods): the Task object, its status and its
//! `response` artifact, as `Value`s or as a borrowed view written straight into reply bytes. The
//! task model (`crate::tasks`) knows nothing of these shapes.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use serde_json::Value;

use crate::tasks::{HistoryMessage, NoAnswerBelow, Role, TaskSnapshot};

/// Text bytes of the history a task object shows: the newest messages that fit (A2A v1.0
/// §3.2.4: unset shows the server's default amount, and a server MAY show fewer than asked), so
/// a task with a large message or answer is not written out twice or three times over.
pub const HISTORY_BYTES: usize = 1024 * 1024;

/// The A2A renderings of a task.
pub trait TaskObject {
    /// The A2A Task object (docs/reference/door.md#methods); `artifacts` only when asked for and
    /// present.
    fn to_json(&self, include_artifacts: bool) -> Value;
    /// The A2A Task object as a borrowed, serialisable view: what the door writes for GetTask
    /// and friends straight into the reply bytes, with no `Value` tree in between.
    fn view(&self, include_artifacts: bool) -> TaskView<'_>;
    /// `{"message"?,"state","timestamp"}`.
    fn status_json(&self) -> Value;
    /// The `response` artifact of a completed task.
    fn artifact_json(&self) -> Option<Value>;
}

impl TaskObject for TaskSnapshot {
    fn to_json(&self, include_artifacts: bool) -> Value {
        // Serialising the view into a `Value` cannot fail: every key is a string.
        serde_json::to_value(self.view(include_artifacts)).unwrap_or(Value::Null)
    }

    fn view(&self, include_artifacts: bool) -> TaskView<'_> {
        TaskView {
            artifacts: if include_artifacts {
                artifact_view(self).map(|a| [a])
            } else {
                None
            },
            context_id: &self.context_id,
            history: history_shown(self)
                .iter()
                .map(|m| MessageView {
                    context_id: &self.context_id,
                    message_id: &m.message_id,
                    parts: [TextPart {
                        text: self.history_text(m),
                    }],
                    role: match m.role {
                        Role::User => "ROLE_USER",
                        Role::Agent => "ROLE_AGENT",
                    },
                    task_id: &self.id,
                })
                .collect(),
            id: &self.id,
            metadata: match (
                self.no_answer_below.as_deref(),
                self.asked_by.as_slice(),
                self.cost.as_deref(),
            ) {
                (None, [], None) => None,
                (below, asked_by, cost) => Some(Metadata {
                    murmur: Murmur {
                        asked_by,
                        no_answer: below.map(|_| true),
                        no_answer_below: below,
                        subtree_cost: cost.map(|c| c.to_wire()),
                    },
                }),
            },
            status: status_view(self),
        }
    }

    fn status_json(&self) -> Value {
        serde_json::to_value(status_view(self)).unwrap_or(Value::Null)
    }

    fn artifact_json(&self) -> Option<Value> {
        artifact_view(self).and_then(|a| serde_json::to_value(a).ok())
    }
}

/// The newest history messages whose text fits in [`HISTORY_BYTES`].
fn history_shown(t: &TaskSnapshot) -> &[HistoryMessage] {
    let mut bytes = 0usize;
    let mut start = t.history.len();
    for (i, m) in t.history.iter().enumerate().rev() {
        bytes = bytes.saturating_add(t.history_text(m).len());
        if bytes > HISTORY_BYTES {
            break;
        }
        start = i;
    }
    &t.history[start..]
}

fn status_view(t: &TaskSnapshot) -> StatusView<'_> {
    StatusView {
        message: match (&t.status_text, &t.status_message_id) {
            (Some(text), Some(message_id)) => Some(MessageView {
                context_id: &t.context_id,
                message_id,
                parts: [TextPart { text }],
                role: "ROLE_AGENT",
                task_id: &t.id,
            }),
            _ => None,
        },
        state: t.state.wire(),
        timestamp: Rfc3339Ms(t.timestamp),
    }
}

fn artifact_view(t: &TaskSnapshot) -> Option<ArtifactView<'_>> {
    let text = t.answer.as_deref()?;
    Some(ArtifactView {
        artifact_id: "response",
        name: "response",
        parts: [TextPart { text }],
    })
}

// The wire shapes of docs/reference/door.md#methods. Fields are declared in alphabetical order, the
// order a `serde_json::Map` keeps, so both renderings give the same bytes.

/// A task as A2A shows it; see [`TaskObject::view`].
#[derive(Debug, Serialize)]
pub struct TaskView<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    artifacts: Option<[ArtifactView<'a>; 1]>,
    #[serde(rename = "contextId")]
    context_id: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    history: Vec<MessageView<'a>>,
    id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<Metadata<'a>>,
    status: StatusView<'a>,
}

#[derive(Debug, Serialize)]
struct ArtifactView<'a> {
    #[serde(rename = "artifactId")]
    artifact_id: &'static str,
    name: &'static str,
    parts: [TextPart<'a>; 1],
}

#[derive(Debug, Serialize)]
struct TextPart<'a> {
    text: &'a str,
}

#[derive(Debug, Serialize)]
struct Metadata<'a> {
    murmur: Murmur<'a>,
}

/// `metadata.murmur`: who asked an input-required task's question (the asking member first,
/// then each member it came up through), or how a task ended without an answer.
#[derive(Debug, Serialize)]
struct Murmur<'a> {
    #[serde(rename = "askedBy", skip_serializing_if = "<[String]>::is_empty")]
    asked_by: &'a [String],
    #[serde(rename = "noAnswer", skip_serializing_if = "Option::is_none")]
    no_answer: Option<bool>,
    #[serde(rename = "noAnswerBelow", skip_serializing_if = "Option::is_none")]
    no_answer_below: Option<&'a [NoAnswerBelow]>,
    #[serde(rename = "subtreeCost", skip_serializing_if = "Option::is_none")]
    subtree_cost: Option<Value>,
}

#[derive(Debug, Serialize)]
struct StatusView<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<MessageView<'a>>,
    state: &'static str,
    timestamp: Rfc3339Ms,
}

#[derive(Debug, Serialize)]
struct MessageView<'a> {
    #[serde(rename = "contextId")]
    context_id: &'a str,
    #[serde(rename = "messageId")]
    message_id: &'a str,
    parts: [TextPart<'a>; 1],
    role: &'static str,
    #[serde(rename = "taskId")]
    task_id: &'a str,
}

/// A time written as [`rfc3339_ms`] writes it.
#[derive(Debug)]
struct Rfc3339Ms(DateTime<Utc>);

impl Serialize for Rfc3339Ms {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&rfc3339_ms(self.0))
    }
}

/// RFC 3339 UTC with milliseconds, e.g. `2025-01-02T03:04:05.678Z`.
pub fn rfc3339_ms(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::manifest::Acceptance;
    use crate::tasks::{Board, Clock, NewTask, NoAnswerBelow, Origin, Retention, TaskOutcome, TaskState, Trust};

    fn offer(text: &str) -> NewTask {
        NewTask {
            text: text.into(),
            context_id: None,
            message_id: "m1".into(),
            owner: Some("operator".into()),
            caller_member: None,
            origin: Origin::Event,
            trust: Trust::Untrusted,
            traceparent: None,
            grant: None,
            limits: None,
        }
    }

    fn fixed_clock() -> Clock {
        Arc::new(|| DateTime::from_timestamp_millis(1_700_000_000_123).unwrap_or_default())
    }

    fn keeping(tasks: usize, bytes: usize) -> Arc<Board> {
        Board::with_retention(Acceptance::Queue, 10, fixed_clock(), Retention { tasks, bytes })
    }

    #[actix_rt::test]
    async fn outcomes_shape_the_task_object() {
        let b = Board::with_clock(Acceptance::Queue, 5, fixed_clock());
        let ids: Vec<String> = (0..4).map(|i| b.submit(offer(&i.to_string())).id).collect();
        let outcomes = [
            TaskOutcome::Completed("the answer".into()),
            TaskOutcome::Failed("boom".into()),
            TaskOutcome::NoAnswer {
                reason: "nothing to say".into(),
                below: vec![NoAnswerBelow {
                    member: "coder".into(),
                    status: "failed".into(),
                }],
            },
            TaskOutcome::Canceled,
        ];
        for (id, o) in ids.iter().zip(outcomes) {
            let w = b.next_work().await.expect("work");
            assert_eq!(&w.task_id, id);
            b.finish(id, o);
        }
        let t = |i: usize| b.get(&ids[i]).expect("task");
        let ts = "2023-11-14T22:13:20.123Z";
        // A2A v1.0 §4.1.1 `Task.history`: the caller's message, then the agent's final one.
        let history = t(0).to_json(true)["history"].clone();
        assert_eq!(
            history,
            json!([
                {"contextId": t(0).context_id, "messageId": "m1", "parts": [{"text": "0"}], "role": "ROLE_USER", "taskId": ids[0]},
                {"contextId": t(0).context_id, "messageId": history[1]["messageId"], "parts": [{"text": "the answer"}], "role": "ROLE_AGENT", "taskId": ids[0]},
            ])
        );
        let mut bare = t(0);
        bare.limit_history(Some(0));
        assert_eq!(
            serde_json::to_string(&bare.to_json(true)).expect("json"),
            format!(
                r#"{{"artifacts":[{{"artifactId":"response","name":"response","parts":[{{"text":"the answer"}}]}}],"contextId":"{}","id":"{}","status":{{"state":"TASK_STATE_COMPLETED","timestamp":"{ts}"}}}}"#,
                t(0).context_id,
                ids[0]
            )
        );
        assert_eq!(t(0).to_json(false).get("artifacts"), None);
        let failed = t(1).to_json(true);
        assert_eq!(failed["status"]["state"], "TASK_STATE_FAILED");
        assert_eq!(failed["status"]["message"]["parts"], json!([{"text": "boom"}]));
        assert_eq!(failed["status"]["message"]["role"], "ROLE_AGENT");
        assert_eq!(failed["status"]["message"]["taskId"], json!(ids[1]));
        // The status message is the history's last word, under the same id.
        assert_eq!(failed["history"][1], failed["status"]["message"]);
        assert_eq!(t(3).history.len(), 1, "a cancellation adds no message");
        let na = t(2).to_json(true);
        assert_eq!(na["status"]["state"], "TASK_STATE_FAILED");
        assert_eq!(
            na["metadata"],
            json!({"murmur": {"noAnswer": true, "noAnswerBelow": [{"member": "coder", "status": "failed"}]}})
        );
        assert_eq!(t(3).state, TaskState::Canceled);
        // The door writes GetTask replies from the view directly; a field declared out of
        // alphabetical order would make its bytes differ from the (sorted) `Value` rendering.
        for i in 0..4 {
            for artifacts in [true, false] {
                let direct = serde_json::to_string(&t(i).view(artifacts)).expect("view");
                let through_value = serde_json::to_string(&t(i).to_json(artifacts)).expect("value");
                assert_eq!(direct, through_value, "task {i}, artifacts {artifacts}");
            }
        }
    }

    /// A2A v1.0 §3.2.4 History Length Semantics, as the task object shows the history.
    #[actix_rt::test]
    async fn a_task_object_shows_the_newest_history_within_its_bytes() {
        let b = keeping(100, usize::MAX);
        let id = b.submit(offer("the question")).id;
        let w = b.next_work().await.expect("work");
        b.set_working(&id, Some("a note"));
        b.finish(&id, TaskOutcome::Completed("the answer".into()));
        drop(w);
        let t = b.get(&id).expect("task");
        let mut newest = t.clone();
        newest.limit_history(Some(1));
        assert_eq!(newest.to_json(false)["history"][0]["parts"][0]["text"], "the answer");
        newest.limit_history(Some(0));
        assert_eq!(newest.to_json(false).get("history"), None, "0 omits the field");
        // A task object shows the newest messages within HISTORY_BYTES of text.
        let b = keeping(100, usize::MAX);
        let big = b.submit(offer(&"q".repeat(HISTORY_BYTES))).id;
        let w = b.next_work().await.expect("work");
        b.finish(&big, TaskOutcome::Completed("short".into()));
        drop(w);
        let t = b.get(&big).expect("task");
        assert_eq!(t.history.len(), 2, "both are kept");
        let shown = t.to_json(false)["history"].clone();
        assert_eq!(shown.as_array().map(Vec::len), Some(1), "only the answer fits");
        assert_eq!(shown[0]["parts"][0]["text"], "short");
        // A refused offer's only message is the refusal, which is also its status message.
        let none = Board::new(Acceptance::None, 0);
        let r = none.submit(offer(&"x".repeat(100_000)));
        assert_eq!(r.to_json(false)["history"][0], r.to_json(false)["status"]["message"]);
    }
}
