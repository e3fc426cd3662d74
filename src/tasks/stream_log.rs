//! The events a task's streams have sent, kept beside the task so a stream that reconnects with
//! `Last-Event-ID` is sent exactly what it missed (docs/a2a.md, "Resuming a stream"). The door
//! renders the events and decides when one is owed (`door::replay`); the board only keeps the log
//! with its task and forgets it with the task. The bounds are the core's
//! ([`LOG_EVENTS`](crate::wire::replay::LOG_EVENTS), [`LOG_BYTES`](crate::wire::replay::LOG_BYTES)).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::wire::replay::EventLog;

/// One sent event: the bytes of its JSON-RPC `result` (a StreamResponse), and whether a stream
/// ends after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedEvent {
    pub result: Arc<[u8]>,
    /// The task is terminal or asks for input here: a stream closes after this event.
    pub closes: bool,
    /// The task is terminal here.
    pub terminal: bool,
}

/// A task's stream log and what it has told of the task so far.
#[derive(Debug, Default)]
pub struct StreamLog {
    pub events: EventLog<LoggedEvent>,
    /// The task's change number (`TaskSnapshot::changed`) the last logged status shows; the
    /// creation's until a status is logged.
    pub status_change: u64,
    /// The `response` artifact has been logged (or was part of the task when the log began).
    pub artifact_logged: bool,
    /// The streamed answer text logged so far, of which turn; dropped once the answer is.
    pub streamed: Option<(u32, String)>,
    /// What the log holds, for the board's books (read without taking the log's lock).
    held: Arc<AtomicUsize>,
}

impl StreamLog {
    pub(super) fn new(status_change: u64, held: Arc<AtomicUsize>) -> StreamLog {
        StreamLog {
            status_change,
            held,
            ..StreamLog::default()
        }
    }

    /// Logs one event and returns its sequence number.
    pub fn push(&mut self, result: Vec<u8>, closes: bool, terminal: bool) -> u64 {
        let bytes = result.len();
        let seq = self.events.push(
            LoggedEvent {
                result: Arc::from(result),
                closes,
                terminal,
            },
            bytes,
        );
        self.update_held();
        seq
    }

    /// Records the streamed text logged so far (`None` once the answer replaced it).
    pub fn set_streamed(&mut self, streamed: Option<(u32, String)>) {
        self.streamed = streamed;
        self.update_held();
    }

    fn update_held(&self) {
        let text = self.streamed.as_ref().map_or(0, |(_, t)| t.len());
        self.held.store(self.events.bytes() + text, Ordering::Relaxed);
    }
}
