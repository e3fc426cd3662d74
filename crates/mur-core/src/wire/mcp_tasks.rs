//! What a `tools/call` of the stateless MCP revision (2026-07-28) may answer besides its result,
//! and what the client sends back: a task handle of the tasks extension
//! (`io.modelcontextprotocol/tasks`: `tasks/get` polled until the task ends, `tasks/cancel` when
//! the caller gives up), and the trace context a request carries in `params._meta`. Pure
//! (`serde_json` only): `mur`'s `tools::mcp` moves the bytes and keeps the clock.
//!
//! Invariants:
//! - **Every size the server controls is bounded in bytes**: a task id ([`MAX_TASK_ID`], visible
//!   ASCII, or the task is refused: a cut id would poll another task), a status message (cut to
//!   [`wire::mcp::MAX_ERROR_TEXT`](super::mcp::MAX_ERROR_TEXT)), the questions of one answer
//!   ([`MAX_INPUT_REQUESTS`], more is refused as a flood), each question's text (cut to
//!   [`MAX_QUESTION`]).
//! - **The server's suggested poll interval is clamped** to [`MIN_POLL_MS`]..=[`MAX_POLL_MS`]: a
//!   server asking for 0 ms cannot make the client spin, one asking for an hour cannot outwait
//!   the call's own bound.
//! - A `resultType` this client does not know is an error, never read as a result.

use serde_json::{Map, Value, json};

use super::mcp::{MAX_ERROR_TEXT, error_text, kind};
use crate::text::head;

pub use super::mcp::TASKS_EXTENSION;
/// Longest task id kept; longer is refused, not cut.
pub const MAX_TASK_ID: usize = 256;
/// The poll interval's bounds, whatever the server suggests, and the interval when it suggests
/// none.
pub const MIN_POLL_MS: u64 = 50;
pub const MAX_POLL_MS: u64 = 2_000;
pub const DEFAULT_POLL_MS: u64 = 500;
/// Most input requests one answer may carry.
pub const MAX_INPUT_REQUESTS: usize = 4;
/// An input request's question is cut to this many bytes.
pub const MAX_QUESTION: usize = 4 << 10;
/// Longest `requestState` echoed back.
pub const MAX_REQUEST_STATE: usize = 16 << 10;
/// Longest input-request key kept.
pub const MAX_INPUT_KEY: usize = 256;

/// Why an answer cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// More questions at once than a call may be asked.
    Flood(String),
    /// Anything else the answer gets wrong.
    Malformed(String),
}

impl Fault {
    pub fn text(self) -> String {
        match self {
            Fault::Flood(t) | Fault::Malformed(t) => t,
        }
    }
}

impl From<String> for Fault {
    fn from(t: String) -> Fault {
        Fault::Malformed(t)
    }
}

/// What a `tools/call` answered.
#[derive(Debug, Clone, PartialEq)]
pub enum CallReply {
    /// The call's result (`resultType` absent or `complete`).
    Complete(Value),
    /// A task handle (`resultType: "task"`): poll it.
    Task(Task),
    /// The server needs answers before it can go on (`resultType: "input_required"`).
    InputRequired(InputRequired),
}

/// A task's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl Status {
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Failed | Status::Cancelled)
    }

    pub fn word(self) -> &'static str {
        match self {
            Status::Working => "working",
            Status::InputRequired => "input_required",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }
}

/// A task as `tasks/get` (or the `CreateTaskResult`) shows it, bounded.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub id: String,
    pub status: Status,
    /// `statusMessage`, cut to `MAX_ERROR_TEXT`; empty when absent.
    pub message: String,
    /// The next poll's wait, clamped.
    pub poll_ms: u64,
    /// `completed`: the call's result.
    pub result: Option<Value>,
    /// `failed`: the JSON-RPC error, as `error <code>: <message>`.
    pub error: Option<String>,
    /// `input_required`: what the server asks.
    pub input: Vec<InputRequest>,
}

