//! The agent's view of one task's real member calls ([`crate::calls::TaskCalls`]): dispatch
//! rendered as the tool result, and the waiting for answers, of
//! docs/reference/capsules.md#calls-between-members.

use std::sync::Arc;
use std::time::Duration;

use super::agent::{AgentCalls, CallReply};
use crate::calls::{DispatchKind, TaskCalls, tool_result};
use crate::runner::{AllowList, BoxFuture, CallOutcome, HttpPolicy};

/// A task's member calls for the agent loop.
#[derive(Debug, Clone)]
pub struct SessionCalls {
    task: TaskCalls,
    /// The call bound, named in the busy note.
    bound: Duration,
    /// The task was sent by a member: a failed call's note points at `end-without-answer`.
    from_member: bool,
}

impl SessionCalls {
    pub fn new(task: TaskCalls, bound: Duration, from_member: bool) -> SessionCalls {
        SessionCalls {
            task,
            bound,
            from_member,
        }
    }
}

impl SessionCalls {
    fn reply_of(&self, d: crate::calls::Dispatched) -> CallReply {
        let pending = !matches!(d.kind, DispatchKind::Ended { .. });
        let r = tool_result(&d, self.bound, self.from_member);
        CallReply {
            call_id: d.call_id,
            pending,
            failed: r.failed,
            text: r.text,
        }
    }
}

impl AgentCalls for SessionCalls {
    fn call<'a>(&'a self, member: &'a str, task: &'a str) -> BoxFuture<'a, Result<CallReply, String>> {
        Box::pin(async move { Ok(self.reply_of(self.task.dispatch(member, task).await?)) })
    }

    fn call_within<'a>(
        &'a self,
        member: &'a str,
        task: &'a str,
        limits: crate::runner::CallLimits,
    ) -> BoxFuture<'a, Result<CallReply, String>> {
        Box::pin(async move { Ok(self.reply_of(self.task.dispatch_within(member, task, limits).await?)) })
    }

    fn reply<'a>(
        &'a self,
        member: &'a str,
        reply_to: &'a str,
        answer: &'a str,
    ) -> BoxFuture<'a, Result<CallReply, String>> {
        Box::pin(async move { Ok(self.reply_of(self.task.reply(member, reply_to, answer).await?)) })
    }

    fn question_of(&self, call_id: &str) -> Option<Vec<String>> {
        self.task.question_of(call_id)
    }

    fn await_all(&self) -> BoxFuture<'_, Vec<CallOutcome>> {
        Box::pin(self.task.await_all())
    }

    fn take_settled(&self) -> Vec<CallOutcome> {
        self.task.take_settled()
    }

    fn tool_http(&self, allow: &AllowList) -> Arc<dyn HttpPolicy> {
        Arc::new(self.task.tool_policy(allow))
    }
}
