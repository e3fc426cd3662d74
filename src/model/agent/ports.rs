//! What the agent loop is given for one task: the member calls it may make (`AgentCalls`), where
//! its turns and tool calls are reported (`TaskEvents`), and the task itself (`TaskCtx`).

use super::*;

/// How a `call-member` dispatch went, as the model is told
/// (docs/reference/capsules.md#calls-between-members).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallReply {
    pub call_id: String,
    /// The call was started or found the member busy: its outcome comes later, through
    /// [`AgentCalls::await_all`]. `false`: it ended at once, and `text` already says how.
    pub pending: bool,
    /// The tool result is a failure (the call ended at once).
    pub failed: bool,
    /// The tool result text: summary line, data line, note.
    pub text: String,
}

/// The member calls of one task, as the agent uses them. [`super::SessionCalls`] is the real one.
pub trait AgentCalls: Send + Sync {
    /// The dispatch of docs/reference/capsules.md#calls-between-members for `member`, which the
    /// agent has checked is a callee. `Err` is a tool error: nothing was sent.
    fn call<'a>(&'a self, member: &'a str, task: &'a str) -> BoxFuture<'a, Result<CallReply, String>>;
    /// [`AgentCalls::call`] narrowed further than the task's own grant: the callee's deadline and
    /// budget at most `limits` (docs/reference/formation.md#grants).
    fn call_within<'a>(
        &'a self,
        member: &'a str,
        task: &'a str,
        _limits: crate::runner::CallLimits,
    ) -> BoxFuture<'a, Result<CallReply, String>> {
        self.call(member, task)
    }
    /// Waits until every call not handed over yet has an outcome; hands them all over.
    fn await_all(&self) -> BoxFuture<'_, Vec<CallOutcome>>;
    /// Hands over the calls that have an outcome now, without waiting.
    fn take_settled(&self) -> Vec<CallOutcome>;
    /// The outgoing-HTTP policy of one of the task's WebAssembly tools, whose own rules are
    /// `allow`: without callees, `allow` alone (no virtual peer address resolves).
    fn tool_http(&self, allow: &AllowList) -> Arc<dyn HttpPolicy> {
        Arc::new(NetworkPolicy::new(allow.clone()))
    }
    /// Who asked the question a callee's call `call_id` ended `input-required` with, innermost
    /// first: what `request-input` with `relay` passes on. `None` when no call of this task
    /// waits with a question under that id.
    fn question_of(&self, _call_id: &str) -> Option<Vec<String>> {
        None
    }
    /// Answers the question call `reply_to` to `member` ended `input-required` with
    /// (docs/reference/capsules.md#questions-across-members): a new call, reported as a dispatch
    /// is. `Err` is a tool error: nothing was sent.
    fn reply<'a>(
        &'a self,
        _member: &'a str,
        reply_to: &'a str,
        _answer: &'a str,
    ) -> BoxFuture<'a, Result<CallReply, String>> {
        let text = format!(
            "no call of this task waits with a question under the id '{}'",
            crate::diag::shown(reply_to)
        );
        Box::pin(async move { Err(text) })
    }
}

/// The calls of a member that may call nobody (it is offered no tools).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCalls;

impl AgentCalls for NoCalls {
    fn call<'a>(&'a self, member: &'a str, _task: &'a str) -> BoxFuture<'a, Result<CallReply, String>> {
        let text = not_a_callee(member, &[]);
        Box::pin(async move { Err(text) })
    }
    fn await_all(&self) -> BoxFuture<'_, Vec<CallOutcome>> {
        Box::pin(async { Vec::new() })
    }
    fn take_settled(&self) -> Vec<CallOutcome> {
        Vec::new()
    }
}

/// What a task reports besides its outcome.
pub trait TaskEvents: Send + Sync {
    /// A WORKING status with this note, e.g. `continuing with 2 member answer(s)`
    /// (docs/reference/capsules.md#calls-between-members).
    fn working(&self, note: &str);
    /// A trace record (`task_continued`, docs/reference/formation.md#trace-records), fields in
    /// order.
    fn record(&self, event_type: &str, fields: &[(&str, Value)]);
    /// A piece of answer text of turn `turn` (1-based), as the provider streams it. Text of a
    /// turn that turns out not to be the last (it asks for a tool call, or member answers are
    /// still owed) is superseded by a later turn's: a listener starts over when `turn` changes.
    fn answer_text(&self, _turn: u32, _delta: &str) {}
    /// A model turn is over, answered or failed: the `inference` record (and its span when spans
    /// are exported). It names the request, never its text.
    fn model_turn(&self, _turn: &ModelTurn) {}
    /// A WebAssembly or MCP tool call is over: the `tool_call` record (and its span). It names the
    /// call, never its input or output.
    fn tool_call(&self, _call: &ToolCallRecord) {}
    /// A step's words for the operator, kept beside the trace (never in it): `step` `turn` or
    /// `tool`, `key` the turn's number or the call's id, `part` which words.
    fn step_text(&self, _step: &str, _key: &str, _part: &str, _text: &str) {}
}

/// Reports nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoEvents;

impl TaskEvents for NoEvents {
    fn working(&self, _note: &str) {}
    fn record(&self, _event_type: &str, _fields: &[(&str, Value)]) {}
}

/// One task, as the agent runs it.
#[derive(Clone)]
pub struct TaskCtx {
    pub task_id: String,
    /// The task is owned by `member:<x>`: `end-without-answer` is allowed
    /// (docs/reference/capsules.md#model-capsules).
    pub from_member: bool,
    pub calls: Arc<dyn AgentCalls>,
    pub cancel: CancelSignal,
    pub events: Arc<dyn TaskEvents>,
    /// How the task asks its caller, when its capsule may (`lifecycle.input_timeout_secs`).
    pub asker: Option<Asker>,
    /// The grant the task runs under, when it has a token budget: each turn's reservation is
    /// counted against it and every grant above it (docs/reference/formation.md#grants).
    pub budget_grant: Option<String>,
}

impl std::fmt::Debug for TaskCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskCtx")
            .field("task_id", &self.task_id)
            .field("from_member", &self.from_member)
            .field("cancel", &self.cancel)
            .finish_non_exhaustive()
    }
}