/// An `InputRequiredResult` of a call (multi round-trip requests).
#[derive(Debug, Clone, PartialEq)]
pub struct InputRequired {
    pub requests: Vec<InputRequest>,
    /// Echoed unchanged on the retry; never read.
    pub request_state: Option<String>,
}

/// One question a server asks through an input request.
#[derive(Debug, Clone, PartialEq)]
pub struct InputRequest {
    /// The server's key for it, echoed with the answer.
    pub key: String,
    /// What it asks, as a person reads it; cut to [`MAX_QUESTION`].
    pub question: String,
    /// How an answer is given back; `None` for a request this client does not answer (sampling,
    /// roots, a URL elicitation), with the method named in `question`.
    pub form: Option<Form>,
}

/// The answer an elicitation form asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Form {
    /// One field: the answer's text is that field's value (of its type).
    Field { name: String, kind: FieldKind },
    /// Several fields, or none: the answer must be a JSON object.
    Object,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    Text,
    Integer,
    Number,
    Boolean,
}

/// Reads a `tools/call` result by its `resultType`. `Err` for an unknown `resultType`, or a
/// task or input request that cannot be read.
pub fn call_reply(result: &Value) -> Result<CallReply, Fault> {
    match result.get("resultType") {
        None | Some(Value::Null) => Ok(CallReply::Complete(result.clone())),
        Some(Value::String(t)) => match t.as_str() {
            "complete" => Ok(CallReply::Complete(result.clone())),
            "task" => task(result).map(CallReply::Task),
            "input_required" => input_required(result).map(CallReply::InputRequired),
            other => Err(Fault::Malformed(format!(
                "the tools/call result has resultType {:?}, which this client does not know",
                head(other, 64)
            ))),
        },
        Some(other) => Err(Fault::Malformed(format!(
            "the tools/call result's resultType is {}",
            kind(other)
        ))),
    }
}

/// Reads a task (a `CreateTaskResult` or a `tasks/get` result).
pub fn task(result: &Value) -> Result<Task, Fault> {
    let id = match result.get("taskId") {
        Some(Value::String(id)) if task_id_ok(id) => id.clone(),
        Some(Value::String(_)) => {
            return Err(Fault::Malformed(format!(
                "the server's task id is not 1 to {MAX_TASK_ID} visible ASCII characters"
            )));
        }
        _ => return Err(Fault::Malformed("the task has no taskId".to_string())),
    };
    let status = match result.get("status").and_then(Value::as_str) {
        Some("working") => Status::Working,
        Some("input_required") => Status::InputRequired,
        Some("completed") => Status::Completed,
        Some("failed") => Status::Failed,
        Some("cancelled") => Status::Cancelled,
        Some(other) => {
            return Err(Fault::Malformed(format!(
                "the task's status {:?} is not one of the extension's",
                head(other, 64)
            )));
        }
        None => return Err(Fault::Malformed("the task has no status".to_string())),
    };
    let message = result
        .get("statusMessage")
        .and_then(Value::as_str)
        .map(|m| head(m, MAX_ERROR_TEXT).to_string())
        .unwrap_or_default();
    let poll_ms = result
        .get("pollIntervalMs")
        .and_then(Value::as_u64)
        .unwrap_or(DEFAULT_POLL_MS)
        .clamp(MIN_POLL_MS, MAX_POLL_MS);
    let mut t = Task {
        id,
        status,
        message,
        poll_ms,
        result: None,
        error: None,
        input: Vec::new(),
    };
    match status {
        Status::Completed => match result.get("result") {
            Some(r @ Value::Object(_)) => t.result = Some(r.clone()),
            _ => {
                return Err(Fault::Malformed(
                    "the task completed without a result object".to_string(),
                ));
            }
        },
        Status::Failed => {
            t.error = Some(match result.get("error") {
                Some(e @ Value::Object(_)) => error_text(e),
                _ if !t.message.is_empty() => t.message.clone(),
                _ => "the task failed and says no more".to_string(),
            });
        }
        Status::InputRequired => {
            t.input = input_requests(result.get("inputRequests").unwrap_or(&Value::Null))?;
        }
        Status::Working | Status::Cancelled => {}
    }
    Ok(t)
}

