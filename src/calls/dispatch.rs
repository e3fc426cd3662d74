//! The member calls of one task (docs/reference/capsules.md#calls-between-members,
//! docs/reference/capsules.md#component-capsules): dispatch, the record of every call the task
//! started, handing outcomes over, and abandoning what is left when the task ends.
//!
//! A call whose callee's task asks a question settles `input_required` and leaves an open
//! [`Question`] in the task's book (docs/reference/capsules.md#questions-across-members): a reply
//! to it is a new call that sends the answer as a message naming the callee's task; a question
//! still open when the task ends has its callee's task cancelled, so it does not wait out its
//! timeout for an answer that cannot come.
//!
//! [`TaskCalls`] implements the capsule host's [`MemberCalls`]. Its futures are `Send` and may run
//! on any thread; the network work of each call runs on the session's actix arbiter (see
//! `watcher`), and the two sides meet in the locked state of `book`.

use std::sync::Arc;

use tokio::sync::oneshot;

use super::book::{CallSlot, ReplyTo, TaskInner, report_ended};
use super::wire::Ended;
use super::{Dispatched, Shared};
use crate::ids::{self, IdKind};
use crate::runner::{AllowList, BoxFuture, CallLimits, CallOutcome, CallStatus, MemberCalls, NetworkPolicy};
use crate::tasks::Trust;

/// The member calls of one task. Cheap to clone; every clone is the same task.
#[derive(Debug, Clone)]
pub struct TaskCalls {
    pub(crate) inner: Arc<TaskInner>,
}

impl TaskCalls {
    /// The outgoing-HTTP policy of one of this task's tools: `allow` (the tool's own rules)
    /// for direct requests, and this task's routes to its callees' doors for virtual peer
    /// addresses, checked against `allow` too.
    pub fn tool_policy(&self, allow: &AllowList) -> NetworkPolicy {
        super::policy::task_policy(allow, &self.inner.shared.router, self.inner.trust, &self.inner.task_id)
    }

    pub(crate) fn new(
        task_id: &str,
        trust: Trust,
        parent: super::Parent,
        prepared: Option<Arc<super::prepared::TaskGrants>>,
        shared: Arc<Shared>,
    ) -> TaskCalls {
        TaskCalls {
            inner: Arc::new(TaskInner::new(task_id, trust, parent, prepared, shared)),
        }
    }

    pub fn task_id(&self) -> &str {
        &self.inner.task_id
    }

    /// docs/reference/capsules.md#calls-between-members steps 2–5: `Err(text)` is a tool error
    /// (nothing was sent); otherwise the call has an id and its watcher runs until it has an
    /// outcome or the task ends.
    pub async fn dispatch(&self, member: &str, task: &str) -> Result<Dispatched, String> {
        self.start_call(member, task, None, CallLimits::default()).await
    }

    /// [`TaskCalls::dispatch`] with the call's grant narrowed to `limits`.
    pub async fn dispatch_within(&self, member: &str, task: &str, limits: CallLimits) -> Result<Dispatched, String> {
        self.start_call(member, task, None, limits).await
    }

    /// A reply to the question call `reply_to` to `member` ended with
    /// (docs/reference/capsules.md#questions-across-members): `answer` goes to the callee's
    /// waiting task as a message naming it, and the reply is a call of its own, followed like
    /// any. `Err(text)` is a tool error (nothing was sent): no open question under that id, or
    /// it was another member's.
    pub async fn reply(&self, member: &str, reply_to: &str, answer: &str) -> Result<Dispatched, String> {
        if answer.trim().is_empty() {
            return Err(format!(
                "the reply to call {} is empty: write the answer to {member}'s question",
                crate::diag::shown(reply_to)
            ));
        }
        self.start_call(member, answer, Some(reply_to), CallLimits::default())
            .await
    }

