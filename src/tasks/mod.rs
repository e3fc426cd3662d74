//! The task model: every task of this session, from admission to the outcome it ended with.
//!
//! The door renders it as A2A (`door::view`); the session's executor, recorder and control loop,
//! the calls client and the model capsule use it without the door. Layout:
//! - `types` — the task types the board takes and hands out: snapshots and their history, offers,
//!   observer events, ListTasks queries and pages, who may see whose task;
//! - `board` — the one owner of task state: admission per lifecycle, the FIFO the executor
//!   drains, cancellation, pins, history and context exchanges, ListTasks;
//! - `retention` — how many ended tasks and bytes a board keeps and pins, and which to forget:
//!   books of ids and sizes the board consults, so it never grows for the session's life;
//! - `stream_log` — the events a task's streams sent, kept with the task for streams that
//!   resume;
//! - `store` — a peer's task store: the board's tasks in an SQLite database, so a restarted
//!   process of the member answers for them.
//!
//! Task states, trust, origins, outcomes and the refusal texts are pure, and the core's
//! (`mur_core::task`).

pub mod ask;
pub mod board;
pub mod retention;
pub mod store;
pub mod stream_log;
pub mod types;

pub use ask::Asker;
pub use board::{Board, Cancel, Pinned, Work};
pub use retention::{KEEP_ENDED_BYTES, KEEP_ENDED_TASKS, Retention};
pub use stream_log::{LoggedEvent, StreamLog};
pub use types::{
    AnswerChunk, AnswerRefusal, Asked, BoardEvent, CONTEXT_BYTES, CONTEXT_TURNS, CancelResult, Clock, ContextTurn,
    HISTORY_MESSAGES, HistoryMessage, HistoryText, InputOutcome, ListPage, ListQuery, NewTask, Role, TaskSnapshot,
    owner_sees,
};
// The task model's pure part (states, trust, origins, outcomes) is the core's.
pub use crate::task::{NoAnswerBelow, Origin, REJECT_BUSY, REJECT_CLOSING, TaskOutcome, TaskState, Trust};
