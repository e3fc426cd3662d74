//! Pins: an ended task stays on the board while a reply or stream still owes its end to a caller,
//! and a session that ends after its task waits until that end was shown.

use super::*;

/// Keeps a task on the board after its end while a reply or stream still owes that end to a
/// caller; dropping it lets the board forget the task again.
pub struct Pinned {
    pub(super) board: Arc<Board>,
    pub(super) task_id: String,
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

impl Board {
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
    pub(super) fn an_end_unshown(&self) -> bool {
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

    pub(super) fn unpin(&self, task_id: &str) {
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
        let forgotten = st.evict(self.retention);
        st.keep(st.seq, &forgotten);
    }

    /// Tasks pinned now, and the bytes charged for them.
    pub fn pinned(&self) -> (usize, usize) {
        self.lock().books.pinned()
    }
}