fn input_required(result: &Value) -> Result<InputRequired, Fault> {
    let requests = match result.get("inputRequests") {
        None | Some(Value::Null) => Vec::new(),
        Some(r) => input_requests(r)?,
    };
    let request_state = match result.get("requestState") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.len() <= MAX_REQUEST_STATE => Some(s.clone()),
        Some(Value::String(s)) => {
            return Err(Fault::Malformed(format!(
                "the server's requestState is {} bytes, more than {MAX_REQUEST_STATE}",
                s.len()
            )));
        }
        Some(other) => {
            return Err(Fault::Malformed(format!(
                "the server's requestState is {}, not a string",
                kind(other)
            )));
        }
    };
    if requests.is_empty() && request_state.is_none() {
        return Err(Fault::Malformed(
            "the server asked for input without inputRequests or requestState".to_string(),
        ));
    }
    Ok(InputRequired {
        requests,
        request_state,
    })
}

/// Reads an `inputRequests` map: at most [`MAX_INPUT_REQUESTS`] entries, or `Err` (a flood).
pub fn input_requests(v: &Value) -> Result<Vec<InputRequest>, Fault> {
    let Some(map) = v.as_object() else {
        return Err(Fault::Malformed(format!(
            "the server's inputRequests is {}, not an object",
            kind(v)
        )));
    };
    if map.len() > MAX_INPUT_REQUESTS {
        return Err(Fault::Flood(format!(
            "the server asked {} questions at once, more than the {MAX_INPUT_REQUESTS} a call may be asked",
            map.len()
        )));
    }
    let mut out = Vec::new();
    for (key, req) in map {
        if key.is_empty() || key.len() > MAX_INPUT_KEY {
            return Err(Fault::Malformed(format!(
                "an input request's key is not 1 to {MAX_INPUT_KEY} bytes"
            )));
        }
        out.push(input_request(key, req));
    }
    Ok(out)
}

fn input_request(key: &str, req: &Value) -> InputRequest {
    let method = req.get("method").and_then(Value::as_str).unwrap_or("");
    let params = req.get("params").unwrap_or(&Value::Null);
    let message = params.get("message").and_then(Value::as_str).unwrap_or("");
    let mode = params.get("mode").and_then(Value::as_str).unwrap_or("form");
    let (question, form) = if method == "elicitation/create" && mode == "form" && !message.trim().is_empty() {
        let form = form_of(params.get("requestedSchema").unwrap_or(&Value::Null));
        let question = match &form {
            Form::Object => {
                let fields: Vec<String> = params
                    .pointer("/requestedSchema/properties")
                    .and_then(Value::as_object)
                    .map(|p| p.keys().map(|k| head(k, 64).to_string()).take(16).collect())
                    .unwrap_or_default();
                if fields.is_empty() {
                    message.to_string()
                } else {
                    format!("{message} (answer with a JSON object of: {})", fields.join(", "))
                }
            }
            Form::Field { .. } => message.to_string(),
        };
        (question, Some(form))
    } else {
        (
            format!(
                "the server asks {:?}, which this client does not answer",
                head(method, 64)
            ),
            None,
        )
    };
    InputRequest {
        key: key.to_string(),
        question: head(&question, MAX_QUESTION).to_string(),
        form,
    }
}

fn form_of(schema: &Value) -> Form {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Form::Object;
    };
    if props.len() != 1 {
        return Form::Object;
    }
    let Some((name, p)) = props.iter().next() else {
        return Form::Object;
    };
    let kind = match p.get("type").and_then(Value::as_str) {
        Some("integer") => FieldKind::Integer,
        Some("number") => FieldKind::Number,
        Some("boolean") => FieldKind::Boolean,
        _ => FieldKind::Text,
    };
    Form::Field {
        name: name.clone(),
        kind,
    }
}

