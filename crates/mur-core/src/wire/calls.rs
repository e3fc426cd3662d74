//! The A2A JSON-RPC a caller speaks to a callee's door, as pure functions
//! (docs/reference/door.md#methods,
//! docs/reference/capsules.md#calls-between-members):
//! request bodies, the reading of SendMessage and GetTask replies and of stream events, and the
//! busy re-offer schedule. No actix, HTTP or process code: `client` moves the bytes, this module
//! decides what they mean. The event-stream framing is `sse`.

use std::time::Duration;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::names;
use crate::task::{CallStatus, NoAnswerBelow, REJECT_BUSY, TaskState};
use crate::wire::jsonrpc::Method;

pub use crate::wire::sse::SseReader;

/// `noAnswerBelow` entries kept from a callee (docs/reference/capsules.md#calls-between-members).
pub const MAX_NO_ANSWER_BELOW: usize = 8;

/// `metadata.murmur.askedBy` names kept from a callee's question: a chain longer than any
/// formation's depth is a peer's invention, not a path of members.
pub const MAX_ASKED_BY: usize = 16;

/// Jitter added to a busy re-offer wait, at most (docs/reference/capsules.md#calls-between-members,
/// docs/reference/formation.md#timing).
pub const BUSY_JITTER_MAX: Duration = Duration::from_millis(250);

/// A JSON string literal (request bodies are built by hand so their bytes are pinned: sorted keys
/// at every depth, compact, docs/reference/cli.md#conventions).
fn lit(s: &str) -> String {
    // Serialising a &str cannot fail.
    serde_json::to_string(s).unwrap_or_default()
}

/// The SendMessage body of a call (docs/reference/capsules.md#calls-between-members step 5);
/// `request_id` is the call id, or `<call id>-<n>` for the n-th offer.
pub fn send_message_body(request_id: &str, call_id: &str, task: &str) -> String {
    format!(
        "{{\"id\":{},\"jsonrpc\":\"2.0\",\"method\":{},\"params\":{{\"configuration\":{{\"returnImmediately\":true}},\"message\":{{\"messageId\":{},\"parts\":[{{\"mediaType\":\"text/plain\",\"text\":{}}}],\"role\":\"ROLE_USER\"}}}}}}",
        lit(request_id),
        lit(Method::SendMessage.name()),
        lit(&format!("msg_{call_id}")),
        lit(task)
    )
}

/// The SendMessage body of a reply to a callee's question (docs/reference/door.md#asking): the
/// answer as a message naming the callee's task; `call_id` is the reply's own call id.
pub fn answer_body(call_id: &str, task_id: &str, answer: &str) -> String {
    format!(
        "{{\"id\":{},\"jsonrpc\":\"2.0\",\"method\":{},\"params\":{{\"configuration\":{{\"returnImmediately\":true}},\"message\":{{\"messageId\":{},\"parts\":[{{\"mediaType\":\"text/plain\",\"text\":{}}}],\"role\":\"ROLE_USER\",\"taskId\":{}}}}}}}",
        lit(call_id),
        lit(Method::SendMessage.name()),
        lit(&format!("msg_{call_id}")),
        lit(answer),
        lit(task_id)
    )
}

/// A body `{"id":…,"jsonrpc":"2.0","method":<method>,"params":{"id":<task id>}}` (GetTask,
/// CancelTask, SubscribeToTask).
pub fn task_method_body(method: Method, request_id: &str, task_id: &str) -> String {
    format!(
        "{{\"id\":{},\"jsonrpc\":\"2.0\",\"method\":{},\"params\":{{\"id\":{}}}}}",
        lit(request_id),
        lit(method.name()),
        lit(task_id)
    )
}

/// How the callee's door answered SendMessage (docs/reference/capsules.md#calls-between-members).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendReply {
    /// The door holds the task (a live state and a non-empty id).
    Started { task_id: String },
    /// `TASK_STATE_REJECTED` with exactly the busy text: offer it again.
    Busy,
    /// Anything else: the call ends at once with this status and text (unredacted).
    Refused { status: CallStatus, output: String },
}