    /// Who asked the question call `call_id` ended with, innermost first, while it is open.
    pub fn question_of(&self, call_id: &str) -> Option<Vec<String>> {
        let book = self.inner.lock();
        book.questions
            .iter()
            .find(|q| q.call_id == call_id)
            .map(|q| q.asked_by.clone())
    }

    /// Drops the open question of call `call_id`, cancelling the callee's task that waits on
    /// it; `false` when no question is open under that id.
    pub fn drop_question(&self, call_id: &str) -> bool {
        let q = TaskInner::take_question(&mut self.inner.lock(), call_id);
        match q {
            Some(q) => {
                self.inner.cancel_callee(&q.call_id, &q.member, &q.member_task_id);
                true
            }
            None => false,
        }
    }

    async fn start_call(
        &self,
        member: &str,
        task: &str,
        reply_to: Option<&str>,
        limits: CallLimits,
    ) -> Result<Dispatched, String> {
        let inner = &self.inner;
        let callees = &inner.shared.callees;
        // Step 2.
        if !callees.iter().any(|c| c == member) {
            return Err(crate::runner::not_a_callee(member, callees));
        }
        // The call's grant, narrowed by the launcher from this task's; a refusal is the call's.
        let grant = inner
            .shared
            .grant_for(&inner.parent, &inner.task_id, member, limits, inner.prepared.as_deref())?;
        // Steps 3 and 4, under one lock so two dispatches cannot both claim the member (nor two
        // replies the one question).
        let call_id = ids::mint(IdKind::Call);
        let slot = {
            let mut book = inner.lock();
            if book.ended {
                return Err("there is no task in scope for this call: the task has already ended".into());
            }
            let reply = match reply_to {
                None => None,
                Some(id) => match book.questions.iter().find(|q| q.call_id == id) {
                    None => {
                        return Err(format!(
                            "no call of this task waits with a question under the id '{}': reply_to names                              the call id of a member's question that is still open",
                            crate::diag::shown(id)
                        ));
                    }
                    Some(q) if q.member != member => {
                        return Err(format!(
                            "call {} is to '{}', not to '{member}': a reply goes to the member that asked",
                            q.call_id, q.member
                        ));
                    }
                    Some(q) => Some(ReplyTo {
                        call_id: q.call_id.clone(),
                        member_task_id: q.member_task_id.clone(),
                    }),
                },
            };
            if let Some(held) = book.calls.iter().find(|c| c.member == member && !c.lock().returned) {
                return Err(format!(
                    "call {} to '{member}' has not been handed back yet (it is still running, or \
                     its answer is waiting); end your turn now and collect every answer before \
                     calling '{member}' again",
                    held.call_id
                ));
            }
            let span = crate::otel::call_span(&inner.task_id, &call_id, member);
            let slot = Arc::new(CallSlot::new(&call_id, member, span, reply, grant));
            if let Some(r) = &slot.reply_to {
                TaskInner::take_question(&mut book, &r.call_id);
            }
            book.calls.push(Arc::clone(&slot));
            slot
        };
        // Step 5, on the arbiter that runs the session's HTTP client.
        let (tx, rx) = oneshot::channel();
        let spawned = match &inner.shared.arbiter {
            Some(arbiter) => {
                let (inner, slot, task) = (Arc::clone(inner), Arc::clone(&slot), task.to_string());
                arbiter.spawn_fn(move || {
                    actix_rt::spawn(super::watcher::run_call(inner, slot, task, tx));
                })
            }
            None => false,
        };
        let no_machinery = || {
            Ended::new(
                CallStatus::Failed,
                "the runtime's call machinery is not running, so the call could not be sent",
            )
        };
        if !spawned {
            inner.settle(&slot, no_machinery());
            return Ok(report_ended(&slot));
        }
        match rx.await {
            Ok(d) => Ok(d),
            // The watcher was dropped before reporting (its arbiter stopped).
            Err(_) => {
                inner.settle(&slot, no_machinery());
                Ok(report_ended(&slot))
            }
        }
    }

