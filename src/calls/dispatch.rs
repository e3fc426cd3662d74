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
//! `watcher`), and the two sides meet in this module's locked state.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use serde_json::{Value, json};
use tokio::sync::{oneshot, watch};

use super::output;
use super::wire::Ended;
use super::{DispatchKind, Dispatched, Shared, busy_text};
use crate::ids::{self, IdKind};
use crate::runner::{AllowList, BoxFuture, CallOutcome, CallStatus, MemberCalls, NetworkPolicy};
use crate::tasks::{NoAnswerBelow, Trust};

/// A call's final outcome, as shown to the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settled {
    pub status: CallStatus,
    pub output: String,
    pub truncated: bool,
    pub no_answer_below: Vec<NoAnswerBelow>,
    pub duration_ms: u64,
    /// Who asked, innermost first, for an `input_required` outcome.
    pub asked_by: Vec<String>,
}

/// Open questions one task may hold at once [ours]: each is a callee task waiting for an answer,
/// and a caller that never answers must not pile them up without bound.
pub const MAX_OPEN_QUESTIONS: usize = 16;

/// A callee's question this task may still answer: call `call_id` to `member` settled
/// `input_required` while `member_task_id` waits for the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Question {
    pub call_id: String,
    pub member: String,
    pub member_task_id: String,
    pub asked_by: Vec<String>,
}

/// What a reply call answers: the question of call `call_id`, asked in the callee's task
/// `member_task_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReplyTo {
    pub call_id: String,
    pub member_task_id: String,
}

#[derive(Debug, Default)]
struct SlotState {
    member_task_id: Option<String>,
    /// The callee's real door URL, once resolved: what redaction replaces.
    door_url: Option<String>,
    settled: Option<Settled>,
    /// Handed to the component (or model), or written off when the task ended.
    returned: bool,
}

/// One call, shared by the task's state and its watcher.
#[derive(Debug)]
pub(crate) struct CallSlot {
    pub call_id: String,
    pub member: String,
    /// The tool call: the bound and `duration_ms` count from here.
    pub started: Instant,
    state: Mutex<SlotState>,
    /// Fires when the caller gives up on the call (its task ended first).
    give_up: watch::Sender<bool>,
    /// The call's span when spans are exported: its `traceparent` goes on the call's requests,
    /// and it ends with the call's `member_call` record.
    span: Mutex<Option<crate::otel::Outgoing>>,
    pub traceparent: Option<String>,
    /// A reply: the call sends its text as the answer to this question instead of a new task.
    pub reply_to: Option<ReplyTo>,
}

impl CallSlot {
    fn lock(&self) -> MutexGuard<'_, SlotState> {
        crate::sync::lock(&self.state)
    }

    pub fn set_member_task(&self, task_id: &str) {
        self.lock().member_task_id = Some(task_id.to_string());
    }

    pub fn set_door_url(&self, url: &str) {
        self.lock().door_url = Some(url.to_string());
    }

    pub fn member_task_id(&self) -> Option<String> {
        self.lock().member_task_id.clone()
    }

    /// Whether the caller gave up on this call.
    pub fn given_up(&self) -> bool {
        *self.give_up.borrow()
    }

    /// Resolves once the caller gives up on this call.
    pub async fn gave_up(&self) {
        let mut rx = self.give_up.subscribe();
        // The sender lives as long as the slot, so `wait_for` only ends when it fired.
        let _ = rx.wait_for(|v| *v).await;
    }
}

#[derive(Debug, Default)]
struct Book {
    /// The task ended: no call may start any more.
    ended: bool,
    calls: Vec<Arc<CallSlot>>,
    /// Callees' questions not answered yet, oldest first, at most [`MAX_OPEN_QUESTIONS`].
    questions: Vec<Question>,
}

/// The shared state of one task's calls.
pub(crate) struct TaskInner {
    pub task_id: String,
    pub trust: Trust,
    pub shared: Arc<Shared>,
    book: Mutex<Book>,
    /// Bumped whenever a call settles, so `await_all` re-checks.
    changed: watch::Sender<u64>,
}