/// Reads a SendMessage reply: HTTP status and body.
pub fn read_send_reply(member: &str, http_status: u16, body: &[u8]) -> SendReply {
    let v = match rpc_result(member, http_status, body) {
        Ok(v) => v,
        Err((status, output)) => return SendReply::Refused { status, output },
    };
    let Some(task) = v.get("task").filter(|t| t.is_object()) else {
        return SendReply::Refused {
            status: CallStatus::Failed,
            output: format!("{member}'s door answered with a message instead of a task"),
        };
    };
    let view = CalleeTask::read(task);
    match view.state {
        Some(s) if !s.is_terminal() && !view.id.is_empty() => SendReply::Started { task_id: view.id },
        Some(TaskState::Rejected) if view.status_text.as_deref() == Some(REJECT_BUSY) => SendReply::Busy,
        Some(TaskState::Rejected) => SendReply::Refused {
            status: CallStatus::Rejected,
            output: view
                .status_text
                .unwrap_or_else(|| format!("{member} rejected the task")),
        },
        Some(s) if s.is_terminal() => SendReply::Refused {
            status: CallStatus::Failed,
            output: view
                .status_text
                .unwrap_or_else(|| format!("{member}'s door answered with a task in state {}", s.wire())),
        },
        // No state, or a live one without an id.
        _ => SendReply::Refused {
            status: CallStatus::Failed,
            output: format!("{member}'s door answered with a task without a valid state or id"),
        },
    }
}

/// The `result` of a JSON-RPC reply, or the status and text the call ends with: HTTP 401/403
/// (the door refused the credential) → `rejected`; any other HTTP error, a body that is not
/// JSON-RPC, or a JSON-RPC error → `failed`.
fn rpc_result(member: &str, http_status: u16, body: &[u8]) -> Result<Value, (CallStatus, String)> {
    if http_status != 200 {
        let error = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_string));
        let what = match error {
            Some(e) => format!("HTTP {http_status} ({e})"),
            None => format!("HTTP {http_status}"),
        };
        let status = if matches!(http_status, 401 | 403) {
            CallStatus::Rejected
        } else {
            CallStatus::Failed
        };
        return Err((status, format!("{member}'s door refused the request: {what}")));
    }
    let v: Value = serde_json::from_slice(body).map_err(|_| {
        (
            CallStatus::Failed,
            format!("{member}'s door answered with something that is not JSON"),
        )
    })?;
    if let Some(e) = v.get("error") {
        let code = e.get("code").and_then(Value::as_i64).unwrap_or(0);
        let message = e.get("message").and_then(Value::as_str).unwrap_or("");
        return Err((
            CallStatus::Failed,
            format!("{member}'s door answered JSON-RPC error {code}: {message}"),
        ));
    }
    match v.get("result") {
        Some(r) => Ok(r.clone()),
        None => Err((
            CallStatus::Failed,
            format!("{member}'s door answered with something that is not a JSON-RPC reply"),
        )),
    }
}

/// The parts of a Task object a caller reads (docs/reference/door.md#methods).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CalleeTask {
    pub id: String,
    pub state: Option<TaskState>,
    /// Text of `status.message`.
    pub status_text: Option<String>,
    /// First text part of the `response` artifact (or of the first artifact).
    pub answer: Option<String>,
    /// `metadata.murmur.noAnswer`.
    pub no_answer: bool,
    /// Well-formed `metadata.murmur.noAnswerBelow` entries, at most [`MAX_NO_ANSWER_BELOW`].
    pub no_answer_below: Vec<NoAnswerBelow>,
    /// `metadata.murmur.askedBy` while the task asks: member names, innermost first, at most
    /// [`MAX_ASKED_BY`]; anything that is not a member name is dropped.
    pub asked_by: Vec<String>,
    /// `metadata.murmur.subtreeCost`: what the task and every call below it spent, as its door
    /// reports it (docs/reference/formation.md#cost-roll-up).
    pub subtree_cost: Option<crate::cost::Cost>,
}

