//! The task board: every Task of this session, admission (docs/reference/manifest.md#keys), the
//! FIFO the executor drains, per-task cancellation, and change notification for waiters and SSE
//! streams.
//!
//! One `Mutex` guards the state; nothing awaits while holding it. A board-wide `watch` counter is
//! bumped on every change, so waiters re-check state and can never miss an update. Observer
//! events are delivered in mutation order, after the state lock is released, except those of a
//! mutation that ends a task: they are delivered before, so an end is recorded before it is seen.
//!
//! A board never grows for the session's life: at the end of every mutation it files the tasks
//! that ended in `retention`'s books and forgets those the books give up, and a refused task never
//! holds its offer's text. Live tasks, and ended ones a reply or stream still owes a caller
//! ([`Pinned`]), are never forgotten.

use crate::sync::lock;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use chrono::{DateTime, SubsecRound, Utc};
use tokio::sync::watch;

use super::retention::{Books, Retention};
use super::stream_log::StreamLog;
use super::types::{
    AnswerChunk, AnswerRefusal, Asked, BoardEvent, CONTEXT_BYTES, CONTEXT_TURNS, CancelResult, Clock, ContextTurn,
    HISTORY_MESSAGES, HistoryMessage, HistoryText, InputOutcome, ListPage, ListQuery, NewTask, Role, TaskSnapshot,
    owner_sees,
};
use crate::ids::{self, IdKind};
use crate::manifest::Acceptance;
use crate::task::{NoAnswerBelow, Origin, REJECT_BUSY, REJECT_CLOSING, TaskOutcome, TaskState, Trust};

/// Status text of a task whose executor let go of it without an outcome [ours].
const LOST: &str = "the task ended without an outcome";

type Observer = Box<dyn Fn(&BoardEvent) + Send + Sync>;

/// Resolves when the task it belongs to is cancelled (CancelTask, `cancel_all_live`, `close`).
#[derive(Debug, Clone)]
pub struct Cancel(watch::Receiver<bool>);

impl Cancel {
    pub fn is_cancelled(&self) -> bool {
        *self.0.borrow()
    }

    /// Completes once cancellation is requested (also when the board is gone).
    pub async fn cancelled(&self) {
        let mut rx = self.0.clone();
        let _ = rx.wait_for(|c| *c).await;
    }
}

/// One task handed to the executor. Dropping it without `Board::finish` fails the task and frees
/// the running slot, so an executor fault never wedges the queue.
#[derive(Debug)]
pub struct Work {
    pub task_id: String,
    pub context_id: String,
    pub text: String,
    /// The context's earlier exchanges this task's owner may see, oldest first, within
    /// [`CONTEXT_TURNS`] and [`CONTEXT_BYTES`].
    pub context: Vec<ContextTurn>,
    pub trust: Trust,
    pub origin: Origin,
    pub owner: Option<String>,
    /// The caller's W3C `traceparent` (well-formed, as the door kept it): where a task forwarded
    /// elsewhere continues the caller's trace.
    pub traceparent: Option<String>,
    pub cancel: Cancel,
    _slot: Slot,
}

#[derive(Debug)]
struct Slot {
    board: Arc<Board>,
    task_id: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.board.release(&self.task_id);
    }
}

struct Entry {
    snap: TaskSnapshot,
    /// The offer, until the executor takes it; never kept for a refused task. The history's
    /// first message shares it.
    text: Arc<str>,
    /// The caller's `traceparent`, until the executor takes it.
    traceparent: Option<String>,
    /// Change number at creation: orders a context's exchanges.
    created: u64,
    cancel: watch::Sender<bool>,
    /// Open replies and streams that still owe this task's end to a caller.
    pins: u32,
    /// The bytes charged to the pinned total while `pins > 0`.
    pin_charge: usize,
    /// The task's end was shown to a caller (a reply, a stream's last event or GetTask).
    end_shown: bool,
    /// The answer text a model capsule streams while the task runs; gone once it ends.
    streamed: Option<Streamed>,
    /// Where the answer to the task's open question goes, while it is `INPUT_REQUIRED`. Taken by
    /// the one answer that wins; dropped when the task ends, which tells the asker.
    question: Option<tokio::sync::oneshot::Sender<String>>,
    /// When the open question was asked.
    asked_at: Option<std::time::Instant>,
    /// The events the task's streams sent (docs/a2a.md, "Resuming a stream"); the door locks it
    /// before it reads the board, never the other way round.
    log: Arc<Mutex<StreamLog>>,
    /// What `log` holds, for the books.
    log_bytes: Arc<AtomicUsize>,
}

/// A running task's streamed answer text: that of one turn (a later turn's starts over).
#[derive(Debug)]
struct Streamed {
    turn: u32,
    text: String,
}

struct State {
    tasks: HashMap<String, Entry>,
    /// Every task by its last change number: ListTasks walks it newest first.
    order: BTreeMap<u64, String>,
    /// What ended and pinned tasks hold, and which to forget.
    books: Books,
    queue: VecDeque<String>,
    running: Option<String>,
    /// `single`: the slot has been used once.
    slot_used: bool,
    closing: bool,
    seq: u64,
}

/// What an ended task holds, roughly, in bytes: the entry, its id three times (map key, snapshot,
/// ListTasks order) and every string it keeps.
fn footprint(e: &Entry) -> usize {
    let s = &e.snap;
    let opt = |o: &Option<String>| o.as_ref().map_or(0, String::len);
    let below: usize = s
        .no_answer_below
        .iter()
        .flatten()
        .map(|b| std::mem::size_of::<NoAnswerBelow>() + b.member.len() + b.status.len())
        .sum();
    std::mem::size_of::<Entry>()
        + 3 * s.id.len()
        + s.context_id.len()
        + opt(&s.status_text)
        + opt(&s.status_message_id)
        + opt(&s.answer)
        + opt(&s.owner)
        + below
        + e.text.len()
        + e.log_bytes.load(Ordering::Relaxed)
        + s.history
            .iter()
            .map(|m| {
                std::mem::size_of::<HistoryMessage>()
                    + m.message_id.len()
                    + match &m.text {
                        HistoryText::Own(t) => t.len(),
                        HistoryText::Answer => 0,
                    }
            })
            .sum::<usize>()
}

impl State {
    /// Files the tasks `events` ended for forgetting, then forgets what `keep` does not cover.
    fn settle(&mut self, events: &[BoardEvent], keep: Retention) {
        for ev in events {
            if let BoardEvent::Ended { task_id, state, .. } = ev
                && let Some(e) = self.tasks.get_mut(task_id)
            {
                // Nothing runs an ended task; its offer lives on only in the history.
                e.text = Arc::from("");
                let bytes = footprint(e);
                self.books.file(task_id.clone(), bytes, *state == TaskState::Rejected);
            }
        }
        self.evict(keep);
    }

    /// Forgets the ended tasks the books give up to `keep`. A pinned task, or one whose executor
    /// still holds the running slot, is passed over.
    fn evict(&mut self, keep: Retention) {
        let (tasks, running) = (&self.tasks, &self.running);
        let held = |id: &str| running.as_deref() == Some(id) || tasks.get(id).is_some_and(|e| e.pins > 0);
        for id in self.books.evict(keep, held) {
            if let Some(e) = self.tasks.remove(&id) {
                self.order.remove(&e.snap.changed);
            }
        }
    }
}

/// Moves a task to change number `seq` in the ListTasks order.
fn reorder(order: &mut BTreeMap<u64, String>, snap: &mut TaskSnapshot, seq: u64) {
    let id = order.remove(&snap.changed).unwrap_or_else(|| snap.id.clone());
    snap.changed = seq;
    order.insert(seq, id);
}

/// Keeps a task on the board after its end while a reply or stream still owes that end to a
/// caller; dropping it lets the board forget the task again.
pub struct Pinned {
    board: Arc<Board>,
    task_id: String,
}

impl std::fmt::Debug for Pinned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Pinned({})", self.task_id)
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        self.board.unpin(&self.task_id);
    }
}

/// The session's tasks. Shared as `Arc<Board>` between the door and the executor.
pub struct Board {
    state: Mutex<State>,
    /// Serialises observer delivery so events arrive in mutation order.
    observer: Mutex<Option<Observer>>,
    changes: watch::Sender<u64>,
    /// Woken each time a task's end is shown to a caller.
    shown: tokio::sync::Notify,
    acceptance: Acceptance,
    queue_depth: u32,
    clock: Clock,
    retention: Retention,
}

impl std::fmt::Debug for Board {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.lock();
        write!(
            f,
            "Board {{ tasks: {}, queued: {}, running: {:?} }}",
            st.tasks.len(),
            st.queue.len(),
            st.running
        )
    }
}

/// A fresh `messageId` for an agent status message. `ids` has no message kind (call messages are
/// `msg_<call id>`), so this borrows a task id's UUIDv7 digits under the `msg_` prefix.
fn mint_message_id() -> String {
    let t = ids::mint(IdKind::Task);
    format!("msg_{}", &t[IdKind::Task.prefix().len()..])
}

impl Board {
    pub fn new(acceptance: Acceptance, queue_depth: u32) -> Arc<Board> {
        Board::with_clock(acceptance, queue_depth, Arc::new(Utc::now))
    }

    pub fn with_clock(acceptance: Acceptance, queue_depth: u32, clock: Clock) -> Arc<Board> {
        Board::with_retention(acceptance, queue_depth, clock, Retention::DEFAULT)
    }

