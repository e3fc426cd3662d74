//! Server-sent events for SendStreamingMessage and SubscribeToTask
//! (docs/reference/door.md#methods): first `{"task":Task}`, then `statusUpdate` / `artifactUpdate`
//! as the task changes, and the stream closes after a terminal state. Changes that land between two
//! polls are coalesced into the latest state, so a slow client never stalls the board.
//!
//! A model capsule's answer streams: while the task runs, the text its provider streams goes out
//! as `artifactUpdate` chunks of the one `response` artifact (`append: true` after the first),
//! and the chunk sent as the task completes carries `lastChunk: true` and makes what the client
//! assembled exactly the final answer. Text of a turn that was not the last (it asked for a tool
//! call) is replaced by the next turn's (`append: false`).

use std::convert::Infallible;
use std::sync::Arc;

use actix_web::HttpResponse;
use actix_web::http::header;
use actix_web::web::Bytes;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::jsonrpc::{self, RpcError};
use super::view::TaskObject as _;
use crate::tasks::{Board, Pinned, TaskSnapshot, TaskState};

struct Follow {
    board: Arc<Board>,
    task_id: String,
    request_id: Value,
    rx: watch::Receiver<u64>,
    /// The snapshot to open with, when the caller holds it (the task as SendStreamingMessage
    /// created it); otherwise the task as it stands at the first poll.
    first: Option<TaskSnapshot>,
    /// Change number of the last state sent; `None` before the snapshot.
    sent: Option<u64>,
    artifact_sent: bool,
    /// The streamed answer text sent so far: its turn and the text (its bytes decide what a
    /// final chunk must add or replace).
    streamed: Option<(u32, String)>,
    done: bool,
    /// Keeps the task on the board until this stream is gone.
    _pin: Pinned,
}

/// An `artifactUpdate` carrying `text` as a piece of the `response` artifact.
fn chunk(snap: &TaskSnapshot, text: &str, append: bool, last: bool) -> Value {
    json!({"artifactUpdate": {
        "append": append,
        "artifact": {"artifactId": "response", "name": "response", "parts": [{"text": text}]},
        "contextId": snap.context_id,
        "lastChunk": last,
        "taskId": snap.id,
    }})
}

/// `data: {"id":…,"jsonrpc":"2.0","result":<StreamResponse>}\n\n`.
fn event(request_id: &Value, result: Value) -> Vec<u8> {
    let mut v = b"data: ".to_vec();
    v.extend_from_slice(&jsonrpc::to_bytes(&jsonrpc::result_value(request_id, result)));
    v.extend_from_slice(b"\n\n");
    v
}

impl Follow {
    /// The events owed for the task as it stands now, if any.
    fn pending(&mut self, snap: &TaskSnapshot) -> Vec<u8> {
        let mut out = Vec::new();
        match self.sent {
            None => {
                out.extend(event(&self.request_id, jsonrpc::object([("task", snap.to_json(true))])));
                self.artifact_sent = snap.answer.is_some();
            }
            Some(c) if c != snap.changed => {
                if !self.artifact_sent
                    && let (Some(answer), Some((_, sent))) = (&snap.answer, &self.streamed)
                {
                    // Chunks went out: the last one completes them, or replaces them if the
                    // answer is not what they began (should a turn's text not have been final).
                    let (text, append) = match answer.strip_prefix(sent.as_str()) {
                        Some(rest) => (rest, true),
                        None => (answer.as_str(), false),
                    };
                    out.extend(event(&self.request_id, chunk(snap, text, append, true)));
                    self.artifact_sent = true;
                }
                if !self.artifact_sent
                    && let Some(a) = snap.artifact_json()
                {
                    let upd = json!({"artifact": a, "contextId": snap.context_id, "taskId": snap.id});
                    out.extend(event(&self.request_id, json!({"artifactUpdate": upd})));
                    self.artifact_sent = true;
                }
                let upd = json!({"contextId": snap.context_id, "status": snap.status_json(), "taskId": snap.id});
                out.extend(event(&self.request_id, json!({"statusUpdate": upd})));
            }
            Some(_) => return out,
        }
        self.sent = Some(snap.changed);
        // An interrupted task ends the stream too (A2A v1.0): its caller answers with a new
        // message, whose own reply or stream follows the task on.
        self.done = snap.state.is_terminal() || snap.state == TaskState::InputRequired;
        if snap.state.is_terminal() {
            self.board.mark_end_shown(&snap.id);
        }
        out
    }

    async fn next(mut self) -> Option<(Result<Bytes, Infallible>, Follow)> {
        if self.done {
            return None;
        }
        loop {
            // Mark the change seen before reading, so a change after the read wakes us.
            self.rx.borrow_and_update();
            let snap = match self.first.take() {
                Some(s) => s,
                None => self.board.get(&self.task_id)?,
            };
            let mut out = self.pending(&snap);
            if !self.done
                && let Some(c) = self
                    .board
                    .streamed_since(&self.task_id, self.streamed.as_ref().map(|(t, s)| (*t, s.len())))
            {
                out.extend(event(&self.request_id, chunk(&snap, &c.text, c.append, false)));
                match &mut self.streamed {
                    Some((turn, sent)) if c.append && *turn == c.turn => sent.push_str(&c.text),
                    slot => *slot = Some((c.turn, c.text)),
                }
            }
            if !out.is_empty() {
                return Some((Ok(Bytes::from(out)), self));
            }
            if self.rx.changed().await.is_err() {
                return None;
            }
        }
    }
}

/// The SSE response following a task, each event answering JSON-RPC request `request_id`. It
/// opens with `first` when given, else with the task as it stands.
pub fn follow(
    board: &Arc<Board>,
    task_id: String,
    first: Option<TaskSnapshot>,
    pin: Pinned,
    request_id: Value,
) -> HttpResponse {
    let f = Follow {
        board: Arc::clone(board),
        task_id,
        request_id,
        rx: board.changes(),
        first,
        sent: None,
        artifact_sent: false,
        streamed: None,
        done: false,
        _pin: pin,
    };
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "text/event-stream"))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .streaming(futures_util::stream::unfold(f, Follow::next))
}

/// A streaming method (SendStreamingMessage, SubscribeToTask) refused before its stream starts.
///
/// A2A v1.0 §9.4.2 gives a streaming method's response as HTTP 200 with `Content-Type:
/// text/event-stream` whose every `data:` is a JSON-RPC response object, and
/// docs/reference/formation.md#how-the-launcher-waits gives an error as the JSON-RPC error
/// response; so a refusal is that stream with one event, the error response, and then its end:
/// `data: {"error":{…},"id":…,"jsonrpc":"2.0"}\n\n`. The official Python SDK's client raises the
/// mapped A2A error for it (it reads an error response on any `data:` line).
pub fn refusal(request_id: &Value, err: &RpcError) -> HttpResponse {
    let mut body = b"data: ".to_vec();
    body.extend_from_slice(&jsonrpc::to_bytes(&jsonrpc::error_value(request_id, err)));
    body.extend_from_slice(b"\n\n");
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "text/event-stream"))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .body(body)
}