impl CalleeTask {
    /// Reads a Task object leniently: a missing or malformed part is simply absent.
    pub fn read(task: &Value) -> CalleeTask {
        let text_of = |parts: Option<&Value>| -> Option<String> {
            parts?
                .as_array()?
                .iter()
                .find_map(|p| p.get("text").and_then(Value::as_str))
                .map(str::to_string)
        };
        let status = task.get("status");
        let artifacts = task.get("artifacts").and_then(Value::as_array);
        let answer = artifacts.and_then(|list| {
            let response = list
                .iter()
                .find(|a| a.get("artifactId").and_then(Value::as_str) == Some("response"));
            response.or_else(|| list.first()).and_then(|a| text_of(a.get("parts")))
        });
        let murmur = task.get("metadata").and_then(|m| m.get("murmur"));
        let no_answer = murmur
            .and_then(|m| m.get("noAnswer"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let no_answer_below = murmur
            .and_then(|m| m.get("noAnswerBelow"))
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .filter_map(|e| {
                        let member = e.get("member")?.as_str()?;
                        let status = e.get("status")?.as_str()?;
                        (names::is_member(member) && CallStatus::parse(status).is_some()).then(|| NoAnswerBelow {
                            member: member.to_string(),
                            status: status.to_string(),
                        })
                    })
                    .take(MAX_NO_ANSWER_BELOW)
                    .collect()
            })
            .unwrap_or_default();
        let asked_by = murmur
            .and_then(|m| m.get("askedBy"))
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .filter_map(Value::as_str)
                    .filter(|m| names::is_member(m))
                    .take(MAX_ASKED_BY)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        CalleeTask {
            id: task.get("id").and_then(Value::as_str).unwrap_or_default().to_string(),
            state: status
                .and_then(|s| s.get("state"))
                .and_then(Value::as_str)
                .and_then(TaskState::from_wire),
            status_text: status
                .and_then(|s| s.get("message"))
                .and_then(|m| text_of(m.get("parts"))),
            answer,
            no_answer,
            no_answer_below,
            asked_by,
            subtree_cost: murmur
                .and_then(|m| m.get("subtreeCost"))
                .and_then(crate::cost::Cost::from_wire),
        }
    }
}

/// How a call ended, before redaction and the cap: for [`CallStatus::InputRequired`], the
/// callee's question, which may still be answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    pub status: CallStatus,
    pub output: String,
    pub no_answer_below: Vec<NoAnswerBelow>,
    /// Who asked, innermost first (`metadata.murmur.askedBy`), for an input-required outcome.
    pub asked_by: Vec<String>,
    /// What the callee's task and its calls spent, when its door said (`metadata.murmur.subtreeCost`).
    pub subtree_cost: Option<crate::cost::Cost>,
}

impl Ended {
    pub fn new(status: CallStatus, output: impl Into<String>) -> Ended {
        Ended {
            status,
            output: output.into(),
            no_answer_below: Vec::new(),
            asked_by: Vec::new(),
            subtree_cost: None,
        }
    }
}

/// What one GetTask told the watcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Poll {
    /// The callee's task is still live.
    Live,
    /// It is over (or the door refused to show it, which ends the call `failed`).
    Ended(Ended),
}

/// Reads a GetTask reply (docs/reference/capsules.md#calls-between-members polling): an HTTP or
/// JSON-RPC error ends the call `failed`; a terminal task ends it with its state (`completed` with
/// the answer as output, `no_answer` when `metadata.murmur.noAnswer`, else `failed`, `canceled`,
/// `rejected` with the status text); a task asking a question ends it `input_required`, the
/// question as output.
pub fn read_get_task(member: &str, http_status: u16, body: &[u8]) -> Poll {
    let task = match rpc_result(member, http_status, body) {
        Ok(v) => v,
        Err((_, output)) => return Poll::Ended(Ended::new(CallStatus::Failed, output)),
    };
    task_outcome(member, &task)
}

/// What a Task object says about the call: live, or its outcome.
fn task_outcome(member: &str, task: &Value) -> Poll {
    let view = CalleeTask::read(task);
    let text = |fallback: String| view.status_text.clone().unwrap_or(fallback);
    let ended = match view.state {
        None => Ended::new(
            CallStatus::Failed,
            format!("{member}'s door answered GetTask without a valid task state"),
        ),
        Some(TaskState::InputRequired) => Ended {
            status: CallStatus::InputRequired,
            output: text(format!("{member} asked a question without text")),
            no_answer_below: Vec::new(),
            asked_by: view.asked_by.clone(),
            subtree_cost: None,
        },
        Some(s) if !s.is_terminal() => return Poll::Live,
        Some(TaskState::Completed) => Ended::new(CallStatus::Completed, view.answer.clone().unwrap_or_default()),
        Some(TaskState::Failed) if view.no_answer => Ended {
            status: CallStatus::NoAnswer,
            output: text(format!("{member} ended its task without an answer")),
            no_answer_below: view.no_answer_below.clone(),
            asked_by: Vec::new(),
            subtree_cost: None,
        },
        Some(TaskState::Failed) => Ended::new(CallStatus::Failed, text(format!("{member}'s task failed"))),
        Some(TaskState::Canceled) => Ended::new(CallStatus::Canceled, text(format!("{member}'s task was canceled"))),
        Some(_) => Ended::new(CallStatus::Rejected, text(format!("{member} rejected the task"))),
    };
    // A task that asks has not ended: its cost comes with its end.
    let subtree_cost = view.subtree_cost.filter(|_| ended.status != CallStatus::InputRequired);
    Poll::Ended(Ended { subtree_cost, ..ended })
}