    /// Waits until every call not handed over yet has an outcome, then hands them all over (in
    /// start order) and writes their `member_call` records.
    pub async fn await_all(&self) -> Vec<CallOutcome> {
        let mut rx = self.inner.changed.subscribe();
        loop {
            rx.borrow_and_update();
            if let Some(out) = self.inner.take_when_all_settled() {
                return out;
            }
            if rx.changed().await.is_err() {
                return Vec::new();
            }
        }
    }

    /// Waits for the next call not handed over yet to have an outcome, and hands it over (in
    /// the order they settle, start order among those settled at once); `None` when every call
    /// was handed over.
    pub async fn await_next(&self) -> Option<CallOutcome> {
        let mut rx = self.inner.changed.subscribe();
        loop {
            rx.borrow_and_update();
            let calls = self.inner.lock().calls.clone();
            let open: Vec<&Arc<CallSlot>> = calls.iter().filter(|c| !c.lock().returned).collect();
            if open.is_empty() {
                return None;
            }
            if let Some(o) = open.iter().find_map(|c| self.inner.hand_over(c)) {
                return Some(o);
            }
            if rx.changed().await.is_err() {
                return None;
            }
        }
    }

    /// Hands over the calls that have an outcome now, without waiting (e.g. a call that ended at
    /// dispatch, whose tool result already told the model).
    pub fn take_settled(&self) -> Vec<CallOutcome> {
        let calls = self.inner.lock().calls.clone();
        calls.iter().filter_map(|c| self.inner.hand_over(c)).collect()
    }

    /// Calls started and not yet settled.
    pub fn outstanding(&self) -> usize {
        self.inner
            .lock()
            .calls
            .iter()
            .filter(|c| c.lock().settled.is_none())
            .count()
    }

    /// Ends the task's calls (see [`super::Calls::finish_task`]).
    pub fn finish(&self) -> Vec<CallOutcome> {
        self.inner.finish()
    }
}

impl MemberCalls for TaskCalls {
    fn start<'a>(&'a self, member: &'a str, task: &'a str) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(async move { self.dispatch(member, task).await.map(|d| d.call_id) })
    }

    /// The old interface cannot carry a question: an `input_required` call is handed over
    /// `failed`, with the question, and its callee's task is cancelled, so a component written
    /// before questions never leaves a callee waiting (docs/reference/capsules.md#questions-across-members).
    fn await_all(&self) -> BoxFuture<'_, Vec<CallOutcome>> {
        Box::pin(async move {
            let mut out = TaskCalls::await_all(self).await;
            for o in &mut out {
                if o.status == CallStatus::InputRequired {
                    self.drop_question(&o.call_id);
                    *o = unanswerable(o.clone());
                }
            }
            out
        })
    }

    fn await_next(&self) -> BoxFuture<'_, Option<CallOutcome>> {
        Box::pin(TaskCalls::await_next(self))
    }

    fn reply<'a>(&'a self, call_id: &'a str, answer: &'a str) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(async move {
            let member = self
                .inner
                .lock()
                .questions
                .iter()
                .find(|q| q.call_id == call_id)
                .map(|q| q.member.clone());
            let Some(member) = member else {
                return Err(format!(
                    "no call of this task waits with a question under the id '{}'",
                    crate::diag::shown(call_id)
                ));
            };
            self.reply(&member, call_id, answer).await.map(|d| d.call_id)
        })
    }
}

/// An `input_required` outcome as `await-all` reports it: `failed`, the question kept.
fn unanswerable(o: CallOutcome) -> CallOutcome {
    CallOutcome {
        status: CallStatus::Failed,
        output: format!(
            "{} asked a question that await-all cannot answer, so its task was cancelled (use await-next and \
             reply): {}",
            o.member, o.output
        ),
        asked_by: Vec::new(),
        ..o
    }
}