    /// As [`Board::with_clock`], keeping ended tasks within `retention`.
    pub fn with_retention(acceptance: Acceptance, queue_depth: u32, clock: Clock, retention: Retention) -> Arc<Board> {
        Arc::new(Board {
            state: Mutex::new(State {
                tasks: HashMap::new(),
                order: BTreeMap::new(),
                books: Books::default(),
                queue: VecDeque::new(),
                running: None,
                slot_used: false,
                closing: false,
                seq: 0,
            }),
            observer: Mutex::new(None),
            changes: watch::channel(0).0,
            shown: tokio::sync::Notify::new(),
            acceptance,
            queue_depth,
            clock,
            retention,
        })
    }

    /// The door showed a caller `task_id` in a terminal state. A session that ends after its
    /// task waits for this ([`Board::await_ends_shown`]) so its caller gets the answer.
    pub fn mark_end_shown(&self, task_id: &str) {
        let mut st = self.lock();
        if let Some(e) = st.tasks.get_mut(task_id)
            && e.snap.state.is_terminal()
            && !e.end_shown
        {
            e.end_shown = true;
            drop(st);
            self.shown.notify_waiters();
        }
    }

    /// Whether an ended task offered at the door (not a `--task` task, not one this board
    /// refused) has not had its end shown to its caller yet. A task that ran and was rejected
    /// where it was forwarded (a remote agent's refusal) owes its caller that end.
    fn an_end_unshown(&self) -> bool {
        let st = self.lock();
        st.tasks.values().any(|e| {
            let refused = e.snap.state == TaskState::Rejected
                && matches!(e.snap.status_text.as_deref(), Some(REJECT_BUSY | REJECT_CLOSING));
            e.snap.state.is_terminal() && !refused && e.snap.origin != Origin::Local && !e.end_shown
        })
    }

    /// Waits, at most `limit`, until every ended door task's end was shown to its caller: a
    /// member that ends after its task would otherwise close its door before a caller that
    /// polls (GetTask after a SubscribeToTask that found the task over) reads the answer.
    pub async fn await_ends_shown(&self, limit: std::time::Duration) {
        let until = tokio::time::Instant::now() + limit;
        loop {
            let woken = self.shown.notified();
            if !self.an_end_unshown() {
                return;
            }
            if tokio::time::timeout_at(until, woken).await.is_err() {
                return;
            }
        }
    }

    pub fn acceptance(&self) -> Acceptance {
        self.acceptance
    }

