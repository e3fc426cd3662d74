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

mod asking;
mod cancel;
mod history;
mod intake;
mod pins;
mod read;
mod restore;
mod run;
mod streamed;
#[cfg(test)]
mod tests;

pub use cancel::Cancel;
use history::{end, note_history, push_history};
pub use pins::Pinned;
use read::context_turns;
pub use restore::{Restored, restart_failure};
pub use run::Work;
use streamed::Streamed;

/// Status text of a task whose executor let go of it without an outcome [ours].
const LOST: &str = "the task ended without an outcome";

type Observer = Box<dyn Fn(&BoardEvent) + Send + Sync>;

struct Entry {
    snap: TaskSnapshot,
    /// The offer, until the executor takes it; never kept for a refused task. The history's
    /// first message shares it.
    text: Arc<str>,
    /// The caller's `traceparent`, until the executor takes it.
    traceparent: Option<String>,
    /// The grant its call came with, until the executor takes it.
    grant: Option<Arc<crate::grant::Grant>>,
    /// Its grant's deadline (Unix ms), kept for the task's life: a cancel after it names it.
    deadline_ms: Option<u64>,
    /// A client's limits sent with the task, until the executor takes them.
    limits: Option<crate::wire::limits::Limits>,
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
    /// The change number of the snapshot the task store last kept (0: none yet).
    stored: u64,
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
    /// A peer's task store (`tasks::store`): every change of a task is kept there before the
    /// mutation that made it returns.
    store: Option<super::store::TaskStore>,
    /// Tasks whose last change the store failed to keep (a full disk): written again with the
    /// next change of any task, so the store catches up once it can.
    unkept: std::collections::BTreeSet<String>,
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
    /// Files the tasks `events` ended for forgetting, then forgets what `keep` does not cover;
    /// returns the ids forgotten.
    fn settle(&mut self, events: &[BoardEvent], keep: Retention) -> Vec<String> {
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
        self.evict(keep)
    }

    /// Forgets the ended tasks the books give up to `keep`. A pinned task, or one whose executor
    /// still holds the running slot, is passed over. Returns the ids forgotten.
    fn evict(&mut self, keep: Retention) -> Vec<String> {
        let (tasks, running) = (&self.tasks, &self.running);
        let held = |id: &str| running.as_deref() == Some(id) || tasks.get(id).is_some_and(|e| e.pins > 0);
        let forgotten = self.books.evict(keep, held);
        for id in &forgotten {
            if let Some(e) = self.tasks.remove(id) {
                self.order.remove(&e.snap.changed);
            }
        }
        forgotten
    }

    /// Keeps in the store every task whose status changed since change number `since` (and
    /// those an earlier write failed to keep), and forgets there what the board forgot, in one
    /// commit.
    fn keep(&mut self, since: u64, forgotten: &[String]) {
        let Some(store) = self.store.as_mut() else {
            return;
        };
        let mut changed = std::mem::take(&mut self.unkept);
        changed.retain(|id| self.tasks.contains_key(id));
        for (_, id) in self.order.range(since + 1..) {
            if let Some(e) = self.tasks.get(id)
                && e.stored != e.snap.changed
            {
                changed.insert(id.clone());
            }
        }
        if changed.is_empty() && forgotten.is_empty() {
            return;
        }
        let tasks = &self.tasks;
        let rows = changed
            .iter()
            .filter_map(|id| tasks.get(id))
            .map(|e| (&e.snap, e.created));
        match store.update(rows, forgotten) {
            Ok(()) => {
                for id in &changed {
                    if let Some(e) = self.tasks.get_mut(id) {
                        e.stored = e.snap.changed;
                    }
                }
            }
            Err(_) => self.unkept = changed,
        }
    }
}

/// Moves a task to change number `seq` in the ListTasks order.
fn reorder(order: &mut BTreeMap<u64, String>, snap: &mut TaskSnapshot, seq: u64) {
    let id = order.remove(&snap.changed).unwrap_or_else(|| snap.id.clone());
    snap.changed = seq;
    order.insert(seq, id);
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
                store: None,
                unkept: Default::default(),
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
            let since = st.seq;
            let r = f(&mut st, &mut events, (self.clock)().trunc_subsecs(3));
            let forgotten = st.settle(&events, self.retention);
            st.keep(since, &forgotten);
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
}
