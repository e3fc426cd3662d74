//! Server-sent events for SendStreamingMessage and SubscribeToTask
//! (docs/reference/door.md#methods): first `{"task":Task}`, then `statusUpdate` / `artifactUpdate`
//! as the task changes, and the stream closes after a terminal state. Every event carries its id
//! in the task's stream, and each stream reads the task's log (`replay`), so a stream that
//! reconnects with `Last-Event-ID` resumes where it was. Changes that land between two looks are
//! coalesced into the latest state, and a stream that falls behind the log gets the task as it
//! stands, so a slow client never stalls the board.
//!
//! A model capsule's answer streams: while the task runs, the text its provider streams goes out
//! as `artifactUpdate` chunks of the one `response` artifact (`append: true` after the first),
//! and the chunk sent as the task completes carries `lastChunk: true` and makes what the client
//! assembled exactly the final answer. Text of a turn that was not the last (it asked for a tool
//! call) is replaced by the next turn's (`append: false`).

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use actix_web::HttpResponse;
use actix_web::http::header;
use actix_web::web::Bytes;
use serde_json::Value;
use tokio::sync::watch;

use super::jsonrpc;
use super::replay::{self, StreamEvent, closes, frame};
use crate::sync::lock;
use crate::tasks::{Board, Pinned, StreamLog, TaskSnapshot};
use crate::wire::replay::Since;

/// Where a stream starts.
#[derive(Debug)]
pub enum Start {
    /// With the task: `Some` as the caller holds it (as SendStreamingMessage created it), else as
    /// it stands at the first look. Boxed: the other start is a number.
    Task(Option<Box<TaskSnapshot>>),
    /// Right after event `N` of the task's stream (SubscribeToTask with `Last-Event-ID: N`).
    After(u64),
}

struct Follow {
    board: Arc<Board>,
    task_id: String,
    request_id: Value,
    rx: watch::Receiver<u64>,
    log: Arc<Mutex<StreamLog>>,
    /// The task object to open with, while the stream has not opened.
    first: Option<TaskSnapshot>,
    /// The last event of the task's log this stream has shown; `None` before it opened.
    cursor: Option<u64>,
    done: bool,
    /// Keeps the task on the board until this stream is gone.
    _pin: Pinned,
}

impl Follow {
    /// The events owed now, if any; `None` once the board has forgotten the task.
    fn step(&mut self) -> Option<Vec<u8>> {
        let log = Arc::clone(&self.log);
        let mut log = lock(&log);
        let snap = replay::catch_up(&self.board, &self.task_id, &mut log, self.first.take())?;
        let mut out = Vec::new();
        let resumed = match self.cursor {
            None => Some(false),
            Some(after) => match log.events.since(after) {
                Since::Events(events) => {
                    for e in events {
                        out.extend(frame(e.seq, &self.request_id, &e.item.result));
                        self.cursor = Some(e.seq);
                        if e.item.terminal {
                            self.board.mark_end_shown(&self.task_id);
                        }
                        if e.item.closes {
                            self.done = true;
                            break;
                        }
                    }
                    None
                }
                // What it missed is no longer kept: the task as it stands, marked.
                Since::Gap => Some(true),
                Since::Ahead => {
                    self.done = true;
                    None
                }
            },
        };
        if let Some(resumed) = resumed {
            out.extend(self.open(&log, &snap, resumed));
        }
        Some(out)
    }

    /// The task object as the stream's next event, labelled with the last event it covers, and
    /// the answer text streamed so far, which no task object carries.
    fn open(&mut self, log: &StreamLog, snap: &TaskSnapshot, resumed: bool) -> Vec<u8> {
        let seq = log.events.last();
        let task = StreamEvent::Task { task: snap, resumed };
        let mut out = frame(
            seq,
            &self.request_id,
            &jsonrpc::to_bytes(&replay::stream_response(task)),
        );
        if !closes(snap.state)
            && !log.artifact_logged
            && let Some((_, text)) = log.streamed.as_ref().filter(|(_, t)| !t.is_empty())
        {
            let chunk = StreamEvent::Chunk {
                task: snap,
                text,
                append: false,
                last: false,
            };
            out.extend(frame(
                seq,
                &self.request_id,
                &jsonrpc::to_bytes(&replay::stream_response(chunk)),
            ));
        }
        self.cursor = Some(seq);
        self.done = closes(snap.state);
        if snap.state.is_terminal() {
            self.board.mark_end_shown(&snap.id);
        }
        out
    }

    async fn next(mut self) -> Option<(Result<Bytes, Infallible>, Follow)> {
        loop {
            if self.done {
                return None;
            }
            // Mark the change seen before reading, so a change after the read wakes us.
            self.rx.borrow_and_update();
            let out = self.step()?;
            if !out.is_empty() {
                return Some((Ok(Bytes::from(out)), self));
            }
            if self.done || self.rx.changed().await.is_err() {
                return None;
            }
        }
    }
}

/// The SSE response following a task, each event answering JSON-RPC request `request_id` and
/// carrying its id in the task's stream (docs/a2a.md, "Resuming a stream").
pub fn follow(board: &Arc<Board>, task_id: String, start: Start, pin: Pinned, request_id: Value) -> HttpResponse {
    let (first, cursor) = match start {
        Start::Task(first) => (first.map(|b| *b), None),
        Start::After(n) => (None, Some(n)),
    };
    let Some(log) = board.stream_log(&task_id) else {
        // Forgotten between the method's look and now (it was pinned, so only at a close):
        // the stream ends at once.
        return HttpResponse::Ok()
            .insert_header((header::CONTENT_TYPE, "text/event-stream"))
            .finish();
    };
    let f = Follow {
        board: Arc::clone(board),
        task_id,
        request_id,
        rx: board.changes(),
        log,
        first,
        cursor,
        done: false,
        _pin: pin,
    };
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "text/event-stream"))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .streaming(futures_util::stream::unfold(f, Follow::next))
}