    /// Installs the hook told of every task received and ended (for trace records). It runs on
    /// whichever thread changed the board, after the change; it may read the board but must not
    /// change it.
    pub fn set_observer(&self, f: impl Fn(&BoardEvent) + Send + Sync + 'static) {
        *lock(&self.observer) = Some(Box::new(f));
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Runs one mutation, then tells the observer and every waiter.
    fn mutate<R>(&self, f: impl FnOnce(&mut State, &mut Vec<BoardEvent>, DateTime<Utc>) -> R) -> R {
        let observer = lock(&self.observer);
        let mut events = Vec::new();
        let r = {
            let mut st = self.lock();
            // Kept to the millisecond the wire shows, so `statusTimestampAfter` set to a time a
            // client was shown includes that very change (A2A v1.0 `a2a.proto`: "greater than or
            // equal to").
            let r = f(&mut st, &mut events, (self.clock)().trunc_subsecs(3));
            st.settle(&events, self.retention);
            // A task's end is recorded (its `task_end`, its result file) before any reader can
            // see it: a caller told `completed` must find the answer in the records, even if the
            // session is killed the next moment. So a mutation that ends a task tells the
            // observer while it still holds the state; the observer reads the board only for
            // `InputRequested`, which no mutation that ends a task makes.
            if events.iter().any(|e| matches!(e, BoardEvent::Ended { .. }))
                && let Some(obs) = observer.as_ref()
            {
                for e in events.drain(..) {
                    obs(&e);
                }
            }
            r
        };
        if let Some(obs) = observer.as_ref() {
            for e in &events {
                obs(e);
            }
        }
        drop(observer);
        self.changes.send_modify(|v| *v = v.wrapping_add(1));
        r
    }

    /// The `--task` task: trusted, owned by no credential, admitted whatever the acceptance (it
    /// uses the `single` slot), unless the session is closing.
    pub fn submit_local(&self, text: &str) -> TaskSnapshot {
        let new = NewTask {
            text: text.to_string(),
            context_id: None,
            message_id: mint_message_id(),
            owner: None,
            caller_member: None,
            origin: Origin::Local,
            trust: Trust::Trusted,
            traceparent: None,
        };
        self.insert(new, true, false)
    }

    /// A task offered at the door: admitted (`SUBMITTED`) or refused (`REJECTED`) per
    /// docs/reference/manifest.md#keys.
    pub fn submit(&self, new: NewTask) -> TaskSnapshot {
        self.insert(new, false, false)
    }

    /// As [`Board::submit`], pinned from its creation: the task stays on the board, ended or not,
    /// until the returned pin is dropped (a SendMessage reply or stream owes it to its caller).
    /// Past [`MAX_PINNED_TASKS`](super::retention::MAX_PINNED_TASKS) or
    /// [`MAX_PINNED_BYTES`](super::retention::MAX_PINNED_BYTES) the offer is refused as busy.
    pub fn submit_pinned(self: &Arc<Self>, new: NewTask) -> (TaskSnapshot, Pinned) {
        let snap = self.insert(new, false, true);
        let pin = Pinned {
            board: Arc::clone(self),
            task_id: snap.id.clone(),
        };
        (snap, pin)
    }

    /// Pins a task already on the board (see [`Pinned`]); a pin on an unknown id holds nothing.
    /// `None` when a task not yet pinned would take the pinned tasks past their bounds.
    pub fn pin(self: &Arc<Self>, task_id: &str) -> Option<Pinned> {
        let mut st = self.lock();
        let first = st.tasks.get(task_id).filter(|e| e.pins == 0).map(footprint);
        if let Some(bytes) = first {
            if !st.books.may_pin(bytes) {
                return None;
            }
            st.books.charge_pin(bytes);
        }
        if let Some(e) = st.tasks.get_mut(task_id) {
            if let Some(bytes) = first {
                e.pin_charge = bytes;
            }
            e.pins += 1;
        }
        drop(st);
        Some(Pinned {
            board: Arc::clone(self),
            task_id: task_id.to_string(),
        })
    }

    fn unpin(&self, task_id: &str) {
        let mut guard = self.lock();
        let st = &mut *guard;
        if let Some(e) = st.tasks.get_mut(task_id)
            && e.pins > 0
        {
            e.pins -= 1;
            if e.pins == 0 {
                st.books.release_pin(std::mem::take(&mut e.pin_charge));
            }
        }
        st.evict(self.retention);
    }

    /// Tasks pinned now, and the bytes charged for them.
    pub fn pinned(&self) -> (usize, usize) {
        self.lock().books.pinned()
    }

    fn insert(&self, new: NewTask, local: bool, pinned: bool) -> TaskSnapshot {
        let (acceptance, depth) = (self.acceptance, self.queue_depth as usize);
        self.mutate(|st, ev, now| {
            let refusal = if st.closing {
                Some(REJECT_CLOSING)
            } else if local {
                None
            } else if pinned && !st.books.may_pin(new.text.len()) {
                // Its reply would pin it: too much is pinned already (a caller may offer again).
                Some(REJECT_BUSY)
            } else {
                let admit = match acceptance {
                    Acceptance::None => false,
                    Acceptance::Single => !st.slot_used,
                    // The first waiting task is about to run when nothing runs, so it does not
                    // count as waiting behind the running one.
                    Acceptance::Queue => st.queue.len() < depth + usize::from(st.running.is_none()),
                };
                (!admit).then_some(REJECT_BUSY)
            };
            st.seq += 1;
            let id = ids::mint(IdKind::Task);
            let context_id = new.context_id.unwrap_or_else(|| ids::mint(IdKind::Context));
            let mut snap = TaskSnapshot {
                id: id.clone(),
                context_id: context_id.clone(),
                state: TaskState::Submitted,
                timestamp: now,
                status_text: None,
                status_message_id: None,
                answer: None,
                no_answer_below: None,
                owner: new.owner,
                trust: new.trust,
                origin: new.origin,
                changed: st.seq,
                history: Vec::new(),
                asked_by: Vec::new(),
            };
            // A refused offer is never run: keep none of it, in the history neither (A2A v1.0
            // §3.2.4 lets a server return fewer messages than asked).
            let text: Arc<str> = if refusal.is_some() {
                Arc::from("")
            } else {
                Arc::from(new.text)
            };
            if refusal.is_none() {
                snap.history.push(HistoryMessage {
                    role: Role::User,
                    message_id: new.message_id.clone(),
                    text: HistoryText::Own(Arc::clone(&text)),
                });
            }
            let traceparent = if refusal.is_some() {
                None
            } else {
                new.traceparent.clone()
            };
            ev.push(BoardEvent::Received {
                task_id: id.clone(),
                context_id,
                message_id: new.message_id,
                traceparent: new.traceparent,
                caller_member: new.caller_member,
                origin: new.origin,
                trust: new.trust,
            });
            if let Some(reason) = refusal {
                snap.state = TaskState::Rejected;
                snap.status_text = Some(reason.to_string());
                let message_id = mint_message_id();
                snap.history.push(HistoryMessage {
                    role: Role::Agent,
                    message_id: message_id.clone(),
                    text: HistoryText::Own(Arc::from(reason)),
                });
                snap.status_message_id = Some(message_id);
                ev.push(BoardEvent::Ended {
                    task_id: id.clone(),
                    state: TaskState::Rejected,
                    no_answer: false,
                    reason: Some(reason.to_string()),
                    answer: None,
                });
            } else {
                st.slot_used = true;
                st.queue.push_back(id.clone());
            }
            let pin_charge = if pinned { text.len() } else { 0 };
            if pinned {
                st.books.charge_pin(pin_charge);
            }
            let log_bytes = Arc::new(AtomicUsize::new(0));
            let entry = Entry {
                log: Arc::new(Mutex::new(StreamLog::new(st.seq, Arc::clone(&log_bytes)))),
                log_bytes,
                snap: snap.clone(),
                text,
                traceparent,
                created: st.seq,
                cancel: watch::channel(false).0,
                pins: u32::from(pinned),
                pin_charge,
                end_shown: false,
                streamed: None,
                question: None,
                asked_at: None,
            };
            st.order.insert(st.seq, id.clone());
            st.tasks.insert(id, entry);
            snap
        })
    }

    /// The next task to run, in FIFO order, once no task is running; `None` once the board is
    /// closed and nothing is left to run. Cancel-safe: dropping the future takes nothing.
    pub async fn next_work(self: &Arc<Self>) -> Option<Work> {
        let mut rx = self.changes.subscribe();
        loop {
            rx.borrow_and_update();
            if let Some(w) = self.take_work() {
                return w;
            }
            if rx.changed().await.is_err() {
                return None;
            }
        }
    }

    /// `Some(None)` = closed and drained; `None` = nothing yet.
    fn take_work(self: &Arc<Self>) -> Option<Option<Work>> {
        // Look before mutating: `mutate` wakes every waiter, `next_work` included, so taking
        // nothing through it would make an idle executor spin on its own notification.
        {
            let st = self.lock();
            if st.running.is_some() || st.queue.is_empty() {
                return (st.running.is_none() && st.closing).then_some(None);
            }
        }
        self.mutate(|st, _, now| {
            if st.running.is_some() {
                return None;
            }
            let Some(id) = st.queue.pop_front() else {
                return st.closing.then_some(None);
            };
            st.seq += 1;
            let seq = st.seq;
            let context = context_turns(st, &id);
            let e = st.tasks.get_mut(&id)?;
            e.snap.state = TaskState::Working;
            e.snap.timestamp = now;
            reorder(&mut st.order, &mut e.snap, seq);
            let work = Work {
                task_id: id.clone(),
                context_id: e.snap.context_id.clone(),
                // Nothing reads the offer again once it runs.
                // The history keeps the caller's message; the executor gets its own copy.
                text: std::mem::replace(&mut e.text, Arc::from("")).to_string(),
                context,
                trust: e.snap.trust,
                origin: e.snap.origin,
                owner: e.snap.owner.clone(),
                traceparent: e.traceparent.take(),
                cancel: Cancel(e.cancel.subscribe()),
                _slot: Slot {
                    board: Arc::clone(self),
                    task_id: id.clone(),
                },
            };
            st.running = Some(id);
            Some(Some(work))
        })
    }

    /// Answer text turn `turn` of a running model task streamed, for stream followers. Text of
    /// a turn other than the last one seen starts the streamed text over. Not a status change:
    /// followers are woken, nothing else moves. Ignored for a task that is not live.
    pub fn stream_text(&self, task_id: &str, turn: u32, delta: &str) {
        {
            let mut st = self.lock();
            let Some(e) = st.tasks.get_mut(task_id).filter(|e| !e.snap.state.is_terminal()) else {
                return;
            };
            match &mut e.streamed {
                Some(s) if s.turn == turn => s.text.push_str(delta),
                slot => {
                    *slot = Some(Streamed {
                        turn,
                        text: delta.to_string(),
                    })
                }
            }
        }
        self.changes.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// The streamed answer text a follower holding `have` (turn, bytes of it) has not seen, if
    /// any: the rest of its turn, or a newer turn's text whole.
    pub fn streamed_since(&self, task_id: &str, have: Option<(u32, usize)>) -> Option<AnswerChunk> {
        let st = self.lock();
        let s = st.tasks.get(task_id)?.streamed.as_ref()?;
        match have {
            Some((turn, len)) if turn == s.turn => (s.text.len() > len).then(|| AnswerChunk {
                turn,
                append: true,
                text: s.text.get(len..).unwrap_or_default().to_string(),
            }),
            _ => (!s.text.is_empty()).then(|| AnswerChunk {
                turn: s.turn,
                append: false,
                text: s.text.clone(),
            }),
        }
    }

    /// A WORKING status change with an optional note, e.g. `continuing with 2 member answer(s)`.
    /// Ignored for a task that is not live.
    pub fn set_working(&self, task_id: &str, note: Option<&str>) {
        self.mutate(|st, _, now| {
            st.seq += 1;
            let seq = st.seq;
            if let Some(e) = st.tasks.get_mut(task_id)
                && !e.snap.state.is_terminal()
            {
                e.snap.state = TaskState::Working;
                e.snap.timestamp = now;
                reorder(&mut st.order, &mut e.snap, seq);
                e.snap.status_text = note.map(str::to_string);
                e.snap.status_message_id = note.map(|n| note_history(&mut e.snap, n));
            }
        });
    }

    /// The running task `task_id` asks its caller `question` (docs/reference/door.md#asking):
    /// it shows `TASK_STATE_INPUT_REQUIRED` with the question as its status message, and this
    /// waits, at most `timeout`, for the one answer [`Board::answer`] delivers. `asked_by` is who
    /// asked, innermost first (the member itself, then the members a question came up through).
    ///
    /// Cancelling or ending the task meanwhile (CancelTask, wind-down, the deadline) is
    /// [`Asked::Ended`]; so is asking from a task that is not live. When the bound passes the
    /// question is withdrawn under the board's lock, so an answer either won before it (and is
    /// returned) or is refused as the task's state says; the task stays live for its runner to
    /// end. Cancel-safe: dropping the future leaves the question open until the task ends.
    pub async fn ask(&self, task_id: &str, question: &str, asked_by: &[String], timeout: std::time::Duration) -> Asked {
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        let opened = self.mutate(|st, ev, now| {
            st.seq += 1;
            let seq = st.seq;
            let Some(e) = st.tasks.get_mut(task_id).filter(|e| !e.snap.state.is_terminal()) else {
                return false;
            };
            e.snap.state = TaskState::InputRequired;
            e.snap.timestamp = now;
            reorder(&mut st.order, &mut e.snap, seq);
            e.snap.status_message_id = Some(note_history(&mut e.snap, question));
            e.snap.status_text = Some(question.to_string());
            e.snap.asked_by = asked_by.to_vec();
            e.question = Some(tx);
            e.asked_at = Some(std::time::Instant::now());
            ev.push(BoardEvent::InputRequested {
                task_id: task_id.to_string(),
                asked_by: asked_by.to_vec(),
                question_bytes: question.len(),
            });
            true
        });
        if !opened {
            return Asked::Ended;
        }
        let began = std::time::Instant::now();
        let answer = match tokio::time::timeout(timeout, &mut rx).await {
            Ok(Ok(text)) => Some(text),
            Ok(Err(_)) => return Asked::Ended,
            Err(_) => {
                let withdrawn = self.mutate(|st, ev, _| {
                    let e = st.tasks.get_mut(task_id)?;
                    e.question.take()?;
                    ev.push(BoardEvent::InputSettled {
                        task_id: task_id.to_string(),
                        waited_ms: e.asked_at.take().map_or(0, |t| crate::timing::millis(t.elapsed())),
                        answer_bytes: None,
                        outcome: InputOutcome::TimedOut,
                    });
                    Some(())
                });
                if withdrawn.is_some() {
                    return Asked::TimedOut;
                }
                // An answer took the question first: it is in the channel, or the task ended.
                rx.try_recv().ok()
            }
        };
        match answer {
            Some(text) => Asked::Answered {
                text,
                waited: began.elapsed(),
            },
            None => Asked::Ended,
        }
    }

    /// An answer to task `task_id`'s open question, from a caller for whom `visible` admits the
    /// task's owner (SendMessage naming the task, docs/reference/door.md#asking). Exactly one
    /// answer wins a question: the task goes back to `TASK_STATE_WORKING` with the answer in its
    /// history, and the asker gets the text. Every other case changes nothing.
    pub fn answer(
        &self,
        task_id: &str,
        text: &str,
        message_id: &str,
        visible: impl Fn(Option<&str>) -> bool,
    ) -> Result<TaskSnapshot, AnswerRefusal> {
        self.mutate(|st, ev, now| {
            st.seq += 1;
            let seq = st.seq;
            let Some(e) = st.tasks.get_mut(task_id).filter(|e| visible(e.snap.owner.as_deref())) else {
                return Err(AnswerRefusal::NotFound);
            };
            if e.snap.state.is_terminal() {
                return Err(AnswerRefusal::Ended(Box::new(e.snap.clone())));
            }
            // Taken under the lock: of two answers racing, the second finds no question.
            let Some(tx) = e.question.take() else {
                return Err(AnswerRefusal::NotAsking(Box::new(e.snap.clone())));
            };
            if tx.send(text.to_string()).is_err() {
                // The asker is gone (its task is ending): nothing took the answer.
                return Err(AnswerRefusal::NotAsking(Box::new(e.snap.clone())));
            }
            e.snap.state = TaskState::Working;
            e.snap.timestamp = now;
            reorder(&mut st.order, &mut e.snap, seq);
            push_history(
                &mut e.snap,
                Role::User,
                message_id.to_string(),
                HistoryText::Own(Arc::from(text)),
            );
            e.snap.status_text = None;
            e.snap.status_message_id = None;
            e.snap.asked_by.clear();
            ev.push(BoardEvent::InputSettled {
                task_id: task_id.to_string(),
                waited_ms: e.asked_at.take().map_or(0, |t| crate::timing::millis(t.elapsed())),
                answer_bytes: Some(text.len()),
                outcome: InputOutcome::Answered,
            });
            Ok(e.snap.clone())
        })
    }

    /// Ends a task with the executor's outcome and frees the running slot. A task already ended
    /// (e.g. cancelled meanwhile) keeps its state. Returns the task as it ends.
    pub fn finish(&self, task_id: &str, outcome: TaskOutcome) -> Option<TaskSnapshot> {
        self.mutate(|st, ev, now| {
            if st.running.as_deref() == Some(task_id) {
                st.running = None;
            }
            st.queue.retain(|q| q != task_id);
            st.seq += 1;
            let seq = st.seq;
            let e = st.tasks.get_mut(task_id)?;
            if !e.snap.state.is_terminal() {
                let (state, text, reason) = match outcome {
                    TaskOutcome::Completed(answer) => {
                        e.snap.answer = Some(answer);
                        // The agent's final message is its answer, kept once.
                        push_history(&mut e.snap, Role::Agent, mint_message_id(), HistoryText::Answer);
                        (TaskState::Completed, None, None)
                    }
                    TaskOutcome::Failed(msg) => (TaskState::Failed, Some(msg.clone()), Some(msg)),
                    TaskOutcome::NoAnswer { reason, below } => {
                        e.snap.no_answer_below = Some(below);
                        (TaskState::Failed, Some(reason.clone()), Some(reason))
                    }
                    TaskOutcome::Canceled => (TaskState::Canceled, None, None),
                    TaskOutcome::Rejected(msg) => (TaskState::Rejected, Some(msg.clone()), Some(msg)),
                };
                end(e, &mut st.order, state, text, seq, now, ev);
                let _ = e.cancel.send_replace(state == TaskState::Canceled);
                ev.push(BoardEvent::Ended {
                    task_id: task_id.to_string(),
                    state,
                    no_answer: e.snap.no_answer_below.is_some(),
                    reason,
                    answer: e.snap.answer.clone().filter(|_| state == TaskState::Completed),
                });
            }
            Some(e.snap.clone())
        })
    }

    /// Frees the slot of a `Work` dropped without `finish`.
    fn release(&self, task_id: &str) {
        let live = self
            .lock()
            .tasks
            .get(task_id)
            .is_some_and(|e| !e.snap.state.is_terminal());
        if live {
            self.finish(task_id, TaskOutcome::Failed(LOST.to_string()));
        } else {
            self.mutate(|st, _, _| {
                if st.running.as_deref() == Some(task_id) {
                    st.running = None;
                }
            });
        }
    }

    /// Cancels one task: a queued one leaves the queue, a running one is told through its
    /// `Cancel` (its slot stays taken until the executor lets go). Either way it shows
    /// `TASK_STATE_CANCELED` at once.
    pub fn cancel(&self, task_id: &str, reason: &str) -> CancelResult {
        self.mutate(|st, ev, now| {
            st.seq += 1;
            let seq = st.seq;
            let Some(e) = st.tasks.get_mut(task_id) else {
                return CancelResult::NotFound;
            };
            if e.snap.state.is_terminal() {
                return CancelResult::NotCancelable(e.snap.clone());
            }
            end(e, &mut st.order, TaskState::Canceled, None, seq, now, ev);
            let _ = e.cancel.send_replace(true);
            let snap = e.snap.clone();
            st.queue.retain(|q| q != task_id);
            ev.push(BoardEvent::Ended {
                task_id: task_id.to_string(),
                state: TaskState::Canceled,
                no_answer: false,
                reason: Some(reason.to_string()),
                answer: None,
            });
            CancelResult::Canceled(snap)
        })
    }

    /// Cancels every live task, queued and running, without closing the board.
    pub fn cancel_all_live(&self, reason: &str) {
        self.mutate(|st, ev, now| {
            let live: Vec<String> = st.running.iter().chain(st.queue.iter()).cloned().collect();
            st.queue.clear();
            for id in live {
                st.seq += 1;
                let seq = st.seq;
                if let Some(e) = st.tasks.get_mut(&id)
                    && !e.snap.state.is_terminal()
                {
                    end(e, &mut st.order, TaskState::Canceled, None, seq, now, ev);
                    let _ = e.cancel.send_replace(true);
                    ev.push(BoardEvent::Ended {
                        task_id: id,
                        state: TaskState::Canceled,
                        no_answer: false,
                        reason: Some(reason.to_string()),
                        answer: None,
                    });
                }
            }
        });
    }

    /// The session is ending: admit nothing more, reject every queued task with
    /// `task rejected: the session is closing`, and cancel the running one. `next_work` then
    /// returns `None`. Idempotent.
    pub fn close(&self) {
        self.mutate(|st, ev, now| {
            st.closing = true;
            let queued: Vec<String> = st.queue.drain(..).collect();
            for id in queued {
                st.seq += 1;
                let seq = st.seq;
                if let Some(e) = st.tasks.get_mut(&id)
                    && !e.snap.state.is_terminal()
                {
                    end(
                        e,
                        &mut st.order,
                        TaskState::Rejected,
                        Some(REJECT_CLOSING.to_string()),
                        seq,
                        now,
                        ev,
                    );
                    let _ = e.cancel.send_replace(true);
                    ev.push(BoardEvent::Ended {
                        task_id: id,
                        state: TaskState::Rejected,
                        no_answer: false,
                        reason: Some(REJECT_CLOSING.to_string()),
                        answer: None,
                    });
                }
            }
            st.seq += 1;
            let seq = st.seq;
            if let Some(id) = st.running.clone()
                && let Some(e) = st.tasks.get_mut(&id)
                && !e.snap.state.is_terminal()
            {
                end(e, &mut st.order, TaskState::Canceled, None, seq, now, ev);
                let _ = e.cancel.send_replace(true);
                ev.push(BoardEvent::Ended {
                    task_id: id,
                    state: TaskState::Canceled,
                    no_answer: false,
                    reason: Some("the session is closing".to_string()),
                    answer: None,
                });
            }
        });
    }

    pub fn is_closing(&self) -> bool {
        self.lock().closing
    }

    /// No task is running or queued.
    pub fn is_idle(&self) -> bool {
        let st = self.lock();
        st.running.is_none() && st.queue.is_empty()
    }

    pub fn get(&self, task_id: &str) -> Option<TaskSnapshot> {
        self.lock().tasks.get(task_id).map(|e| e.snap.clone())
    }

    /// The log of the events the task's streams sent, while the board keeps the task. Lock it
    /// before reading the board (`get`, `streamed_since`), never while holding anything of it.
    pub fn stream_log(&self, task_id: &str) -> Option<Arc<Mutex<StreamLog>>> {
        self.lock().tasks.get(task_id).map(|e| Arc::clone(&e.log))
    }

    /// Every task still on the board, most recent status change first.
    pub fn all(&self) -> Vec<TaskSnapshot> {
        let st = self.lock();
        st.order
            .values()
            .rev()
            .filter_map(|id| st.tasks.get(id))
            .map(|e| e.snap.clone())
            .collect()
    }

    /// Completes with the task once it is terminal; `None` for an unknown id. Hold a pin on the
    /// task meanwhile, or it may be forgotten between its end and this call's wake-up.
    pub async fn wait_terminal(&self, task_id: &str) -> Option<TaskSnapshot> {
        let mut rx = self.changes.subscribe();
        loop {
            rx.borrow_and_update();
            let snap = self.get(task_id)?;
            if snap.state.is_terminal() {
                return Some(snap);
            }
            if rx.changed().await.is_err() {
                return Some(snap);
            }
        }
    }

    /// Completes with the task once it is terminal or asks for input (what a blocking
    /// SendMessage waits for, A2A v1.0: an interrupted state ends the wait too); `None` for an
    /// unknown id. Hold a pin meanwhile, as for [`Board::wait_terminal`].
    pub async fn wait_settled(&self, task_id: &str) -> Option<TaskSnapshot> {
        let mut rx = self.changes.subscribe();
        loop {
            rx.borrow_and_update();
            let snap = self.get(task_id)?;
            if snap.state.is_terminal() || snap.state == TaskState::InputRequired {
                return Some(snap);
            }
            if rx.changed().await.is_err() {
                return Some(snap);
            }
        }
    }

    /// A receiver that changes whenever anything on the board changes.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// ListTasks over the tasks `visible` admits (by owner): filters, newest change first, one
    /// page after the `before` cursor. The page is a walk down the change order from the cursor;
    /// only its tasks are copied. A cursor whose task has since been forgotten still pages on.
    pub fn list(&self, q: &ListQuery, visible: impl Fn(Option<&str>) -> bool) -> ListPage {
        let st = self.lock();
        let matches = |s: &TaskSnapshot| {
            visible(s.owner.as_deref())
                && q.context_id.as_ref().is_none_or(|c| &s.context_id == c)
                && q.state.is_none_or(|st| s.state == st)
                && q.after.is_none_or(|t| s.timestamp >= t)
        };
        let total = st.tasks.values().filter(|e| matches(&e.snap)).count();
        let upto = q.before.map_or(Bound::Unbounded, Bound::Excluded);
        let mut walk = st
            .order
            .range((Bound::Unbounded, upto))
            .rev()
            .filter_map(|(_, id)| st.tasks.get(id))
            .map(|e| &e.snap)
            .filter(|s| matches(s));
        let tasks: Vec<TaskSnapshot> = walk.by_ref().take(q.page_size).cloned().collect();
        let more = walk.next().is_some();
        let next = if more { tasks.last().map(|s| s.changed) } else { None };
        ListPage { tasks, next, total }
    }
}

fn end(
    e: &mut Entry,
    order: &mut BTreeMap<u64, String>,
    state: TaskState,
    text: Option<String>,
    seq: u64,
    now: DateTime<Utc>,
    ev: &mut Vec<BoardEvent>,
) {
    e.snap.state = state;
    e.snap.timestamp = now;
    reorder(order, &mut e.snap, seq);
    e.snap.status_message_id = text.as_deref().map(|t| note_history(&mut e.snap, t));
    e.snap.status_text = text;
    // The answer, if any, is whole now.
    e.streamed = None;
    // An open question is over: its asker hears so, and no answer can land any more. An ended
    // task asks nobody, whether its question was open or withdrawn at its bound.
    e.snap.asked_by.clear();
    if e.question.take().is_some() {
        ev.push(BoardEvent::InputSettled {
            task_id: e.snap.id.clone(),
            waited_ms: e.asked_at.take().map_or(0, |t| crate::timing::millis(t.elapsed())),
            answer_bytes: None,
            outcome: InputOutcome::Abandoned,
        });
    }
}

/// Adds a status message to the history; its message id, which the status shows too.
fn note_history(snap: &mut TaskSnapshot, text: &str) -> String {
    let id = mint_message_id();
    push_history(snap, Role::Agent, id.clone(), HistoryText::Own(Arc::from(text)));
    id
}

/// Appends to the history within [`HISTORY_MESSAGES`]: when full, the newest message replaces the
/// last one, so the caller's message and the final word are always kept.
fn push_history(snap: &mut TaskSnapshot, role: Role, message_id: String, text: HistoryText) {
    if snap.history.len() >= HISTORY_MESSAGES.max(2) {
        snap.history.pop();
    }
    snap.history.push(HistoryMessage { role, message_id, text });
}

/// The earlier exchanges of task `id`'s context that its owner may see
/// (docs/reference/door.md#methods, as ListTasks would show them): each completed task's caller
/// message and answer, oldest first, the newest kept within [`CONTEXT_TURNS`] and
/// [`CONTEXT_BYTES`]. A context whose tasks the owner cannot see is, to it, a new one.
fn context_turns(st: &State, id: &str) -> Vec<ContextTurn> {
    let Some(me) = st.tasks.get(id) else {
        return Vec::new();
    };
    let viewer = me.snap.owner.as_deref();
    // Borrowed while choosing, so only the exchanges kept are copied.
    let mut earlier: Vec<(u64, &Arc<str>, &str)> = st
        .tasks
        .values()
        .filter(|e| {
            e.created < me.created
                && e.snap.context_id == me.snap.context_id
                && e.snap.state == TaskState::Completed
                && owner_sees(viewer, e.snap.owner.as_deref())
        })
        .filter_map(|e| match e.snap.history.first() {
            Some(HistoryMessage {
                role: Role::User,
                text: HistoryText::Own(asked),
                ..
            }) => Some((e.created, asked, e.snap.answer.as_deref()?)),
            _ => None,
        })
        .collect();
    earlier.sort_by_key(|(created, _, _)| std::cmp::Reverse(*created));
    let mut bytes = 0usize;
    let mut kept: Vec<ContextTurn> = earlier
        .into_iter()
        .take(CONTEXT_TURNS)
        .take_while(|(_, asked, answered)| {
            bytes = bytes.saturating_add(asked.len() + answered.len());
            bytes <= CONTEXT_BYTES
        })
        .map(|(_, asked, answered)| ContextTurn {
            asked: Arc::clone(asked),
            answered: answered.to_string(),
        })
        .collect();
    kept.reverse();
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::retention::{MAX_PINNED_BYTES, MAX_PINNED_TASKS};

    fn offer(text: &str) -> NewTask {
        NewTask {
            text: text.into(),
            context_id: None,
            message_id: "m1".into(),
            owner: Some("operator".into()),
            caller_member: None,
            origin: Origin::Event,
            trust: Trust::Untrusted,
            traceparent: None,
        }
    }

    fn fixed_clock() -> Clock {
        Arc::new(|| DateTime::from_timestamp_millis(1_700_000_000_123).unwrap_or_default())
    }

    fn states(board: &Board, offers: usize) -> Vec<&'static str> {
        (0..offers)
            .map(|i| board.submit(offer(&format!("t{i}"))).state.wire())
            .collect()
    }

    #[test]
    fn admission_follows_acceptance() {
        const S: &str = "TASK_STATE_SUBMITTED";
        const R: &str = "TASK_STATE_REJECTED";
        let table: &[(Acceptance, u32, usize, &[&str])] = &[
            (Acceptance::None, 3, 2, &[R, R]),
            (Acceptance::Single, 3, 3, &[S, R, R]),
            // Nothing runs yet: one will run and `depth` wait.
            (Acceptance::Queue, 0, 2, &[S, R]),
            (Acceptance::Queue, 2, 4, &[S, S, S, R]),
        ];
        for (acc, depth, n, want) in table {
            let b = Board::new(*acc, *depth);
            assert_eq!(states(&b, *n), *want, "{acc:?} depth {depth}");
        }
    }

    #[actix_rt::test]
    async fn queue_counts_only_tasks_waiting_behind_the_running_one() {
        let b = Board::new(Acceptance::Queue, 1);
        assert_eq!(b.submit(offer("a")).state, TaskState::Submitted);
        let w = b.next_work().await.expect("work");
        assert_eq!(w.text, "a");
        assert_eq!(b.get(&w.task_id).map(|t| t.state), Some(TaskState::Working));
        assert_eq!(b.submit(offer("b")).state, TaskState::Submitted);
        let c = b.submit(offer("c"));
        assert_eq!(
            (c.state, c.status_text.as_deref()),
            (TaskState::Rejected, Some(REJECT_BUSY))
        );
        b.finish(&w.task_id, TaskOutcome::Completed("A".into()));
        drop(w);
        let w2 = b.next_work().await.expect("work");
        assert_eq!(w2.text, "b");
    }

    #[actix_rt::test]
    async fn an_idle_executor_waits_without_waking_itself() {
        let b = Board::new(Acceptance::Queue, 1);
        let mut rx = b.changes();
        rx.borrow_and_update();
        let idle = std::time::Duration::from_millis(20);
        assert!(tokio::time::timeout(idle, b.next_work()).await.is_err());
        assert_eq!(rx.has_changed().ok(), Some(false), "waiting changed the board");
        // The same while a task runs: the next one waits for its end without spinning.
        b.submit(offer("a"));
        let w = b.next_work().await.expect("work");
        rx.borrow_and_update();
        assert!(tokio::time::timeout(idle, b.next_work()).await.is_err());
        assert_eq!(rx.has_changed().ok(), Some(false), "waiting changed the board");
        b.finish(&w.task_id, TaskOutcome::Completed("A".into()));
        drop(w);
        b.close();
        assert!(b.next_work().await.is_none(), "closed and drained");
    }

    #[actix_rt::test]
    async fn single_slot_is_used_by_the_local_task() {
        let b = Board::new(Acceptance::Single, 0);
        let t = b.submit_local("local");
        assert_eq!(
            (t.state, t.trust, t.owner.clone()),
            (TaskState::Submitted, Trust::Trusted, None)
        );
        assert_eq!(b.submit(offer("x")).status_text.as_deref(), Some(REJECT_BUSY));
        // A `none` door still runs its --task task.
        let n = Board::new(Acceptance::None, 0);
        assert_eq!(n.submit_local("t").state, TaskState::Submitted);
        assert_eq!(n.next_work().await.map(|w| w.text), Some("t".into()));
    }

    #[actix_rt::test]
    async fn cancel_and_close() {
        let events = Arc::new(Mutex::new(Vec::new()));
        let b = Board::new(Acceptance::Queue, 5);
        let sink = Arc::clone(&events);
        b.set_observer(move |e| lock(&sink).push(e.clone()));
        let a = b.submit(offer("a")).id;
        let q1 = b.submit(offer("b")).id;
        let q2 = b.submit(offer("c")).id;
        let w = b.next_work().await.expect("work");
        assert!(!w.cancel.is_cancelled());
        // Cancel a queued task: it leaves the queue.
        assert!(matches!(b.cancel(&q1, "r"), CancelResult::Canceled(s) if s.state == TaskState::Canceled));
        assert!(matches!(b.cancel(&q1, "r"), CancelResult::NotCancelable(_)));
        assert_eq!(b.cancel("tsk_nope", "r"), CancelResult::NotFound);
        b.close();
        assert!(w.cancel.is_cancelled());
        w.cancel.cancelled().await;
        assert_eq!(b.get(&a).map(|t| t.state), Some(TaskState::Canceled));
        let q2s = b.get(&q2).expect("q2");
        assert_eq!(
            (q2s.state, q2s.status_text.as_deref()),
            (TaskState::Rejected, Some(REJECT_CLOSING))
        );
        // The executor's late outcome does not overwrite the cancellation.
        assert_eq!(
            b.finish(&a, TaskOutcome::Completed("late".into())).map(|t| t.state),
            Some(TaskState::Canceled)
        );
        drop(w);
        assert!(b.next_work().await.is_none());
        assert_eq!(b.submit(offer("d")).status_text.as_deref(), Some(REJECT_CLOSING));
        assert_eq!(b.submit_local("e").status_text.as_deref(), Some(REJECT_CLOSING));
        let ends: Vec<(String, TaskState)> = lock(&events)
            .iter()
            .filter_map(|e| match e {
                BoardEvent::Ended { task_id, state, .. } => Some((task_id.clone(), *state)),
                _ => None,
            })
            .collect();
        assert_eq!(
            ends[..3],
            [
                (q1, TaskState::Canceled),
                (q2, TaskState::Rejected),
                (a, TaskState::Canceled)
            ]
        );
        assert_eq!(
            lock(&events)
                .iter()
                .filter(|e| matches!(e, BoardEvent::Received { .. }))
                .count(),
            5
        );
    }

    #[actix_rt::test]
    async fn dropped_work_fails_its_task_and_frees_the_slot() {
        let b = Board::new(Acceptance::Queue, 5);
        let a = b.submit(offer("a")).id;
        b.submit(offer("b"));
        drop(b.next_work().await);
        let t = b.get(&a).expect("a");
        assert_eq!((t.state, t.status_text.as_deref()), (TaskState::Failed, Some(LOST)));
        assert_eq!(b.next_work().await.map(|w| w.text), Some("b".into()));
    }

    #[actix_rt::test]
    async fn streamed_answer_text_is_handed_out_once_and_gone_when_the_task_ends() {
        let b = Board::new(Acceptance::Queue, 5);
        let id = b.submit(offer("a")).id;
        let work = b.next_work().await.expect("work");
        let chunk = |turn, append, text: &str| {
            Some(AnswerChunk {
                turn,
                append,
                text: text.into(),
            })
        };
        let changed = b.get(&id).map(|s| s.changed);
        let mut rx = b.changes();
        rx.borrow_and_update();
        assert_eq!(b.streamed_since(&id, None), None);
        b.stream_text(&id, 1, "Hel");
        assert!(rx.has_changed().unwrap_or(false), "followers are woken");
        b.stream_text(&id, 1, "lo");
        // (what the follower has, what it is owed)
        let table = [
            (None, chunk(1, false, "Hello")),
            (Some((1, 3)), chunk(1, true, "lo")),
            (Some((1, 5)), None),
        ];
        for (have, want) in table {
            assert_eq!(b.streamed_since(&id, have), want, "{have:?}");
        }
        // A later turn starts over: a follower of turn 1 gets turn 2's text whole.
        b.stream_text(&id, 2, "Fin");
        assert_eq!(b.streamed_since(&id, Some((1, 5))), chunk(2, false, "Fin"));
        assert_eq!(b.streamed_since(&id, Some((2, 1))), chunk(2, true, "in"));
        assert_eq!(
            b.get(&id).map(|s| s.changed),
            changed,
            "streaming is not a status change"
        );
        b.finish(&id, TaskOutcome::Completed("Fin".into()));
        drop(work);
        assert_eq!(b.streamed_since(&id, None), None);
        b.stream_text(&id, 3, "late");
        assert_eq!(b.streamed_since(&id, None), None, "an ended task streams nothing");
    }

    fn keeping(tasks: usize, bytes: usize) -> Arc<Board> {
        Board::with_retention(Acceptance::Queue, 10, fixed_clock(), Retention { tasks, bytes })
    }

    /// Submits a task and ends it at once with `answer`.
    fn complete(b: &Board, answer: &str) -> String {
        let id = b.submit(offer("q")).id;
        b.finish(&id, TaskOutcome::Completed(answer.into()));
        id
    }

    fn kept(b: &Board, ids: &[&String]) -> Vec<bool> {
        ids.iter().map(|id| b.get(id).is_some()).collect()
    }

    #[actix_rt::test]
    async fn ended_tasks_are_forgotten_refused_first_then_oldest_first() {
        let b = Board::with_retention(
            Acceptance::Queue,
            0,
            fixed_clock(),
            Retention {
                tasks: 3,
                bytes: usize::MAX,
            },
        );
        let c1 = complete(&b, "1");
        let c2 = complete(&b, "2");
        // One runs; with no room to wait, the next two are refused.
        let s = b.submit(offer("s")).id;
        let w = b.next_work().await.expect("work");
        let r1 = b.submit(offer("r1")).id;
        let r2 = b.submit(offer("r2")).id;
        // Four ended (c1 c2 r1 r2): the older refusal goes, though c1 ended before it.
        assert_eq!(kept(&b, &[&c1, &c2, &r1, &r2, &s]), [true, true, false, true, true]);
        b.finish(&s, TaskOutcome::Completed("s".into()));
        drop(w);
        assert_eq!(kept(&b, &[&c1, &c2, &r2, &s]), [true, true, false, true]);
        // No refusal left: the oldest ended task goes.
        let c3 = complete(&b, "3");
        assert_eq!(kept(&b, &[&c1, &c2, &s, &c3]), [false, true, true, true]);
        assert_eq!(b.all().len(), 3);
    }

    #[test]
    fn ended_tasks_are_kept_within_a_byte_budget() {
        let answer = "a".repeat(10_000);
        // Two such tasks fit, three do not.
        let b = keeping(100, 25_000);
        let ids: Vec<String> = (0..3).map(|_| complete(&b, &answer)).collect();
        assert_eq!(kept(&b, &[&ids[0], &ids[1], &ids[2]]), [false, true, true]);
        // The books match what is kept.
        let st = b.lock();
        let held: usize = st.books.ended().map(|id| footprint(&st.tasks[id])).sum();
        assert_eq!(st.books.kept_bytes(), held);
        assert!((20_000..25_000).contains(&held), "{held}");
        assert_eq!(st.tasks.len(), st.order.len());
        drop(st);
        // An answer bigger than the whole budget goes as soon as it has ended, and takes every
        // older one with it.
        let huge = complete(&b, &"h".repeat(30_000));
        assert_eq!(kept(&b, &[&ids[1], &ids[2], &huge]), [false, false, false]);
        assert_eq!(b.lock().books.kept_bytes(), 0);
    }

    #[actix_rt::test]
    async fn over_the_byte_budget_answers_go_before_refusals() {
        let answer = "a".repeat(10_000);
        let b = Board::with_retention(
            Acceptance::Queue,
            0,
            fixed_clock(),
            Retention {
                tasks: 100,
                bytes: 25_000,
            },
        );
        let s = b.submit(offer("s")).id;
        let w = b.next_work().await.expect("work");
        let r = b.submit(offer("r")).id;
        assert_eq!(b.get(&r).map(|t| t.state), Some(TaskState::Rejected));
        b.finish(&s, TaskOutcome::Completed(answer.clone()));
        drop(w);
        let c2 = complete(&b, &answer);
        let c3 = complete(&b, &answer);
        // The refusal is older than every answer, yet holds next to nothing.
        assert_eq!(kept(&b, &[&r, &s, &c2, &c3]), [true, false, true, true]);
    }

    #[actix_rt::test]
    async fn live_and_pinned_tasks_are_never_forgotten() {
        let b = keeping(0, 0);
        let ids: Vec<String> = (0..3).map(|i| b.submit(offer(&i.to_string())).id).collect();
        let w = b.next_work().await.expect("work");
        assert_eq!(kept(&b, &[&ids[0], &ids[1], &ids[2]]), [true, true, true]);
        // Cancelled while its executor still holds the slot: kept until it lets go.
        b.cancel(&ids[0], "r");
        assert_eq!(b.get(&ids[0]).map(|t| t.state), Some(TaskState::Canceled));
        b.cancel(&ids[1], "r");
        assert_eq!(kept(&b, &[&ids[0], &ids[1], &ids[2]]), [true, false, true]);
        drop(w);
        assert_eq!(kept(&b, &[&ids[0], &ids[2]]), [false, true]);
        // A pinned task outlives its end until the pin is dropped; so does a refused one.
        let (snap, pin) = b.submit_pinned(offer("p"));
        b.finish(&snap.id, TaskOutcome::Completed("done".into()));
        assert_eq!(
            b.wait_terminal(&snap.id).await.map(|t| t.state),
            Some(TaskState::Completed)
        );
        drop(pin);
        assert!(b.get(&snap.id).is_none());
        let none = Board::with_retention(Acceptance::None, 0, fixed_clock(), Retention { tasks: 0, bytes: 0 });
        let (refused, pin) = none.submit_pinned(offer("x"));
        assert_eq!(none.get(&refused.id).map(|t| t.state), Some(TaskState::Rejected));
        let again = none.pin(&refused.id).unwrap();
        drop(pin);
        assert!(none.get(&refused.id).is_some(), "a second pin still holds it");
        drop(again);
        assert!(none.get(&refused.id).is_none());
        assert_eq!(kept(&b, &[&ids[2]]), [true], "the queued task is still live");
    }

    #[test]
    fn pinned_tasks_are_bounded_by_count_and_bytes_and_released_with_their_pins() {
        let b = Board::with_clock(Acceptance::Queue, u32::MAX, fixed_clock());
        let mut pins = Vec::new();
        for i in 0..MAX_PINNED_TASKS {
            let (snap, pin) = b.submit_pinned(offer(&format!("t{i}")));
            assert_eq!(snap.state, TaskState::Submitted, "{i}");
            pins.push(pin);
        }
        // Past the count: refused as busy, and no stream may pin a task either.
        let (over, refused_pin) = b.submit_pinned(offer("one more"));
        assert_eq!(over.state, TaskState::Rejected);
        assert_eq!(over.status_text.as_deref(), Some(REJECT_BUSY));
        let live = b.submit(offer("unpinned"));
        assert!(b.pin(&live.id).is_none());
        // A task pinned already may take another pin: it adds nothing.
        let first = pins[0].task_id.clone();
        assert!(b.pin(&first).is_some());
        pins.truncate(1);
        drop(refused_pin);
        assert_eq!(b.pinned().0, 1, "dropped pins are released");
        assert!(b.pin(&live.id).is_some());

        // Past the bytes: one offer of more than the bound is refused while others are pinned.
        let b = Board::with_clock(Acceptance::Queue, u32::MAX, fixed_clock());
        let half = "x".repeat(MAX_PINNED_BYTES / 2 + 1);
        let (a, pa) = b.submit_pinned(offer(&half));
        assert_eq!(a.state, TaskState::Submitted);
        let (c, _pc) = b.submit_pinned(offer(&half));
        assert_eq!(c.state, TaskState::Rejected);
        assert!(b.pinned().1 <= MAX_PINNED_BYTES);
        drop(pa);
        let (d, _pd) = b.submit_pinned(offer(&half));
        assert_eq!(d.state, TaskState::Submitted, "the bytes came back with the pin");
    }

    #[actix_rt::test]
    async fn no_task_keeps_its_offer_once_it_cannot_run_it() {
        let big = "x".repeat(100_000);
        let none = Board::new(Acceptance::None, 0);
        let refused = none.submit(offer(&big)).id;
        assert!(none.lock().tasks[&refused].text.is_empty());
        let b = Board::new(Acceptance::Queue, 5);
        let ran = b.submit(offer(&big)).id;
        let queued = b.submit(offer(&big)).id;
        assert_eq!(b.lock().tasks[&queued].text.len(), big.len(), "a waiting task keeps it");
        let w = b.next_work().await.expect("work");
        assert_eq!(w.text.len(), big.len());
        assert!(b.lock().tasks[&ran].text.is_empty(), "the executor holds the one copy");
        b.cancel(&queued, "r");
        assert!(b.lock().tasks[&queued].text.is_empty());
    }

    /// A2A v1.0 §3.2.4 History Length Semantics; history is bounded in count and its bytes
    /// count against the board's retention.
    #[actix_rt::test]
    async fn history_is_bounded_limited_and_paid_for() {
        let b = keeping(100, usize::MAX);
        let id = b.submit(offer("the question")).id;
        let w = b.next_work().await.expect("work");
        for i in 0..HISTORY_MESSAGES + 5 {
            b.set_working(&id, Some(&format!("note {i}")));
        }
        b.finish(&id, TaskOutcome::Completed("the answer".into()));
        drop(w);
        let t = b.get(&id).expect("task");
        assert_eq!(t.history.len(), HISTORY_MESSAGES);
        let texts: Vec<&str> = t.history.iter().map(|m| t.history_text(m)).collect();
        assert_eq!(texts.first(), Some(&"the question"), "the caller's message stays");
        assert_eq!(texts.last(), Some(&"the answer"), "the final word stays");
        for (limit, len) in [
            (None, HISTORY_MESSAGES),
            (Some(3), 3),
            (Some(0), 0),
            (Some(1000), HISTORY_MESSAGES),
        ] {
            let mut l = t.clone();
            l.limit_history(limit);
            assert_eq!(l.history.len(), len, "{limit:?}");
        }
        // The caller's message is paid for once the task has ended: a budget its answer alone
        // fits in, but not with a long question, forgets it.
        let tight = keeping(100, 30_000);
        let asked = tight.submit(offer(&"q".repeat(20_000))).id;
        let w = tight.next_work().await.expect("work");
        tight.finish(&asked, TaskOutcome::Completed("a".repeat(20_000)));
        drop(w);
        assert!(tight.get(&asked).is_none(), "question and answer exceed the budget");
        assert_eq!(tight.lock().books.kept_bytes(), 0);
        // A refused offer keeps no text, in the history neither: only the refusal.
        let none = Board::new(Acceptance::None, 0);
        let r = none.submit(offer(&"x".repeat(100_000)));
        assert_eq!(r.history.len(), 1);
        assert_eq!(r.history[0].role, Role::Agent);
    }

    /// A2A v1.0 §3.4.2 "Context Continuity" / "Context Inheritance", with
    /// docs/reference/door.md#methods visibility: a task sees the completed exchanges of its
    /// context its owner may see.
    #[actix_rt::test]
    async fn a_task_is_handed_the_visible_exchanges_of_its_context() {
        let b = Board::new(Acceptance::Queue, 100);
        let in_ctx = |text: &str, ctx: &str, owner: Option<&str>| NewTask {
            context_id: Some(ctx.into()),
            owner: owner.map(str::to_string),
            ..offer(text)
        };
        let run = |b: &Arc<Board>, new: NewTask, answer: Option<&str>| {
            let b = Arc::clone(b);
            let answer = answer.map(str::to_string);
            async move {
                let id = b.submit(new).id;
                let w = b.next_work().await.expect("work");
                let context = w.context.clone();
                let outcome = answer.map_or(TaskOutcome::Failed("no".into()), TaskOutcome::Completed);
                b.finish(&id, outcome);
                drop(w);
                context
            }
        };
        let pairs = |turns: Vec<ContextTurn>| -> Vec<(String, String)> {
            turns.into_iter().map(|t| (t.asked.to_string(), t.answered)).collect()
        };
        let a = Some("member:a");
        assert!(run(&b, in_ctx("q1", "ctx_1", a), Some("a1")).await.is_empty());
        // A failed exchange is not part of the conversation.
        run(&b, in_ctx("qf", "ctx_1", a), None).await;
        assert_eq!(
            pairs(run(&b, in_ctx("q2", "ctx_1", a), Some("a2")).await),
            [("q1".into(), "a1".into())]
        );
        // Another member naming the same context sees none of it: to it the context is new.
        assert!(
            run(&b, in_ctx("x", "ctx_1", Some("member:b")), Some("bx"))
                .await
                .is_empty()
        );
        // Another context is not this one.
        assert!(run(&b, in_ctx("y", "ctx_2", a), Some("ay")).await.is_empty());
        assert_eq!(
            pairs(run(&b, in_ctx("q3", "ctx_1", a), Some("a3")).await),
            [("q1".into(), "a1".into()), ("q2".into(), "a2".into())]
        );
        // The operator sees every task of the context, the other member's included.
        let seen = pairs(run(&b, in_ctx("o", "ctx_1", Some("operator")), Some("ao")).await);
        assert_eq!(seen.len(), 4);
        assert_eq!(seen[2], ("x".into(), "bx".into()));
        // Bounded in count, newest kept...
        for i in 0..CONTEXT_TURNS + 3 {
            run(&b, in_ctx(&format!("n{i}"), "ctx_3", a), Some("ok")).await;
        }
        let turns = run(&b, in_ctx("last", "ctx_3", a), Some("ok")).await;
        assert_eq!(turns.len(), CONTEXT_TURNS);
        assert_eq!(
            turns.last().map(|t| &*t.asked),
            Some(&*format!("n{}", CONTEXT_TURNS + 2))
        );
        // ...and in bytes.
        let big = "b".repeat(CONTEXT_BYTES / 3);
        for _ in 0..4 {
            run(&b, in_ctx(&big, "ctx_4", a), Some("ok")).await;
        }
        assert_eq!(run(&b, in_ctx("last", "ctx_4", a), Some("ok")).await.len(), 2);
    }

    #[test]
    fn list_pages_on_across_forgotten_tasks() {
        let b = keeping(2, usize::MAX);
        let all = |_: Option<&str>| true;
        let [a, x, y]: [String; 3] = std::array::from_fn(|i| b.submit(offer(&i.to_string())).id);
        b.finish(&x, TaskOutcome::Completed("x".into()));
        b.finish(&y, TaskOutcome::Completed("y".into()));
        let q = ListQuery {
            page_size: 2,
            ..ListQuery::default()
        };
        let p1 = b.list(&q, all);
        let names = |p: &ListPage| p.tasks.iter().map(|t| t.id.clone()).collect::<Vec<_>>();
        assert_eq!((names(&p1), p1.total), (vec![y.clone(), x.clone()], 3));
        // A third ended task pushes out `x`, the task the page token points at.
        let z = complete(&b, "z");
        assert!(b.get(&x).is_none());
        let p2 = b.list(
            &ListQuery {
                before: p1.next,
                ..q.clone()
            },
            all,
        );
        assert_eq!((names(&p2), p2.next, p2.total), (vec![a.clone()], None, 3));
        assert_eq!(names(&b.list(&q, all)), [z, y]);
    }

    #[test]
    fn list_pages_newest_first_with_filters() {
        let b = Board::new(Acceptance::Queue, 100);
        let ids: Vec<String> = (0..5).map(|i| b.submit(offer(&i.to_string())).id).collect();
        let all = |_: Option<&str>| true;
        let q = ListQuery {
            page_size: 2,
            ..ListQuery::default()
        };
        let p1 = b.list(&q, all);
        assert_eq!(p1.total, 5);
        assert_eq!(
            p1.tasks.iter().map(|t| t.id.clone()).collect::<Vec<_>>(),
            [ids[4].clone(), ids[3].clone()]
        );
        let p2 = b.list(
            &ListQuery {
                before: p1.next,
                ..q.clone()
            },
            all,
        );
        assert_eq!(
            p2.tasks.iter().map(|t| t.id.clone()).collect::<Vec<_>>(),
            [ids[2].clone(), ids[1].clone()]
        );
        let p3 = b.list(
            &ListQuery {
                before: p2.next,
                ..q.clone()
            },
            all,
        );
        assert_eq!((p3.tasks.len(), p3.next, p3.total), (1, None, 5));
        // A status change moves a task to the front.
        b.set_working(&ids[0], Some("note"));
        assert_eq!(b.list(&q, all).tasks[0].id, ids[0]);
        let working = ListQuery {
            state: Some(TaskState::Working),
            page_size: 50,
            ..ListQuery::default()
        };
        assert_eq!(b.list(&working, all).total, 1);
        assert_eq!(
            b.list(
                &ListQuery {
                    page_size: 50,
                    ..ListQuery::default()
                },
                |o| o == Some("x")
            )
            .total,
            0
        );
    }

    /// A task's end reaches the observer, which records it (`task_end`, the result file), before
    /// any reader can see it, so a caller told `completed` always finds the answer recorded; the
    /// ending event carries the answer, since the observer cannot read the board then. Found by
    /// the nemesis (docs/reliability.md#nemesis-runs): GetTask saw `completed` while the result
    /// file was still empty.
    #[actix_rt::test]
    async fn a_task_end_is_observed_before_any_reader_can_see_it() {
        let b = Board::new(Acceptance::Queue, 1);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let weak = Arc::downgrade(&b);
        let sink = Arc::clone(&seen);
        b.set_observer(move |e| {
            if let BoardEvent::Ended { task_id, answer, .. } = e {
                // A reader on another thread while the observer runs: it must not get through.
                let (tx, rx) = std::sync::mpsc::channel();
                let board = weak.upgrade().expect("board");
                let id = task_id.clone();
                std::thread::spawn(move || {
                    let _ = tx.send(board.get(&id).map(|t| t.state));
                });
                let read = rx.recv_timeout(std::time::Duration::from_millis(100)).ok().flatten();
                lock(&sink).push((read, answer.clone()));
            }
        });
        let id = b.submit(offer("q")).id;
        let w = b.next_work().await.expect("work");
        b.finish(&w.task_id, TaskOutcome::Completed("the answer".into()));
        assert_eq!(*lock(&seen), vec![(None, Some("the answer".to_string()))]);
        assert_eq!(b.get(&id).map(|t| t.state), Some(TaskState::Completed));
        // Other ends carry no answer.
        let c = b.submit(offer("c")).id;
        assert!(matches!(b.cancel(&c, "r"), CancelResult::Canceled(_)));
        assert_eq!(lock(&seen).last(), Some(&(None, None)));
    }

    /// A board whose one task runs, with the observer's events.
    async fn running(owner: &str) -> (Arc<Board>, Work, Arc<Mutex<Vec<BoardEvent>>>) {
        let b = Board::new(Acceptance::Queue, 1);
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&events);
        b.set_observer(move |e| lock(&sink).push(e.clone()));
        b.submit(NewTask {
            owner: Some(owner.into()),
            ..offer("the task")
        });
        let w = b.next_work().await.expect("work");
        (b, w, events)
    }

