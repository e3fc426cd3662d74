//! The task types the board takes and hands out: a task as it stands ([`TaskSnapshot`]) with its
//! history, an offer ([`NewTask`]), observer events, ListTasks queries and pages, streamed answer
//! chunks, and who may see whose task ([`owner_sees`]).
//!
//! Plain data: every change to a task is the board's (`board`).

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::task::{NoAnswerBelow, Origin, TaskState, Trust};

/// Messages a task's `history` keeps (A2A v1.0 §3.2.4: the server MAY return fewer than asked):
/// the caller's message, progress notes, and the final message. Notes past it are not kept.
pub const HISTORY_MESSAGES: usize = 32;
/// Earlier exchanges of a context a model capsule is shown (A2A v1.0 §3.4.2 "Context
/// Inheritance"), newest kept first [ours].
pub const CONTEXT_TURNS: usize = 20;
/// Bytes of text those exchanges may hold together; older ones past it are left out [ours].
pub const CONTEXT_BYTES: usize = 256 * 1024;

/// A task as it stands; what GetTask shows and what the session reads at the end.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSnapshot {
    pub id: String,
    pub context_id: String,
    pub state: TaskState,
    /// Time of the last status change.
    pub timestamp: DateTime<Utc>,
    /// Text of `status.message`: rejection reason, failure text, or a progress note.
    pub status_text: Option<String>,
    pub status_message_id: Option<String>,
    /// The answer of a completed task.
    pub answer: Option<String>,
    /// Set when the task ended without answer.
    pub no_answer_below: Option<Vec<NoAnswerBelow>>,
    /// `operator`, `member:<x>`, or none (public door, `--task`).
    pub owner: Option<String>,
    pub trust: Trust,
    pub origin: Origin,
    /// Board-wide change number of the last status change; orders ListTasks and page tokens.
    pub changed: u64,
    /// The task's messages, oldest first (A2A v1.0 §4.1.1 `Task.history`).
    pub history: Vec<HistoryMessage>,
    /// While the task is `INPUT_REQUIRED`: who asked, innermost first (the asking member, then
    /// each member the question came up through); empty otherwise, or when no member is named.
    pub asked_by: Vec<String>,
    /// What the task and every call below it spent, set as it ends for a task a member asked
    /// for (`metadata.murmur.subtreeCost`, docs/reference/formation.md#cost-roll-up).
    /// Boxed: most tasks have none, and a snapshot is copied into every reply.
    pub cost: Option<Box<crate::cost::Cost>>,
}

/// Who sent a history message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Agent,
}

/// One message of a task's history.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryMessage {
    pub role: Role,
    pub message_id: String,
    pub text: HistoryText,
}

/// A history message's text: its own, or the task's answer (kept once, in `answer`).
#[derive(Debug, Clone, PartialEq)]
pub enum HistoryText {
    Own(Arc<str>),
    Answer,
}

/// One earlier exchange of a context: the caller's message and the answer it got.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextTurn {
    pub asked: Arc<str>,
    pub answered: String,
}

/// Whether a task owned by `viewer` may see one owned by `owner` (docs/reference/door.md#methods):
/// no owner (public door, `--task`) and the operator see every task, any other credential its own.
pub fn owner_sees(viewer: Option<&str>, owner: Option<&str>) -> bool {
    matches!(viewer, None | Some("operator")) || viewer == owner
}

impl TaskSnapshot {
    /// Keeps only the newest `limit` history messages (A2A v1.0 §3.2.4): `None` keeps all,
    /// `Some(0)` none, so the field is left out.
    pub fn limit_history(&mut self, limit: Option<usize>) {
        if let Some(n) = limit {
            let drop = self.history.len().saturating_sub(n);
            self.history.drain(..drop);
        }
    }

    /// A history message's text; the final message's is the task's answer.
    pub fn history_text<'a>(&'a self, m: &'a HistoryMessage) -> &'a str {
        match &m.text {
            HistoryText::Own(t) => t,
            HistoryText::Answer => self.answer.as_deref().unwrap_or_default(),
        }
    }
}

/// A task offered at the door (SendMessage).
#[derive(Debug, Clone)]
pub struct NewTask {
    pub text: String,
    /// The message's `contextId`; `None` mints a `ctx_`.
    pub context_id: Option<String>,
    pub message_id: String,
    /// `operator`, `member:<x>`, or none on a public door.
    pub owner: Option<String>,
    /// The calling member when an `mft1` let the request in.
    pub caller_member: Option<String>,
    pub origin: Origin,
    pub trust: Trust,
    /// The caller's `traceparent` header, for `a2a_task_received`.
    pub traceparent: Option<String>,
    /// The grant the calling member's call came with, as the door verified it
    /// (docs/reference/formation.md#grants).
    pub grant: Option<Arc<crate::grant::Grant>>,
    /// The deadline and budget a client outside the formation sent with the task
    /// (docs/reference/formation.md#limits-across-the-formations-edge); they only narrow.
    pub limits: Option<crate::wire::limits::Limits>,
}