impl std::fmt::Debug for TaskInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskInner")
            .field("task_id", &self.task_id)
            .field("trust", &self.trust)
            .field("book", &self.book)
            .finish_non_exhaustive()
    }
}

impl TaskInner {
    fn lock(&self) -> MutexGuard<'_, Book> {
        crate::sync::lock(&self.book)
    }

    /// Records how `slot` ended, unless it already has an outcome (e.g. it was abandoned).
    /// The output is redacted and capped here, once. Returns the settled outcome when this call
    /// settled it. An `input_required` outcome opens a [`Question`]; past
    /// [`MAX_OPEN_QUESTIONS`] the call fails instead and the callee's task is cancelled.
    pub fn settle(&self, slot: &CallSlot, mut ended: Ended) -> Option<Settled> {
        let mut cancel = None;
        let settled = {
            // The book before the slot, as everywhere both are held.
            let mut book = self.lock();
            let mut s = slot.lock();
            if s.settled.is_some() {
                return None;
            }
            if ended.status == CallStatus::InputRequired {
                match s.member_task_id.clone() {
                    // The task ended while the question came: nobody is left to answer it.
                    Some(member_task_id) if book.ended => cancel = Some(member_task_id),
                    Some(member_task_id) if book.questions.len() < MAX_OPEN_QUESTIONS => {
                        book.questions.push(Question {
                            call_id: slot.call_id.clone(),
                            member: slot.member.clone(),
                            member_task_id,
                            asked_by: ended.asked_by.clone(),
                        });
                    }
                    held => {
                        cancel = held;
                        ended = Ended::new(
                            CallStatus::Failed,
                            format!(
                                "{} asked a question while this task already held {MAX_OPEN_QUESTIONS} unanswered                                  questions, so its task was cancelled; answer or drop the others first",
                                slot.member
                            ),
                        );
                    }
                }
            }
            let (output, truncated) = output::shown(&ended.output, &slot.member, s.door_url.as_deref());
            let settled = Settled {
                status: ended.status,
                output,
                truncated,
                no_answer_below: ended.no_answer_below,
                duration_ms: millis_since(slot.started),
                asked_by: ended.asked_by,
            };
            s.settled = Some(settled.clone());
            settled
        };
        if let Some(member_task_id) = cancel {
            self.cancel_callee(&slot.call_id, &slot.member, &member_task_id);
        }
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
        Some(settled)
    }

    /// Sends CancelTask `<call id>-cancel` for the callee's task `member_task_id`, on the
    /// session's arbiter, without waiting: a question nobody will answer must not hold the
    /// callee until its timeout. Best effort: a door gone already has nothing left to cancel.
    fn cancel_callee(&self, call_id: &str, member: &str, member_task_id: &str) {
        let Some(arbiter) = &self.shared.arbiter else {
            return;
        };
        let (router, trust, timeout) = (
            self.shared.router.clone(),
            self.trust,
            self.shared.timing.answer_request,
        );
        let (call_id, member, task_id) = (call_id.to_string(), member.to_string(), member_task_id.to_string());
        let in_flight = CancelInFlight::begin();
        arbiter.spawn_fn(move || {
            actix_rt::spawn(async move {
                let _in_flight = in_flight;
                let super::router::Resolution::Route(route) = super::router::resolve(&router, &member).await else {
                    return;
                };
                let client = super::client::DoorClient::new(route, trust, timeout);
                let body = super::wire::task_method_body("CancelTask", &format!("{call_id}-cancel"), &task_id);
                let _ = client.post(body, timeout).await;
            });
        });
    }

    /// Takes the open question of call `call_id` out of the book (it is being answered or
    /// dropped).
    fn take_question(book: &mut Book, call_id: &str) -> Option<Question> {
        let i = book.questions.iter().position(|q| q.call_id == call_id)?;
        Some(book.questions.remove(i))
    }

    /// `member_call_start` (docs/reference/formation.md#trace-records); a reply names the call
    /// whose question it answers (`reply_to`).
    pub fn trace_start(&self, slot: &CallSlot, member_task_id: &str) {
        let mut fields = vec![
            ("task_id", json!(self.task_id)),
            ("call_id", json!(slot.call_id)),
            ("member", json!(slot.member)),
            ("member_task_id", json!(member_task_id)),
        ];
        if let Some(r) = &slot.reply_to {
            fields.push(("reply_to", json!(r.call_id)));
        }
        self.shared.trace.record("member_call_start", &fields);
    }

    /// `member_call_busy` (docs/reference/formation.md#trace-records) for offer `offer`.
    pub fn trace_busy(&self, slot: &CallSlot, offer: u32) {
        self.shared.trace.record(
            "member_call_busy",
            &[
                ("task_id", json!(self.task_id)),
                ("call_id", json!(slot.call_id)),
                ("member", json!(slot.member)),
                ("offer", json!(offer)),
                ("waited_ms", json!(millis_since(slot.started))),
                ("message", json!(busy_text(&slot.member))),
            ],
        );
    }

    /// `member_call` (docs/reference/formation.md#trace-records): written once per call, when its
    /// outcome is handed over (`delivered: true`) or written off as the task ends (`delivered:
    /// false`).
    fn trace_end(&self, slot: &CallSlot, settled: &Settled, delivered: bool) {
        if let Some(span) = crate::sync::lock(&slot.span).take() {
            span.end(settled.status.as_str());
        }
        let below: Vec<Value> = settled
            .no_answer_below
            .iter()
            .map(|b| json!({"member": b.member, "status": b.status}))
            .collect();
        self.shared.trace.record(
            "member_call",
            &[
                ("task_id", json!(self.task_id)),
                ("call_id", json!(slot.call_id)),
                ("member", json!(slot.member)),
                ("member_task_id", json!(slot.member_task_id())),
                ("status", json!(settled.status.as_str())),
                ("duration_ms", json!(settled.duration_ms)),
                ("output", json!(settled.output)),
                ("truncated", json!(settled.truncated)),
                ("delivered", json!(delivered)),
                ("no_answer_below", Value::Array(below)),
            ],
        );
    }

    /// Hands over every settled call not handed over yet, in start order, and traces each.
    /// `None` while some call not handed over has no outcome yet.
    fn take_when_all_settled(&self) -> Option<Vec<CallOutcome>> {
        let book = self.lock();
        let open: Vec<&Arc<CallSlot>> = book.calls.iter().filter(|c| !c.lock().returned).collect();
        if open.iter().any(|c| c.lock().settled.is_none()) {
            return None;
        }
        Some(open.into_iter().filter_map(|c| self.hand_over(c)).collect())
    }

    /// Marks `slot` handed over and traces it; `None` when it has no outcome or was handed over.
    fn hand_over(&self, slot: &CallSlot) -> Option<CallOutcome> {
        let settled = {
            let mut s = slot.lock();
            if s.returned {
                return None;
            }
            let settled = s.settled.clone()?;
            s.returned = true;
            settled
        };
        self.trace_end(slot, &settled, true);
        Some(outcome_of(slot, settled))
    }

    /// Ends the task's calls: each without an outcome ends `abandoned` (its watcher stops, the
    /// callee is not cancelled), and every call not handed over is traced `delivered: false`.
    /// A callee whose question is still open has its task cancelled: nobody is left to answer.
    /// Returns how every call of the task ended, in start order (for `noAnswerBelow`).
    pub fn finish(&self) -> Vec<CallOutcome> {
        let (calls, questions) = {
            let mut book = self.lock();
            book.ended = true;
            (book.calls.clone(), std::mem::take(&mut book.questions))
        };
        for q in &questions {
            self.cancel_callee(&q.call_id, &q.member, &q.member_task_id);
        }
        for slot in &calls {
            let abandoned = Ended::new(
                CallStatus::Abandoned,
                format!(
                    "the calling task ended before {} answered, so the answer was not awaited",
                    slot.member
                ),
            );
            self.settle(slot, abandoned);
            slot.give_up.send_replace(true);
            let settled = {
                let mut s = slot.lock();
                if s.returned {
                    continue;
                }
                s.returned = true;
                s.settled.clone()
            };
            if let Some(settled) = settled {
                self.trace_end(slot, &settled, false);
            }
        }
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
        calls
            .iter()
            .filter_map(|slot| {
                let settled = slot.lock().settled.clone()?;
                Some(outcome_of(slot, settled))
            })
            .collect()
    }
}

