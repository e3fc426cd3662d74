//! The task model: every task of this session, from admission to the outcome it ended with.
//!
//! The door renders it as A2A (`door::view`); the session's executor, recorder and control loop,
//! the calls client and the model capsule use it without the door. Layout:
//! - `state` — task states, trust, origin, outcomes, the refusal texts;
//! - `board` — the one owner of task state: admission per lifecycle, the FIFO the executor
//!   drains, cancellation, owner visibility, history and context exchanges, retention bounds.

pub mod board;

pub use board::{
    AnswerChunk, Board, BoardEvent, CONTEXT_BYTES, CONTEXT_TURNS, Cancel, CancelResult, Clock, ContextTurn,
    HISTORY_MESSAGES, HistoryMessage, HistoryText, KEEP_ENDED_BYTES, KEEP_ENDED_TASKS, ListPage, ListQuery, NewTask,
    Pinned, Retention, Role, TaskSnapshot, Work, owner_sees,
};
// The task model's pure part (states, trust, origins, outcomes) is the core's.
pub use crate::task::{NoAnswerBelow, Origin, REJECT_BUSY, REJECT_CLOSING, TaskOutcome, TaskState, Trust};
