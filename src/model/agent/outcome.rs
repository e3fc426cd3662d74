//! How a task's run ended, and the tokens it spent.

use super::*;

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentOutcome {
    Completed(String),
    Failed(String),
    /// A tool call came with no turn left (docs/reference/capsules.md#model-capsules): the task
    /// fails, status `max_turns_reached`.
    MaxTurns(String),
    /// `end-without-answer` in a member-sent task (docs/reference/capsules.md#model-capsules).
    NoAnswer {
        reason: String,
        below: Vec<NoAnswerBelow>,
    },
    Canceled,
}

impl AgentOutcome {
    /// The outcome as the task board records it.
    pub fn into_board(self) -> TaskOutcome {
        match self {
            AgentOutcome::Completed(a) => TaskOutcome::Completed(a),
            AgentOutcome::Failed(m) | AgentOutcome::MaxTurns(m) => TaskOutcome::Failed(m),
            AgentOutcome::NoAnswer { reason, below } => TaskOutcome::NoAnswer { reason, below },
            AgentOutcome::Canceled => TaskOutcome::Canceled,
        }
    }

    /// The session status it stands for (docs/reference/formation.md#how-a-member-ends,
    /// docs/reference/formation.md#trace-records).
    pub fn status(&self) -> &'static str {
        match self {
            AgentOutcome::Completed(_) => "ok",
            AgentOutcome::Failed(_) => "failed",
            AgentOutcome::MaxTurns(_) => "max_turns_reached",
            AgentOutcome::NoAnswer { .. } => "no_answer",
            AgentOutcome::Canceled => "canceled",
        }
    }
}

/// The session's usage so far (`session_end`, docs/reference/formation.md#trace-records).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageTotals {
    pub turns: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub tool_calls: u64,
}

/// Usage counters shared by every task of a session.
#[derive(Debug, Default)]
pub struct Totals {
    pub(super) turns: AtomicU64,
    pub(super) input_tokens: AtomicU64,
    pub(super) output_tokens: AtomicU64,
    pub(super) tool_calls: AtomicU64,
}

impl Totals {
    pub fn snapshot(&self) -> UsageTotals {
        UsageTotals {
            turns: self.turns.load(Ordering::Relaxed),
            input_tokens: self.input_tokens.load(Ordering::Relaxed),
            output_tokens: self.output_tokens.load(Ordering::Relaxed),
            tool_calls: self.tool_calls.load(Ordering::Relaxed),
        }
    }

    /// Adds a reply's reported tokens; an unreported count adds nothing.
    pub(super) fn add_tokens(&self, usage: &Usage) {
        self.input_tokens
            .fetch_add(usage.input_tokens.unwrap_or(0), Ordering::Relaxed);
        self.output_tokens
            .fetch_add(usage.output_tokens.unwrap_or(0), Ordering::Relaxed);
    }
}
