//! What a task is, apart from where it is kept: its states, the trust and origin it was given
//! at admission, and the outcomes an executor ends it with.
//!
//! The state names are A2A's (docs/reference/door.md#methods), spelled here because both ends of
//! A2A read them: the door writes them and the calls client reads a peer door's answers.

use serde::Serialize;

/// Status text of a task refused because the session holds no room for it
/// (docs/reference/door.md#methods).
pub const REJECT_BUSY: &str = "task rejected: capsule is busy";
/// Status text of a task refused or dropped from the queue because the session is ending
/// (docs/reference/manifest.md#keys).
pub const REJECT_CLOSING: &str = "task rejected: the session is closing";

/// A2A task states (docs/reference/door.md#methods).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskState {
    Submitted,
    Working,
    /// The task asked its caller a question and waits for the answer (docs/reference/door.md#asking).
    InputRequired,
    Completed,
    Failed,
    Rejected,
    Canceled,
}

impl TaskState {
    /// The A2A spelling, `TASK_STATE_…`.
    pub fn wire(self) -> &'static str {
        match self {
            TaskState::Submitted => "TASK_STATE_SUBMITTED",
            TaskState::Working => "TASK_STATE_WORKING",
            TaskState::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            TaskState::Completed => "TASK_STATE_COMPLETED",
            TaskState::Failed => "TASK_STATE_FAILED",
            TaskState::Rejected => "TASK_STATE_REJECTED",
            TaskState::Canceled => "TASK_STATE_CANCELED",
        }
    }

    /// A state from its A2A spelling; `None` for anything else.
    pub fn from_wire(s: &str) -> Option<TaskState> {
        [
            TaskState::Submitted,
            TaskState::Working,
            TaskState::InputRequired,
            TaskState::Completed,
            TaskState::Failed,
            TaskState::Rejected,
            TaskState::Canceled,
        ]
        .into_iter()
        .find(|t| t.wire() == s)
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Failed | TaskState::Rejected | TaskState::Canceled
        )
    }
}

/// Trust class of a task (docs/reference/door.md#request-pipeline step 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    Trusted,
    Untrusted,
}

impl Trust {
    pub fn as_str(self) -> &'static str {
        match self {
            Trust::Trusted => "trusted",
            Trust::Untrusted => "untrusted",
        }
    }
}

/// Where a task came from (docs/reference/door.md#request-pipeline step 1); `Local` is the `--task`
/// task [ours].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Event,
    Peer,
    Completion,
    Local,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Event => "event",
            Origin::Peer => "peer",
            Origin::Completion => "completion",
            Origin::Local => "local",
        }
    }
}

/// One `{member, status}` of `metadata.murmur.noAnswerBelow` (docs/reference/door.md#methods).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NoAnswerBelow {
    pub member: String,
    pub status: String,
}

/// How the executor ends a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskOutcome {
    /// `TASK_STATE_COMPLETED` with the answer as the `response` artifact.
    Completed(String),
    /// `TASK_STATE_FAILED` with the message as status text.
    Failed(String),
    /// end-without-answer (docs/reference/capsules.md#model-capsules): `TASK_STATE_FAILED`, the
    /// reason as status text, and `metadata.murmur` `{noAnswer, noAnswerBelow}`.
    NoAnswer { reason: String, below: Vec<NoAnswerBelow> },
    /// `TASK_STATE_CANCELED`.
    Canceled,
    /// `TASK_STATE_REJECTED` with the message as status text: the task was taken, but where it
    /// was forwarded it was refused (a remote capsule's agent would not take it).
    Rejected(String),
}

/// The final status of a member call, as the `member_call` trace record spells it
/// (docs/reference/formation.md#trace-records).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallStatus {
    Completed,
    Failed,
    Canceled,
    Rejected,
    TimedOut,
    Unreachable,
    Abandoned,
    NoAnswer,
    /// The callee's task asked a question (`TASK_STATE_INPUT_REQUIRED`): the call's outcome so
    /// far, which the caller may answer with a reply (docs/reference/capsules.md#questions-across-members).
    InputRequired,
}

impl CallStatus {
    /// The trace spelling: `completed`, `timed_out`, `no_answer`, …
    pub fn as_str(self) -> &'static str {
        match self {
            CallStatus::Completed => "completed",
            CallStatus::Failed => "failed",
            CallStatus::Canceled => "canceled",
            CallStatus::Rejected => "rejected",
            CallStatus::TimedOut => "timed_out",
            CallStatus::Unreachable => "unreachable",
            CallStatus::Abandoned => "abandoned",
            CallStatus::NoAnswer => "no_answer",
            CallStatus::InputRequired => "input_required",
        }
    }

    /// Reads the trace spelling.
    pub fn parse(s: &str) -> Option<CallStatus> {
        [
            CallStatus::Completed,
            CallStatus::Failed,
            CallStatus::Canceled,
            CallStatus::Rejected,
            CallStatus::TimedOut,
            CallStatus::Unreachable,
            CallStatus::Abandoned,
            CallStatus::NoAnswer,
            CallStatus::InputRequired,
        ]
        .into_iter()
        .find(|c| c.as_str() == s)
    }
}