/// What one stream event says about the followed task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamNews {
    /// The task is (still) live, or the event says nothing about its state.
    Live,
    /// The task reached a terminal state, or asks a question: read the outcome with GetTask.
    Terminal,
    /// A JSON-RPC error: the stream is of no use.
    Error,
}

/// The callee's task as a SubscribeToTask stream has shown it: the opening snapshot with every
/// later status, metadata and artifact applied. GetTask stays the outcome of record; this is
/// what the caller knows when GetTask can no longer reach the door, as when a callee whose
/// session ends with its task (any lifecycle but `queue` + `sleep`) closes its door right after
/// the stream's last event.
#[derive(Debug, Default)]
pub struct StreamedTask {
    task: Option<Value>,
}

impl StreamedTask {
    /// Applies one stream event. Updates before the snapshot, and any that are not what A2A
    /// sends, are ignored.
    pub fn apply(&mut self, event: &Value) {
        let Some(result) = event.get("result") else { return };
        if let Some(task) = result.get("task") {
            self.task = Some(task.clone());
            return;
        }
        let Some(task) = self.task.as_mut().and_then(Value::as_object_mut) else {
            return;
        };
        if let Some(update) = result.get("statusUpdate") {
            for key in ["status", "metadata"] {
                if let Some(v) = update.get(key) {
                    task.insert(key.to_string(), v.clone());
                }
            }
        }
        if let Some(artifact) = result.get("artifactUpdate").and_then(|u| u.get("artifact")) {
            match task.get_mut("artifacts").and_then(Value::as_array_mut) {
                Some(list) => list.push(artifact.clone()),
                None => {
                    task.insert("artifacts".to_string(), Value::Array(vec![artifact.clone()]));
                }
            }
        }
    }

    /// The call's outcome, once the stream showed the task in a terminal state or asking.
    pub fn ended(&self, member: &str) -> Option<Ended> {
        let task = self.task.as_ref()?;
        CalleeTask::read(task).state.filter(|s| settles_call(*s))?;
        match task_outcome(member, task) {
            Poll::Ended(e) => Some(e),
            Poll::Live => None,
        }
    }
}

/// Reads one SubscribeToTask event (`{"task":…}`, `{"statusUpdate":…}`, `{"artifactUpdate":…}`).
pub fn stream_news(event: &Value) -> StreamNews {
    if event.get("error").is_some() {
        return StreamNews::Error;
    }
    let Some(result) = event.get("result") else {
        return StreamNews::Live;
    };
    let state = result
        .get("task")
        .or_else(|| result.get("statusUpdate"))
        .and_then(|t| t.get("status"))
        .and_then(|s| s.get("state"))
        .and_then(Value::as_str)
        .and_then(TaskState::from_wire);
    match state {
        Some(s) if settles_call(s) => StreamNews::Terminal,
        _ => StreamNews::Live,
    }
}

/// Whether the callee's task in state `s` gives the call an outcome: it ended, or it asks (the
/// door closes a stream at either).
fn settles_call(s: TaskState) -> bool {
    s.is_terminal() || s == TaskState::InputRequired
}

/// The wait before offer `offer` (2, 3, …) of a call that found its callee busy
/// (docs/reference/capsules.md#calls-between-members): the first wait, doubling with each offer up
/// to `max`, plus a jitter derived from the call id and the offer number. The jitter is at most 250
/// ms, and at most a quarter of `first`, so a shortened schedule (tests) keeps its proportions; at
/// the spec's 1 s it is exactly 0–250 ms.
pub fn busy_wait(call_id: &str, offer: u32, first: Duration, max: Duration) -> Duration {
    let doublings = offer.saturating_sub(2).min(16);
    let base = first.saturating_mul(1u32 << doublings).min(max);
    let jitter_cap = crate::timing::millis(BUSY_JITTER_MAX.min(first / 4));
    let digest = Sha256::new()
        .chain_update(call_id.as_bytes())
        .chain_update([0x1F])
        .chain_update(offer.to_be_bytes())
        .finalize();
    let mut eight = [0u8; 8];
    eight.copy_from_slice(&digest[..8]);
    let jitter = u64::from_be_bytes(eight) % (jitter_cap + 1);
    base + Duration::from_millis(jitter)
}
