//! The record of one task's member calls: each call's slot (its callee task, outcome and
//! whether it was handed over), the task's open questions, settling and tracing each call, and
//! abandoning what is left when the task ends. `dispatch` starts calls into it and `watcher`
//! settles them; both meet here, under its locks.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use serde_json::{Value, json};
use tokio::sync::watch;

use super::output;
use super::wire::Ended;
use super::{DispatchKind, Dispatched, Shared, busy_text};
use crate::runner::{CallOutcome, CallStatus};
use crate::tasks::{NoAnswerBelow, Trust};
use crate::wire::jsonrpc::Method;

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
    /// What the callee's subtree spent, as its door reported it (docs/reference/formation.md#cost-roll-up).
    pub subtree_cost: Option<crate::cost::Cost>,
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
pub(super) struct SlotState {
    member_task_id: Option<String>,
    /// The callee's real door URL, once resolved: what redaction replaces.
    door_url: Option<String>,
    pub(super) settled: Option<Settled>,
    /// Handed to the component (or model), or written off when the task ended.
    pub(super) returned: bool,
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
    /// The call's grant, sent as `x-murmur-grant` (docs/reference/formation.md#grants).
    pub grant: Option<String>,
    /// A reply: the call sends its text as the answer to this question instead of a new task.
    pub reply_to: Option<ReplyTo>,
}

impl CallSlot {
    /// A call to `member` starting now, traced under `span` when spans are exported.
    pub fn new(
        call_id: &str,
        member: &str,
        span: Option<crate::otel::Outgoing>,
        reply_to: Option<ReplyTo>,
        grant: Option<String>,
    ) -> CallSlot {
        CallSlot {
            call_id: call_id.to_string(),
            member: member.to_string(),
            started: Instant::now(),
            state: Mutex::new(SlotState::default()),
            give_up: watch::channel(false).0,
            traceparent: span.as_ref().map(|s| s.traceparent().to_string()),
            span: Mutex::new(span),
            grant,
            reply_to,
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, SlotState> {
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
pub(super) struct Book {
    /// The task ended: no call may start any more.
    pub(super) ended: bool,
    pub(super) calls: Vec<Arc<CallSlot>>,
    /// Callees' questions not answered yet, oldest first, at most [`MAX_OPEN_QUESTIONS`].
    pub(super) questions: Vec<Question>,
}

/// The shared state of one task's calls.
pub(crate) struct TaskInner {
    pub task_id: String,
    pub trust: Trust,
    /// The grant this task's calls are narrowed from.
    pub parent: super::Parent,
    /// The grants asked for ahead of this task's calls.
    pub prepared: Option<Arc<super::prepared::TaskGrants>>,
    pub shared: Arc<Shared>,
    book: Mutex<Book>,
    /// Bumped whenever a call settles, so `await_all` re-checks.
    pub(super) changed: watch::Sender<u64>,
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
    pub fn new(
        task_id: &str,
        trust: Trust,
        parent: super::Parent,
        prepared: Option<Arc<super::prepared::TaskGrants>>,
        shared: Arc<Shared>,
    ) -> TaskInner {
        TaskInner {
            task_id: task_id.to_string(),
            trust,
            parent,
            prepared,
            shared,
            book: Mutex::new(Book::default()),
            changed: watch::channel(0).0,
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Book> {
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
                subtree_cost: ended.subtree_cost,
            };
            s.settled = Some(settled.clone());
            settled
        };
        if let Some(member_task_id) = cancel {
            self.cancel_callee(&slot.call_id, &slot.member, &member_task_id);
        }
        // The callee may be called again once this call is handed back: its next grant.
        if let Some(prepared) = &self.prepared {
            prepared.replenish(&slot.member);
        }
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
        Some(settled)
    }

    /// Sends CancelTask `<call id>-cancel` for the callee's task `member_task_id`, on the
    /// session's arbiter, without waiting: a question nobody will answer must not hold the
    /// callee until its timeout. Best effort: a door gone already has nothing left to cancel.
    pub(super) fn cancel_callee(&self, call_id: &str, member: &str, member_task_id: &str) {
        let Some(arbiter) = self.shared.arbiter.as_ref().filter(|_| cancels_go_out()) else {
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
                let body = super::wire::task_method_body(Method::CancelTask, &format!("{call_id}-cancel"), &task_id);
                let _ = client.post(body, timeout).await;
            });
        });
    }

    /// Takes the open question of call `call_id` out of the book (it is being answered or
    /// dropped).
    pub(super) fn take_question(book: &mut Book, call_id: &str) -> Option<Question> {
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
            span.end_with_cost(settled.status.as_str(), settled.subtree_cost.as_ref());
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
                (
                    "subtree_cost",
                    settled.subtree_cost.map_or(Value::Null, |c| c.to_record()),
                ),
            ],
        );
    }

    /// Hands over every settled call not handed over yet, in start order, and traces each.
    /// `None` while some call not handed over has no outcome yet.
    pub(super) fn take_when_all_settled(&self) -> Option<Vec<CallOutcome>> {
        let book = self.lock();
        let open: Vec<&Arc<CallSlot>> = book.calls.iter().filter(|c| !c.lock().returned).collect();
        if open.iter().any(|c| c.lock().settled.is_none()) {
            return None;
        }
        Some(open.into_iter().filter_map(|c| self.hand_over(c)).collect())
    }

    /// Marks `slot` handed over and traces it; `None` when it has no outcome or was handed over.
    pub(super) fn hand_over(&self, slot: &CallSlot) -> Option<CallOutcome> {
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

    /// Ends the task's calls: each without an outcome ends `abandoned` (its watcher stops, and the
    /// callee's task, running or queued, is cancelled with CancelTask `<call id>-cancel`; it
    /// cancels its own calls in turn as it ends), and every call not handed over is traced
    /// `delivered: false`. A callee whose question is still open has its task cancelled too:
    /// nobody is left to answer.
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
            let cut = self.settle(slot, abandoned).is_some();
            slot.give_up.send_replace(true);
            // Nobody waits for the callee's task any more: it is cancelled, running or still
            // queued, and its own calls with it when it ends (docs/reference/capsules.md#cascading-cancellation).
            if cut && let Some(member_task_id) = slot.member_task_id() {
                self.cancel_callee(&slot.call_id, &slot.member, &member_task_id);
            }
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

/// The member's formation has ended: its callees hear that end through their own lifelines, so
/// no CancelTask goes to them (their tasks end `canceled` by the formation's end, as
/// docs/reference/formation.md#how-a-member-ends says, not by a caller's cancel racing it).
static FORMATION_OVER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Marks this process's formation as ended (its lifeline closed): see [`FORMATION_OVER`].
pub fn formation_over() {
    FORMATION_OVER.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Whether a callee's task is still this member's to cancel.
pub(super) fn cancels_go_out() -> bool {
    !FORMATION_OVER.load(std::sync::atomic::Ordering::SeqCst)
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