    fn settled(events: &Mutex<Vec<BoardEvent>>) -> Vec<(InputOutcome, Option<usize>)> {
        lock(events)
            .iter()
            .filter_map(|e| match e {
                BoardEvent::InputSettled {
                    outcome, answer_bytes, ..
                } => Some((*outcome, *answer_bytes)),
                _ => None,
            })
            .collect()
    }

    const LONG: std::time::Duration = std::time::Duration::from_secs(30);

    #[actix_rt::test]
    async fn a_question_is_shown_then_answered_once_and_the_task_works_again() {
        let (b, w, events) = running("mdt:alice").await;
        let id = w.task_id.clone();
        let asked_by = ["coder".to_string(), "lead".to_string()];
        let ask = b.ask(&id, "which colour?", &asked_by, LONG);
        let answer = async {
            let t = b.wait_settled(&id).await.expect("task");
            assert_eq!(
                (t.state, t.status_text.as_deref(), t.asked_by.as_slice()),
                (TaskState::InputRequired, Some("which colour?"), asked_by.as_slice())
            );
            let q = t.history.last().expect("the question is in the history");
            assert_eq!(
                (q.role, &q.text, t.status_message_id.as_deref()),
                (
                    Role::Agent,
                    &HistoryText::Own(Arc::from("which colour?")),
                    Some(q.message_id.as_str())
                )
            );
            b.answer(&id, "blue", "m2", |o| o == Some("mdt:alice"))
        };
        let (asked, answered) = tokio::join!(ask, answer);
        assert!(
            matches!(asked, Asked::Answered { ref text, .. } if text == "blue"),
            "{asked:?}"
        );
        let t = answered.expect("the answer is taken");
        assert_eq!(
            (t.state, t.status_text, t.status_message_id, t.asked_by.len()),
            (TaskState::Working, None, None, 0)
        );
        let a = t.history.last().expect("the answer is in the history");
        assert_eq!(
            (a.role, a.message_id.as_str(), &a.text),
            (Role::User, "m2", &HistoryText::Own(Arc::from("blue")))
        );
        let requested = lock(&events)
            .iter()
            .filter(|e| matches!(e, BoardEvent::InputRequested { question_bytes: 13, .. }))
            .count();
        assert_eq!(requested, 1);
        assert_eq!(settled(&events), [(InputOutcome::Answered, Some(4))]);
        // The question is gone with its answer: a second one finds nothing to answer.
        assert!(matches!(
            b.answer(&id, "red", "m3", |_| true),
            Err(AnswerRefusal::NotAsking(_))
        ));
        b.finish(&id, TaskOutcome::Completed("blue it is".into()));
    }