/// What the observer hook is told, in order. Every task gets `Received` once and `Ended` once.
#[derive(Debug, Clone, PartialEq)]
pub enum BoardEvent {
    /// A task was created (admitted or not; a refused one is followed at once by its `Ended`).
    Received {
        task_id: String,
        context_id: String,
        message_id: String,
        traceparent: Option<String>,
        /// Only when an `mft1` let the request in (docs/reference/formation.md#trace-records
        /// `a2a_task_received.caller_member`).
        caller_member: Option<String>,
        origin: Origin,
        trust: Trust,
    },
    /// The task reached a terminal state. `reason` is the rejection or cancellation cause, or the
    /// failure text; `answer` is a completed task's answer, carried so the observer, which hears
    /// of an end before anyone can read it (see `Board::mutate`), records it without reading the
    /// board.
    Ended {
        task_id: String,
        state: TaskState,
        no_answer: bool,
        reason: Option<String>,
        answer: Option<String>,
    },
    /// The task asked a question and waits for its answer (`TASK_STATE_INPUT_REQUIRED`).
    InputRequested {
        task_id: String,
        asked_by: Vec<String>,
        question_bytes: usize,
        /// The question, for the texts kept beside the trace (never the trace itself).
        question: Arc<str>,
    },
    /// The question is over: answered (the task works again), timed out, or abandoned with its
    /// task (cancelled, the session closing, the caller gone).
    InputSettled {
        task_id: String,
        waited_ms: u64,
        answer_bytes: Option<usize>,
        outcome: InputOutcome,
        /// The answer, when one came: for the texts kept beside the trace.
        answer: Option<Arc<str>>,
    },
}

/// How a question ended (`input_received.outcome`, docs/reference/formation.md#trace-records).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputOutcome {
    Answered,
    TimedOut,
    Abandoned,
}

impl InputOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            InputOutcome::Answered => "answered",
            InputOutcome::TimedOut => "timed_out",
            InputOutcome::Abandoned => "abandoned",
        }
    }
}

/// How a question a task asked ended, as its asker sees it ([`super::Board::ask`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    /// The caller answered, after `waited`.
    Answered { text: String, waited: std::time::Duration },
    /// No answer came within the bound; the question was withdrawn.
    TimedOut,
    /// The task ended (cancelled, the session closing) before an answer, or was not live.
    Ended,
}

/// Why an answer to a task was not taken ([`super::Board::answer`]).
#[derive(Debug, Clone, PartialEq)]
pub enum AnswerRefusal {
    /// No such task, or not the caller's to see.
    NotFound,
    /// The task has ended (a question that timed out ended with its task). Boxed, as the other
    /// refusals carry nothing.
    Ended(Box<TaskSnapshot>),
    /// The task is live but has no open question (it is working, or another answer won).
    NotAsking(Box<TaskSnapshot>),
}

/// The clock timestamps come from; tests inject a fixed one.
pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// Result of a cancellation request.
#[derive(Debug, Clone, PartialEq)]
pub enum CancelResult {
    Canceled(TaskSnapshot),
    /// Already terminal: `-32002`.
    NotCancelable(TaskSnapshot),
    NotFound,
}

/// A ListTasks query, already validated.
#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    pub context_id: Option<String>,
    pub state: Option<TaskState>,
    /// Status changed at or after this instant.
    pub after: Option<DateTime<Utc>>,
    pub page_size: usize,
    /// Only tasks whose last change is older than this change number (the page token).
    pub before: Option<u64>,
    /// `historyLength`: `None` = every message kept.
    pub history: Option<usize>,
}

/// One page of ListTasks.
#[derive(Debug, Clone)]
pub struct ListPage {
    pub tasks: Vec<TaskSnapshot>,
    /// The page token for the next page, when more tasks match.
    pub next: Option<u64>,
    /// Every matching visible task, across pages.
    pub total: usize,
}

/// Streamed answer text a stream follower has not sent yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerChunk {
    /// The turn the text belongs to.
    pub turn: u32,
    /// `true`: `text` continues what the follower sent of this turn. `false`: it is the turn's
    /// whole text so far, replacing what was sent (a new turn started over).
    pub append: bool,
    pub text: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn visibility_of_one_task_to_another() {
        let table = [
            (None, Some("member:a"), true),
            (Some("operator"), Some("member:a"), true),
            (Some("operator"), None, true),
            (Some("member:a"), Some("member:a"), true),
            (Some("member:a"), Some("member:b"), false),
            (Some("member:a"), Some("operator"), false),
            (Some("member:a"), None, false),
        ];
        for (viewer, owner, sees) in table {
            assert_eq!(owner_sees(viewer, owner), sees, "{viewer:?} {owner:?}");
        }
    }
}