/// The `ElicitResult` an answer makes for `form`: `accept` with the answer as the form's
/// content, or `decline` when the answer does not fit it (a number that does not parse, an
/// object form answered with anything but a JSON object).
pub fn elicit_result(form: &Form, answer: &str) -> Value {
    let answer = answer.trim();
    let content = match form {
        Form::Object => serde_json::from_str::<Value>(answer).ok().filter(Value::is_object),
        Form::Field { name, kind } => {
            let v = match kind {
                FieldKind::Text => Some(Value::String(answer.to_string())),
                FieldKind::Integer => answer.parse::<i64>().ok().map(Value::from),
                FieldKind::Number => answer
                    .parse::<f64>()
                    .ok()
                    .and_then(|f| serde_json::Number::from_f64(f).map(Value::Number)),
                FieldKind::Boolean => match answer.to_ascii_lowercase().as_str() {
                    "yes" | "true" | "y" => Some(Value::Bool(true)),
                    "no" | "false" | "n" => Some(Value::Bool(false)),
                    _ => None,
                },
            };
            v.map(|v| json!({ name.clone(): v }))
        }
    };
    match content {
        Some(c) => json!({"action": "accept", "content": c}),
        None => json!({"action": "decline"}),
    }
}

/// Whether a task id may be kept and sent back: 1 to [`MAX_TASK_ID`] visible ASCII characters.
pub fn task_id_ok(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_TASK_ID && id.bytes().all(|b| (0x21..=0x7e).contains(&b))
}

/// `tasks/get` for `task_id`.
pub fn tasks_get_request(id: u64, task_id: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tasks/get", "params": {"taskId": task_id}}).to_string()
}

/// `tasks/cancel` for `task_id`.
pub fn tasks_cancel_request(id: u64, task_id: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tasks/cancel", "params": {"taskId": task_id}}).to_string()
}

/// `tasks/update` answering the input requests of `task_id`.
pub fn tasks_update_request(id: u64, task_id: &str, responses: Map<String, Value>) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tasks/update",
        "params": {"taskId": task_id, "inputResponses": responses}})
    .to_string()
}

/// `body` (a request of this client's) with `key: value` added to `params._meta`. `Err` when it
/// is not a request with an object `params`.
pub fn with_meta(body: &str, key: &str, value: Value) -> Result<String, String> {
    let mut v: Value = serde_json::from_str(body).map_err(|_| "not a JSON request".to_string())?;
    let params = v
        .get_mut("params")
        .and_then(Value::as_object_mut)
        .ok_or("a request without params")?;
    let meta = params.entry("_meta").or_insert_with(|| json!({}));
    let Some(meta) = meta.as_object_mut() else {
        return Err("a request whose _meta is not an object".to_string());
    };
    meta.insert(key.to_string(), value);
    Ok(v.to_string())
}