    #[actix_rt::test]
    async fn answers_that_cannot_land_change_nothing() {
        type Visible = fn(Option<&str>) -> bool;
        let (b, w, _) = running("mdt:alice").await;
        let id = w.task_id.clone();
        let done = b.submit_local("done").id;
        b.finish(&done, TaskOutcome::Completed("x".into()));
        let alice: Visible = |o| o == Some("mdt:alice");
        let bob: Visible = |o| o == Some("mdt:bob");
        let any: Visible = |_| true;
        // (task, who answers, the refusal): nothing is asked yet.
        let table: &[(&str, Visible, &str)] = &[
            ("tsk_unknown", any, "not found"),
            (id.as_str(), bob, "not found"),
            (id.as_str(), alice, "not asking"),
            (done.as_str(), any, "ended"),
        ];
        for (task, visible, want) in table {
            let before = b.get(task);
            let got = match b.answer(task, "blue", "m2", visible) {
                Err(AnswerRefusal::NotFound) => "not found",
                Err(AnswerRefusal::Ended(_)) => "ended",
                Err(AnswerRefusal::NotAsking(_)) => "not asking",
                Ok(_) => "taken",
            };
            assert_eq!((got, b.get(task)), (*want, before), "{task}");
        }
        // While it asks, another caller still cannot see it, and its question stays open.
        let ask = b.ask(&id, "which colour?", &[], LONG);
        let check = async {
            b.wait_settled(&id).await;
            assert!(matches!(b.answer(&id, "red", "m2", bob), Err(AnswerRefusal::NotFound)));
            assert_eq!(b.get(&id).map(|t| t.state), Some(TaskState::InputRequired));
            b.answer(&id, "blue", "m3", alice).is_ok()
        };
        let (asked, took) = tokio::join!(ask, check);
        assert!(took && matches!(asked, Asked::Answered { ref text, .. } if text == "blue"));
        b.finish(&id, TaskOutcome::Completed("x".into()));
    }