fn outcome_of(slot: &CallSlot, settled: Settled) -> CallOutcome {
    CallOutcome {
        call_id: slot.call_id.clone(),
        member: slot.member.clone(),
        status: settled.status,
        output: settled.output,
        truncated: settled.truncated,
        asked_by: settled.asked_by,
    }
}

fn millis_since(t: Instant) -> u64 {
    crate::timing::millis(t.elapsed())
}

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

    pub(crate) fn new(task_id: &str, trust: Trust, shared: Arc<Shared>) -> TaskCalls {
        TaskCalls {
            inner: Arc::new(TaskInner {
                task_id: task_id.to_string(),
                trust,
                shared,
                book: Mutex::new(Book::default()),
                changed: watch::channel(0).0,
            }),
        }
    }

    pub fn task_id(&self) -> &str {
        &self.inner.task_id
    }

    /// docs/reference/capsules.md#calls-between-members steps 2–5: `Err(text)` is a tool error
    /// (nothing was sent); otherwise the call has an id and its watcher runs until it has an
    /// outcome or the task ends.
    pub async fn dispatch(&self, member: &str, task: &str) -> Result<Dispatched, String> {
        self.start_call(member, task, None).await
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
        self.start_call(member, answer, Some(reply_to)).await
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

    async fn start_call(&self, member: &str, task: &str, reply_to: Option<&str>) -> Result<Dispatched, String> {
        let inner = &self.inner;
        let callees = &inner.shared.callees;
        // Step 2.
        if !callees.iter().any(|c| c == member) {
            return Err(crate::runner::not_a_callee(member, callees));
        }
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
            let slot = Arc::new(CallSlot {
                call_id: call_id.clone(),
                member: member.to_string(),
                started: Instant::now(),
                state: Mutex::new(SlotState::default()),
                give_up: watch::channel(false).0,
                traceparent: span.as_ref().map(|s| s.traceparent().to_string()),
                span: Mutex::new(span),
                reply_to: reply,
            });
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

/// The dispatch report of a call that ended at once.
pub(crate) fn report_ended(slot: &CallSlot) -> Dispatched {
    let settled = slot.lock().settled.clone();
    let (status, output) = settled
        .map(|s| (s.status, s.output))
        .unwrap_or((CallStatus::Failed, String::new()));
    Dispatched {
        call_id: slot.call_id.clone(),
        member: slot.member.clone(),
        kind: DispatchKind::Ended { status, output },
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

/// CancelTask requests a task's end sent to its callees and not answered yet, in this process.
static CANCELS_IN_FLIGHT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One CancelTask in flight, counted until it is dropped (answered, failed or given up).
struct CancelInFlight;

impl CancelInFlight {
    fn begin() -> CancelInFlight {
        CANCELS_IN_FLIGHT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        CancelInFlight
    }
}

impl Drop for CancelInFlight {
    fn drop(&mut self) {
        CANCELS_IN_FLIGHT.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Waits, at most `limit`, until every CancelTask this process sent has been answered: a session
/// that ends right after its task (the entry of a `--task` formation) would otherwise close, and
/// its formation wind down, before a callee whose question it left open heard the cancel.
pub async fn cancels_sent(limit: std::time::Duration) {
    let until = std::time::Instant::now() + limit;
    while CANCELS_IN_FLIGHT.load(std::sync::atomic::Ordering::SeqCst) > 0 && std::time::Instant::now() < until {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}