/// `body` (a `tools/call`) with `inputResponses` and the `requestState` to echo, for the retry
/// of a call that asked for input.
pub fn with_input_responses(body: &str, responses: Map<String, Value>, state: Option<&str>) -> Result<String, String> {
    let mut v: Value = serde_json::from_str(body).map_err(|_| "not a JSON request".to_string())?;
    let params = v
        .get_mut("params")
        .and_then(Value::as_object_mut)
        .ok_or("a request without params")?;
    params.insert("inputResponses".into(), Value::Object(responses));
    match state {
        Some(s) => params.insert("requestState".into(), Value::String(s.to_string())),
        None => params.remove("requestState"),
    };
    Ok(v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elicit(message: &str, props: Value) -> Value {
        json!({"method": "elicitation/create", "params": {"mode": "form", "message": message,
            "requestedSchema": {"type": "object", "properties": props}}})
    }

    #[test]
    fn call_replies_are_read_by_their_result_type() {
        let done = json!({"content": [{"type": "text", "text": "3"}]});
        assert_eq!(call_reply(&done), Ok(CallReply::Complete(done.clone())));
        let typed = json!({"resultType": "complete", "content": []});
        assert_eq!(call_reply(&typed), Ok(CallReply::Complete(typed.clone())));
        let handle = json!({"resultType": "task", "taskId": "t-1", "status": "working",
            "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z",
            "ttlMs": 60000, "pollIntervalMs": 100});
        let CallReply::Task(t) = call_reply(&handle).unwrap() else {
            panic!()
        };
        assert_eq!((t.id.as_str(), t.status, t.poll_ms), ("t-1", Status::Working, 100));
        let asked = json!({"resultType": "input_required", "requestState": "opaque",
            "inputRequests": {"who": elicit("Your name?", json!({"name": {"type": "string"}}))}});
        let CallReply::InputRequired(i) = call_reply(&asked).unwrap() else {
            panic!()
        };
        assert_eq!(i.request_state.as_deref(), Some("opaque"));
        assert_eq!(i.requests[0].question, "Your name?");
        let table: &[(Value, &str)] = &[
            (
                json!({"resultType": "stream"}),
                "the tools/call result has resultType \"stream\", which this client does not know",
            ),
            (
                json!({"resultType": 3}),
                "the tools/call result's resultType is a number",
            ),
            (
                json!({"resultType": "input_required"}),
                "the server asked for input without inputRequests or requestState",
            ),
            (
                json!({"resultType": "task", "status": "working"}),
                "the task has no taskId",
            ),
        ];
        for (v, want) in table {
            assert_eq!(call_reply(v), Err(Fault::Malformed(want.to_string())), "{v}");
        }
    }

    #[test]
    fn tasks_are_bounded_and_their_polls_clamped() {
        let base = |extra: Value| {
            let mut t = json!({"taskId": "abc", "status": "working"});
            for (k, v) in extra.as_object().unwrap() {
                t[k] = v.clone();
            }
            t
        };
        // (pollIntervalMs, clamped)
        for (asked, want) in [
            (json!(0), MIN_POLL_MS),
            (json!(10_000_000), MAX_POLL_MS),
            (json!(300), 300),
            (json!(null), DEFAULT_POLL_MS),
            (json!(-5), DEFAULT_POLL_MS),
        ] {
            assert_eq!(
                task(&base(json!({"pollIntervalMs": asked}))).unwrap().poll_ms,
                want,
                "{asked}"
            );
        }
        let long_msg = task(&base(json!({"statusMessage": "m".repeat(5000)}))).unwrap();
        assert_eq!(long_msg.message.len(), MAX_ERROR_TEXT);
        let failed = task(&base(
            json!({"status": "failed", "error": {"code": -32603, "message": "boom"}}),
        ))
        .unwrap();
        assert_eq!(failed.error.as_deref(), Some("error -32603: boom"));
        let done = task(&base(json!({"status": "completed", "result": {"content": []}}))).unwrap();
        assert_eq!(done.result, Some(json!({"content": []})));
        assert!(done.status.is_terminal() && !Status::Working.is_terminal());
        let five: Map<String, Value> = (0..5).map(|i| (format!("k{i}"), elicit("q", json!({})))).collect();
        let table: &[(Value, Fault)] = &[
            (
                base(json!({"taskId": "x".repeat(MAX_TASK_ID + 1)})),
                Fault::Malformed(format!(
                    "the server's task id is not 1 to {MAX_TASK_ID} visible ASCII characters"
                )),
            ),
            (
                base(json!({"taskId": "a b"})),
                Fault::Malformed(format!(
                    "the server's task id is not 1 to {MAX_TASK_ID} visible ASCII characters"
                )),
            ),
            (
                base(json!({"taskId": 7})),
                Fault::Malformed("the task has no taskId".into()),
            ),
            (
                base(json!({"status": "paused"})),
                Fault::Malformed("the task's status \"paused\" is not one of the extension's".into()),
            ),
            (
                base(json!({"status": "completed"})),
                Fault::Malformed("the task completed without a result object".into()),
            ),
            (
                base(json!({"status": "input_required", "inputRequests": five})),
                Fault::Flood(format!(
                    "the server asked 5 questions at once, more than the {MAX_INPUT_REQUESTS} a call may be asked"
                )),
            ),
        ];
        for (v, want) in table {
            assert_eq!(task(v).as_ref().map(|_| ()), Err(want), "{v}");
        }
    }

    #[test]
    fn input_requests_become_questions_and_answers_fit_their_form() {
        let reqs = input_requests(&json!({
            "name": elicit("Your name?", json!({"name": {"type": "string"}})),
            "n": elicit("How many?", json!({"count": {"type": "integer"}})),
            "ok": elicit("Go ahead?", json!({"go": {"type": "boolean"}})),
            "two": elicit("Where?", json!({"city": {"type": "string"}, "zip": {"type": "string"}})),
            "sample": {"method": "sampling/createMessage", "params": {"messages": []}},
        }));
        assert_eq!(
            reqs.unwrap_err(),
            Fault::Flood("the server asked 5 questions at once, more than the 4 a call may be asked".into())
        );
        let reqs = input_requests(&json!({
            "n": elicit("How many?", json!({"count": {"type": "integer"}})),
            "ok": elicit("Go ahead?", json!({"go": {"type": "boolean"}})),
            "two": elicit("Where?", json!({"city": {"type": "string"}, "zip": {"type": "string"}})),
            "sample": {"method": "sampling/createMessage", "params": {"messages": []}},
        }))
        .unwrap();
        let by = |k: &str| reqs.iter().find(|r| r.key == k).unwrap();
        assert_eq!(by("two").question, "Where? (answer with a JSON object of: city, zip)");
        assert_eq!(
            by("sample").question,
            "the server asks \"sampling/createMessage\", which this client does not answer"
        );
        assert_eq!(by("sample").form, None);
        // (key, answer, result)
        let table: &[(&str, &str, Value)] = &[
            ("n", " 12 ", json!({"action": "accept", "content": {"count": 12}})),
            ("n", "twelve", json!({"action": "decline"})),
            ("ok", "Yes", json!({"action": "accept", "content": {"go": true}})),
            ("ok", "maybe", json!({"action": "decline"})),
            (
                "two",
                r#"{"city": "Lyon", "zip": "69001"}"#,
                json!({"action": "accept", "content": {"city": "Lyon", "zip": "69001"}}),
            ),
            ("two", "Lyon", json!({"action": "decline"})),
        ];
        for (key, answer, want) in table {
            assert_eq!(
                &elicit_result(by(key).form.as_ref().unwrap(), answer),
                want,
                "{key} {answer}"
            );
        }
        let long =
            input_requests(&json!({"q": elicit(&"q".repeat(MAX_QUESTION * 2), json!({"a": {"type": "string"}}))}))
                .unwrap();
        assert_eq!(long[0].question.len(), MAX_QUESTION);
    }

    #[test]
    fn requests_and_meta() {
        let parse = |s: &str| serde_json::from_str::<Value>(s).unwrap();
        assert_eq!(
            parse(&tasks_get_request(3, "t")),
            json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"taskId": "t"}})
        );
        assert_eq!(
            parse(&tasks_cancel_request(4, "t")),
            json!({"jsonrpc": "2.0", "id": 4, "method": "tasks/cancel", "params": {"taskId": "t"}})
        );
        let mut answers = Map::new();
        answers.insert("k".into(), json!({"action": "decline"}));
        assert_eq!(
            parse(&tasks_update_request(5, "t", answers.clone())),
            json!({"jsonrpc": "2.0", "id": 5, "method": "tasks/update",
                "params": {"taskId": "t", "inputResponses": {"k": {"action": "decline"}}}})
        );
        let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"go","arguments":{}}}"#;
        let tp = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01";
        let with = parse(&with_meta(call, "traceparent", json!(tp)).unwrap());
        assert_eq!(with["params"]["_meta"], json!({"traceparent": tp}));
        let twice = with_meta(&with.to_string(), "other", json!(1)).unwrap();
        assert_eq!(parse(&twice)["params"]["_meta"], json!({"traceparent": tp, "other": 1}));
        assert!(with_meta(r#"{"id":1}"#, "k", json!(1)).is_err());
        let retry = parse(&with_input_responses(call, answers, Some("s")).unwrap());
        assert_eq!(retry["params"]["requestState"], "s");
        assert_eq!(retry["params"]["inputResponses"]["k"]["action"], "decline");
    }
}