    #[actix_rt::test]
    async fn of_two_racing_answers_exactly_one_wins() {
        for _ in 0..20 {
            let (b, w, events) = running("mdt:alice").await;
            let id = w.task_id.clone();
            let ask = b.ask(&id, "which colour?", &[], LONG);
            let race = async {
                b.wait_settled(&id).await;
                let racers: Vec<_> = ["red", "blue"]
                    .into_iter()
                    .map(|text| {
                        let (b, id) = (Arc::clone(&b), id.clone());
                        std::thread::spawn(move || b.answer(&id, text, "m2", |_| true).is_ok())
                    })
                    .collect();
                racers
                    .into_iter()
                    .map(|r| r.join().unwrap_or(false))
                    .collect::<Vec<bool>>()
            };
            let (asked, won) = tokio::join!(ask, race);
            assert_eq!(won.iter().filter(|w| **w).count(), 1, "{won:?}");
            let winner = if won[0] { "red" } else { "blue" };
            assert!(
                matches!(asked, Asked::Answered { ref text, .. } if text == winner),
                "{asked:?}"
            );
            assert_eq!(settled(&events).len(), 1);
            b.finish(&id, TaskOutcome::Canceled);
        }
    }

    #[actix_rt::test]
    async fn a_question_ends_at_its_bound_with_the_task_or_before_it_was_asked() {
        let short = std::time::Duration::from_millis(20);
        // The bound passes: withdrawn, and a late answer finds no question.
        let (b, w, events) = running("operator").await;
        let id = w.task_id.clone();
        assert_eq!(b.ask(&id, "which colour?", &[], short).await, Asked::TimedOut);
        assert!(matches!(
            b.answer(&id, "late", "m2", |_| true),
            Err(AnswerRefusal::NotAsking(_))
        ));
        assert_eq!(settled(&events), [(InputOutcome::TimedOut, None)]);
        let t = b.finish(&id, TaskOutcome::Failed("no answer".into())).expect("task");
        assert_eq!((t.state, t.asked_by.len()), (TaskState::Failed, 0));
        // The task is cancelled while it waits: the asker hears at once, not at the bound.
        let (b, w, events) = running("operator").await;
        let id = w.task_id.clone();
        let (asked, ()) = tokio::join!(b.ask(&id, "which colour?", &[], LONG), async {
            b.wait_settled(&id).await;
            b.cancel(&id, "canceled by the caller");
        });
        assert_eq!(asked, Asked::Ended);
        assert_eq!(settled(&events), [(InputOutcome::Abandoned, None)]);
        assert_eq!(
            b.get(&id).map(|t| t.asked_by.len()),
            Some(0),
            "an ended task asks nobody"
        );
        assert!(matches!(
            b.answer(&id, "late", "m2", |_| true),
            Err(AnswerRefusal::Ended(_))
        ));
        // Asked while the task is being cancelled: nothing opens, the task stays canceled.
        let (b, w, events) = running("operator").await;
        let id = w.task_id.clone();
        b.cancel(&id, "canceled by the caller");
        assert_eq!(b.ask(&id, "which colour?", &[], LONG).await, Asked::Ended);
        let t = b.get(&id).expect("task");
        assert_eq!(
            (t.state, t.status_text, t.asked_by.len()),
            (TaskState::Canceled, None, 0)
        );
        assert!(settled(&events).is_empty());
        // The session closes under an open question.
        let (b, w, _) = running("operator").await;
        let id = w.task_id.clone();
        let (asked, ()) = tokio::join!(b.ask(&id, "which colour?", &[], LONG), async {
            b.wait_settled(&id).await;
            b.close();
        });
        assert_eq!(asked, Asked::Ended);
        drop(w);
    }
}
