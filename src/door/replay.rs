//! A task's stream events: how one is rendered (a `StreamResponse`, A2A v1.0 §3.2.3), and the
//! log every stream of the task reads them from, so each event has one id and a stream that
//! reconnects with `Last-Event-ID` gets exactly the ones it missed (docs/a2a.md, "Resuming a
//! stream"). The log lives beside the task on the board (`tasks::StreamLog`); its bounds and the
//! resume decision are the core's (`wire::replay`).
//!
//! The log is written by whichever stream looks first: each brings it up to the task as it
//! stands before reading it, so changes that land between two looks are logged as the latest
//! state (as one stream always coalesced them), and every stream then sends the same events.

use serde_json::{Value, json};

use super::jsonrpc;
use super::view::TaskObject as _;
use crate::tasks::{AnswerChunk, Board, StreamLog, TaskSnapshot, TaskState};

/// One event of a task's stream, before it is rendered.
#[derive(Debug, Clone, Copy)]
pub enum StreamEvent<'a> {
    /// The task as it stands: `{"task":Task}`. `resumed` marks a task object sent in place of
    /// events a resumed stream missed that are no longer kept.
    Task { task: &'a TaskSnapshot, resumed: bool },
    /// `{"statusUpdate":…}` with the task's status.
    Status(&'a TaskSnapshot),
    /// `{"artifactUpdate":…}` with the whole `response` artifact of a completed task.
    Artifact(&'a TaskSnapshot),
    /// `{"artifactUpdate":…}` with a piece of the streamed answer.
    Chunk {
        task: &'a TaskSnapshot,
        text: &'a str,
        append: bool,
        last: bool,
    },
}

/// The `StreamResponse` of one event: the one rendering of it, whoever sends it.
pub fn stream_response(event: StreamEvent<'_>) -> Value {
    match event {
        StreamEvent::Task { task, resumed } => {
            let mut t = task.to_json(true);
            if resumed {
                t["metadata"]["murmur"]["resumed"] = json!("snapshot");
            }
            jsonrpc::object([("task", t)])
        }
        StreamEvent::Status(t) => {
            json!({"statusUpdate": {"contextId": t.context_id, "status": t.status_json(), "taskId": t.id}})
        }
        StreamEvent::Artifact(t) => {
            json!({"artifactUpdate": {"artifact": t.artifact_json(), "contextId": t.context_id, "taskId": t.id}})
        }
        StreamEvent::Chunk {
            task,
            text,
            append,
            last,
        } => json!({"artifactUpdate": {
            "append": append,
            "artifact": {"artifactId": "response", "name": "response", "parts": [{"text": text}]},
            "contextId": task.context_id,
            "lastChunk": last,
            "taskId": task.id,
        }}),
    }
}

/// A stream ends after the task reaches this state: a terminal one, or a question (A2A v1.0:
/// its caller answers with a new message, whose own reply or stream follows the task on).
pub fn closes(state: TaskState) -> bool {
    state.is_terminal() || state == TaskState::InputRequired
}

/// Brings `log` up to the task as it stands and returns that task; `None` once the board has
/// forgotten it. `first` is a task object the caller already holds, used when it is not older
/// than what the log shows. Call with the log locked: the board is read under it.
pub fn catch_up(
    board: &Board,
    task_id: &str,
    log: &mut StreamLog,
    first: Option<TaskSnapshot>,
) -> Option<TaskSnapshot> {
    let have = log.streamed.as_ref().map(|(turn, text)| (*turn, text.len()));
    let snap = match first {
        Some(s) if s.changed >= log.status_change => s,
        _ => board.get(task_id)?,
    };
    let chunk = board.streamed_since(task_id, have);
    record(log, &snap, chunk);
    Some(snap)
}

/// Logs what a stream owes for `snap` (a status change since the last logged) and for `chunk`
/// (streamed answer text not logged yet).
fn record(log: &mut StreamLog, snap: &TaskSnapshot, chunk: Option<AnswerChunk>) {
    let push = |log: &mut StreamLog, event: StreamEvent<'_>, state: TaskState| {
        let closing = matches!(event, StreamEvent::Status(_)) && closes(state);
        let terminal = closing && state.is_terminal();
        log.push(jsonrpc::to_bytes(&stream_response(event)), closing, terminal);
    };
    if snap.changed > log.status_change {
        if !log.artifact_logged
            && let Some(answer) = &snap.answer
        {
            match log.streamed.take() {
                // Chunks went out: the last one completes them, or replaces them if the answer
                // is not what they began (should a turn's text not have been final).
                Some((_, sent)) => {
                    let (text, append) = match answer.strip_prefix(sent.as_str()) {
                        Some(rest) => (rest, true),
                        None => (answer.as_str(), false),
                    };
                    let chunk = StreamEvent::Chunk {
                        task: snap,
                        text,
                        append,
                        last: true,
                    };
                    push(log, chunk, snap.state);
                }
                None => push(log, StreamEvent::Artifact(snap), snap.state),
            }
            log.artifact_logged = true;
            log.set_streamed(None);
        }
        log.status_change = snap.changed;
        push(log, StreamEvent::Status(snap), snap.state);
    }
    if !closes(snap.state)
        && let Some(c) = chunk
    {
        let event = StreamEvent::Chunk {
            task: snap,
            text: &c.text,
            append: c.append,
            last: false,
        };
        push(log, event, snap.state);
        let streamed = match log.streamed.take() {
            Some((turn, mut sent)) if c.append && turn == c.turn => {
                sent.push_str(&c.text);
                (turn, sent)
            }
            _ => (c.turn, c.text),
        };
        log.set_streamed(Some(streamed));
    }
}

/// One event as the stream carries it: `id: <seq>`, then the JSON-RPC response whose `result`
/// is `result`, answering `request_id`.
pub fn frame(seq: u64, request_id: &Value, result: &[u8]) -> Vec<u8> {
    let id = jsonrpc::to_bytes(request_id);
    let mut v = Vec::with_capacity(result.len() + id.len() + 64);
    v.extend_from_slice(format!("id: {seq}\ndata: {{\"id\":").as_bytes());
    v.extend_from_slice(&id);
    // The keys in the order `jsonrpc::result_value` sorts them, so the bytes are the same.
    v.extend_from_slice(b",\"jsonrpc\":\"2.0\",\"result\":");
    v.extend_from_slice(result);
    v.extend_from_slice(b"}\n\n");
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_the_json_rpc_response_with_its_id() {
        let result = json!({"statusUpdate": {"taskId": "t"}});
        for id in [json!("s1"), json!(7), Value::Null] {
            let framed = frame(3, &id, &jsonrpc::to_bytes(&result));
            let want = [
                b"id: 3\ndata: ".as_slice(),
                &jsonrpc::to_bytes(&jsonrpc::result_value(&id, result.clone())),
                b"\n\n",
            ]
            .concat();
            assert_eq!(framed, want, "{id}");
        }
    }
}
